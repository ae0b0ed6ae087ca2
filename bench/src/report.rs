//! Output: the table on stdout, `--json`, `--svg`.

use std::collections::BTreeMap;
use std::path::Path;

use usdt_charts::{Bar, BarChart, Color, Scale};

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
    pub auto: Option<crate::attach::Auto>,
    /// The fork guard's cost per fork, or why it was not measured.
    pub forks: Result<crate::forks::ForkCost, String>,
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
        self.chart().write(path).map_err(|e| e.to_string())
    }

    /// The rows as bars: grey idle, blue our probes attached, orange the
    /// others attached; each with its standard deviation and its rate
    /// (and ratio) beside it.
    fn chart(&self) -> BarChart {
        let bars = self
            .rows
            .iter()
            .map(|r| {
                let color = match (r.attached, r.name) {
                    (false, _) => Color::GREY,
                    (true, "usdt-nop" | "usdt-nop5" | "usdt-lazy") => Color::BLUE,
                    (true, _) => Color::ORANGE,
                };
                let mut note = format!("{:.3} M/s", r.mops);
                if let Some(x) = self.ratio(r) {
                    note += &format!("  ({x:.2}x c-sdt-nop)");
                }
                if r.optimized {
                    note += "  optimized";
                }
                Bar {
                    label: r.name.to_string(),
                    value: r.mops,
                    spread: Some(r.stddev),
                    color,
                    note,
                }
            })
            .collect();
        BarChart {
            caption: format!("usdt bench: {}", self.machine.line()),
            x_desc: "million iterations per second (log scale); error bars: one standard deviation"
                .into(),
            scale: Scale::Log,
            label_width: 130,
            bars,
            legend: vec![
                ("no uprobe attached".into(), Color::GREY),
                ("our probes, attached".into(), Color::BLUE),
                (
                    "C sys/sdt.h and peer crates, attached".into(),
                    Color::ORANGE,
                ),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, mops: f64, attached: bool, optimized: bool) -> Row {
        Row {
            name,
            mops,
            stddev: mops / 20.0,
            attach: if attached {
                "nop".into()
            } else {
                "none".into()
            },
            optimized,
            attached,
        }
    }

    /// The `--svg` picture: valid XML, one labelled bar per row with its
    /// rate (and ratio to c-sdt-nop), in its colour, and the legend.
    #[test]
    fn the_rows_are_drawn_as_labelled_bars() {
        let report = Report {
            machine: Machine::probe(),
            plan: Plan::QUICK,
            rows: vec![
                row("bare", 900.0, false, false),
                row(REFERENCE, 2.0, true, false),
                row("usdt-nop5", 4.0, true, true),
            ],
            skipped: vec![],
            idle: Err("not counted".into()),
            others: 0.0,
            many: Err("not run".into()),
            auto: None,
            forks: Err("not measured".into()),
        };
        let svg = report.chart().svg().unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect();
        for want in [
            "bare",
            REFERENCE,
            "usdt-nop5",
            "900.000 M/s",
            "2.000 M/s  (1.00x c-sdt-nop)",
            "4.000 M/s  (2.00x c-sdt-nop)  optimized",
            "no uprobe attached",
            "our probes, attached",
        ] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
        let fills = |color: &str| {
            doc.descendants()
                .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(color))
                .count()
        };
        // A bar each, and the legend's swatch.
        assert_eq!(fills("#969696"), 2);
        assert_eq!(fills("#1F77B4"), 2);
        assert_eq!(fills("#FF7F0E"), 2);
    }
}
