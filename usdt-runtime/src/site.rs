//! The probe site, defined once for the macros that emit it, the tracer
//! that classifies and attaches to it, and the tests that check it: its
//! bytes per layout, the argument limit of its note, the register names its
//! note avoids, and the page size a site must not cross to be optimized.
//!
//! ```text
//! Location:      90                              nop   (every tracer may attach here)
//! Location + 1:  0f 1f 44 00 00                  nop5  (Linux 6.18 - 7.2 optimize a uprobe here)
//!           or:  66 2e 0f 1f 84 00 00 00 00 00   nop10 (the 7.3 series optimizes a uprobe here)
//!           or:  0f 1f 44 00 00                  nop5, then at Location + 6
//!                66 2e 0f 1f 84 00 00 00 00 00   nop10 (`nop; nop5; nop10`: both)
//! ```

use crate::SiteLayout;

/// x86-64 `nop`: the first instruction of every site.
pub const NOP: [u8; 1] = [0x90];

/// x86-64 `nopl 0x0(%rax,%rax,1)`, the 5-byte nop the kernel optimizes on
/// Linux 6.18 to 7.2. Written as bytes: an assembler may shorten the
/// mnemonic to 4 bytes, which the kernel single-steps.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// x86-64 `cs nopw 0x0(%rax,%rax,1)`, the 10-byte nop the 7.3 kernel
/// series optimizes.
pub const NOP10: [u8; 10] = [0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00];

/// aarch64 `nop` (`d503201f`, little-endian), as sys/sdt.h emits it.
pub const AARCH64_NOP: [u8; 4] = [0x1f, 0x20, 0x03, 0xd5];

/// riscv64 `nop` (`addi x0, x0, 0`: `00000013`, little-endian).
pub const RISCV64_NOP: [u8; 4] = [0x13, 0x00, 0x00, 0x00];

/// riscv64 `c.nop` (`0001`, little-endian): what the assembler makes of
/// sys/sdt.h's `nop` when the compressed extension is on (`rv64gc`).
pub const RISCV64_C_NOP: [u8; 2] = [0x01, 0x00];

/// The longest site: `nop; nop5; nop10`.
pub const SITE_BYTES: usize = NOP.len() + NOP5.len() + NOP10.len();

/// The most arguments a probe's note describes: sys/sdt.h's `STAP_PROBE12`,
/// libbpf's `USDT_MAX_ARG_CNT` and gdb's `$_probe_arg0` to `$_probe_arg11`
/// all stop at 12. The macros refuse more; the tracer reads a note that
/// describes more as malformed.
pub const MAX_ARGS: usize = 12;

/// The x86-64 registers whose low byte has no name that every consumer of a
/// note reads, as `(low byte, whole register)` in AT&T spelling without `%`.
/// The low byte is what the assembler writes for an `asm!` operand's `{x:l}`
/// (`r8b`); gdb calls it `r8l`, bcc and libbpf `r8b`. So a note gives a
/// 1-byte argument in one of these registers by the whole register's name
/// (`1@%r8`): the size tells each consumer to take the low byte.
///
/// The only table of these names: the macros emit the site's note from it,
/// and the tracer's register table is checked against it.
pub const X86_64_LOW8_WRITTEN_WHOLE: [(&str, &str); 8] = [
    ("r8b", "r8"),
    ("r9b", "r9"),
    ("r10b", "r10"),
    ("r11b", "r11"),
    ("r12b", "r12"),
    ("r13b", "r13"),
    ("r14b", "r14"),
    ("r15b", "r15"),
];

/// The page size tried when the system does not say (x86-64's; aarch64
/// kernels may use 16 or 64 KiB pages).
pub const FALLBACK_PAGE_SIZE: u64 = 4096;

impl SiteLayout {
    /// The x86-64 bytes at Location of a site of this layout (`None` for
    /// [`SiteLayout::Other`]).
    pub const fn x86_64_bytes(self) -> Option<&'static [u8]> {
        const NOP_NOP5: [u8; 6] = concat_nop(NOP5);
        const NOP_NOP10: [u8; 11] = concat_nop(NOP10);
        const NOP_NOP5_NOP10: [u8; 16] = concat_nop(concat_long(NOP5, NOP10));
        match self {
            SiteLayout::NopNop5 => Some(&NOP_NOP5),
            SiteLayout::NopNop10 => Some(&NOP_NOP10),
            SiteLayout::NopNop5Nop10 => Some(&NOP_NOP5_NOP10),
            SiteLayout::Nop => Some(&NOP),
            SiteLayout::Nop5 => Some(&NOP5),
            SiteLayout::Other => None,
        }
    }
}

/// `nop5` followed by `nop10`.
const fn concat_long(nop5: [u8; 5], nop10: [u8; 10]) -> [u8; 15] {
    let mut out = [0u8; 15];
    let mut i = 0;
    while i < 5 {
        out[i] = nop5[i];
        i += 1;
    }
    while i < 15 {
        out[i] = nop10[i - 5];
        i += 1;
    }
    out
}

/// `nop` followed by `long_nop`.
const fn concat_nop<const N: usize, const M: usize>(long_nop: [u8; N]) -> [u8; M] {
    let mut out = [0u8; M];
    out[0] = NOP[0];
    let mut i = 0;
    while i < N {
        out[i + 1] = long_nop[i];
        i += 1;
    }
    out
}

/// The size of a memory page on this system (`sysconf(_SC_PAGESIZE)`), or
/// [`FALLBACK_PAGE_SIZE`] if it does not say.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(FALLBACK_PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_spell_their_bytes() {
        assert_eq!(
            SiteLayout::NopNop5.x86_64_bytes(),
            Some(&[0x90, 0x0f, 0x1f, 0x44, 0, 0][..])
        );
        assert_eq!(
            SiteLayout::NopNop10.x86_64_bytes().map(<[u8]>::len),
            Some(11)
        );
        let both = SiteLayout::NopNop5Nop10.x86_64_bytes().unwrap();
        assert_eq!(both.len(), SITE_BYTES);
        assert_eq!(both[1..6], NOP5);
        assert_eq!(both[6..], NOP10);
        assert_eq!(
            SiteLayout::NopNop5Nop10.long_nop_at(SiteLayout::NopNop10),
            Some(6)
        );
        assert!(page_size() >= 4096);
    }
}
