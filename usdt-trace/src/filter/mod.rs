//! Filters: which hits count. A [`Filter`] is an expression over a probe's
//! arguments, written once for every command that takes `--if`:
//!
//! ```text
//! status >= 500
//! path == "/api/users" or path ^= "/static/"
//! not (arg0 < 100) and str(arg1) != "GET"
//! ```
//!
//! Integers compare with `==`, `!=`, `<`, `<=`, `>`, `>=` (signed or not,
//! as the note sizes the operand); strings with `==`, `!=` and `^=`
//! (starts with); `and`, `or`, `not` and parentheses combine them (`&&`,
//! `||`, `!` too). An argument is named by its parameter (a signature
//! record, a DTrace provider file, the catalog: [`Signatures`]) or as
//! `argN`; `str(argN)` reads an address as a string.
//!
//! A filter is parsed once ([`Filter::parse`]: a malformed one is an error
//! at its column), then bound to each site it is attached to: its names
//! become note operands, and a name the probe does not have, or a
//! comparison its argument cannot take (a string with a number, a
//! constant out of the operand's range), is an error at its column
//! ([`Filter::check`], before anything is attached). The engines compile
//! the bound filter into their BPF programs, so that a hit that fails it
//! costs no record, no ring space and no map slot; the perf engine's
//! sampler applies it to each decoded hit instead.

use std::path::Path;
use std::sync::Arc;

use crate::elf::note::Site;
pub use crate::error::FilterError;
use crate::types::Signatures;

mod bind;
mod lex;
mod parse;

pub(crate) use lex::{Op, STRING_MAX};

/// A parsed filter, with the signatures its names are looked up in.
///
/// ```
/// use usdt_trace::Filter;
/// let f = Filter::parse(r#"status >= 500 and path ^= "/api/""#)?;
/// assert_eq!(f.text(), r#"status >= 500 and path ^= "/api/""#);
/// let e = Filter::parse("status >= ").unwrap_err();
/// assert_eq!(e.to_string(), "column 11: expected a number or a \"string\" after `>=`, found the end");
/// # Ok::<(), usdt_trace::FilterError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Filter(Arc<Parsed>);

/// What a [`Filter`] holds (shared: cloning a filter is cheap).
#[derive(Clone, Debug)]
struct Parsed {
    text: String,
    expr: parse::Expr,
    sigs: Signatures,
}

impl std::str::FromStr for Filter {
    type Err = FilterError;
    fn from_str(text: &str) -> Result<Filter, FilterError> {
        Filter::parse(text)
    }
}

impl Filter {
    /// Parses `text`; its names are looked up in each attached file's
    /// signature records, and in [`Filter::signatures`] (declarations from
    /// provider files and the catalog).
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        Ok(Filter(Arc::new(Parsed {
            text: text.into(),
            expr: parse::parse(text)?,
            sigs: Signatures::new(),
        })))
    }

    /// Looks names up in `sigs` (their records and declarations), and in
    /// the records of each file a site is attached from.
    pub fn signatures(mut self, sigs: Signatures) -> Filter {
        Arc::make_mut(&mut self.0).sigs = sigs;
        self
    }

    /// The filter as written.
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// Whether the filter fits every one of `sites` of the file at `path`:
    /// each name an argument of the probe, each comparison one its
    /// argument can take. What a tracer checks before it attaches.
    pub fn check<P: AsRef<Path>>(&self, path: P, sites: &[&Site]) -> Result<(), FilterError> {
        let binder = self.binder(path.as_ref());
        for site in sites {
            binder.bind(site)?;
        }
        Ok(())
    }

    /// The filter for the sites of the file at `path`: its names looked
    /// up in this filter's signatures and the file's records.
    pub(crate) fn binder(&self, path: &Path) -> Binder {
        let mut sigs = self.0.sigs.clone();
        sigs.add_file(path);
        Binder {
            filter: self.clone(),
            sigs,
        }
    }
}

/// A [`Filter`] with the signatures of one file, binding its sites.
#[derive(Debug)]
pub(crate) struct Binder {
    filter: Filter,
    sigs: Signatures,
}

impl Binder {
    /// The filter bound to `site`.
    pub(crate) fn bind(&self, site: &Site) -> Result<SiteFilter, FilterError> {
        bind::bind(&self.filter.0.expr, site, &self.sigs)
    }

    /// [`Binder::bind`] as the crate's error, naming the filter.
    pub(crate) fn site(&self, site: &Site) -> Result<SiteFilter, crate::Error> {
        self.bind(site).map_err(|error| crate::Error::Filter {
            filter: self.filter.0.text.clone(),
            error,
        })
    }
}

/// A filter bound to one site: its tests on note operands, engine-neutral.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SiteFilter {
    pub(crate) cond: Cond,
    /// The operands it reads as strings, in order.
    pub(crate) strings: Vec<usize>,
}

/// A bound condition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cond {
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    /// Operand `arg` (an integer at the note's size and sign) `op`
    /// `value` (never [`Op::Prefix`]; `value` in the operand's range).
    Int { arg: usize, op: Op, value: i128 },
    /// The string at the address in operand `arg` is `bytes` (or, with
    /// `prefix`, starts with them).
    Str {
        arg: usize,
        prefix: bool,
        bytes: Vec<u8>,
    },
}

/// An argument's value as a filter sees it in user space.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seen<'a> {
    Int(i128),
    /// A string's bytes, and whether it went on past them.
    Str(&'a [u8], bool),
    /// Not read, or of another kind: every test of it fails.
    Other,
}

impl SiteFilter {
    /// Whether a hit passes, `arg(i)` giving operand `i`'s value. A test
    /// of a value that could not be read fails, as in the kernel.
    pub(crate) fn matches<'a>(&self, arg: &dyn Fn(usize) -> Seen<'a>) -> bool {
        self.cond.holds(arg)
    }
}

impl Cond {
    fn holds<'a>(&self, arg: &dyn Fn(usize) -> Seen<'a>) -> bool {
        match self {
            Cond::And(a, b) => a.holds(arg) && b.holds(arg),
            Cond::Or(a, b) => a.holds(arg) || b.holds(arg),
            Cond::Not(a) => !a.holds(arg),
            Cond::Int { arg: i, op, value } => match arg(*i) {
                Seen::Int(n) => match op {
                    Op::Eq => n == *value,
                    Op::Ne => n != *value,
                    Op::Lt => n < *value,
                    Op::Le => n <= *value,
                    Op::Gt => n > *value,
                    Op::Ge => n >= *value,
                    Op::Prefix => false,
                },
                _ => false,
            },
            Cond::Str {
                arg: i,
                prefix,
                bytes,
            } => match arg(*i) {
                Seen::Str(s, _) if *prefix => s.starts_with(bytes),
                Seen::Str(s, cut) => !cut && s == bytes.as_slice(),
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_passes_as_the_kernel_would_pass_it() {
        let cond = |text: &str| {
            let site = Site::with_args("-2@%si 8@%rdi", crate::Machine::X86_64);
            let f = Filter::parse(text).unwrap();
            bind::bind(&f.0.expr, &site, &Signatures::new()).unwrap()
        };
        let args = |n: i128, s: &'static [u8], cut: bool| {
            move |i: usize| match i {
                0 => Seen::Int(n),
                _ => Seen::Str(s, cut),
            }
        };
        let f = cond(r#"arg0 < 0 or str(arg1) == "/a""#);
        assert!(f.matches(&args(-1, b"/b", false)));
        assert!(f.matches(&args(3, b"/a", false)));
        assert!(!f.matches(&args(3, b"/a", true)));
        assert!(!f.matches(&args(3, b"/ab", false)));
        let f = cond(r#"not str(arg1) ^= "/a" and arg0 != 7"#);
        assert!(f.matches(&args(3, b"/b", false)));
        assert!(!f.matches(&args(3, b"/abc", false)));
        assert!(!f.matches(&args(7, b"/b", false)));
        // An argument that could not be read fails every test.
        assert!(!cond("arg0 == 1").matches(&|_| Seen::Other));
        assert!(cond("not arg0 == 1").matches(&|_| Seen::Other));
        assert_eq!("a >= 1".parse::<Filter>().unwrap().text(), "a >= 1");
    }
}
