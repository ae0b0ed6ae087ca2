fn main() {
    let path = String::from("/");
    usdt::probe!(http, request, 1u64, "literal");
    usdt::probe!(http, request, path);
}
