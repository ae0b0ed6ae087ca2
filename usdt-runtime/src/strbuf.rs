//! Staging of string arguments: a probe argument is a pointer to NUL-terminated
//! bytes, which a Rust string is not, so a traced probe copies it first.

use core::mem::MaybeUninit;

/// The most bytes of a string argument a probe passes; longer strings are
/// truncated to the last whole UTF-8 character within this bound.
pub const STR_MAX: usize = 255;

/// Stack storage for one staged string argument (`STR_MAX` bytes and a NUL).
///
/// Left uninitialized until [`StrArg::stage`] writes it, which a probe does only
/// while a tracer is attached, so an idle probe copies nothing.
pub struct StrBuf(MaybeUninit<[u8; STR_MAX + 1]>);

impl StrBuf {
    /// Uninitialized storage.
    #[inline(always)]
    pub const fn new() -> Self {
        StrBuf(MaybeUninit::uninit())
    }
}

impl Default for StrBuf {
    fn default() -> Self {
        Self::new()
    }
}

/// A string type a provider probe accepts: `&str` or `String`.
pub trait StrArg {
    /// The bytes of the string.
    fn bytes(&self) -> &[u8];

    /// Copies at most [`STR_MAX`] bytes into `buf`, cut at a character boundary
    /// and followed by a NUL, and returns the address of the copy. A NUL inside
    /// the string ends it for every consumer.
    #[inline(always)]
    fn stage(&self, buf: &mut StrBuf) -> u64 {
        let bytes = self.bytes();
        let len = truncated_len(bytes);
        let dst = buf.0.as_mut_ptr().cast::<u8>();
        // SAFETY: `len <= STR_MAX`, so the copy and the NUL at `dst + len` stay
        // within the `STR_MAX + 1` bytes of `buf`; source and destination are
        // distinct objects, so they do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, len);
            dst.add(len).write(0);
        }
        dst as usize as u64
    }
}

/// The length of the longest prefix of `bytes` of at most `STR_MAX` bytes that
/// does not split a UTF-8 character.
#[inline]
fn truncated_len(bytes: &[u8]) -> usize {
    if bytes.len() <= STR_MAX {
        return bytes.len();
    }
    let mut len = STR_MAX;
    // A continuation byte (0b10xx_xxxx) cannot start a character.
    while len > 0 && bytes[len] & 0xc0 == 0x80 {
        len -= 1;
    }
    len
}

impl StrArg for &str {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

impl StrArg for alloc::string::String {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(s: &str) -> &'static [u8] {
        let buf = Box::leak(Box::new(StrBuf::new()));
        let p = s.stage(buf) as usize as *const core::ffi::c_char;
        // SAFETY: `stage` wrote a NUL-terminated string at `p`, inside the leaked buffer.
        unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes()
    }

    use alloc::boxed::Box;
    use alloc::string::String;

    #[test]
    fn short_strings_are_copied_whole() {
        assert_eq!(staged("/index.html"), b"/index.html");
        assert_eq!(staged(""), b"");
    }

    #[test]
    fn long_strings_are_cut_at_a_character_boundary() {
        let long = "a".repeat(300);
        assert_eq!(staged(&long).len(), STR_MAX);
        // 254 ASCII bytes, then a 2-byte character straddling the bound.
        let s = String::from("b").repeat(254) + "é" + "tail";
        assert_eq!(staged(&s), "b".repeat(254).as_bytes());
    }
}
