#[usdt::provider]
mod http {
    fn request_start((id, status): (u64, u16)) {}
}

fn main() {}
