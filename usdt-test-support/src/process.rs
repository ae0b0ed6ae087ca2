//! Children: run to completion, or under a deadline that ends them; signals
//! to one process only; waiting for a condition.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
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
            let tree = describe(child.id());
            signal(child.id(), libc::SIGKILL);
            let _ = child.wait();
            panic!("still running after {secs} s:\n{tree}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cmd` run as [`Command::output`] runs it (stdin empty, stdout and stderr
/// collected), for at most `secs`: past that it is killed and the test
/// fails, saying where it waited.
pub fn output_within(cmd: &mut Command, secs: u64) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    collect(child, secs, false)
}

/// Waits for `child`, whose stdout and stderr are pipes, until `secs` have
/// passed (then kills it and fails), and returns what it wrote.
pub fn wait_output(child: Child, secs: u64) -> Output {
    collect(child, secs, false)
}

/// As [`wait_output`], with each line of the child's stderr also written
/// to this process's stderr as it comes (past the test harness's capture:
/// a long run shows its progress, and a hung one where it stopped).
pub fn wait_output_echoing(child: Child, secs: u64) -> Output {
    collect(child, secs, true)
}

fn collect(mut child: Child, secs: u64, echo: bool) -> Output {
    let out = child.stdout.take().map(|r| Drain::new(r, false));
    let err = child.stderr.take().map(|r| Drain::new(r, echo));
    let status = wait_deadline(&mut child, secs);
    let text = |d: Option<Drain>| d.map(Drain::finish).unwrap_or_default();
    Output {
        status,
        stdout: text(out).into_bytes(),
        stderr: text(err).into_bytes(),
    }
}

/// A child's output pipe, read to its end on a thread of its own.
struct Drain {
    text: Receiver<String>,
    /// The pipe, as `/proc/PID/fd/N` links name it: `pipe:[INODE]`.
    pipe: String,
}

impl Drain {
    fn new<R: Read + AsRawFd + Send + 'static>(r: R, echo: bool) -> Drain {
        let pipe = std::fs::read_link(format!("/proc/self/fd/{}", r.as_raw_fd()))
            .map(|l| l.display().to_string())
            .unwrap_or_default();
        let (tx, text) = channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(r);
            let (mut all, mut line) = (Vec::new(), Vec::new());
            while lines.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                if echo {
                    let _ = std::io::stderr().write_all(&line);
                }
                all.append(&mut line);
            }
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        });
        Drain { text, pipe }
    }

    /// What came through the pipe, once the child has ended: its other
    /// ends close within a few seconds, or this fails naming the processes
    /// that still hold one (something the child started and left behind).
    fn finish(self) -> String {
        match self.text.recv_timeout(Duration::from_secs(10)) {
            Ok(text) => text,
            Err(_) => panic!(
                "the child ended, but these processes still hold its output ({}):\n{}",
                self.pipe,
                holders(&self.pipe)
                    .into_iter()
                    .map(describe)
                    .collect::<String>()
            ),
        }
    }
}

/// The processes (other than this one) with `pipe` among their open files.
fn holders(pipe: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == pipe))
        })
        .collect()
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
        .flatten()
    {
        // A thread or the process may end meanwhile: what is left is read.
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    found
}

/// A process and its descendants as they are now, for the message of a
/// test that waited too long: each one's command line, and each thread's
/// state and kernel stack (where it waits).
pub fn describe(pid: u32) -> String {
    let mut text = String::new();
    let mut todo = vec![(pid, 0)];
    while let Some((pid, depth)) = todo.pop() {
        let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
        let cmdline = read(format!("/proc/{pid}/cmdline")).replace('\0', " ");
        text += &format!(
            "{:indent$}{pid} {}\n",
            "",
            cmdline.trim(),
            indent = depth * 2
        );
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = task.path().display().to_string();
            let stat = read(format!("{dir}/stat"));
            // The state follows the command's closing parenthesis.
            let state = stat.rsplit_once(") ").map_or("?", |(_, rest)| &rest[..1]);
            let comm = read(format!("{dir}/comm"));
            let stack: Vec<String> = read(format!("{dir}/stack"))
                .lines()
                .map(|l| l.split_whitespace().nth(1).unwrap_or(l).to_string())
                .collect();
            text += &format!(
                "{:indent$}  thread {} {} {state}: {}\n",
                "",
                task.file_name().to_string_lossy(),
                comm.trim(),
                stack.join(" < "),
                indent = depth * 2
            );
        }
        todo.extend(children(pid).into_iter().map(|c| (c, depth + 1)));
    }
    text
}

/// Whether the process has a `[uprobes-trampoline]` mapping: the kernel
/// optimized a uprobe on a nop5 in it.
pub fn has_trampoline(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| maps.contains("[uprobes-trampoline]"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sh(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs")
    }

    #[test]
    fn output_is_collected_to_the_end() {
        let out = wait_output(sh("echo out; echo err >&2; exit 3"), 10);
        assert_eq!(exit_code(out.status), 3);
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_grandchild_holding_the_output_is_named_not_waited_for() {
        // The shell ends at once; its background sleep keeps stdout open.
        let child = sh("exec 2>/dev/null; sleep 14 & echo started");
        let t = Instant::now();
        let held = std::panic::catch_unwind(|| wait_output(child, 10)).unwrap_err();
        let message = held.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("still hold its output"), "{message}");
        assert!(message.contains("sleep 14"), "{message}");
        assert!(t.elapsed() < Duration::from_secs(14), "{:?}", t.elapsed());
    }

    #[test]
    fn a_child_past_its_deadline_is_described_and_killed() {
        // A shell of its own with a child: the tree is described.
        let mut child = sh("sleep 5; true");
        let pid = child.id();
        let held = std::panic::catch_unwind(move || wait_deadline(&mut child, 1)).unwrap_err();
        let message = held.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("still running after 1 s"), "{message}");
        assert!(
            message.contains(&format!("{pid} sh -c sleep 5; true")),
            "{message}"
        );
        assert!(message.contains(" sleep 5\n"), "{message}");
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }
}
