//! One probe reached through three call paths, each a known number of
//! times: what `usdt count --by stack` and `usdt trace --stack` show.
//!
//! `stacks STATIC API JOBS` fires `app:respond` STATIC times through
//! `serve_static`, API times through `serve_api` and `authorize`, and JOBS
//! times through `run_job` (default 3, 5 and 7). With `--wait` first, it
//! prints `ready PID`, waits for a line on its standard input before it
//! fires (for a tracer to attach meanwhile), and for the input to close
//! before it exits (for the tracer to read its memory maps meanwhile).
//!
//! Built in release (no frame pointers), its stacks unwind only with the
//! DWARF call frame information in `.eh_frame`:
//!
//! ```text
//! sudo usdt count --by stack app:respond -- ./target/release/examples/stacks 3 5 7
//! ```

use std::hint::black_box;

#[usdt::provider]
mod app {
    /// A response of this kind (1 static, 2 API, 3 job) goes out.
    fn respond(kind: u64) {}
}

/// Where every path ends: the probe.
#[inline(never)]
fn respond(kind: u64) -> u64 {
    app::respond!(kind);
    black_box(kind) + 1
}

/// Path 1: `main` -> `serve_static` -> `respond`.
#[inline(never)]
fn serve_static(n: u64) -> u64 {
    (0..black_box(n)).map(|_| respond(1)).sum()
}

/// Path 2: `main` -> `serve_api` -> `authorize` -> `respond`.
#[inline(never)]
fn serve_api(n: u64) -> u64 {
    (0..black_box(n)).map(|_| authorize(2)).sum()
}

/// Adds to what `respond` returns, so that it calls it (no tail call).
#[inline(never)]
fn authorize(kind: u64) -> u64 {
    respond(black_box(kind)) * 2
}

/// Path 3: `main` -> `run_job` -> `respond`.
#[inline(never)]
fn run_job(n: u64) -> u64 {
    (0..black_box(n)).map(|_| respond(3)).sum()
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let wait = args.first().is_some_and(|a| a == "--wait");
    let mut input = std::io::stdin().lock();
    if wait {
        args.remove(0);
        println!("ready {}", std::process::id());
        let _ = std::io::BufRead::read_line(&mut input, &mut String::new());
    }
    let count =
        |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (a, b, c) = (count(0, 3), count(1, 5), count(2, 7));
    let sum = serve_static(a) + serve_api(b) + run_job(c);
    println!("fired {a} {b} {c} ({sum})");
    if wait {
        let _ = std::io::Read::read_to_end(&mut input, &mut vec![]);
    }
}
