#[usdt::provider]
mod http {
    fn a(body: Vec<u16>) {}
    fn b(bytes: &mut [u8]) {}
    fn c(pair: (u8, u8)) {}
    fn d(words: &[u32]) {}
    fn e(text: str) {}
    fn f(wide: u128) {}
    fn g(unit: ()) {}
    fn __h(x: u8) {}
}

fn main() {}
