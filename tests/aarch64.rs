//! aarch64: the examples cross-built with `--target aarch64-unknown-linux-gnu`
//! (rustup's target, linked by `aarch64-linux-gnu-gcc`) have the
//! architecture's `nop` (`1f 20 03 d5`) at every Location and notes that pass
//! the same checks as on x86-64, with `8@x0`-style operands (the 64-bit
//! register, the size telling how many low bytes hold the value, negative
//! for signed); they run under `qemu-aarch64`, where gdb stops at every
//! site of `examples/types.rs` and reads each operand's register: the values
//! the program passed.
//!
//! Needs rustup's `aarch64-unknown-linux-gnu` target and the Debian packages
//! `gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross`, `qemu-user` and
//! `gdb-multiarch`, which the tests install on first use (usdt-provision).

use usdt_test_support::cell::{Cell, CELL_BINS, RELEASE};
use usdt_test_support::cross::{check_examples_run, check_types_values, AARCH64 as CROSS};
use usdt_test_support::notes::{check_notes, expected};
use usdt_test_support::ready;
use usdt_trace::{Machine, SiteLayout};

const AARCH64: Cell = Cell {
    name: "aarch64-release",
    target: "aarch64-unknown-linux-gnu",
    ..RELEASE
};

#[test]
fn aarch64_notes() {
    if !ready(&CROSS.build_needs()) {
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
    if !ready(&CROSS.run_needs()) {
        return;
    }
    check_examples_run(&CROSS, |bin| AARCH64.bin(bin));
}

/// gdb stops at every site of `examples/types.rs` and reads the values the
/// program passed from the registers the notes name.
#[test]
fn aarch64_probes_fire_with_their_values() {
    if !ready(&CROSS.run_needs()) {
        return;
    }
    check_types_values(&CROSS, &AARCH64.bin("types"));
}
