//! Fires a probe of every supported argument type, extremes included, for the
//! tests that read them back with bpftrace and gdb.
//!
//! `types once` fires everything once and exits. `types phases` runs the
//! attach protocol of `tests/bpftrace.rs`: it fires the lazy probe untraced,
//! waits for a line on stdin (sent once the tracer has attached every probe),
//! fires everything while traced, fires `types:done`, waits for the tracer to
//! leave and fires the lazy probe again, reporting how often the lazy closure
//! ran in each phase.

use std::ffi::CString;
use std::io::Write;
use std::time::{Duration, Instant};

#[usdt::provider]
mod types {
    /// Unsigned integers of every width.
    fn unsigned(a: u8, b: u16, c: u32, d: u64, e: usize) {}
    fn signed(a: i8, b: i16, c: i32, d: i64, e: isize) {}
    /// `bool`, `char` and IEEE-754 bits of `f32`/`f64`.
    fn other(a: bool, b: bool, c: char, d: f32, e: f64) {}
    fn strings(a: &str, b: String, c: &CStr, d: CString) {}
    fn pointers(a: *const u8, b: &u64, c: *mut u32) {}
    fn twelve(
        a0: u64,
        a1: i64,
        a2: u32,
        a3: i32,
        a4: u16,
        a5: i16,
        a6: u8,
        a7: i8,
        a8: bool,
        a9: char,
        a10: usize,
        a11: isize,
    ) {
    }
    fn lazy(n: u64, s: &str) {}
    fn generic(v: u64) {}
    fn inlined(v: u64) {}
    fn done() {}
}

fn generic<T: Into<u64>>(v: T) {
    types::generic!(v.into());
}

#[inline(always)]
fn inlined(v: u64) {
    types::inlined!(v);
}

fn fire_all() {
    types::unsigned!(u8::MAX, 60000, u32::MAX, u64::MAX, usize::MAX);
    types::unsigned!(0, 0, 0, 0, 0);
    types::signed!(-1, i16::MIN, i32::MIN, i64::MIN, isize::MIN);
    types::signed!(i8::MAX, i16::MAX, i32::MAX, i64::MAX, -2);
    types::other!(true, false, 'é', 1.5, -2.0);
    let owned = String::from("owned string");
    let long = "x".repeat(300);
    types::strings!(
        "hello",
        owned,
        c"c string",
        CString::new("owned c string").unwrap()
    );
    types::strings!(&long, String::new(), c"", CString::default());
    let bytes = *b"bytes";
    let mut word = 7u32;
    let value = 42u64;
    println!(
        "pointers {} {} {}",
        bytes.as_ptr() as u64,
        &value as *const u64 as u64,
        &mut word as *mut u32 as u64
    );
    types::pointers!(bytes.as_ptr(), &value, &mut word);
    types::twelve!(
        u64::MAX,
        i64::MIN,
        u32::MAX,
        -5,
        60000,
        -300,
        200,
        -100,
        true,
        'z',
        12345,
        -12345
    );
    generic(1u8);
    generic(2u16);
    generic(3u32);
    inlined(1);
    inlined(2);
    inlined(3);
    inlined(4);
    inlined(5);
}

/// Fires the lazy probe `n` times; returns how often its closure ran.
fn fire_lazy(n: u64) -> u64 {
    let mut runs = 0;
    for i in 0..n {
        types::lazy!(|| {
            runs += 1;
            (i, "lazy")
        });
    }
    runs
}

fn wait_for(enabled: bool) {
    let start = Instant::now();
    while types::lazy_enabled() != enabled {
        if start.elapsed() > Duration::from_secs(60) {
            eprintln!("types: gave up waiting for lazy_enabled() == {enabled}");
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn say(line: &str) {
    println!("{line}");
    std::io::stdout().flush().unwrap();
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("once") => {
            fire_all();
            println!("lazy closure runs: {}", fire_lazy(3));
        }
        Some("phases") => {
            let runs = fire_lazy(100);
            say(&format!(
                "untraced runs={runs} enabled={}",
                types::lazy_enabled()
            ));
            // The tracer says when all its probes are attached.
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            wait_for(true);
            fire_all();
            let runs = fire_lazy(50);
            say(&format!(
                "traced runs={runs} enabled={}",
                types::lazy_enabled()
            ));
            types::done!();
            wait_for(false);
            let runs = fire_lazy(100);
            say(&format!(
                "detached runs={runs} enabled={}",
                types::lazy_enabled()
            ));
        }
        _ => {
            eprintln!("usage: types once|phases");
            std::process::exit(2);
        }
    }
}
