//! Starting a command so that a tracer can attach before it runs: the child
//! is forked, waits on a pipe while the parent attaches to its pid, then
//! executes the program.
//!
//! A uprobe perf event for a pid checks the task's current memory map when
//! the program is mapped, so an event opened before `exec` applies to the new
//! program.
//!
//! A command may be traced for its execs ([`PausedCommand::follow_exec`],
//! see [`follow`](crate::follow)): waiting for it then also lets it go on
//! from every ptrace stop, and a non-blocking wait leaves it held at an
//! exec for the caller to attach to the new program.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::follow::Tracee;
use crate::sys::process::{self, Forked};
use crate::sys::SyscallError;
use crate::Error;

/// A forked child waiting to execute its program.
#[derive(Debug)]
pub struct PausedCommand {
    pid: u32,
    program: PathBuf,
    go: Option<OwnedFd>,
    exec_error: OwnedFd,
    reaped: bool,
    /// Traced to be stopped at each exec.
    tracee: Option<Tracee>,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl ExitStatus {
    /// The shell's convention: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

/// Finds a program as `execvp` would: a name with a `/` is a path, anything
/// else is searched in `PATH`.
pub fn resolve_program(name: &Path) -> Result<PathBuf, Error> {
    if name.as_os_str().as_bytes().contains(&b'/') {
        return match not_a_program(name) {
            None => Ok(name.into()),
            Some(source) => Err(Error::Io {
                path: name.into(),
                source,
            }),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::ProgramNotFound {
            program: name.into(),
        })
}

/// Why the file at `path` cannot be run as a program: it does not exist,
/// or what it is instead of a regular file; `None` for a regular file.
fn not_a_program(path: &Path) -> Option<std::io::Error> {
    use std::os::unix::fs::FileTypeExt;
    let kind = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => return None,
        Ok(m) => m.file_type(),
        Err(e) => return Some(e),
    };
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something other than a regular file"
    };
    Some(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a program"),
    ))
}

impl PausedCommand {
    /// Forks a child that will execute `program` with `args` (not including
    /// argv\[0\], which is `program`) once [`PausedCommand::start`] is called.
    pub fn spawn(program: &Path, args: &[OsString]) -> Result<PausedCommand, Error> {
        Self::spawn_as(program, program.as_os_str(), args)
    }

    /// Like [`PausedCommand::spawn`], with `argv0` as argv\[0\] (the name
    /// as the user wrote it: programs may dispatch on it).
    ///
    /// The paused child holds no end of the pipe it waits on but its own:
    /// if the tracer dies before [`PausedCommand::start`], the child reads
    /// end-of-file and exits 127 without running the program.
    pub fn spawn_as(
        program: &Path,
        argv0: &std::ffi::OsStr,
        args: &[OsString],
    ) -> Result<PausedCommand, Error> {
        let nul = |_| Error::NulInCommand;
        let c_program = CString::new(program.as_os_str().as_bytes()).map_err(nul)?;
        let mut c_args = vec![CString::new(argv0.as_bytes()).map_err(nul)?];
        for a in args {
            c_args.push(CString::new(a.clone().into_vec()).map_err(nul)?);
        }
        let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let pipe = |what: &str| {
            process::pipe().map_err(|source| Error::Syscall {
                what: what.into(),
                source,
            })
        };
        let (go_read, go_write) = pipe("creating a pipe")?;
        let (err_read, err_write) = pipe("creating a pipe")?;
        // SAFETY: the child only calls async-signal-safe functions (read,
        // execv, write, _exit) on memory prepared before the fork.
        let forked = unsafe { process::fork() }.map_err(|source| Error::Syscall {
            what: "forking the command".into(),
            source,
        })?;
        let pid = match forked {
            Forked::Parent(pid) => pid,
            // SAFETY: in the child; see above. `argv` is NULL-terminated and
            // its strings live in `c_args`.
            Forked::Child => unsafe {
                libc::close(go_write.as_raw_fd());
                libc::close(err_read.as_raw_fd());
                child(
                    go_read.as_raw_fd(),
                    err_write.as_raw_fd(),
                    &c_program,
                    &argv,
                )
            },
        };
        drop((go_read, err_write));
        Ok(PausedCommand {
            pid: pid as u32,
            program: program.into(),
            go: Some(go_write),
            exec_error: err_read,
            reaped: false,
            tracee: None,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Traces the child (before [`PausedCommand::start`]) so that it stops
    /// at each exec, its first one included, until let go: a
    /// non-blocking wait ([`PausedCommand::try_wait`]) holds it there
    /// ([`PausedCommand::tracee`]). With `forks`, the processes it forks
    /// too.
    pub(crate) fn follow_exec(&mut self, forks: bool) -> Result<(), SyscallError> {
        // Again after a trace the kernel dropped (an exec by a thread
        // other than the one traced).
        if !self.reaped && !self.tracee.as_ref().is_some_and(|t| t.seized()) {
            self.tracee = Some(Tracee::seize(self.pid, forks)?);
        }
        Ok(())
    }

    /// The trace that stops the child at its execs, if it is traced.
    pub(crate) fn tracee(&mut self) -> Option<&mut Tracee> {
        self.tracee.as_mut()
    }

    /// Lets the child execute the program; an error if `exec` failed.
    pub fn start(&mut self) -> Result<(), Error> {
        let go = self.go.take().ok_or(Error::AlreadyStarted)?;
        loop {
            let source = match process::write(&go, b"g") {
                Ok(1) => break,
                Ok(_) => continue,
                Err(e) => e,
            };
            match source.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The child is gone (a signal ended it): how it ended is
                // what try_wait and wait say.
                Some(libc::EPIPE) => break,
                _ => {
                    // Closing the pipe unread makes the child exit unrun.
                    drop(go);
                    let _ = self.wait();
                    return Err(Error::Syscall {
                        what: format!("starting {}", self.program.display()),
                        source,
                    });
                }
            }
        }
        drop(go);
        let mut errno = [0u8; 4];
        // At most 4 bytes; the write end closes on exec.
        if process::read(&self.exec_error, &mut errno).ok() == Some(4) {
            let _ = self.wait();
            return Err(Error::Syscall {
                what: format!("cannot run {}", self.program.display()),
                source: SyscallError::from_errno("execv", i32::from_ne_bytes(errno)),
            });
        }
        Ok(())
    }

    /// Returns how the child ended, if it has.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, Error> {
        self.waitpid(libc::WNOHANG)
    }

    /// Waits for the child to end.
    pub fn wait(&mut self) -> Result<ExitStatus, Error> {
        if self.reaped {
            return Err(Error::AlreadyWaited);
        }
        loop {
            if let Some(status) = self.waitpid(0)? {
                return Ok(status);
            }
        }
    }

    fn waitpid(&mut self, flags: i32) -> Result<Option<ExitStatus>, Error> {
        let waited = match self.tracee.as_mut().filter(|t| t.seized()) {
            // Let go from ptrace stops (held at an exec when not blocking).
            Some(tracee) => tracee.wait(flags & libc::WNOHANG == 0),
            None => process::waitpid(self.pid as libc::pid_t, flags).map(|s| s.map(|(_, s)| s)),
        };
        let status = match waited {
            Ok(Some(status)) => status,
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => return Ok(None),
            Err(source) => {
                return Err(Error::Syscall {
                    what: "waiting for the command".into(),
                    source,
                })
            }
        };
        self.go = None;
        self.reaped = true;
        Ok(Some(if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        }))
    }

    /// Kills the child (when attaching failed) and reaps it.
    pub fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.wait();
    }

    /// Sends `sig` to the child, unless it was reaped already. Never to a
    /// pid <= 0 (which would signal a process group, the tracer's own).
    pub fn signal(&mut self, sig: i32) {
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        if pid > 0 && !self.reaped {
            // Our own child, not yet reaped; a failure means it is gone.
            let _ = process::kill(pid, sig);
        }
    }
}

/// The child's side: wait for the go byte, execute, or report errno.
///
/// # Safety
/// Only in a freshly forked child; `argv` must be NULL-terminated.
unsafe fn child(go: i32, err: i32, program: &CString, argv: &[*const libc::c_char]) -> ! {
    let mut byte = 0u8;
    // SAFETY: the caller's contract; all calls are async-signal-safe.
    unsafe {
        if libc::read(go, (&mut byte as *mut u8).cast(), 1) == 1 {
            libc::execv(program.as_ptr(), argv.as_ptr());
            let errno = (*libc::__errno_location()).to_ne_bytes();
            libc::write(err, errno.as_ptr().cast(), 4);
        }
        libc::_exit(127)
    }
}
