//! Requests that cross threads: `start` fires on the main thread, `done` on
//! a worker, with waits that alternate between 1 ms and 8 ms. `usdt latency
//! lat:start lat:done --key id` pairs them by id; keyed by thread, none pair.
//!
//! Before each request, `route` names its path (`/fast` or `/slow`).
//!
//! `latency N [--wait | --orphans M]`: prints `ready PID`, then (with
//! `--wait`, after a line on stdin; with `--orphans M`, after M starts that
//! never end, ids from 1,000,000) fires N requests, and prints
//! `pairs N sum_ns S below_4194304 K`: the sum of the durations it measured
//! itself, from just before `start` to just after `done`, and how many were
//! below 4,194,304 ns (2^22, the bucket boundary near 4.2 ms).

use std::io::BufRead;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[usdt::provider]
mod lat {
    /// A request starts.
    fn start(id: u64) {}
    /// It is done, on another thread.
    fn done(id: u64) {}
    /// Where it goes: `/fast` (even ids, 1 ms) or `/slow` (odd ids, 8 ms).
    fn route(id: u64, path: &str) {}
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let option = args.next();
    println!("ready {}", std::process::id());
    match option.as_deref() {
        Some("--wait") => {
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
        }
        Some("--orphans") => {
            let m: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            for id in 1_000_000..1_000_000 + m {
                lat::start!(id);
            }
        }
        _ => {}
    }
    let (to_worker, requests) = mpsc::channel::<(u64, Instant)>();
    let (to_main, finished) = mpsc::channel::<Duration>();
    let worker = std::thread::spawn(move || {
        for (id, started) in requests {
            let pause = if id % 2 == 0 { 1 } else { 8 };
            std::thread::sleep(Duration::from_millis(pause));
            lat::done!(id);
            if to_main.send(started.elapsed()).is_err() {
                return;
            }
        }
    });
    let mut sum = Duration::ZERO;
    let mut below = 0u64;
    for id in 0..n {
        lat::route!(id, if id % 2 == 0 { "/fast" } else { "/slow" });
        let started = Instant::now();
        lat::start!(id);
        to_worker.send((id, started)).expect("the worker runs");
        let took = finished.recv().expect("the worker answers");
        sum += took;
        below += u64::from(took.as_nanos() < 1 << 22);
    }
    drop(to_worker);
    worker.join().expect("the worker ends");
    println!("pairs {n} sum_ns {} below_4194304 {below}", sum.as_nanos());
}
