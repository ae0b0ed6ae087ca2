#[usdt::provider]
mod http {
    fn request_start(id: u64, path: &str) {}
    fn request_done(id: u64, status: u16) {}
}

fn main() {
    http::request_start!("/index.html", 1);
    http::request_done!(|| (1, "ok"));
}
