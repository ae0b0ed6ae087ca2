//! Compiles `src/loop.c`, the bench loop with a `<sys/sdt.h>` probe (Debian
//! package `systemtap-sdt-dev`).

fn main() {
    println!("cargo:rerun-if-changed=src/loop.c");
    cc::Build::new()
        .file("src/loop.c")
        .opt_level(2)
        .warnings(true)
        .compile("usdt_bench_c");
}
