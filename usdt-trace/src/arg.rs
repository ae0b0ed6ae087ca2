//! Probe arguments: the note's argument string (`-4@%edi 8@-16(%rbp) 2@$5`)
//! parsed into size, sign and operand.
//!
//! Each argument is `SIZE@OPERAND`, separated by spaces; a negative size means
//! a signed value. x86-64 operands are AT&T syntax (`%reg`, `disp(%reg)`,
//! `$imm`); aarch64 operands are `xN`/`wN`/`sp`, `[reg]`, `[reg, disp]` and
//! bare immediates.

use std::fmt;

use crate::Error;

/// The longest argument string accepted (sys/sdt.h's twelve arguments take
/// well under 200 bytes).
pub const MAX_ARGS_TEXT: usize = 4096;

/// The most arguments one site may describe.
pub const MAX_ARGS: usize = 32;

/// The instruction set a note was written for: it decides the register names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    /// x86-64 (`EM_X86_64`).
    X86_64,
    /// 64-bit Arm (`EM_AARCH64`).
    Aarch64,
}

/// One argument of a probe site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Arg {
    /// The size in bytes (1, 2, 4 or 8).
    pub size: u8,
    /// Whether the value is signed (a negative size in the note).
    pub signed: bool,
    /// Where the value is at the probe site.
    pub operand: Operand,
}

/// Where an argument's value is when the probe fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// The value is a constant.
    Immediate(i64),
}

/// A register as the note names it: the full 64-bit register and the part of
/// it the note uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    /// The 64-bit register.
    pub reg: Reg64,
    /// The part named in the note (`%al` is [`RegWidth::Low8`] of `rax`).
    pub width: RegWidth,
}

/// A 64-bit general register of x86-64 or aarch64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the variant names are the register names
pub enum Reg64 {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    Rbp,
    Rsp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
    /// The x86-64 instruction pointer (`%rip`), only as a memory base.
    Rip,
    /// aarch64 `x0` to `x30`.
    X(u8),
    /// The aarch64 stack pointer.
    Sp,
}

/// The part of a register a note names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegWidth {
    /// The low byte (`%al`, `%sil`, `%r8b`).
    Low8,
    /// The second byte (`%ah`, `%bh`, `%ch`, `%dh`).
    High8,
    /// The low 16 bits (`%ax`, `%r8w`).
    W16,
    /// The low 32 bits (`%eax`, `%r8d`, aarch64 `w0`).
    W32,
    /// The whole register (`%rax`, aarch64 `x0`, `sp`).
    W64,
}

impl RegWidth {
    /// The size of this part in bytes.
    pub fn bytes(self) -> u8 {
        match self {
            RegWidth::Low8 | RegWidth::High8 => 1,
            RegWidth::W16 => 2,
            RegWidth::W32 => 4,
            RegWidth::W64 => 8,
        }
    }
}

/// x86-64 register names: the 64-bit register, then its 32, 16 and 8-bit names.
const X86_NAMES: [(Reg64, [&str; 4]); 16] = [
    (Reg64::Rax, ["rax", "eax", "ax", "al"]),
    (Reg64::Rbx, ["rbx", "ebx", "bx", "bl"]),
    (Reg64::Rcx, ["rcx", "ecx", "cx", "cl"]),
    (Reg64::Rdx, ["rdx", "edx", "dx", "dl"]),
    (Reg64::Rsi, ["rsi", "esi", "si", "sil"]),
    (Reg64::Rdi, ["rdi", "edi", "di", "dil"]),
    (Reg64::Rbp, ["rbp", "ebp", "bp", "bpl"]),
    (Reg64::Rsp, ["rsp", "esp", "sp", "spl"]),
    (Reg64::R8, ["r8", "r8d", "r8w", "r8b"]),
    (Reg64::R9, ["r9", "r9d", "r9w", "r9b"]),
    (Reg64::R10, ["r10", "r10d", "r10w", "r10b"]),
    (Reg64::R11, ["r11", "r11d", "r11w", "r11b"]),
    (Reg64::R12, ["r12", "r12d", "r12w", "r12b"]),
    (Reg64::R13, ["r13", "r13d", "r13w", "r13b"]),
    (Reg64::R14, ["r14", "r14d", "r14w", "r14b"]),
    (Reg64::R15, ["r15", "r15d", "r15w", "r15b"]),
];

const X86_WIDTHS: [RegWidth; 4] = [RegWidth::W64, RegWidth::W32, RegWidth::W16, RegWidth::Low8];

const X86_HIGH: [(Reg64, &str); 4] = [
    (Reg64::Rax, "ah"),
    (Reg64::Rbx, "bh"),
    (Reg64::Rcx, "ch"),
    (Reg64::Rdx, "dh"),
];

impl Reg {
    /// Parses an x86-64 register name without its `%` (`eax`, `r8b`, `rip`).
    pub fn parse_x86_64(name: &str) -> Option<Reg> {
        if name == "rip" {
            return Some(Reg {
                reg: Reg64::Rip,
                width: RegWidth::W64,
            });
        }
        for (reg, names) in X86_NAMES {
            if let Some(i) = names.iter().position(|n| *n == name) {
                return Some(Reg {
                    reg,
                    width: X86_WIDTHS[i],
                });
            }
        }
        let (reg, _) = X86_HIGH.iter().find(|(_, n)| *n == name)?;
        Some(Reg {
            reg: *reg,
            width: RegWidth::High8,
        })
    }

    /// Parses an aarch64 register name (`x0`..`x30`, `w0`..`w30`, `sp`).
    pub fn parse_aarch64(name: &str) -> Option<Reg> {
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

    /// The name as a note writes it, without x86's `%`.
    pub fn name(&self) -> String {
        match self.reg {
            Reg64::Rip => "rip".into(),
            Reg64::Sp => "sp".into(),
            Reg64::X(n) if self.width == RegWidth::W32 => format!("w{n}"),
            Reg64::X(n) => format!("x{n}"),
            reg if self.width == RegWidth::High8 => {
                let high = X86_HIGH.iter().find(|(r, _)| *r == reg);
                // A high byte of another register does not exist: show the register.
                high.map_or_else(
                    || {
                        Reg {
                            reg,
                            width: RegWidth::W64,
                        }
                        .name()
                    },
                    |(_, n)| (*n).into(),
                )
            }
            reg => {
                let names = X86_NAMES
                    .iter()
                    .find(|(r, _)| *r == reg)
                    .map_or([""; 4], |(_, n)| *n);
                let i = X86_WIDTHS
                    .iter()
                    .position(|w| *w == self.width)
                    .unwrap_or(0);
                names[i].into()
            }
        }
    }

    /// Whether this is an aarch64 register.
    pub fn is_aarch64(&self) -> bool {
        matches!(self.reg, Reg64::X(_) | Reg64::Sp)
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_aarch64() {
            f.write_str(&self.name())
        } else {
            write!(f, "%{}", self.name())
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Operand::Register(reg) => write!(f, "{reg}"),
            Operand::Memory { base, disp } if base.is_aarch64() => match disp {
                0 => write!(f, "[{base}]"),
                _ => write!(f, "[{base}, {disp}]"),
            },
            Operand::Memory { base, disp: 0 } => write!(f, "({base})"),
            Operand::Memory { base, disp } => write!(f, "{disp}({base})"),
            // An immediate does not name its instruction set; `$` is x86's form.
            Operand::Immediate(n) => write!(f, "${n}"),
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.signed { "-" } else { "" };
        write!(f, "{sign}{}@{}", self.size, self.operand)
    }
}

/// Parses a note's whole argument string.
///
/// ```
/// use usdt_trace::{parse_args, Machine, Operand};
/// let args = parse_args("-4@%edi 8@-16(%rbp) 2@$5", Machine::X86_64).unwrap();
/// assert_eq!((args[0].size, args[0].signed), (4, true));
/// assert!(matches!(args[1].operand, Operand::Memory { disp: -16, .. }));
/// assert_eq!(args[2].operand, Operand::Immediate(5));
/// assert_eq!(args[0].to_string(), "-4@%edi");
/// ```
pub fn parse_args(text: &str, machine: Machine) -> Result<Vec<Arg>, Error> {
    if text.len() > MAX_ARGS_TEXT {
        return Err(Error::BadArgs {
            text: text.chars().take(64).collect(),
            reason: format!("the argument string is longer than {MAX_ARGS_TEXT} bytes"),
        });
    }
    let args = split_args(text)
        .map(|arg| parse_arg(arg, machine))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|reason| Error::BadArgs {
            text: text.into(),
            reason,
        })?;
    if args.len() > MAX_ARGS {
        return Err(Error::BadArgs {
            text: text.into(),
            reason: format!("there are more than {MAX_ARGS} arguments"),
        });
    }
    Ok(args)
}

/// Splits on spaces outside brackets (aarch64 writes `8@[sp, 16]`).
fn split_args(text: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0u32;
    text.split(move |c: char| {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        c.is_ascii_whitespace() && depth == 0
    })
    .filter(|s| !s.is_empty())
}

/// Parses one `SIZE@OPERAND`.
fn parse_arg(text: &str, machine: Machine) -> Result<Arg, String> {
    let (size, operand) = text
        .split_once('@')
        .ok_or_else(|| format!("argument `{text}` has no `SIZE@`"))?;
    let (signed, digits) = match size.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, size),
    };
    let size = match digits {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        _ => {
            return Err(format!(
                "argument `{text}` has size `{size}`, not 1, 2, 4 or 8"
            ))
        }
    };
    let operand = match machine {
        Machine::X86_64 => parse_x86_operand(operand),
        Machine::Aarch64 => parse_aarch64_operand(operand),
    }
    .ok_or_else(|| format!("argument `{text}` has an operand this reader does not understand"))?;
    Ok(Arg {
        size,
        signed,
        operand,
    })
}

/// `%reg`, `disp(%reg)`, `(%reg)` or `$imm`.
fn parse_x86_operand(text: &str) -> Option<Operand> {
    if let Some(imm) = text.strip_prefix('$') {
        return parse_int(imm).map(Operand::Immediate);
    }
    if let Some(reg) = text.strip_prefix('%') {
        return Reg::parse_x86_64(reg).map(Operand::Register);
    }
    let (disp, rest) = text.split_once('(')?;
    let reg = rest.strip_suffix(')')?.strip_prefix('%')?;
    let disp = if disp.is_empty() { 0 } else { parse_int(disp)? };
    Some(Operand::Memory {
        base: Reg::parse_x86_64(reg)?,
        disp,
    })
}

/// `xN`, `wN`, `sp`, `[reg]`, `[reg, disp]` (also `#disp`) or an immediate.
fn parse_aarch64_operand(text: &str) -> Option<Operand> {
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
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()?
        }
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse::<u64>().ok()?
        }
        None => return None,
    };
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x86(text: &str) -> Vec<Arg> {
        parse_args(text, Machine::X86_64).unwrap()
    }

    #[test]
    fn x86_registers_at_every_width() {
        for (text, reg, width) in [
            ("%al", Reg64::Rax, RegWidth::Low8),
            ("%ah", Reg64::Rax, RegWidth::High8),
            ("%si", Reg64::Rsi, RegWidth::W16),
            ("%sil", Reg64::Rsi, RegWidth::Low8),
            ("%dil", Reg64::Rdi, RegWidth::Low8),
            ("%r8b", Reg64::R8, RegWidth::Low8),
            ("%r8w", Reg64::R8, RegWidth::W16),
            ("%r15d", Reg64::R15, RegWidth::W32),
            ("%rbp", Reg64::Rbp, RegWidth::W64),
        ] {
            let arg = x86(&format!("8@{text}"))[0];
            assert_eq!(arg.operand, Operand::Register(Reg { reg, width }), "{text}");
            assert_eq!(arg.operand.to_string(), text);
        }
    }

    #[test]
    fn x86_memory_and_immediates() {
        let args = x86("  -4@-16(%rbp)   8@(%rax) 1@$-3 8@0x10(%rip)  -8@$0x7fffffffffffffff ");
        let rbp = Reg {
            reg: Reg64::Rbp,
            width: RegWidth::W64,
        };
        assert_eq!(
            args[0].operand,
            Operand::Memory {
                base: rbp,
                disp: -16
            }
        );
        assert_eq!(args[1].operand.to_string(), "(%rax)");
        assert_eq!(args[2].operand, Operand::Immediate(-3));
        assert_eq!(args[3].to_string(), "8@16(%rip)");
        assert_eq!(args[4].operand, Operand::Immediate(i64::MAX));
        assert_eq!(args.len(), 5);
        assert!(x86("").is_empty());
    }

    #[test]
    fn aarch64_operands() {
        let args = parse_args(
            "-4@w1 8@x30 8@[sp, 16] 4@[x2] -8@[x3, #-8] 2@5",
            Machine::Aarch64,
        )
        .unwrap();
        assert_eq!(args[0].operand.to_string(), "w1");
        assert_eq!(args[1].operand.to_string(), "x30");
        assert_eq!(args[2].operand.to_string(), "[sp, 16]");
        assert_eq!(args[3].operand.to_string(), "[x2]");
        assert_eq!(args[4].operand.to_string(), "[x3, -8]");
        assert_eq!(args[5].operand, Operand::Immediate(5));
    }

    #[test]
    fn malformed_arguments_are_errors() {
        for bad in [
            "8@%xyz",
            "3@%rax",
            "8%rax",
            "-@%rax",
            "8@",
            "8@(%rax",
            "8@foo(%rip)",
            "8@$",
            "8@$99999999999999999999",
            "8@$--1",
            "8@x31",
            "8@%x0",
        ] {
            assert!(parse_args(bad, Machine::X86_64).is_err(), "{bad}");
        }
        assert!(parse_args("8@%rax", Machine::Aarch64).is_err());
        assert!(parse_args("8@[x01]", Machine::Aarch64).is_err());
        assert!(parse_args(&"8@%rax ".repeat(1000), Machine::X86_64).is_err());
        assert!(parse_args(&"8@%rax ".repeat(40), Machine::X86_64).is_err());
    }

    #[test]
    fn integers_at_the_limits() {
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int("9223372036854775808"), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_int("-"), None);
    }
}
