//! Children: run to completion, or under a deadline that ends them; signals
//! to one process only; waiting for a condition.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs a command to completion, failing the test with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Waits up to 10 s for `cond`, failing the test after that.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(Duration::from_secs(10), cond),
        "timed out waiting for {what}"
    );
}

/// Polls `cond` every 10 ms for up to `limit`; whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` to `pid`, never to a process group (`kill(0, ...)` would hit
/// the test's own).
pub fn signal(pid: u32, sig: i32) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    assert!(pid > 0, "refusing to signal pid {pid}");
    // SAFETY: signalling one process by a positive pid.
    unsafe { libc::kill(pid, sig) };
}

/// Waits for `child` until `secs` have passed, then kills it and fails.
pub fn wait_deadline(child: &mut Child, secs: u64) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            signal(child.id(), libc::SIGKILL);
            let _ = child.wait();
            panic!("still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child`, whose stdout and stderr are pipes, until `secs` have
/// passed (then kills it and fails), and returns what it wrote.
pub fn wait_output(mut child: Child, secs: u64) -> Output {
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let status = wait_deadline(&mut child, secs);
    let text = |h: Option<JoinHandle<String>>| h.map(|h| h.join().unwrap()).unwrap_or_default();
    Output {
        status,
        stdout: text(out).into_bytes(),
        stderr: text(err).into_bytes(),
    }
}

/// Reads `r` to its end on a thread of its own (so that a full pipe never
/// stalls the child), into the string the handle joins to.
pub fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// The shell's exit code: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The children of a process (`/proc/PID/task/*/children`).
pub fn children(pid: u32) -> Vec<u32> {
    let mut found = vec![];
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let path = task.unwrap().path().join("children");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        found.extend(text.split_whitespace().map(|p| p.parse::<u32>().unwrap()));
    }
    found
}

/// Whether the process has a `[uprobes-trampoline]` mapping: the kernel
/// optimized a uprobe on a nop5 in it.
pub fn has_trampoline(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| maps.contains("[uprobes-trampoline]"))
        .unwrap_or(false)
}
