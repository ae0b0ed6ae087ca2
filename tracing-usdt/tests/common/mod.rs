//! Shared by the tests: the example and the `usdt` command, built once per
//! test process, and children run under a time limit.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Seconds any child may run before `timeout` ends it.
pub const TIME_LIMIT: &str = "120";

/// The example `tracing_demo` and the `usdt` command, built by a nested cargo
/// into a target directory of their own (the outer build holds its own).
pub fn programs() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tracing-usdt-programs");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "-p", "tracing-usdt", "-p", "usdt-cli"])
            .args(["--example", "tracing_demo", "--bin", "usdt", "--target-dir"])
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
        run_ok(&mut cmd);
        let debug = target.join("debug");
        (debug.join("examples/tracing_demo"), debug.join("usdt"))
    })
}

/// The example program.
pub fn demo() -> &'static Path {
    &programs().0
}

/// The `usdt` command (usdt-cli).
pub fn usdt() -> &'static Path {
    &programs().1
}

/// `program args...` under `timeout`, so that a hung child ends the test.
pub fn limited(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", TIME_LIMIT]).arg(program);
    cmd
}

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

/// The tracers need root and tracefs; bpftrace also a memlock limit it can
/// raise.
pub fn tracing_env() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let uid = run_ok(Command::new("id").arg("-u"));
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "the tracing tests attach uprobes and need root (CI runs them as root)"
        );
        if !Path::new("/sys/kernel/tracing/uprobe_events").exists() {
            let _ = Command::new("mount")
                .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
                .status();
        }
    });
}
