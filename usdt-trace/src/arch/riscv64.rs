//! riscv64: one row per general register (`x0`..`x31`, by their ABI names
//! `zero`, `ra`, `sp`, `gp`, `tp`, `t0`..`t6`, `s0`/`fp`..`s11`, `a0`..`a7`,
//! and the program counter `pc`) with every name a note, perf and tracefs
//! give it, and the operand syntax of its notes as `sys/sdt.h` and gcc write
//! it (`a0`, `-16(s0)`, `8(sp)`, bare immediates).
//!
//! The registers are 64 bits wide and have no named parts: a note's size
//! says how many low bytes hold the value (`-4@a1`).

use std::fmt;

use super::operand::parse_int;
use super::{registers, Arch, Machine, Operand, Reg, Reg64};

/// riscv64's table.
pub(super) const ARCH: Arch = Arch {
    machine: Machine::Riscv64,
    registers: REGISTERS,
    sp: Reg64::Riscv(2),
    ip: Reg64::RiscvPc,
    fp: Reg64::Riscv(8),
    lr: Some(Reg64::Riscv(1)),
    object: object::Architecture::Riscv64,
    pt_regs: PT_REGS,
    reg_prefix: "",
    parse_operand,
    write_memory,
};

/// The 8-byte registers of `struct user_regs_struct`
/// (`arch/riscv/include/uapi/asm/ptrace.h`: `pc`, then `ra` to `t6` in
/// register order), which is what a BPF uprobe program is given
/// (`bpf_user_pt_regs_t`, `arch/riscv/include/uapi/asm/bpf_perf_event.h`)
/// and what `struct pt_regs` (`epc`, `ra` .. `t6`, then the CSRs) starts
/// with.
const PT_REGS: usize = 32;

/// Every register a note may name: its ABI name and `xN`; perf's number
/// (`arch/riscv/include/uapi/asm/perf_regs.h`: `PERF_REG_RISCV_PC` = 0,
/// `RA` = 1 ... `T6` = 31, so the register's own number), its slot in
/// `struct pt_regs` (the same) and its tracefs name (`regoffset_table` in
/// `arch/riscv/kernel/ptrace.c`). `zero` always reads 0: nothing samples
/// or fetches it.
const REGISTERS: &[super::Register] = registers! {
    Reg64::Riscv(0) => ["zero" W64, "x0" W64];
    Reg64::Riscv(1) => ["ra" W64, "x1" W64] perf 1 pt_regs 1 tracefs "ra";
    Reg64::Riscv(2) => ["sp" W64, "x2" W64] perf 2 pt_regs 2 tracefs "sp";
    Reg64::Riscv(3) => ["gp" W64, "x3" W64] perf 3 pt_regs 3 tracefs "gp";
    Reg64::Riscv(4) => ["tp" W64, "x4" W64] perf 4 pt_regs 4 tracefs "tp";
    Reg64::Riscv(5) => ["t0" W64, "x5" W64] perf 5 pt_regs 5 tracefs "t0";
    Reg64::Riscv(6) => ["t1" W64, "x6" W64] perf 6 pt_regs 6 tracefs "t1";
    Reg64::Riscv(7) => ["t2" W64, "x7" W64] perf 7 pt_regs 7 tracefs "t2";
    Reg64::Riscv(8) => ["s0" W64, "fp" W64, "x8" W64] perf 8 pt_regs 8 tracefs "s0";
    Reg64::Riscv(9) => ["s1" W64, "x9" W64] perf 9 pt_regs 9 tracefs "s1";
    Reg64::Riscv(10) => ["a0" W64, "x10" W64] perf 10 pt_regs 10 tracefs "a0";
    Reg64::Riscv(11) => ["a1" W64, "x11" W64] perf 11 pt_regs 11 tracefs "a1";
    Reg64::Riscv(12) => ["a2" W64, "x12" W64] perf 12 pt_regs 12 tracefs "a2";
    Reg64::Riscv(13) => ["a3" W64, "x13" W64] perf 13 pt_regs 13 tracefs "a3";
    Reg64::Riscv(14) => ["a4" W64, "x14" W64] perf 14 pt_regs 14 tracefs "a4";
    Reg64::Riscv(15) => ["a5" W64, "x15" W64] perf 15 pt_regs 15 tracefs "a5";
    Reg64::Riscv(16) => ["a6" W64, "x16" W64] perf 16 pt_regs 16 tracefs "a6";
    Reg64::Riscv(17) => ["a7" W64, "x17" W64] perf 17 pt_regs 17 tracefs "a7";
    Reg64::Riscv(18) => ["s2" W64, "x18" W64] perf 18 pt_regs 18 tracefs "s2";
    Reg64::Riscv(19) => ["s3" W64, "x19" W64] perf 19 pt_regs 19 tracefs "s3";
    Reg64::Riscv(20) => ["s4" W64, "x20" W64] perf 20 pt_regs 20 tracefs "s4";
    Reg64::Riscv(21) => ["s5" W64, "x21" W64] perf 21 pt_regs 21 tracefs "s5";
    Reg64::Riscv(22) => ["s6" W64, "x22" W64] perf 22 pt_regs 22 tracefs "s6";
    Reg64::Riscv(23) => ["s7" W64, "x23" W64] perf 23 pt_regs 23 tracefs "s7";
    Reg64::Riscv(24) => ["s8" W64, "x24" W64] perf 24 pt_regs 24 tracefs "s8";
    Reg64::Riscv(25) => ["s9" W64, "x25" W64] perf 25 pt_regs 25 tracefs "s9";
    Reg64::Riscv(26) => ["s10" W64, "x26" W64] perf 26 pt_regs 26 tracefs "s10";
    Reg64::Riscv(27) => ["s11" W64, "x27" W64] perf 27 pt_regs 27 tracefs "s11";
    Reg64::Riscv(28) => ["t3" W64, "x28" W64] perf 28 pt_regs 28 tracefs "t3";
    Reg64::Riscv(29) => ["t4" W64, "x29" W64] perf 29 pt_regs 29 tracefs "t4";
    Reg64::Riscv(30) => ["t5" W64, "x30" W64] perf 30 pt_regs 30 tracefs "t5";
    Reg64::Riscv(31) => ["t6" W64, "x31" W64] perf 31 pt_regs 31 tracefs "t6";
    Reg64::RiscvPc => ["pc" W64] perf 0 pt_regs 0 tracefs "epc";
};

/// `disp(reg)`, as gcc writes it even for 0 (`0(a5)`).
fn write_memory(f: &mut fmt::Formatter<'_>, base: Reg, disp: i64) -> fmt::Result {
    write!(f, "{disp}({base})")
}

/// A register (`a0`, `x10`), `disp(reg)` (`-16(s0)`, `(a0)`) or an
/// immediate (`-42`). A relocation as displacement (`%lo(sym)(a5)`, which
/// gcc writes for a global in a position-dependent executable) is not
/// resolved.
fn parse_operand(text: &str) -> Result<Operand, String> {
    let not = || format!("`{text}` is not a riscv64 register, memory operand or immediate");
    // `%lo(sym)`: an operator, its operand in parentheses.
    let operator = text.strip_prefix('%').and_then(|t| t.split_once('('));
    if let Some((op, arg)) = operator.filter(|(op, _)| !op.is_empty() && is_word(op)) {
        if let Some((arg, _)) = arg.split_once(')') {
            return Err(format!(
                "`%{op}({arg})` is a relocation this reader does not resolve"
            ));
        }
    }
    if let Some(reg) = ARCH.parse_reg(text) {
        return Ok(Operand::Register(reg));
    }
    if let Some((disp, rest)) = text.split_once('(') {
        let reg = rest.strip_suffix(')').ok_or_else(not)?;
        let disp = match disp {
            "" => 0,
            d => parse_int(d).ok_or_else(not)?,
        };
        let base = ARCH.parse_reg(reg).ok_or_else(not)?;
        return Ok(Operand::Memory { base, disp });
    }
    parse_int(text).map(Operand::Immediate).ok_or_else(not)
}

/// `[a-z0-9_]+`: a relocation operator's name (`lo`, `pcrel_lo`).
fn is_word(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::RegWidth;

    #[test]
    fn names_parse_back() {
        for row in REGISTERS {
            for (n, w) in row.names {
                let reg = ARCH.parse_reg(n).unwrap();
                assert_eq!((reg.reg, reg.width), (row.reg, *w));
            }
            // Printed by the ABI name.
            assert_eq!(ARCH.name(row.reg, RegWidth::W64), row.names[0].0);
        }
        assert_eq!(ARCH.parse_reg("fp").map(|r| r.reg), Some(Reg64::Riscv(8)));
        assert_eq!(ARCH.parse_reg("x32"), None);
        assert_eq!(ARCH.parse_reg("s12"), None);
        assert_eq!(ARCH.parse_reg("w0"), None);
    }

    /// `enum perf_event_riscv_regs` (`arch/riscv/include/uapi/asm/perf_regs.h`),
    /// in order from 0.
    const PERF_REGS: [&str; 32] = [
        "PC", "RA", "SP", "GP", "TP", "T0", "T1", "T2", "S0", "S1", "A0", "A1", "A2", "A3", "A4",
        "A5", "A6", "A7", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "T3", "T4",
        "T5", "T6",
    ];

    /// `struct pt_regs` (`arch/riscv/include/asm/ptrace.h`) in order, by
    /// field: the names `regoffset_table` (`arch/riscv/kernel/ptrace.c`)
    /// gives them, `REG_OFFSET_NAME(epc)` .. `REG_OFFSET_NAME(orig_a0)`.
    const PT_REGS_FIELDS: [&str; 36] = [
        "epc", "ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1", "a0", "a1", "a2", "a3", "a4",
        "a5", "a6", "a7", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4",
        "t5", "t6", "status", "badaddr", "cause", "orig_a0",
    ];

    #[test]
    fn every_row_has_the_kernel_headers_numbers() {
        assert_eq!(REGISTERS.len(), 33);
        for row in REGISTERS {
            let name = row.names[0].0;
            if row.reg == Reg64::Riscv(0) {
                // `zero`: in neither perf's registers nor `pt_regs`.
                assert_eq!((row.perf, row.pt_regs, row.tracefs), (None, None, None));
                continue;
            }
            let header = if name == "pc" {
                "PC".to_string()
            } else {
                name.to_uppercase()
            };
            let perf = PERF_REGS.iter().position(|r| *r == header);
            assert_eq!(row.perf.map(|n| n as usize), perf, "{name}: perf");
            let slot = usize::from(row.pt_regs.unwrap());
            assert_eq!(Some(PT_REGS_FIELDS[slot]), row.tracefs, "{name}: pt_regs");
            // `struct user_regs_struct`, the program's context, is the
            // first 32 fields: every register a note names is in it.
            assert!(slot < ARCH.pt_regs, "{name}");
        }
        // `xN` is register N: its perf number and slot are N.
        for n in 1..32u8 {
            let row = ARCH.register(Reg64::Riscv(n)).unwrap();
            assert_eq!(row.names.last().unwrap().0, format!("x{n}"));
            assert_eq!((row.perf, row.pt_regs), (Some(u32::from(n)), Some(n)));
        }
        assert_eq!(ARCH.register(ARCH.sp).unwrap().tracefs, Some("sp"));
        assert_eq!(ARCH.register(ARCH.ip).unwrap().tracefs, Some("epc"));
        // The frame pointer s0 and the return address ra (no unwinder
        // takes them yet: riscv64's stacks are refused).
        assert_eq!(ARCH.register(ARCH.fp).unwrap().tracefs, Some("s0"));
        assert_eq!(ARCH.lr.and_then(|r| ARCH.tracefs(r)), Some("ra"));
    }

    /// On a riscv64 host, the numbers are also perf-event-open-sys's,
    /// generated from that machine's headers.
    #[cfg(target_arch = "riscv64")]
    #[test]
    fn every_perf_number_is_the_bindings() {
        use perf_event_open_sys::bindings as b;
        assert_eq!(ARCH.by_perf(b::PERF_REG_RISCV_PC), Some(Reg64::RiscvPc));
        assert_eq!(ARCH.by_perf(b::PERF_REG_RISCV_SP), Some(Reg64::Riscv(2)));
        assert_eq!(ARCH.by_perf(b::PERF_REG_RISCV_A0), Some(Reg64::Riscv(10)));
        assert_eq!(ARCH.by_perf(b::PERF_REG_RISCV_T6), Some(Reg64::Riscv(31)));
    }

    /// What `riscv64-linux-gnu-gcc` writes (`-O0`, `-O2`, `-Os`, `-fPIC`):
    /// ABI register names, `disp(reg)` with `0(a6)` for no displacement,
    /// bare immediates; `%lo(sym)(reg)` in a position-dependent executable.
    #[test]
    fn what_gcc_writes() {
        let r = |n| Reg {
            reg: Reg64::Riscv(n),
            width: RegWidth::W64,
        };
        let ops: Vec<Operand> = "a0 t5 s8 -68(s0) 8(sp) 0(a6) -32(t3) -42 0 (a1) 0x10(x10)"
            .split(' ')
            .map(|o| parse_operand(o).unwrap_or_else(|e| panic!("{o}: {e}")))
            .collect();
        let mem = |n, disp| Operand::Memory { base: r(n), disp };
        assert_eq!(
            ops,
            [
                Operand::Register(r(10)),
                Operand::Register(r(30)),
                Operand::Register(r(24)),
                mem(8, -68),
                mem(2, 8),
                mem(16, 0),
                mem(28, -32),
                Operand::Immediate(-42),
                Operand::Immediate(0),
                mem(11, 0),
                mem(10, 16),
            ]
        );
        assert_eq!(
            parse_operand("%lo(g_c)(t6)"),
            Err("`%lo(g_c)` is a relocation this reader does not resolve".into())
        );
        for bad in [
            "%rax", "%(a0)", "x0]", "[a0]", "8(a0", "y(a0)", "8(q0)", "x32", "",
        ] {
            assert_eq!(
                parse_operand(bad),
                Err(format!(
                    "`{bad}` is not a riscv64 register, memory operand or immediate"
                )),
                "{bad}"
            );
        }
    }
}
