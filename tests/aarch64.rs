//! aarch64: the examples cross-built with `--target aarch64-unknown-linux-gnu`
//! (rustup's target, linked by `aarch64-linux-gnu-gcc`) have the
//! architecture's `nop` (`1f 20 03 d5`) at every Location and notes that pass
//! the same checks as on x86-64, with `8@x0`-style operands (the 64-bit
//! register, the size telling how many low bytes hold the value, negative
//! for signed); they run under `qemu-aarch64`.
//!
//! Needs rustup's `aarch64-unknown-linux-gnu` target and the Debian packages
//! `gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross` and `qemu-user`, which the
//! tests install on first use (usdt-provision).

use usdt_test_support::cell::{Cell, CELL_BINS, RELEASE};
use usdt_test_support::notes::{check_notes, expected};
use usdt_test_support::{ready, Need};

/// What cross-building the examples needs.
const CROSS: [Need; 3] = [
    Need::rust_target(
        "aarch64-unknown-linux-gnu",
        "tests/aarch64.rs cross-builds the examples",
    ),
    Need::package(
        usdt_provision::AARCH64_GCC,
        "tests/aarch64.rs links the cross-built examples with it",
    ),
    Need::package(
        usdt_provision::AARCH64_LIBC,
        "tests/aarch64.rs links the cross-built examples against it",
    ),
];
/// What running them needs.
const QEMU: Need = Need::package(
    usdt_provision::QEMU,
    "tests/aarch64.rs runs the cross-built examples under qemu-aarch64",
);
use std::process::{Command, Output};
use usdt_trace::{Machine, SiteLayout};

const AARCH64: Cell = Cell {
    name: "aarch64-release",
    target: "aarch64-unknown-linux-gnu",
    ..RELEASE
};

/// Runs `bin args` under qemu-aarch64 with the cross libc, `stdin` as input.
fn qemu(bin: &str, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(AARCH64.bin(bin))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run qemu-aarch64 (apt-get install qemu-user)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "qemu-aarch64 {bin} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn aarch64_notes() {
    if !ready(&CROSS) {
        return;
    }
    for bin in CELL_BINS {
        let path = AARCH64.bin(bin);
        let what = format!("{bin} (aarch64)");
        let mut expected = expected(bin);
        // LLVM duplicates the string-staging code on aarch64 (four sites
        // where x86-64 has two): each copy has its note, as it must.
        if let Some(strings) = expected.get_mut("types:strings") {
            strings.1 = 0;
        }
        let probes = check_notes(&path, &expected, SiteLayout::Nop, &what);
        assert_eq!(probes.machine, Machine::Aarch64, "{what}");
        // Every operand is `[-]SIZE@xN`: the x register, whatever the size.
        for site in &probes.sites {
            for arg in site.args_text.split_whitespace() {
                let (size, reg) = arg.split_once('@').expect("SIZE@REG");
                assert!(
                    matches!(size, "1" | "2" | "4" | "8" | "-1" | "-2" | "-4" | "-8"),
                    "{what}: {arg}"
                );
                let n = reg.strip_prefix('x').and_then(|n| n.parse::<u8>().ok());
                assert!(n.is_some_and(|n| n <= 30), "{what}: {arg}");
            }
        }
    }
    // The operands of one site, exactly as written.
    let probes = usdt_trace::read_file(AARCH64.bin("types")).unwrap();
    let twelve = probes.iter().find(|s| s.probe() == "types:twelve").unwrap();
    let sizes: Vec<&str> = twelve
        .args_text
        .split_whitespace()
        .map(|a| a.split_once('@').unwrap().0)
        .collect();
    assert_eq!(
        sizes,
        ["8", "-8", "4", "-4", "2", "-2", "1", "-1", "1", "4", "8", "-8"],
        "{}",
        twelve.args_text
    );
}

#[test]
fn aarch64_runs_under_qemu() {
    if !ready(&[CROSS[0], CROSS[1], CROSS[2], QEMU]) {
        return;
    }
    let out = qemu("types", &["once"], "");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.starts_with("pointers "), "{out}");
    assert!(out.ends_with("lazy closure runs: 0\n"), "{out}");

    let out = qemu("demo", &["3"], "");
    let out = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out, "fired 3 requests; 0 were traced at request_done\n");

    let out = qemu("gc", &["2"], "");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept 2\n");

    let out = qemu("redzone", &["1000"], "\n");
    let out = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = out.split_whitespace().collect();
    let value = |key: &str| {
        fields
            .iter()
            .find_map(|f| f.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {out}"))
    };
    assert_eq!(value("result="), value("reference="), "{out}");
    assert_eq!(value("trampoline="), "false", "{out}");
}
