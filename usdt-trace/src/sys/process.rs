//! Processes: starting a child (`fork`, `pipe2`), reaping it (`waitpid`),
//! waiting on descriptors (`poll`) and reading another process's memory
//! (`process_vm_readv`).

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use super::{syscall, Syscall, SyscallError};

/// What `fork` returned in this process.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Forked {
    /// In the parent: the child's pid.
    Parent(libc::pid_t),
    /// In the child.
    Child,
}

/// `fork()`.
///
/// # Safety
/// In the child, until it executes a program or exits, only
/// async-signal-safe functions may be called (the process may have other
/// threads holding locks).
pub(crate) unsafe fn fork() -> Result<Forked, SyscallError> {
    // SAFETY: no pointers; the caller's contract covers the child.
    match unsafe { syscall(Syscall::Fork)? } {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as libc::pid_t)),
    }
}

/// Calls for a freshly forked child of a threaded process, where only
/// async-signal-safe functions may run: straight to the kernel, past the
/// choke point (in test builds it consults a thread-local fake, which
/// nothing vouches is async-signal-safe there) and past libc's fork
/// handlers.
// Used by the self-tests, which run on x86-64 only; portable all the same.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod in_child {
    /// The `fork` system call itself, not libc's `fork()`: no
    /// `pthread_atfork` handlers run (a program's fork guard among them).
    /// The child's pid in the parent, 0 in the child, -1 on failure.
    ///
    /// # Safety
    /// As [`fork`](super::fork), and the caller is itself a forked child
    /// that calls only async-signal-safe functions.
    pub(crate) unsafe fn raw_fork() -> libc::pid_t {
        // SAFETY: no pointers; the caller's contract covers both processes.
        #[cfg(target_arch = "x86_64")]
        let pid = unsafe { libc::syscall(libc::SYS_fork) };
        // aarch64 and riscv64 have no `fork` call: `clone` with SIGCHLD
        // alone (no new stack, no thread ids, no TLS) is it.
        // SAFETY: as above; the zero arguments are no pointers.
        #[cfg(not(target_arch = "x86_64"))]
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::c_long::from(libc::SIGCHLD),
                0,
                0,
                0,
                0,
            )
        };
        pid as libc::pid_t
    }

    /// `waitpid(pid, &status, 0)`, retried on `EINTR`: the raw status, or
    /// `None` when waiting failed otherwise.
    pub(crate) fn wait(pid: libc::pid_t) -> Option<libc::c_int> {
        let mut status = 0;
        loop {
            // SAFETY: a valid status pointer; waitpid is async-signal-safe.
            if unsafe { libc::waitpid(pid, &mut status, 0) } >= 0 {
                return Some(status);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return None;
            }
        }
    }
}

/// `pipe2(O_CLOEXEC)`: the read end, then the write end.
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), SyscallError> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    unsafe { syscall(Syscall::Pipe { fds: &mut fds })? };
    // SAFETY: pipe2 just returned these descriptors; we own them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `waitpid(pid, &status, flags)`: `None` when no child changed state
/// (`WNOHANG`), else the pid and its raw status.
pub(crate) fn waitpid(
    pid: libc::pid_t,
    flags: libc::c_int,
) -> Result<Option<(libc::pid_t, libc::c_int)>, SyscallError> {
    let mut status = 0;
    // SAFETY: a valid status pointer.
    let r = unsafe {
        syscall(Syscall::Waitpid {
            pid,
            status: &mut status,
            flags,
        })?
    };
    Ok((r != 0).then_some((r as libc::pid_t, status)))
}

/// `poll(fds, timeout_ms)`: how many descriptors are ready.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, SyscallError> {
    // SAFETY: `fds` is a valid array of pollfd of the stated length.
    let n = unsafe { syscall(Syscall::Poll { fds, timeout_ms })? };
    Ok(n as usize)
}

/// Reads as much of `buf.len()` bytes at `addr` of process `pid` as is
/// mapped; returns how many were read (0 when none could be).
pub(crate) fn read_process_memory(pid: u32, addr: u64, buf: &mut [u8]) -> usize {
    // Split the remote range at page boundaries: the call stops at the
    // first unreadable page and returns what it read before it.
    let page = usdt_runtime::page_size();
    let mut remote = vec![];
    let mut at = addr;
    let end = addr.saturating_add(buf.len() as u64);
    while at < end {
        let next = ((at / page) + 1).saturating_mul(page).min(end);
        remote.push(libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: (next - at) as usize,
        });
        at = next;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return 0;
    };
    // SAFETY: `buf` is writable for its length; the remote ranges are only
    // read, by the kernel, with the usual permission checks.
    let n = unsafe {
        syscall(Syscall::ProcessVmReadv {
            pid,
            local: buf,
            remote: &remote,
        })
    };
    n.map_or(0, |n| n as usize)
}

/// `kill(pid, sig)`.
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<(), SyscallError> {
    // SAFETY: no pointers.
    unsafe { syscall(Syscall::Kill { pid, sig }) }.map(drop)
}

/// `write(fd, buf)`: how many bytes were written.
pub(crate) fn write(fd: &impl AsFd, buf: &[u8]) -> Result<usize, SyscallError> {
    // SAFETY: `buf` is readable for its length.
    let n = unsafe {
        syscall(Syscall::Write {
            fd: fd.as_fd(),
            buf,
        })?
    };
    Ok(n as usize)
}

/// `read(fd, buf)`: how many bytes were read.
pub(crate) fn read(fd: &impl AsFd, buf: &mut [u8]) -> Result<usize, SyscallError> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe {
        syscall(Syscall::Read {
            fd: fd.as_fd(),
            buf,
        })?
    };
    Ok(n as usize)
}
