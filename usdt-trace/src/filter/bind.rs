//! A parsed filter bound to one probe site: each name becomes the note
//! operand it names (by the probe's signature, or `argN`), checked against
//! what the operand holds: an integer of the note's size and sign, or the
//! address of a string (a `&str`, `CString`, `char *` parameter, or
//! `str(...)`); a comparison that cannot hold for that argument is an
//! error at its column.

use super::lex::Op;
use super::parse::{ArgRef, Compare, Constant, Expr};
use super::{Cond, FilterError, SiteFilter};
use crate::elf::arg::{Arg, Operand};
use crate::elf::note::Site;
use crate::elf::signature::Kind;
use crate::types::{NamedArg, Signatures};

/// `expr` for `site`, its names looked up in `sigs`.
pub(super) fn bind(expr: &Expr, site: &Site, sigs: &Signatures) -> Result<SiteFilter, FilterError> {
    let mut strings = vec![];
    let cond = cond(expr, site, sigs, &mut strings)?;
    strings.sort_unstable();
    strings.dedup();
    Ok(SiteFilter { cond, strings })
}

fn cond(
    expr: &Expr,
    site: &Site,
    sigs: &Signatures,
    strings: &mut Vec<usize>,
) -> Result<Cond, FilterError> {
    let mut two = |a: &Expr, b: &Expr| -> Result<(Box<Cond>, Box<Cond>), FilterError> {
        Ok((
            Box::new(cond(a, site, sigs, strings)?),
            Box::new(cond(b, site, sigs, strings)?),
        ))
    };
    Ok(match expr {
        Expr::And(a, b) => {
            let (a, b) = two(a, b)?;
            Cond::And(a, b)
        }
        Expr::Or(a, b) => {
            let (a, b) = two(a, b)?;
            Cond::Or(a, b)
        }
        Expr::Not(a) => Cond::Not(Box::new(cond(a, site, sigs, strings)?)),
        Expr::Compare(c) => compare(c, site, sigs, strings)?,
    })
}

/// What an argument holds, as a filter compares it.
enum Holds {
    /// An integer of this many bytes and sign.
    Int { size: u8, signed: bool },
    /// The address of a NUL-terminated string.
    Str,
}

fn compare(
    c: &Compare,
    site: &Site,
    sigs: &Signatures,
    strings: &mut Vec<usize>,
) -> Result<Cond, FilterError> {
    let named = sigs.arg_named(site, &c.arg.name).ok_or_else(|| {
        FilterError::at(
            c.arg.column,
            format!(
                "{} has no argument `{}`; it takes {}",
                site.probe(),
                c.arg.name,
                sigs.arg_names(site)
            ),
        )
    })?;
    let arg = site
        .args
        .get(named.operand)
        .ok_or_else(|| FilterError::at(c.arg.column, "the note has no such operand"))?;
    let what = described(&c.arg, &named, arg);
    let holds = holds(&c.arg, &named, arg, &what)?;
    match (holds, &c.value) {
        (Holds::Str, Constant::Str(bytes)) => {
            let test = |prefix| Cond::Str {
                arg: named.operand,
                prefix,
                bytes: bytes.clone(),
            };
            strings.push(named.operand);
            match c.op {
                Op::Eq => Ok(test(false)),
                Op::Ne => Ok(Cond::Not(Box::new(test(false)))),
                Op::Prefix => Ok(test(true)),
                op => Err(FilterError::at(
                    c.op_column,
                    format!(
                        "strings compare with ==, != and ^= only, not `{}`",
                        op.text()
                    ),
                )),
            }
        }
        (Holds::Str, Constant::Int(_)) => Err(FilterError::at(
            c.value_column,
            format!("{what} is a string: compare it with a string in double quotes"),
        )),
        (Holds::Int { .. }, _) if c.op == Op::Prefix => Err(FilterError::at(
            c.op_column,
            format!("`^=` (starts with) compares strings; {what} is an integer"),
        )),
        (Holds::Int { .. }, Constant::Str(_)) => {
            let hint = match named.kind() {
                None if arg.size == 8 => format!(" (`str({})` reads it as a string's address)", c.arg.name),
                _ => String::new(),
            };
            Err(FilterError::at(
                c.value_column,
                format!("{what} is an integer, not a string{hint}"),
            ))
        }
        (Holds::Int { size, signed }, Constant::Int(value)) => {
            let (low, high) = range(size, signed);
            if !(low..=high).contains(value) {
                return Err(FilterError::at(
                    c.value_column,
                    format!("{value} is out of the range of {what} ({low} to {high})"),
                ));
            }
            Ok(Cond::Int {
                arg: named.operand,
                op: c.op,
                value: *value,
            })
        }
    }
}

/// `` `status` (u16) ``, `` `arg2` (a 4-byte signed integer) ``.
fn described(arg_ref: &ArgRef, named: &NamedArg<'_>, arg: &Arg) -> String {
    let ty = match named.param {
        Some(p) => p.ty.clone(),
        None if arg.float => format!("a {}-byte float", arg.size),
        None => format!(
            "a {}-byte {} integer",
            arg.size,
            if arg.signed { "signed" } else { "unsigned" }
        ),
    };
    format!("`{}` ({ty})", arg_ref.name)
}

/// What the argument holds, or why a filter cannot compare it.
fn holds(arg_ref: &ArgRef, named: &NamedArg<'_>, arg: &Arg, what: &str) -> Result<Holds, FilterError> {
    let at = arg_ref.column;
    if let Operand::Unreadable { reason, .. } = &arg.operand {
        return Err(FilterError::at(at, format!("{what} cannot be read at the hit: {reason}")));
    }
    let kind = named.kind();
    if arg.float || matches!(kind, Some(Kind::F32 | Kind::F64)) {
        return Err(FilterError::at(
            at,
            format!("{what} is a floating-point value: a filter compares integers and strings"),
        ));
    }
    if kind == Some(Kind::Bytes) {
        return Err(FilterError::at(
            at,
            format!("{what} is a byte slice: a filter compares integers and strings"),
        ));
    }
    if !matches!(arg.size, 1 | 2 | 4 | 8) {
        return Err(FilterError::at(
            at,
            format!("{what} is {} bytes: a filter compares integers of up to 8 bytes", arg.size),
        ));
    }
    let string_kind = kind.is_some_and(Kind::is_string);
    if arg_ref.string {
        let address = matches!(kind, None | Some(Kind::Pointer | Kind::Str | Kind::CStr | Kind::Custom(_)));
        if !address || arg.size != 8 {
            return Err(FilterError::at(
                at,
                format!("str() reads a string at an address: {what} is not one"),
            ));
        }
        return Ok(Holds::Str);
    }
    if string_kind {
        return Ok(Holds::Str);
    }
    Ok(Holds::Int {
        size: arg.size,
        signed: arg.signed,
    })
}

/// The values an integer of `size` bytes and sign holds.
fn range(size: u8, signed: bool) -> (i128, i128) {
    let bits = 8 * u32::from(size.clamp(1, 8));
    match signed {
        true => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        false => (0, (1i128 << bits) - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::signature::{Param, Signature};
    use crate::filter::parse::parse;
    use crate::Machine;

    /// `http:request_done` with `-8@%rdi 2@%si -4@%edx 8@%rcx 8f@%xmm0`,
    /// recorded as `(id: i64, status: u16, delta: i32, path: &str,
    /// ratio: f64)`.
    fn site() -> (Site, Signatures) {
        let mut site = Site::with_args("-8@%rdi 2@%si -4@%edx 8@%rcx 8f@%rax", Machine::X86_64);
        site.provider = "http".into();
        site.name = "request_done".into();
        let param = |name: &str, ty: &str, kind| Param {
            name: name.into(),
            ty: ty.into(),
            kind,
        };
        let mut sigs = Signatures::new();
        sigs.extend([Signature {
            provider: "http".into(),
            name: "request_done".into(),
            location: 0,
            params: vec![
                param("id", "i64", Kind::Signed(8)),
                param("status", "u16", Kind::Unsigned(2)),
                param("delta", "i32", Kind::Signed(4)),
                param("path", "&str", Kind::Str),
                param("ratio", "f64", Kind::F64),
            ],
        }]);
        (site, sigs)
    }

    fn bound(text: &str) -> Result<SiteFilter, String> {
        let (site, sigs) = site();
        let expr = parse(text).map_err(|e| e.to_string())?;
        bind(&expr, &site, &sigs).map_err(|e| e.to_string())
    }

    #[test]
    fn names_become_operands() {
        let f = bound(r#"status >= 500 and not path ^= "/api/" or arg2 < -1"#).unwrap();
        assert_eq!(f.strings, [3]);
        let Cond::Or(a, b) = f.cond else { panic!() };
        assert_eq!(
            *b,
            Cond::Int {
                arg: 2,
                op: Op::Lt,
                value: -1
            }
        );
        let Cond::And(s, p) = *a else { panic!() };
        assert_eq!(
            *s,
            Cond::Int {
                arg: 1,
                op: Op::Ge,
                value: 500
            }
        );
        assert_eq!(
            *p,
            Cond::Not(Box::new(Cond::Str {
                arg: 3,
                prefix: true,
                bytes: b"/api/".to_vec()
            }))
        );
        let f = bound(r#"path != "/" and str(arg3) == "x""#).unwrap();
        assert_eq!(f.strings, [3]);
    }

    #[test]
    fn mismatches_are_errors_at_their_column() {
        for (text, error) in [
            (
                "nope == 1",
                "column 1: http:request_done has no argument `nope`; it takes id, status, delta, path, ratio or arg0 to arg4",
            ),
            (
                "path == 1",
                "column 9: `path` (&str) is a string: compare it with a string in double quotes",
            ),
            ("status == \"500\"", "column 11: `status` (u16) is an integer, not a string"),
            (
                "status ^= \"5\"",
                "column 8: `^=` (starts with) compares strings; `status` (u16) is an integer",
            ),
            (
                "path < \"b\"",
                "column 6: strings compare with ==, != and ^= only, not `<`",
            ),
            (
                "status > 70000",
                "column 10: 70000 is out of the range of `status` (u16) (0 to 65535)",
            ),
            (
                "delta == -2147483649",
                "column 10: -2147483649 is out of the range of `delta` (i32) (-2147483648 to 2147483647)",
            ),
            (
                "ratio > 1",
                "column 1: `ratio` (f64) is a floating-point value: a filter compares integers and strings",
            ),
            (
                "str(status) == \"a\"",
                "column 5: str() reads a string at an address: `status` (u16) is not one",
            ),
            ("id >= -1 and arg5 == 1", "column 14: http:request_done has no argument `arg5`; it takes id, status, delta, path, ratio or arg0 to arg4"),
        ] {
            assert_eq!(bound(text).unwrap_err(), error, "{text}");
        }
        assert!(bound("id == -9223372036854775808").is_ok());
    }

    #[test]
    fn without_a_signature_the_note_says() {
        let site = Site::with_args("-4@%edx 8@%rcx", Machine::X86_64);
        let sigs = Signatures::new();
        let b = |text: &str| bind(&parse(text).unwrap(), &site, &sigs).map_err(|e| e.to_string());
        assert!(b("arg0 < -5").is_ok());
        assert_eq!(
            b("arg1 == \"x\"").unwrap_err(),
            "column 9: `arg1` (a 8-byte unsigned integer) is an integer, not a string (`str(arg1)` reads it as a string's address)"
        );
        assert_eq!(b("str(arg1) == \"x\"").unwrap().strings, [1]);
        assert_eq!(
            b("str(arg0) == \"x\"").unwrap_err(),
            "column 5: str() reads a string at an address: `arg0` (a 4-byte signed integer) is not one"
        );
    }
}
