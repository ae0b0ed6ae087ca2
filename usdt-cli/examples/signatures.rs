//! A provider with every kind of argument, each recorded with its name and
//! type in `.usdt.signatures`: what `usdt list`, `usdt trace` and
//! `usdt bpftrace` show, for the tests in tests/signature.rs.
//! `signatures [N]` fires each probe N times (default 1), then prints
//! `reference 0x...` (the address passed to `kinds:pointers`).

use std::ffi::CString;
use std::time::Duration;

/// A user type passed as its field.
#[derive(usdt::ProbeArg)]
pub struct ConnId(u64);

/// A user type passed as its field, with a hand-written impl.
pub struct Port(u16);

impl usdt::ProbeArg for Port {
    const SIZE: i8 = 2;
    const KIND: u8 = usdt::kind::UNSIGNED | 2;
    fn value(&self) -> u64 {
        self.0.into()
    }
}

#[usdt::provider]
mod kinds {
    fn ints(a: u8, b: i8, c: u16, d: i16, e: u32, f: i32, g: u64, h: i64, i: usize, j: isize) {}
    fn misc(flag: bool, letter: char, half: f32, third: f64) {}
    fn text(id: u64, path: &str, owned: String, c: &CStr, cs: CString) {}
    fn pointers(raw: *const u8, reference: &u32) {}
    fn bytes(data: &[u8], owned: Vec<u8>) {}
    fn times(rtt: Duration, long: std::time::Duration) {}
    fn user(conn: ConnId, port: Port) {}
    fn order__placed(id: u64, item: &str) {}
    fn empty() {}
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let value = 7u32;
    // bpftrace's str() reads only resident pages: touch the literal.
    let c_string = std::hint::black_box(c"c-string");
    std::hint::black_box(c_string.to_bytes());
    for _ in 0..n {
        kinds::ints!(
            255,
            -1,
            65535,
            -2,
            4_000_000_000,
            -3,
            u64::MAX,
            i64::MIN,
            9,
            -9
        );
        kinds::misc!(true, 'é', 1.5, -2.0);
        kinds::text!(
            1,
            "/index.html",
            String::from("a \"quoted\"\n"),
            c_string,
            CString::new("owned").unwrap()
        );
        kinds::pointers!(0x1234 as *const u8, &value);
        kinds::bytes!(&[1, 2, 0xff], vec![0xab; 70]);
        kinds::times!(Duration::from_micros(1500), Duration::MAX);
        kinds::user!(ConnId(42), Port(443));
        kinds::order__placed!(5, "book");
        kinds::empty!();
    }
    println!("reference {:#x}", core::ptr::from_ref(&value) as usize);
    // A tracer that reads memory after the hit (`usdt trace --no-kernel-fetch`)
    // finds the process, and its read-only data, still there.
    std::thread::sleep(Duration::from_millis(300));
}
