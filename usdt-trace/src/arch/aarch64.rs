//! aarch64: its general registers as notes name them (`x0`..`x30`,
//! `w0`..`w30`, `sp`, and the program counter `pc`) and its operand syntax (`x0`, `[x0]`, `[sp, 16]`, bare
//! immediates). Notes for aarch64 are read and listed, but neither sampled
//! nor fetched by the kernel yet: the table has no perf number, `pt_regs`
//! slot or tracefs name.

use std::fmt;

use super::operand::parse_int;
use super::{registers, Arch, Machine, Operand, Reg, Reg64};

/// aarch64's table.
pub(super) const ARCH: Arch = Arch {
    machine: Machine::Aarch64,
    registers: REGISTERS,
    sp: Reg64::Sp,
    ip: Reg64::Pc,
    pt_regs: 0,
    reg_prefix: "",
    parse_operand,
    write_memory,
};

/// Every register a note may name.
const REGISTERS: &[super::Register] = registers! {
    Reg64::X(0) => ["x0" W64, "w0" W32];
    Reg64::X(1) => ["x1" W64, "w1" W32];
    Reg64::X(2) => ["x2" W64, "w2" W32];
    Reg64::X(3) => ["x3" W64, "w3" W32];
    Reg64::X(4) => ["x4" W64, "w4" W32];
    Reg64::X(5) => ["x5" W64, "w5" W32];
    Reg64::X(6) => ["x6" W64, "w6" W32];
    Reg64::X(7) => ["x7" W64, "w7" W32];
    Reg64::X(8) => ["x8" W64, "w8" W32];
    Reg64::X(9) => ["x9" W64, "w9" W32];
    Reg64::X(10) => ["x10" W64, "w10" W32];
    Reg64::X(11) => ["x11" W64, "w11" W32];
    Reg64::X(12) => ["x12" W64, "w12" W32];
    Reg64::X(13) => ["x13" W64, "w13" W32];
    Reg64::X(14) => ["x14" W64, "w14" W32];
    Reg64::X(15) => ["x15" W64, "w15" W32];
    Reg64::X(16) => ["x16" W64, "w16" W32];
    Reg64::X(17) => ["x17" W64, "w17" W32];
    Reg64::X(18) => ["x18" W64, "w18" W32];
    Reg64::X(19) => ["x19" W64, "w19" W32];
    Reg64::X(20) => ["x20" W64, "w20" W32];
    Reg64::X(21) => ["x21" W64, "w21" W32];
    Reg64::X(22) => ["x22" W64, "w22" W32];
    Reg64::X(23) => ["x23" W64, "w23" W32];
    Reg64::X(24) => ["x24" W64, "w24" W32];
    Reg64::X(25) => ["x25" W64, "w25" W32];
    Reg64::X(26) => ["x26" W64, "w26" W32];
    Reg64::X(27) => ["x27" W64, "w27" W32];
    Reg64::X(28) => ["x28" W64, "w28" W32];
    Reg64::X(29) => ["x29" W64, "w29" W32];
    Reg64::X(30) => ["x30" W64, "w30" W32];
    Reg64::Sp => ["sp" W64];
    Reg64::Pc => ["pc" W64];
};

/// `[reg]` or `[reg, disp]`.
fn write_memory(f: &mut fmt::Formatter<'_>, base: Reg, disp: i64) -> fmt::Result {
    match disp {
        0 => write!(f, "[{base}]"),
        _ => write!(f, "[{base}, {disp}]"),
    }
}

/// `xN`, `wN`, `sp`, `[reg]`, `[reg, disp]` (also `#disp`) or an immediate.
fn parse_operand(text: &str) -> Result<Operand, String> {
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

    #[test]
    fn names_parse_back() {
        let name = |r: Reg| ARCH.name(r.reg, r.width);
        assert_eq!(ARCH.parse_reg("w7").map(name), Some("w7"));
        assert_eq!(ARCH.parse_reg("x30").map(name), Some("x30"));
        assert_eq!(ARCH.parse_reg("sp").map(name), Some("sp"));
        assert_eq!(ARCH.parse_reg("x31"), None);
        assert_eq!(ARCH.parse_reg("x01"), None);
    }
}
