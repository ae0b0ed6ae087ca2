//! Output: the table on stdout, `--json`, `--svg`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::machine::Machine;
use crate::timing::Plan;

/// The row every attached row is compared with.
pub const REFERENCE: &str = "c-sdt-nop";

/// One measured row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Row name (see the table in bench/README.md).
    pub name: &'static str,
    /// Mean rate, million iterations per second.
    pub mops: f64,
    /// Standard deviation of the runs' rates.
    pub stddev: f64,
    /// Where a uprobe was attached (`none` for idle rows).
    pub attach: String,
    /// Whether the kernel optimized the attached site (call to
    /// `[uprobes-trampoline]`).
    pub optimized: bool,
    /// Whether a tracer was attached.
    pub attached: bool,
}

/// Instructions per iteration (`bare`) and per probe (the others, as
/// differences from `bare`), or why they were not counted.
pub type Idle = Result<BTreeMap<&'static str, f64>, String>;

/// Everything the bench found.
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Runs and their length.
    pub plan: Plan,
    /// Measured rows, in order.
    pub rows: Vec<Row>,
    /// Rows not run, and why.
    pub skipped: Vec<(&'static str, String)>,
    /// Idle cost.
    pub idle: Idle,
    /// CPUs' worth of other processes' work while the bench ran.
    pub others: f64,
    /// The many-sites section (rows, and the runs that failed), or why it
    /// did not run.
    pub many: Many,
    /// Where `Auto` attaches this build's sites and why: the layout, the
    /// fork and speed self-tests, the fork guard (`None` where nothing
    /// attached).
    pub auto: Option<Auto>,
    /// The fork guard's cost per fork, or why it was not measured.
    pub forks: Result<crate::forks::ForkCost, String>,
}

/// What `Auto` decided for the bench's own sites, and from what.
#[derive(Clone, Debug)]
pub struct Auto {
    /// The build's site layout (`nop;nop5`, `nop;nop10`, `nop;nop5;nop10`).
    pub layout: String,
    /// Bytes past Location where `Auto` attaches (0: the nop).
    pub delta: u64,
    /// The fork self-test's verdict, in words.
    pub fork: String,
    /// Whether the bench's executable carries the fork guard's marker.
    pub guarded: bool,
    /// The speed self-test: trap and optimized M/s, or why there are none.
    pub speed: Result<(f64, f64), String>,
}

/// The many-sites section's outcome.
pub type Many = Result<crate::many::Outcome, String>;

impl Report {
    fn reference(&self) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.name == REFERENCE)
            .map(|r| r.mops)
    }

    /// An attached row's rate over `syscall-count`'s: upstream's yardstick
    /// (its optimized nop5 row runs at 0.49 of its syscall row).
    fn syscall_ratio(&self, row: &Row) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.name == "syscall-count")
            .filter(|_| row.attached)
            .map(|s| row.mops / s.mops)
    }

    fn ratio(&self, row: &Row) -> Option<f64> {
        self.reference()
            .filter(|_| row.attached)
            .map(|c| row.mops / c)
    }

    /// The table, upstream's `name : mean ± sd M/s` plus our columns.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s += &format!("# usdt bench: {}\n", self.machine.line());
        s += &format!(
            "# load average at start: {}; other work during the bench: {:.2} CPUs",
            self.machine.load, self.others
        );
        if self.others >= 0.1 {
            s += " (a busy machine: expect noisy numbers)";
        }
        s += "\n";
        s += &format!(
            "# {} run(s) of >= {:.1} s per row, one thread, M/s = million loop iterations (probe hits) per second\n",
            self.plan.runs,
            self.plan.run_time.as_secs_f64()
        );
        if let Some(auto) = &self.auto {
            let speed = match &auto.speed {
                Ok((trap, optimized)) => {
                    format!("trap {trap:.3} M/s, optimized {optimized:.3} M/s")
                }
                Err(why) => format!("not measured: {why}"),
            };
            s += &format!(
                "# auto on this build's {} sites: {} (fork self-test: {}; fork guard: {}; speed self-test: {speed})\n",
                auto.layout,
                match auto.delta {
                    0 => "the nop".to_string(),
                    d => format!("Location + {d}"),
                },
                auto.fork,
                if auto.guarded { "linked" } else { "none" }
            );
        }
        s += &format!(
            "{:<15}   {:>22}  {:<16} {:<9} {:<12} {}\n",
            "row", "mean ± sd", "attach", "optimized", "vs c-sdt-nop", "vs syscall"
        );
        for r in &self.rows {
            let rate = format!("{:.3} ± {:.3}M/s", r.mops, r.stddev);
            let opt = match (r.attached, r.optimized) {
                (false, _) => "-",
                (true, true) => "yes",
                (true, false) => "no",
            };
            let ratio = self.ratio(r).map_or("-".into(), |x| format!("{x:.2}x"));
            let syscall = self
                .syscall_ratio(r)
                .map_or("-".into(), |x| format!("{x:.2}x"));
            s += &format!(
                "{:<15} : {rate:>22}  {:<16} {opt:<9} {ratio:<12} {syscall}\n",
                r.name, r.attach
            );
        }
        // One sentence per reason, naming the rows it skipped.
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for (name, why) in &self.skipped {
            match reasons.iter_mut().find(|(w, _)| w == why) {
                Some((_, names)) => names.push(name),
                None => reasons.push((why, vec![name])),
            }
        }
        for (why, names) in reasons {
            s += &format!("# skipped {}: {why}.\n", names.join(", "));
        }
        s += &self.idle_table();
        s += &crate::forks::table(&self.forks);
        match &self.many {
            Ok((rows, failed)) => s += &crate::many::table(rows, failed),
            Err(why) => s += &format!("# many sites not measured: {why}\n"),
        }
        s
    }

    fn idle_table(&self) -> String {
        let idle = match &self.idle {
            Err(why) => return format!("# idle instructions not counted: {why}\n"),
            Ok(idle) => idle,
        };
        let mut s =
            String::from("# idle cost, instructions per iteration (valgrind --tool=callgrind)\n");
        let targets = [
            ("bare", "the loop alone"),
            (
                "usdt",
                "eager, 2 register args: target: the site's nops only",
            ),
            ("usdt-lazy", "semaphore-gated: target <= 4"),
            ("usdt-str", "&str arg: copies nothing while untraced"),
            ("c-sdt", "C <sys/sdt.h>, 2 args"),
            ("oxide-usdt", "oxidecomputer usdt 0.6, 2 args"),
            ("probe-crate", "probe 0.5, 2 args"),
            (
                "tracing-registry",
                "tracing info!(i, \"tick\"), a bare Registry",
            ),
            (
                "tracing-usdt-idle",
                "the same, tracing_usdt::layer() alone, untraced",
            ),
            (
                "tracing-floor",
                "the same, a Subscriber whose enabled() is false: tracing's own",
            ),
            ("tracing-fmt", "the same, the fmt layer writing to a sink"),
        ];
        for (key, what) in targets {
            let value = match idle.get(key) {
                Some(v) if key == "bare" => format!("{v:.2}"),
                Some(v) => format!("{v:+.2}"),
                None => "-".into(),
            };
            s += &format!("{key:<17} : {value:>8}  {what}\n");
        }
        s
    }

    /// The `--json` document.
    pub fn json(&self) -> serde_json::Value {
        use serde_json::json;
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "mops": r.mops,
                    "stddev": r.stddev,
                    "attach": r.attach,
                    "optimized": r.optimized,
                    "ratio_to_c_sdt_nop": self.ratio(r),
                    "ratio_to_syscall_count": self.syscall_ratio(r),
                })
            })
            .collect();
        let mut doc = json!({
            "machine": {
                "kernel": self.machine.kernel,
                "cpu": self.machine.cpu,
                "cpus": self.machine.cpus,
                "virtualization": self.machine.virtualization,
                "load_average": self.machine.load,
                "other_cpus_during_bench": self.others,
            },
            "runs": self.plan.runs,
            "run_seconds": self.plan.run_time.as_secs_f64(),
            "rows": rows,
            "skipped": self.skipped.iter().map(|(n, why)| json!({"name": n, "reason": why})).collect::<Vec<_>>(),
        });
        match &self.idle {
            Ok(idle) => doc["idle_instructions"] = json!(idle),
            Err(why) => {
                doc["idle_instructions"] = json!({});
                doc["idle_instructions_skipped"] = json!(why);
            }
        }
        if let Some(auto) = &self.auto {
            doc["auto"] = json!({
                "layout": auto.layout,
                "delta": auto.delta,
                "fork_test": auto.fork,
                "guarded": auto.guarded,
                "speed_test": auto.speed.as_ref().ok().map(|(t, o)| json!({"trap": t, "optimized": o})),
            });
        }
        doc["fork_guard"] = crate::forks::json(&self.forks);
        match &self.many {
            Ok((rows, _)) => doc["many_sites"] = crate::many::json(rows),
            Err(why) => doc["many_sites_skipped"] = json!(why),
        }
        doc
    }

    /// Writes the `--json` document.
    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&self.json()).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Draws the rows as horizontal bars on a log scale (`--svg`).
    pub fn write_svg(&self, path: &Path) -> Result<(), String> {
        self.draw_svg(path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn draw_svg(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        use plotters::prelude::*;
        const GREY: RGBColor = RGBColor(150, 150, 150);
        const BLUE_BAR: RGBColor = RGBColor(31, 119, 180);
        const ORANGE_BAR: RGBColor = RGBColor(255, 127, 14);

        let n = self.rows.len();
        let root = SVGBackend::new(path, (960, 120 + 34 * n as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let max = self
            .rows
            .iter()
            .map(|r| r.mops + r.stddev)
            .fold(1.0, f64::max);
        let min = self.rows.iter().map(|r| r.mops).fold(max, f64::min);
        let lo = 10f64.powf((min / 2.0).log10().floor());
        let hi = 10f64.powf((max * 1.5).log10().ceil());
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("usdt bench: {}", self.machine.line()),
                ("sans-serif", 15),
            )
            .margin(12)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(130)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..n as f64)?;
        let label = |y: &f64| {
            let i = n as f64 - 0.5 - y;
            if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                self.rows
                    .get(i.round() as usize)
                    .map_or(String::new(), |r| r.name.to_string())
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(2 * n + 1)
            .y_label_formatter(&label)
            .x_label_formatter(&|x| format!("{x}"))
            .x_desc("million iterations per second (log scale); error bars: one standard deviation")
            .draw()?;
        let legend = [
            ("no uprobe attached", GREY),
            ("our probes, attached", BLUE_BAR),
            ("C sys/sdt.h and peer crates, attached", ORANGE_BAR),
        ];
        for (label, color) in legend {
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        for (i, r) in self.rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let color = match (r.attached, r.name) {
                (false, _) => GREY,
                (true, "usdt-nop" | "usdt-nop5" | "usdt-lazy") => BLUE_BAR,
                (true, _) => ORANGE_BAR,
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(lo, y + 0.15), (r.mops.max(lo), y + 0.85)],
                color.filled(),
            )))?;
            let (a, b) = ((r.mops - r.stddev).max(lo), r.mops + r.stddev);
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(a, y + 0.5), (b, y + 0.5)],
                BLACK,
            )))?;
            let mut text = format!("{:.3} M/s", r.mops);
            if let Some(x) = self.ratio(r) {
                text += &format!("  ({x:.2}x c-sdt-nop)");
            }
            if r.optimized {
                text += "  optimized";
            }
            chart.draw_series(std::iter::once(Text::new(
                text,
                (b * 1.1, y + 0.68),
                ("sans-serif", 13),
            )))?;
        }
        root.present()?;
        Ok(())
    }
}
