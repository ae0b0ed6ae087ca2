//! A busy multithreaded program for the load test (`tests/load.rs`): N
//! threads (8 by default) each run a loop that fires the lazy probe
//! `load:tick` every iteration, while a tracer attaches and detaches.
//!
//! - The closure counts its runs per thread and returns (thread, iteration,
//!   `checksum(thread, iteration)`), so that a tracer reading the arguments
//!   can tell a wrong one.
//! - Around the site the loop keeps many values live (as in
//!   `examples/redzone.rs`); each thread's result is checked against the
//!   same loop run again without the probe for the same number of
//!   iterations.
//!
//! `load [THREADS]` prints `started threads=N tids=T0,T1,...` (the workers'
//! thread ids), then answers commands on stdin, one per line:
//! - `runs`: `runs=N per=R0,R1,...`, the closure's runs so far, all threads
//!   and each.
//! - `stop`: stops the threads; one `thread=T iters=N runs=R result=X
//!   reference=Y` line each, then `stopped runs=N`.
//! - `burst N`: every thread fires the probe N more times; `burst runs=R
//!   enabled=BOOL`.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;

#[usdt::provider]
mod load {
    /// One loop iteration of thread `thread`; `check` is
    /// `checksum(thread, iteration)`.
    fn tick(thread: u64, iteration: u64, check: u64) {}
}

/// What the third argument must be.
pub fn checksum(thread: u64, iteration: u64) -> u64 {
    (thread << 56 ^ iteration)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
}

/// Runs the loop until `stop` is set or `limit` iterations are done;
/// returns the iterations done and the result. `runs` counts closure runs.
#[inline(never)]
fn work<const PROBE: bool>(
    thread: u64,
    limit: u64,
    stop: &AtomicBool,
    runs: &AtomicU64,
) -> (u64, u64) {
    let seed = std::hint::black_box(0x1234_5678_9abc_def0 ^ thread);
    let (mut a, mut b, mut c, mut d) = (seed, seed ^ 0x9e37_79b9, seed.rotate_left(13), !seed);
    let (mut e, mut f, mut g, mut h) = (a ^ 1, b ^ 2, c ^ 3, d ^ 4);
    let mut lanes = [seed; 8];
    let mut i = 0;
    while i < limit && !stop.load(Ordering::Relaxed) {
        lanes[(a & 7) as usize] ^= b;
        a = a.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(b);
        b ^= a >> 17;
        c = c.rotate_left(7) ^ b;
        d = d.wrapping_add(c ^ i);
        e = e.wrapping_mul(d | 1);
        f ^= e.rotate_right(11);
        g = g.wrapping_add(f);
        h ^= g.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if PROBE {
            load::tick!(|| {
                runs.fetch_add(1, Ordering::Relaxed);
                (thread, i, checksum(thread, i))
            });
        }
        a = a.wrapping_add(h);
        b = b.wrapping_sub(g);
        c ^= f;
        d = d.rotate_left((e & 63) as u32);
        h = h.wrapping_add(lanes[(g & 7) as usize]);
        i += 1;
    }
    (
        i,
        a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ lanes.iter().fold(0, |x, l| x ^ l),
    )
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Runs `n` probe-firing iterations on each of `threads` threads; returns
/// the closure's runs.
fn burst(threads: u64, n: u64) -> u64 {
    let runs = AtomicU64::new(0);
    let never = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (runs, never) = (&runs, &never);
            s.spawn(move || work::<true>(t, n, never, runs));
        }
    });
    runs.into_inner()
}

fn main() {
    let threads: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let stop = Arc::new(AtomicBool::new(false));
    let runs: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let (tids, tid) = channel();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (stop, runs, tids) = (stop.clone(), runs.clone(), tids.clone());
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tids.send((t, unsafe { libc::gettid() })).unwrap();
                work::<true>(t, u64::MAX, &stop, &runs[t as usize])
            })
        })
        .collect();
    let mut tids: Vec<_> = tid.iter().take(threads as usize).collect();
    tids.sort();
    let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(",");
    let total = |runs: &[AtomicU64]| runs.iter().map(|r| r.load(Ordering::Relaxed)).sum::<u64>();
    say(&format!(
        "started threads={threads} tids={}",
        list(&mut tids.iter().map(|(_, tid)| tid.to_string()))
    ));
    let mut workers = Some(workers);
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["runs"] => {
                let per: Vec<u64> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                say(&format!(
                    "runs={} per={}",
                    per.iter().sum::<u64>(),
                    list(&mut per.iter().map(u64::to_string))
                ));
            }
            ["stop"] => {
                stop.store(true, Ordering::Relaxed);
                let never = AtomicBool::new(false);
                let unused = AtomicU64::new(0);
                for (t, worker) in workers.take().unwrap_or_default().into_iter().enumerate() {
                    let (iters, result) = worker.join().unwrap();
                    let (_, reference) = work::<false>(t as u64, iters, &never, &unused);
                    say(&format!(
                        "thread={t} iters={iters} runs={} result={result} reference={reference}",
                        runs[t].load(Ordering::Relaxed)
                    ));
                }
                say(&format!("stopped runs={}", total(&runs)));
            }
            ["burst", n] => {
                let runs = burst(threads, n.parse().unwrap());
                say(&format!(
                    "burst runs={runs} enabled={}",
                    load::tick_enabled()
                ));
            }
            _ => {
                eprintln!("load: unknown command {line:?}");
                std::process::exit(2);
            }
        }
    }
}
