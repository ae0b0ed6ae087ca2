//! tracing-usdt's tests: its example and the `usdt` command, built once per
//! test process, and children run under a time limit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::run_ok;

/// Seconds any child may run before `timeout` ends it.
pub const TIME_LIMIT: &str = "120";

/// The example `tracing_demo` and the `usdt` command, built by a nested cargo
/// into a target directory of their own (the outer build holds its own).
pub fn programs() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = crate::target_tmp().join("tracing-usdt-programs");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(crate::root().join("tracing-usdt"))
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
