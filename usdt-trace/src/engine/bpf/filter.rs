//! Filters in the BPF programs: a site's bound filter ([`SiteFilter`])
//! compiled into instructions that read its operands from the context (as
//! the aggregating program reads them) and jump away when it fails, before
//! the program takes a ring record, a counter or a map slot.
//!
//! - [`emit`]: the code of one filter, falling through when it holds. The
//!   aggregating program places it at the entry of each site variant.
//! - [`prologue`]: for the counting and sampling programs, a block put
//!   before them whose cookies carry a filter variant in their high 32
//!   bits ([`cookie`]): it runs that variant's filter, exits when it fails,
//!   and otherwise goes on into the program with the context in r1, as
//!   the program was entered.
//!
//! A string test reads at most [`STRING_MAX`] + 2 bytes with
//! `bpf_probe_read_user_str` into the stack's lowest 256 bytes (no
//! program keeps anything there), then compares them 8, 4, 2 and 1 bytes
//! at a time with the constant: straight-line code, no loop.

use super::aggregate::{arg_read, load_operand, Read};
use super::asm::{
    add64_imm, call, exit, load, load_imm64, mov64_imm, mov64_reg, rsh64_imm, Asm, Cmp, Insn,
    Label, Reg, Size, R0, R1, R10, R2, R3, R6,
};
use crate::elf::note::Site;
use crate::filter::{Cond, Op, SiteFilter, STRING_MAX};
use crate::sys::bpf::helper::{GET_ATTACH_COOKIE, PROBE_READ_USER_STR};
use crate::Error;

/// Where a string test reads the string: the lowest 256 bytes of the
/// stack.
pub(crate) const SCRATCH_AT: i16 = -512;
const _: () = assert!(STRING_MAX + 2 <= 256);

/// A filter as the program tests it: each operand with how it is read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Code {
    And(Box<Code>, Box<Code>),
    Or(Box<Code>, Box<Code>),
    Not(Box<Code>),
    /// The operand (extended to 64 bits by its sign) `cmp` the value.
    Int { read: Read, cmp: Cmp, value: i64 },
    /// The string at the operand's address is `bytes`, or starts with them.
    Str {
        read: Read,
        prefix: bool,
        bytes: Vec<u8>,
    },
}

/// `filter`'s code for `site`: how each operand it tests is read there.
pub(crate) fn code(filter: &SiteFilter, site: &Site) -> Result<Code, Error> {
    of(&filter.cond, site)
}

fn of(cond: &Cond, site: &Site) -> Result<Code, Error> {
    let two = |a: &Cond, b: &Cond| -> Result<(Box<Code>, Box<Code>), Error> {
        Ok((Box::new(of(a, site)?), Box::new(of(b, site)?)))
    };
    Ok(match cond {
        Cond::And(a, b) => {
            let (a, b) = two(a, b)?;
            Code::And(a, b)
        }
        Cond::Or(a, b) => {
            let (a, b) = two(a, b)?;
            Code::Or(a, b)
        }
        Cond::Not(a) => Code::Not(Box::new(of(a, site)?)),
        Cond::Int { arg, op, value } => {
            let read = arg_read(site, *arg, false, "filter on")?;
            Code::Int {
                read,
                cmp: jump_for(*op, read.signed),
                // In the operand's range: an i64, or a u64 as its bits.
                value: *value as i64,
            }
        }
        Cond::Str { arg, prefix, bytes } => Code::Str {
            read: arg_read(site, *arg, true, "filter on")?,
            prefix: *prefix,
            bytes: bytes.clone(),
        },
    })
}

/// The jump taken when `op` holds, on values of that sign.
fn jump_for(op: Op, signed: bool) -> Cmp {
    match (op, signed) {
        (Op::Eq | Op::Prefix, _) => Cmp::Eq,
        (Op::Ne, _) => Cmp::Ne,
        (Op::Lt, false) => Cmp::Lt,
        (Op::Le, false) => Cmp::Le,
        (Op::Gt, false) => Cmp::Gt,
        (Op::Ge, false) => Cmp::Ge,
        (Op::Lt, true) => Cmp::Slt,
        (Op::Le, true) => Cmp::Sle,
        (Op::Gt, true) => Cmp::Sgt,
        (Op::Ge, true) => Cmp::Sge,
    }
}

/// The code of `code`: falls through when it holds, jumps to `fail` when
/// not. The context is in r6; r0 to r5 are used.
pub(crate) fn emit(a: &mut Asm, code: &Code, fail: Label) {
    let pass = a.label();
    branch(a, code, pass, fail);
    a.bind(pass);
}

/// Jumps to `yes` when `code` holds, else to `no`; never falls through.
fn branch(a: &mut Asm, code: &Code, yes: Label, no: Label) {
    match code {
        Code::And(x, y) => {
            let next = a.label();
            branch(a, x, next, no);
            a.bind(next);
            branch(a, y, yes, no);
        }
        Code::Or(x, y) => {
            let next = a.label();
            branch(a, x, yes, next);
            a.bind(next);
            branch(a, y, yes, no);
        }
        Code::Not(x) => branch(a, x, no, yes),
        Code::Int { read, cmp, value } => {
            load_operand(a, read, R1, no);
            compare(a, R1, *cmp, *value, yes);
            a.jump(no);
        }
        Code::Str {
            read,
            prefix,
            bytes,
        } => {
            string(a, read, *prefix, bytes, no);
            a.jump(yes);
        }
    }
}

/// `if reg CMP value goto to` (a value past 32 bits through r2).
fn compare(a: &mut Asm, reg: Reg, cmp: Cmp, value: i64, to: Label) {
    match i32::try_from(value) {
        Ok(imm) => a.jump_if(reg, cmp, imm, to),
        Err(_) => {
            a.push(load_imm64(R2, value));
            a.jump_if_reg(reg, cmp, R2, to);
        }
    }
}

/// Falls through when the string at the operand's address is `bytes`
/// (or starts with them); to `no` when not, or unreadable.
///
/// `bpf_probe_read_user_str` with room for `n` bytes returns the length
/// with the NUL for a shorter string, `n` for a string of `n - 1` bytes or
/// more (cut, with a NUL last), and for an empty string 1, or 0 on some
/// kernels (Linux 6.12). So with room for `len + 2`, `len + 1` means
/// exactly `len` bytes; with room for `len + 1`, at least `len`.
fn string(a: &mut Asm, read: &Read, prefix: bool, bytes: &[u8], no: Label) {
    let len = bytes.len().min(STRING_MAX);
    let room = len + if prefix { 1 } else { 2 };
    load_operand(a, read, R3, no);
    a.push([
        mov64_reg(R1, R10),
        add64_imm(R1, SCRATCH_AT.into()),
        mov64_imm(R2, room as i32),
        call(PROBE_READ_USER_STR),
    ]);
    a.jump_if(R0, Cmp::Slt, 0, no);
    match (len, prefix) {
        // Any readable string starts with "".
        (0, true) => return,
        (0, false) => a.jump_if(R0, Cmp::Gt, 1, no),
        _ => a.jump_if(R0, Cmp::Ne, len as i32 + 1, no),
    }
    let mut at = 0;
    for (width, size) in [(8, Size::DW), (4, Size::W), (2, Size::H), (1, Size::B)] {
        while len - at >= width {
            let mut chunk = [0u8; 8];
            chunk[..width].copy_from_slice(&bytes[at..at + width]);
            a.push([load(size, R1, R10, SCRATCH_AT + at as i16)]);
            a.push(load_imm64(R2, i64::from_le_bytes(chunk)));
            a.jump_if_reg(R1, Cmp::Ne, R2, no);
            at += width;
        }
    }
}

/// The cookie of a site with filter variant `variant` whose program reads
/// `low` (its counter slot, its sampler's index) from the low 32 bits.
pub(crate) fn cookie(variant: usize, low: u64) -> u64 {
    (variant as u64) << 32 | (low & 0xffff_ffff)
}

/// The block that filters the hits of a counting or sampling program whose
/// sites' cookies carry variant `i` of `variants` in their high 32 bits:
/// it exits with 0 when the filter fails, and otherwise ends with the
/// context in r1, where the program (put right after it) begins.
pub(crate) fn prologue(variants: &[Code]) -> Result<Vec<Insn>, String> {
    let mut a = Asm::default();
    let drop = a.label();
    let pass = a.label();
    a.push([
        mov64_reg(R6, R1),
        call(GET_ATTACH_COOKIE),
        rsh64_imm(R0, 32),
    ]);
    let entries: Vec<Label> = variants.iter().map(|_| a.label()).collect();
    for (i, entry) in entries.iter().enumerate() {
        a.jump_if(R0, Cmp::Eq, i as i32, *entry);
    }
    a.jump(drop);
    for (code, entry) in variants.iter().zip(entries) {
        a.bind(entry);
        emit(&mut a, code, drop);
        a.jump(pass);
    }
    a.bind(drop);
    a.push([mov64_imm(R0, 0), exit()]);
    a.bind(pass);
    a.push([mov64_reg(R1, R6)]);
    a.finish()
}

/// `program` (a counting or sampling program, which begins with the
/// context in r1) with the [`prologue`] of `variants` before it.
pub(crate) fn filtered(variants: &[Code], program: Vec<Insn>) -> Result<Vec<Insn>, String> {
    let mut insns = prologue(variants)?;
    insns.extend(program);
    Ok(insns)
}

/// The index of `code` in `variants`, added if new.
pub(crate) fn variant_of(variants: &mut Vec<Code>, code: Code) -> usize {
    match variants.iter().position(|v| *v == code) {
        Some(i) => i,
        None => {
            variants.push(code);
            variants.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::Filter;
    use crate::{Machine, Signatures};

    /// The code of `text` for a site with operands `-4@%edx 8@%rdi
    /// 2@8(%rsp)`.
    fn code_of(text: &str) -> Code {
        let site = Site::with_args("-4@%edx 8@%rdi 2@8(%rsp)", Machine::X86_64);
        let filter = Filter::parse(text).unwrap().signatures(Signatures::new());
        let bound = filter.binder(std::path::Path::new("/nonexistent")).bind(&site).unwrap();
        code(&bound, &site).unwrap()
    }

    fn emitted(text: &str) -> Vec<Insn> {
        let mut a = Asm::default();
        let fail = a.label();
        emit(&mut a, &code_of(text), fail);
        a.bind(fail);
        a.push([exit()]);
        a.finish().unwrap()
    }

    #[test]
    fn signs_pick_the_jump_and_wide_values_a_register() {
        let Code::Int { cmp, value, .. } = code_of("arg0 < -3") else {
            panic!()
        };
        assert_eq!((cmp, value), (Cmp::Slt, -3));
        let Code::Int { cmp, value, read } = code_of("arg1 >= 18446744073709551615") else {
            panic!()
        };
        assert_eq!((cmp, value, read.signed), (Cmp::Ge, -1, false));
        // An immediate is sign-extended to 64 bits: u64::MAX is -1's.
        let p = emitted("arg1 >= 18446744073709551615");
        assert!(p.iter().any(|i| i.code == 0x35 && i.imm == -1));
        // Past 32 bits: a 64-bit immediate load, then a jump on two
        // registers.
        let p = emitted("arg1 >= 0x10000000000");
        assert!(p.iter().any(|i| i.code == 0x18 && i.imm == 0));
        assert!(p.iter().any(|i| i.code == 0x3d));
    }

    #[test]
    fn every_filter_fits_a_program() {
        let long = "x".repeat(STRING_MAX);
        for text in [
            "arg0 == 1".to_string(),
            "arg2 != 7 and not (arg0 > 5 or arg0 <= -5)".into(),
            format!(r#"str(arg1) == "{long}""#),
            format!(r#"str(arg1) ^= "{long}" or str(arg1) == "" or str(arg1) ^= """#),
            r#"str(arg1) == "abcdefghijk" and arg1 != 0"#.into(),
        ] {
            let variants = vec![code_of(&text), code_of("arg0 == 2")];
            let mut p = prologue(&variants).unwrap();
            p.extend([mov64_imm(R0, 0), exit()]);
            assert!(p.len() < 4096, "{text}: {} instructions", p.len());
            // Every jump lands inside the program.
            for (at, i) in p.iter().enumerate() {
                let class = i.code & 7;
                if class == 5 && i.code != 0x85 && i.code != 0x95 {
                    let to = at as i64 + 1 + i64::from(i.off);
                    assert!((0..p.len() as i64).contains(&to), "{text}: {at} -> {to}");
                }
            }
        }
        assert_eq!(cookie(3, 0x1_0000_0007), 3 << 32 | 7);
    }
}
