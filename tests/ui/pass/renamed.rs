//! `crate = "..."` names the facade for a program that renames the
//! dependency (here through `extern crate`, as Cargo.toml's `package =` would).
#![deny(warnings)]

extern crate usdt as my_usdt;

#[my_usdt::provider(crate = "my_usdt")]
mod http {
    fn request_start(id: u64, path: &str, body: &[u8], conn: ConnId) {}
    fn owned(name: String, raw: Vec<u8>, c: std::ffi::CString) {}
}

#[derive(my_usdt::ProbeArg)]
#[usdt(crate = "my_usdt")]
struct ConnId(u64);

/// A facade reached through a module of the program: any path works.
mod facade {
    pub use my_usdt::__private;
}

#[my_usdt::provider(name = "db", crate = "crate::facade")]
mod store {
    fn get(key: &str) {}
}

#[derive(my_usdt::ProbeArg)]
#[usdt(crate = "crate::facade")]
struct Key {
    id: u32,
}

fn main() {
    http::request_start!(1, "/", b"body", ConnId(7));
    http::owned!(|| (String::from("a"), vec![1, 2], c"c".to_owned()));
    store::get!("k");
    my_usdt::probe!(http, tick, 1u64);
    let _ = Key { id: 3 };
    assert!(!http::request_start_enabled());
}
