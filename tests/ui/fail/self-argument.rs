#[usdt::provider]
mod http {
    fn request_start(&self, id: u64) {}
}

fn main() {}
