//! Attaching must never harm the traced program, the machine or the
//! terminal (issue 11), checked with C programs written the way programs
//! outside the project are (`tests/c/`): a program that forks after a hit,
//! signals during and after long attaches, a process mapping `/dev/zero` and
//! a 1 GiB file, hostile probe names, closed pipes, a path with a space, a
//! symlinked command and duplicate notes. Needs root (CI runs as root).
//!
//! Every child has a deadline; signals go only to pids > 0 (`kill(0, ...)`
//! would hit this test's own process group).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use usdt_test_support::c::build_c;
use usdt_test_support::process::{
    children, exit_code as code, reader, signal, wait_deadline, wait_until,
};
use usdt_test_support::{ready, Need, ROOT, SDT};
use usdt_trace::{fork_test, read_semaphore, OptimizedFork};

const USDT: &str = env!("CARGO_BIN_EXE_usdt");

/// Tracing tests one at a time: attaching thousands of sites is slow and
/// the machine is shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// What every tracing test here needs.
const NEEDS: [Need; 2] = [ROOT, SDT];

/// The start of a tracing test: its needs, then its turn. `None` (the test
/// returns) when [`NEEDS`] are missing.
fn tracing_test() -> Option<MutexGuard<'static, ()>> {
    if !ready(&NEEDS) {
        return None;
    }
    Some(serial())
}

fn forker() -> PathBuf {
    build_c("forker", &["forker.c"], &[])
}

fn many() -> PathBuf {
    build_c("many", &["many.c"], &[])
}

fn hostile() -> PathBuf {
    build_c("hostile", &["hostile.c"], &[])
}

/// Runs usdt with a deadline; (exit code, stdout, stderr).
fn usdt(args: &[&str], secs: u64) -> (i32, String, String) {
    let mut child = Command::new(USDT)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let status = wait_deadline(&mut child, secs);
    (code(status), out.join().unwrap(), err.join().unwrap())
}

fn no_panic(stderr: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
}

/// The fetch events (in tracefs) of usdt process `pid`'s group.
fn events_of(pid: u32) -> usize {
    let events = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    let prefix = format!("p:usdt_{pid}_");
    events.lines().filter(|l| l.starts_with(&prefix)).count()
}

fn gone(pid: u32) -> bool {
    !usdt_trace::process_alive(pid)
}

/// The command usdt process `pid` started and holds paused: it appears at
/// once (attaching thousands of sites takes minutes), as usdt's one child.
fn paused_command(pid: u32) -> u32 {
    let mut paused = vec![];
    wait_until(Duration::from_secs(20), || {
        paused = children(pid);
        !paused.is_empty()
    });
    assert_eq!(paused.len(), 1, "the paused command");
    paused[0]
}

/// Closes the input of a program that runs until then (`many`, `mapper`)
/// and checks that it exits cleanly.
fn close_and_wait(mut prog: Child) {
    drop(prog.stdin.take());
    assert!(wait_deadline(&mut prog, 30).success());
}

#[test]
fn a_program_that_forks_survives_count_and_trace_by_default() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = forker();
    let bin = bin.to_str().unwrap();
    let (code, out, err) = usdt(&["count", "--", bin, "1000"], 120);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("child=exit=0"), "{out}");
    // The parent's hits, before and after the fork; not the child's.
    assert!(out.contains("fk:tick 2000"), "{out}");
    let (code, out, err) = usdt(&["trace", "fk:tick", "--", bin, "100"], 120);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("child=exit=0"), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains(" fk:tick ")).count(), 200);
}

#[test]
fn attach_next_obeys_and_warns_in_one_line() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = forker();
    let (code, out, err) = usdt(
        &[
            "count",
            "--attach",
            "next",
            "fk:tick",
            "--",
            bin.to_str().unwrap(),
            "1000",
        ],
        120,
    );
    if fork_test().verdict == OptimizedFork::ChildSurvives {
        assert_eq!(code, 0, "{out}{err}");
        return;
    }
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("usdt: warning: --attach next"), "{err}");
    // Measured on Linux 6.18.44: the child dies at its first hit.
    assert!(out.contains("child=signal=11"), "{out}");
    assert_eq!(code, 1);
}

/// Starts `usdt ARGS -- many` and interrupts it with `sig` after `after`,
/// while it is still attaching the 4000 sites; checks that it exits with
/// 128 + sig and leaves no event and no process behind.
fn interrupt_during_attach(command: &str, sig: i32) {
    let bin = many();
    // The perf engine attaches one site at a time (minutes for 4000 sites);
    // the BPF engine attaches them all in milliseconds, too fast to catch.
    let mut usdt = Command::new(USDT)
        .args([command, "--", bin.to_str().unwrap()])
        .env("USDT_COUNT_ENGINE", "perf")
        .env("USDT_TRACE_ENGINE", "perf")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = usdt.id();
    let err = reader(usdt.stderr.take().unwrap());
    let out = reader(usdt.stdout.take().unwrap());
    let paused = paused_command(pid);
    // Briefly: each event attached by then costs an RCU grace period to
    // remove (seconds for a few dozen, with the machine busy).
    std::thread::sleep(Duration::from_millis(150));
    signal(pid, sig);
    // Detaching waits for the kernel (an RCU grace period per uprobe), and
    // other tracers on the machine share its locks: a generous deadline.
    let status = wait_deadline(&mut usdt, 300);
    let (err, out) = (err.join().unwrap(), out.join().unwrap());
    assert_eq!(code(status), 128 + sig, "{out}{err}");
    assert!(
        !err.contains("counting") && !err.contains("tracing"),
        "{err}"
    );
    no_panic(&err);
    assert!(gone(paused), "the paused command was ended");
    assert_eq!(events_of(pid), 0, "no fetch events left");
    assert!(!out.contains("ready"), "the command never ran: {out}");
}

#[test]
fn signals_during_a_long_attach_leave_nothing_behind() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    for (command, sig) in [("count", libc::SIGTERM), ("trace", libc::SIGINT)] {
        interrupt_during_attach(command, sig);
    }
}

/// A tracer killed outright (SIGKILL) during attach cannot clean up: its
/// paused command must still end by itself (it sees the tracer's end of
/// its pipe close) without running, and the next tracer removes the events
/// left behind.
#[test]
fn a_tracer_killed_during_attach_leaves_no_paused_command() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = many();
    // The perf engine, whose attach of 4000 sites is long enough to kill.
    let mut tracer = Command::new(USDT)
        .args(["trace", "--", bin.to_str().unwrap()])
        .env("USDT_TRACE_ENGINE", "perf")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = tracer.id();
    let out = reader(tracer.stdout.take().unwrap());
    let paused = paused_command(pid);
    // Briefly: every event it leaves costs the next tracer time to remove.
    std::thread::sleep(Duration::from_millis(150));
    signal(pid, libc::SIGKILL);
    wait_deadline(&mut tracer, 300);
    wait_until(Duration::from_secs(60), || gone(paused));
    assert!(gone(paused), "the paused command ended by itself");
    // Its stdout was ours: closed, and nothing ran.
    assert_eq!(out.join().unwrap(), "");
    let (prog, prog_pid, _, _) = start_many();
    let (code, _, err) = usdt(
        &[
            "trace",
            "--limit",
            "1",
            "many:one",
            "-p",
            &prog_pid.to_string(),
        ],
        120,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        events_of(pid),
        0,
        "the next tracer removed the stale events"
    );
    close_and_wait(prog);
}

/// `many` running, with its `ready` line parsed: (child, pid, site
/// semaphore, one semaphore).
fn start_many() -> (Child, u32, u64, u64) {
    let mut child = Command::new(many())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "ready", "{line}");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    (
        child,
        words[1].parse().unwrap(),
        hex(words[2]),
        hex(words[3]),
    )
}

/// Waits until usdt says on stderr that it is counting or tracing.
fn wait_attached(stderr: &mut BufReader<std::process::ChildStderr>) -> String {
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.contains("counting") || line.contains("tracing"),
        "{line}"
    );
    line
}

#[test]
fn signals_after_attach_print_counts_and_restore_semaphores() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let (prog, pid, site_sem, one_sem) = start_many();
    for (command, sig) in [("count", libc::SIGTERM), ("trace", libc::SIGINT)] {
        let mut usdt = Command::new(USDT)
            .args([command, "many:one", "-p", &pid.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(usdt.stderr.take().unwrap());
        let out = reader(usdt.stdout.take().unwrap());
        wait_attached(&mut stderr);
        assert_eq!(read_semaphore(pid, one_sem).unwrap(), 1);
        std::thread::sleep(Duration::from_millis(300));
        signal(usdt.id(), sig);
        let status = wait_deadline(&mut usdt, 60);
        let out = out.join().unwrap();
        assert_eq!(code(status), 128 + sig, "{command}: {out}");
        if command == "count" {
            let n: u64 = out
                .trim()
                .strip_prefix("many:one ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{out}"));
            assert!(n > 0, "{out}");
        } else {
            assert!(out.lines().any(|l| l.contains(" many:one arg0=")), "{out}");
            assert_eq!(events_of(usdt.id()), 0);
        }
        assert_eq!(read_semaphore(pid, one_sem).unwrap(), 0, "{command}");
        assert_eq!(read_semaphore(pid, site_sem).unwrap(), 0, "{command}");
    }
    close_and_wait(prog);
}

#[test]
fn a_killed_tracer_leaves_events_only_until_the_next_one() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let (prog, pid, _, one_sem) = start_many();
    // A killed BPF tracer leaves nothing: the kernel closes its links.
    let mut tracer = Command::new(USDT)
        .args(["trace", "many:one", "-p", &pid.to_string()])
        .env("USDT_TRACE_ENGINE", "bpf")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_attached(&mut BufReader::new(tracer.stderr.take().unwrap()));
    assert_ne!(read_semaphore(pid, one_sem).unwrap(), 0);
    assert_eq!(events_of(tracer.id()), 0);
    signal(tracer.id(), libc::SIGKILL);
    wait_deadline(&mut tracer, 60);
    assert_eq!(read_semaphore(pid, one_sem).unwrap(), 0);
    // The perf engine's tracefs events outlive a killed tracer.
    let mut tracer = Command::new(USDT)
        .args(["trace", "many:one", "-p", &pid.to_string()])
        .env("USDT_TRACE_ENGINE", "perf")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(tracer.stderr.take().unwrap());
    wait_attached(&mut stderr);
    let killed = tracer.id();
    assert_eq!(events_of(killed), 1);
    signal(killed, libc::SIGKILL);
    wait_deadline(&mut tracer, 60);
    // The kernel closed its perf events: the semaphore is back at 0, and the
    // events stay until the next usdt sees their lock file unheld.
    assert_eq!(read_semaphore(pid, one_sem).unwrap(), 0);
    assert_eq!(events_of(killed), 1);
    let (code, _, err) = usdt(
        &[
            "trace",
            "--engine",
            "perf",
            "--limit",
            "1",
            "many:one",
            "-p",
            &pid.to_string(),
        ],
        60,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(events_of(killed), 0, "the stale group was removed");
    close_and_wait(prog);
}

/// Peak RSS in KiB of `usdt ARGS` (with wait4).
fn peak_rss_kib(args: &[&str]) -> (i32, i64) {
    // Reaped below by wait4, which also gives the peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(USDT)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    assert!(pid > 0);
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; waiting for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers for the status and usage.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

#[test]
fn list_of_a_process_mapping_dev_zero_and_a_huge_file_stays_small() {
    if !ready(&[SDT]) {
        return;
    }
    let _serial = serial();
    let bin = build_c("mapper", &["mapper.c"], &[]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let sparse = dir.join("sparse-1g");
    let mut prog = Command::new(&bin)
        .arg(&sparse)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(prog.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let pid = prog.id().to_string();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains("/dev/zero") && maps.contains("sparse-1g"),
        "{maps}"
    );
    // The fork self-test runs once per boot in whichever usdt comes first:
    // not part of what this measures.
    usdt(&["features"], 60);
    let (code, rss) = peak_rss_kib(&["list", "-p", &pid]);
    eprintln!("usdt list -p of /dev/zero and a 1 GiB file: peak RSS {rss} KiB");
    assert_eq!(code, 0);
    assert!(rss < 32 * 1024, "peak RSS {rss} KiB");
    let (code, out, err) = usdt(&["list", "-p", &pid], 30);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mp:tick"), "{out}");
    assert!(
        !out.contains("/dev/zero") && !err.contains("/dev/zero"),
        "{out}{err}"
    );
    let (code, _, err) = usdt(&["list", "/dev/zero"], 30);
    assert_eq!(code, 1);
    assert!(err.contains("not a regular file"), "{err}");
    close_and_wait(prog);
    let _ = std::fs::remove_file(&sparse);
}

#[test]
fn hostile_names_print_escaped_and_json_stays_exact() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = hostile();
    let bin = bin.to_str().unwrap();
    let escaped = "evil\\x1b]0;pwned\\x07:clear\\x1b[2J\\x0aok:normal\\x20999999";
    let check = |out: &str| {
        assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
        assert!(!out.lines().any(|l| l.starts_with("ok:normal")), "{out}");
        assert!(out.contains(escaped), "{out}");
    };
    let (code, out, _) = usdt(&["list", bin], 30);
    assert_eq!(code, 0);
    check(&out);
    let (code, out, _) = usdt(&["count", "--", bin, "3"], 60);
    assert_eq!(code, 0);
    check(&out);
    assert!(out.contains(&format!("{escaped} 3")), "{out}");
    let (code, out, _) = usdt(&["trace", "--", bin, "1"], 60);
    assert_eq!(code, 0);
    check(&out);
    let (code, out, _) = usdt(&["trace", "--json", "evil*", "--", bin, "1"], 60);
    assert_eq!(code, 0);
    let hit: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        hit["probe"],
        "evil\x1b]0;pwned\x07:clear\x1b[2J\nok:normal 999999"
    );
    // An error naming the probes escapes them too.
    let (code, _, err) = usdt(&["count", "nomatch", "--", bin, "1"], 60);
    assert_eq!(code, 1);
    assert!(!err.contains('\x1b'), "{err:?}");
}

#[test]
fn duplicate_notes_are_one_uprobe() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = hostile();
    let (code, out, _) = usdt(&["count", "dup:*", "--", bin.to_str().unwrap(), "7"], 60);
    assert_eq!(code, 0);
    assert_eq!(out, "dup:tick 7\n");
    let (code, out, _) = usdt(&["trace", "dup:*", "--", bin.to_str().unwrap(), "7"], 60);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 7, "{out}");
}

/// Reads one line of `usdt ARGS`'s stdout, closes it, and returns the exit
/// code and stderr.
fn first_line_then_close(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(USDT)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = reader(child.stderr.take().unwrap());
    {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(!line.is_empty());
    }
    let status = wait_deadline(&mut child, 60);
    (code(status), err.join().unwrap())
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = build_c("many-sites-listed", &["many.c"], &[]);
    // 4001 site rows: more than a pipe holds.
    let (code, err) = first_line_then_close(&["list", "--sites", bin.to_str().unwrap()]);
    assert_eq!(code, 141, "{err}");
    assert_eq!(err, "");
    // A few lines fit in the pipe: written before it closes, or not.
    let (code, err) = first_line_then_close(&["features"]);
    assert!(code == 0 || code == 141, "{code}: {err}");
    assert_eq!(err, "");
    let (prog, pid, _, _) = start_many();
    let (code, err) = first_line_then_close(&[
        "count",
        "--interval",
        "0.05",
        "many:one",
        "-p",
        &pid.to_string(),
    ]);
    assert_eq!(code, 141, "{err}");
    assert_eq!(err.lines().count(), 1, "only the counting line: {err}");
    no_panic(&err);
    close_and_wait(prog);
}

#[test]
fn numeric_options_are_checked_in_words() {
    for (args, words) in [
        (vec!["count", "--interval", "1e20", "-p", "1"], "between"),
        (vec!["count", "--interval", "nan", "-p", "1"], "between"),
        (
            vec!["count", "--interval", "x", "-p", "1"],
            "number of seconds",
        ),
        (
            vec!["count", "--duration", "1e20", "-p", "1"],
            "positive number of seconds",
        ),
        (vec!["count", "-p", "0"], "not a process id"),
        (vec!["count", "-p", "-1"], "not a process id"),
        (vec!["trace", "--limit", "0", "-p", "1"], "positive"),
    ] {
        let (code, out, err) = usdt(&args, 30);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        no_panic(&err);
    }
}

#[test]
fn a_path_with_a_space_is_traced_exactly() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = build_c("spaced", &["spaced.c"], &[]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(std::process::id().to_string())
        .join("dir with space");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("spaced");
    std::fs::copy(&bin, &copy).unwrap();
    let n = 300;
    let (code, out, err) = usdt(&["trace", "--", copy.to_str().unwrap(), &n.to_string()], 60);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "", "no fallback to say");
    let values: Vec<String> = out
        .lines()
        .map(|l| l.rsplit_once("arg0=").unwrap().1.to_string())
        .collect();
    let want: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    assert_eq!(values, want, "read by the kernel at each hit");
}

#[test]
fn a_symlinked_command_keeps_its_name() {
    let Some(_serial) = tracing_test() else {
        return;
    };
    let bin = forker();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("forker-by-another-name");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&bin, &link).unwrap();
    let link = link.to_str().unwrap();
    let (code, out, err) = usdt(&["count", "fk:tick", "--", link, "5"], 60);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("argv0={link}\n")), "{out}");
    assert!(out.contains("fk:tick 10"), "{out}");
}
