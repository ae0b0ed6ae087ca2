//! Why a probe site is refused: what the one check of where a site may be
//! attached (`elf/sites.rs`) found, kept in the site and, when an attach
//! is refused for it, as the source of the attach error.

use std::fmt;

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
