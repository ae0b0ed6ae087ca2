//! What the fork guard (usdt-runtime's `forkguard`) costs per fork: a
//! fork-and-exit loop (`fork`, the child `_exit`s at once, `waitpid`) in a
//! helper process (this executable, `--fork-loop N`), run with the guard
//! (the default) and without it (`USDT_FORK_GUARD=0`), taking turns, in the
//! same bench run. As root the bench first attaches a uprobe at Location + 1
//! of the helper's `bench:hit` site, which the helper fires, so that on a
//! kernel that optimizes nop5 the helper has its `[uprobes-trampoline]`
//! mapped and the guard does all its work: read `/proc/self/maps` in the
//! parent, map a page of `ret` in each child.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::attach::{self, At};
use crate::child::{self, Lines};
use crate::loops;

/// Forks per timed run.
const FORKS: u64 = 2000;
const FORKS_QUICK: u64 = 300;

/// The two rows: microseconds per fork, with and without the guard.
pub struct ForkCost {
    /// Per-run microseconds per fork, without the guard.
    pub without: Vec<f64>,
    /// Per-run microseconds per fork, with the guard.
    pub with: Vec<f64>,
    /// Per-run microseconds of the parent's CPU time per fork, without the
    /// guard.
    pub without_cpu: Vec<f64>,
    /// The same with the guard.
    pub with_cpu: Vec<f64>,
    /// Whether the guard registered its handlers in the helper (false where
    /// the kernel optimizes no nop5 site: the guard then costs nothing).
    pub active: bool,
    /// Whether the helper had `[uprobes-trampoline]` mapped.
    pub trampoline: bool,
    /// Forks per run.
    pub forks: u64,
}

/// `--fork-loop N`: the helper. Says `ready`, waits for a line (time to
/// attach), fires `bench:hit` 1000 times, forks N times, and prints
/// `ns=TOTAL active=BOOL trampoline=BOOL`.
pub fn helper(args: &[String]) -> ! {
    let Some(Ok(n)) = args.first().map(|n| n.parse::<u64>()) else {
        eprintln!("bench: --fork-loop N");
        std::process::exit(2);
    };
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    loops::hit(1000);
    let trampoline = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .contains("[uprobes-trampoline]");
    let started = Instant::now();
    let cpu_started = cpu_time();
    for _ in 0..n {
        // SAFETY: the child only calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            eprintln!("bench: fork: {}", std::io::Error::last_os_error());
            std::process::exit(1);
        }
        let mut status = 0;
        // SAFETY: our child, a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    let ns = started.elapsed().as_nanos();
    let cpu_ns = cpu_time() - cpu_started;
    println!(
        "ns={ns} cpu_ns={cpu_ns} active={} trampoline={trampoline}",
        usdt_runtime::forkguard::active()
    );
    std::process::exit(0)
}

/// This process's CPU time (user + system, all threads) in nanoseconds:
/// what the parent's side of a fork costs, the guard's `prepare` included,
/// without the waits for the scheduler that a busy machine adds.
fn cpu_time() -> u128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// One helper run: microseconds per fork (wall clock and the parent's CPU
/// time), whether the guard was active and whether the trampoline was mapped.
fn one(exe: &Path, forks: u64, guard: bool, attach: bool) -> Result<Sample, String> {
    let mut child = Command::new(exe)
        .args(["--fork-loop", &forks.to_string()])
        .env("USDT_FORK_GUARD", if guard { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the fork helper: {e}"))?;
    let lines = Lines::of(child.stdout.take().expect("piped"), "the fork helper");
    let next = || Ok::<_, String>(lines.next(child::LINE)?.trim_end().to_string());
    let ready = next().inspect_err(|_| child::kill(&mut child))?;
    if ready != "ready" {
        child::kill(&mut child);
        return Err(format!("the fork helper said {ready:?}"));
    }
    let attached = if attach {
        let pid = child.id();
        match attach::attach(pid, exe, loops::HIT, At::Next) {
            Ok(a) => Some(a),
            Err(e) => {
                child::kill(&mut child);
                return Err(e);
            }
        }
    } else {
        None
    };
    let mut stdin = child.stdin.take().expect("piped");
    let _ = writeln!(stdin, "go");
    let result = next();
    drop(attached);
    if result.is_err() {
        child::kill(&mut child);
    }
    let _ = child.wait();
    let line = result?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
            .ok_or(format!("the fork helper said {line:?}"))
    };
    let us = |key: &str| -> Result<f64, String> {
        let ns: f64 = field(key)?.parse().map_err(|_| line.clone())?;
        Ok(ns / 1e3 / forks as f64)
    };
    Ok(Sample {
        wall: us("ns")?,
        cpu: us("cpu_ns")?,
        active: field("active")? == "true",
        trampoline: field("trampoline")? == "true",
    })
}

/// What one helper run measured.
struct Sample {
    wall: f64,
    cpu: f64,
    active: bool,
    trampoline: bool,
}

/// Runs both rows, taking turns, `runs` times each.
pub fn run(exe: &Path, runs: usize, quick: bool, attach: bool) -> Result<ForkCost, String> {
    let forks = if quick { FORKS_QUICK } else { FORKS };
    let mut cost = ForkCost {
        without: vec![],
        with: vec![],
        without_cpu: vec![],
        with_cpu: vec![],
        active: false,
        trampoline: false,
        forks,
    };
    for _ in 0..runs {
        for guard in [false, true] {
            let sample = one(exe, forks, guard, attach)?;
            if guard {
                cost.with.push(sample.wall);
                cost.with_cpu.push(sample.cpu);
                cost.active = sample.active;
                cost.trampoline = sample.trampoline;
            } else {
                cost.without.push(sample.wall);
                cost.without_cpu.push(sample.cpu);
            }
        }
    }
    Ok(cost)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn sd(v: &[f64]) -> f64 {
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

/// The section of the table.
pub fn table(cost: &Result<ForkCost, String>) -> String {
    let cost = match cost {
        Ok(c) => c,
        Err(why) => return format!("# fork guard not measured: {why}\n"),
    };
    let mut s = format!(
        "# fork guard: a fork-and-exit loop ({} forks per run, {} run(s) each, taking turns), the helper's site {}\n",
        cost.forks,
        cost.with.len(),
        if cost.trampoline {
            "optimized ([uprobes-trampoline] mapped)"
        } else {
            "not optimized (no trampoline)"
        }
    );
    s += "# wall: fork + the child's exit + waitpid; parent cpu: the parent's CPU time (the guard's prepare runs there)\n";
    let (w, wo) = (mean(&cost.with), mean(&cost.without));
    let (wc, woc) = (mean(&cost.with_cpu), mean(&cost.without_cpu));
    s += &format!(
        "fork-no-guard     : {wo:>8.1} ± {:.1} us/fork wall, {woc:.1} ± {:.1} us parent cpu  USDT_FORK_GUARD=0\n",
        sd(&cost.without),
        sd(&cost.without_cpu)
    );
    s += &format!(
        "fork-guard        : {w:>8.1} ± {:.1} us/fork wall, {wc:.1} ± {:.1} us parent cpu  {}\n",
        sd(&cost.with),
        sd(&cost.with_cpu),
        if cost.active {
            "the guard active"
        } else {
            "the guard idle (this kernel optimizes no nop5 site)"
        }
    );
    s += &format!(
        "guard cost        : {:+8.1} us/fork wall ({:.3}x), {:+.1} us parent cpu ({:.3}x)\n",
        w - wo,
        w / wo,
        wc - woc,
        wc / woc
    );
    s
}

/// The section as JSON.
pub fn json(cost: &Result<ForkCost, String>) -> serde_json::Value {
    match cost {
        Ok(c) => serde_json::json!({
            "forks_per_run": c.forks,
            "us_per_fork_without_guard": mean(&c.without),
            "us_per_fork_with_guard": mean(&c.with),
            "ratio": mean(&c.with) / mean(&c.without),
            "cpu_us_per_fork_without_guard": mean(&c.without_cpu),
            "cpu_us_per_fork_with_guard": mean(&c.with_cpu),
            "cpu_ratio": mean(&c.with_cpu) / mean(&c.without_cpu),
            "guard_active": c.active,
            "trampoline": c.trampoline,
        }),
        Err(why) => serde_json::json!({ "not_measured": why }),
    }
}
