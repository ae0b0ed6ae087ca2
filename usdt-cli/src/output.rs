//! Signals that end a run whatever stdout is doing.
//!
//! SIGINT, SIGTERM and SIGHUP set a flag and write a byte to a pipe (the
//! stop pipe, never read). Every write to stdout goes through [`Stdout`]:
//! on a file it writes as `std::io::Stdout` would; on anything that can
//! block (a pipe, a socket, a terminal) it first waits, with `poll`, until
//! stdout takes data *or* the stop pipe is readable, then writes what
//! cannot block: at most `PIPE_BUF` bytes to a pipe (which a pipe with room
//! takes at once), `send(MSG_DONTWAIT)` to a socket, and to a terminal or
//! any other device a write through a second, non-blocking open of the same
//! file (a terminal that says it has room may have room for a few bytes
//! only, and blocks for the rest). The handlers are installed without
//! `SA_RESTART`, so a write that blocks all the same (another writer filled
//! the pipe in between) returns `EINTR`.
//!
//! After a signal, while the probes are still attached, only what stdout
//! takes at once is written; once the command has detached ([`detached`]),
//! what stdout takes within [`GRACE`] (a terminal, a reader that reads).
//! A write that would block past that is abandoned with an error,
//! [`abandoned`] says so, and the run ends with 128 + the signal.

use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The exit status after stdout was closed, as if SIGPIPE had ended us.
pub(crate) const BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

/// `println!` that returns an error instead of panicking when stdout is
/// closed, and gives up after a signal ([`Stdout`]); for a function that
/// returns `Result<_, CliError>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format!("{}\n", format_args!($($arg)*)).as_bytes())
            .map_err($crate::error::CliError::Output)?
    };
}
pub(crate) use out;

/// How long output may still take after a signal.
pub(crate) const GRACE: Duration = Duration::from_millis(200);

/// The signal that asked us to stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// When output ends, once every probe is detached after a signal.
static DEADLINE: OnceLock<Instant> = OnceLock::new();
/// The stop pipe's write end (-1: none).
static STOP_WRITE: AtomicI32 = AtomicI32::new(-1);
/// The stop pipe's read end (-1: none).
static STOP_READ: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
    let fd = STOP_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: errno is saved and restored around write(2), which is
        // async-signal-safe; the pipe is non-blocking, the byte lives on
        // the stack.
        unsafe {
            let errno = *libc::__errno_location();
            let byte = 1u8;
            let _ = libc::write(fd, (&byte as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// The signal (SIGINT, SIGTERM or SIGHUP) received so far, if any.
pub(crate) fn interrupted() -> Option<i32> {
    Some(SIGNAL.load(Ordering::Relaxed)).filter(|s| *s != 0)
}

/// Catches SIGINT, SIGTERM and SIGHUP from the first moment of `count`,
/// `trace`, `serve`, `latency` and `hist`: every path then detaches,
/// removes its fetch events and ends what it started before exiting with
/// 128 + the signal. Without a stop pipe (no descriptor left) a signal
/// still interrupts a blocked write.
pub(crate) fn catch_signals() {
    if STOP_READ.load(Ordering::Relaxed) < 0 {
        let mut fds = [-1; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0 {
            STOP_READ.store(fds[0], Ordering::Relaxed);
            STOP_WRITE.store(fds[1], Ordering::Relaxed);
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction (no SA_RESTART: a blocked write returns
        // EINTR) with a handler that only stores to an atomic and writes to
        // a pipe (both async-signal-safe) is a valid disposition.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Says that every probe is detached: output after a signal may now wait
/// up to [`GRACE`] for a slow reader.
pub(crate) fn detached() {
    if interrupted().is_some() {
        DEADLINE.get_or_init(|| Instant::now() + GRACE);
    }
}

/// Whether `e` is a write that [`Stdout`] abandoned after a signal.
pub(crate) fn abandoned(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut && interrupted().is_some()
}

fn abandon() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "stdout takes nothing; abandoned after the signal",
    )
}

/// What descriptor 1 is, for how a write to it is kept from blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular file or a block device: a write never waits for a reader.
    File,
    /// A pipe or a FIFO: `PIPE_BUF` bytes fit once `poll` says it has room.
    Pipe,
    /// A socket: sent with `MSG_DONTWAIT`.
    Socket,
    /// A terminal or another device: written through [`nonblocking`].
    Device,
}

/// Standard output that never blocks past a signal (see the module).
#[derive(Debug)]
pub(crate) struct Stdout {
    kind: Kind,
}

/// A second open of what descriptor 1 is, with `O_NONBLOCK` on its own
/// file description (descriptor 1's is shared with the shell and the other
/// programs on the terminal, and stays as it is); `None` where it cannot
/// be opened again.
fn nonblocking() -> Option<RawFd> {
    static FD: OnceLock<RawFd> = OnceLock::new();
    let fd = *FD.get_or_init(|| {
        // SAFETY: open of a NUL-terminated path.
        unsafe {
            libc::open(
                c"/proc/self/fd/1".as_ptr(),
                libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        }
    });
    (fd >= 0).then_some(fd)
}

impl Stdout {
    pub(crate) fn new() -> Stdout {
        // SAFETY: fstat fills a zeroed stat for descriptor 1.
        let kind = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(1, &mut st) != 0 {
                Kind::Pipe
            } else {
                match st.st_mode & libc::S_IFMT {
                    libc::S_IFREG | libc::S_IFBLK => Kind::File,
                    libc::S_IFIFO => Kind::Pipe,
                    libc::S_IFSOCK => Kind::Socket,
                    _ => Kind::Device,
                }
            }
        };
        Stdout { kind }
    }

    /// One write of (a first part of) `buf` that cannot block, once
    /// stdout has said it takes data.
    fn write_once(&self, buf: &[u8]) -> isize {
        // SAFETY: at most `buf.len()` bytes of `buf` are read by each call.
        unsafe {
            match self.kind {
                Kind::File => libc::write(1, buf.as_ptr().cast(), buf.len()),
                Kind::Socket => libc::send(
                    1,
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                ),
                Kind::Device => match nonblocking() {
                    Some(fd) => libc::write(fd, buf.as_ptr().cast(), buf.len()),
                    None => libc::write(1, buf.as_ptr().cast(), buf.len().min(libc::PIPE_BUF)),
                },
                Kind::Pipe => libc::write(1, buf.as_ptr().cast(), buf.len().min(libc::PIPE_BUF)),
            }
        }
    }

    /// Waits until stdout takes data; an error once the grace after a
    /// signal is over.
    fn wait_writable(&mut self) -> io::Result<()> {
        loop {
            let timeout = match (interrupted(), DEADLINE.get()) {
                (None, _) => -1,
                // Still attached: only what stdout takes at once.
                (Some(_), None) => 0,
                (Some(_), Some(deadline)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(abandon());
                    }
                    left.as_millis().clamp(1, i32::MAX as u128) as i32
                }
            };
            let stop: RawFd = match interrupted() {
                // Readable from now on: no use waiting on it.
                Some(_) => -1,
                None => STOP_READ.load(Ordering::Relaxed),
            };
            let mut fds = [
                libc::pollfd {
                    fd: 1,
                    events: libc::POLLOUT,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: poll on two pollfds that live across the call (a
            // negative fd is ignored).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // Writable, or an error or hang-up that write(2) reports.
            if fds[0].revents != 0 {
                return Ok(());
            }
            if timeout == 0 || (timeout > 0 && n == 0) {
                return Err(abandon());
            }
            if fds[1].revents != 0 && interrupted().is_none() {
                // A byte not from our handler (a forked child's, before
                // its exec): emptied, or every later wait would spin.
                let mut buf = [0u8; 64];
                // SAFETY: reads into a live buffer from the non-blocking pipe.
                while unsafe { libc::read(stop, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
            }
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            if self.kind != Kind::File {
                self.wait_writable()?;
            }
            let n = self.write_once(buf);
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                // A signal: the wait above decides what follows.
                io::ErrorKind::Interrupted if self.kind == Kind::File => self.kind = Kind::Pipe,
                io::ErrorKind::Interrupted => {}
                // It said it had room and had none (a terminal whose room
                // is taken by another writer): after a signal, while still
                // attached, that is the end; otherwise wait a little (poll
                // waits for room, and this keeps a device that always says
                // writable from spinning).
                io::ErrorKind::WouldBlock => {
                    if interrupted().is_some() && DEADLINE.get().is_none() {
                        return Err(abandon());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => return Err(e),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes `text` to stdout through [`Stdout`].
pub(crate) fn write_stdout(text: &[u8]) -> io::Result<()> {
    Stdout::new().write_all(text)
}
