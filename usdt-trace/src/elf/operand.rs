//! Operand syntax, one parser per machine: AT&T for x86-64 (`%reg`,
//! `$imm`, `disp(%reg)`, `disp(base,index,scale)`, `sym(%rip)`,
//! `nums(%rax,%rax)`) and the aarch64 forms (`xN`, `[reg, disp]`, bare
//! immediates). Errors are words for [`Operand::Unreadable`].

use super::arg::{Operand, Reg, Reg64};

pub(super) fn parse_x86_operand(text: &str) -> Result<Operand, String> {
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
pub(super) fn x86_reg(text: &str) -> Result<Reg, String> {
    text.strip_prefix('%')
        .and_then(Reg::parse_x86_64)
        .ok_or_else(|| format!("`{text}` is not an x86-64 general register"))
}

/// A displacement: integers and at most one symbol, added and subtracted
/// (`-12+4`, `sym+8`, `4+sym`, `.LCPI0_0`); empty is 0.
pub(super) fn parse_disp(text: &str) -> Result<(Option<&str>, i64), String> {
    let bad = || format!("displacement `{text}` is not a sum of integers and one symbol");
    let (mut symbol, mut total) = (None, 0i64);
    let mut rest = text;
    let mut first = true;
    while !rest.is_empty() {
        let (negative, after) = match rest.as_bytes()[0] {
            b'-' => (true, &rest[1..]),
            b'+' => (false, &rest[1..]),
            _ if first => (false, rest),
            _ => return Err(bad()),
        };
        first = false;
        let end = after.find(['+', '-']).unwrap_or(after.len());
        let term = &after[..end];
        rest = &after[end..];
        if term.starts_with(|c: char| c.is_ascii_digit()) {
            let n = parse_uint(term).ok_or_else(bad)?;
            total = match negative {
                true => total.checked_sub_unsigned(n),
                false => total.checked_add_unsigned(n),
            }
            .ok_or_else(|| format!("displacement `{text}` overflows 64 bits"))?;
        } else if is_symbol(term) && !negative && symbol.is_none() {
            symbol = Some(term);
        } else if term.contains('@') {
            return Err(format!(
                "`{term}` is a relocation this reader does not resolve"
            ));
        } else {
            return Err(bad());
        }
    }
    Ok((symbol, total))
}

/// An assembler symbol: `[A-Za-z_.][A-Za-z0-9_.$]*`.
pub(super) fn is_symbol(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_.$".contains(&b))
}
/// `xN`, `wN`, `sp`, `[reg]`, `[reg, disp]` (also `#disp`) or an immediate.
pub(super) fn parse_aarch64_operand(text: &str) -> Option<Operand> {
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
            base: Reg::parse_aarch64(reg)?,
            disp,
        });
    }
    if let Some(reg) = Reg::parse_aarch64(text) {
        return Some(Operand::Register(reg));
    }
    parse_int(text.strip_prefix('#').unwrap_or(text)).map(Operand::Immediate)
}

/// A decimal or `0x` hexadecimal integer with an optional sign, within i64.
pub(super) fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = parse_uint(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// A decimal or `0x` hexadecimal integer without a sign.
pub(super) fn parse_uint(digits: &str) -> Option<u64> {
    match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse::<u64>().ok()
        }
        None => None,
    }
}
