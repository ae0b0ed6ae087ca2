#[usdt::provider]
mod http {
    fn request_start(id: u64) {}
    fn request_start(id: u64, path: &str) {}
}

fn main() {
    http::request_start!(1);
}
