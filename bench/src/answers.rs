//! The answers section: what a hit costs when an engine counts, samples
//! or aggregates it, beside the kernel's floor (an empty BPF program on the
//! same sites through the same kind of link), plain counting and
//! bpftrace's hand-written latency script, in one run; and the CPU `usdt
//! serve` uses between scrapes.
//!
//! One loop fires `answers:start(id, kind)` then `answers:done(id, kind)`
//! (two hits per iteration, `kind` = id % 8). Each row attaches one way to
//! this process, times batches of 1,000 iterations (about a millisecond:
//! many run without the machine's other work interrupting them), checks
//! that every hit was seen, and detaches; the rows take turns, once per
//! round, and a row's time per iteration is its least over every batch of
//! every round. A row's cost per hit is that time minus the idle loop's,
//! halved. Rows:
//!
//! - `empty program`: `r0 = 0; exit` on both sites, at the nop and at the
//!   long nop, by one perf event per site (`uprobe`) and by one
//!   uprobe_multi link: the floor;
//! - `count`: usdt-trace's per-probe counter (one BPF uprobe_multi link);
//!   `count (perf)`: one perf counter per site;
//! - `count --by kind`: a hash map of `kind` values to counts;
//! - `latency --key id`: start times by id in a hash map, a log2 histogram;
//! - `latency (tid, nop)`: keyed by thread and attached at the nop, as
//!   bpftrace places its uprobes;
//! - `hist kind`: a log2 histogram of `kind`;
//! - `trace` and `trace --stack`, with the engine `usdt trace` picks and
//!   with `--engine perf`: a record of every hit read by the tracer
//!   between batches, with the stack unwound for the second
//!   (`sampled.rs`);
//! - `bpftrace @start/hist()`: `@start[tid] = nsecs` and
//!   `@h = hist(nsecs - @start[tid]); delete(@start[tid])`.
//!
//! Each row's site (where its uprobes are, read from the process's code)
//! and link name its floor: `x floor` is its cost over that floor's. `x
//! count` is over `count`'s. `usdt serve` (the release `usdt` beside this
//! bench) serves every probe of this bench's executable with a latency;
//! its CPU time is read from `/proc/PID/task/*/schedstat` over a window
//! without scrapes, and for one scrape.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{self, Lines};
use usdt_provision::{Need, BPFTRACE};
use usdt_trace::bpf::ProbeCounter;
use usdt_trace::floor::{EmptyProgram, LinkKind};
use usdt_trace::{
    read_file, Aggregation, AttachPoint, Filter, LatencyKey, PerfCounter, Site, Target,
};

#[usdt::provider]
mod answers {
    /// A request of this id and kind starts.
    fn start(id: u64, kind: u64) {}
    /// It is done.
    fn done(id: u64, kind: u64) {}
}

/// `n` requests: two hits each.
#[inline(never)]
fn requests(n: u64) {
    for id in 0..n {
        let kind = id % 8;
        answers::start!(id, kind);
        answers::done!(id, kind);
    }
}

/// One row: its name, where it attached and how, and its cost per hit.
#[derive(Clone, Debug)]
pub struct AnswersRow {
    pub name: &'static str,
    /// The instruction its uprobes are on: `nop`, `nop5` or `nop10`.
    pub site: &'static str,
    /// How its uprobes are linked: `uprobe` (a perf event per site) or
    /// `uprobe_multi`.
    pub link: &'static str,
    pub ns_per_hit: f64,
}

/// The section's results.
#[derive(Debug)]
pub struct Answers {
    /// The idle loop's time per iteration.
    pub idle_ns: f64,
    /// The same of the loop of `paths.rs`.
    pub paths_idle_ns: f64,
    pub rows: Vec<AnswersRow>,
    /// Rows that could not run, and why.
    pub skipped: Vec<(&'static str, String)>,
    /// `usdt serve`: CPU between scrapes (% of one CPU) and per scrape
    /// (ms), or why it was not measured.
    pub serve: Result<(f64, f64), String>,
    /// The tracer's time per hit of the `trace` rows (decoding, and for
    /// `trace --stack` unwinding and symbolizing the stack).
    pub tracer: Vec<(&'static str, Duration)>,
}

impl Answers {
    /// The empty program's row of `link` at `site`: the floor of the rows
    /// attached there that way.
    pub fn floor(&self, site: &str, link: &str) -> Option<&AnswersRow> {
        self.rows
            .iter()
            .find(|r| r.name == FLOOR && r.site == site && r.link == link)
    }
}

/// Iterations per batch: about a millisecond attached, short enough that
/// many batches run without the machine's other work interrupting them.
const BATCH: u64 = 1000;

/// The least time per iteration over `batches` batches of `n`
/// iterations, calling `between` after each, untimed.
fn least_ns_per_iteration(batches: u64, n: u64, between: &mut dyn FnMut()) -> f64 {
    least_ns_per_iteration_of(requests, batches, n, between)
}

/// [`least_ns_per_iteration`] of the loop `lap`.
fn least_ns_per_iteration_of(lap: fn(u64), batches: u64, n: u64, between: &mut dyn FnMut()) -> f64 {
    (0..batches)
        .map(|_| {
            let t = Instant::now();
            lap(std::hint::black_box(n));
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            between();
            ns
        })
        .fold(f64::MAX, f64::min)
}

/// This executable and its two sites of `provider` (`answers`, `paths`).
fn sites(provider: &str) -> Result<(PathBuf, Vec<Site>), String> {
    let exe = std::fs::canonicalize("/proc/self/exe").map_err(|e| e.to_string())?;
    let sites: Vec<Site> = read_file(&exe)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| s.provider == provider)
        .collect();
    if sites.len() < 2 {
        return Err(format!(
            "{} has no {provider}:start/done sites",
            exe.display()
        ));
    }
    Ok((exe, sites))
}

/// How a row attaches.
#[derive(Clone, Copy, Debug)]
enum How {
    /// The empty program, at the nop or at the long nop.
    Floor(LinkKind, AttachPoint),
    Count,
    CountPerf,
    CountBy,
    Latency(LatencyKey, AttachPoint),
    Hist,
    /// A row of `sampled.rs`: a sampler of its own, drained between
    /// batches.
    Sampled(&'static str),
    Bpftrace,
    /// `count --if` with [`FILTER`]: 1% of the hits pass.
    CountIf,
    /// bpftrace's `count()` on both probes, with [`FILTER`]'s predicate or
    /// without.
    BpftraceCount {
        predicate: bool,
    },
    /// On the loop of `paths.rs`: a latency keyed by thread, with a
    /// histogram per path or without.
    PathLatency {
        by: bool,
    },
    /// On the loop of `paths.rs`: bpftrace's `@lat[str(arg1)]`.
    BpftraceByPath,
}

/// `count --if`'s filter: 10 ids of the 1,000 of a batch pass, 99% of the
/// hits are dropped in the program.
const FILTER: &str = "id < 10";
/// The same as bpftrace's predicate.
const PREDICATE: &str = "/arg0 < 10/";
/// The hits of a batch that pass them, per probe.
const PASSED: u64 = 10;

/// The ratios the table states, in one run: a row, the row it is over,
/// and what that says.
const RATIOS: [(&str, &str, &str); 5] = [
    (
        "count --if 'id < 10'",
        "count",
        " (99% of the hits dropped by the filter)",
    ),
    (
        "bpftrace /arg0 < 10/ count()",
        "bpftrace count()",
        " (bpftrace's predicate)",
    ),
    ("bpftrace /arg0 < 10/ count()", "count --if 'id < 10'", ""),
    (
        "latency --by path",
        "latency (tid, paths)",
        " (a histogram per path)",
    ),
    ("bpftrace @lat[str(arg1)]", "latency --by path", ""),
];

/// The empty program's rows' name.
const FLOOR: &str = "empty program";
/// The `trace` rows.
const SAMPLED: [&str; 4] = crate::sampled::ROWS;

const ROWS: [(&str, How); 21] = [
    (FLOOR, How::Floor(LinkKind::PerfEvent, AttachPoint::Nop)),
    (FLOOR, How::Floor(LinkKind::UprobeMulti, AttachPoint::Nop)),
    (FLOOR, How::Floor(LinkKind::PerfEvent, AttachPoint::Next)),
    (FLOOR, How::Floor(LinkKind::UprobeMulti, AttachPoint::Next)),
    ("count", How::Count),
    ("count (perf)", How::CountPerf),
    ("count --by kind", How::CountBy),
    (
        "latency --key id",
        How::Latency(LatencyKey::Arg { start: 0, end: 0 }, AttachPoint::Auto),
    ),
    (
        "latency (tid, nop)",
        How::Latency(LatencyKey::Thread, AttachPoint::Nop),
    ),
    ("hist kind", How::Hist),
    ("bpftrace @start/hist()", How::Bpftrace),
    ("count --if 'id < 10'", How::CountIf),
    ("bpftrace count()", How::BpftraceCount { predicate: false }),
    (
        "bpftrace /arg0 < 10/ count()",
        How::BpftraceCount { predicate: true },
    ),
    ("latency (tid, paths)", How::PathLatency { by: false }),
    ("latency --by path", How::PathLatency { by: true }),
    ("bpftrace @lat[str(arg1)]", How::BpftraceByPath),
    (SAMPLED[0], How::Sampled(SAMPLED[0])),
    (SAMPLED[1], How::Sampled(SAMPLED[1])),
    (SAMPLED[2], How::Sampled(SAMPLED[2])),
    (SAMPLED[3], How::Sampled(SAMPLED[3])),
];

/// Attached one way, for the time of a run.
enum Attached {
    Floor(EmptyProgram),
    Count(ProbeCounter),
    CountPerf(PerfCounter),
    /// An aggregation, and how many values it counts per request.
    Agg(Aggregation, u64),
    /// bpftrace, and its output once it exits.
    Bpftrace(Child, Lines),
}

impl How {
    /// How its uprobes are linked.
    fn link(self) -> &'static str {
        match self {
            How::Floor(kind, _) => kind.name(),
            How::CountPerf | How::Bpftrace | How::BpftraceCount { .. } | How::BpftraceByPath => {
                LinkKind::PerfEvent.name()
            }
            // `usdt trace`'s engine: BPF where the kernel has uprobe_multi
            // links.
            How::Sampled(name)
                if name.ends_with("--engine perf")
                    || matches!(
                        usdt_trace::bpf::uprobe_multi_support(),
                        usdt_trace::bpf::UprobeMulti::Absent(_)
                    ) =>
            {
                LinkKind::PerfEvent.name()
            }
            _ => LinkKind::UprobeMulti.name(),
        }
    }

    /// The loop it is timed on, and its provider.
    fn lap(self) -> (fn(u64), &'static str) {
        match self {
            How::PathLatency { .. } | How::BpftraceByPath => (crate::paths::requests, "paths"),
            _ => (requests, "answers"),
        }
    }

    /// The requests of a batch it aggregates, out of `BATCH`.
    fn per_batch(self) -> u64 {
        match self {
            How::CountIf | How::BpftraceCount { predicate: true } => PASSED,
            _ => BATCH,
        }
    }

    fn attach(self, exe: &Path, sites: &[Site]) -> Result<Attached, String> {
        let me = Target::Pid(std::process::id());
        let refs: Vec<&Site> = sites.iter().collect();
        let e = |e: usdt_trace::Error| e.to_string();
        let aggregate = |mut a: Aggregation, per_request: u64| {
            a.attach(exe, &refs, me).map_err(e)?;
            Ok::<_, String>(Attached::Agg(a, per_request))
        };
        Ok(match self {
            How::Floor(kind, point) => {
                Attached::Floor(EmptyProgram::attach(exe, sites, point, kind, me).map_err(e)?)
            }
            How::Count => Attached::Count(
                ProbeCounter::attach(&[(exe, refs.clone())], AttachPoint::Auto, me).map_err(e)?,
            ),
            How::CountPerf => {
                let mut c = PerfCounter::new(AttachPoint::Auto);
                c.attach(exe, sites, me).map_err(e)?;
                Attached::CountPerf(c)
            }
            How::CountBy => aggregate(
                Aggregation::count_by(1, false, false, AttachPoint::Auto).map_err(e)?,
                2,
            )?,
            How::Latency(key, point) => aggregate(
                Aggregation::latency("answers:start", "answers:done", key, point).map_err(e)?,
                1,
            )?,
            How::Hist => aggregate(
                Aggregation::histogram_of(1, AttachPoint::Auto).map_err(e)?,
                2,
            )?,
            How::Sampled(_) => return Err("a sampled row attaches itself".into()),
            How::Bpftrace | How::BpftraceCount { .. } | How::BpftraceByPath => {
                let (child, output) = bpftrace(exe, sites, &self.script(exe))?;
                Attached::Bpftrace(child, output)
            }
            How::CountIf => {
                let filter = Filter::parse(FILTER).map_err(|e| e.to_string())?;
                let files = [(exe, refs.clone())];
                let counter = ProbeCounter::attach_filtered(&files, AttachPoint::Auto, me, &filter);
                Attached::Count(counter.map_err(e)?)
            }
            How::PathLatency { by } => {
                let (start, end, key) = ("paths:start", "paths:done", LatencyKey::Thread);
                let a = match by {
                    true => {
                        Aggregation::latency_by(start, end, key, 1, true, false, AttachPoint::Auto)
                    }
                    false => Aggregation::latency(start, end, key, AttachPoint::Auto),
                };
                aggregate(a.map_err(e)?, 1)?
            }
        })
    }

    /// Its bpftrace script, for the probes of `exe`.
    fn script(self, exe: &Path) -> String {
        let shown = exe.display();
        match self {
            How::BpftraceCount { predicate } => {
                let p = if predicate { PREDICATE } else { "" };
                format!(
                    "usdt:{shown}:answers:start {p} {{ @s = count(); }}\n\
                     usdt:{shown}:answers:done {p} {{ @d = count(); }}"
                )
            }
            How::BpftraceByPath => crate::paths::bpftrace_script(&shown.to_string()),
            _ => format!(
                "usdt:{shown}:answers:start {{ @start[tid] = nsecs; }}\n\
                 usdt:{shown}:answers:done /@start[tid]/ {{ @h = hist(nsecs - @start[tid]); delete(@start[tid]); }}"
            ),
        }
    }
}

/// The values of this process's semaphores of `sites`.
fn semaphores(exe: &Path, sites: &[Site]) -> Result<Vec<u16>, String> {
    let pid = std::process::id();
    let objects = usdt_trace::read_process(pid).map_err(|e| e.to_string())?;
    let bias = objects
        .iter()
        .find(|o| o.path == exe)
        .map(|o| o.bias)
        .ok_or_else(|| format!("{} is not mapped", exe.display()))?;
    sites
        .iter()
        .filter_map(|s| s.semaphore)
        .map(|a| usdt_trace::read_semaphore(pid, a.wrapping_add(bias)).map_err(|e| e.to_string()))
        .collect()
}

/// bpftrace with `script`, attached to this process; returns once its
/// uprobes are in place (bpftrace prints "Attaching" before it attaches;
/// the kernel raises each site's semaphore while it registers the uprobe).
fn bpftrace(exe: &Path, sites: &[Site], script: &str) -> Result<(Child, Lines), String> {
    usdt_provision::ensure(&[Need::package(
        BPFTRACE,
        "the bench compares its scripts with usdt's answers",
    )])
    .map_err(|e| e.to_string())?;
    let mut child = Command::new("bpftrace")
        .args(["-p", &std::process::id().to_string(), "-e", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("bpftrace: {e}"))?;
    // Its output is read meanwhile (the histogram at the end too), so that
    // bpftrace never blocks on a full pipe.
    let out = Lines::of(
        child.stdout.take().ok_or("bpftrace has no stdout")?,
        "bpftrace",
    );
    if let Err(e) = out.until(child::LINE, |l| l.starts_with("Attaching")) {
        child::stop(&mut child, libc::SIGINT, child::detach_time(sites.len()));
        return Err(e);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let raised = semaphores(exe, sites).inspect_err(|_| {
            child::stop(&mut child, libc::SIGINT, child::detach_time(sites.len()))
        })?;
        if !raised.is_empty() && raised.iter().all(|v| *v > 0) {
            break;
        }
        if Instant::now() > deadline {
            child::stop(&mut child, libc::SIGINT, child::detach_time(sites.len()));
            return Err("bpftrace did not attach within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its semaphores are raised as each uprobe is registered: let the last
    // one settle.
    std::thread::sleep(Duration::from_millis(200));
    Ok((child, out))
}

/// Checks that every one of `pairs` requests was seen (for usdt-trace's
/// rows), then detaches (bpftrace: SIGINT, then waits for it to exit).
fn check_and_detach(a: Attached, pairs: u64) -> Result<(), String> {
    let e = |e: usdt_trace::Error| e.to_string();
    let seen = match a {
        // Nothing counts the empty program's hits.
        Attached::Floor(p) => {
            p.detach();
            return Ok(());
        }
        Attached::Count(c) => c
            .probe_counts()
            .map_err(e)?
            .get("answers:done")
            .copied()
            .unwrap_or(0),
        Attached::CountPerf(c) => c
            .probe_counts()
            .map_err(e)?
            .get("answers:done")
            .copied()
            .unwrap_or(0),
        Attached::Agg(a, per_request) => {
            let counts = a.counts().map_err(e)?;
            let n = if counts.is_empty() {
                a.histogram().map_err(e)?.count
            } else {
                counts.iter().map(|(_, n)| n).sum::<u64>()
            };
            n / per_request
        }
        Attached::Bpftrace(mut child, output) => {
            // Its probes: start and done, of one provider.
            child::stop(&mut child, libc::SIGINT, child::detach_time(2));
            let text = output.rest(Duration::from_secs(10));
            // `@d: N` of a count, else the sum of its histograms' rows:
            // `[1K, 2K)   N |@@@|`.
            match text.lines().find_map(|l| l.strip_prefix("@d: ")) {
                Some(n) => n.trim().parse().map_err(|_| format!("bpftrace: @d: {n}"))?,
                None => text
                    .lines()
                    .filter(|l| l.starts_with('['))
                    .filter_map(|l| l.split(')').nth(1).or_else(|| l.split(']').nth(1)))
                    .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
                    .sum(),
            }
        }
    };
    if seen != pairs {
        return Err(format!("{seen} of {pairs} requests were aggregated"));
    }
    Ok(())
}

/// A row's least time per iteration so far, where it attached, and, for a
/// `trace` row, the tracer's time per hit in that round.
type Best = (f64, &'static str, Option<Duration>);

/// One round of the `trace` row `name`: its sampler attached, warmed up,
/// timed in `batches` batches, drained after each.
fn sampled_round(
    name: &'static str,
    exe: &Path,
    sites: &[Site],
    batches: u64,
) -> Result<Best, String> {
    let pid = std::process::id();
    let mut at = Err("not attached".to_string());
    let hits = |n: u64| 2 * n * (1 + batches);
    let time = |n: u64, drain: &mut dyn FnMut()| {
        // Warm: the first hit optimizes a long nop.
        requests(n);
        at = crate::attach::attached_insn(pid, exe, &sites[0]);
        drain();
        least_ns_per_iteration(batches, n, drain)
    };
    let sampled = crate::sampled::measure(name, exe, sites, hits, time)?;
    Ok((sampled.ns_per_iteration, at?, Some(sampled.tracer)))
}

/// Runs the section: `quick` runs fewer batches and a shorter serve
/// window.
pub fn run(quick: bool) -> Result<Answers, String> {
    let (_, path_sites) = sites("paths")?;
    let (exe, sites) = sites("answers")?;
    let pid = std::process::id();
    let (rounds, batches) = if quick { (3, 30) } else { (5, 100) };
    let mut idle_ns = f64::MAX;
    let mut paths_idle_ns = f64::MAX;
    // Per row: its least time, where it attached, the tracer's time, or
    // why it stopped.
    let mut best: Vec<Result<Best, String>> =
        ROWS.iter().map(|_| Ok((f64::MAX, "none", None))).collect();
    for _ in 0..rounds {
        idle_ns = idle_ns.min(least_ns_per_iteration(batches, BATCH, &mut || {}));
        let paths_idle =
            least_ns_per_iteration_of(crate::paths::requests, batches, BATCH, &mut || {});
        paths_idle_ns = paths_idle_ns.min(paths_idle);
        for ((_, how), row) in ROWS.iter().zip(&mut best) {
            let Ok((least, _, _)) = row else {
                continue;
            };
            let (lap, provider) = how.lap();
            let sites = if provider == "paths" {
                &path_sites
            } else {
                &sites
            };
            let result = match how {
                // Batches of 2,000 iterations, whose hits the ring holds
                // with their stack copies: a quarter as many.
                How::Sampled(name) => sampled_round(name, &exe, sites, batches / 4),
                _ => how.attach(&exe, sites).and_then(|a| {
                    // Warm: the first hit optimizes a long nop.
                    lap(BATCH);
                    let at = crate::attach::attached_insn(pid, &exe, &sites[0]);
                    let ns = least_ns_per_iteration_of(lap, batches, BATCH, &mut || {});
                    check_and_detach(a, how.per_batch() * (1 + batches))?;
                    Ok((ns, at?, None))
                }),
            };
            match result {
                Ok(run) if run.0 < *least => *row = Ok(run),
                Ok(_) => {}
                Err(why) => *row = Err(why),
            }
        }
    }
    let mut out = Answers {
        idle_ns,
        paths_idle_ns,
        rows: vec![],
        skipped: vec![],
        serve: Err("not run".into()),
        tracer: vec![],
    };
    for ((name, how), row) in ROWS.iter().zip(best) {
        match row {
            Ok((ns, site, tracer)) => {
                let idle = match how.lap().1 {
                    "paths" => paths_idle_ns,
                    _ => idle_ns,
                };
                out.rows.push(AnswersRow {
                    name,
                    site,
                    link: how.link(),
                    ns_per_hit: (ns - idle).max(0.0) / 2.0,
                });
                if let Some(t) = tracer {
                    out.tracer.push((name, t));
                }
            }
            Err(why) => out.skipped.push((name, why)),
        }
    }
    out.serve = serve_cpu(&exe, if quick { 3 } else { 10 });
    Ok(out)
}

/// The release `usdt` beside this bench, built if missing.
pub(crate) fn usdt_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no directory")?;
    let usdt = dir.join("usdt");
    if usdt.exists() {
        return Ok(usdt);
    }
    let target = dir.parent().ok_or("no target directory")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "usdt-cli",
            "--bin",
            "usdt",
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map_err(|e| format!("cargo: {e}"))?;
    if !status.success() || !usdt.exists() {
        return Err(format!(
            "`cargo build --release -p usdt-cli` failed ({status})"
        ));
    }
    Ok(usdt)
}

/// Nanoseconds on CPU of every thread of `pid`.
fn cpu_ns(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut sum = 0;
    for task in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let path = task.map_err(|e| e.to_string())?.path().join("schedstat");
        // A thread that ended meanwhile has nothing more to add.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        sum += text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("{}: {text}", path.display()))?;
    }
    Ok(sum)
}

/// One scrape of `/metrics`.
fn scrape(port: u16) -> Result<usize, String> {
    let e = |e: std::io::Error| format!("scraping 127.0.0.1:{port}: {e}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(e)?;
    // A server that stops answering costs the row an error, not the bench.
    s.set_read_timeout(Some(child::LINE)).map_err(e)?;
    s.set_write_timeout(Some(child::LINE)).map_err(e)?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(e)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(e)?;
    if !text.contains("usdt_probe_hits_total") {
        return Err(format!("no usdt_probe_hits_total in {text}"));
    }
    Ok(text.len())
}

/// `usdt serve --all THIS_EXE --latency answers:start,answers:done,id`:
/// its CPU over `seconds` without scrapes (% of one CPU), and per scrape
/// (ms, the mean of 10).
fn serve_cpu(exe: &Path, seconds: u64) -> Result<(f64, f64), String> {
    let usdt = usdt_binary()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut child = Command::new(&usdt)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--all"])
        .arg(exe)
        .args(["--latency", "answers:start,answers:done,id"])
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", usdt.display()))?;
    let result = (|| {
        let err = Lines::of(child.stderr.take().ok_or("no stderr")?, "usdt serve");
        let line = err.next(child::LINE)?;
        if !line.starts_with("usdt: serving") {
            return Err(format!("usdt serve: {}", line.trim()));
        }
        let pid = child.id();
        scrape(port)?;
        std::thread::sleep(Duration::from_secs(1));
        let (t0, c0) = (Instant::now(), cpu_ns(pid)?);
        std::thread::sleep(Duration::from_secs(seconds));
        let idle = (cpu_ns(pid)? - c0) as f64 / t0.elapsed().as_nanos() as f64 * 100.0;
        let c1 = cpu_ns(pid)?;
        for _ in 0..10 {
            scrape(port)?;
        }
        // The last response may be written a little after it was read.
        std::thread::sleep(Duration::from_millis(200));
        let per_scrape = (cpu_ns(pid)? - c1) as f64 / 10.0 / 1e6;
        Ok((idle, per_scrape))
    })();
    child::stop(&mut child, libc::SIGTERM, child::detach_time(3));
    result
}
/// The section as a table.
pub fn table(a: &Answers) -> String {
    let mut s = String::from(
        "\nAnswers in the kernel: cost per hit (answers:start + answers:done, this process), \
         beside an empty program on the same sites (the floor)\n",
    );
    s += &format!(
        "{:<30}{:<7}{:<14}{:>10}{:>9}{:>9}\n",
        "row", "site", "link", "ns/hit", "x floor", "x count"
    );
    s += &format!("{:<51}{:>10.1}\n", "idle loop (per iteration)", a.idle_ns);
    s += &format!(
        "{:<51}{:>10.1}\n",
        "idle loop of paths (per iteration)", a.paths_idle_ns
    );
    let base = a
        .rows
        .iter()
        .find(|r| r.name == "count")
        .map(|r| r.ns_per_hit);
    let ratio = |v: f64, b: Option<f64>| {
        b.filter(|b| *b > 0.0)
            .map_or("-".into(), |b| format!("{:.2}", v / b))
    };
    for r in &a.rows {
        let floor = match r.name {
            FLOOR => "-".into(),
            _ => ratio(r.ns_per_hit, a.floor(r.site, r.link).map(|f| f.ns_per_hit)),
        };
        let count = match r.name {
            FLOOR => "-".into(),
            _ => ratio(r.ns_per_hit, base),
        };
        s += &format!(
            "{:<30}{:<7}{:<14}{:>10.1}{:>9}{:>9}\n",
            r.name, r.site, r.link, r.ns_per_hit, floor, count
        );
    }
    for (name, why) in &a.skipped {
        s += &format!("{name:<30} not measured: {why}\n");
    }
    let per_hit = |name: &str| a.rows.iter().find(|r| r.name == name).map(|r| r.ns_per_hit);
    for (stack, trace) in crate::sampled::PAIRS {
        if let (Some(with), Some(without)) = (per_hit(stack), per_hit(trace)) {
            if without > 0.0 {
                s += &format!(
                    "{stack} / {trace}: {:.2} per hit in the traced process\n",
                    with / without
                );
            }
        }
    }
    for (row, base, what) in RATIOS {
        if let (Some(with), Some(without)) = (per_hit(row), per_hit(base)) {
            if without > 0.0 {
                s += &format!("{row} / {base}: {:.2} per hit{what}\n", with / without);
            }
        }
    }
    for (name, t) in &a.tracer {
        let stack = match name.contains("--stack") {
            true => ", unwind and symbolize its stack",
            false => "",
        };
        s += &format!(
            "{name}: the tracer took {:.2} us per hit to read it{stack}\n",
            t.as_secs_f64() * 1e6
        );
    }
    match &a.serve {
        Ok((idle, scrape)) => {
            s += &format!(
            "usdt serve: {idle:.3}% of a CPU between scrapes, {scrape:.2} ms of CPU per scrape\n"
        )
        }
        Err(why) => s += &format!("usdt serve: not measured: {why}\n"),
    }
    s
}

/// Draws the histogram of a `usdt latency --json` object as an SVG in the
/// bench's style: one horizontal bar per bucket, its count beside it.
pub fn latency_svg(json: &Path, svg: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let line = text
        .lines()
        .rfind(|l| l.starts_with('{'))
        .ok_or_else(|| format!("{}: no JSON object", json.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("{}: {e}", json.display()))?;
    let histogram =
        latency_histogram(&v).ok_or_else(|| format!("{}: no buckets", json.display()))?;
    let ms = |ns: u64| ns as f64 / 1e6;
    histogram
        .chart(&|low, high| format!("[{:.3}, {:.3}) ms", ms(low), ms(high)))
        .write(svg)
        .map_err(|e| e.to_string())
}

/// The histogram of a `usdt latency --json` object, with its quantiles in
/// the caption.
fn latency_histogram(v: &serde_json::Value) -> Option<usdt_charts::Histogram> {
    let buckets = v["buckets"]
        .as_array()?
        .iter()
        .map(|b| {
            let n = |k: &str| b[k].as_u64().unwrap_or(0);
            usdt_charts::Bucket {
                low: n("low_ns"),
                high: n("high_ns"),
                count: n("count"),
            }
        })
        .collect();
    let ms = |k: &str| v[k].as_u64().unwrap_or(0) as f64 / 1e6;
    Some(usdt_charts::Histogram {
        caption: format!(
            "usdt latency {} -> {} by {}: count {}, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            v["start"].as_str().unwrap_or("?"),
            v["end"].as_str().unwrap_or("?"),
            v["key"].as_str().unwrap_or("?"),
            v["count"].as_u64().unwrap_or(0),
            ms("p50_ns"),
            ms("p90_ns"),
            ms("p99_ns"),
            ms("max_ns"),
        ),
        x_desc: "pairs per log2 bucket, counted in the kernel".into(),
        buckets,
    })
}
