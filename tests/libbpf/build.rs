//! Builds `src/bpf/usdt.bpf.c` with clang and generates its skeleton.
//! `vmlinux.h` comes from the running kernel's BTF through bpftool.

use std::path::PathBuf;
use std::process::Command;

const SRC: &str = "src/bpf/usdt.bpf.c";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let vmlinux = out.join("vmlinux.h");
    let dump = Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "c",
        ])
        .output()
        .expect("run bpftool (Debian package bpftool)");
    assert!(
        dump.status.success(),
        "bpftool btf dump failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    std::fs::write(&vmlinux, dump.stdout).expect("write vmlinux.h");
    // Debian's clang is versioned; CLANG overrides.
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang-14".into());
    libbpf_cargo::SkeletonBuilder::new()
        .source(SRC)
        .clang(clang)
        .clang_args([
            "-I".into(),
            out.into_os_string(),
            // usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> is in
            // the multiarch directory clang's BPF target does not search.
            "-idirafter".into(),
            "/usr/include/x86_64-linux-gnu".into(),
        ])
        .build_and_generate(
            PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("usdt.skel.rs"),
        )
        .expect("build the BPF program");
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-env-changed=CLANG");
}
