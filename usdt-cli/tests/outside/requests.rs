//! A server's requests, written as a user would write them, outside the
//! workspace: its own package that depends on the facade (`usdt-probes`,
//! library `usdt`) by path, for `tests/filters.rs` and `tests/serve.rs`.
//! Each request fires `http:request_start(id, path)`, then
//! `http:request_done(id, status, bytes)`.
//!
//! - `requests count N [FILE]`: N requests, their paths, statuses and
//!   sizes from a fixed pseudo-random sequence, done at once; one line per
//!   request, `request ID PATH STATUS BYTES`, on stdout or in FILE (apart
//!   from a tracer's lines, which would interleave with them).
//! - `requests burst N`: the same N requests as fast as they go, printing
//!   only `fired N` at the end.
//! - `requests latency ROUNDS [--wait]`: prints `ready PID` (with `--wait`,
//!   then waits for a line on stdin); then ROUNDS rounds of one request per
//!   path of [`WAITS`], each done after its path's wait (a sleep between
//!   start and done, on one thread); then per path `path PATH requests N
//!   median_ns M`, the median of the times it measured itself around the
//!   two probes.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

#[usdt::provider]
mod http {
    /// A request for `path` starts.
    fn request_start(id: u64, path: &str) {}
    /// It is done: its status, and the bytes sent (negative: an error).
    fn request_done(id: u64, status: u16, bytes: i64) {}
}

const PATHS: [&str; 5] = [
    "/api/users",
    "/api/orders",
    "/static/app.js",
    "/static/logo.png",
    "/health",
];
const STATUSES: [u16; 6] = [200, 200, 201, 404, 500, 503];

/// The paths of `latency` mode and their waits, in microseconds: each in
/// the middle of a log2 bucket of nanoseconds, so that its time stays in
/// that bucket on a loaded machine.
const WAITS: [(&str, u64); 4] = [
    ("/health", 300),
    ("/api/users", 1_500),
    ("/api/orders", 6_000),
    ("/static/app.js", 24_000),
];

/// Request `id`'s path, status and bytes, from a xorshift of the id.
fn request(id: u64) -> (&'static str, u16, i64) {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let path = PATHS[(next() % PATHS.len() as u64) as usize];
    let status = STATUSES[(next() % STATUSES.len() as u64) as usize];
    let bytes = (next() % 4000) as i64 - 1000;
    (path, status, bytes)
}

fn fire(n: u64, mut out: Option<&mut dyn Write>) {
    for id in 0..n {
        let (path, status, bytes) = request(id);
        http::request_start!(id, path);
        http::request_done!(id, status, bytes);
        if let Some(out) = &mut out {
            writeln!(out, "request {id} {path} {status} {bytes}").expect("write the requests");
        }
    }
}

fn latency(rounds: u64) {
    let mut took: Vec<Vec<u64>> = vec![vec![]; WAITS.len()];
    let mut id = 0;
    for _ in 0..rounds {
        for (i, (path, wait)) in WAITS.iter().enumerate() {
            let started = Instant::now();
            http::request_start!(id, path);
            std::thread::sleep(Duration::from_micros(*wait));
            http::request_done!(id, 200, 0);
            took[i].push(started.elapsed().as_nanos() as u64);
            id += 1;
        }
    }
    for ((path, _), times) in WAITS.iter().zip(&mut took) {
        times.sort_unstable();
        let median = times.get(times.len() / 2).copied().unwrap_or(0);
        println!("path {path} requests {} median_ns {median}", times.len());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize| -> u64 { args.get(i).and_then(|a| a.parse().ok()).unwrap_or(10) };
    match args.first().map(String::as_str) {
        Some("count") => match args.get(2) {
            Some(file) => {
                let file = std::fs::File::create(file).expect("create the file");
                fire(n(1), Some(&mut std::io::BufWriter::new(file)));
            }
            None => fire(n(1), Some(&mut std::io::stdout().lock())),
        },
        Some("burst") => {
            fire(n(1), None);
            println!("fired {}", n(1));
        }
        Some("latency") => {
            println!("ready {}", std::process::id());
            if args.get(2).map(String::as_str) == Some("--wait") {
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
            }
            latency(n(1));
        }
        other => {
            eprintln!("requests: count N, burst N or latency ROUNDS [--wait], not {other:?}");
            std::process::exit(2);
        }
    }
}
