#[usdt::provider(crate = 5)]
mod number {}

#[usdt::provider(crate = "not a path")]
mod spaces {}

#[usdt::provider(crate = "usdt", crate = "usdt")]
mod twice {}

#[derive(usdt::ProbeArg)]
#[usdt(krate = "usdt")]
struct Typo(u64);

#[derive(usdt::ProbeArg)]
#[usdt(crate = "usdt")]
#[usdt(crate = "usdt")]
struct Twice(u64);

fn main() {}
