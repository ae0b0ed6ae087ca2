//! Where a probe site may be attached: the one check that keeps a uprobe
//! (a breakpoint the kernel writes into the file's pages) and a semaphore
//! (a counter the kernel adds to) where `sys/sdt.h` puts them, so that a
//! note whose addresses point elsewhere never changes the program.
//!
//! - Location lies in an executable `PT_LOAD` segment's file bytes, and
//!   the bytes there are a nop form this project knows ([`layout_of`] is
//!   not [`SiteLayout::Other`]: x86-64 `90` with or without the long nops
//!   after it, a lone nop5; aarch64 `nop`; riscv64 `nop` or `c.nop`).
//! - A semaphore's two bytes lie in a writable, non-executable `PT_LOAD`
//!   segment's file bytes.
//!
//! The nop forms ([`layout_of`]) and the segments ([`Segment`]) live here
//! too; the note reader (`note`) uses them, and checks every site
//! ([`Site::check`]); a site that fails
//! is [`SiteCheck::Refused`], and every engine refuses to attach it
//! unless it was forced ([`Site::force`], or a session's
//! [`force_sites`](crate::Session::force_sites)).

use std::fmt;

use object::elf::{PF_W, PF_X};

use usdt_runtime::site::{AARCH64_NOP, NOP, NOP5, RISCV64_C_NOP, RISCV64_NOP};

use crate::elf::arg::Machine;
#[cfg(doc)]
use crate::Site;
use crate::SiteLayout;

/// The bytes a site of `layout` starts with.
fn x86_64_bytes(layout: SiteLayout) -> &'static [u8] {
    layout.x86_64_bytes().unwrap_or(&[])
}

/// Classifies the bytes found at a site's Location.
///
/// ```
/// use usdt_trace::{layout_of, Machine, SiteLayout};
/// assert_eq!(layout_of(&[0x90, 0x0f, 0x1f, 0x44, 0, 0, 0xc3], Machine::X86_64), SiteLayout::NopNop5);
/// let both = [0x90, 0x0f, 0x1f, 0x44, 0, 0, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0];
/// assert_eq!(layout_of(&both, Machine::X86_64), SiteLayout::NopNop5Nop10);
/// assert_eq!(layout_of(&[0x90, 0x0f, 0x1f, 0x40, 0], Machine::X86_64), SiteLayout::Nop);
/// assert_eq!(layout_of(&[0x0f, 0x1f, 0x44, 0, 0], Machine::X86_64), SiteLayout::Nop5);
/// assert_eq!(layout_of(&[], Machine::X86_64), SiteLayout::Other);
/// ```
pub fn layout_of(bytes: &[u8], machine: Machine) -> SiteLayout {
    match machine {
        Machine::X86_64 if bytes.starts_with(x86_64_bytes(SiteLayout::NopNop5Nop10)) => {
            SiteLayout::NopNop5Nop10
        }
        Machine::X86_64 if bytes.starts_with(x86_64_bytes(SiteLayout::NopNop10)) => {
            SiteLayout::NopNop10
        }
        Machine::X86_64 if bytes.starts_with(x86_64_bytes(SiteLayout::NopNop5)) => {
            SiteLayout::NopNop5
        }
        Machine::X86_64 if bytes.starts_with(&NOP) => SiteLayout::Nop,
        Machine::X86_64 if bytes.starts_with(&NOP5) => SiteLayout::Nop5,
        Machine::Aarch64 if bytes.starts_with(&AARCH64_NOP) => SiteLayout::Nop,
        Machine::Riscv64
            if bytes.starts_with(&RISCV64_NOP) || bytes.starts_with(&RISCV64_C_NOP) =>
        {
            SiteLayout::Nop
        }
        _ => SiteLayout::Other,
    }
}

/// A loadable segment, as needed to turn addresses into file offsets and
/// mapped addresses back into link-time addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags` (`PF_X` = 1, `PF_W` = 2, `PF_R` = 4).
    pub flags: u32,
}

/// Why a site is not attached.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SiteRefusal {
    /// Location lies in no loaded segment with file bytes.
    LocationNotLoaded,
    /// Location lies in a segment that is not executable (data, read-only
    /// data).
    LocationNotExecutable,
    /// The bytes at Location are no nop form this project knows.
    NotANop {
        /// The bytes found (up to [`SITE_BYTES`](crate::SITE_BYTES)).
        bytes: Vec<u8>,
    },
    /// The semaphore's two bytes lie in no loaded segment with file bytes.
    SemaphoreNotLoaded {
        /// The semaphore's address.
        address: u64,
    },
    /// The semaphore lies in an executable segment: the kernel would add
    /// to the program's code.
    SemaphoreExecutable {
        /// The semaphore's address.
        address: u64,
    },
    /// The semaphore lies in a segment that is not writable.
    SemaphoreReadOnly {
        /// The semaphore's address.
        address: u64,
    },
}

impl fmt::Display for SiteRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SiteRefusal::LocationNotLoaded => {
                f.write_str("Location outside the file's loaded segments")
            }
            SiteRefusal::LocationNotExecutable => f.write_str("Location in non-executable segment"),
            SiteRefusal::NotANop { bytes } => {
                f.write_str("no known nop at Location (bytes")?;
                for b in bytes {
                    write!(f, " {b:02x}")?;
                }
                f.write_str(")")
            }
            SiteRefusal::SemaphoreNotLoaded { address } => write!(
                f,
                "semaphore {address:#x} outside the file's loaded segments"
            ),
            SiteRefusal::SemaphoreExecutable { address } => {
                write!(f, "semaphore {address:#x} in executable segment")
            }
            SiteRefusal::SemaphoreReadOnly { address } => {
                write!(f, "semaphore {address:#x} in non-writable segment")
            }
        }
    }
}

impl std::error::Error for SiteRefusal {}

/// What the check of a site found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SiteCheck {
    /// Where a `sys/sdt.h` site can be: attached.
    #[default]
    Fits,
    /// Not attached, for this reason.
    Refused(SiteRefusal),
    /// Refused, but forced: attached anyway.
    Forced(SiteRefusal),
}

impl SiteCheck {
    /// The check of a site at `location` (its file `bytes` there) with its
    /// `semaphore`, in a file of `machine` with these `PT_LOAD` segments.
    ///
    /// ```
    /// use usdt_trace::{Machine, Segment, SiteCheck, SiteRefusal};
    /// let text = Segment { vaddr: 0x1000, offset: 0x1000, filesz: 0x100, memsz: 0x100, flags: 5 };
    /// let data = Segment { vaddr: 0x3000, offset: 0x2000, filesz: 0x100, memsz: 0x200, flags: 6 };
    /// let segs = [text, data];
    /// let site = |at, bytes: &[u8], sema| SiteCheck::of(Machine::X86_64, &segs, at, bytes, sema);
    /// assert_eq!(site(0x1010, &[0x90], Some(0x3000)), SiteCheck::Fits);
    /// assert_eq!(
    ///     site(0x3010, &[0x90], None),
    ///     SiteCheck::Refused(SiteRefusal::LocationNotExecutable)
    /// );
    /// assert_eq!(
    ///     site(0x1010, &[0x90], Some(0x1020)),
    ///     SiteCheck::Refused(SiteRefusal::SemaphoreExecutable { address: 0x1020 })
    /// );
    /// ```
    pub fn of(
        machine: Machine,
        segments: &[Segment],
        location: u64,
        bytes: &[u8],
        semaphore: Option<u64>,
    ) -> SiteCheck {
        match check(machine, segments, location, bytes, semaphore) {
            Ok(()) => SiteCheck::Fits,
            Err(why) => SiteCheck::Refused(why),
        }
    }

    /// The reason, refused or forced.
    pub fn reason(&self) -> Option<&SiteRefusal> {
        match self {
            SiteCheck::Fits => None,
            SiteCheck::Refused(r) | SiteCheck::Forced(r) => Some(r),
        }
    }
}

fn check(
    machine: Machine,
    segments: &[Segment],
    location: u64,
    bytes: &[u8],
    semaphore: Option<u64>,
) -> Result<(), SiteRefusal> {
    let text = segment_of(segments, location, 1).ok_or(SiteRefusal::LocationNotLoaded)?;
    if text.flags & PF_X == 0 {
        return Err(SiteRefusal::LocationNotExecutable);
    }
    if layout_of(bytes, machine) == SiteLayout::Other {
        return Err(SiteRefusal::NotANop {
            bytes: bytes.to_vec(),
        });
    }
    let Some(address) = semaphore else {
        return Ok(());
    };
    let data =
        segment_of(segments, address, 2).ok_or(SiteRefusal::SemaphoreNotLoaded { address })?;
    if data.flags & PF_X != 0 {
        return Err(SiteRefusal::SemaphoreExecutable { address });
    }
    if data.flags & PF_W == 0 {
        return Err(SiteRefusal::SemaphoreReadOnly { address });
    }
    Ok(())
}

/// The segment whose file bytes hold `len` bytes at `addr`.
fn segment_of(segments: &[Segment], addr: u64, len: u64) -> Option<&Segment> {
    segments.iter().find(|s| {
        addr.checked_sub(s.vaddr)
            .and_then(|d| d.checked_add(len))
            .is_some_and(|end| end <= s.filesz)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_runtime::site::{AARCH64_NOP, NOP10, NOP5, RISCV64_C_NOP, RISCV64_NOP};

    const TEXT: Segment = Segment {
        vaddr: 0x1000,
        offset: 0x1000,
        filesz: 0x1000,
        memsz: 0x1000,
        flags: PF_X | 4,
    };
    const RODATA: Segment = Segment {
        vaddr: 0x2000,
        offset: 0x2000,
        filesz: 0x1000,
        memsz: 0x1000,
        flags: 4,
    };
    const DATA: Segment = Segment {
        vaddr: 0x4000,
        offset: 0x3000,
        filesz: 0x100,
        memsz: 0x1000,
        flags: PF_W | 4,
    };
    const RWX: Segment = Segment {
        vaddr: 0x8000,
        offset: 0x4000,
        filesz: 0x100,
        memsz: 0x100,
        flags: PF_X | PF_W | 4,
    };
    const SEGMENTS: [Segment; 4] = [TEXT, RODATA, DATA, RWX];

    fn x86(location: u64, bytes: &[u8], semaphore: Option<u64>) -> Result<(), SiteRefusal> {
        check(Machine::X86_64, &SEGMENTS, location, bytes, semaphore)
    }

    #[test]
    fn every_x86_64_layout_of_the_project_fits() {
        let nop5 = [&[0x90][..], &NOP5].concat();
        let nop10 = [&[0x90][..], &NOP10].concat();
        let both = [&[0x90][..], &NOP5, &NOP10].concat();
        for bytes in [&[0x90][..], &nop5, &nop10, &both, &NOP5] {
            assert_eq!(x86(0x1100, bytes, Some(0x4000)), Ok(()), "{bytes:x?}");
        }
    }

    #[test]
    fn an_aarch64_nop_fits_and_an_x86_nop_there_does_not() {
        let a64 = |bytes: &[u8]| check(Machine::Aarch64, &SEGMENTS, 0x1100, bytes, None);
        assert_eq!(a64(&AARCH64_NOP), Ok(()));
        assert!(matches!(a64(&[0x90]), Err(SiteRefusal::NotANop { .. })));
    }

    #[test]
    fn both_riscv64_nops_fit_and_nothing_else_does() {
        let rv = |bytes: &[u8]| check(Machine::Riscv64, &SEGMENTS, 0x1100, bytes, None);
        // The 4-byte `nop`, and `c.nop` followed by the next instruction.
        assert_eq!(rv(&RISCV64_NOP), Ok(()));
        assert_eq!(rv(&[0x01, 0x00, 0x97, 0x2e]), Ok(()));
        assert_eq!(layout_of(&RISCV64_C_NOP, Machine::Riscv64), SiteLayout::Nop);
        assert_eq!(layout_of(&RISCV64_NOP, Machine::Aarch64), SiteLayout::Other);
        assert_eq!(layout_of(&AARCH64_NOP, Machine::Riscv64), SiteLayout::Other);
        for other in [&[0x90][..], &[0x13, 0x00, 0x00, 0x01], &[0x01], &[]] {
            assert!(
                matches!(rv(other), Err(SiteRefusal::NotANop { .. })),
                "{other:x?}"
            );
        }
    }

    #[test]
    fn location_must_be_a_nop_in_code() {
        assert_eq!(
            x86(0x2010, &[0x90], None),
            Err(SiteRefusal::LocationNotExecutable)
        );
        assert_eq!(
            x86(0x4010, &[0x90], None),
            Err(SiteRefusal::LocationNotExecutable)
        );
        // .bss: loaded but no file bytes.
        assert_eq!(x86(0x4800, &[], None), Err(SiteRefusal::LocationNotLoaded));
        assert_eq!(x86(0x9000, &[], None), Err(SiteRefusal::LocationNotLoaded));
        assert_eq!(
            x86(0x1100, b"fired", None),
            Err(SiteRefusal::NotANop {
                bytes: b"fired".to_vec()
            })
        );
        // Code, but not a nop: a `ret`.
        assert!(matches!(
            x86(0x1100, &[0xc3], None),
            Err(SiteRefusal::NotANop { .. })
        ));
    }

    #[test]
    fn a_semaphore_must_be_in_writable_data() {
        let at = |s| x86(0x1100, &[0x90], Some(s));
        assert_eq!(at(0x40fe), Ok(()));
        assert_eq!(
            at(0x1200),
            Err(SiteRefusal::SemaphoreExecutable { address: 0x1200 })
        );
        assert_eq!(
            at(0x8010),
            Err(SiteRefusal::SemaphoreExecutable { address: 0x8010 })
        );
        assert_eq!(
            at(0x2010),
            Err(SiteRefusal::SemaphoreReadOnly { address: 0x2010 })
        );
        // Its second byte past the file bytes, in .bss, or nowhere.
        for s in [0x40ff, 0x4800, 0x9000] {
            assert_eq!(at(s), Err(SiteRefusal::SemaphoreNotLoaded { address: s }));
        }
    }

    #[test]
    fn reasons_name_the_segment() {
        let refused = SiteCheck::of(Machine::X86_64, &SEGMENTS, 0x2010, &[0x90], None);
        assert_eq!(
            refused.reason().map(ToString::to_string).as_deref(),
            Some("Location in non-executable segment")
        );
        assert_eq!(
            SiteRefusal::NotANop {
                bytes: vec![0x66, 0x69]
            }
            .to_string(),
            "no known nop at Location (bytes 66 69)"
        );
    }
}
