#[usdt::provider]
mod http {
    fn request_start<T>(id: T) {}
    fn request_done(id: u64)
    where
        u64: Copy,
    {
    }
}

fn main() {}
