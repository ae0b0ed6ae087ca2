struct Request;

#[usdt::provider]
mod http {
    fn a(body: Vec<u8>) {}
    fn b(bytes: &[u8]) {}
    fn c(pair: (u8, u8)) {}
    fn d(request: Request) {}
    fn e(text: str) {}
    fn f(wide: u128) {}
    fn g(unit: ()) {}
}

fn main() {}
