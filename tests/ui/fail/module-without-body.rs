#[usdt::provider]
mod http;

fn main() {}
