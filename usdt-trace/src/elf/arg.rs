//! Probe arguments: the note's argument string (`-4@%edi 8@-16(%rbp) 2@$5`)
//! parsed into size, sign and operand.
//!
//! Each argument is `SIZE@OPERAND`, separated by spaces; a negative size means
//! a signed value, an `f` after the size a floating-point one (`4f@` float,
//! `8f@` double: Debian's sys/sdt.h writes these), and an operand without
//! `SIZE@` (hand-written assembly) is 8 bytes. Sizes 16 and 24 are structs
//! and `__int128` passed by value. x86-64 operands are AT&T syntax: `%reg`,
//! `$imm`, `disp(%reg)`, `disp(base,index,scale)`, symbols addressed
//! relative to `%rip` (`sym(%rip)`, `4+sym(%rip)`, `.LCPI0_0(%rip)`) and
//! symbols plus registers (`nums(%rax,%rax)`: GCC's absolute addressing in
//! position-dependent executables), with displacements that may be sums
//! (`-12+4(%rbp)`); aarch64 operands are
//! `xN`/`wN`/`sp`, `[reg]`, `[reg, disp]` and bare immediates; riscv64
//! operands are ABI register names (`a0`, `s0`), `disp(reg)` and bare
//! immediates. Each machine's syntax is its `crate::arch` table's.
//!
//! One argument this reader cannot read does not fail the note: it becomes
//! [`Operand::Unreadable`] with the reason (`%xmm0`: "xmm registers are not
//! sampled"), and the probe's other arguments are read as usual.

use std::fmt;

pub use crate::arch::{Operand, Reg, Reg64, RegWidth};
use crate::Error;

/// The longest argument string accepted (sys/sdt.h's twelve arguments take
/// well under 200 bytes).
pub const MAX_ARGS_TEXT: usize = 4096;

/// The most arguments one site may describe (usdt-runtime's, shared with
/// the macros).
pub use usdt_runtime::MAX_ARGS;

pub use crate::arch::Machine;

/// The sizes an argument may have, in bytes.
pub const ARG_SIZES: [u8; 6] = [1, 2, 4, 8, 16, 24];

/// One argument of a probe site.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arg {
    /// The size in bytes: one of [`ARG_SIZES`], or 0 when the note's size
    /// is none of them (the operand is then [`Operand::Unreadable`]).
    pub size: u8,
    /// Whether the value is signed (a negative size in the note).
    pub signed: bool,
    /// Whether the value is floating point (`4f@` is an `f32`, `8f@` an `f64`).
    pub float: bool,
    /// Where the value is at the probe site.
    pub operand: Operand,
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Operand::Unreadable { text, .. } = &self.operand {
            return f.write_str(text);
        }
        let sign = if self.signed { "-" } else { "" };
        let float = if self.float { "f" } else { "" };
        write!(f, "{sign}{}{float}@{}", self.size, self.operand)
    }
}

impl Arg {
    /// Why the value cannot be read, if it cannot.
    pub fn unreadable(&self) -> Option<&str> {
        match &self.operand {
            Operand::Unreadable { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// Parses a note's whole argument string.
///
/// An argument this reader cannot read becomes [`Operand::Unreadable`] with
/// the reason; only a string that is too long or has too many arguments is
/// an error.
///
/// ```
/// use usdt_trace::{parse_args, Machine, Operand};
/// let args = parse_args("-4@%edi 8@-16(%rbp) 2@$5 8f@%xmm0", Machine::X86_64).unwrap();
/// assert_eq!((args[0].size, args[0].signed), (4, true));
/// assert!(matches!(args[1].operand, Operand::Memory { disp: -16, .. }));
/// assert_eq!(args[2].operand, Operand::Immediate(5));
/// assert_eq!(args[3].unreadable(), Some("xmm registers are not sampled"));
/// assert_eq!(args[0].to_string(), "-4@%edi");
/// ```
pub fn parse_args(text: &str, machine: Machine) -> Result<Vec<Arg>, Error> {
    if text.len() > MAX_ARGS_TEXT {
        return Err(Error::BadArgs {
            text: text.chars().take(64).collect(),
            reason: format!("the argument string is longer than {MAX_ARGS_TEXT} bytes"),
        });
    }
    let args: Vec<Arg> = split_args(text)
        .map(|arg| parse_arg(arg, machine))
        .collect();
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

/// Parses one `SIZE@OPERAND` (or a bare operand: 8 bytes).
fn parse_arg(text: &str, machine: Machine) -> Arg {
    let (spec, operand) = match text.split_once('@') {
        Some((spec, operand)) if is_size_spec(spec) => (spec, operand),
        _ => ("8", text),
    };
    let mut arg = Arg {
        size: 0,
        signed: spec.starts_with('-'),
        float: spec.ends_with('f'),
        operand: Operand::Immediate(0),
    };
    let parsed = parse_size(spec).and_then(|size| {
        arg.size = size;
        let operand = (machine.arch().parse_operand)(operand)?;
        check_size(size, &operand)?;
        Ok(operand)
    });
    arg.operand = parsed.unwrap_or_else(|reason| Operand::Unreadable {
        text: text.into(),
        reason,
    });
    arg
}

/// `-?DIGITS f?`: what sits before the `@` of `SIZE@OPERAND`.
fn is_size_spec(spec: &str) -> bool {
    let digits = spec.strip_prefix('-').unwrap_or(spec);
    let digits = digits.strip_suffix('f').unwrap_or(digits);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The size in bytes of a size spec (`-4`, `8f`, `16`).
fn parse_size(spec: &str) -> Result<u8, String> {
    let digits = spec.strip_prefix('-').unwrap_or(spec);
    let (digits, float) = match digits.strip_suffix('f') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    let size = digits
        .parse::<u8>()
        .ok()
        .filter(|s| ARG_SIZES.contains(s))
        .ok_or_else(|| format!("size `{spec}` is not 1, 2, 4, 8, 16 or 24"))?;
    if float && !matches!(size, 4 | 8) {
        return Err(format!("floating-point size `{spec}` is not 4 or 8"));
    }
    Ok(size)
}

/// Values of 16 and 24 bytes are only read from memory.
fn check_size(size: u8, operand: &Operand) -> Result<(), String> {
    match operand {
        Operand::Register(reg) if size > 8 => Err(format!(
            "a {size}-byte value does not fit in register {reg}"
        )),
        Operand::Immediate(_) if size > 8 => Err(format!("a {size}-byte immediate is not read")),
        _ => Ok(()),
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
            let arg = x86(&format!("8@{text}"))[0].clone();
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
    fn riscv64_operands() {
        let args = parse_args(
            "-4@-68(s0) -8@a1 1@0(a6) 8@8(sp) -4@-42 1@%lo(g_c)(t6) 8@fp",
            Machine::Riscv64,
        )
        .unwrap();
        let printed: Vec<String> = args.iter().map(Arg::to_string).collect();
        assert_eq!(
            printed,
            [
                "-4@-68(s0)",
                "-8@a1",
                "1@0(a6)",
                "8@8(sp)",
                "-4@$-42",
                "1@%lo(g_c)(t6)",
                "8@s0"
            ]
        );
        assert_eq!(args[4].operand, Operand::Immediate(-42));
        assert_eq!(
            args[5].unreadable(),
            Some("`%lo(g_c)` is a relocation this reader does not resolve")
        );
        for arg in args.iter().filter(|a| a.unreadable().is_none()) {
            let reg = match &arg.operand {
                Operand::Register(r) | Operand::Memory { base: r, .. } => r,
                _ => continue,
            };
            assert_eq!(reg.machine(), Some(Machine::Riscv64));
            assert!(!reg.is_aarch64());
        }
        let x86 = parse_args("8@%rax", Machine::Riscv64).unwrap();
        assert_eq!(
            x86[0].unreadable(),
            Some("`%rax` is not a riscv64 register, memory operand or immediate")
        );
    }

    fn reg(reg: Reg64) -> Reg {
        Reg {
            reg,
            width: RegWidth::W64,
        }
    }

    fn reason(text: &str) -> String {
        let args = x86(text);
        assert_eq!(args.len(), 1, "{text}");
        assert_eq!(
            args[0].to_string(),
            text,
            "an unreadable argument prints as written"
        );
        args[0]
            .unreadable()
            .unwrap_or_else(|| panic!("{text} is readable"))
            .to_string()
    }

    #[test]
    fn float_and_wide_sizes() {
        let args = x86("4f@%edx 8f@-16(%rbp) -16@-32(%rsp) 24@8(%rsp) 16@(%rax)");
        assert_eq!(
            (args[0].size, args[0].float, args[0].signed),
            (4, true, false)
        );
        assert_eq!((args[1].size, args[1].float), (8, true));
        assert_eq!(
            (args[2].size, args[2].signed, args[2].float),
            (16, true, false)
        );
        assert_eq!(args[3].size, 24);
        assert_eq!(args[0].to_string(), "4f@%edx");
        assert_eq!(args[2].to_string(), "-16@-32(%rsp)");
        assert_eq!(args[4].to_string(), "16@(%rax)");
    }

    #[test]
    fn symbols_relative_to_rip() {
        let args = x86("8f@.LCPI0_0(%rip) -4@4+sym(%rip) 8@sym+8(%rip) 8@x-8+2(%rip) 2@g_var");
        let sym = |name: &str, offset| Operand::Symbol {
            name: name.into(),
            offset,
            addr: None,
        };
        assert_eq!(args[0].operand, sym(".LCPI0_0", 0));
        assert_eq!(args[1].operand, sym("sym", 4));
        assert_eq!(args[2].operand, sym("sym", 8));
        assert_eq!(args[3].operand, sym("x", -6));
        assert_eq!(args[4].operand, sym("g_var", 0));
        assert_eq!(args[0].to_string(), "8f@.LCPI0_0(%rip)");
        assert_eq!(args[1].to_string(), "-4@4+sym(%rip)");
        assert_eq!(args[3].to_string(), "8@-6+x(%rip)");
    }

    #[test]
    fn sib_and_expression_displacements() {
        let args = x86("2@(%rsi,%rax,2) 8@(%rdx,%rax,8) -4@-8(%rbp,%rcx,4) 8@(,%rax,8) 1@0x10(%rdi,%r9) -4@-12+4(%rbp)");
        assert_eq!(
            args[0].operand,
            Operand::Indexed {
                base: Some(reg(Reg64::Rsi)),
                index: reg(Reg64::Rax),
                scale: 2,
                disp: 0
            }
        );
        assert_eq!(
            args[2].operand,
            Operand::Indexed {
                base: Some(reg(Reg64::Rbp)),
                index: reg(Reg64::Rcx),
                scale: 4,
                disp: -8
            }
        );
        assert_eq!(args[2].to_string(), "-4@-8(%rbp,%rcx,4)");
        assert_eq!(args[3].to_string(), "8@(,%rax,8)");
        assert_eq!(args[4].to_string(), "1@16(%rdi,%r9,1)");
        assert_eq!(
            args[5].operand,
            Operand::Memory {
                base: reg(Reg64::Rbp),
                disp: -8
            }
        );
    }

    #[test]
    fn symbols_plus_registers() {
        // gcc -O2 -no-pie writes `nums(%rax,%rax)` for `nums[i]` of shorts.
        let args =
            x86("-2@nums(%rax,%rax) 4@arr(,%rdx,4) -1@t1+4(%rbx) 8@8+tab(%rsi,%rdi,8) 8@s(%rip)");
        assert_eq!(
            args[0].operand,
            Operand::SymbolIndexed {
                name: "nums".into(),
                offset: 0,
                addr: None,
                base: Some(reg(Reg64::Rax)),
                index: Some(reg(Reg64::Rax)),
                scale: 1,
            }
        );
        assert_eq!(
            args[1].operand,
            Operand::SymbolIndexed {
                name: "arr".into(),
                offset: 0,
                addr: None,
                base: None,
                index: Some(reg(Reg64::Rdx)),
                scale: 4,
            }
        );
        assert_eq!(
            args[2].operand,
            Operand::SymbolIndexed {
                name: "t1".into(),
                offset: 4,
                addr: None,
                base: Some(reg(Reg64::Rbx)),
                index: None,
                scale: 1,
            }
        );
        let printed: Vec<String> = args.iter().map(Arg::to_string).collect();
        assert_eq!(
            printed,
            [
                "-2@nums(%rax,%rax,1)",
                "4@arr(,%rdx,4)",
                "-1@4+t1(%rbx)",
                "8@8+tab(%rsi,%rdi,8)",
                "8@s(%rip)"
            ]
        );
        for arg in &args {
            assert_eq!(x86(&arg.to_string()), std::slice::from_ref(arg));
        }
        assert!(matches!(args[4].operand, Operand::Symbol { .. }));
    }

    #[test]
    fn bare_operands_are_eight_bytes() {
        let args = x86("%rax -8(%rbp) $5 %eax");
        assert!(args
            .iter()
            .all(|a| a.size == 8 && !a.signed && a.unreadable().is_none()));
        assert_eq!(args[1].to_string(), "8@-8(%rbp)");
        assert_eq!(args[3].operand.to_string(), "%eax");
    }

    #[test]
    fn every_unreadable_argument_says_why() {
        for (text, why) in [
            ("8f@%xmm0", "xmm registers are not sampled"),
            ("16@%ymm15", "ymm registers are not sampled"),
            ("8@%xyz", "`%xyz` is not an x86-64 general register"),
            ("3@%rax", "size `3` is not 1, 2, 4, 8, 16 or 24"),
            ("-32@%rax", "size `-32` is not 1, 2, 4, 8, 16 or 24"),
            ("16f@(%rax)", "floating-point size `16f` is not 4 or 8"),
            ("-16@%rsi", "a 16-byte value does not fit in register %rsi"),
            ("24@$1", "a 24-byte immediate is not read"),
            ("8@", "the operand is empty"),
            ("8@(%rax", "`(%rax` has no closing parenthesis"),
            ("8@$", "immediate `$` is not an integer"),
            ("8@$sym", "immediate `$sym` is not an integer"),
            (
                "8@$99999999999999999999",
                "immediate `$99999999999999999999` is not an integer",
            ),
            ("8@$--1", "immediate `$--1` is not an integer"),
            (
                "8@x31(%rip,%rax)",
                "`x31(%rip,%rax)` is relative to %rip and to an index",
            ),
            (
                "8@sym@GOTPCREL(%rip)",
                "`sym@GOTPCREL` is a relocation this reader does not resolve",
            ),
            ("8@0x1000", "`0x1000` is an absolute address, not read"),
            (
                "8@-sym(%rip)",
                "displacement `-sym` is not a sum of integers and one symbol",
            ),
            (
                "8@a+b(%rip)",
                "displacement `a+b` is not a sum of integers and one symbol",
            ),
            (
                "8@9223372036854775807+1(%rax)",
                "displacement `9223372036854775807+1` overflows 64 bits",
            ),
            ("8@(%rax,%rsp,2)", "`(%rax,%rsp,2)` uses %rsp as an index"),
            (
                "8@(%rax,%rbx,3)",
                "scale `3` in `(%rax,%rbx,3)` is not 1, 2, 4 or 8",
            ),
            (
                "8@(%rax,%rbx,2,1)",
                "`(%rax,%rbx,2,1)` has more than three registers",
            ),
            ("8@%x0", "`%x0` is not an x86-64 general register"),
        ] {
            assert_eq!(reason(text), why, "{text}");
        }
        let aarch = parse_args("8@%rax 8@[x01]", Machine::Aarch64).unwrap();
        assert_eq!(
            aarch[0].unreadable(),
            Some("`%rax` is not an aarch64 register, memory operand or immediate")
        );
        assert!(aarch[1].unreadable().is_some());
    }

    #[test]
    fn an_unreadable_argument_leaves_the_others() {
        let args = x86("-4@%edi 8f@%xmm1 8@-8(%rbp)");
        assert_eq!(args.len(), 3);
        assert!(args[0].unreadable().is_none() && args[2].unreadable().is_none());
        assert_eq!(args[1].unreadable(), Some("xmm registers are not sampled"));
    }

    #[test]
    fn whole_strings_too_long_or_too_many_are_errors() {
        assert!(parse_args(&"8@%rax ".repeat(1000), Machine::X86_64).is_err());
        assert!(parse_args(&"8@%rax ".repeat(MAX_ARGS + 1), Machine::X86_64).is_err());
        assert!(parse_args(&"8@%rax ".repeat(MAX_ARGS), Machine::X86_64).is_ok());
    }
}
