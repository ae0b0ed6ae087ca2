fn main() {
    usdt::probe!("http", request, 1u64);
    usdt::probe!(http);
    usdt::probe!(http, café);
}
