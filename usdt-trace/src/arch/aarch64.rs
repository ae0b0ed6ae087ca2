//! aarch64: one row per general register (`x0`..`x30`, `sp`, and the
//! program counter `pc`) with every name a note, perf and tracefs give it,
//! and the operand syntax of its notes (`x0`, `w0`, `[x0]`, `[sp, 16]`,
//! `[x3, #-8]`, bare immediates).

use std::fmt;

use super::operand::parse_int;
use super::{registers, Arch, Machine, Operand, Reg, Reg64};

/// aarch64's table.
pub(super) const ARCH: Arch = Arch {
    machine: Machine::Aarch64,
    registers: REGISTERS,
    sp: Reg64::Sp,
    ip: Reg64::Pc,
    fp: Reg64::X(29),
    lr: Some(Reg64::X(30)),
    object: object::Architecture::Aarch64,
    pt_regs: PT_REGS,
    reg_prefix: "",
    parse_operand,
    write_memory,
};

/// The 8-byte registers of `struct user_pt_regs`
/// (`arch/arm64/include/uapi/asm/ptrace.h`: `regs[31]`, `sp`, `pc`,
/// `pstate`), which is what a BPF uprobe program is given
/// (`bpf_user_pt_regs_t`, `arch/arm64/include/uapi/asm/bpf_perf_event.h`)
/// and what `struct pt_regs` starts with.
const PT_REGS: usize = 34;

/// Every register a note may name: `xN` (64 bits) and `wN` (the low 32);
/// perf's number (`arch/arm64/include/uapi/asm/perf_regs.h`:
/// `PERF_REG_ARM64_X0` = 0 ... `LR` = 30, `SP` = 31, `PC` = 32), its slot
/// in `struct user_pt_regs` and its tracefs name (`regoffset_table` in
/// `arch/arm64/kernel/ptrace.c`).
const REGISTERS: &[super::Register] = registers! {
    Reg64::X(0) => ["x0" W64, "w0" W32] perf 0 pt_regs 0 tracefs "x0";
    Reg64::X(1) => ["x1" W64, "w1" W32] perf 1 pt_regs 1 tracefs "x1";
    Reg64::X(2) => ["x2" W64, "w2" W32] perf 2 pt_regs 2 tracefs "x2";
    Reg64::X(3) => ["x3" W64, "w3" W32] perf 3 pt_regs 3 tracefs "x3";
    Reg64::X(4) => ["x4" W64, "w4" W32] perf 4 pt_regs 4 tracefs "x4";
    Reg64::X(5) => ["x5" W64, "w5" W32] perf 5 pt_regs 5 tracefs "x5";
    Reg64::X(6) => ["x6" W64, "w6" W32] perf 6 pt_regs 6 tracefs "x6";
    Reg64::X(7) => ["x7" W64, "w7" W32] perf 7 pt_regs 7 tracefs "x7";
    Reg64::X(8) => ["x8" W64, "w8" W32] perf 8 pt_regs 8 tracefs "x8";
    Reg64::X(9) => ["x9" W64, "w9" W32] perf 9 pt_regs 9 tracefs "x9";
    Reg64::X(10) => ["x10" W64, "w10" W32] perf 10 pt_regs 10 tracefs "x10";
    Reg64::X(11) => ["x11" W64, "w11" W32] perf 11 pt_regs 11 tracefs "x11";
    Reg64::X(12) => ["x12" W64, "w12" W32] perf 12 pt_regs 12 tracefs "x12";
    Reg64::X(13) => ["x13" W64, "w13" W32] perf 13 pt_regs 13 tracefs "x13";
    Reg64::X(14) => ["x14" W64, "w14" W32] perf 14 pt_regs 14 tracefs "x14";
    Reg64::X(15) => ["x15" W64, "w15" W32] perf 15 pt_regs 15 tracefs "x15";
    Reg64::X(16) => ["x16" W64, "w16" W32] perf 16 pt_regs 16 tracefs "x16";
    Reg64::X(17) => ["x17" W64, "w17" W32] perf 17 pt_regs 17 tracefs "x17";
    Reg64::X(18) => ["x18" W64, "w18" W32] perf 18 pt_regs 18 tracefs "x18";
    Reg64::X(19) => ["x19" W64, "w19" W32] perf 19 pt_regs 19 tracefs "x19";
    Reg64::X(20) => ["x20" W64, "w20" W32] perf 20 pt_regs 20 tracefs "x20";
    Reg64::X(21) => ["x21" W64, "w21" W32] perf 21 pt_regs 21 tracefs "x21";
    Reg64::X(22) => ["x22" W64, "w22" W32] perf 22 pt_regs 22 tracefs "x22";
    Reg64::X(23) => ["x23" W64, "w23" W32] perf 23 pt_regs 23 tracefs "x23";
    Reg64::X(24) => ["x24" W64, "w24" W32] perf 24 pt_regs 24 tracefs "x24";
    Reg64::X(25) => ["x25" W64, "w25" W32] perf 25 pt_regs 25 tracefs "x25";
    Reg64::X(26) => ["x26" W64, "w26" W32] perf 26 pt_regs 26 tracefs "x26";
    Reg64::X(27) => ["x27" W64, "w27" W32] perf 27 pt_regs 27 tracefs "x27";
    Reg64::X(28) => ["x28" W64, "w28" W32] perf 28 pt_regs 28 tracefs "x28";
    Reg64::X(29) => ["x29" W64, "w29" W32] perf 29 pt_regs 29 tracefs "x29";
    Reg64::X(30) => ["x30" W64, "w30" W32] perf 30 pt_regs 30 tracefs "x30";
    Reg64::Sp => ["sp" W64, "wsp" W32] perf 31 pt_regs 31 tracefs "sp";
    Reg64::Pc => ["pc" W64] perf 32 pt_regs 32 tracefs "pc";
};

/// `[reg]` or `[reg, disp]`.
fn write_memory(f: &mut fmt::Formatter<'_>, base: Reg, disp: i64) -> fmt::Result {
    match disp {
        0 => write!(f, "[{base}]"),
        _ => write!(f, "[{base}, {disp}]"),
    }
}

/// `xN`, `wN`, `sp`, `[reg]`, `[reg, disp]` (also `#disp`) or an immediate.
/// A relocation as displacement (`[x4, #:lo12:.LANCHOR1]`, which gcc writes
/// for a global) is not resolved.
fn parse_operand(text: &str) -> Result<Operand, String> {
    let reloc = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.split_once(','))
        .map(|(_, disp)| disp.trim())
        .filter(|disp| disp.trim_start_matches('#').starts_with(':'));
    if let Some(reloc) = reloc {
        return Err(format!(
            "`{reloc}` is a relocation this reader does not resolve"
        ));
    }
    operand(text)
        .ok_or_else(|| format!("`{text}` is not an aarch64 register, memory operand or immediate"))
}

fn operand(text: &str) -> Option<Operand> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        let (reg, disp) = match inner.split_once(',') {
            Some((reg, disp)) => {
                let disp = disp.trim();
                (
                    reg.trim(),
                    parse_int(disp.strip_prefix('#').unwrap_or(disp))?,
                )
            }
            None => (inner.trim(), 0),
        };
        return Some(Operand::Memory {
            base: ARCH.parse_reg(reg)?,
            disp,
        });
    }
    if let Some(reg) = ARCH.parse_reg(text) {
        return Some(Operand::Register(reg));
    }
    parse_int(text.strip_prefix('#').unwrap_or(text)).map(Operand::Immediate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::RegWidth;

    #[test]
    fn names_parse_back() {
        let name = |r: Reg| ARCH.name(r.reg, r.width);
        for row in REGISTERS {
            for (n, w) in row.names {
                let reg = ARCH.parse_reg(n).unwrap();
                assert_eq!((reg.reg, reg.width), (row.reg, *w));
                assert_eq!(name(reg), *n);
            }
        }
        assert_eq!(ARCH.parse_reg("w7").map(name), Some("w7"));
        assert_eq!(ARCH.parse_reg("x31"), None);
        assert_eq!(ARCH.parse_reg("x01"), None);
        assert_eq!(ARCH.parse_reg("%x0"), None);
        assert_eq!(ARCH.name(Reg64::Pc, RegWidth::W32), "pc");
    }

    /// `enum perf_event_arm_regs` (`arch/arm64/include/uapi/asm/perf_regs.h`),
    /// in order from 0.
    const PERF_REGS: [&str; 33] = [
        "X0", "X1", "X2", "X3", "X4", "X5", "X6", "X7", "X8", "X9", "X10", "X11", "X12", "X13",
        "X14", "X15", "X16", "X17", "X18", "X19", "X20", "X21", "X22", "X23", "X24", "X25", "X26",
        "X27", "X28", "X29", "LR", "SP", "PC",
    ];

    /// `struct user_pt_regs` (`arch/arm64/include/uapi/asm/ptrace.h`) by
    /// 8-byte slot: `regs[31]`, `sp`, `pc`, `pstate`.
    fn user_pt_regs_field(slot: u8) -> String {
        match slot {
            0..=30 => format!("regs[{slot}]"),
            31 => "sp".into(),
            32 => "pc".into(),
            33 => "pstate".into(),
            _ => panic!("slot {slot} is past struct user_pt_regs"),
        }
    }

    /// `regoffset_table` (`arch/arm64/kernel/ptrace.c`): each name and the
    /// `struct pt_regs` field at its offset.
    fn regoffset_table() -> Vec<(String, String)> {
        let mut table: Vec<(String, String)> = (0..=30)
            .map(|n| (format!("x{n}"), format!("regs[{n}]")))
            .collect();
        for (name, field) in [
            ("lr", "regs[30]"),
            ("sp", "sp"),
            ("pc", "pc"),
            ("pstate", "pstate"),
        ] {
            table.push((name.into(), field.into()));
        }
        table
    }

    /// The perf number of the register the kernel's headers name `name`
    /// (`x5` is `X5`, `x30` is `LR`).
    fn perf_number(name: &str) -> Option<u32> {
        let header = match name {
            "x30" => "LR".to_string(),
            n => n.to_uppercase(),
        };
        PERF_REGS
            .iter()
            .position(|r| *r == header)
            .and_then(|i| u32::try_from(i).ok())
    }

    #[test]
    fn every_row_has_the_kernel_headers_numbers() {
        let table = regoffset_table();
        assert_eq!(REGISTERS.len(), 33);
        for row in REGISTERS {
            let name = row.names[0].0;
            assert_eq!(row.perf, perf_number(name), "{name}: perf");
            let tracefs = row.tracefs.unwrap();
            let (_, field) = table.iter().find(|(n, _)| n == tracefs).unwrap();
            assert_eq!(&user_pt_regs_field(row.pt_regs.unwrap()), field, "{name}");
        }
        assert_eq!(ARCH.pt_regs, 34);
        assert_eq!(ARCH.register(ARCH.sp).unwrap().perf, Some(31));
        assert_eq!(ARCH.register(ARCH.ip).unwrap().perf, Some(32));
        assert_eq!(ARCH.by_perf(30), Some(Reg64::X(30)));
    }

    /// Unwinding starts from `pc`, `sp`, the frame pointer `x29` and the
    /// link register `x30` (what framehop's aarch64 unwinder takes), each
    /// with a perf number and a `struct pt_regs` slot to be read by.
    #[test]
    fn unwinding_starts_from_the_frame_and_link_registers() {
        let unwind: Vec<Reg64> = ARCH.unwind_registers().collect();
        assert_eq!(unwind, [Reg64::Pc, Reg64::Sp, Reg64::X(29), Reg64::X(30)]);
        for reg in unwind {
            let row = ARCH.register(reg).unwrap();
            assert!(row.perf.is_some() && row.pt_regs.is_some(), "{reg:?}");
        }
        assert_eq!(ARCH.register(ARCH.fp).unwrap().tracefs, Some("x29"));
        assert_eq!(ARCH.object, object::Architecture::Aarch64);
    }

    /// On an aarch64 host, the numbers are also perf-event-open-sys's,
    /// generated from that machine's headers.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn every_perf_number_is_the_bindings() {
        use perf_event_open_sys::bindings as b;
        assert_eq!(ARCH.by_perf(b::PERF_REG_ARM64_X0), Some(Reg64::X(0)));
        assert_eq!(ARCH.by_perf(b::PERF_REG_ARM64_X29), Some(Reg64::X(29)));
        assert_eq!(ARCH.by_perf(b::PERF_REG_ARM64_LR), Some(Reg64::X(30)));
        assert_eq!(ARCH.by_perf(b::PERF_REG_ARM64_SP), Some(Reg64::Sp));
        assert_eq!(ARCH.by_perf(b::PERF_REG_ARM64_PC), Some(Reg64::Pc));
    }

    fn operands(texts: &[&str]) -> Vec<Operand> {
        let parse = |o: &&str| parse_operand(o).unwrap_or_else(|e| panic!("{o}: {e}"));
        texts.iter().map(parse).collect()
    }

    /// What gcc and clang write for aarch64 (`aarch64-linux-gnu-gcc -O0`,
    /// `-O2`, `clang --target=aarch64-linux-gnu`): `x` registers whatever
    /// the size, `[sp, 44]`, `[x6, 8]`, `[x8]`, and bare immediates; gcc's
    /// `[x4, #:lo12:.LANCHOR1]` for a global (a local label, in no symbol
    /// table) is refused with the reason.
    #[test]
    fn what_gcc_and_clang_write() {
        let x = |n| Reg {
            reg: Reg64::X(n),
            width: RegWidth::W64,
        };
        let sp = Reg {
            reg: Reg64::Sp,
            width: RegWidth::W64,
        };
        assert_eq!(
            operands(&[
                "x5",
                "[sp, 44]",
                "[x6, 8]",
                "[x8]",
                "-42",
                "0",
                "w1",
                "[x3, #-8]"
            ]),
            [
                Operand::Register(x(5)),
                Operand::Memory { base: sp, disp: 44 },
                Operand::Memory {
                    base: x(6),
                    disp: 8
                },
                Operand::Memory {
                    base: x(8),
                    disp: 0
                },
                Operand::Immediate(-42),
                Operand::Immediate(0),
                Operand::Register(Reg {
                    reg: Reg64::X(1),
                    width: RegWidth::W32
                }),
                Operand::Memory {
                    base: x(3),
                    disp: -8
                },
            ]
        );
        assert_eq!(
            parse_operand("[x4, #:lo12:.LANCHOR1]"),
            Err("`#:lo12:.LANCHOR1` is a relocation this reader does not resolve".into())
        );
        for bad in ["%rax", "[x0", "x0]", "[x31]", "[x0, y]", "a0"] {
            assert_eq!(
                parse_operand(bad),
                Err(format!(
                    "`{bad}` is not an aarch64 register, memory operand or immediate"
                ))
            );
        }
    }
}
