//! The perf ABI, from perf-event-open-sys's bindings of the kernel's
//! `linux/perf_event.h` (never hand-typed offsets, flag bits or ioctl
//! numbers): event attributes, opening an event (a uprobe event typed:
//! [`open_uprobe`]), the ioctls this crate uses, and reading an event's
//! count.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use perf_event_open_sys as sys;
use sys::bindings;

use usdt_runtime::KernelFeatures;

use super::{syscall, Syscall, SyscallError};

/// `struct perf_event_attr`; union members (`config1`, `sample_period`,
/// `wakeup_events`, ...) are reached as fields through the bindings' deref.
pub(crate) use bindings::perf_event_attr as Attr;

/// `PERF_TYPE_TRACEPOINT`.
pub(crate) const TYPE_TRACEPOINT: u32 = bindings::PERF_TYPE_TRACEPOINT;

/// `sample_type` bits.
pub(crate) const SAMPLE_TID: u64 = bindings::PERF_SAMPLE_TID as u64;
pub(crate) const SAMPLE_TIME: u64 = bindings::PERF_SAMPLE_TIME as u64;
pub(crate) const SAMPLE_RAW: u64 = bindings::PERF_SAMPLE_RAW as u64;
pub(crate) const SAMPLE_REGS_USER: u64 = bindings::PERF_SAMPLE_REGS_USER as u64;
pub(crate) const SAMPLE_STACK_USER: u64 = bindings::PERF_SAMPLE_STACK_USER as u64;
pub(crate) const SAMPLE_IDENTIFIER: u64 = bindings::PERF_SAMPLE_IDENTIFIER as u64;

/// Attributes of an event of PMU `type_`, everything else zero.
pub(crate) fn attr(type_: u32) -> Attr {
    Attr {
        type_,
        size: std::mem::size_of::<Attr>() as u32,
        ..Attr::default()
    }
}

/// `perf_event_open(attr, pid, cpu, group, PERF_FLAG_FD_CLOEXEC)`; `pid`
/// -1 is every process (with a CPU), `group` -1 none.
///
/// # Safety
/// Every pointer in `attr` (such as a uprobe's path in `config1`) must be
/// valid until the call returns.
pub(crate) unsafe fn open(
    attr: &Attr,
    pid: i32,
    cpu: i32,
    group: i32,
) -> Result<OwnedFd, SyscallError> {
    // The kernel writes `size` back on E2BIG only; it reads the rest.
    let mut attr = *attr;
    // SAFETY: a valid perf_event_attr of the size it states; the caller
    // keeps what it points to alive.
    let fd = unsafe {
        syscall(Syscall::PerfEventOpen {
            attr: &mut attr,
            pid,
            cpu,
            group,
            flags: bindings::PERF_FLAG_FD_CLOEXEC.into(),
        })?
    };
    // SAFETY: the kernel just returned this new descriptor; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One uprobe: the file as the kernel takes it, the file offset of the
/// instruction, and the semaphore's file offset.
#[derive(Debug)]
pub(crate) struct Uprobe<'a> {
    pub(crate) path: &'a CStr,
    pub(crate) offset: u64,
    pub(crate) ref_ctr_offset: Option<u64>,
}

/// Opens one uprobe perf event on the uprobe PMU of `features`, for `pid`
/// (-1: every process, on `cpu`), in the group led by `group` (-1: none),
/// with the semaphore's offset where the kernel maintains semaphores;
/// `customize` adjusts the attributes (sampling, inheritance) before the
/// call.
pub(crate) fn open_uprobe(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    pid: i32,
    cpu: i32,
    group: i32,
    customize: impl FnOnce(&mut Attr),
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
    let mut attr = attr(pmu);
    attr.config = ref_ctr;
    // The uprobe PMU's config1 is the path, config2 the file offset.
    attr.config1 = uprobe.path.as_ptr() as u64;
    attr.config2 = uprobe.offset;
    customize(&mut attr);
    // SAFETY: the path `config1` points to lives until the call returns.
    unsafe { open(&attr, pid, cpu, group) }
}

/// The perf event ioctls this crate uses.
#[derive(Debug)]
pub(crate) enum Ioctl<'a> {
    /// `PERF_EVENT_IOC_ENABLE`, of the event alone or (`group`) of the
    /// group it leads.
    Enable { group: bool },
    /// `PERF_EVENT_IOC_SET_OUTPUT`: records go to this event's ring.
    SetOutput(BorrowedFd<'a>),
    /// `PERF_EVENT_IOC_ID`: the id samples of the event carry.
    Id(&'a mut u64),
}

impl Ioctl<'_> {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Ioctl::Enable { .. } => "ioctl(PERF_EVENT_IOC_ENABLE)",
            Ioctl::SetOutput(_) => "ioctl(PERF_EVENT_IOC_SET_OUTPUT)",
            Ioctl::Id(_) => "ioctl(PERF_EVENT_IOC_ID)",
        }
    }

    /// The raw ioctl on `fd`.
    ///
    /// # Safety
    /// `fd` must be an open perf event.
    pub(super) unsafe fn call(self, fd: i32) -> i32 {
        // SAFETY: an open perf event (the caller's contract); the argument
        // is a flag, a descriptor or a valid pointer to one u64.
        unsafe {
            match self {
                Ioctl::Enable { group } => {
                    let flag = if group {
                        bindings::PERF_IOC_FLAG_GROUP
                    } else {
                        0
                    };
                    sys::ioctls::ENABLE(fd, flag)
                }
                Ioctl::SetOutput(owner) => sys::ioctls::SET_OUTPUT(fd, owner.as_raw_fd()),
                Ioctl::Id(id) => sys::ioctls::ID(fd, id),
            }
        }
    }
}

fn ioctl(fd: &OwnedFd, request: Ioctl<'_>) -> Result<(), SyscallError> {
    // SAFETY: `fd` is an open perf event (every caller's descriptor comes
    // from `open`); the request's pointers are valid references.
    unsafe {
        syscall(Syscall::PerfIoctl {
            fd: fd.as_fd(),
            request,
        })
    }
    .map(drop)
}

/// `PERF_EVENT_IOC_ENABLE`, of the event alone or (`group`) of the group it
/// leads.
pub(crate) fn enable(fd: &OwnedFd, group: bool) -> Result<(), SyscallError> {
    ioctl(fd, Ioctl::Enable { group })
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: `fd`'s records go to `owner`'s ring.
pub(crate) fn set_output(fd: &OwnedFd, owner: &OwnedFd) -> Result<(), SyscallError> {
    ioctl(fd, Ioctl::SetOutput(owner.as_fd()))
}

/// `PERF_EVENT_IOC_ID`: the id samples of the event carry.
pub(crate) fn id(fd: &OwnedFd) -> Result<u64, SyscallError> {
    let mut id = 0u64;
    ioctl(fd, Ioctl::Id(&mut id))?;
    Ok(id)
}

/// The event's count: every hit, whether its sample was written or lost.
pub(crate) fn read_count(fd: &OwnedFd) -> Result<u64, SyscallError> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes; `fd` is an open perf event.
    let n = unsafe {
        syscall(Syscall::Read {
            fd: fd.as_fd(),
            buf: &mut buf,
        })?
    };
    if n != 8 {
        return Err(SyscallError {
            call: "read",
            io_error: io::ErrorKind::UnexpectedEof.into(),
        });
    }
    Ok(u64::from_ne_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bindings_say_what_the_kernel_says() {
        // Values fixed by the kernel's uapi, checked once here.
        assert_eq!(SAMPLE_IDENTIFIER, 1 << 16);
        assert_eq!(SAMPLE_STACK_USER, 1 << 13);
        assert_eq!(TYPE_TRACEPOINT, 2);
        let mut a = attr(7);
        a.set_disabled(1);
        a.set_use_clockid(1);
        a.config1 = 0x1234;
        a.sample_period = 1;
        assert_eq!((a.type_, a.config1, a.sample_period), (7, 0x1234, 1));
        assert!(a.size >= 112, "PERF_ATTR_SIZE_VER5 at least");
    }
}
