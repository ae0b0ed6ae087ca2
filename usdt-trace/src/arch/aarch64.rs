//! aarch64's general registers as notes name them (`x0`..`x30`,
//! `w0`..`w30`, `sp`), with perf's numbers and tracefs's names. Notes for
//! aarch64 are read and listed; sampling decodes x86-64 registers only, so
//! the numbers here are not used by the sampler yet.

use super::{Reg, Reg64, RegWidth};

// perf's numbers and tracefs's names are not used yet: the sampler decodes
// x86-64 samples only. They are the row a sampler for aarch64 needs.

/// perf's number of `xN` (`arch/arm64/include/uapi/asm/perf_regs.h`:
/// `PERF_REG_ARM64_X0` + N, `x30` is `PERF_REG_ARM64_LR`).
#[allow(dead_code)]
pub(crate) fn perf(reg: Reg64) -> Option<u32> {
    match reg {
        Reg64::X(n) if n <= 30 => Some(n.into()),
        Reg64::Sp => Some(PERF_SP),
        _ => None,
    }
}

/// perf's number of the stack pointer (`PERF_REG_ARM64_SP`).
#[allow(dead_code)]
pub(crate) const PERF_SP: u32 = 31;

/// The fetch argument's name in a tracefs uprobe event (`%x0`, `%sp`:
/// `regoffset_table` in `arch/arm64/kernel/ptrace.c`).
#[allow(dead_code)]
pub(crate) fn tracefs(reg: Reg64) -> Option<String> {
    match reg {
        Reg64::X(n) if n <= 30 => Some(format!("x{n}")),
        Reg64::Sp => Some("sp".into()),
        _ => None,
    }
}

/// Parses a register name (`x0`..`x30`, `w0`..`w30`, `sp`).
pub(crate) fn parse(name: &str) -> Option<Reg> {
    if name == "sp" {
        return Some(Reg {
            reg: Reg64::Sp,
            width: RegWidth::W64,
        });
    }
    let width = match name.as_bytes().first()? {
        b'x' => RegWidth::W64,
        b'w' => RegWidth::W32,
        _ => return None,
    };
    let digits = &name[1..];
    let leading_zero = digits.len() > 1 && digits.starts_with('0');
    if digits.is_empty() || leading_zero || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u8 = digits.parse().ok().filter(|n| *n <= 30)?;
    Some(Reg {
        reg: Reg64::X(n),
        width,
    })
}

/// The name of `reg` at `width`.
pub(crate) fn name(reg: Reg64, width: RegWidth) -> String {
    match reg {
        Reg64::Sp => "sp".into(),
        Reg64::X(n) if width == RegWidth::W32 => format!("w{n}"),
        Reg64::X(n) => format!("x{n}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_fetch_names() {
        assert_eq!(parse("w7").map(|r| name(r.reg, r.width)), Some("w7".into()));
        assert_eq!(parse("x31"), None);
        assert_eq!(parse("x01"), None);
        assert_eq!(perf(Reg64::X(30)), Some(30));
        assert_eq!(perf(Reg64::Sp), Some(31));
        assert_eq!(tracefs(Reg64::X(3)).as_deref(), Some("x3"));
    }
}
