//! PostgreSQL under pgbench: what tracing every backend costs a real
//! server. A cluster of the bench's own (usdt-test-support's `Cluster`:
//! Debian's PostgreSQL 15, a private copy of `postgres`, a Unix socket)
//! runs pgbench's select-only script (`-S`: one statement per
//! transaction, so the two query probes fire once each per transaction)
//! for the same time in each row, one after the other in one run:
//!
//! - untraced;
//! - `usdt count postgresql:query__start postgresql:query__done --all`;
//! - `usdt latency postgresql:query__start postgresql:query__done --all`;
//! - bpftrace's equivalent script on the same probes of the same file:
//!   `@start[tid] = nsecs` and `@h = hist(nsecs - @start[tid])`.
//!
//! The rows run in rounds (untraced, count, latency, bpftrace; three
//! rounds, one with `--quick`), so that a machine whose speed drifts over
//! the run (a shared host) moves every row alike: a traced row's ratio is
//! the median of its rounds' ratios to the untraced run of the same round,
//! its tps the median of its rounds.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::child::{self, Lines};
use usdt_provision::Need;
use usdt_test_support::postgres::Cluster;

const START: &str = "postgresql:query__start";
const DONE: &str = "postgresql:query__done";

/// What pgbench ran and how fast each row went.
#[derive(Debug)]
pub struct Pgbench {
    /// pgbench's options.
    pub options: String,
    /// How many rounds ran.
    pub rounds: usize,
    /// Each row: its name, median tps and median ratio to the untraced
    /// run of its round (1 for the untraced row).
    pub rows: Vec<(&'static str, f64, f64)>,
    /// Rows that could not run, and why.
    pub skipped: Vec<(&'static str, String)>,
}

/// How a row traces the cluster.
#[derive(Clone, Copy)]
enum Tracer {
    None,
    Usdt(&'static str),
    Bpftrace,
}

const ROWS: [(&str, Tracer); 4] = [
    ("untraced", Tracer::None),
    ("usdt count --all", Tracer::Usdt("count")),
    ("usdt latency --all", Tracer::Usdt("latency")),
    ("bpftrace @start/hist()", Tracer::Bpftrace),
];

/// Runs the section: `quick` runs one round of 2 s per row instead of
/// three of 4 s.
pub fn run(quick: bool) -> Result<Pgbench, String> {
    usdt_provision::ensure(&[
        Need::package(
            usdt_provision::POSTGRESQL,
            "the bench traces PostgreSQL under pgbench",
        ),
        Need::package(
            usdt_provision::SETPRIV,
            "the bench's PostgreSQL cluster runs as nobody",
        ),
    ])
    .map_err(|e| e.to_string())?;
    let cluster = Cluster::start("bench", &["autovacuum=off"])?;
    let usdt = crate::answers::usdt_binary()?;
    let (rounds, seconds) = if quick { (1, "2") } else { (3, "4") };
    let options = ["-n", "-S", "-c", "2", "-j", "2", "-T", seconds];
    // Per row, per round: tps, and the ratio to the round's untraced tps.
    let mut measured: Vec<Vec<(f64, f64)>> = vec![vec![]; ROWS.len()];
    let mut skipped = vec![];
    for _ in 0..rounds {
        let mut untraced = None;
        for (i, (name, tracer)) in ROWS.iter().enumerate() {
            if skipped.iter().any(|(n, _)| n == name) {
                continue;
            }
            match row(&cluster, &usdt, *tracer, &options) {
                Ok(tps) => {
                    let base = *untraced.get_or_insert(tps);
                    measured[i].push((tps, tps / base));
                }
                Err(why) => skipped.push((*name, why)),
            }
        }
    }
    let rows = ROWS
        .iter()
        .zip(measured)
        .filter(|(_, m)| !m.is_empty())
        .map(|((name, _), m)| {
            let tps = median(m.iter().map(|r| r.0).collect());
            let ratio = median(m.iter().map(|r| r.1).collect());
            (*name, tps, ratio)
        })
        .collect();
    Ok(Pgbench {
        options: options.join(" "),
        rounds,
        rows,
        skipped,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One row: the tracer attached, pgbench run, the tracer stopped.
fn row(cluster: &Cluster, usdt: &Path, tracer: Tracer, options: &[&str]) -> Result<f64, String> {
    let child = match tracer {
        Tracer::None => None,
        Tracer::Usdt(command) => Some(attached(
            Command::new(usdt)
                .args([command, START, DONE, "--all"])
                .arg(&cluster.postgres),
            "Ctrl-C",
            false,
        )?),
        Tracer::Bpftrace => {
            usdt_provision::ensure(&[Need::package(
                usdt_provision::BPFTRACE,
                "the bench compares its latency script with usdt latency",
            )])
            .map_err(|e| e.to_string())?;
            let pg = cluster.postgres.display();
            let script = format!(
                "usdt:{pg}:{START} {{ @start[tid] = nsecs; }}\n\
                 usdt:{pg}:{DONE} /@start[tid]/ {{ @h = hist(nsecs - @start[tid]); delete(@start[tid]); }}"
            );
            Some(attached(
                Command::new("bpftrace").args(["-e", &script]),
                "Attaching",
                true,
            )?)
        }
    };
    let result = cluster.pgbench(options).and_then(|o| tps(&o.stdout));
    if let Some(mut child) = child {
        child::stop(&mut child, libc::SIGINT, child::detach_time(2));
    }
    result
}

/// `cmd` started, once it printed `ready` (a line starting with it, on
/// stdout when `on_stdout`, else on stderr); the rest of its output read
/// and dropped.
fn attached(cmd: &mut Command, ready: &str, on_stdout: bool) -> Result<Child, String> {
    let (out, err) = if on_stdout {
        (Stdio::piped(), Stdio::null())
    } else {
        (Stdio::null(), Stdio::piped())
    };
    let mut child = cmd
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let stream: Box<dyn Read + Send> = match (child.stdout.take(), child.stderr.take()) {
        (Some(s), _) => Box::new(s),
        (_, Some(s)) => Box::new(s),
        _ => return Err("no output to read".into()),
    };
    // The rest of its output is read (and dropped) by the reader's thread.
    let lines = Lines::of(stream, &format!("{cmd:?}"));
    if let Err(e) = lines.until(child::LINE, |l| l.contains(ready)) {
        child::stop(&mut child, libc::SIGINT, child::detach_time(2));
        return Err(e);
    }
    // bpftrace says "Attaching" before its uprobes are in place.
    std::thread::sleep(Duration::from_millis(if on_stdout { 1000 } else { 100 }));
    Ok(child)
}

/// pgbench's `tps = N (without initial connection time)`.
fn tps(stdout: &[u8]) -> Result<f64, String> {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("pgbench printed no tps: {text}"))
}

/// The section as a table.
pub fn table(p: &Pgbench) -> String {
    let mut s = format!(
        "\nPostgreSQL under pgbench {} ({START} and {DONE}, every backend; medians of {} rounds)\n",
        p.options, p.rounds
    );
    s += &format!("{:<26}{:>12}{:>12}\n", "row", "tps", "x untraced");
    for (name, tps, ratio) in &p.rows {
        s += &format!("{name:<26}{tps:>12.0}{ratio:>12.3}\n");
    }
    for (name, why) in &p.skipped {
        s += &format!("{name:<26} not measured: {why}\n");
    }
    s
}
