//! A shared library (`cdylib`) with probes, for `tests/cdylib.rs`: a C
//! program (`main.c`) and a Rust program (`dlopen.rs`) load it with `dlopen`
//! and call `usdt_cdylib_fire`.

#[usdt::provider]
mod cdylib {
    /// Fired on every iteration, traced or not.
    fn eager(i: u64) {}
    /// Lazy: its closure runs only while the semaphore is raised.
    fn lazy(i: u64, square: u64) {}
}

/// Fires `cdylib:eager` and `cdylib:lazy` `n` times each; returns how often
/// the lazy probe's closure ran.
#[no_mangle]
pub extern "C" fn usdt_cdylib_fire(n: u64) -> u64 {
    let mut runs = 0;
    for i in 0..n {
        cdylib::eager!(i);
        cdylib::lazy!(|| {
            runs += 1;
            (i, i.wrapping_mul(i))
        });
    }
    runs
}

/// Whether a tracer raised `cdylib:lazy`'s semaphore.
#[no_mangle]
pub extern "C" fn usdt_cdylib_lazy_enabled() -> bool {
    cdylib::lazy_enabled()
}
