//! Signature records: the argument names, Rust types and kinds that each
//! `#[usdt::provider]` probe writes beside its note, in the non-allocated
//! section `.usdt.signatures`, and how a hit's values are shown with them.
//!
//! ```text
//! one record per site, packed (alignment 1):
//!   version 1 byte (1) | nargs 1 | flags 2 (0) | length 4 (bytes after this field)
//!   Location 8 (the site's nop, as in the note, before any Base adjustment)
//!   "provider\0" "name\0"
//!   per argument: kind 1 (usdt::kind) | "name\0" | "type\0"
//! ```
//!
//! A record of another version is skipped by its length. A record is used
//! only when its operands (a byte slice takes two, every other kind one)
//! match the note's: otherwise the probe shows as `arg0..argN`, like the
//! probes of C programs and ad-hoc `usdt::probe!` probes, which have none.

use std::path::Path;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;
use usdt_runtime::kind;

use crate::elf::note::Site;
use crate::Error;

/// The record format this reader knows (usdt-runtime's `signature`, the
/// format's one home).
pub const SIGNATURE_VERSION: u8 = usdt_runtime::signature::VERSION;

/// The section the records are in.
pub const SIGNATURE_SECTION: &str = usdt_runtime::signature::SECTION;

/// How many bytes of a byte-slice argument a text line shows.
pub const BYTES_SHOWN: usize = 64;

/// The most bytes of a byte-slice argument read for a hit.
pub const BYTES_MAX: usize = 4096;

/// How a probe argument's value is shown: its kind code (`usdt::kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An unsigned integer of this many bytes.
    Unsigned(u8),
    /// A signed integer of this many bytes.
    Signed(u8),
    /// `bool`.
    Bool,
    /// `char`.
    Char,
    /// `f32`, as its bits.
    F32,
    /// `f64`, as its bits.
    F64,
    /// A raw pointer or a reference.
    Pointer,
    /// `&str` or `String`: a NUL-terminated copy.
    Str,
    /// `&CStr` or `CString`.
    CStr,
    /// `&[u8]` or `Vec<u8>`: address and length, two operands.
    Bytes,
    /// `Duration`: nanoseconds.
    Duration,
    /// A code this reader does not know, or `kind::CUSTOM`: the integer.
    Custom(u8),
}

impl Kind {
    /// The kind of a code.
    pub fn from_code(code: u8) -> Kind {
        match code {
            kind::BOOL => Kind::Bool,
            kind::CHAR => Kind::Char,
            kind::F32 => Kind::F32,
            kind::F64 => Kind::F64,
            kind::POINTER => Kind::Pointer,
            kind::STR => Kind::Str,
            kind::CSTR => Kind::CStr,
            kind::BYTES => Kind::Bytes,
            kind::DURATION => Kind::Duration,
            c if c & 0xf0 == kind::UNSIGNED && matches!(c & 0xf, 1 | 2 | 4 | 8) => {
                Kind::Unsigned(c & 0xf)
            }
            c if c & 0xf0 == kind::SIGNED && matches!(c & 0xf, 1 | 2 | 4 | 8) => {
                Kind::Signed(c & 0xf)
            }
            c => Kind::Custom(c),
        }
    }

    /// How many note operands an argument of this kind takes.
    pub fn operands(self) -> usize {
        match self {
            Kind::Bytes => 2,
            _ => 1,
        }
    }

    /// Whether the kernel should read a string at the operand's address at
    /// the hit.
    pub fn is_string(self) -> bool {
        matches!(self, Kind::Str | Kind::CStr)
    }
}

/// One declared argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// Its name (`arg3` for an unnamed `_`).
    pub name: String,
    /// Its type as written in the source (`&str`, `Vec<u8>`, `ConnId`).
    pub ty: String,
    /// How its value is shown.
    pub kind: Kind,
}

/// One record: a probe's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The provider.
    pub provider: String,
    /// The probe name, as in the note (`order-placed`).
    pub name: String,
    /// The site's Location, as written (link-time address).
    pub location: u64,
    /// The parameters, in order.
    pub params: Vec<Param>,
}

impl Signature {
    /// `(id: u64, path: &str)`.
    pub fn params_text(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("{}: {}", p.name, p.ty))
            .collect();
        format!("({})", params.join(", "))
    }

    /// `provider:name(id: u64, path: &str)`.
    pub fn display(&self) -> String {
        format!("{}:{}{}", self.provider, self.name, self.params_text())
    }

    /// How many note operands the parameters take.
    pub fn operands(&self) -> usize {
        self.params.iter().map(|p| p.kind.operands()).sum()
    }

    /// For each parameter, the index of its first note operand.
    pub fn operand_indices(&self) -> Vec<usize> {
        let mut at = 0;
        self.params
            .iter()
            .map(|p| {
                let i = at;
                at += p.kind.operands();
                i
            })
            .collect()
    }

    /// Whether this record describes `site`: same provider and name, as
    /// many operands as the note has.
    pub fn fits(&self, site: &Site) -> bool {
        self.provider == site.provider
            && self.name == site.name
            && self.operands() == site.args.len()
    }
}

/// Reads every record of an ELF file's bytes (none when it has no
/// `.usdt.signatures` section).
pub fn read_signatures(data: &[u8]) -> Result<Vec<Signature>, Error> {
    read_signatures_from(data)
}

fn read_signatures_from<'d, R: object::ReadRef<'d>>(data: R) -> Result<Vec<Signature>, Error> {
    let header = elf::FileHeader64::<Endianness>::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    let mut out = vec![];
    for section in sections.iter() {
        if sections.section_name(endian, section) != Ok(SIGNATURE_SECTION.as_bytes()) {
            continue;
        }
        if section.sh_type(endian) == elf::SHT_NOBITS {
            continue;
        }
        let bytes = section.data(endian, data)?;
        parse_records(bytes, &mut out)?;
    }
    Ok(out)
}

/// Reads every record of the ELF file at `path`: only a regular ELF file,
/// and only its headers and the records' section, by bounded reads (as
/// [`read_file_probes`](crate::read_file_probes) reads the notes).
pub fn read_file_signatures(path: impl AsRef<Path>) -> Result<Vec<Signature>, Error> {
    read_signatures_from(&crate::elf::note::Bounded::open(path.as_ref())?)
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Elf(format!("{SIGNATURE_SECTION}: {}", reason.into()))
}

/// Parses the records of one section into `out`.
pub fn parse_records(mut bytes: &[u8], out: &mut Vec<Signature>) -> Result<(), Error> {
    while !bytes.is_empty() {
        if bytes.len() < 8 {
            return Err(bad("a record is shorter than its 8-byte header"));
        }
        let (version, nargs) = (bytes[0], bytes[1]);
        let len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
        let body = bytes
            .get(8..8 + len)
            .ok_or_else(|| bad("a record's length runs past the section"))?;
        bytes = &bytes[8 + len..];
        if version != SIGNATURE_VERSION {
            continue;
        }
        out.push(parse_body(body, nargs)?);
    }
    Ok(())
}

fn parse_body(body: &[u8], nargs: u8) -> Result<Signature, Error> {
    let mut cursor = Cursor(body);
    let location = cursor
        .u64()
        .ok_or_else(|| bad("a record has no Location"))?;
    let provider = cursor.string("provider")?;
    let name = cursor.string("probe name")?;
    let params = (0..nargs)
        .map(|_| {
            let code = cursor.byte().ok_or_else(|| bad("a record ends early"))?;
            Ok(Param {
                kind: Kind::from_code(code),
                name: cursor.string("argument name")?,
                ty: cursor.string("argument type")?,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(Signature {
        provider,
        name,
        location,
        params,
    })
}

/// Reads a record's fields in order.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }

    fn u64(&mut self) -> Option<u64> {
        let bytes: [u8; 8] = self.0.get(..8)?.try_into().ok()?;
        self.0 = &self.0[8..];
        Some(u64::from_le_bytes(bytes))
    }

    fn string(&mut self, what: &str) -> Result<String, Error> {
        let end = self
            .0
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| bad(format!("a record's {what} has no NUL")))?;
        let s = String::from_utf8(self.0[..end].to_vec())
            .map_err(|_| bad(format!("a record's {what} is not UTF-8")))?;
        self.0 = &self.0[end + 1..];
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u8, body: &[u8], nargs: u8) -> Vec<u8> {
        let mut r = vec![version, nargs, 0, 0];
        r.extend((body.len() as u32).to_le_bytes());
        r.extend(body);
        r
    }

    #[test]
    fn parses_records_and_skips_other_versions() {
        let mut body = 0x1234u64.to_le_bytes().to_vec();
        body.extend(b"http\0request_start\0");
        body.extend([kind::UNSIGNED | 8]);
        body.extend(b"id\0u64\0");
        body.extend([kind::STR]);
        body.extend(b"path\0&str\0");
        let mut section = record(9, b"future", 3);
        section.extend(record(1, &body, 2));
        let mut out = vec![];
        parse_records(&section, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].location, 0x1234);
        assert_eq!(out[0].display(), "http:request_start(id: u64, path: &str)");
        assert_eq!(out[0].params[1].kind, Kind::Str);
        assert!(parse_records(&section[..section.len() - 1], &mut out).is_err());
        assert!(parse_records(&record(1, &body[..20], 2), &mut vec![]).is_err());
    }

    #[test]
    fn kinds_and_values() {
        assert_eq!(Kind::from_code(kind::SIGNED | 4), Kind::Signed(4));
        assert_eq!(Kind::from_code(kind::UNSIGNED | 3), Kind::Custom(0x13));
        assert_eq!(Kind::from_code(0x7f), Kind::Custom(0x7f));
    }
}
