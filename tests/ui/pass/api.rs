//! Every accepted form of the API.
#![deny(warnings)]

use std::ffi::{CStr, CString};

#[usdt::provider]
mod http {
    /// Doc comments are kept.
    pub fn request_start(id: u64, path: &str) {}
    pub(crate) fn request_done(id: u64, status: u16, nanos: u64) {}
    fn tick() {}
    fn one(x: i32) {}
}

#[usdt::provider(name = "renamed")]
pub mod with_a_name {
    fn every_type(
        a: u8,
        b: i8,
        c: bool,
        d: char,
        e: f32,
        f: f64,
        g: *const u8,
        h: *mut u32,
        i: &u64,
        j: &CStr,
        k: CString,
        l: String,
    ) {
    }
    fn more(a: usize, b: isize, c: std::ffi::c_int, d: &mut u8, e: &'static str, _f: u16) {}
}

mod elsewhere {
    pub fn fire(id: u64) {
        // The probe macros are reachable from anywhere in the crate.
        crate::http::request_start!(id, "/");
        crate::http::tick!();
    }
}

fn generic<T: Copy + Into<u64>>(v: T) {
    http::request_done!(v.into(), 200, 0);
}

fn fallible() -> Option<u64> {
    let mut n = 0;
    // `return` and `?` inside a lazy closure belong to the closure.
    http::request_done!(|| {
        n += 1;
        (n, 200, 1)
    });
    http::one!(move || 5);
    Some(n)
}

fn main() {
    let id = 7u64;
    http::request_start!(id, &String::from("/a"));
    http::request_start!(id, "/b",);
    http::request_done!(|| (id, 404, 10));
    http::request_done!(id, 200, 3);
    http::tick!();
    http::tick!(|| ());
    http::one!(-1);
    http::one!(|| 1 + 1);
    if http::request_done_enabled() || http::tick_enabled() {
        unreachable!("nothing is attached in a compile test");
    }
    let mut word = 5u32;
    let mut byte = 1u8;
    with_a_name::every_type!(
        1,
        -1,
        true,
        'x',
        1.0,
        2.0,
        std::ptr::null(),
        &mut word,
        &id,
        c"c",
        CString::new("owned").unwrap(),
        String::from("s")
    );
    with_a_name::more!(1, -1, -5, &mut byte, "static", 3);
    let cstr: &CStr = c"x";
    usdt::probe!(adhoc, values, 1u8, -2i64, true, 'c', 1.5f64, std::ptr::from_ref(&id), cstr);
    usdt::probe!(adhoc, pointers, std::ptr::null::<u8>(), &mut word as *mut u32);
    usdt::probe!(adhoc, nothing);
    elsewhere::fire(id);
    generic(1u8);
    generic(2u32);
    let _ = fallible();
}
