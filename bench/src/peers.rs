//! The peers helper (bench/peers/): the bench loop with oxidecomputer's
//! `usdt` 0.6, which cannot live in our dependency graph (its package is also
//! named `usdt`). Built here at run time with cargo, started once, attached to
//! by pid, and asked to run its loop in batches it times itself.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::child::{self, Lines};
use crate::timing::Loop;

/// The helper's manifest, in this repository.
fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/Cargo.toml")
}

/// A directory beside the bench's own build, for what it builds at run time
/// (`<target>/release/bench` gives `<target>/NAME`), so that
/// it is built once per target directory and `cargo clean` removes it.
pub fn beside_bench(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    match exe.ancestors().nth(2) {
        Some(target) if target.join("CACHEDIR.TAG").exists() => target.join(name),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(name),
    }
}

fn target_dir() -> PathBuf {
    beside_bench("bench-peers")
}

/// Builds the helper (`cargo build --release`), returns its path.
pub fn build() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir();
    let status = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(manifest())
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("could not run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release --manifest-path {}` failed ({status})",
            manifest().display()
        ));
    }
    Ok(target.join("release/usdt-bench-peers"))
}

/// A running helper.
pub struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines,
    /// The helper's process id.
    pub pid: u32,
    /// The helper's executable.
    pub exe: PathBuf,
}

impl Helper {
    /// Starts `exe --serve` and waits for it to say it is ready.
    pub fn start(exe: &Path) -> Result<Helper, String> {
        let mut child = Command::new(exe)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = Lines::of(
            child.stdout.take().expect("piped stdout"),
            &exe.display().to_string(),
        );
        let pid = child.id();
        let mut helper = Helper {
            child,
            stdin,
            stdout,
            pid,
            exe: exe.to_owned(),
        };
        let line = helper.line()?;
        if line != format!("ready {pid}") {
            return Err(format!("{}: unexpected greeting `{line}`", exe.display()));
        }
        Ok(helper)
    }

    fn line(&mut self) -> Result<String, String> {
        Ok(self.stdout.next(child::LINE)?.trim_end().to_owned())
    }

    /// The helper's loop for `row`.
    pub fn row<'a>(&'a mut self, row: &'a str) -> RemoteLoop<'a> {
        RemoteLoop { helper: self, row }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Closing stdin ends the helper's command loop.
        let _ = self.stdin.flush();
        child::kill(&mut self.child);
    }
}

/// One of the helper's loops, timed by the helper.
pub struct RemoteLoop<'a> {
    helper: &'a mut Helper,
    row: &'a str,
}

impl Loop for RemoteLoop<'_> {
    fn batch(&mut self, n: u64) -> Result<Duration, String> {
        let h = &mut *self.helper;
        writeln!(h.stdin, "run {} {n}", self.row)
            .and_then(|()| h.stdin.flush())
            .map_err(|e| format!("writing to {}: {e}", h.exe.display()))?;
        let line = h.line()?;
        let ns: u64 = line
            .parse()
            .map_err(|_| format!("{}: said `{line}`", h.exe.display()))?;
        Ok(Duration::from_nanos(ns))
    }
}
