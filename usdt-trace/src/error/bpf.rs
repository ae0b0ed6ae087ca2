//! What goes wrong with BPF: the error of the BPF engine and of the
//! uprobe_multi support probe, kept whole as the source of the crate's
//! [`Error`](crate::Error) (`Error::Bpf`, `Error::BothEngines`).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::sys::SyscallError;

/// What went wrong setting up or reading a BPF counter.
#[derive(Debug)]
#[non_exhaustive]
pub enum BpfError {
    /// The kernel refused for lack of privilege (`EPERM`).
    NotPermitted,
    /// The kernel has no BPF system call or no uprobe_multi links.
    Unsupported,
    /// The verifier rejected the program; its log says why.
    Verifier {
        /// Which program (its object name, such as `usdt_sample`).
        program: String,
        /// The verifier's log.
        log: String,
    },
    /// The process to filter on does not exist.
    NoProcess(u32),
    /// The file to attach to could not be opened by the kernel.
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: SyscallError,
    },
    /// More sites of one file than one uprobe_multi link takes.
    TooManySites {
        /// The file.
        path: PathBuf,
        /// How many sites were asked for.
        sites: usize,
        /// The most one link takes
        /// ([`MAX_SITES_PER_LINK`](crate::bpf::MAX_SITES_PER_LINK)).
        max: usize,
    },
    /// A slot at or past the counter's number of slots.
    SlotOutOfRange {
        /// The slot asked for.
        slot: u32,
        /// The counter's number of slots.
        slots: u32,
    },
    /// A path the kernel cannot take: it contains a NUL byte.
    NulInPath {
        /// The path.
        path: PathBuf,
    },
    /// The possible CPUs could not be read
    /// (`/sys/devices/system/cpu/possible`).
    Cpus(io::Error),
    /// A ring buffer larger than a map takes.
    RingTooLarge {
        /// The size asked for, in bytes.
        bytes: u64,
    },
    /// Another failed system call.
    Syscall {
        /// What was being done.
        what: String,
        /// The call and the kernel's answer.
        source: SyscallError,
    },
}

impl BpfError {
    /// The error for a failed `bpf(2)` call while doing `what`.
    pub(crate) fn from_os(what: &str, e: SyscallError) -> BpfError {
        match e.raw_os_error() {
            Some(libc::EPERM) => BpfError::NotPermitted,
            Some(libc::ENOSYS) => BpfError::Unsupported,
            _ => BpfError::Syscall {
                what: what.into(),
                source: e,
            },
        }
    }
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfError::NotPermitted => f.write_str(
                "BPF is not permitted: run as root, or with CAP_BPF and CAP_PERFMON",
            ),
            BpfError::Unsupported => f.write_str(
                "this kernel has no BPF uprobe_multi links (they need Linux 6.6 or later, built with BPF)",
            ),
            BpfError::Verifier { program, log } => {
                write!(f, "the kernel's verifier rejected the program {program}:\n{log}")
            }
            BpfError::NoProcess(pid) => write!(f, "process {pid} does not exist or has exited"),
            BpfError::File { path, source } if source.kind() == io::ErrorKind::NotFound => {
                write!(f, "{} does not exist", path.display())
            }
            BpfError::File { path, source } => {
                write!(f, "cannot attach to {}: {}", path.display(), source.io_error)
            }
            BpfError::TooManySites { path, sites, max } => write!(
                f,
                "{sites} sites of {} are more than one uprobe_multi link takes ({max})",
                path.display()
            ),
            BpfError::SlotOutOfRange { slot, slots } => {
                write!(f, "slot {slot} is past the counter's {slots} slots")
            }
            BpfError::NulInPath { path } => {
                write!(f, "the path {} contains a NUL byte", path.display())
            }
            BpfError::Cpus(e) => write!(f, "reading /sys/devices/system/cpu/possible: {e}"),
            BpfError::RingTooLarge { bytes } => {
                write!(f, "a ring buffer of {bytes} bytes is larger than a BPF map takes")
            }
            BpfError::Syscall { what, source } => write!(f, "{what}: {}", source.io_error),
        }
    }
}

impl std::error::Error for BpfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BpfError::File { source, .. } | BpfError::Syscall { source, .. } => Some(source),
            BpfError::Cpus(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BpfError> for crate::Error {
    /// Conditions every engine meets the same way (no such process, a NUL
    /// in a path) become the crate's; the rest stays a BPF error, whole.
    fn from(e: BpfError) -> crate::Error {
        match e {
            BpfError::NoProcess(pid) => crate::Error::NoProcess(pid),
            BpfError::NulInPath { path } => crate::Error::NulInPath { path },
            e => crate::Error::Bpf(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::MAX_SITES_PER_LINK;

    #[test]
    fn messages_name_the_values() {
        let e = BpfError::TooManySites {
            path: "/bin/app".into(),
            sites: 2_000_000,
            max: MAX_SITES_PER_LINK,
        };
        assert_eq!(
            e.to_string(),
            "2000000 sites of /bin/app are more than one uprobe_multi link takes (1048576)"
        );
        let e = BpfError::SlotOutOfRange { slot: 9, slots: 4 };
        assert_eq!(e.to_string(), "slot 9 is past the counter's 4 slots");
        let e = BpfError::NulInPath {
            path: "/a\0b".into(),
        };
        assert_eq!(e.to_string(), "the path /a\0b contains a NUL byte");
    }

    #[test]
    fn conversions_keep_the_structure() {
        let path = PathBuf::from("/a\0b");
        let e = crate::Error::from(BpfError::NulInPath { path: path.clone() });
        assert!(matches!(e, crate::Error::NulInPath { path: p } if p == path));
        let e = crate::Error::from(BpfError::SlotOutOfRange { slot: 9, slots: 4 });
        assert_eq!(e.to_string(), "slot 9 is past the counter's 4 slots");
        let e = crate::Error::from(BpfError::Unsupported);
        assert!(matches!(e, crate::Error::Bpf(BpfError::Unsupported)));
        assert!(matches!(
            crate::Error::from(BpfError::NoProcess(7)),
            crate::Error::NoProcess(7)
        ));
    }
}
