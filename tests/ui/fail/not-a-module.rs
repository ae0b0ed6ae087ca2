#[usdt::provider]
fn probe(x: u64) {}

fn main() {}
