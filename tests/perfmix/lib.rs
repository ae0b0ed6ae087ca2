//! Rust probes linked into one binary with C `<sys/sdt.h>` probes
//! (`probes.c`), for `tests/perf.rs`: a Rust program (`rust_first.rs`, its
//! Rust objects first on the linker's command line) and a C program
//! (`c_first.c`, its C objects first) call both.

#[usdt::provider]
mod rmix {
    /// Fired on every iteration.
    fn eager(i: u64, n: u64) {}
    /// Lazy: its closure runs only while the semaphore is raised.
    fn lazy(i: u64, neg: i32) {}
}

/// Fires `rmix:eager` and `rmix:lazy` `n` times each; returns how often the
/// lazy probe's closure ran.
#[no_mangle]
pub extern "C" fn perfmix_rust(n: u64) -> u64 {
    let mut runs = 0;
    for i in 0..n {
        rmix::eager!(i, n);
        rmix::lazy!(|| {
            runs += 1;
            (i, -(i as i32))
        });
    }
    runs
}
