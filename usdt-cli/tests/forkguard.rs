//! The fork guard (usdt-runtime's `forkguard`) on a kernel that optimizes
//! nop5 sites and loses a forked child's trampoline (Linux 6.18 to early 7.2,
//! `syscall(336)` fails with `ENXIO`; this machine's 6.18.44): a forking
//! program written as programs outside the project are (`tests/outside/forkguard.rs`,
//! its own package depending on `usdt` by path, one ad-hoc probe) is traced
//! with `usdt count --attach next` and the default attach point, and with
//! bpftrace; every child must exit 0 with the right result. The same run
//! with the guard left out (`USDT_FORK_GUARD=0`) shows the child killed by
//! SIGSEGV, so that it is the guard that keeps the child alive.
//!
//! The program is built twice: debug with rustc's default linker (LLD, PIE),
//! and release with GNU ld, non-PIE (`-C link-arg=-fuse-ld=bfd -C
//! relocation-model=static`). Needs root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use usdt_test_support::{ready, BPFTRACE, ROOT, TRACEFS};
use usdt_trace::{read_file_fork_guard, KernelFeatures, UprobeSyscall};

const USDT: &str = env!("CARGO_BIN_EXE_usdt");

/// Hits per loop.
const N: u64 = 1000;

/// A build of the outside program.
#[derive(Clone, Copy, Debug)]
enum Build {
    /// Debug, rustc's default linker (LLD), PIE.
    LldPie,
    /// Release, GNU ld, non-PIE.
    GnuLdStatic,
}

/// Writes the package and builds it (once per build and test process).
fn program(build: Build) -> PathBuf {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _serial = LOCK.get_or_init(|| Mutex::new(())).lock();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let pkg = tmp.join("forkguard-pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/outside/forkguard.rs");
    let manifest = format!(
        "# Written by usdt-cli/tests/forkguard.rs.\n\
         [package]\nname = \"forkguard\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\nautobins = false\n\n\
         [dependencies]\nusdt = {{ package = \"usdt-probes\", path = {:?} }}\nlibc = \"0.2\"\n\n\
         [[bin]]\nname = \"forkguard\"\npath = {:?}\n\n[workspace]\n",
        root.display().to_string(),
        source.display().to_string()
    );
    if std::fs::read_to_string(pkg.join("Cargo.toml")).ok() != Some(manifest.clone()) {
        std::fs::write(pkg.join("Cargo.toml"), &manifest).unwrap();
    }
    if !pkg.join("Cargo.lock").exists() {
        // The workspace's lock pins the same versions without a registry index.
        std::fs::copy(root.join("Cargo.lock"), pkg.join("Cargo.lock")).unwrap();
    }
    let (target, profile, rustflags) = match build {
        Build::LldPie => ("lld-pie", "debug", ""),
        Build::GnuLdStatic => (
            "gnu-ld-static",
            "release",
            "-C link-arg=-fuse-ld=bfd -C relocation-model=static",
        ),
    };
    let target_dir = tmp.join("forkguard-target").join(target);
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&pkg)
        .args(["build", "--quiet", "--manifest-path"])
        .arg(pkg.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", rustflags)
        .env_remove("CARGO_TARGET_DIR");
    let mut out_dir = target_dir.clone();
    if profile == "release" {
        // With `--target`, RUSTFLAGS reach the program, not the proc macros.
        cmd.args(["--release", "--target", "x86_64-unknown-linux-gnu"]);
        out_dir.push("x86_64-unknown-linux-gnu");
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "building the forkguard program ({build:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = out_dir.join(profile).join("forkguard");
    assert!(
        read_file_fork_guard(&bin).unwrap(),
        "{build:?}: the program carries the fork guard's marker"
    );
    bin
}

/// Whether this kernel optimizes nop5 sites and loses a child's trampoline.
fn nop5_kernel() -> bool {
    KernelFeatures::detect().uprobe_syscall == UprobeSyscall::OptimizesNop5
}

/// What one traced run printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn has(&self, line: &str) -> bool {
        self.stdout.lines().any(|l| l == line)
    }

    fn children(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("child "))
            .collect()
    }

    /// `provider:name COUNT` from `usdt count`.
    fn count(&self) -> u64 {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix("forkguard:tick "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in {}", self.stdout))
    }
}

/// Runs `cmd` with the guard on or left out; kills it after 120 s.
fn run(mut cmd: Command, guard: bool) -> Run {
    if !guard {
        cmd.env("USDT_FORK_GUARD", "0");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let (done, ended) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let timeout = std::time::Duration::from_secs(120);
        if ended.recv_timeout(timeout).is_err() && pid > 0 {
            // SAFETY: signalling our child, still running (it has not been
            // waited for), by its positive pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    watchdog.join().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `usdt count [--attach POINT] forkguard:tick -- BIN MODE N`.
fn usdt_count(bin: &Path, attach: Option<&str>, mode: &str, guard: bool) -> Run {
    let mut cmd = Command::new(USDT);
    cmd.arg("count");
    if let Some(point) = attach {
        cmd.args(["--attach", point]);
    }
    cmd.args(["forkguard:tick", "--"])
        .arg(bin)
        .args([mode, &N.to_string()]);
    run(cmd, guard)
}

/// Every child exited 0 (its own result and its child's right), the parent
/// computed right, and the parent had the trampoline where the kernel
/// optimizes nop5 sites.
fn check_survived(run: &Run, children: usize, what: &str) {
    check_survived_with(run, children, what, nop5_kernel());
}

/// [`check_survived`], the parent having the trampoline iff `trampoline`.
fn check_survived_with(run: &Run, children: usize, what: &str, trampoline: bool) {
    let all = format!("{what}:\n{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.children(), vec!["exit=0"; children], "{all}");
    assert!(run.has("parent ok=true"), "{all}");
    assert!(
        run.has(&format!("trampoline={trampoline}")),
        "the kernel optimized the site before the fork iff it was attached there: {all}"
    );
    assert!(!run.stderr.contains("dies"), "no warning: {all}");
    assert_eq!(run.code, Some(0), "{all}");
}

#[test]
fn outside_program_survives_usdt_count_attach_next() {
    if !ready(&[ROOT]) {
        return;
    }
    for build in [Build::LldPie, Build::GnuLdStatic] {
        let bin = program(build);
        let run = usdt_count(&bin, Some("next"), "simple", true);
        check_survived(&run, 1, &format!("{build:?}"));
        // The parent's hits; the child's sites return at once (a page of
        // `ret` where the trampoline was), so none of its hits is counted.
        assert_eq!(run.count(), 2 * N, "{build:?}: {}", run.stdout);
    }
}

/// The proof that the guard is what keeps the child alive: the same program
/// and tracer, with the guard left out, loses its child to SIGSEGV.
#[test]
fn without_the_guard_the_child_dies() {
    if !ready(&[ROOT]) {
        return;
    }
    let bin = program(Build::LldPie);
    let run = usdt_count(&bin, Some("next"), "simple", false);
    let all = format!("{}\n{}", run.stdout, run.stderr);
    assert!(run.has("parent ok=true"), "{all}");
    if nop5_kernel() {
        assert!(run.has("trampoline=true"), "{all}");
        assert_eq!(run.children(), ["signal=11"], "{all}");
        assert_eq!(run.code, Some(1), "{all}");
    } else {
        assert_eq!(run.children(), ["exit=0"], "{all}");
    }
}

#[test]
fn threads_forking_at_once_all_survive() {
    if !ready(&[ROOT]) {
        return;
    }
    let bin = program(Build::LldPie);
    let run = usdt_count(&bin, Some("next"), "threads", true);
    check_survived(&run, 4, "threads");
    assert_eq!(run.count(), 4 * N, "{}", run.stdout);
}

/// A child that forks again: its table of trampolines is the parent's copy,
/// so its own child gets the `ret` page too.
#[test]
fn a_child_that_forks_again_survives_with_its_child() {
    if !ready(&[ROOT]) {
        return;
    }
    let bin = program(Build::GnuLdStatic);
    let run = usdt_count(&bin, Some("next"), "nested", true);
    check_survived(&run, 1, "nested");
    assert_eq!(run.count(), N, "{}", run.stdout);
}

/// The default attach point takes the optimized path for a guarded program
/// where the speed self-test favours it (`usdt features --json`'s
/// `default_attach_guarded`), and the nop where the trap measured faster;
/// `usdt list` and `usdt features` say so, and the child survives either way.
#[test]
fn the_default_attach_point_takes_the_optimized_path_for_guarded_programs() {
    if !ready(&[ROOT]) {
        return;
    }
    let bin = program(Build::LldPie);
    let json = Command::new(USDT)
        .args(["features", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    // The program's sites are the default nop;nop5;nop10.
    let next = json["default_attach_guarded"]["nop5_nop10"] != "nop";
    let kernel_safe = json["fork_test"] == "safe";
    let list = Command::new(USDT).arg("list").arg(&bin).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    let run = usdt_count(&bin, None, "simple", true);
    check_survived_with(&run, 1, "auto", nop5_kernel() && next);
    if next {
        // The child's sites return at once: the parent's hits only.
        assert_eq!(run.count(), 2 * N, "{}", run.stdout);
    } else {
        assert!(
            run.count() >= 2 * N,
            "the parent's hits at least: {}",
            run.stdout
        );
    }
    if nop5_kernel() {
        let words = match (next, kernel_safe) {
            (true, false) => "+1 (guarded)",
            (true, true) => "+1 (optimized)",
            (false, _) => "nop (faster here)",
        };
        assert!(list.contains(words), "{words}: {list}\n{json}");
    }
    let features = Command::new(USDT).arg("features").output().unwrap();
    let features = String::from_utf8_lossy(&features.stdout);
    assert_eq!(
        features.contains("fork-safe (guarded by the program"),
        nop5_kernel(),
        "{features}"
    );
}

/// bpftrace (0.17 here) attaches at the nop: the child survives there with
/// or without the guard, and its result is right; the guard's handlers run
/// in every fork and change nothing for it.
#[test]
fn traced_by_bpftrace_the_children_survive() {
    if !ready(&[ROOT, TRACEFS, BPFTRACE]) {
        return;
    }
    let bin = program(Build::LldPie);
    for mode in ["simple", "threads", "nested"] {
        let mut cmd = Command::new("bpftrace");
        cmd.arg("-e")
            .arg(format!(
                "usdt:{}:forkguard:tick {{ @hits = count(); }}",
                bin.display()
            ))
            .arg("-c")
            .arg(format!("{} {mode} {N}", bin.display()));
        let run = run(cmd, true);
        let all = format!("{mode}:\n{}\n{}", run.stdout, run.stderr);
        let children = if mode == "threads" { 4 } else { 1 };
        assert_eq!(run.children(), vec!["exit=0"; children], "{all}");
        assert!(run.has("parent ok=true"), "{all}");
        let hits: u64 = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("@hits: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no @hits: {all}"));
        let parent = match mode {
            "simple" => 2 * N,
            "threads" => 4 * N,
            _ => N,
        };
        assert!(hits >= parent, "the parent's hits at least: {all}");
    }
}

/// A tracer of every process running the program (`usdt count --all`) is
/// owed the child's hits too, so for it the guard does not count: the guard
/// keeps a child alive by making its optimized sites return at once, where
/// no uprobe sees them. Auto stays at the nop there (unless the kernel itself
/// keeps the child's trampoline), and the child's hits are counted: the
/// parent's 2N and the child's N.
#[test]
fn counting_every_process_counts_the_forked_child_too() {
    if !ready(&[ROOT]) {
        return;
    }
    // A copy of its own: the other tests run the program meanwhile, and
    // `--all` counts every process that runs the file.
    let bin = program(Build::LldPie);
    let copy = bin.with_file_name("forkguard-every-process");
    std::fs::copy(&bin, &copy).unwrap();
    let bin = copy;
    let mut counting = Command::new("timeout")
        .args(["-s", "KILL", "120", USDT, "count", "--all"])
        .arg(&bin)
        .arg("forkguard:tick")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(counting.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.starts_with("usdt: counting "), "{line}");
    let out = Command::new(&bin)
        .args(["simple", &N.to_string()])
        .output()
        .unwrap();
    let program = String::from_utf8_lossy(&out.stdout).into_owned();
    // `timeout` passes SIGINT on to usdt, which prints the counts.
    let status = Command::new("kill")
        .args(["-INT", &counting.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let counted = counting.wait_with_output().unwrap();
    let counted = String::from_utf8_lossy(&counted.stdout).into_owned();
    assert!(out.status.success(), "{program}");
    assert!(program.contains("child exit=0"), "{program}");
    assert!(
        counted.contains(&format!("forkguard:tick {}", 3 * N)),
        "the parent's 2N and the child's N: {counted}\n{program}"
    );
}
