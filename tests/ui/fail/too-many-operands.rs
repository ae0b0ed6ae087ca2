#[usdt::provider]
mod http {
    fn a(a: &[u8], b: &[u8], c: &[u8], d: &[u8], e: &[u8], f: &[u8], g: u8) {}
}

fn main() {}
