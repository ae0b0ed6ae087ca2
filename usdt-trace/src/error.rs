//! The error of this crate: every failure is a value with a plain
//! sentence, never a panic. Each layer keeps its own detail: a failed
//! system call is a [`SyscallError`] (the call and the kernel's answer), a
//! BPF failure a [`BpfError`] (unsupported, the verifier's log), kept whole
//! as the source.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::elf::sites::SiteRefusal;
use crate::engine::bpf::BpfError;
use crate::sys::SyscallError;
use crate::SiteLayout;

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
    /// another machine than x86-64, aarch64 and riscv64).
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
    /// Reading a process's mappings or memory needs root or the right to
    /// ptrace it.
    ProcessNotPermitted {
        /// The process.
        pid: u32,
    },
    /// Mapping a perf ring buffer was refused (the locked-memory limit,
    /// `perf_event_mlock_kb`).
    RingNotPermitted {
        /// The ring's size in KiB.
        kib: usize,
    },
    /// Attaching a probe site failed: which file, probe and Location, and
    /// why.
    Attach(Box<AttachError>),
    /// A system call failed.
    Syscall {
        /// What was being done.
        what: String,
        /// The call and the kernel's answer.
        source: SyscallError,
    },
    /// Setting up or reading a BPF engine failed (unsupported, the
    /// verifier's log, ...).
    Bpf(BpfError),
    /// [`EngineChoice::Auto`](crate::EngineChoice::Auto) tried BPF, then
    /// perf, and both failed.
    BothEngines {
        /// Why BPF failed.
        bpf: BpfError,
        /// Why perf failed.
        perf: Box<Error>,
    },
    /// A path the kernel cannot take: it contains a NUL byte.
    NulInPath {
        /// The path.
        path: PathBuf,
    },
    /// A command (program or argument) that contains a NUL byte.
    NulInCommand,
    /// A program name without `/` that no directory of `PATH` holds.
    ProgramNotFound {
        /// The name.
        program: PathBuf,
    },
    /// [`PausedCommand::start`](crate::PausedCommand::start) called twice.
    AlreadyStarted,
    /// [`PausedCommand::wait`](crate::PausedCommand::wait) called after the
    /// command was reaped.
    AlreadyWaited,
    /// No probe of a program matches the globs asked for.
    NoMatch {
        /// The program.
        program: PathBuf,
        /// The globs, space-separated.
        globs: String,
    },
    /// The probes of a file could not be read.
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<Error>,
    },
    /// A latency asked between a probe and itself.
    SameProbe {
        /// `provider:name`.
        probe: String,
    },
    /// A site given to a latency whose probe is neither its start nor its
    /// end.
    NotStartOrEnd {
        /// The site's `provider:name`.
        probe: String,
        /// The latency's start probe.
        start: String,
        /// The latency's end probe.
        end: String,
    },
    /// An argument index past a probe's arguments.
    NoSuchArg {
        /// `provider:name`.
        probe: String,
        /// The index asked for.
        arg: usize,
        /// How many arguments the probe has.
        args: usize,
    },
    /// An engine other than `auto`, `bpf` and `perf`.
    BadEngine {
        /// What was given.
        value: String,
    },
    /// An attach point other than `auto`, `nop` and `next`.
    BadAttachPoint {
        /// What was given.
        value: String,
    },
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
            Error::ProcessNotPermitted { pid } => write!(
                f,
                "reading process {pid} needs root or the right to ptrace it"
            ),
            Error::RingNotPermitted { kib } => write!(
                f,
                "mapping a {kib} KiB perf ring buffer is not permitted (raise perf_event_mlock_kb or run as root)"
            ),
            Error::Attach(e) => e.fmt(f),
            Error::Syscall { what, source } => write!(f, "{what}: {}", source.io_error),
            Error::Bpf(e) => e.fmt(f),
            Error::BothEngines { bpf, perf } => {
                write!(f, "{perf} (BPF was tried first: {bpf})")
            }
            Error::NulInPath { path } => {
                write!(f, "the path {} contains a NUL byte", path.display())
            }
            Error::NulInCommand => f.write_str("the command contains a NUL byte"),
            Error::ProgramNotFound { program } => {
                write!(f, "command {} was not found in PATH", program.display())
            }
            Error::AlreadyStarted => f.write_str("the command was started already"),
            Error::AlreadyWaited => f.write_str("the command was waited for already"),
            Error::NoMatch { program, globs } => {
                write!(f, "no probe of {} matches {globs}", program.display())
            }
            Error::File { path, source } => write!(f, "{}: {source}", path.display()),
            Error::SameProbe { probe } => {
                write!(f, "a latency needs two different probes, not {probe} twice")
            }
            Error::NotStartOrEnd { probe, start, end } => {
                write!(f, "{probe} is neither the start ({start}) nor the end ({end})")
            }
            Error::NoSuchArg { probe, arg, args } => write!(
                f,
                "{probe} has {args} arguments (arg0 to arg{}), not arg{arg}",
                args.saturating_sub(1)
            ),
            Error::BadEngine { value } => {
                write!(f, "the engine is auto, bpf or perf, not \"{value}\"")
            }
            Error::BadAttachPoint { value } => {
                write!(f, "the attach point is auto, nop or next, not \"{value}\"")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Syscall { source, .. } => Some(source),
            Error::File { source, .. } => Some(source.as_ref()),
            Error::Bpf(e) | Error::BothEngines { bpf: e, .. } => Some(e),
            Error::Attach(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl Error {
    /// The process that does not exist (any more), when that is the
    /// error: reading it, or attaching to it.
    pub fn no_process(&self) -> Option<u32> {
        match self {
            Error::NoProcess(pid) => Some(*pid),
            Error::Attach(e) => match e.cause {
                AttachCause::NoProcess(pid) => Some(pid),
                _ => None,
            },
            _ => None,
        }
    }

    /// What is wrong inside the file, for a message that names the file
    /// already: the source of [`Error::File`], else the error itself.
    pub fn without_path(&self) -> &Error {
        match self {
            Error::File { source, .. } => source.without_path(),
            e => e,
        }
    }

    /// Whether the file read is not an ELF file (alone, or named by
    /// [`Error::File`]).
    pub fn is_not_elf(&self) -> bool {
        match self {
            Error::NotElf => true,
            Error::File { source, .. } => source.is_not_elf(),
            _ => false,
        }
    }
}

/// Attaching one probe site failed.
#[derive(Debug)]
pub struct AttachError {
    /// The file (empty from [`attach_delta`](crate::attach_delta), which is
    /// given none).
    pub path: PathBuf,
    /// `provider:name`.
    pub probe: String,
    /// The site's Location.
    pub location: u64,
    /// Why.
    pub cause: AttachCause,
}

impl AttachError {
    /// The error for `site` of the file at `path`.
    pub(crate) fn of(path: &std::path::Path, site: &crate::Site, cause: AttachCause) -> Error {
        Error::Attach(Box::new(AttachError {
            path: path.into(),
            probe: site.probe(),
            location: site.location,
            cause,
        }))
    }
}

/// Why a site could not be attached.
#[derive(Debug)]
#[non_exhaustive]
pub enum AttachCause {
    /// The site's check refused it: Location or its semaphore lies where no
    /// `sys/sdt.h` site's can ([`Site::force`](crate::Site::force) attaches
    /// it anyway).
    SiteRefused(SiteRefusal),
    /// Location lies outside every loaded segment of the file: it has no
    /// file offset to attach to.
    NotLoaded,
    /// [`AttachPoint::Next`](crate::AttachPoint::Next) on a site with no
    /// long nop after its nop.
    NoLongNop {
        /// The site's layout.
        layout: SiteLayout,
    },
    /// [`AttachPoint::Next`](crate::AttachPoint::Next) on a `nop; nop10`
    /// site, which kernels before the 7.3 series refuse.
    Nop10Refused,
    /// The kernel refused for lack of privilege (EACCES, EPERM).
    NotPermitted,
    /// The process does not exist (any more).
    NoProcess(u32),
    /// The file is gone (ENOENT).
    NoFile,
    /// This kernel has no uprobe PMU (`/sys/bus/event_source/devices/uprobe`):
    /// perf_event_open cannot attach uprobes.
    NoUprobePmu,
    /// The semaphore's file offset is too large for the kernel's
    /// `ref_ctr_offset` field (EOVERFLOW).
    SemaphoreOutOfRange,
    /// The kernel refused a uprobe on the instruction there (ENOTSUPP:
    /// such as a nop10 on a kernel that does not optimize nop10).
    InstructionRefused,
    /// Another failure of the system call that attaches.
    Syscall(SyscallError),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (probe, at, path) = (&self.probe, self.location, self.path.display());
        let site = format!("{probe} at {at:#x} in {path}");
        match &self.cause {
            AttachCause::SiteRefused(why) => write!(
                f,
                "{path}: probe {probe} at {at:#x} refused: {why}"
            ),
            AttachCause::NotLoaded => {
                write!(f, "probe {probe} at {at:#x} is not in a loaded part of {path}")
            }
            AttachCause::NoLongNop { layout } => write!(
                f,
                "probe {probe} at {at:#x} in {path} (layout {layout}) has no long nop after a nop, so it cannot be attached at Location + 1"
            ),
            AttachCause::Nop10Refused => write!(
                f,
                "probe {probe} at {at:#x} in {path} is a nop;nop10 site, and this kernel refuses uprobes on nop10 (only the 7.3 series accepts them)"
            ),
            AttachCause::NotPermitted => write!(
                f,
                "attaching uprobes is not permitted: run as root, or with CAP_PERFMON and CAP_SYS_ADMIN (attaching {site})"
            ),
            AttachCause::NoProcess(pid) => write!(
                f,
                "process {pid} does not exist or has exited (attaching {site})"
            ),
            AttachCause::NoFile => write!(f, "{path} does not exist (attaching {probe} at {at:#x})"),
            AttachCause::NoUprobePmu => write!(
                f,
                "this kernel has no uprobe PMU for perf_event_open (attaching {site})"
            ),
            AttachCause::SemaphoreOutOfRange => write!(
                f,
                "the semaphore of {site} is at a file offset too large for the kernel's ref_ctr_offset"
            ),
            AttachCause::InstructionRefused => write!(
                f,
                "the kernel refuses a uprobe on the instruction of {site}"
            ),
            AttachCause::Syscall(e) => write!(f, "attaching a uprobe to {site}: {}", e.io_error),
        }
    }
}

impl std::error::Error for AttachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            AttachCause::SiteRefused(why) => Some(why),
            AttachCause::Syscall(e) => Some(e),
            _ => None,
        }
    }
}

impl From<object::read::Error> for Error {
    fn from(e: object::read::Error) -> Self {
        Error::Elf(e.to_string())
    }
}
