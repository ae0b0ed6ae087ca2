//! A hit shown with its probe's signature: names, Rust types and values
//! (`id=1 path="/index.html"`), reading a byte slice's bytes from the
//! process when the sampler did not.

use std::fmt::Write as _;

use crate::elf::signature::{Kind, Signature, BYTES_MAX, BYTES_SHOWN};
use crate::sample::{Hit, Value};

/// A hit's values shown with their names and kinds.
pub struct TypedArgs<'a> {
    sig: &'a Signature,
    hit: &'a Hit,
    /// Each byte-slice parameter's bytes, read from the process.
    bytes: Vec<Option<Value>>,
}

impl<'a> TypedArgs<'a> {
    /// Pairs `hit` with its record. A byte slice's bytes are those the
    /// sampler read at the hit ([`Sampler::bytes_arg`](crate::Sampler::bytes_arg),
    /// the first [`BYTES_FETCH`](crate::BYTES_FETCH)), cut to its length;
    /// otherwise they are read from the process now, after the hit (they
    /// may have changed, or be gone: then they show as `<unreadable 0x..>`;
    /// so does a null pointer, which no `&str`, `&CStr` or `&[u8]` is: a
    /// record that does not match its site).
    pub fn new(sig: &'a Signature, hit: &'a Hit) -> TypedArgs<'a> {
        let indices = sig.operand_indices();
        let bytes = sig
            .params
            .iter()
            .zip(&indices)
            .map(|(p, &i)| {
                (p.kind == Kind::Bytes).then(|| read_bytes(hit.pid, &hit.args[i], &hit.args[i + 1]))
            })
            .collect();
        TypedArgs { sig, hit, bytes }
    }

    /// `id=1 path="/index.html" data=[01 02 ff]`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let indices = self.sig.operand_indices();
        for (n, (p, &i)) in self.sig.params.iter().zip(&indices).enumerate() {
            if n > 0 {
                out.push(' ');
            }
            // The name comes from the binary: escaped like a probe name.
            let _ = write!(out, "{}=", crate::escape_name(&p.name));
            match &self.bytes[n] {
                Some(bytes) => push_bytes_text(&mut out, bytes),
                None => push_text(&mut out, p.kind, &self.hit.args[i]),
            }
        }
        out
    }

    /// Each parameter with its value: for a byte slice the bytes read
    /// (a [`Value::Str`], or unreadable), else the hit's argument. What a
    /// caller formats otherwise (the `usdt` command's JSON lines).
    pub fn values(&self) -> impl Iterator<Item = TypedValue<'_>> {
        let indices = self.sig.operand_indices();
        self.sig
            .params
            .iter()
            .zip(indices)
            .zip(&self.bytes)
            .map(|((param, i), bytes)| TypedValue {
                name: &param.name,
                kind: param.kind,
                value: bytes.as_ref().unwrap_or(&self.hit.args[i]),
            })
    }
}

/// One parameter of a hit, from [`TypedArgs::values`].
#[derive(Clone, Copy, Debug)]
pub struct TypedValue<'a> {
    /// The parameter's name.
    pub name: &'a str,
    /// Its kind.
    pub kind: Kind,
    /// Its value: a [`Kind::Bytes`] parameter's bytes as a [`Value::Str`]
    /// (or [`Value::Unreadable`]); otherwise the argument as sampled.
    pub value: &'a Value,
}

impl TypedValue<'_> {
    /// A float parameter's value (an `f32` through its shortest decimal
    /// form, so `1.1` stays `1.1`), or `None` for other kinds.
    pub fn float(&self) -> Option<f64> {
        match (self.kind, self.value) {
            (Kind::F32 | Kind::F64, Value::Int(n)) => Some(float(self.kind, *n)),
            _ => None,
        }
    }
}

/// The bytes at `ptr`, `len` of them (at most [`BYTES_MAX`]), from the
/// process: a [`Value::Str`] (truncated past the bound), or unreadable.
fn read_bytes(pid: u32, ptr: &Value, len: &Value) -> Value {
    let Some(len) = len.int() else {
        return Value::Unreadable(0);
    };
    if let Value::Str { bytes, .. } = ptr {
        let n = usize::try_from(len).unwrap_or(0);
        return Value::Str {
            bytes: bytes[..n.min(bytes.len())].to_vec(),
            truncated: n > bytes.len(),
        };
    }
    let Some(ptr) = ptr.int() else {
        return Value::Unreadable(0);
    };
    let (ptr, len) = (ptr as u64, len.max(0) as u64);
    let want = len.min(BYTES_MAX as u64) as usize;
    if want == 0 {
        return Value::Str {
            bytes: vec![],
            truncated: false,
        };
    }
    let mut buf = vec![0u8; want];
    let n = crate::sys::process::read_process_memory(pid, ptr, &mut buf);
    if n != want {
        return Value::Unreadable(ptr);
    }
    Value::Str {
        bytes: buf,
        truncated: len > want as u64,
    }
}

/// `[01 02 ff]`, at most [`BYTES_SHOWN`] bytes, then ` ...` before the bracket.
fn push_bytes_text(out: &mut String, v: &Value) {
    let Value::Str { bytes, truncated } = v else {
        let _ = write!(out, "{v}");
        return;
    };
    out.push('[');
    for (i, b) in bytes.iter().take(BYTES_SHOWN).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{b:02x}");
    }
    if bytes.len() > BYTES_SHOWN || *truncated {
        out.push_str(" ...");
    }
    out.push(']');
}

/// A float as JSON takes it: an `f32` through its shortest decimal (`1.1`,
/// not `1.100000023841858`).
fn float(kind: Kind, n: i128) -> f64 {
    match kind {
        Kind::F32 => {
            let f = f32::from_bits(n as u32);
            f.to_string().parse().unwrap_or(f64::from(f))
        }
        _ => f64::from_bits(n as u64),
    }
}

/// One value by its kind.
fn push_text(out: &mut String, kind: Kind, v: &Value) {
    let n = match v {
        Value::Int(n) => *n,
        Value::Str { bytes, truncated } => {
            push_quoted(out, bytes);
            if *truncated {
                out.push_str("...");
            }
            return;
        }
        other => {
            let _ = write!(out, "{other}");
            return;
        }
    };
    let _ = match kind {
        Kind::Bool => write!(out, "{}", n != 0),
        Kind::Char => match char::from_u32(n as u32) {
            Some(c) => write!(out, "{c:?}"),
            None => write!(out, "{n}"),
        },
        // f32 shown through its own Display: `1.1`, not f64's `1.100000023841858`.
        Kind::F32 => write!(out, "{}", f32::from_bits(n as u32)),
        Kind::F64 => write!(out, "{}", f64::from_bits(n as u64)),
        Kind::Pointer | Kind::Str | Kind::CStr | Kind::Bytes => write!(out, "{:#x}", n as u64),
        Kind::Duration => write!(out, "{}ns", n as u64),
        Kind::Unsigned(_) | Kind::Signed(_) | Kind::Custom(_) => write!(out, "{v}"),
    };
}

/// A string, quoted, with Rust's escapes (`\"`, `\n`, `\u{1b}`) for valid
/// UTF-8, and `\xNN` for bytes that are not.
fn push_quoted(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\'' => out.push('\''),
                c => out.extend(c.escape_debug()),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_by_kind() {
        let text = |k, v: Value| {
            let mut s = String::new();
            push_text(&mut s, k, &v);
            s
        };
        assert_eq!(text(Kind::Bool, Value::Int(1)), "true");
        assert_eq!(text(Kind::Char, Value::Int(0xe9)), "'é'");
        assert_eq!(text(Kind::Char, Value::Int(b'\'' as i128)), "'\\''");
        assert_eq!(text(Kind::F32, Value::Int(0x3fc0_0000)), "1.5");
        assert_eq!(text(Kind::F64, Value::Int(0xc000_0000_0000_0000)), "-2");
        assert_eq!(text(Kind::Pointer, Value::Int(0x7ffd)), "0x7ffd");
        assert_eq!(text(Kind::Duration, Value::Int(5)), "5ns");
        // A null pointer is no exception: `&str`, `&CStr` and `&[u8]` are
        // never null, so 0 is an address that cannot be read, as 1 is.
        assert_eq!(text(Kind::Str, Value::Unreadable(0)), "<unreadable 0x0>");
        assert_eq!(text(Kind::Str, Value::Unreadable(1)), "<unreadable 0x1>");
        assert_eq!(text(Kind::Str, Value::from("a\"é\n")), "\"a\\\"é\\n\"");
        let bytes = Value::Str {
            bytes: vec![0xff; 3],
            truncated: false,
        };
        assert_eq!(text(Kind::Str, bytes), "\"\\xff\\xff\\xff\"");
        let mut s = String::new();
        push_bytes_text(
            &mut s,
            &Value::Str {
                bytes: (0..70).collect(),
                truncated: false,
            },
        );
        assert!(s.starts_with("[00 01 02") && s.ends_with(" 3f ...]"), "{s}");
        assert_eq!(float(Kind::F32, 0x3f8c_cccd), 1.1);
    }
}
