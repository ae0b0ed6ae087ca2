//! The argument kinds of signature records: byte slices, durations, user
//! types through `usdt::ProbeArg`, and dashed probe names.
#![deny(warnings)]

use std::time::Duration;

#[derive(usdt::ProbeArg)]
struct ConnId(u64);

#[derive(usdt::ProbeArg)]
struct Named {
    code: i32,
}

mod types {
    #[derive(usdt::ProbeArg)]
    pub struct Ratio(pub f64);
}

#[usdt::provider]
mod net {
    fn recv(conn: ConnId, data: &[u8], owned: Vec<u8>, rtt: Duration) {}
    fn named(n: Named, r: crate::types::Ratio, t: core::time::Duration) {}
    fn order__placed(id: u64, item: &str) {}
}

fn main() {
    let buf = [1u8, 2, 3];
    net::recv!(ConnId(1), &buf, vec![4, 5], Duration::from_millis(2));
    net::recv!(|| (ConnId(2), &buf[..1], Vec::new(), Duration::ZERO));
    net::named!(Named { code: -1 }, types::Ratio(0.5), Duration::MAX);
    net::order__placed!(7, "book");
    net::order__placed!(|| (8, "pen"));
    if net::order__placed_enabled() || net::recv_enabled() {
        unreachable!("nothing is attached in a compile test");
    }
}
