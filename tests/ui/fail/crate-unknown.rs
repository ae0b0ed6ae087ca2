#[usdt::provider(crate = "no_such_crate")]
mod unknown {
    fn probe(id: u64, path: &str) {}
}

#[derive(usdt::ProbeArg)]
#[usdt(crate = "no_such_crate")]
struct Unknown(u64);

fn main() {
    unknown::probe!(1, "/");
}
