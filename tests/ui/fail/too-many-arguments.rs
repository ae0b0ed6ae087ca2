#[usdt::provider]
mod wide {
    fn thirteen(
        a: u64,
        b: u64,
        c: u64,
        d: u64,
        e: u64,
        f: u64,
        g: u64,
        h: u64,
        i: u64,
        j: u64,
        k: u64,
        l: u64,
        m: u64,
    ) {
    }
}

fn main() {
    usdt::probe!(adhoc, thirteen, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13);
}
