#[usdt::provider]
mod http {
    struct Request;
    const LIMIT: u32 = 3;
    fn request_start(id: u64) {}
}

fn main() {
    http::request_start!(1);
}
