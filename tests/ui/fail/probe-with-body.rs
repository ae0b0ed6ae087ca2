#[usdt::provider]
mod http {
    fn request_start(id: u64) {
        println!("{id}");
    }
}

fn main() {}
