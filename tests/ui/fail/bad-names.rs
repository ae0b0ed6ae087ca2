#[usdt::provider(name = "my-provider")]
mod http {
    fn request_start(id: u64) {}
}

#[usdt::provider]
mod names {
    fn café(id: u64) {}
}

#[usdt::provider(name = "")]
mod empty {}

#[usdt::provider(nmae = "x")]
mod typo {}

fn main() {}
