//! A program with Rust probes for the tests of the `usdt` command
//! (tests/attach.rs, tests/cli.rs).
//!
//! `traced EAGER LAZY ADHOC` fires `traced:eager` EAGER times, `traced:lazy`
//! LAZY times and `traced:adhoc` ADHOC times, then prints `evaluated N`: how
//! often the lazy probe's closure ran.
//!
//! `traced serve` prints `ready PID`, then for each line `EAGER LAZY ADHOC` on
//! stdin fires as above and prints `evaluated N` (a running total); it exits
//! at the end of its input.

use std::io::BufRead;
use std::sync::atomic::{AtomicU64, Ordering};

#[usdt::provider]
mod traced {
    fn eager(i: u64, neg: i32) {}
    fn lazy(i: u64) {}
}

static EVALUATED: AtomicU64 = AtomicU64::new(0);

fn fire(eager: u64, lazy: u64, adhoc: u64) {
    for i in 0..eager {
        traced::eager!(i, -(i as i32));
    }
    for i in 0..lazy {
        traced::lazy!(|| {
            EVALUATED.fetch_add(1, Ordering::Relaxed);
            i
        });
    }
    for i in 0..adhoc {
        usdt::probe!(traced, adhoc, i);
    }
    println!("evaluated {}", EVALUATED.load(Ordering::Relaxed));
}

fn numbers(words: &[&str]) -> [u64; 3] {
    let n = |i: usize| words.get(i).and_then(|w| w.parse().ok()).unwrap_or(0);
    [n(0), n(1), n(2)]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        println!("ready {}", std::process::id());
        for line in std::io::stdin().lock().lines() {
            let line = line.unwrap_or_default();
            let [e, l, a] = numbers(&line.split_whitespace().collect::<Vec<_>>());
            fire(e, l, a);
        }
        return;
    }
    let [e, l, a] = numbers(&args.iter().map(String::as_str).collect::<Vec<_>>());
    fire(e, l, a);
}
