#[usdt::provider]
mod http {
    fn request_done(id: u64, status: u16) {}
}

fn main() {
    http::request_done!(1);
    http::request_done!(1, 200, 3);
}
