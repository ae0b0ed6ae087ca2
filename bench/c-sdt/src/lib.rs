//! The bench loop with a C `<sys/sdt.h>` probe (`cbench:hit`, two arguments,
//! no semaphore), compiled by `build.rs`. Benchmark-only: nothing else links it.

/// Runs `for (i = 0; i < n; i++) STAP_PROBE2(cbench, hit, i, n);`.
pub fn sdt_loop(n: u64) {
    // SAFETY: `usdt_bench_c_loop` only loops and reads its argument.
    unsafe { usdt_bench_c_loop(n) }
}

/// Runs the same loop without a probe.
pub fn bare_loop(n: u64) {
    // SAFETY: `usdt_bench_c_bare` only loops and reads its argument.
    unsafe { usdt_bench_c_bare(n) }
}

/// The probe's provider name in the note.
pub const PROVIDER: &str = "cbench";
/// The probe's name in the note.
pub const NAME: &str = "hit";

extern "C" {
    fn usdt_bench_c_loop(n: u64);
    fn usdt_bench_c_bare(n: u64);
}
