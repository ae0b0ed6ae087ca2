//! The benchmark: how fast a loop runs with each kind of probe, idle and
//! traced, beside upstream's `run_bench_uprobes.sh` rows.
//!
//! ```text
//! cargo run --release -p usdt-bench [-- --quick] [--json FILE] [--svg FILE]
//! cargo run --release -p usdt-bench -- --answers-only [--quick]
//! cargo run --release -p usdt-bench -- --postgres-only [--quick]
//! cargo run --release -p usdt-bench -- --latency-svg LATENCY.json FILE.svg
//! ```
//!
//! Prints a table on stdout; progress goes to stderr. Attached rows need root
//! (perf_event_open on the uprobe PMU). See bench/README.md for what each row
//! runs and how it is measured.

mod answers;
mod attach;
mod attached_rows;
mod callgrind;
mod child;
mod csdt;
mod forks;
mod layouts;
mod loops;
mod machine;
mod many;
mod paths;
mod peers;
mod pgbench;
mod report;
mod sampled;
mod threads;
mod timing;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use attach::At;
use indicatif::{ProgressBar, ProgressStyle};
use report::{Report, Row};
use timing::{Local, Loop, Plan};

/// Who runs a row's loop.
#[derive(Clone, Copy)]
enum Runner {
    /// This process, on the bench thread.
    Here(fn(u64)),
    /// The peers helper (bench/peers/), its loop of this name.
    Peers(&'static str),
    /// This process, the C loop of bench/c/loop.c (compiled and loaded when
    /// the bench runs: csdt.rs).
    C(fn(u64)),
}

/// One row of the table.
struct Spec {
    name: &'static str,
    runner: Runner,
    /// The probe (provider, name) to attach to, and where; `None` for idle rows.
    attach: Option<((&'static str, &'static str), At)>,
}

const fn row(
    name: &'static str,
    runner: Runner,
    attach: Option<((&'static str, &'static str), At)>,
) -> Spec {
    Spec {
        name,
        runner,
        attach,
    }
}

/// The rows, in the order they run. `usdt-nop` runs before `usdt-nop5`: the
/// `[uprobes-trampoline]` page stays mapped once the kernel created it.
const ROWS: [Spec; 11] = [
    row("usermode-count", Runner::Here(loops::bare), None),
    row("syscall-count", Runner::Here(loops::syscall), None),
    row("usdt-idle", Runner::Here(loops::hit), None),
    row("usdt-idle-lazy", Runner::Here(loops::lazy), None),
    row(
        "usdt-nop",
        Runner::Here(loops::hit),
        Some((loops::HIT, At::Nop)),
    ),
    row(
        "usdt-nop5",
        Runner::Here(loops::hit),
        Some((loops::HIT, At::Next)),
    ),
    row(
        "usdt-nop5-bpf",
        Runner::Here(loops::hit),
        Some((loops::HIT, At::NextBpf)),
    ),
    row(
        "usdt-lazy",
        Runner::Here(loops::lazy),
        Some((loops::LAZY, At::Auto)),
    ),
    row(
        "c-sdt-nop",
        Runner::C(loops::c_sdt),
        Some((loops::C_SDT, At::Nop)),
    ),
    row(
        "oxide-usdt",
        Runner::Peers("oxide-usdt"),
        Some((loops::OXIDE, At::Nop)),
    ),
    row(
        "probe-crate",
        Runner::Here(loops::probe_crate),
        Some((loops::PROBE_CRATE, At::Nop)),
    ),
];

struct Options {
    plan: Plan,
    /// Only the many-sites section.
    many_only: bool,
    /// Only the fork guard's section.
    fork_only: bool,
    /// Only the answers section.
    answers_only: bool,
    /// Only the PostgreSQL section.
    postgres_only: bool,
    /// Only the two-threads section.
    threads_only: bool,
    /// Only the site layouts' section.
    layouts_only: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
}

const USAGE: &str = "usage: bench [--quick] [--many-only | --fork-only | --answers-only | --postgres-only | --threads-only | --layouts-only] [--json FILE] [--svg FILE] | bench --prepare | bench --prepare-c | bench --attached-rows N | bench --latency-svg LATENCY.json FILE.svg";

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        plan: Plan::FULL,
        many_only: false,
        fork_only: false,
        answers_only: false,
        postgres_only: false,
        threads_only: false,
        layouts_only: false,
        json: None,
        svg: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut file = || {
            args.next()
                .map(PathBuf::from)
                .ok_or(format!("{arg} needs a FILE; {USAGE}"))
        };
        match arg.as_str() {
            "--quick" => o.plan = Plan::QUICK,
            "--many-only" => o.many_only = true,
            "--fork-only" => o.fork_only = true,
            "--answers-only" => o.answers_only = true,
            "--postgres-only" => o.postgres_only = true,
            "--threads-only" => o.threads_only = true,
            "--layouts-only" => o.layouts_only = true,
            "--json" => o.json = Some(file()?),
            "--svg" => o.svg = Some(file()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{arg}`; {USAGE}")),
        }
    }
    Ok(o)
}

/// `--callgrind-child LOOP N`: run one loop under valgrind, nothing else.
fn callgrind_child(args: &[String]) -> ! {
    let (Some(run), Some(Ok(n))) = (
        args.first()
            .and_then(|l| loops::by_name(l).or_else(|| layouts::by_name(l))),
        args.get(1).map(|n| n.parse()),
    ) else {
        eprintln!("bench: --callgrind-child LOOP N");
        std::process::exit(2);
    };
    run(std::hint::black_box(n));
    std::process::exit(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--callgrind-child") => callgrind_child(&args[1..]),
        // Only the traced rows, a fixed count each, as JSON (kernels/).
        Some("--attached-rows") => attached_rows::main(&args[1..]),
        // The fork guard's fork-and-exit loop (forks.rs).
        Some("--fork-loop") => forks::helper(&args[1..]),
        Some("--latency-svg") => {
            let (Some(json), Some(svg)) = (args.get(1), args.get(2)) else {
                eprintln!("bench: {USAGE}");
                std::process::exit(2);
            };
            if let Err(e) = answers::latency_svg(Path::new(json), Path::new(svg)) {
                eprintln!("bench: {e}");
                std::process::exit(1);
            }
            eprintln!("bench: wrote {svg}");
            return;
        }
        // Build the peers helper only (tests time the bench without it).
        Some("--prepare") => {
            if let Err(e) = peers::build() {
                eprintln!("bench: {e}");
                std::process::exit(1);
            }
            return;
        }
        // Compile the C <sys/sdt.h> row's library only: a bench run where
        // the target directory is read-only (a kernel matrix guest) finds
        // it built.
        Some("--prepare-c") => {
            if let Err(e) = csdt::get() {
                eprintln!("bench: {e}");
                std::process::exit(1);
            }
            return;
        }
        _ => {}
    }
    if let Err(e) = options(&args).and_then(run) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// Why uprobes cannot be attached here, if they cannot.
fn cannot_attach() -> Option<String> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!(
            "attaching uprobes with perf_event_open needs root, and this runs as uid {euid}"
        ));
    }
    if !Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
        return Some("this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe)".into());
    }
    None
}

fn run(opts: Options) -> Result<(), String> {
    if opts.many_only {
        match many::run(opts.plan.runs == 1) {
            Ok((rows, failed)) => print!("{}", many::table(&rows, &failed)),
            Err(why) => return Err(format!("many sites not measured: {why}")),
        }
        return Ok(());
    }
    if opts.fork_only {
        let exe =
            std::fs::canonicalize("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
        let quick = opts.plan.runs == 1;
        let cost = forks::run(&exe, opts.plan.runs, quick, cannot_attach().is_none());
        print!("{}", forks::table(&cost));
        return cost.map(|_| ());
    }
    if opts.answers_only {
        let a = answers::run(opts.plan.runs == 1)?;
        print!("{}", answers::table(&a));
        return Ok(());
    }
    if opts.postgres_only {
        let p = pgbench::run(opts.plan.runs == 1)?;
        print!("{}", pgbench::table(&p));
        return Ok(());
    }
    if opts.layouts_only {
        let exe =
            std::fs::canonicalize("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
        let l = layouts::run(opts.plan.runs == 1, &exe, callgrind::available().is_ok());
        print!("{}", layouts::table(&l));
        return Ok(());
    }
    if opts.threads_only {
        let t = threads::run(opts.plan.runs == 1, cannot_attach().is_none())?;
        print!("{}", threads::table(&t));
        return Ok(());
    }
    let machine = machine::Machine::probe();
    let clock = machine::CpuClock::now();
    let exe =
        std::fs::canonicalize("/proc/self/exe").map_err(|e| format!("/proc/self/exe: {e}"))?;
    let no_attach = cannot_attach();

    eprintln!("bench: building bench/peers (oxidecomputer usdt 0.6) ...");
    let peers_exe = peers::build();
    if let Err(e) = &peers_exe {
        eprintln!("bench: {e}");
    }
    let mut helper = match &peers_exe {
        Ok(p) => peers::Helper::start(p)
            .map_err(|e| eprintln!("bench: {e}"))
            .ok(),
        Err(_) => None,
    };

    let c_loop = csdt::get().map(|c| c.path.clone());
    if let Err(e) = &c_loop {
        eprintln!("bench: the C <sys/sdt.h> loop: {e}");
    }
    let mut jobs = callgrind::jobs(&exe, peers_exe.as_deref().ok());
    let valgrind = callgrind::available();
    let valgrind_ok = valgrind.is_ok();
    let steps = ROWS.len() * opts.plan.runs + if valgrind.is_ok() { jobs.len() } else { 0 };
    let bar = progress(steps as u64);

    let mut report = Report {
        machine,
        plan: opts.plan,
        rows: Vec::new(),
        skipped: Vec::new(),
        idle: Ok(BTreeMap::new()),
        others: 0.0,
        many: Err("not run".into()),
        auto: None,
        forks: Err("not run".into()),
    };
    if let Err(e) = &c_loop {
        jobs.retain(|(key, _, _)| *key != "c-sdt");
        report
            .skipped
            .push(("c-sdt (idle instructions)", e.clone()));
    }
    // Rows that cannot run here are skipped with the reason.
    let mut states: Vec<Option<State>> = ROWS
        .iter()
        .map(|spec| {
            let why_not = match (spec.attach, &no_attach, spec.runner, &helper) {
                (Some(_), Some(why), _, _) => Some(why.clone()),
                (_, _, Runner::C(_), _) => c_loop.as_ref().err().cloned(),
                (_, _, Runner::Peers(_), None) => Some(match &peers_exe {
                    Err(e) => format!("the peers helper could not be built: {e}"),
                    Ok(_) => "the peers helper could not be started".into(),
                }),
                _ => None,
            };
            match why_not {
                Some(why) => {
                    report.skipped.push((spec.name, why));
                    bar.inc(opts.plan.runs as u64);
                    None
                }
                None => Some(State::default()),
            }
        })
        .collect();
    // Round-robin: run 1 of every row, then run 2, ...
    for round in 0..opts.plan.runs {
        for (spec, state) in ROWS.iter().zip(&mut states) {
            let Some(state) = state.as_mut().filter(|s| s.failed.is_none()) else {
                continue;
            };
            bar.set_message(format!(
                "{} (run {}/{})",
                spec.name,
                round + 1,
                opts.plan.runs
            ));
            if bar.is_hidden() {
                eprintln!(
                    "bench: {} run {}/{} ...",
                    spec.name,
                    round + 1,
                    opts.plan.runs
                );
            }
            if let Err(e) = one_run(spec, state, &exe, helper.as_mut(), opts.plan, &bar) {
                bar.suspend(|| eprintln!("bench: {}: {e}", spec.name));
                state.failed = Some(e);
            }
            bar.inc(1);
        }
    }
    for (spec, state) in ROWS.iter().zip(states) {
        match state {
            Some(State {
                failed: Some(e), ..
            }) => report.skipped.push((spec.name, e)),
            Some(s) => report.rows.push(Row {
                name: spec.name,
                mops: s.measured.mean(),
                stddev: s.measured.stddev(),
                attach: s.attach.unwrap_or_else(|| "none".into()),
                optimized: s.optimized,
                attached: spec.attach.is_some(),
            }),
            None => {}
        }
    }
    drop(helper);

    report.idle = valgrind.and_then(|()| {
        bar.set_message("callgrind");
        if bar.is_hidden() {
            eprintln!("bench: counting idle instructions with callgrind ...");
        }
        idle_instructions(&jobs, &bar)
    });
    bar.set_message("fork guard");
    if bar.is_hidden() {
        eprintln!("bench: the fork guard's cost per fork ...");
    }
    report.forks = forks::run(
        &exe,
        opts.plan.runs,
        opts.plan.runs == 1,
        no_attach.is_none(),
    );
    bar.set_message("many sites");
    if bar.is_hidden() {
        eprintln!("bench: the many-sites section ...");
    }
    if no_attach.is_none() {
        report.auto = Some(attach::auto_choice(&exe));
    }
    report.many = many::run(opts.plan.runs == 1);
    bar.set_message("answers");
    if bar.is_hidden() {
        eprintln!("bench: the answers section ...");
    }
    let answers = if no_attach.is_none() {
        answers::run(opts.plan.runs == 1)
    } else {
        Err("needs root".into())
    };
    bar.set_message("PostgreSQL");
    if bar.is_hidden() {
        eprintln!("bench: PostgreSQL under pgbench ...");
    }
    let postgres = if no_attach.is_none() {
        pgbench::run(opts.plan.runs == 1)
    } else {
        Err("needs root".into())
    };
    bar.set_message("threads");
    if bar.is_hidden() {
        eprintln!("bench: the two-threads section ...");
    }
    let threads = threads::run(opts.plan.runs == 1, no_attach.is_none());
    bar.set_message("site layouts");
    if bar.is_hidden() {
        eprintln!("bench: the site layouts' section ...");
    }
    let layouts = layouts::run(opts.plan.runs == 1, &exe, valgrind_ok);
    bar.finish_and_clear();
    report.others = clock.others_since();

    print!("{}", report.table());
    match &answers {
        Ok(a) => print!("{}", answers::table(a)),
        Err(why) => println!("\nAnswers in the kernel: not measured: {why}"),
    }
    match &postgres {
        Ok(p) => print!("{}", pgbench::table(p)),
        Err(why) => println!("\nPostgreSQL under pgbench: not measured: {why}"),
    }
    match &threads {
        Ok(t) => print!("{}", threads::table(t)),
        Err(why) => println!("\nTwo threads on one probe: not measured: {why}"),
    }
    print!("{}", layouts::table(&layouts));
    if let Some(path) = &opts.json {
        report.write_json(path)?;
        eprintln!("bench: wrote {}", path.display());
    }
    if let Some(path) = &opts.svg {
        report.write_svg(path)?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(())
}

/// A bar on a terminal, nothing otherwise (then `run` prints plain lines).
fn progress(steps: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("bench {bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar
}

/// A row while its runs go on.
#[derive(Default)]
struct State {
    /// The batch size, once calibrated.
    n: Option<u64>,
    measured: timing::Measured,
    /// The attach column.
    attach: Option<String>,
    /// Whether every run found the site optimized.
    optimized: bool,
    /// Why the row stopped.
    failed: Option<String>,
}

/// One run of a row: attach (for attached rows), calibrate the first time or
/// warm up, run, check the hit count and the site, detach.
fn one_run(
    spec: &Spec,
    state: &mut State,
    exe: &Path,
    helper: Option<&mut peers::Helper>,
    plan: Plan,
    bar: &ProgressBar,
) -> Result<(), String> {
    let (pid, target) = match (spec.runner, &helper) {
        (Runner::Peers(_), Some(h)) => (h.pid, h.exe.clone()),
        (Runner::C(_), _) => (std::process::id(), csdt::get()?.path.clone()),
        _ => (std::process::id(), exe.to_owned()),
    };
    let attached = match spec.attach {
        Some((probe, at)) => Some(attach::attach(pid, &target, probe, at)?),
        None => None,
    };
    let mut runner: Box<dyn Loop + '_> = match (spec.runner, helper) {
        (Runner::Here(f) | Runner::C(f), _) => Box::new(Local(f)),
        (Runner::Peers(name), Some(h)) => Box::new(h.row(name)),
        (Runner::Peers(_), None) => return Err("no peers helper".into()),
    };
    // The first hit after attaching is the one that optimizes a nop5 site.
    let (n, mut iterations) = match state.n {
        Some(n) => (n, runner.batch(1024).map(|_| 1024)?),
        None => timing::calibrate(runner.as_mut())?,
    };
    state.n = Some(n);
    let (rate, run) = timing::run_once(runner.as_mut(), n, plan.run_time)?;
    iterations += run;
    state.measured.rates.push(rate);
    let Some(a) = attached else {
        return Ok(());
    };
    let hits = a.count()?;
    if hits == 0 {
        return Err(format!(
            "attached at {}, but the probe was never hit",
            a.describe
        ));
    }
    if hits != iterations {
        bar.suspend(|| {
            eprintln!(
                "bench: warning: {}: {hits} hits counted for {iterations} iterations",
                spec.name
            )
        });
    }
    let optimized = a.optimized();
    state.optimized = optimized && (state.optimized || state.attach.is_none());
    state.attach = Some(a.describe.clone());
    if let Err(e) = a.detach() {
        bar.suspend(|| eprintln!("bench: warning: {}: {e}", spec.name));
    }
    Ok(())
}

/// Counts each loop under callgrind; reports probes against the bare loop.
fn idle_instructions(
    jobs: &[(&'static str, PathBuf, &'static str)],
    bar: &ProgressBar,
) -> Result<BTreeMap<&'static str, f64>, String> {
    let mut per_iter = BTreeMap::new();
    for (key, program, name) in jobs {
        bar.set_message(format!("callgrind {key}"));
        per_iter.insert(*key, callgrind::per_iteration(program, name)?);
        bar.inc(1);
    }
    let bare = per_iter["bare"];
    let mut idle = BTreeMap::new();
    for (key, value) in &per_iter {
        let base = match *key {
            "bare" => 0.0,
            "peers-bare" => continue,
            // The helper's probe against the helper's own bare loop.
            "oxide-usdt" => per_iter.get("peers-bare").copied().unwrap_or(bare),
            _ => bare,
        };
        idle.insert(*key, value - base);
    }
    Ok(idle)
}
