//! `ptrace(2)`, used for one thing: to be stopped when a traced process
//! (or a process it forked) executes a new program (`PTRACE_SEIZE` with
//! `PTRACE_O_TRACEEXEC`, and `PTRACE_O_TRACEFORK`, `..VFORK`), and
//! to let it go on from every stop (`PTRACE_CONT` with the signal it
//! stopped for, `PTRACE_LISTEN` in a group-stop, `PTRACE_DETACH`). No
//! request here reads or writes the tracee's memory or registers.

use super::{syscall, Syscall, SyscallError};

/// The requests this crate makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `PTRACE_SEIZE`: trace without stopping the tracee; `data` is the
    /// option mask.
    Seize,
    /// `PTRACE_CONT`: resume; `data` is the signal to deliver (0: none).
    Cont,
    /// `PTRACE_LISTEN`: a tracee in a group-stop stays stopped, but
    /// `SIGCONT` can wake it.
    Listen,
    /// `PTRACE_DETACH`: stop tracing; `data` is the signal to deliver.
    Detach,
}

impl Request {
    pub(super) fn code(self) -> libc::c_uint {
        match self {
            Request::Seize => libc::PTRACE_SEIZE,
            Request::Cont => libc::PTRACE_CONT,
            Request::Listen => libc::PTRACE_LISTEN,
            Request::Detach => libc::PTRACE_DETACH,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Request::Seize => "ptrace(PTRACE_SEIZE)",
            Request::Cont => "ptrace(PTRACE_CONT)",
            Request::Listen => "ptrace(PTRACE_LISTEN)",
            Request::Detach => "ptrace(PTRACE_DETACH)",
        }
    }
}

/// `ptrace(request, pid, NULL, data)`.
pub(crate) fn ptrace(request: Request, pid: libc::pid_t, data: u64) -> Result<(), SyscallError> {
    // SAFETY: none of these requests takes a pointer (addr is NULL, data a
    // number); they act on the tracee only.
    unsafe {
        syscall(Syscall::Ptrace {
            request,
            pid,
            data: data as libc::c_ulong,
        })
    }
    .map(drop)
}

/// The option that stops the tracee at each `exec`.
pub(crate) const TRACE_EXEC: u64 = libc::PTRACE_O_TRACEEXEC as u64;
/// The options that also trace the processes a tracee forks (`fork`,
/// `vfork` and `posix_spawn`; not its threads), each attached at its first
/// instruction with the tracee's options.
pub(crate) const TRACE_FORKS: u64 = (libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK) as u64;
/// The event a stop at `exec` reports (`status >> 16`).
pub(crate) const EVENT_EXEC: i32 = libc::PTRACE_EVENT_EXEC;
/// The event of a group-stop or an interrupt of a seized tracee.
pub(crate) const EVENT_STOP: i32 = libc::PTRACE_EVENT_STOP;
