//! aarch64's general registers as notes name them (`x0`..`x30`,
//! `w0`..`w30`, `sp`). Notes for aarch64 are read and listed, but neither
//! sampled nor fetched by the kernel: the sampler decodes x86-64 registers
//! only, so this table has no perf number or tracefs name yet (a sampler
//! for aarch64 adds them, with the tests that check them against samples).

use super::{Reg, Reg64, RegWidth};

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
    fn names_parse_back() {
        assert_eq!(parse("w7").map(|r| name(r.reg, r.width)), Some("w7".into()));
        assert_eq!(
            parse("x30").map(|r| name(r.reg, r.width)),
            Some("x30".into())
        );
        assert_eq!(parse("sp").map(|r| name(r.reg, r.width)), Some("sp".into()));
        assert_eq!(parse("x31"), None);
        assert_eq!(parse("x01"), None);
    }
}
