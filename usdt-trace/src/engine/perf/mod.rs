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

/// Opens one uprobe perf event; `customize` adjusts the attributes (sampling,
/// inheritance) before the call.
pub(crate) fn open_uprobe(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    target: Target,
    cpu: i32,
    customize: impl FnOnce(&mut sys::perf::Attr),
) -> Result<OwnedFd, SyscallError> {
    open_uprobe_in(features, uprobe, target, cpu, -1, customize)
}

/// [`open_uprobe`] in the perf group led by `group` (-1: none).
pub(crate) fn open_uprobe_in(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    target: Target,
    cpu: i32,
    group: i32,
    customize: impl FnOnce(&mut sys::perf::Attr),
) -> Result<OwnedFd, SyscallError> {
    let pmu = features
        .uprobe_pmu_type
        .ok_or_else(|| SyscallError::from_errno("perf_event_open", libc::ENODEV))?;
    let shift = features.ref_ctr_offset_shift.unwrap_or(32);
    let ref_ctr = match uprobe.ref_ctr_offset {
        Some(off) if features.kernel_semaphores => {
            // The field holds the bits from `shift` up to 63.
            if shift >= 64 || off.checked_shl(shift.into()).map(|v| v >> shift) != Some(off) {
                return Err(SyscallError::from_errno("perf_event_open", libc::EOVERFLOW));
            }
            off << shift
        }
        _ => 0,
    };
    let mut attr = sys::perf::attr(pmu);
    attr.config = ref_ctr;
    // The uprobe PMU's config1 is the path, config2 the file offset.
    attr.config1 = uprobe.path.as_ptr() as u64;
    attr.config2 = uprobe.offset;
    customize(&mut attr);
    // SAFETY: the path `config1` points to lives until the call returns.
    unsafe { perf_event_open_in(&attr, target, cpu, group) }
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
    unsafe { perf_event_open_in(attr, target, cpu, -1) }
}

/// [`perf_event_open`] in the group led by the event `group` (-1: none).
///
/// # Safety
/// As for [`perf_event_open`].
pub(crate) unsafe fn perf_event_open_in(
    attr: &sys::perf::Attr,
    target: Target,
    cpu: i32,
    group: i32,
) -> Result<OwnedFd, SyscallError> {
    let pid = match target {
        Target::Pid(pid) => pid as libc::pid_t,
        Target::AllProcesses => -1,
    };
    // SAFETY: the caller's contract.
    unsafe { sys::perf::open(attr, pid, cpu, group) }
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
    AttachError::of(path, site, cause)
}
