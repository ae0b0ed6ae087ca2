#[usdt::provider]
mod http {
    const fn a(id: u64) {}
    async fn b(id: u64) {}
    unsafe fn c(id: u64) {}
    extern "C" fn d(id: u64) {}
    #[inline]
    fn e(id: u64) {}
}

fn main() {}
