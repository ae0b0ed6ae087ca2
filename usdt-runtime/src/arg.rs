//! How a Rust value becomes a probe argument: a 64-bit register whose low
//! `|SIZE|` bytes the note describes.

use core::ffi::CStr;
use core::time::Duration;

use crate::kind;

/// A type that can be passed to a probe in a register: the trait behind
/// `#[derive(usdt::ProbeArg)]`, public for hand-written impls.
///
/// `SIZE` is the argument's size in the note, negative for signed types
/// (`-4` for `i32`, `8` for a pointer), and `value` the register contents:
/// the value zero- or sign-extended to 64 bits. Consumers read the low
/// `|SIZE|` bytes and extend them per the sign.
///
/// Implemented for the integer types, `bool` (0 or 1), `char` (its code point,
/// as `u32`), `f32`/`f64` (their IEEE-754 bits, as unsigned integers of the same
/// size), raw pointers (the address), and `&CStr` and `CString` (the address of
/// the NUL-terminated bytes), `Duration` (nanoseconds, saturating at
/// `u64::MAX`). Not for references in general, so that `&String`
/// does not silently pass the address of a `String`'s header: a provider probe
/// declares a reference argument and passes its address; an ad-hoc probe takes
/// a raw pointer (`ptr::from_ref(&x)`). Strings (`&str`, `String`) need a copy
/// with a terminating NUL, which only a provider probe makes, and only while
/// traced.
///
/// Your own types: `#[derive(usdt::ProbeArg)]` on a struct with one field of
/// a type that implements this trait (`struct ConnId(u64);`) passes the
/// field, with its `SIZE` and `KIND`; tracers show the field's value, and a
/// provider probe's signature shows your type's name. By hand:
///
/// ```
/// # use usdt_runtime as usdt;
/// struct Port(u16);
///
/// impl usdt::ProbeArg for Port {
///     const SIZE: i8 = 2; // 2 bytes, unsigned
///     const KIND: u8 = usdt::kind::UNSIGNED | 2; // shown as an unsigned integer
///     fn value(&self) -> u64 {
///         self.0.into()
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a probe argument",
    label = "not an integer, bool, char, float, raw pointer, C string or Duration",
    note = "probe arguments are integers, bool, char, f32, f64, raw pointers, &CStr, CString, Duration, and types that implement `usdt::ProbeArg` (`#[derive(usdt::ProbeArg)]` on a one-field struct); pass a reference as a raw pointer: `core::ptr::from_ref(&x)`",
    note = "a string (&str, String) is accepted only by a probe declared in a #[usdt::provider] module, which copies it while a tracer is attached"
)]
pub trait ProbeArg {
    /// Size in bytes, negative when the value is signed (the note's `SIZE@`).
    const SIZE: i8;
    /// `|SIZE|`: how many low bytes of the register hold the value.
    const WIDTH: u8 = Self::SIZE.unsigned_abs();
    /// How tracers show the value: one of the codes in [`kind`](crate::kind),
    /// recorded in the probe's signature. The default, [`kind::CUSTOM`], shows
    /// the note's integer.
    const KIND: u8 = kind::CUSTOM;
    /// The register contents.
    fn value(&self) -> u64;
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl ProbeArg for $t {
            const SIZE: i8 = core::mem::size_of::<$t>() as i8;
            const KIND: u8 = kind::int(Self::SIZE);
            #[inline(always)]
            fn value(&self) -> u64 {
                *self as u64
            }
        }
    )*};
}

macro_rules! signed {
    ($($t:ty),*) => {$(
        impl ProbeArg for $t {
            const SIZE: i8 = -(core::mem::size_of::<$t>() as i8);
            const KIND: u8 = kind::int(Self::SIZE);
            #[inline(always)]
            fn value(&self) -> u64 {
                *self as i64 as u64
            }
        }
    )*};
}

unsigned!(u8, u16, u32, u64, usize);
signed!(i8, i16, i32, i64, isize);

impl ProbeArg for bool {
    const SIZE: i8 = 1;
    const KIND: u8 = kind::BOOL;
    #[inline(always)]
    fn value(&self) -> u64 {
        *self as u64
    }
}

impl ProbeArg for char {
    const SIZE: i8 = 4;
    const KIND: u8 = kind::CHAR;
    #[inline(always)]
    fn value(&self) -> u64 {
        *self as u64
    }
}

impl ProbeArg for f32 {
    const SIZE: i8 = 4;
    const KIND: u8 = kind::F32;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.to_bits() as u64
    }
}

impl ProbeArg for f64 {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::F64;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.to_bits()
    }
}

impl<T: ?Sized> ProbeArg for *const T {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::POINTER;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.cast::<u8>() as usize as u64
    }
}

impl<T: ?Sized> ProbeArg for *mut T {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::POINTER;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.cast::<u8>() as usize as u64
    }
}

impl ProbeArg for &CStr {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::CSTR;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.as_ptr() as usize as u64
    }
}

impl ProbeArg for alloc::ffi::CString {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::CSTR;
    #[inline(always)]
    fn value(&self) -> u64 {
        self.as_ptr() as usize as u64
    }
}

/// Nanoseconds, saturating at `u64::MAX` (about 584 years).
impl ProbeArg for Duration {
    const SIZE: i8 = 8;
    const KIND: u8 = kind::DURATION;
    #[inline(always)]
    fn value(&self) -> u64 {
        u64::try_from(self.as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_values() {
        assert_eq!((u8::SIZE, u8::WIDTH), (1, 1));
        assert_eq!((i16::SIZE, i16::WIDTH), (-2, 2));
        assert_eq!((i64::SIZE, <*const u8>::SIZE), (-8, 8));
        assert_eq!((-1i8).value(), u64::MAX);
        assert_eq!(i64::MIN.value(), 1 << 63);
        assert_eq!(60000u16.value(), 60000);
        assert_eq!(true.value(), 1);
        assert_eq!('é'.value(), 0xe9);
        assert_eq!(1.5f32.value(), 0x3fc0_0000);
        assert_eq!((-2.0f64).value(), 0xc000_0000_0000_0000);
        let x = 7u32;
        assert_eq!(
            ProbeArg::value(&(&x as *const u32)),
            &x as *const u32 as u64
        );
        assert_eq!(Duration::from_micros(1500).value(), 1_500_000);
        assert_eq!(Duration::MAX.value(), u64::MAX);
        assert_eq!(
            (u16::KIND, i64::KIND),
            (kind::UNSIGNED | 2, kind::SIGNED | 8)
        );
        assert_eq!((f64::KIND, Duration::KIND), (kind::F64, kind::DURATION));
        let c = c"abc";
        assert_eq!(ProbeArg::value(&c), c.as_ptr() as u64);
    }
}
