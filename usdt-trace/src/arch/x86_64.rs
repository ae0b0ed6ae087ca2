//! x86-64: one row per general register with every name a note, perf and
//! tracefs give it, and the AT&T operand syntax of its notes (`%reg`,
//! `$imm`, `disp(%reg)`, `disp(base,index,scale)`, `sym(%rip)`,
//! `nums(%rax,%rax)`).

use std::fmt;

use super::operand::{parse_disp, parse_int};
use super::{registers, Arch, Machine, Operand, Reg, Reg64};

/// x86-64's table.
pub(super) const ARCH: Arch = Arch {
    machine: Machine::X86_64,
    registers: REGISTERS,
    sp: Reg64::Rsp,
    ip: Reg64::Rip,
    fp: Reg64::Rbp,
    lr: None,
    object: object::Architecture::X86_64,
    pt_regs: PT_REGS,
    reg_prefix: "%",
    parse_operand,
    write_memory,
};

/// The 8-byte registers of x86-64's `struct pt_regs`
/// (`arch/x86/include/asm/ptrace.h`: r15, r14, r13, r12, bp, bx, r11, r10,
/// r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss), which is
/// what a BPF uprobe program is given (`bpf_user_pt_regs_t`).
const PT_REGS: usize = 21;

/// Every register a note may name: its AT&T names (without `%`) for the
/// whole register, the low 32, 16 and 8 bits and the second byte; perf's
/// number (`arch/x86/include/uapi/asm/perf_regs.h`), its `struct pt_regs`
/// slot and its tracefs name (`regoffset_table` in
/// `arch/x86/kernel/ptrace.c`).
const REGISTERS: &[super::Register] = registers! {
    Reg64::Rax => ["rax" W64, "eax" W32, "ax" W16, "al" Low8, "ah" High8]
        perf 0 pt_regs 10 tracefs "ax";
    Reg64::Rbx => ["rbx" W64, "ebx" W32, "bx" W16, "bl" Low8, "bh" High8]
        perf 1 pt_regs 5 tracefs "bx";
    Reg64::Rcx => ["rcx" W64, "ecx" W32, "cx" W16, "cl" Low8, "ch" High8]
        perf 2 pt_regs 11 tracefs "cx";
    Reg64::Rdx => ["rdx" W64, "edx" W32, "dx" W16, "dl" Low8, "dh" High8]
        perf 3 pt_regs 12 tracefs "dx";
    Reg64::Rsi => ["rsi" W64, "esi" W32, "si" W16, "sil" Low8] perf 4 pt_regs 13 tracefs "si";
    Reg64::Rdi => ["rdi" W64, "edi" W32, "di" W16, "dil" Low8] perf 5 pt_regs 14 tracefs "di";
    Reg64::Rbp => ["rbp" W64, "ebp" W32, "bp" W16, "bpl" Low8] perf 6 pt_regs 4 tracefs "bp";
    Reg64::Rsp => ["rsp" W64, "esp" W32, "sp" W16, "spl" Low8] perf 7 pt_regs 19 tracefs "sp";
    Reg64::Rip => ["rip" W64] perf 8 pt_regs 16 tracefs "ip";
    Reg64::R8 => ["r8" W64, "r8d" W32, "r8w" W16, "r8b" Low8] perf 16 pt_regs 9 tracefs "r8";
    Reg64::R9 => ["r9" W64, "r9d" W32, "r9w" W16, "r9b" Low8] perf 17 pt_regs 8 tracefs "r9";
    Reg64::R10 => ["r10" W64, "r10d" W32, "r10w" W16, "r10b" Low8]
        perf 18 pt_regs 7 tracefs "r10";
    Reg64::R11 => ["r11" W64, "r11d" W32, "r11w" W16, "r11b" Low8]
        perf 19 pt_regs 6 tracefs "r11";
    Reg64::R12 => ["r12" W64, "r12d" W32, "r12w" W16, "r12b" Low8]
        perf 20 pt_regs 3 tracefs "r12";
    Reg64::R13 => ["r13" W64, "r13d" W32, "r13w" W16, "r13b" Low8]
        perf 21 pt_regs 2 tracefs "r13";
    Reg64::R14 => ["r14" W64, "r14d" W32, "r14w" W16, "r14b" Low8]
        perf 22 pt_regs 1 tracefs "r14";
    Reg64::R15 => ["r15" W64, "r15d" W32, "r15w" W16, "r15b" Low8]
        perf 23 pt_regs 0 tracefs "r15";
};

/// `(%reg)` or `disp(%reg)`.
fn write_memory(f: &mut fmt::Formatter<'_>, base: Reg, disp: i64) -> fmt::Result {
    match disp {
        0 => write!(f, "({base})"),
        _ => write!(f, "{disp}({base})"),
    }
}

/// An AT&T operand.
fn parse_operand(text: &str) -> Result<Operand, String> {
    if text.is_empty() {
        return Err("the operand is empty".into());
    }
    if let Some(imm) = text.strip_prefix('$') {
        return parse_int(imm)
            .map(Operand::Immediate)
            .ok_or_else(|| format!("immediate `{text}` is not an integer"));
    }
    if let Some(reg) = text.strip_prefix('%') {
        return x86_reg(text).map(Operand::Register).map_err(|e| {
            match reg.trim_end_matches(|c: char| c.is_ascii_digit()) {
                "xmm" | "ymm" | "zmm" => format!("{} registers are not sampled", &reg[..3]),
                _ => e,
            }
        });
    }
    let (disp, inner) = match text.split_once('(') {
        Some((disp, rest)) => {
            let inner = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("`{text}` has no closing parenthesis"))?;
            (disp, Some(inner))
        }
        None => (text, None),
    };
    let (symbol, disp) = parse_disp(disp)?;
    let parts: Vec<&str> = inner.map_or(vec![], |i| i.split(',').collect());
    let (base, index, scale) = match parts.as_slice() {
        [] => (None, None, 1),
        [base] => (Some(x86_reg(base)?), None, 1),
        [base, index] | [base, index, _] => {
            let scale = match parts.get(2) {
                Some(s) => s
                    .parse::<u8>()
                    .ok()
                    .filter(|s| matches!(s, 1 | 2 | 4 | 8))
                    .ok_or_else(|| format!("scale `{s}` in `{text}` is not 1, 2, 4 or 8"))?,
                None => 1,
            };
            let base = match *base {
                "" => None,
                b => Some(x86_reg(b)?),
            };
            let index = x86_reg(index)?;
            if matches!(index.reg, Reg64::Rsp | Reg64::Rip) {
                return Err(format!("`{text}` uses {index} as an index"));
            }
            (base, Some(index), scale)
        }
        _ => return Err(format!("`{text}` has more than three registers")),
    };
    let rip = base.is_some_and(|b| b.reg == Reg64::Rip);
    Ok(match (symbol, base, index) {
        (Some(name), None, None) => Operand::Symbol {
            name: name.into(),
            offset: disp,
            addr: None,
        },
        (Some(name), Some(_), None) if rip => Operand::Symbol {
            name: name.into(),
            offset: disp,
            addr: None,
        },
        (Some(_), _, _) if rip => {
            return Err(format!("`{text}` is relative to %rip and to an index"))
        }
        (Some(name), base, index) => Operand::SymbolIndexed {
            name: name.into(),
            offset: disp,
            addr: None,
            base,
            index,
            scale,
        },
        (None, None, None) => return Err(format!("`{text}` is an absolute address, not read")),
        (None, Some(base), None) => Operand::Memory { base, disp },
        (None, base, Some(index)) => Operand::Indexed {
            base,
            index,
            scale,
            disp,
        },
    })
}

/// A `%reg` name.
fn x86_reg(text: &str) -> Result<Reg, String> {
    text.strip_prefix('%')
        .and_then(|name| ARCH.parse_reg(name))
        .ok_or_else(|| format!("`{text}` is not an x86-64 general register"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::RegWidth;

    #[test]
    fn every_name_parses_back() {
        for r in REGISTERS {
            for (n, w) in r.names {
                let reg = ARCH.parse_reg(n).unwrap();
                assert_eq!((reg.reg, reg.width), (r.reg, *w));
                assert_eq!(ARCH.name(reg.reg, reg.width), *n);
            }
        }
        assert_eq!(ARCH.parse_reg("ah").map(|r| r.width), Some(RegWidth::High8));
        assert_eq!(ARCH.name(Reg64::Rsi, RegWidth::High8), "rsi");
        assert_eq!(ARCH.name(Reg64::Rip, RegWidth::W32), "rip");
        assert_eq!(ARCH.parse_reg(""), None);
        assert_eq!(ARCH.parse_reg("xmm0"), None);
        assert_eq!(ARCH.parse_reg("x0"), None);
    }

    /// perf's numbers, as `arch/x86/include/uapi/asm/perf_regs.h` has them
    /// (`PERF_REG_X86_AX` = 0 ... `PERF_REG_X86_IP` = 8, `PERF_REG_X86_R8`
    /// = 16 ... `PERF_REG_X86_R15` = 23).
    #[test]
    fn perf_numbers_are_the_kernel_headers() {
        let want = [
            (Reg64::Rax, 0),
            (Reg64::Rbx, 1),
            (Reg64::Rcx, 2),
            (Reg64::Rdx, 3),
            (Reg64::Rsi, 4),
            (Reg64::Rdi, 5),
            (Reg64::Rbp, 6),
            (Reg64::Rsp, 7),
            (Reg64::Rip, 8),
            (Reg64::R8, 16),
            (Reg64::R9, 17),
            (Reg64::R10, 18),
            (Reg64::R11, 19),
            (Reg64::R12, 20),
            (Reg64::R13, 21),
            (Reg64::R14, 22),
            (Reg64::R15, 23),
        ];
        assert_eq!(REGISTERS.len(), want.len());
        for (reg, perf) in want {
            assert_eq!(ARCH.register(reg).unwrap().perf, Some(perf), "{reg:?}");
            assert_eq!(ARCH.by_perf(perf), Some(reg));
        }
        assert_eq!(ARCH.register(ARCH.sp).unwrap().perf, Some(7));
        assert_eq!(ARCH.by_perf(9), None); // flags: no note names it
        // Unwinding starts from rip, rsp and rbp: a call pushes its return
        // address, so no link register.
        let unwind: Vec<Reg64> = ARCH.unwind_registers().collect();
        assert_eq!(unwind, [Reg64::Rip, Reg64::Rsp, Reg64::Rbp]);
    }

    /// `struct pt_regs` in order (`arch/x86/include/asm/ptrace.h`), by the
    /// names tracefs gives its fields.
    const PT_REGS_FIELDS: [&str; PT_REGS] = [
        "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si",
        "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
    ];

    #[test]
    fn pt_regs_slots_agree_with_tracefs_names() {
        for r in REGISTERS {
            let slot = usize::from(r.pt_regs.unwrap());
            assert_eq!(Some(PT_REGS_FIELDS[slot]), r.tracefs, "{:?}", r.reg);
        }
    }

    /// The runtime's list of low bytes that notes name by the whole
    /// register is this table's r8..r15, in order, and each name parses.
    #[test]
    fn the_runtime_names_the_same_low_bytes() {
        use usdt_runtime::site::X86_64_LOW8_WRITTEN_WHOLE;
        let numbered: Vec<(&str, &str)> = REGISTERS
            .iter()
            .filter(|r| r.names[0].0[1..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|r| (r.names[3].0, r.names[0].0))
            .collect();
        assert_eq!(numbered, X86_64_LOW8_WRITTEN_WHOLE);
        for (low8, whole) in X86_64_LOW8_WRITTEN_WHOLE {
            let reg = ARCH.parse_reg(low8).unwrap();
            assert_eq!(reg.width, RegWidth::Low8);
            assert_eq!(ARCH.name(reg.reg, RegWidth::W64), whole);
        }
    }
}
