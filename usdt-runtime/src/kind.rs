//! Argument kinds: the codes a provider probe's signature record gives each
//! argument, telling a tracer how to show the value its note operand holds.
//!
//! A code is one byte. Integers carry their signedness and size in bytes
//! (`UNSIGNED | 4` is `u32`, `SIGNED | 8` is `i64`); every other kind has a
//! code of its own. Readers show a code they do not know as the note's
//! integer.

/// A value whose meaning the record does not say: shown as the note's
/// integer (a hand-written [`ProbeArg`](crate::ProbeArg) that names no kind).
pub const CUSTOM: u8 = 0x00;
/// An unsigned integer: `UNSIGNED | size in bytes` (1, 2, 4 or 8).
pub const UNSIGNED: u8 = 0x10;
/// A signed integer: `SIGNED | size in bytes` (1, 2, 4 or 8).
pub const SIGNED: u8 = 0x20;
/// `bool`: 0 or 1.
pub const BOOL: u8 = 0x30;
/// `char`: the code point.
pub const CHAR: u8 = 0x31;
/// `f32`: the IEEE-754 bits.
pub const F32: u8 = 0x32;
/// `f64`: the IEEE-754 bits.
pub const F64: u8 = 0x33;
/// A raw pointer or a reference: the address.
pub const POINTER: u8 = 0x34;
/// `&str` or `String`: the address of a NUL-terminated copy (null when the
/// probe's semaphore was zero).
pub const STR: u8 = 0x35;
/// `&CStr` or `CString`: the address of the NUL-terminated bytes.
pub const CSTR: u8 = 0x36;
/// `&[u8]` or `Vec<u8>`: two operands, the address, then the length in bytes.
pub const BYTES: u8 = 0x37;
/// `Duration`: nanoseconds as a `u64`, saturating at `u64::MAX`.
pub const DURATION: u8 = 0x38;

/// The code of an integer of `size` bytes (`SIZE` of a
/// [`ProbeArg`](crate::ProbeArg): negative when signed).
pub const fn int(size: i8) -> u8 {
    if size < 0 {
        SIGNED | size.unsigned_abs()
    } else {
        UNSIGNED | size as u8
    }
}

/// How many note operands an argument of kind `code` takes: two for
/// [`BYTES`], one for every other kind.
pub const fn operands(code: u8) -> usize {
    if code == BYTES {
        2
    } else {
        1
    }
}
