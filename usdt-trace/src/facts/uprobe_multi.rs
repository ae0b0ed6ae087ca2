//! Whether this kernel has BPF uprobe_multi links, and what their process
//! filter covers: asked of the kernel once per process, with the smallest
//! program and links that the kernel refuses in telling ways (as libbpf's
//! `probe_uprobe_multi_link` does).

use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{mpsc, OnceLock};

use crate::error::BpfError;
use crate::sys::bpf::{bpf_fd, LinkCreateAttr, BPF_LINK_CREATE, BPF_TRACE_UPROBE_MULTI};
use crate::sys::bpf::{load_uprobe_multi_program, RETURN_ZERO};

/// What uprobe_multi links can do on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UprobeMulti {
    /// Present; a process filter counts every thread of the process.
    Process,
    /// Present, but the process filter takes a thread id and counts that
    /// thread only (kernels before the fix "bpf: fix multi-uprobe PID
    /// filtering logic", 2024).
    ThreadOnly,
    /// Missing (Linux before 6.6, or built without BPF): why, in words.
    Absent(String),
    /// Could not be asked (such as without privilege): why, in words.
    Unknown(String),
}

impl UprobeMulti {
    /// Whether the kernel has uprobe_multi links (whatever their process
    /// filter covers).
    pub fn present(&self) -> bool {
        matches!(self, UprobeMulti::Process | UprobeMulti::ThreadOnly)
    }

    /// Whether a uprobe_multi link can count every thread of one process.
    pub fn counts_processes(&self) -> bool {
        *self == UprobeMulti::Process
    }
}

impl fmt::Display for UprobeMulti {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UprobeMulti::Process => {
                f.write_str("yes (one link for many sites; a pid filter covers every thread)")
            }
            UprobeMulti::ThreadOnly => f.write_str(
                "yes, but this kernel's pid filter covers only the thread whose id it is given",
            ),
            UprobeMulti::Absent(why) => write!(f, "no: {why}"),
            UprobeMulti::Unknown(why) => write!(f, "unknown: {why}"),
        }
    }
}

/// What uprobe_multi links can do on this kernel (asked once, then cached).
pub fn uprobe_multi_support() -> UprobeMulti {
    static SUPPORT: OnceLock<UprobeMulti> = OnceLock::new();
    SUPPORT.get_or_init(ask_the_kernel).clone()
}

fn ask_the_kernel() -> UprobeMulti {
    let loaded = load_uprobe_multi_program(&RETURN_ZERO, "usdt_probe", None);
    let prog = match loaded.map_err(|e| BpfError::from_os("loading the program usdt_probe", e)) {
        Ok(prog) => prog,
        Err(BpfError::Unsupported) => {
            return UprobeMulti::Absent(BpfError::Unsupported.to_string())
        }
        Err(e) => return UprobeMulti::Unknown(e.to_string()),
    };
    // A directory is refused with EBADF only by a kernel that knows the
    // attach type (as libbpf probes it); older ones say EINVAL.
    match link(&prog, c"/", 0) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => {}
        Ok(_) => {}
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::EPERM) => UprobeMulti::Unknown(BpfError::NotPermitted.to_string()),
                Some(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS | 524) => {
                    UprobeMulti::Absent(BpfError::Unsupported.to_string())
                }
                _ => UprobeMulti::Unknown(format!("asking for uprobe_multi links: {e}")),
            }
        }
    }
    // The id of a thread that is not its process's main thread: a kernel
    // that filters by process finds no process with it (ESRCH); one that
    // filters by thread accepts it.
    let (tid_tx, tid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    // A process allowed no more threads (a pids cgroup at its limit) cannot
    // be asked: the answer is unknown, not a panic.
    let spawned = std::thread::Builder::new().spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() } as u32);
        let _ = done_rx.recv();
    });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => {
            return UprobeMulti::Unknown(format!(
                "asking what a pid filter covers: cannot start a thread: {e}"
            ))
        }
    };
    let support = match tid_rx.recv() {
        Ok(tid) => match link(&prog, c"/proc/self/exe", tid) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => UprobeMulti::Process,
            Ok(_) => UprobeMulti::ThreadOnly,
            Err(e) => UprobeMulti::Unknown(format!("asking what a pid filter covers: {e}")),
        },
        Err(_) => UprobeMulti::Unknown("asking what a pid filter covers: no thread".into()),
    };
    drop(done_tx);
    let _ = thread.join();
    support
}

/// A link of `prog` at offset 0 of `path`, filtered to `pid` (0: none).
fn link(prog: &OwnedFd, path: &CStr, pid: u32) -> Result<OwnedFd, crate::sys::SyscallError> {
    let offsets = [0u64];
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        path: path.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        cnt: 1,
        pid,
        ..LinkCreateAttr::default()
    };
    // SAFETY: the path and the offset live until the call returns.
    unsafe { bpf_fd(BPF_LINK_CREATE, &mut attr) }
}
