//! riscv64: the examples cross-built with `--target riscv64gc-unknown-linux-gnu`
//! (rustup's target, linked by `riscv64-linux-gnu-gcc`) have the 4-byte
//! `nop` (`13 00 00 00`, never the compressed `c.nop`) at every Location and
//! notes that pass the same checks as on x86-64, with operands as `sys/sdt.h`
//! writes them there: `8@a0`-style, the ABI name of the 64-bit register
//! (riscv64 names no narrower one), the size telling how many low bytes hold
//! the value, negative for signed. `readelf -n` describes every note as our
//! reader does. They run under
//! `qemu-riscv64`, where gdb stops at every site of `examples/types.rs` and
//! reads each operand's register: the values the program passed.
//!
//! Needs rustup's `riscv64gc-unknown-linux-gnu` target and the Debian
//! packages `gcc-riscv64-linux-gnu`, `libc6-dev-riscv64-cross`, `qemu-user`,
//! `gdb-multiarch` and `systemtap-sdt-dev`, which the tests install on first
//! use (usdt-provision).

use usdt_test_support::c::{build_cross, CROSS_CCS};
use usdt_test_support::cell::{Cell, RELEASE};
use usdt_test_support::cross::{check_examples_run, check_types_values, RISCV64};
use usdt_test_support::notes::check_nop_cell;
use usdt_test_support::readelf::readelf_notes;
use usdt_test_support::ready;
use usdt_trace::{parse_args, Machine, Operand};

const CELL: Cell = Cell {
    name: "riscv64-release",
    target: "riscv64gc-unknown-linux-gnu",
    ..RELEASE
};

#[test]
fn riscv64_notes() {
    if !ready(&RISCV64.build_needs()) {
        return;
    }
    check_nop_cell(&CELL, Machine::Riscv64, |_| {});
}

/// The C `sys/sdt.h` probes of `usdt-trace/tests/c/cross.c`, compiled by
/// the same cross compiler, name their register operands as ours do:
/// `SIZE@REG`, the ABI name of the 64-bit register, whatever the size.
#[test]
fn riscv64_operands_are_sys_sdt_h_s() {
    let cc = CROSS_CCS
        .iter()
        .find(|cc| cc.name == "riscv64-gcc")
        .expect("the riscv64 cross compiler");
    if !ready(cc.needs) {
        return;
    }
    let exe = build_cross(cc, "cross-riscv64-gcc-O2", "cross.c", &["-O2"]);
    let notes = readelf_notes(&exe);
    let scalars = notes
        .iter()
        .find(|n| n.name == "scalars")
        .expect("x:scalars");
    let ops: Vec<(&str, &str)> = scalars
        .args
        .split_whitespace()
        .map(|a| a.split_once('@').unwrap())
        .collect();
    let sizes: Vec<&str> = ops.iter().map(|(s, _)| *s).collect();
    // int8_t .. uint64_t, and the string's address.
    assert_eq!(
        sizes,
        ["-1", "-2", "-4", "-8", "1", "2", "4", "8", "8"],
        "{}",
        scalars.args
    );
    // The ninth argument is on the stack (`8@0(sp)`): eight go in a0-a7.
    let args = parse_args(&scalars.args, Machine::Riscv64).unwrap();
    for arg in &args[..8] {
        let ok = matches!(&arg.operand, Operand::Register(reg)
            if reg.width.bytes() == 8 && reg.machine() == Some(Machine::Riscv64));
        assert!(ok, "C operand {arg:?} in {}", scalars.args);
    }
}

#[test]
fn riscv64_runs_under_qemu() {
    if !ready(&RISCV64.run_needs()) {
        return;
    }
    check_examples_run(&RISCV64, |bin| CELL.bin(bin));
}

/// gdb stops at every site of `examples/types.rs` and reads the values the
/// program passed from the registers the notes name.
#[test]
fn riscv64_probes_fire_with_their_values() {
    if !ready(&RISCV64.run_needs()) {
        return;
    }
    check_types_values(&RISCV64, &CELL.bin("types"));
}
