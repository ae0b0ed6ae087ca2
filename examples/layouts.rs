//! A probe site of whichever layout this build emits (`nop; nop5; nop10` by
//! default, `nop; nop5` with the `nop5` feature, `nop; nop10` with
//! `nop10`), for the tests that attach at each of its instructions.
//!
//! `layouts N` fires `lay:tick` N times (argument: the iteration) and
//! prints the sum of the arguments. `layouts N wait` prints `ready`, waits
//! for a line on stdin, fires, prints the sum, and waits for another line
//! before it exits (so that a test can read the site while attached).

use std::io::BufRead;

#[usdt::provider]
mod lay {
    fn tick(i: u64) {}
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let wait = args.next().as_deref() == Some("wait");
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    if wait {
        println!("ready {}", std::process::id());
        let _ = stdin.read_line(&mut line);
    }
    let mut sum = 0u64;
    for i in 0..n {
        lay::tick!(i);
        sum = sum.wrapping_add(std::hint::black_box(i));
    }
    println!("sum {sum} layout {}", usdt::SITE_LAYOUT);
    if wait {
        let _ = stdin.read_line(&mut line);
    }
}
