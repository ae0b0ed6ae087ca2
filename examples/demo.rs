#[usdt::provider]
mod http {
    /// A request arrived.
    fn request_start(id: u64, path: &str) {}
    fn request_done(id: u64, status: u16, nanos: u64) {}
}

fn main() {
    let path = String::from("/index.html");
    for id in 0..3u64 {
        http::request_start!(id, &path);
        http::request_done!(|| (id, 200, 1234));
        usdt::probe!(http, tick, id, -1i32);
    }
    println!("enabled: {}", http::request_done_enabled());
}
