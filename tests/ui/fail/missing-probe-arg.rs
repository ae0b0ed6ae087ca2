struct Request;

#[derive(usdt::ProbeArg)]
struct Pair(u8, u8);

#[derive(usdt::ProbeArg)]
struct Wide(u128);

#[usdt::provider]
mod http {
    fn a(request: Request) {}
    fn b(id: super::Request) {}
}

fn main() {}
