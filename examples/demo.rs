//! The demo: a provider with an eager, a lazy and an ad-hoc probe, fired
//! `N` times (`demo N`, default 5), and how to trace them.

use std::time::Instant;

#[usdt::provider]
mod http {
    /// A request arrived: its id and path.
    fn request_start(id: u64, path: &str) {}
    /// A request finished: its id, HTTP status and duration.
    fn request_done(id: u64, status: u16, nanos: u64) {}
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let exe = std::env::current_exe().unwrap();
    let exe = exe.display();
    eprintln!("demo: firing http:request_start, http:request_done and http:tick {n} times each.");
    eprintln!("Trace it (as root) with, for example:");
    eprintln!(
        "  bpftrace -e 'usdt:{exe}:http:request_start {{ printf(\"%d %s\\n\", arg0, str(arg1)); }}' -c '{exe} {n}'"
    );
    eprintln!("  gdb -batch -ex 'break -probe-stap http:request_done' -ex run -ex 'print $_probe_arg1' --args {exe} {n}");
    eprintln!("  readelf -n {exe}");
    let mut traced = 0;
    for id in 0..n {
        let path = format!("/item/{id}");
        let start = Instant::now();
        http::request_start!(id, &path);
        // The closure runs only while a tracer is attached to request_done.
        http::request_done!(|| {
            traced += 1;
            (id, 200, start.elapsed().as_nanos() as u64)
        });
        usdt::probe!(http, tick, id, -1i32);
    }
    println!("fired {n} requests; {traced} were traced at request_done");
}
