//! Signals are final (issue 23): SIGINT and SIGTERM end `trace`, `count`,
//! `serve` and `hist` within a second while their stdout is a full pipe
//! nobody reads, and the probes are detached (the semaphore the kernel
//! raised is 0 again, no tracefs event of theirs is left). Nothing is left
//! behind: no lock file after `trace`, and the events of a SIGKILLed `trace`
//! are swept by the next `count`. No panic: `usdt features` and `usdt count
//! -- PROGRAM` where no thread or process can be created (a pids cgroup at
//! `pids.max` 1) end with a plain message. And the smaller defects: a
//! command that is a directory, FIFO or device says so; `--help` says that
//! the processes a command forks are not counted.
//! Needs root (CI runs as root).

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use usdt_test_support::process::{exit_code, signal, wait_deadline, wait_until};
use usdt_test_support::{ready, target_tmp, Need, CC, ROOT, SDT};
use usdt_trace::read_semaphore;

const USDT: &str = env!("CARGO_BIN_EXE_usdt");

/// A program firing `sig:tick` (with a semaphore; its argument in memory,
/// so that `trace --engine perf` defines a tracefs event) as long as a
/// tracer is attached; `ticker N` fires it N times and exits.
const TICKER: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

__extension__ unsigned short sig_tick_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

int main(int argc, char **argv) {
    if (argc > 1) {
        for (long i = 0; i < atol(argv[1]); i++)
            STAP_PROBE1(sig, tick, i);
        return 0;
    }
    printf("ready %d %p\n", (int)getpid(), (void *)&sig_tick_semaphore);
    fflush(stdout);
    alarm(60);
    for (long i = 0;; i++) {
        volatile long v = i;
        if (sig_tick_semaphore)
            STAP_PROBE1(sig, tick, v);
        if (i % 16 == 0)
            usleep(1000);
    }
}
"#;

/// One test at a time: they measure how fast usdt ends.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> Option<MutexGuard<'static, ()>> {
    const NEEDS: [Need; 3] = [ROOT, SDT, CC];
    if !ready(&NEEDS) {
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The ticker, compiled once per test process.
fn ticker() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = target_tmp().join(format!("signals-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let source = dir.join("ticker.c");
            std::fs::write(&source, TICKER).unwrap();
            let out = dir.join("ticker");
            let status = Command::new("cc")
                .args(["-O2", "-o"])
                .arg(&out)
                .arg(&source)
                .status()
                .unwrap();
            assert!(status.success(), "cc failed on ticker.c");
            out
        })
        .clone()
}

/// A running ticker: its pid and its semaphore's address.
struct Ticker {
    child: Child,
    pid: u32,
    semaphore: u64,
}

impl Ticker {
    fn start() -> Ticker {
        let mut child = Command::new(ticker())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut words = line.split_whitespace().skip(1);
        let pid = words.next().unwrap().parse().unwrap();
        let addr = words.next().unwrap().trim_start_matches("0x");
        let semaphore = u64::from_str_radix(addr, 16).unwrap();
        Ticker {
            child,
            pid,
            semaphore,
        }
    }

    fn semaphore(&self) -> u16 {
        read_semaphore(self.pid, self.semaphore).unwrap()
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipe whose buffer is full and whose read end nobody reads (held
/// here): what a stuck consumer of `usdt trace | ...` looks like.
fn full_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both are fresh descriptors owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on an open descriptor.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let chunk = [b'x'; 4096];
    // SAFETY: writes from a live buffer until the pipe is full (EAGAIN).
    while unsafe { libc::write(write.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) } > 0 {}
    // SAFETY: as above; blocking again, as a shell's pipe is.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) };
    (read, write)
}

/// Whether tracefs still has a uprobe event of the `usdt` process `pid`.
fn has_events_of(pid: u32) -> bool {
    let group = format!("p:usdt_{pid}_");
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .filter_map(|root| std::fs::read_to_string(Path::new(root).join("uprobe_events")).ok())
        .any(|events| events.lines().any(|l| l.starts_with(&group)))
}

/// Starts `usdt ARGS` on the ticker with stdout a full pipe, waits until
/// it has attached (the semaphore is up) and `settle` more, sends `sig`,
/// and checks that it ends within a second with 128 + `sig`, detached.
fn ends_at_once(args: &[&str], sig: i32, settle: Duration) {
    let (_read, write) = full_pipe();
    ends_at_once_to(args, sig, settle, Stdio::from(write));
}

/// A terminal nobody reads: the slave side of a pseudo-terminal whose
/// master (returned, to be held open) is never read.
fn unread_terminal() -> (OwnedFd, OwnedFd) {
    // SAFETY: posix_openpt, grantpt, unlockpt and ptsname_r on the fresh
    // master; open of the NUL-terminated slave path.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0);
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 64];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(slave >= 0);
        (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave))
    }
}

/// [`ends_at_once`] with stdout `stdout`.
fn ends_at_once_to(args: &[&str], sig: i32, settle: Duration, stdout: Stdio) {
    let ticker = Ticker::start();
    let pid = ticker.pid.to_string();
    let mut usdt = Command::new(USDT)
        .args(args)
        .args(["-p", &pid])
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = usdt_test_support::process::reader(usdt.stderr.take().unwrap());
    let attached = wait_until(Duration::from_secs(60), || {
        ticker.semaphore() > 0 || usdt.try_wait().unwrap().is_some()
    });
    assert!(
        attached && ticker.semaphore() > 0,
        "usdt {args:?} did not attach"
    );
    std::thread::sleep(settle);
    let usdt_pid = usdt.id();
    let sent = Instant::now();
    signal(usdt_pid, sig);
    let status = wait_deadline(&mut usdt, 20);
    let took = sent.elapsed();
    let stderr = stderr.join().unwrap();
    assert!(
        took < Duration::from_secs(1),
        "usdt {args:?} took {took:?} to end after signal {sig}; stderr:\n{stderr}"
    );
    assert_eq!(
        exit_code(status),
        128 + sig,
        "usdt {args:?}; stderr:\n{stderr}"
    );
    assert_eq!(
        ticker.semaphore(),
        0,
        "usdt {args:?} left its probes attached"
    );
    assert!(
        !has_events_of(usdt_pid),
        "usdt {args:?} left its tracefs events"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn trace_ends_on_a_signal_with_a_full_pipe() {
    let Some(_turn) = serial() else { return };
    for engine in ["perf", "bpf"] {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            ends_at_once(
                &["trace", "--engine", engine, "sig:tick"],
                sig,
                Duration::from_secs(1),
            );
        }
    }
}

#[test]
fn trace_ends_on_a_signal_with_a_terminal_nobody_reads() {
    let Some(_turn) = serial() else { return };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let (_master, slave) = unread_terminal();
        ends_at_once_to(
            &["trace", "sig:tick"],
            sig,
            Duration::from_secs(1),
            Stdio::from(slave),
        );
    }
}

/// A socket nobody reads: one end of a stream socket pair whose other end
/// (returned, to be held open) is never read.
fn unread_socket() -> (OwnedFd, OwnedFd) {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two fresh descriptors into `fds`.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(made, 0);
    // SAFETY: both descriptors are fresh and owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[test]
fn trace_ends_on_a_signal_with_a_socket_nobody_reads() {
    let Some(_turn) = serial() else { return };
    for engine in ["perf", "bpf"] {
        let (_peer, end) = unread_socket();
        ends_at_once_to(
            &["trace", "--engine", engine, "sig:tick"],
            libc::SIGTERM,
            Duration::from_secs(1),
            Stdio::from(end),
        );
    }
}

#[test]
fn count_ends_on_a_signal_with_a_full_pipe() {
    let Some(_turn) = serial() else { return };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        ends_at_once(&["count", "sig:tick"], sig, Duration::from_millis(300));
    }
    // Printing every 100 ms into the full pipe.
    ends_at_once(
        &["count", "--interval", "0.1", "sig:tick"],
        libc::SIGTERM,
        Duration::from_millis(500),
    );
}

#[test]
fn serve_and_hist_end_on_a_signal() {
    let Some(_turn) = serial() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let listen = format!("127.0.0.1:{port}");
    ends_at_once(
        &["serve", "--listen", &listen, "sig:tick"],
        libc::SIGTERM,
        Duration::from_millis(300),
    );
    ends_at_once(
        &["hist", "sig:tick", "arg0"],
        libc::SIGINT,
        Duration::from_millis(300),
    );
}

/// The pids controller's directory: cgroup v1's `pids` hierarchy, or the
/// v2 root when it offers `pids` to its children.
fn pids_root() -> Option<PathBuf> {
    let v1 = Path::new("/sys/fs/cgroup/pids");
    if v1.join("cgroup.procs").exists() {
        return Some(v1.to_path_buf());
    }
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control")).ok()?;
    controllers
        .split_whitespace()
        .any(|c| c == "pids")
        .then(|| v2.to_path_buf())
}

/// `usdt ARGS` run in a new pids cgroup with `pids.max` 1: no thread and
/// no process can be created. (exit code, stdout, stderr).
fn in_pids_cgroup(args: &[&str]) -> Option<(i32, String, String)> {
    let root = pids_root()?;
    let cgroup = root.join(format!("usdt-test-{}", std::process::id()));
    std::fs::create_dir_all(&cgroup).unwrap();
    std::fs::write(cgroup.join("pids.max"), "1").unwrap();
    // The shell moves itself in, then becomes usdt.
    let script = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cgroup.display());
    let out = Command::new("sh")
        .args(["-c", &script, "sh", USDT])
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let _ = wait_until(Duration::from_secs(5), || {
        std::fs::remove_dir(&cgroup).is_ok()
    });
    Some((
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn no_thread_or_process_is_no_panic() {
    let Some(_turn) = serial() else { return };
    let Some((code, out, err)) = in_pids_cgroup(&["features"]) else {
        eprintln!("no pids cgroup controller here: skipped");
        return;
    };
    assert!(!err.contains("panicked") && code != 101, "{code}\n{err}");
    // The question that needs a thread has no answer, and says why.
    assert!(
        code == 0 && out.contains("BPF uprobe_multi links: unknown"),
        "{code}\n{out}\n{err}"
    );
    let ticker = ticker();
    let (code, _, err) = in_pids_cgroup(&["count", "--", ticker.to_str().unwrap(), "5"]).unwrap();
    assert!(!err.contains("panicked") && code == 1, "{code}\n{err}");
    assert!(
        err.starts_with("usdt: ") && err.lines().count() == 1,
        "{err}"
    );
}

/// The lock files of `usdt` process `pid`'s tracefs event group.
fn lock_files_of(pid: u32) -> Vec<String> {
    let prefix = format!("usdt_{pid}_");
    std::fs::read_dir("/run/usdt/events")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn trace_leaves_nothing_and_a_killed_ones_events_are_swept() {
    let Some(_turn) = serial() else { return };
    let ticker = Ticker::start();
    let pid = ticker.pid.to_string();
    let trace = |ticker: &Ticker| {
        let usdt = Command::new(USDT)
            .args(["trace", "--engine", "perf", "-p", &pid, "sig:tick"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let attached = wait_until(Duration::from_secs(60), || {
            ticker.semaphore() > 0 && has_events_of(usdt.id())
        });
        assert!(attached, "trace did not attach");
        assert_eq!(lock_files_of(usdt.id()).len(), 1);
        usdt
    };
    // Ended by a signal: its event and its lock file are gone.
    let mut usdt = trace(&ticker);
    signal(usdt.id(), libc::SIGINT);
    assert_eq!(exit_code(wait_deadline(&mut usdt, 20)), 130);
    assert!(!has_events_of(usdt.id()));
    assert_eq!(lock_files_of(usdt.id()), Vec::<String>::new());
    // Killed: both stay, until the next `count` (BPF, which defines no
    // events of its own) sweeps them.
    let mut usdt = trace(&ticker);
    signal(usdt.id(), libc::SIGKILL);
    wait_deadline(&mut usdt, 20);
    assert!(has_events_of(usdt.id()));
    let out = Command::new(USDT)
        .args(["count", "--engine", "bpf", "--duration", "0.2", "-p", &pid])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !has_events_of(usdt.id()),
        "count left a killed trace's events"
    );
    assert_eq!(lock_files_of(usdt.id()), Vec::<String>::new());
}

#[test]
fn a_command_that_is_no_program_says_what_it_is() {
    let dir = target_tmp().join(format!("signals-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    let _ = std::fs::remove_file(&fifo);
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, what) in [
        ("/dev/zero", "is a character device"),
        (dir.to_str().unwrap(), "is a directory"),
        (fifo.to_str().unwrap(), "is a FIFO"),
        ("/nonexistent/program", "does not exist"),
    ] {
        let out = Command::new(USDT)
            .args(["count", "--", path])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(path) && err.contains(what), "{path}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_says_forked_processes_are_not_counted() {
    for command in ["count", "trace"] {
        let out = Command::new(USDT)
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("not the processes it forks"),
            "{command}: {help}"
        );
    }
}

#[test]
fn a_closed_stderr_is_no_panic() {
    let Some(_turn) = serial() else { return };
    let ticker = Ticker::start();
    let (read, write) = full_pipe();
    drop(read);
    let out = Command::new(USDT)
        .args(["count", "--duration", "0.2", "-p", &ticker.pid.to_string()])
        .stderr(Stdio::from(write))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("sig:tick "));
}

#[test]
fn a_duration_past_the_clock_is_no_panic() {
    let Some(_turn) = serial() else { return };
    let ticker = ticker();
    for command in [&["hist", "sig:tick", "arg0"][..], &["count", "sig:tick"]] {
        let out = Command::new(USDT)
            .args(command)
            .args(["--duration", "1.5e19", "--"])
            .arg(&ticker)
            .arg("5")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{command:?}: {err}");
    }
}
