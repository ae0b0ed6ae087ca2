//! Following a traced process into the programs it executes.
//!
//! A uprobe is placed on a file; after `exec` the process runs another
//! file, whose sites no uprobe covers yet. (Files the new program maps that
//! the old one mapped too, such as libc, need nothing: a perf event or a
//! uprobe_multi link for a pid checks the task's current memory map, so
//! they apply to the new program.) The new file is found in the process's
//! mappings and attached; what decides whether a hit is lost is when.
//!
//! - **Stopped at exec, the exact way.** The process is traced with
//!   `PTRACE_SEIZE` and only `PTRACE_O_TRACEEXEC`: the kernel stops it once
//!   the new program is mapped and before its first instruction runs
//!   (`PTRACE_EVENT_EXEC`), the session attaches the new file's sites (and
//!   those of the libraries it will load, found from its dynamic section
//!   as a command's are, since only the program and its interpreter are
//!   mapped yet), and only then lets it go on. That is a [`Tracee`]. A command the session
//!   starts is always traced so (it is the session's own child); a process
//!   given by pid is when the kernel permits it (root, or the right to
//!   ptrace it, and no other tracer such as gdb or strace).
//! - **What ptrace costs.** Seizing stops nothing by itself, but every
//!   signal delivered to the traced thread stops it until the tracer lets
//!   it go on with that signal (ptrace has no way to opt out of these
//!   signal-delivery stops): they are let go at the session's next poll,
//!   so a signal reaches the process up to one poll interval (tens of
//!   milliseconds) late. A group-stop (`SIGSTOP`, `SIGTSTP`) is kept a
//!   stop (`PTRACE_LISTEN`), so `SIGCONT` still works. Only the thread
//!   group leader is traced: other threads run untouched, and thread
//!   creation costs nothing extra.
//! - **Where that is not possible, polled.** The process's `/proc/PID/exe`
//!   is compared at each poll (a change of inode is an exec): an exec by a
//!   thread other than the leader (the kernel then drops the trace), or of
//!   a process that could not be seized, is found that way, attached a
//!   poll interval late, and said in one line: hits before that attach may
//!   be missed. Attaching to every file the process might execute ahead of
//!   time is impossible, and pausing it without ptrace (`SIGSTOP` from a
//!   BPF program at `sched_process_exec`) would show its parent (a shell
//!   with job control) a stopped job.
//! - Dropping a [`Tracee`] detaches it (a process stopped at exec goes on);
//!   if the tracer itself dies, the kernel detaches it.

use crate::sys::process;
use crate::sys::ptrace::{ptrace, Request, EVENT_EXEC, EVENT_STOP, TRACE_EXEC};
use crate::sys::SyscallError;

/// A process traced for its execs only; see the module documentation.
#[derive(Debug)]
pub(crate) struct Tracee {
    pid: libc::pid_t,
    /// Traced still: not lost to an exec by another thread, not ended.
    seized: bool,
    /// Stopped at an exec, not let go yet.
    held: bool,
    /// Execs seen since the last [`Tracee::take_exec`].
    execs: u32,
}

impl Tracee {
    /// Seizes `pid` (its thread group leader) to be stopped at each exec.
    pub(crate) fn seize(pid: u32) -> Result<Tracee, SyscallError> {
        let pid = libc::pid_t::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| SyscallError::from_errno("ptrace(PTRACE_SEIZE)", libc::ESRCH))?;
        ptrace(Request::Seize, pid, TRACE_EXEC)?;
        Ok(Tracee {
            pid,
            seized: true,
            held: false,
            execs: 0,
        })
    }

    /// Whether the process is still traced (an exec by another thread
    /// than the leader ends the trace).
    pub(crate) fn seized(&self) -> bool {
        self.seized
    }

    /// Whether the process is stopped at an exec, waiting for
    /// [`Tracee::resume`].
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// Whether an exec was seen since the last call.
    pub(crate) fn take_exec(&mut self) -> bool {
        std::mem::take(&mut self.execs) > 0
    }

    /// Lets a process stopped at an exec go on.
    pub(crate) fn resume(&mut self) {
        if std::mem::take(&mut self.held) {
            // ESRCH: killed meanwhile; its end is what the next wait says.
            let _ = ptrace(Request::Cont, self.pid, 0);
        }
    }

    /// Handles every stop reported so far (blocking: until the process
    /// ends, letting it go on at each stop): lets signal-delivery stops go
    /// on with their signal, keeps group-stops stopped, and holds the
    /// process at an exec (unless `block`). Returns the raw wait status
    /// once the process ended (only a child's end is ours to reap; a
    /// traced process that is not a child is reported to its parent as
    /// well).
    pub(crate) fn wait(&mut self, block: bool) -> Result<Option<libc::c_int>, SyscallError> {
        if block {
            self.resume();
        }
        let flags = libc::__WALL | if block { 0 } else { libc::WNOHANG };
        loop {
            if !self.seized && !block {
                return Ok(None);
            }
            let status = match process::waitpid(self.pid, flags) {
                Ok(Some((_, status))) => status,
                Ok(None) => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // Not traced any more, and not our child.
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) && self.seized => {
                    self.seized = false;
                    self.held = false;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.seized = false;
                self.held = false;
                return Ok(Some(status));
            }
            if libc::WIFSTOPPED(status) {
                self.stopped(status, block);
                if self.held {
                    return Ok(None);
                }
            }
        }
    }

    /// Lets the process go on from the stop `status` says, or holds it at
    /// an exec.
    fn stopped(&mut self, status: libc::c_int, block: bool) {
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        let (request, data) = match event {
            EVENT_EXEC => {
                self.execs += 1;
                if !block {
                    self.held = true;
                    return;
                }
                (Request::Cont, 0)
            }
            // A group-stop: stays stopped until SIGCONT.
            EVENT_STOP
                if matches!(
                    sig,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) =>
            {
                (Request::Listen, 0)
            }
            // Another event stop (PTRACE_INTERRUPT, a wake from listening).
            e if e != 0 => (Request::Cont, 0),
            // A signal-delivery stop: deliver it.
            _ => (Request::Cont, sig as u64),
        };
        // ESRCH: killed meanwhile; its end is what the next wait says.
        let _ = ptrace(request, self.pid, data);
    }

    /// Stops tracing: a process held at an exec goes on; a running one is
    /// interrupted (the request needs a stopped tracee) and let go at its
    /// next stop, with the signal it stopped for.
    fn detach(&mut self) {
        // Reap an end first (a traced process's parent sees it only
        // after its tracer did).
        if !self.seized {
            return;
        }
        let _ = self.wait(false);
        if !self.seized {
            return;
        }
        if self.held {
            self.held = false;
            let _ = ptrace(Request::Detach, self.pid, 0);
            return;
        }
        if ptrace(Request::Interrupt, self.pid, 0).is_err() {
            return;
        }
        // A tracee stops at once unless it sleeps uninterruptibly; after a
        // second, the trace is left to end with the tracer.
        for _ in 0..200 {
            let status = match process::waitpid(self.pid, libc::__WALL | libc::WNOHANG) {
                Ok(Some((_, status))) => status,
                Ok(None) => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(_) => return,
            };
            if !libc::WIFSTOPPED(status) {
                return; // ended
            }
            let sig = match status >> 16 {
                0 => libc::WSTOPSIG(status) as u64,
                _ => 0,
            };
            let _ = ptrace(Request::Detach, self.pid, sig);
            return;
        }
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        self.detach();
    }
}
