//! The red-zone check: a leaf function keeps many values live across a probe
//! site. When the kernel optimizes a uprobe on the site's nop5, the site
//! becomes a `call` that pushes below the stack pointer; had the compiler kept
//! values in the red zone there, the traced result would differ.
//!
//! `redzone N` waits for a line on stdin (time for a tracer to attach), runs
//! the mix N times with the probe and once more without it, and prints
//! `result=R reference=R' trampoline=BOOL`.

use std::io::BufRead;

/// Eight values of state and eight lanes, all live across the site, plus
/// the counter and the bound.
#[inline(never)]
fn mix<const PROBE: bool>(n: u64, seed: u64) -> u64 {
    let (mut a, mut b, mut c, mut d) = (seed, seed ^ 0x9e37_79b9, seed.rotate_left(13), !seed);
    let (mut e, mut f, mut g, mut h) = (a ^ 1, b ^ 2, c ^ 3, d ^ 4);
    // Indexed by data, so it lives in memory: in a leaf function, the red
    // zone is where a compiler allowed to use it would put it.
    let mut lanes = [seed; 8];
    let mut i = 0;
    while i < n {
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
            usdt::probe!(redzone, site, i, a);
        }
        a = a.wrapping_add(h);
        b = b.wrapping_sub(g);
        c ^= f;
        d = d.rotate_left((e & 63) as u32);
        h = h.wrapping_add(lanes[(g & 7) as usize]);
        i += 1;
    }
    a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ lanes.iter().fold(0, |x, l| x ^ l)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let seed = std::hint::black_box(0x1234_5678_9abc_def0);
    let result = mix::<true>(n, seed);
    let reference = mix::<false>(n, seed);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    println!(
        "result={result} reference={reference} trampoline={}",
        maps.contains("[uprobes-trampoline]")
    );
}
