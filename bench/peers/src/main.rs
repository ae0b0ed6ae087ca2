//! The bench loop with a probe of crates.io `usdt` 0.6 (oxidecomputer), in a
//! process of its own: that package is also named `usdt`, so it cannot share
//! a dependency graph with ours. `bench/` (package usdt-bench) builds this binary, starts
//! it, attaches to its probe by pid, and asks it to run the loop.
//!
//! ```text
//! usdt-bench-peers --serve                   stdin: `run ROW N`, stdout: elapsed ns
//! usdt-bench-peers --callgrind-child ROW N   runs ROW's loop N times, then exits
//! ```
//!
//! Rows: `bare` (the loop alone) and `oxide-usdt` (the loop with `oxbench:hit`,
//! a semaphore-gated `nop`, arguments `(i, n)`).

use std::hint::black_box;
use std::io::{BufRead, Write};
use std::time::Instant;

usdt::dtrace_provider!("bench.d");

/// The loop with no probe: the empty asm keeps the counter alive at no cost.
#[inline(never)]
fn bare_loop(n: u64) {
    for i in 0..n {
        // SAFETY: an empty template; it only names a register.
        unsafe { std::arch::asm!("/* {0} */", in(reg) i, options(nomem, preserves_flags)) };
    }
}

/// The loop with oxidecomputer's probe: its macro reads the semaphore and
/// runs the closure and the `nop` only while a tracer is attached.
#[inline(never)]
fn oxide_loop(n: u64) {
    for i in 0..n {
        oxbench::hit!(|| (i, n));
    }
}

fn run(row: &str, n: u64) -> Result<(), String> {
    match row {
        "bare" => bare_loop(n),
        "oxide-usdt" => oxide_loop(n),
        _ => return Err(format!("unknown row `{row}`")),
    }
    Ok(())
}

fn serve() -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {}", std::process::id()).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["run", row, n] = words[..] else {
            return Err(format!("expected `run ROW N`, got `{line}`"));
        };
        let n: u64 = n.parse().map_err(|e| format!("`{n}`: {e}"))?;
        let start = Instant::now();
        run(row, black_box(n))?;
        let ns = start.elapsed().as_nanos();
        writeln!(out, "{ns}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = usdt::register_probes() {
        eprintln!("usdt-bench-peers: register_probes: {e}");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args[..] {
        ["--serve"] => serve(),
        ["--callgrind-child", row, n] => match n.parse() {
            Ok(n) => run(row, black_box(n)),
            Err(e) => Err(format!("`{n}`: {e}")),
        },
        _ => Err("usage: usdt-bench-peers --serve | --callgrind-child ROW N".into()),
    };
    if let Err(e) = result {
        eprintln!("usdt-bench-peers: {e}");
        std::process::exit(2);
    }
}
