//! The one error type of this crate: every failure is a value with a plain
//! sentence, never a panic.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What went wrong reading probes, attaching to them or counting them.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The bytes are not an ELF file.
    NotElf,
    /// An ELF file of a kind this crate does not read (32-bit, big-endian, or
    /// another machine than x86-64 and aarch64).
    Unsupported(String),
    /// The ELF structure (headers, sections, segments) is malformed.
    Elf(String),
    /// A `.note.stapsdt` note is malformed.
    BadNote {
        /// Its position among the section's notes, from 0.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A note's argument string could not be parsed.
    BadArgs {
        /// The argument string (shortened when very long).
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A process does not exist (any more).
    NoProcess(u32),
    /// The kernel refused an operation for lack of privilege.
    NotPermitted(String),
    /// A system call failed.
    Os {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A request that cannot be satisfied (such as attaching after the nop of
    /// a site that has no long nop).
    Invalid(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } if source.kind() == io::ErrorKind::NotFound => {
                write!(f, "{} does not exist", path.display())
            }
            Error::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::NotElf => f.write_str("the file is not an ELF file"),
            Error::Unsupported(what) => write!(f, "{what} are not supported"),
            Error::Elf(what) => write!(f, "the ELF file is malformed ({what})"),
            Error::BadNote { index, reason } => {
                write!(f, "stapsdt note {index} is malformed: {reason}")
            }
            Error::BadArgs { text, reason } => {
                write!(f, "cannot parse probe arguments \"{text}\": {reason}")
            }
            Error::NoProcess(pid) => write!(f, "process {pid} does not exist or has exited"),
            Error::NotPermitted(what) => f.write_str(what),
            Error::Os { what, source } => write!(f, "{what}: {source}"),
            Error::Invalid(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<object::read::Error> for Error {
    fn from(e: object::read::Error) -> Self {
        Error::Elf(e.to_string())
    }
}
