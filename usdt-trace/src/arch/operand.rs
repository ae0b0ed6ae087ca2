//! Where a probe argument's value is ([`Operand`]), as every machine's
//! notes say it, printed back in the machine's syntax; and the pieces of
//! operand syntax the machines' parsers share (integers, displacements,
//! symbols).

use std::fmt;

use super::Reg;

/// Where an argument's value is when the probe fires.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The value is in a register.
    Register(Reg),
    /// The value is in memory at `base + disp`.
    Memory {
        /// The register holding the base address.
        base: Reg,
        /// The displacement added to it.
        disp: i64,
    },
    /// The value is in memory at `base + index * scale + disp` (x86 SIB
    /// addressing: `8@(%rdx,%rax,8)`, `-4@-8(%rbp,%rcx,4)`).
    Indexed {
        /// The register holding the base address, if any (`(,%rax,8)` has none).
        base: Option<Reg>,
        /// The index register.
        index: Reg,
        /// 1, 2, 4 or 8.
        scale: u8,
        /// The displacement.
        disp: i64,
    },
    /// The value is in memory at a symbol plus an offset, addressed
    /// relative to `%rip` (`sym(%rip)`, `4+sym(%rip)`, `.LCPI0_0(%rip)`) or
    /// absolutely (a bare `sym`).
    Symbol {
        /// The symbol's name.
        name: String,
        /// The offset added to the symbol's address.
        offset: i64,
        /// The link-time address of `name + offset`, once the note reader
        /// found the symbol in the file's symbol tables (`None` as parsed).
        addr: Option<u64>,
    },
    /// The value is in memory at a symbol plus an offset plus registers,
    /// addressed absolutely: `nums(%rax,%rax)`, `arr(,%rdx,4)`,
    /// `t1+4(%rbx)`, which GCC writes in position-dependent executables
    /// (`-no-pie`).
    SymbolIndexed {
        /// The symbol's name.
        name: String,
        /// The offset added to the symbol's address.
        offset: i64,
        /// The link-time address of `name + offset`, once the note reader
        /// found the symbol in the file's symbol tables (`None` as parsed).
        addr: Option<u64>,
        /// The base register, if any (`arr(,%rdx,4)` has none).
        base: Option<Reg>,
        /// The index register, if any (`t1+4(%rbx)` has none).
        index: Option<Reg>,
        /// 1, 2, 4 or 8 (1 without an index).
        scale: u8,
    },
    /// The value is a constant.
    Immediate(i64),
    /// The value cannot be read: the argument's text and why.
    Unreadable {
        /// The argument as the note wrote it (`8f@%xmm0`).
        text: String,
        /// Why it cannot be read (`xmm registers are not sampled`).
        reason: String,
    },
}

/// The note's syntax, which parses back to the same operand (an unreadable
/// one prints the argument's whole text).
impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Register(reg) => write!(f, "{reg}"),
            Operand::Memory { base, disp } => match base.reg.arch() {
                Some(arch) => (arch.write_memory)(f, *base, *disp),
                None => write!(f, "{disp}({base})"),
            },
            Operand::Indexed {
                base,
                index,
                scale,
                disp,
            } => {
                if *disp != 0 {
                    write!(f, "{disp}")?;
                }
                let base = base.map(|b| b.to_string()).unwrap_or_default();
                write!(f, "({base},{index},{scale})")
            }
            Operand::Symbol {
                name, offset: 0, ..
            } => write!(f, "{name}(%rip)"),
            Operand::Symbol { name, offset, .. } => write!(f, "{offset}+{name}(%rip)"),
            Operand::SymbolIndexed {
                name,
                offset,
                base,
                index,
                scale,
                ..
            } => {
                if *offset != 0 {
                    write!(f, "{offset}+")?;
                }
                let base = base.map(|b| b.to_string()).unwrap_or_default();
                match index {
                    Some(index) => write!(f, "{name}({base},{index},{scale})"),
                    None => write!(f, "{name}({base})"),
                }
            }
            // An immediate does not name its instruction set; `$` is x86's form.
            Operand::Immediate(n) => write!(f, "${n}"),
            Operand::Unreadable { text, .. } => f.write_str(text),
        }
    }
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
fn is_symbol(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_.$".contains(&b))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_at_the_limits() {
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int("9223372036854775808"), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_uint("0X1f"), Some(31));
    }
}
