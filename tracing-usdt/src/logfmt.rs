//! Field values as logfmt, formatted into fixed stack buffers.
//!
//! A probe passes at most [`usdt::STR_MAX`] bytes of a string, so nothing
//! longer is ever formatted: a [`Buf`] stops accepting bytes when it is full,
//! and the `Debug`/`Display` writing into it stops at its error.

use core::fmt::{self, Write};
use tracing_core::field::{Field, Visit};

/// The bytes a string argument can carry.
const CAP: usize = usdt::STR_MAX;

/// A string of at most [`CAP`] bytes on the stack.
pub(crate) struct Buf {
    bytes: [u8; CAP],
    len: usize,
    /// A write was cut short: the buffer takes nothing more.
    full: bool,
}

impl Buf {
    pub(crate) fn new() -> Self {
        Buf {
            bytes: [0; CAP],
            len: 0,
            full: false,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        // `write_str` only ever appends whole characters.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn clear(&mut self) {
        self.len = 0;
        self.full = false;
    }
}

impl Write for Buf {
    /// Appends `s`, or as much of it as fits cut at a character boundary;
    /// `Err` once cut, and for every write after that, so that a long `Debug`
    /// output stops early and nothing follows a cut value.
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.full {
            return Err(fmt::Error);
        }
        let room = CAP - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            self.full = true;
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Writes `value` as a logfmt value: bare, or quoted with `"` and `\` escaped
/// (and newlines, tabs and carriage returns as `\n`, `\t`, `\r`) when it is
/// empty or holds a space, a control character, `"` or `=`.
fn write_value(out: &mut Buf, value: &str) -> fmt::Result {
    let quote = value.is_empty() || value.bytes().any(|b| b <= b' ' || b == b'"' || b == b'=');
    if !quote {
        return out.write_str(value);
    }
    out.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\t' => out.write_str("\\t")?,
            '\r' => out.write_str("\\r")?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// A visitor writing fields as `key=value` pairs into `fields`, and, when
/// `message` is given, the `message` field's text there instead.
pub(crate) struct Logfmt<'a> {
    pub(crate) fields: &'a mut Buf,
    pub(crate) message: Option<&'a mut Buf>,
    /// Where a value is formatted before it is quoted.
    scratch: Buf,
}

impl<'a> Logfmt<'a> {
    pub(crate) fn new(fields: &'a mut Buf, message: Option<&'a mut Buf>) -> Self {
        Logfmt {
            fields,
            message,
            scratch: Buf::new(),
        }
    }

    /// Appends ` key=value` (no space before the first pair), the value
    /// formatted by `format`.
    fn pair(&mut self, key: &str, format: impl FnOnce(&mut Buf) -> fmt::Result) {
        if self.fields.full {
            return;
        }
        self.scratch.clear();
        // A value cut short is still written, as far as it got.
        let _ = format(&mut self.scratch);
        let separator = if self.fields.is_empty() { "" } else { " " };
        let _ = write!(self.fields, "{separator}{key}=")
            .and_then(|()| write_value(self.fields, self.scratch.as_str()));
    }

    /// The message buffer, when `field` is the message this visitor extracts.
    fn message_for(&mut self, field: &Field) -> Option<&mut Buf> {
        match &mut self.message {
            Some(m) if field.name() == "message" => Some(m),
            _ => None,
        }
    }
}

impl Visit for Logfmt<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match self.message_for(field) {
            Some(m) => drop(m.write_str(value)),
            None => self.pair(field.name(), |b| b.write_str(value)),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match self.message_for(field) {
            Some(m) => drop(write!(m, "{value:?}")),
            None => self.pair(field.name(), |b| write!(b, "{value:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(s: &str) -> String {
        let mut b = Buf::new();
        let _ = write_value(&mut b, s);
        b.as_str().to_owned()
    }

    #[test]
    fn values_are_quoted_only_when_needed() {
        assert_eq!(quoted("42"), "42");
        assert_eq!(quoted("/a/b"), "/a/b");
        assert_eq!(quoted(""), r#""""#);
        assert_eq!(quoted("/a b"), r#""/a b""#);
        assert_eq!(quoted("k=v"), r#""k=v""#);
        assert_eq!(quoted(r#"say "hi""#), r#""say \"hi\"""#);
        assert_eq!(quoted("a\\b c\n"), r#""a\\b c\n""#);
        assert_eq!(quoted("a\\b"), r"a\b");
    }

    #[test]
    fn a_full_buffer_cuts_at_a_character_boundary() {
        let mut b = Buf::new();
        let long = "é".repeat(200); // 400 bytes
        assert!(b.write_str(&long).is_err());
        assert_eq!(b.as_str().len(), 254);
        assert!(
            b.write_str("x").is_err(),
            "one byte left, but the value was cut"
        );
        assert_eq!(b.as_str(), "é".repeat(127));
    }
}
