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

use usdt_test_support::cell::{Cell, RELEASE};
use usdt_test_support::cross::{check_examples_run, check_types_values, AARCH64 as CROSS};
use usdt_test_support::notes::check_nop_cell;
use usdt_test_support::ready;
use usdt_trace::Machine;

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
    check_nop_cell(&AARCH64, Machine::Aarch64, |expected| {
        // LLVM duplicates the string-staging code on aarch64 (four sites
        // where x86-64 has two): each copy has its note, as it must.
        if let Some(strings) = expected.get_mut("types:strings") {
            strings.1 = 0;
        }
    });
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
