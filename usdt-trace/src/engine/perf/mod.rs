//! The perf engine: uprobes opened with `perf_event_open` on the uprobe
//! PMU, one event per site (per CPU for every process), counted
//! ([`PerfCounter`](counter::PerfCounter)) or sampled into perf rings
//! ([`ring`]), with tracefs uprobe events whose fetch arguments read
//! memory operands at the hit ([`tracefs`]).

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::elf::note::Site;
use crate::engine::{Target, Uprobe};
use crate::error::{AttachCause, AttachError};
use crate::sys::{self, SyscallError};
use crate::{Error, KernelFeatures};

pub(crate) mod counter;
pub(crate) mod ring;
pub(crate) mod sampling;
pub(crate) mod tracefs;

/// Opens one uprobe perf event for `target` (on `cpu`: -1 for any), in no
/// group ([`sys::perf::open_uprobe`]).
pub(crate) fn open_uprobe(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    target: Target,
    cpu: i32,
    customize: impl FnOnce(&mut sys::perf::Attr),
) -> Result<OwnedFd, SyscallError> {
    sys::perf::open_uprobe(features, uprobe, target.pid(), cpu, -1, customize)
}

/// `perf_event_open(attr, pid of target, cpu, no group, CLOEXEC)`.
///
/// # Safety
/// Every pointer in `attr` (such as a uprobe's path in `config1`) must be
/// valid until the call returns.
pub(crate) unsafe fn perf_event_open(
    attr: &sys::perf::Attr,
    target: Target,
    cpu: i32,
) -> Result<OwnedFd, SyscallError> {
    // SAFETY: the caller's contract.
    unsafe { sys::perf::open(attr, target.pid(), cpu, -1) }
}

/// The message for a failed `perf_event_open`.
pub(crate) fn attach_error(e: SyscallError, path: &Path, site: &Site, target: Target) -> Error {
    let cause = match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => AttachCause::NotPermitted,
        Some(libc::ESRCH) => match target {
            Target::Pid(pid) => AttachCause::NoProcess(pid),
            Target::AllProcesses => AttachCause::Syscall(e),
        },
        Some(libc::ENOENT) => AttachCause::NoFile,
        Some(libc::ENODEV) => AttachCause::NoUprobePmu,
        Some(libc::EOVERFLOW) => AttachCause::SemaphoreOutOfRange,
        // ENOTSUPP (the kernel's own 524): an instruction uprobes refuse, such
        // as a nop10 on a kernel that does not optimize nop10.
        Some(524) => AttachCause::InstructionRefused,
        _ => AttachCause::Syscall(e),
    };
    AttachError::of(path, site.probe(), site.location, cause)
}
