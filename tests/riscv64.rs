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
use usdt_test_support::cell::{Cell, CELL_BINS, RELEASE};
use usdt_test_support::cross::{check_examples_run, check_types_values, RISCV64};
use usdt_test_support::notes::{check_notes, expected};
use usdt_test_support::readelf::{readelf_notes, ReadelfNote};
use usdt_test_support::ready;
use usdt_trace::{Machine, SiteLayout};

const CELL: Cell = Cell {
    name: "riscv64-release",
    target: "riscv64gc-unknown-linux-gnu",
    ..RELEASE
};

/// The riscv64 register names `sys/sdt.h` writes (the ABI names of x1-x31).
const REGS: [&str; 31] = [
    "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4", "a5", "a6",
    "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6",
];

#[test]
fn riscv64_notes() {
    if !ready(&RISCV64.build_needs()) {
        return;
    }
    for bin in CELL_BINS {
        let path = CELL.bin(bin);
        let what = format!("{bin} (riscv64)");
        let probes = check_notes(&path, &expected(bin), SiteLayout::Nop, &what);
        assert_eq!(probes.machine, Machine::Riscv64, "{what}");
        // Every operand is `[-]SIZE@REG`: a register by its ABI name.
        for site in &probes.sites {
            for arg in site.args_text.split_whitespace() {
                let (_, reg) = arg.split_once('@').expect("SIZE@REG");
                assert!(REGS.contains(&reg), "{what}: {arg}");
            }
        }
        // readelf -n describes every note as our reader does.
        let ours: Vec<ReadelfNote> = probes
            .sites
            .iter()
            .map(|s| ReadelfNote {
                provider: s.provider.clone(),
                name: s.name.clone(),
                location: s.location,
                base: s.note_base,
                semaphore: s.semaphore.unwrap_or(0),
                args: s.args_text.clone(),
            })
            .collect();
        assert_eq!(readelf_notes(&path), ours, "{what}");
    }
    // The operands of one site, exactly as written: twelve sizes, each a
    // register by its ABI name.
    let notes = readelf_notes(&CELL.bin("types"));
    let twelve = notes.iter().find(|n| n.name == "twelve").unwrap();
    let sizes: Vec<&str> = twelve
        .args
        .split_whitespace()
        .map(|a| a.split_once('@').unwrap().0)
        .collect();
    assert_eq!(
        sizes,
        ["8", "-8", "4", "-4", "2", "-2", "1", "-1", "1", "4", "8", "-8"],
        "{}",
        twelve.args
    );
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
    for (_, reg) in &ops[..8] {
        assert!(
            REGS.contains(reg),
            "C operand register {reg:?} in {}",
            scalars.args
        );
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
