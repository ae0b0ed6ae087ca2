//! Probes in code the linker removes: `usdt_gc_removed` is compiled (a
//! `#[no_mangle]` function is always code-generated) but never called, so
//! `--gc-sections` (rustc's default) drops it, and its notes must go with it.
//! A note left behind would point at address 0 or at a stale offset, and a
//! tracer attaching to every site of a probe would fail or patch the wrong
//! bytes.
//!
//! `gc N` fires `gc:kept` N times and prints `kept N`.

#[usdt::provider]
mod gc {
    fn kept(i: u64) {}
    fn removed(i: u64) {}
}

/// Never called: the linker removes it, with its two sites.
#[no_mangle]
pub extern "C" fn usdt_gc_removed(i: u64) {
    gc::removed!(i);
    usdt::probe!(gc, removed_adhoc, i);
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for i in 0..n {
        gc::kept!(i);
    }
    println!("kept {n}");
}
