//! The perf ABI, from perf-event-open-sys's bindings of the kernel's
//! `linux/perf_event.h` (never hand-typed offsets, flag bits or ioctl
//! numbers): event attributes, opening an event, the ioctls this crate
//! uses, and the ring buffer ([`ring`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys as sys;
use sys::bindings;

pub(crate) mod ring;

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
pub(crate) unsafe fn open(attr: &Attr, pid: i32, cpu: i32, group: i32) -> io::Result<OwnedFd> {
    // The kernel writes `size` back on E2BIG only; it reads the rest.
    let mut attr = *attr;
    // SAFETY: a valid perf_event_attr of the size it states; the caller
    // keeps what it points to alive.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            pid,
            cpu,
            group,
            bindings::PERF_FLAG_FD_CLOEXEC.into(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this new descriptor; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `PERF_EVENT_IOC_ENABLE`, of the event alone or (`group`) of the group it
/// leads.
pub(crate) fn enable(fd: &OwnedFd, group: bool) -> io::Result<()> {
    let flag = if group {
        bindings::PERF_IOC_FLAG_GROUP
    } else {
        0
    };
    // SAFETY: an open perf event; the argument is a flag, not a pointer.
    check(unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), flag) })
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: `fd`'s records go to `owner`'s ring.
pub(crate) fn set_output(fd: &OwnedFd, owner: &OwnedFd) -> io::Result<()> {
    // SAFETY: both are open perf events; the argument is a descriptor.
    check(unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), owner.as_raw_fd()) })
}

/// `PERF_EVENT_IOC_ID`: the id samples of the event carry.
pub(crate) fn id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: the ioctl writes one u64 through the pointer, which is valid.
    check(unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) })?;
    Ok(id)
}

fn check(ret: i32) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
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
