//! Fires probes of every argument type, extremes included, a 12-argument
//! probe and string probes, for the tests of `usdt trace` (tests/trace.rs).
//!
//! - `argtypes once` fires everything once, prints `pointers A B C` (the
//!   addresses passed to `argtypes:pointers`) and exits.
//! - `argtypes phases` prints `waiting`, waits for a line on stdin (sent once
//!   the tracers are attached), then does what `once` does, fires
//!   `argtypes:done` and waits for the end of its input before it exits.
//!
//! An owned `CString` argument cannot be read after the fact: its `Drop`
//! zeroes the first byte right after the probe fires, and its bytes are on
//! the heap, outside the stack copy a sample carries.

use std::ffi::CString;
use std::io::{Read, Write};

#[usdt::provider]
mod argtypes {
    fn unsigned(a: u8, b: u16, c: u32, d: u64, e: usize) {}
    fn signed(a: i8, b: i16, c: i32, d: i64, e: isize) {}
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
    fn hot(i: u64, neg: i64) {}
    fn done() {}
}

fn fire_all() {
    argtypes::unsigned!(u8::MAX, u16::MAX, u32::MAX, u64::MAX, usize::MAX);
    argtypes::unsigned!(0, 0, 0, 0, 0);
    argtypes::signed!(i8::MIN, i16::MIN, i32::MIN, i64::MIN, isize::MIN);
    argtypes::signed!(i8::MAX, i16::MAX, i32::MAX, i64::MAX, -1);
    argtypes::other!(true, false, 'é', 1.5, -2.0);
    let long = "x".repeat(300);
    // bpftrace's str() reads only resident pages: touch the literal.
    let c_string = std::hint::black_box(c"c string");
    std::hint::black_box(c_string.to_bytes());
    argtypes::strings!(
        "hello",
        String::from("tab\there \"quoted\""),
        c_string,
        CString::new("owned c string").unwrap()
    );
    argtypes::strings!(&long, String::new(), c"", CString::default());
    let bytes = *b"bytes";
    let mut word = 7u32;
    let value = 42u64;
    println!(
        "pointers {} {} {}",
        bytes.as_ptr() as u64,
        &value as *const u64 as u64,
        &mut word as *mut u32 as u64
    );
    std::io::stdout().flush().unwrap();
    argtypes::pointers!(bytes.as_ptr(), &value, &mut word);
    argtypes::twelve!(
        u64::MAX,
        i64::MIN,
        u32::MAX,
        i32::MIN,
        u16::MAX,
        i16::MIN,
        u8::MAX,
        i8::MIN,
        true,
        'z',
        usize::MAX,
        isize::MIN
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("once") => fire_all(),
        Some("phases") => {
            println!("waiting");
            std::io::stdout().flush().unwrap();
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            fire_all();
            argtypes::done!();
            let mut rest = vec![];
            let _ = std::io::stdin().read_to_end(&mut rest);
        }
        Some("hot") => {
            let n: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
            for i in 0..n {
                argtypes::hot!(i, -(i as i64));
            }
        }
        _ => {
            eprintln!("usage: argtypes once|phases|hot N");
            std::process::exit(2);
        }
    }
}
