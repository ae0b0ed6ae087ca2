//! Every raw system call this crate makes, behind one function.
//!
//! Each call is a [`Syscall`] value passed to [`syscall`], the one place
//! that enters the kernel; the typed wrappers in the submodules build those
//! values and turn the results into owned descriptors, mappings and counts.
//! A failure is a [`SyscallError`] naming the call, with the kernel's
//! `errno` as its source. Unit tests replace the kernel with a fake
//! ([`fake::with`]) to check how each layer handles a refusal.
//!
//! - [`bpf`]: `bpf(2)`, the parts of `union bpf_attr` this crate uses,
//!   `struct bpf_insn`, and loading a program uprobe_multi links take.
//! - [`perf`]: `perf_event_open(2)` (a uprobe event of a file offset and
//!   its semaphore), its ioctls, and reading a count.
//! - [`mem`]: `mmap(2)` and `munmap(2)` of ring buffers.
//! - [`process`]: `fork`, `pipe2`, `waitpid`, `kill`, `poll`, `read`,
//!   `write` and `process_vm_readv`.
//! - [`ptrace`]: `ptrace(2)`, only to be stopped at a traced process's
//!   `exec` (`PTRACE_SEIZE` with `PTRACE_O_TRACEEXEC`) and to let it go on.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) mod bpf;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod mem;
pub(crate) mod perf;
pub(crate) mod process;
pub(crate) mod ptrace;

/// A system call that failed: which one, and the kernel's answer.
#[derive(Debug)]
pub struct SyscallError {
    /// The call, such as `perf_event_open` or `bpf(BPF_LINK_CREATE)`.
    pub call: &'static str,
    /// What the kernel said (its `errno`).
    pub io_error: io::Error,
}

impl SyscallError {
    /// The `errno`, when the kernel gave one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io_error.raw_os_error()
    }

    /// The kind of the underlying `io::Error`.
    pub fn kind(&self) -> io::ErrorKind {
        self.io_error.kind()
    }

    /// The error for `call` from `errno`.
    pub(crate) fn from_errno(call: &'static str, errno: i32) -> SyscallError {
        SyscallError {
            call,
            io_error: io::Error::from_raw_os_error(errno),
        }
    }
}

impl std::fmt::Display for SyscallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.io_error)
    }
}

impl std::error::Error for SyscallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.io_error)
    }
}

impl From<SyscallError> for io::Error {
    fn from(e: SyscallError) -> io::Error {
        e.io_error
    }
}

/// One raw system call and its arguments. Pointers are raw where the kernel
/// reads or writes memory the typed wrapper vouches for.
#[derive(Debug)]
pub(crate) enum Syscall<'a> {
    /// `bpf(cmd, attr, size)`.
    Bpf {
        cmd: libc::c_int,
        attr: *mut libc::c_void,
        size: u32,
    },
    /// `perf_event_open(attr, pid, cpu, group_fd, flags)`.
    PerfEventOpen {
        attr: *mut perf::Attr,
        pid: libc::pid_t,
        cpu: libc::c_int,
        group: libc::c_int,
        flags: libc::c_ulong,
    },
    /// `ioctl(fd, request, arg)` on a perf event.
    PerfIoctl {
        fd: BorrowedFd<'a>,
        request: perf::Ioctl<'a>,
    },
    /// `read(fd, buf, len)`.
    Read {
        fd: BorrowedFd<'a>,
        buf: &'a mut [u8],
    },
    /// `write(fd, buf, len)`.
    Write { fd: BorrowedFd<'a>, buf: &'a [u8] },
    /// `kill(pid, sig)`.
    Kill { pid: libc::pid_t, sig: libc::c_int },
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)`.
    Mmap {
        len: usize,
        prot: libc::c_int,
        fd: BorrowedFd<'a>,
        offset: libc::off_t,
    },
    /// `munmap(addr, len)`.
    Munmap { addr: *mut libc::c_void, len: usize },
    /// `process_vm_readv(pid, local, 1, remote, n, 0)`.
    ProcessVmReadv {
        pid: libc::pid_t,
        local: &'a mut [u8],
        remote: &'a [libc::iovec],
    },
    /// `fork()`.
    Fork,
    /// `pipe2(fds, O_CLOEXEC)`.
    Pipe { fds: &'a mut [libc::c_int; 2] },
    /// `waitpid(pid, status, flags)`.
    Waitpid {
        pid: libc::pid_t,
        status: &'a mut libc::c_int,
        flags: libc::c_int,
    },
    /// `poll(fds, n, timeout_ms)`.
    Poll {
        fds: &'a mut [libc::pollfd],
        timeout_ms: libc::c_int,
    },
    /// `ptrace(request, pid, NULL, data)`, for the requests that take no
    /// pointer (`data` is an option mask or a signal number).
    Ptrace {
        request: ptrace::Request,
        pid: libc::pid_t,
        data: libc::c_ulong,
    },
}

impl Syscall<'_> {
    /// The call's name, for errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Syscall::Bpf { cmd, .. } => bpf::command_name(*cmd),
            Syscall::PerfEventOpen { .. } => "perf_event_open",
            Syscall::PerfIoctl { request, .. } => request.name(),
            Syscall::Read { .. } => "read",
            Syscall::Write { .. } => "write",
            Syscall::Kill { .. } => "kill",
            Syscall::Mmap { .. } => "mmap",
            Syscall::Munmap { .. } => "munmap",
            Syscall::ProcessVmReadv { .. } => "process_vm_readv",
            Syscall::Fork => "fork",
            Syscall::Pipe { .. } => "pipe2",
            Syscall::Waitpid { .. } => "waitpid",
            Syscall::Poll { .. } => "poll",
            Syscall::Ptrace { request, .. } => request.name(),
        }
    }
}

/// Makes `call`: the one place this crate enters the kernel (apart from
/// the async-signal-safe calls of a forked child before `exec`).
///
/// # Safety
/// Every raw pointer in `call` must be valid for what the kernel does with
/// it (reads a path or an array, writes a value, a log or a descriptor)
/// until the call returns, and each attribute struct must be the one its
/// command takes.
pub(crate) unsafe fn syscall(call: Syscall<'_>) -> Result<i64, SyscallError> {
    let name = call.name();
    #[cfg(test)]
    if let Some(result) = fake::answer(&call) {
        return result.map_err(|errno| SyscallError::from_errno(name, errno));
    }
    // SAFETY: the caller's contract covers each call's pointers; the
    // references are valid for their lengths.
    let ret: i64 = unsafe {
        match call {
            Syscall::Bpf { cmd, attr, size } => libc::syscall(libc::SYS_bpf, cmd, attr, size),
            Syscall::PerfEventOpen {
                attr,
                pid,
                cpu,
                group,
                flags,
            } => libc::syscall(libc::SYS_perf_event_open, attr, pid, cpu, group, flags),
            Syscall::PerfIoctl { fd, request } => request.call(fd.as_raw_fd()).into(),
            Syscall::Read { fd, buf } => {
                libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) as i64
            }
            Syscall::Write { fd, buf } => {
                libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) as i64
            }
            Syscall::Kill { pid, sig } => libc::kill(pid, sig).into(),
            Syscall::Mmap {
                len,
                prot,
                fd,
                offset,
            } => {
                let addr = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    offset,
                );
                if addr == libc::MAP_FAILED {
                    -1
                } else {
                    addr as i64
                }
            }
            Syscall::Munmap { addr, len } => libc::munmap(addr, len).into(),
            Syscall::ProcessVmReadv { pid, local, remote } => {
                let local = libc::iovec {
                    iov_base: local.as_mut_ptr().cast(),
                    iov_len: local.len(),
                };
                libc::process_vm_readv(
                    pid,
                    &local,
                    1,
                    remote.as_ptr(),
                    remote.len() as libc::c_ulong,
                    0,
                ) as i64
            }
            Syscall::Fork => libc::fork().into(),
            Syscall::Pipe { fds } => libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC).into(),
            Syscall::Waitpid { pid, status, flags } => libc::waitpid(pid, status, flags).into(),
            Syscall::Poll { fds, timeout_ms } => {
                libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms).into()
            }
            Syscall::Ptrace { request, pid, data } => libc::ptrace(
                request.code(),
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                data,
            ),
        }
    };
    if ret < 0 {
        return Err(SyscallError {
            call: name,
            io_error: io::Error::last_os_error(),
        });
    }
    Ok(ret)
}
