fn main() {
    let id = 7u64;
    // An ad-hoc probe takes raw pointers, not references: `&String` would
    // otherwise pass the address of the String's header.
    usdt::probe!(http, request, &id);
}
