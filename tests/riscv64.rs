//! riscv64: the examples cross-built with `--target riscv64gc-unknown-linux-gnu`
//! (rustup's target, linked by `riscv64-linux-gnu-gcc`) have the 4-byte
//! `nop` (`13 00 00 00`, never the compressed `c.nop`) at every Location and
//! notes as `sys/sdt.h` writes them there: `8@a0`-style operands, the ABI name
//! of the 64-bit register (riscv64 names no narrower one), the size telling
//! how many low bytes hold the value, negative for signed. They run under
//! `qemu-riscv64`, where gdb stops at every site of `examples/types.rs` and
//! reads each operand's register: the values the program passed.
//!
//! Needs rustup's `riscv64gc-unknown-linux-gnu` target and the Debian
//! packages `gcc-riscv64-linux-gnu`, `libc6-dev-riscv64-cross`, `qemu-user`,
//! `gdb-multiarch` and `systemtap-sdt-dev`, which the tests install on first
//! use (usdt-provision).

use std::path::Path;
use std::process::Command;

use usdt_test_support::cell::{Cell, CELL_BINS, RELEASE};
use usdt_test_support::cross::{check_examples_run, check_types_values, RISCV64};
use usdt_test_support::notes::expected;
use usdt_test_support::readelf::{readelf_notes, ReadelfNote};
use usdt_test_support::{ready, run_ok, target_tmp, SDT};

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

/// The bytes of the file at virtual address `addr` (`readelf -lW`'s LOAD
/// segments map it).
fn bytes_at(path: &Path, addr: u64, len: usize) -> Vec<u8> {
    let out = run_ok(Command::new("readelf").arg("-lW").arg(path));
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let offset = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&"LOAD"))
        .find_map(|f| {
            let (offset, vaddr, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
            (addr >= vaddr && addr < vaddr + filesz).then_some(addr - vaddr + offset)
        })
        .unwrap_or_else(|| panic!("{addr:#x} is in no LOAD segment of {}", path.display()));
    let data = std::fs::read(path).unwrap();
    data[offset as usize..offset as usize + len].to_vec()
}

/// The address of a section (`readelf -SW`).
fn section_address(path: &Path, name: &str) -> Option<(u64, u64)> {
    let out = run_ok(Command::new("readelf").arg("-SW").arg(path));
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let l = l.split_once(']').map_or(l, |(_, rest)| rest);
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&name)).then(|| {
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            (hex(f[2]), hex(f[4]))
        })
    })
}

/// Every note of `path` against what the example declares, as `readelf -n`
/// prints it: exactly the declared probes, the 4-byte nop at every
/// Location, Base equal to `.stapsdt.base`'s address, each operand
/// `SIZE@REG` with the declared size and sign and a riscv64 register, and
/// one 2-byte-aligned semaphore in `.probes` per provider probe.
fn check_notes(path: &Path, bin: &str) -> Vec<ReadelfNote> {
    let notes = readelf_notes(path);
    let expected = expected(bin);
    let (base, _) = section_address(path, ".stapsdt.base").expect(".stapsdt.base");
    let probes = section_address(path, ".probes");
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for note in &notes {
        let probe = format!("{}:{}", note.provider, note.name);
        let what = format!("{bin} (riscv64) {probe} at {:#x}", note.location);
        let (sizes, _, has_semaphore) = expected
            .get(probe.as_str())
            .unwrap_or_else(|| panic!("{what}: not declared"));
        *seen.entry(probe.clone()).or_default() += 1;
        assert_eq!(
            bytes_at(path, note.location, 4),
            usdt_runtime::site::RISCV64_NOP,
            "{what}: the site"
        );
        assert_eq!(note.base, base, "{what}: Base");
        let got: Vec<i8> = note
            .args
            .split_whitespace()
            .map(|arg| {
                let (size, reg) = arg.split_once('@').expect("SIZE@REG");
                assert!(
                    REGS.contains(&reg),
                    "{what}: {arg} is not a riscv64 register"
                );
                size.parse().unwrap()
            })
            .collect();
        assert_eq!(&got, sizes, "{what}: {}", note.args);
        match (note.semaphore, probes) {
            (0, _) => assert!(!has_semaphore, "{what}: no semaphore"),
            (addr, Some((start, size))) => {
                assert!(*has_semaphore, "{what}: a semaphore");
                assert!(
                    addr >= start && addr + 2 <= start + size,
                    "{what}: outside .probes"
                );
                assert_eq!(addr % 2, 0, "{what}: semaphore alignment");
            }
            (addr, None) => panic!("{what}: semaphore {addr:#x} and no .probes"),
        }
    }
    for (probe, (_, sites, _)) in &expected {
        let got = seen.get(*probe).copied().unwrap_or(0);
        match sites {
            0 => assert!(got >= 1, "{bin} (riscv64): no site of {probe}"),
            n => assert_eq!(got, *n, "{bin} (riscv64): sites of {probe}"),
        }
    }
    notes
}

#[test]
fn riscv64_notes() {
    if !ready(&RISCV64.build_needs()) {
        return;
    }
    for bin in CELL_BINS {
        check_notes(&CELL.bin(bin), bin);
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

/// The C `sys/sdt.h` probes, compiled by the same cross compiler, name their
/// operands as ours do: `SIZE@REG` with the ABI name of a 64-bit register.
#[test]
fn riscv64_operands_are_sys_sdt_h_s() {
    let mut needs = RISCV64.build_needs().to_vec();
    needs.push(SDT);
    if !ready(&needs) {
        return;
    }
    let dir = target_tmp().join("riscv64-sdt");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <sys/sdt.h>\n#include <stdint.h>\n\
         int main(int argc, char **argv) {\n\
           uint8_t a = argc; int16_t b = -argc; uint32_t c = argc * 70000u; int64_t d = -(int64_t)argc;\n\
           DTRACE_PROBE5(c, probe, a, b, c, d, argv);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let exe = dir.join("probe");
    // sys/sdt.h is architecture-neutral; Debian installs it under the
    // host's multiarch directory.
    run_ok(
        Command::new(RISCV64.linker())
            .args(["-O2", "-idirafter", "/usr/include/x86_64-linux-gnu", "-o"])
            .arg(&exe)
            .arg(&src),
    );
    let notes = readelf_notes(&exe);
    let note = notes
        .iter()
        .find(|n| n.name == "probe")
        .expect("the C probe");
    let ops: Vec<(&str, &str)> = note
        .args
        .split_whitespace()
        .map(|a| a.split_once('@').unwrap())
        .collect();
    let sizes: Vec<&str> = ops.iter().map(|(s, _)| *s).collect();
    assert_eq!(sizes, ["1", "-2", "4", "-8", "8"], "{}", note.args);
    for (_, reg) in ops {
        assert!(
            REGS.contains(&reg),
            "C operand register {reg:?} in {}",
            note.args
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
