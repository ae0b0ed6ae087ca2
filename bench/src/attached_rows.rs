//! `bench --attached-rows N`: only the traced rows a kernel decides, each run
//! once for a fixed number of iterations, as one JSON object on stdout. The
//! kernel matrix (kernels/) runs it in every guest, where an emulated CPU is
//! about 50 times slower than the host, so it neither calibrates nor repeats.
//!
//! Rows, in this order (the `[uprobes-trampoline]` page stays mapped once
//! created, so the rows at Location come first):
//! - `syscall`: `getpgid(0)`, untraced: what a kernel entry costs here;
//! - `c-sdt-nop`: the C `<sys/sdt.h>` probe, attached at its `nop`;
//! - `default`: our eager probe attached where `--attach auto` goes;
//! - `forced-next`: the same probe attached at Location + 1, the long nop of
//!   whatever layout this bench was built with (`nop5`, or `nop10` with
//!   `--features usdt/nop10`).
//!
//! Each attached row checks its hit count (`hits` = `iterations`) and reads
//! the site back after its hits (`site`), so the caller can tell an
//! optimized site (`90 e8 ..`, or `90 48 8d 64 24 80 e8 ..` for nop10).

use std::time::Instant;

use crate::attach::{self, At};
use crate::{csdt, loops};

/// One row's outcome.
struct RowResult {
    name: &'static str,
    mops: f64,
    attach: String,
    hits: Option<u64>,
    site: Option<String>,
    error: Option<String>,
}

/// Rounds of every row: the rows' runs are interleaved, and each row keeps
/// its best round, so that other work on the machine weighs on every row
/// alike.
const ROUNDS: u64 = 5;

/// Runs the rows for `n` iterations each (in `ROUNDS` rounds) and prints the
/// JSON object.
pub fn main(args: &[String]) -> ! {
    let Some(Ok(n)) = args.first().map(|a| a.parse::<u64>()) else {
        eprintln!("bench: --attached-rows N (iterations per row)");
        std::process::exit(2);
    };
    let per_round = (n / ROUNDS).max(1);
    let mut rows: Vec<RowResult> = Vec::new();
    for _ in 0..ROUNDS {
        let round = [
            untraced("syscall", loops::syscall, per_round),
            c_row(per_round),
            traced("default", loops::hit, loops::HIT, At::Auto, per_round),
            traced("forced-next", loops::hit, loops::HIT, At::Next, per_round),
        ];
        for r in round {
            match rows.iter_mut().find(|x| x.name == r.name) {
                Some(best) => best.keep_better(r),
                None => rows.push(r),
            }
        }
    }
    let rows: Vec<_> = rows.iter().map(json).collect();
    let out =
        serde_json::json!({ "iterations": per_round * ROUNDS, "rounds": ROUNDS, "rows": rows });
    println!("{out}");
    std::process::exit(0)
}

impl RowResult {
    /// Keeps the faster round; an error in any round stays, and hits add up.
    fn keep_better(&mut self, other: RowResult) {
        let hits = match (self.hits, other.hits) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        let error = self.error.take().or(other.error.clone());
        if other.mops > self.mops {
            *self = other;
        }
        self.hits = hits;
        self.error = error;
    }
}

fn json(r: &RowResult) -> serde_json::Value {
    serde_json::json!({
        "name": r.name,
        "mops": r.mops,
        "attach": r.attach,
        "hits": r.hits,
        "site": r.site,
        "error": r.error,
    })
}

fn failed(name: &'static str, error: String) -> RowResult {
    RowResult {
        name,
        mops: 0.0,
        attach: "none".into(),
        hits: None,
        site: None,
        error: Some(error),
    }
}

fn timed(run: &dyn Fn(u64), n: u64) -> f64 {
    let start = Instant::now();
    run(std::hint::black_box(n));
    n as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn untraced(name: &'static str, run: fn(u64), n: u64) -> RowResult {
    RowResult {
        name,
        mops: timed(&run, n),
        attach: "none".into(),
        hits: None,
        site: None,
        error: None,
    }
}

fn c_row(n: u64) -> RowResult {
    match csdt::get() {
        Ok(c) => measure("c-sdt-nop", &|k| c.run(k), &c.path, csdt::PROBE, At::Nop, n),
        Err(e) => failed("c-sdt-nop", e),
    }
}

fn traced(name: &'static str, run: fn(u64), probe: (&str, &str), at: At, n: u64) -> RowResult {
    match std::fs::canonicalize("/proc/self/exe") {
        Ok(exe) => measure(name, &run, &exe, probe, at, n),
        Err(e) => failed(name, format!("/proc/self/exe: {e}")),
    }
}

/// Attach, one warm-up hit (the one that optimizes a long nop), `n` timed
/// iterations, the count and the site's bytes, detach.
fn measure(
    name: &'static str,
    run: &dyn Fn(u64),
    target: &std::path::Path,
    probe: (&str, &str),
    at: At,
    n: u64,
) -> RowResult {
    let attached = match attach::attach(std::process::id(), target, probe, at) {
        Ok(a) => a,
        Err(e) => return failed(name, e),
    };
    run(1);
    let mops = timed(run, n);
    let hits = attached.count().map(|h| h.saturating_sub(1));
    let site = attached.site_bytes().map(|b| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let attach = attached.describe.clone();
    let detached = attached.detach();
    let error = [
        hits.as_ref().err(),
        site.as_ref().err(),
        detached.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .next()
    .cloned();
    RowResult {
        name,
        mops,
        attach,
        hits: hits.ok(),
        site: site.ok(),
        error,
    }
}
