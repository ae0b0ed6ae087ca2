//! Targets that change under the tracer, traced with a program written
//! here (C, `<sys/sdt.h>` probes `rel:a` and `rel:b`): a process whose
//! binary was deleted (`-p`, read through `/proc/PID/map_files`), a binary
//! replaced by a new file at its path under `--all`, and a process that
//! executes another file (`-- CMD` and `-p`, both engines: stopped at the
//! exec until the new file's sites, and its libraries', are attached, so
//! counts are exact).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::Duration;

use usdt_test_support::cli::parse_counts;
use usdt_test_support::process::{reader, signal, wait_deadline};
use usdt_test_support::{ready, ROOT, SDT};

const USDT: &str = env!("CARGO_BIN_EXE_usdt");

/// The program: runs its steps in order.
///
/// - `await PATH`: waits until PATH exists (the test creates it once usdt
///   is attached).
/// - `fire A B`: fires `rel:a` A times and `rel:b` B times.
/// - `exec PATH ARGS...`: executes PATH with the rest as its arguments.
const PROGRAM: &str = r#"
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "await") && i + 1 < argc) {
            const char *path = argv[++i];
            struct stat st;
            while (stat(path, &st) != 0)
                usleep(1000);
        } else if (!strcmp(argv[i], "fire") && i + 2 < argc) {
            int a = atoi(argv[i + 1]), b = atoi(argv[i + 2]);
            for (int k = 0; k < a; k++)
                STAP_PROBE1(rel, a, k);
            for (int k = 0; k < b; k++)
                STAP_PROBE1(rel, b, k);
            i += 2;
        } else if (!strcmp(argv[i], "exec") && i + 1 < argc) {
            execv(argv[i + 1], &argv[i + 1]);
            perror("execv");
            return 127;
        } else {
            fprintf(stderr, "bad step %s\n", argv[i]);
            return 2;
        }
    }
    return 0;
}
"#;

/// A directory of this test process's own.
fn scratch(name: &str) -> PathBuf {
    let dir = usdt_test_support::target_tmp()
        .join(format!("targets-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The program, built once per test process.
fn program() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = scratch("build");
        let source = dir.join("rel.c");
        std::fs::write(&source, PROGRAM).unwrap();
        let exe = dir.join("rel");
        let out = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&source)
            .output()
            .expect("cc runs");
        assert!(
            out.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    })
}

/// A copy of the program at `path`: another file (another inode).
fn copy_to(path: &Path) {
    std::fs::copy(program(), path).unwrap();
}

/// `usdt ARGS`, its stderr read line by line as it comes.
struct Usdt {
    child: Child,
    lines: Receiver<String>,
    stderr: Vec<String>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Usdt {
    fn start(args: &[&str]) -> Usdt {
        let mut child = Command::new(USDT)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = reader(child.stdout.take().unwrap());
        let err = child.stderr.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Usdt {
            child,
            lines,
            stderr: vec![],
            stdout: Some(stdout),
        }
    }

    /// Waits up to 30 s for a line of stderr that contains `text`.
    fn wait_line(&mut self, text: &str) {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.stderr.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => {
                    signal(self.child.id(), libc::SIGKILL);
                    panic!("no line with {text:?} in:\n{}", self.stderr.join("\n"));
                }
            }
        }
    }

    /// Waits for it to end (after SIGINT when `interrupt`): its code, its
    /// stdout and all of its stderr.
    fn finish(mut self, interrupt: bool) -> (i32, String, String) {
        if interrupt {
            signal(self.child.id(), libc::SIGINT);
        }
        let status = wait_deadline(&mut self.child, 60);
        let out = self.stdout.take().unwrap().join().unwrap();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stderr.push(line);
        }
        let code = usdt_test_support::process::exit_code(status);
        (code, out, self.stderr.join("\n"))
    }
}

/// Runs the program at `exe` with `args` (it waits for a file first).
fn spawn(exe: &Path, args: &[&str]) -> Child {
    Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn counts_of(out: &str) -> (u64, u64) {
    let counts = parse_counts(out);
    let get = |p: &str| counts.get(p).copied().unwrap_or(0);
    (get("rel:a"), get("rel:b"))
}

/// A process whose binary was deleted (as an upgrade leaves it) is listed
/// and counted exactly by pid, on both engines.
#[test]
fn a_deleted_binary_is_listed_and_counted_by_pid() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    for engine in ["perf", "bpf"] {
        let dir = scratch(&format!("deleted-{engine}"));
        let (exe, go) = (dir.join("prog"), dir.join("go"));
        copy_to(&exe);
        let mut prog = spawn(&exe, &["await", go.to_str().unwrap(), "fire", "5", "3"]);
        std::fs::remove_file(&exe).unwrap();
        let pid = prog.id().to_string();
        // Its maps now say "(deleted)".
        usdt_test_support::wait_for("the mapping of the deleted file", || {
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .is_ok_and(|m| m.contains(" (deleted)"))
        });
        let list = Command::new(USDT)
            .args(["list", "-p", &pid])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&list.stdout);
        assert!(list.status.success(), "{engine}: list: {text}");
        assert!(text.contains("prog (deleted)"), "{text}");
        assert!(text.lines().any(|l| l.starts_with("rel:a ")), "{text}");
        let mut usdt = Usdt::start(&["count", "--engine", engine, "rel:*", "-p", &pid]);
        usdt.wait_line("usdt: counting 2 sites of process");
        std::fs::write(&go, "").unwrap();
        assert!(wait_deadline(&mut prog, 60).success());
        let (code, out, err) = usdt.finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        assert_eq!(counts_of(&out), (5, 3), "{engine}: {out}\n{err}");
    }
}

/// `usdt trace -p` of a process whose binary was deleted: every hit.
#[test]
fn a_deleted_binary_is_traced_by_pid() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    for engine in ["perf", "bpf"] {
        let dir = scratch(&format!("deleted-trace-{engine}"));
        let (exe, go) = (dir.join("prog"), dir.join("go"));
        copy_to(&exe);
        let mut prog = spawn(&exe, &["await", go.to_str().unwrap(), "fire", "3", "2"]);
        std::fs::remove_file(&exe).unwrap();
        let pid = prog.id().to_string();
        let mut usdt = Usdt::start(&["trace", "--engine", engine, "rel:*", "-p", &pid]);
        usdt.wait_line("usdt: tracing 2 sites of process");
        std::fs::write(&go, "").unwrap();
        assert!(wait_deadline(&mut prog, 60).success());
        let (code, out, err) = usdt.finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        let hits: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" rel:").map(|(_, hit)| hit))
            .collect();
        assert_eq!(
            hits,
            ["a arg0=0", "a arg0=1", "a arg0=2", "b arg0=0", "b arg0=1"],
            "{engine}: {out}\n{err}"
        );
    }
}

/// `count --all PATH` while a deployment renames a new file over PATH: the
/// process still running the old file and one started from the new file
/// are both counted, and one line says so.
#[test]
fn a_binary_replaced_under_all_is_followed() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    for engine in ["perf", "bpf"] {
        let dir = scratch(&format!("replaced-{engine}"));
        let (exe, go) = (dir.join("prog"), dir.join("go"));
        copy_to(&exe);
        let mut old = spawn(&exe, &["await", go.to_str().unwrap(), "fire", "5", "3"]);
        let path = exe.to_str().unwrap();
        let mut usdt = Usdt::start(&["count", "--engine", engine, "rel:*", "--all", path]);
        usdt.wait_line("usdt: counting 2 sites in every process of");
        let new = dir.join("prog.new");
        copy_to(&new);
        std::fs::rename(&new, &exe).unwrap();
        usdt.wait_line("a new file is at");
        let mut fresh = spawn(&exe, &["fire", "7", "4"]);
        assert!(wait_deadline(&mut fresh, 60).success());
        std::fs::write(&go, "").unwrap();
        assert!(wait_deadline(&mut old, 60).success());
        let (code, out, err) = usdt.finish(true);
        assert_eq!(code, 130, "{engine}: {err}");
        assert_eq!(counts_of(&out), (12, 7), "{engine}: {out}\n{err}");
        assert_eq!(err.matches("a new file is at").count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "usdt: a new file is at {path}: counting its 2 sites too; \
                 processes still running the old file stay traced"
            )),
            "{err}"
        );
    }
}

/// The line that says the program executed was attached while the process
/// was stopped at the exec.
const EXECUTED: &str = "usdt: the process executed a program that maps ";

/// `count -- prog fire 5 3 exec OTHER fire 7 4`: the command is stopped at
/// the exec, OTHER's sites are attached, every hit is counted.
#[test]
fn exec_into_another_file_is_followed_for_a_command() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let dir = scratch("exec-command");
    let other = dir.join("other");
    copy_to(&other);
    let other = other.to_str().unwrap();
    let prog = program().to_str().unwrap();
    for engine in ["perf", "bpf"] {
        let args = [
            "count", "--engine", engine, "rel:*", "--", prog, "fire", "5", "3", "exec", other,
            "fire", "7", "4",
        ];
        let (code, out, err) = Usdt::start(&args).finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        assert_eq!(counts_of(&out), (12, 7), "{engine}: {out}\n{err}");
        let line = format!("{EXECUTED}{other}: counting its 2 sites");
        assert_eq!(err.lines().filter(|l| *l == line).count(), 1, "{err}");
        assert!(!err.contains("missed"), "{err}");

        let args = [
            "trace", "--engine", engine, "rel:*", "--", prog, "fire", "2", "1", "exec", other,
            "fire", "1", "2",
        ];
        let (code, out, err) = Usdt::start(&args).finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        let hits: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" rel:").map(|(_, hit)| hit))
            .collect();
        assert_eq!(
            hits,
            ["a arg0=0", "a arg0=1", "b arg0=0", "a arg0=0", "b arg0=0", "b arg0=1"],
            "{engine}: {out}\n{err}"
        );
        assert!(
            err.contains(&format!("{EXECUTED}{other}: tracing its 2 sites")),
            "{err}"
        );
    }
}

/// A program executed with a shared library that has probes (and a
/// semaphore): the library, mapped only after the exec stop, is attached
/// at the stop too, as a command's are before it starts.
#[test]
fn exec_into_a_program_with_libraries_counts_them_all() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let cdemo = usdt_test_support::c::cdemo();
    let prog = program().to_str().unwrap();
    for engine in ["perf", "bpf"] {
        let args = [
            "count",
            "--engine",
            engine,
            "--",
            prog,
            "fire",
            "1",
            "1",
            "exec",
            cdemo.to_str().unwrap(),
            "5",
            "3",
            "4",
        ];
        let (code, out, err) = Usdt::start(&args).finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        let counts = parse_counts(&out);
        let want = [
            ("cdemo:guarded", 3),
            ("cdemo:plain", 5),
            ("cdemolib:call", 4),
            ("rel:a", 1),
            ("rel:b", 1),
        ];
        assert_eq!(
            counts,
            want.map(|(p, n)| (p.to_string(), n)).into(),
            "{engine}: {out}\n{err}"
        );
        assert!(
            err.contains("libcdemolib.so: counting its 1 sites"),
            "{err}"
        );
    }
}

/// `count -p PID` of a process that executes another file: stopped at the
/// exec (ptrace, exec events only) until its sites are attached.
#[test]
fn exec_into_another_file_is_followed_for_a_pid() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let dir = scratch("exec-pid");
    let other = dir.join("other");
    copy_to(&other);
    let other = other.to_str().unwrap();
    for engine in ["perf", "bpf"] {
        let go = dir.join(format!("go-{engine}"));
        let args = [
            "await",
            go.to_str().unwrap(),
            "fire",
            "5",
            "3",
            "exec",
            other,
            "fire",
            "7",
            "4",
        ];
        let mut prog = spawn(program(), &args);
        let pid = prog.id().to_string();
        let mut usdt = Usdt::start(&["count", "--engine", engine, "rel:*", "-p", &pid]);
        usdt.wait_line("usdt: counting 2 sites of process");
        std::fs::write(&go, "").unwrap();
        assert!(wait_deadline(&mut prog, 60).success());
        let (code, out, err) = usdt.finish(false);
        assert_eq!(code, 0, "{engine}: {err}");
        assert_eq!(counts_of(&out), (12, 7), "{engine}: {out}\n{err}");
        let line = format!("{EXECUTED}{other}: counting its 2 sites");
        assert_eq!(err.lines().filter(|l| *l == line).count(), 1, "{err}");
        assert!(!err.contains("missed"), "{err}");
    }
}
