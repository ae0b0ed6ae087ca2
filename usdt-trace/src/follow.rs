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
//!   mapped yet), and only then lets it go on. That is a [`Tracee`]. A
//!   command the session starts is traced so (it is the session's own
//!   child); a process given by pid is when the kernel permits it (root,
//!   or the right to ptrace it, and no other tracer such as gdb or
//!   strace). While the session is slow to look (its output blocked), the
//!   process waits at the exec: nothing is lost, at that price.
//! - **What ptrace costs.** Seizing stops nothing by itself, but every
//!   signal delivered to the traced thread stops it until the tracer lets
//!   it go on with that signal (ptrace has no way to opt out of these
//!   signal-delivery stops). So the trace belongs to a thread of its own,
//!   which waits for the tracee's stops and lets each go on at once,
//!   whatever the session is doing (blocked on a full stdout pipe, say):
//!   a signal is late by two context switches. Only a stop at an exec
//!   waits for the session. A group-stop (`SIGSTOP`, `SIGTSTP`) is kept a
//!   stop (`PTRACE_LISTEN`), so `SIGCONT` still works. Only the thread
//!   group leader is traced: other threads run untouched, and thread
//!   creation costs nothing extra. That thread is also the one that
//!   reaps a traced command.
//! - **A launcher's processes.** A command without probes of its own (a
//!   script, `env`, a shell: [`Launcher`](crate::Launcher)) runs the
//!   program it is traced for, or forks it (`sh -c 'PROG ...'`). Its trace
//!   then also has `PTRACE_O_TRACEFORK` and `PTRACE_O_TRACEVFORK`: each
//!   process it (or one of them) forks is traced by the same thread from
//!   its first instruction, let go at each stop, and held at each exec as
//!   the leader is, for its program to be attached for that process.
//! - **Where that is not possible, polled.** The process's `/proc/PID/exe`
//!   is compared at each poll (a change of inode is an exec): an exec by a
//!   thread other than the leader (the kernel then drops the trace), or of
//!   a process that could not be seized, is found that way, attached a
//!   poll interval late, and said in one line: hits before that attach may
//!   be missed (a program that ends within that poll is not seen at all).
//!   Attaching to every file the process might execute ahead of
//!   time is impossible, and pausing it without ptrace (`SIGSTOP` from a
//!   BPF program at `sched_process_exec`) would show its parent (a shell
//!   with job control) a stopped job.
//! - Dropping a [`Tracee`] lets a process stopped at an exec go on; its
//!   thread detaches at the tracee's next stop (only the tracer thread may
//!   interrupt it, and it sleeps in `waitpid`), or ends with the tracee;
//!   if the tracer dies, the kernel detaches it.

use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, TryRecvError};

use crate::sys::process;
use crate::sys::ptrace::{ptrace, Request, EVENT_EXEC, EVENT_STOP, TRACE_EXEC, TRACE_FORKS};
use crate::sys::SyscallError;

/// What the tracer thread tells the session.
#[derive(Debug)]
enum Event {
    /// This tracee is stopped at an exec, until [`Order::Resume`].
    Exec(u32),
    /// The tracee ended: its raw wait status.
    Ended(libc::c_int),
    /// The trace is gone (the kernel dropped it) or failed.
    Lost,
}

/// What the session tells the tracer thread.
#[derive(Debug)]
enum Order {
    /// Let the tracee held at an exec go on.
    Resume,
}

/// A process traced for its execs only, by a thread of its own; see the
/// module documentation.
#[derive(Debug)]
pub(crate) struct Tracee {
    events: Receiver<Event>,
    /// Dropped: the thread lets the tracee go at its next stop.
    orders: Option<Sender<Order>>,
    /// Traced still: not lost, not ended.
    seized: bool,
    /// The process seized.
    leader: u32,
    /// The tracee stopped at an exec, not let go yet.
    held: Option<u32>,
    /// Execs of the leader seen since the last [`Tracee::take_exec`].
    execs: u32,
}

impl Tracee {
    /// Seizes `pid` (its thread group leader) to be stopped at each exec,
    /// from a thread that then serves its stops; with `forks`, the
    /// processes it forks too, and theirs (each stopped at its execs).
    pub(crate) fn seize(pid: u32, forks: bool) -> Result<Tracee, SyscallError> {
        let leader = pid;
        let pid = libc::pid_t::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| SyscallError::from_errno("ptrace(PTRACE_SEIZE)", libc::ESRCH))?;
        let (events_tx, events) = channel();
        let (orders, orders_rx) = channel();
        let (seized_tx, seized) = sync_channel(1);
        std::thread::Builder::new()
            .name(format!("usdt-exec-{pid}"))
            .spawn(move || {
                let options = TRACE_EXEC | if forks { TRACE_FORKS } else { 0 };
                let result = ptrace(Request::Seize, pid, options);
                let ok = result.is_ok();
                let _ = seized_tx.send(result);
                if ok {
                    serve(pid, forks, &events_tx, &orders_rx);
                }
            })
            .map_err(|e| SyscallError {
                call: "clone (a thread)",
                io_error: e,
            })?;
        match seized.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(SyscallError::from_errno(
                    "ptrace(PTRACE_SEIZE)",
                    libc::ESRCH,
                ))
            }
        }
        Ok(Tracee {
            events,
            orders: Some(orders),
            seized: true,
            leader,
            held: None,
            execs: 0,
        })
    }

    /// Whether the process is still traced (an exec by another thread
    /// than the leader ends the trace).
    pub(crate) fn seized(&self) -> bool {
        self.seized
    }

    /// Whether the process seized is stopped at an exec, waiting for
    /// [`Tracee::resume`].
    pub(crate) fn held(&self) -> bool {
        self.held == Some(self.leader)
    }

    /// A process it forked (traced with `forks`) stopped at an exec,
    /// waiting for [`Tracee::resume`].
    pub(crate) fn held_fork(&self) -> Option<u32> {
        self.held.filter(|p| *p != self.leader)
    }

    /// Whether an exec of the process seized was seen since the last call.
    pub(crate) fn take_exec(&mut self) -> bool {
        std::mem::take(&mut self.execs) > 0
    }

    /// Lets a process stopped at an exec go on.
    pub(crate) fn resume(&mut self) {
        if self.held.take().is_some() {
            if let Some(orders) = &self.orders {
                let _ = orders.send(Order::Resume);
            }
        }
    }

    /// What the tracer thread saw since the last call (blocking: until the
    /// process ended, letting it go on at each exec): holds the process at
    /// an exec (unless `block`), and returns the raw wait status once it
    /// ended (the thread reaped it if it is a child; a traced process that
    /// is not is reported to its parent as well).
    pub(crate) fn wait(&mut self, block: bool) -> Result<Option<libc::c_int>, SyscallError> {
        loop {
            if block {
                self.resume();
            }
            if !self.seized {
                return Ok(None);
            }
            let event = match block {
                true => self.events.recv().map_err(|_| TryRecvError::Disconnected),
                false => self.events.try_recv(),
            };
            match event {
                Ok(Event::Exec(pid)) => {
                    if pid == self.leader {
                        self.execs += 1;
                    }
                    self.held = Some(pid);
                    if !block {
                        return Ok(None);
                    }
                }
                Ok(Event::Ended(status)) => {
                    self.seized = false;
                    return Ok(Some(status));
                }
                Ok(Event::Lost) | Err(TryRecvError::Disconnected) => {
                    self.seized = false;
                    self.held = None;
                    return Ok(None);
                }
                Err(TryRecvError::Empty) => return Ok(None),
            }
        }
    }
}

impl Drop for Tracee {
    /// Lets a process held at an exec go on; the thread detaches at the
    /// next stop.
    fn drop(&mut self) {
        self.resume();
        self.orders = None;
    }
}

/// The tracer thread: waits for each stop of `pid` (and, with `forks`, of
/// the processes it forks, which the kernel traces for this thread) and
/// lets it go on (a signal-delivery stop with its signal, a group-stop
/// listening), holds an exec until the session's order, and ends with
/// `pid`, or detaches at the first stop after the session dropped its
/// [`Tracee`] (a thread that ends lets go of every process it traces).
fn serve(pid: libc::pid_t, forks: bool, events: &Sender<Event>, orders: &Receiver<Order>) {
    // Only this thread's tracees: never a child another thread of ours
    // forked and waits for.
    let (whom, flags) = match forks {
        true => (-1, libc::__WALL | libc::__WNOTHREAD),
        false => (pid, libc::__WALL),
    };
    loop {
        let (who, status) = match process::waitpid(whom, flags) {
            Ok(Some(waited)) => waited,
            Ok(None) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // Not traced any more (an exec by another thread), and not a
            // child of ours.
            Err(_) => {
                let _ = events.send(Event::Lost);
                return;
            }
        };
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if who != pid {
                // A forked process ended: its parent's to see.
                continue;
            }
            let _ = events.send(Event::Ended(status));
            return;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        // The signal a signal-delivery stop delivers when let go.
        let deliver = if event == 0 { sig as u64 } else { 0 };
        let gone = matches!(orders.try_recv(), Err(TryRecvError::Disconnected));
        // Held until the session attached the new program.
        if event == EVENT_EXEC
            && !gone
            && events.send(Event::Exec(who as u32)).is_ok()
            && matches!(orders.recv(), Ok(Order::Resume))
        {
            // ESRCH: killed meanwhile; the next wait says how it ended.
            let _ = ptrace(Request::Cont, who, 0);
            continue;
        }
        if gone || event == EVENT_EXEC {
            let _ = ptrace(Request::Detach, who, deliver);
            return;
        }
        let request = match event {
            // A group-stop: stays stopped until SIGCONT.
            EVENT_STOP
                if matches!(
                    sig,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) =>
            {
                Request::Listen
            }
            // Any other stop, a fork's and a new process's first included.
            _ => Request::Cont,
        };
        let _ = ptrace(request, who, deliver);
    }
}
