//! A web server's probes: `requests N` answers N made-up requests (default
//! 4), firing `http:request_start` and `http:request_done` for each.
//!
//! Trace it as root, from the repository's root:
//!
//! ```sh
//! usdt trace -- target/debug/examples/requests
//! usdt latency http:request_start http:request_done --key id -- target/debug/examples/requests 100
//! ```

use std::time::Instant;

#[usdt::provider]
mod http {
    /// A request arrived.
    fn request_start(id: u64, method: &str, path: &str) {}
    /// It was answered: its status and how long that took.
    fn request_done(id: u64, status: u16, elapsed: Duration) {}
}

const REQUESTS: [(&str, &str); 4] = [
    ("GET", "/"),
    ("GET", "/items/7"),
    ("POST", "/items"),
    ("GET", "/missing"),
];

fn handle(method: &str, path: &str) -> u16 {
    match (method, path) {
        ("GET", "/") => 200,
        ("GET", p) if p.starts_with("/items/") => 200,
        ("POST", "/items") => 201,
        _ => 404,
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let mut not_found = 0;
    for id in 0..n {
        let (method, path) = REQUESTS[id as usize % REQUESTS.len()];
        let started = Instant::now();
        http::request_start!(id, method, path);
        let status = handle(method, path);
        not_found += u64::from(status == 404);
        // A lazy probe: the closure runs only while a tracer is attached.
        http::request_done!(|| (id, status, started.elapsed()));
    }
    println!("served {n} requests, {not_found} not found");
}
