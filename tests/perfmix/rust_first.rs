//! `rust_first N`: fires the Rust probes, then the C ones, `N` times each.

extern "C" {
    fn perfmix_c(n: u64);
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let runs = perfmix::perfmix_rust(n);
    // SAFETY: `perfmix_c` (probes.c) only loops and fires probes.
    unsafe { perfmix_c(n) };
    println!("fired {n} lazy={runs}");
}
