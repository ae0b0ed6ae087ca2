//! What a hit is: its decoded arguments ([`Value`]) and the hit itself
//! ([`Hit`]), with how they print.

use std::fmt;
use std::sync::Arc;

pub use crate::raw::{BYTES_FETCH, STRING_MAX};

/// A decoded argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// An integer, signed or unsigned as the note says (`i128` holds both
    /// `i64` and `u64` exactly).
    Int(i128),
    /// A NUL-terminated string, without its NUL.
    Str {
        /// The bytes.
        bytes: Vec<u8>,
        /// Whether it went on past [`STRING_MAX`] bytes (only those were read).
        truncated: bool,
    },
    /// Memory the argument points at could not be read (the address).
    Unreadable(u64),
    /// A 4-byte float (`4f@`), as its bits (so that values compare exactly).
    F32(u32),
    /// An 8-byte float (`8f@`), as its bits.
    F64(u64),
    /// A 16 or 24-byte value (a struct or `__int128` passed by value), as
    /// the bytes in memory order.
    Bytes(Vec<u8>),
    /// The argument cannot be read: why (`xmm registers are not sampled`).
    Unavailable(String),
}

impl Value {
    /// The integer, if this is one.
    pub fn int(&self) -> Option<i128> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The float, if this is one.
    pub fn float(&self) -> Option<f64> {
        match self {
            Value::F32(bits) => Some(f32::from_bits(*bits).into()),
            Value::F64(bits) => Some(f64::from_bits(*bits)),
            _ => None,
        }
    }

    /// The string's bytes, if this is a string.
    pub fn str_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Str { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

macro_rules! value_from_int {
    ($($t:ty)*) => {$(
        impl From<$t> for Value {
            fn from(n: $t) -> Value {
                Value::Int(n as i128)
            }
        }
    )*};
}
value_from_int!(u8 u16 u32 u64 usize i8 i16 i32 i64 isize bool);

impl From<f32> for Value {
    fn from(x: f32) -> Value {
        Value::F32(x.to_bits())
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::F64(x.to_bits())
    }
}

impl From<char> for Value {
    fn from(c: char) -> Value {
        Value::Int(c as i128)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str {
            bytes: s.as_bytes().to_vec(),
            truncated: false,
        }
    }
}

/// Integers in decimal, floats as Rust prints them (`1.5`, `-3.25`, `NaN`),
/// strings quoted with C-style escapes (`"a\"b\n\x01"`) and `...` after a
/// truncated one, bytes in hex after `hex:`, unreadable memory as
/// `<unreadable 0x..>`, an argument that cannot be read as `? (why)`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // 64-bit formatting is much faster than i128's.
            Value::Int(n) => match (i64::try_from(*n), u64::try_from(*n)) {
                (Ok(i), _) => write!(f, "{i}"),
                (_, Ok(u)) => write!(f, "{u}"),
                _ => write!(f, "{n}"),
            },
            Value::Str { bytes, truncated } => {
                f.write_str("\"")?;
                for &b in bytes {
                    match b {
                        b'"' => f.write_str("\\\"")?,
                        b'\\' => f.write_str("\\\\")?,
                        b'\n' => f.write_str("\\n")?,
                        b'\t' => f.write_str("\\t")?,
                        b'\r' => f.write_str("\\r")?,
                        0x20..=0x7e => write!(f, "{}", b as char)?,
                        _ => write!(f, "\\x{b:02x}")?,
                    }
                }
                f.write_str(if *truncated { "\"..." } else { "\"" })
            }
            Value::Unreadable(addr) => write!(f, "<unreadable {addr:#x}>"),
            Value::F32(bits) => write!(f, "{}", f32::from_bits(*bits)),
            Value::F64(bits) => write!(f, "{}", f64::from_bits(*bits)),
            Value::Bytes(bytes) => {
                f.write_str("hex:")?;
                bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Value::Unavailable(why) => write!(f, "? ({why})"),
        }
    }
}

/// One probe hit with its decoded arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// When it fired: `CLOCK_MONOTONIC` nanoseconds.
    pub time_ns: u64,
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The provider.
    pub provider: Arc<str>,
    /// The probe name.
    pub name: Arc<str>,
    /// The arguments, in note order.
    pub args: Vec<Value>,
    /// The user stack at the hit, when the sampler unwinds stacks
    /// ([`Sampler::stacks`](crate::Sampler::stacks)).
    pub stack: Option<crate::Stack>,
}

impl Hit {
    /// `provider:name`.
    pub fn probe(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }

    /// Whether this is a hit of `provider:name`.
    pub fn is(&self, probe: &str) -> bool {
        probe.split_once(':') == Some((&self.provider, &self.name))
    }
}

/// `arg0=V arg1=V ...`
impl fmt::Display for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "arg{i}={v}")?;
        }
        Ok(())
    }
}
