//! The C probe programs (`usdt-trace/tests/c/`), written the way programs
//! outside the project are, built with `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C probe programs (`usdt-trace/tests/c/`), shared by the tests of
/// usdt-trace and of usdt-cli (both packages sit in the workspace root).
pub const C_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../usdt-trace/tests/c");

/// Compiles C sources from [`C_DIR`] with `cc` into `NAME` under
/// `<target>/tmp/<pid>/` (once per test process) and returns its path.
pub fn build_c(name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    let dir = Path::new(C_DIR);
    let out = crate::target_tmp()
        .join(std::process::id().to_string())
        .join(name);
    // Tests run in parallel: build once, under a lock (replacing a file a
    // running test executes would show it as "(deleted)" in its maps).
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if out.exists() {
        return out;
    }
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let partial = out.with_extension("partial");
    let status = Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&partial)
        .args(sources.iter().map(|s| dir.join(s)))
        .args(flags)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed on {sources:?}");
    std::fs::rename(&partial, &out).unwrap();
    out
}

/// The C demo program (see `tests/c/cdemo.c`): `cdemo:plain` without and
/// `cdemo:guarded` with a semaphore, and `cdemolib:call` in a shared library.
pub fn cdemo() -> PathBuf {
    let lib = cdemolib();
    let rpath = format!("-Wl,-rpath,{}", lib.parent().unwrap().display());
    build_c(
        "cdemo",
        &["cdemo.c", "cdemo_guarded.c"],
        &[lib.to_str().unwrap(), &rpath],
    )
}

/// `tests/c/nop10.c`: `n10:tick` is a hand-written nop;nop10 site.
pub fn nop10() -> PathBuf {
    build_c("nop10", &["nop10.c"], &[])
}

/// The shared library of `cdemo`.
pub fn cdemolib() -> PathBuf {
    build_c("libcdemolib.so", &["cdemolib.c"], &["-shared", "-fPIC"])
}
