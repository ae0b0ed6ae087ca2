//! What the workspace's tests share (a dev-dependency of every package with
//! integration tests; never published).
//!
//! - [`need`]: what a test needs (root, tracefs, packages), checked and
//!   installed by [`ready`].
//! - [`process`]: running children to completion or under a deadline,
//!   signalling them, waiting for a condition.
//! - [`c`]: the C probe programs of `usdt-trace/tests/c/`, built with `cc`
//!   and with cross compilers.
//! - [`readelf`]: notes as `readelf -n` prints them.
//! - [`elf`]: a tiny ELF file with chosen notes, for the reader's tests.
//! - [`cli`]: usdt-cli's example programs and `usdt count`'s output.
//! - [`cross`]: the foreign Linux targets the examples are cross-built for,
//!   run under qemu-user and stopped at their probes by gdb.
//! - [`postgres`]: a PostgreSQL cluster of a test's own, pgbench scripts.
//! - [`shapes`], [`cell`], [`cdylib`]: the workspace's examples built in
//!   each build shape, as a standalone package per cell, and as a `cdylib`.
//! - [`tracing_demo`]: tracing-usdt's example and the `usdt` command, built
//!   by a nested cargo.
//! - [`outside`]: the program written outside the workspace, as a package
//!   of its own.
//! - With the `trace` feature, the checks made with usdt-trace: `notes`
//!   and `signatures` (what every build shape's notes and records must
//!   be), `counting` (every hit counted, the red zone intact).
//!
//! The most used items are re-exported here.

pub mod c;
pub mod cdylib;
pub mod cell;
pub mod cli;
pub mod cross;
pub mod elf;
pub mod need;
pub mod outside;
pub mod postgres;
pub mod process;
pub mod readelf;
pub mod shapes;
pub mod tracing_demo;

#[cfg(feature = "trace")]
pub mod counting;
#[cfg(feature = "trace")]
pub mod notes;
#[cfg(feature = "trace")]
pub mod signatures;

pub use need::{BPFTRACE, CC, GDB, GXX, PERF, POSTGRESQL, PYTHON, ROOT, SDT, SETPRIV, TRACEFS};
pub use process::{has_trampoline, run_ok, wait_for};
pub use usdt_provision::{ready, ready_part, Need};

use std::path::PathBuf;

/// The workspace's root directory.
pub fn root() -> PathBuf {
    let this = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    this.parent().expect("the workspace root").to_path_buf()
}

/// `<target dir>/tmp`, where cargo puts an integration test's scratch files
/// (`CARGO_TARGET_TMPDIR`): found from the running test binary, at
/// `<target dir>/<profile>/deps/<test>`.
pub fn target_tmp() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", exe.display()))
        .join("tmp")
}

/// Asserts what every tracing helper needs (a test checks it first with
/// [`ready`], and returns early without it): root and tracefs, memlock
/// raised.
pub fn tracing_env() {
    assert!(
        ready(&[ROOT, TRACEFS]),
        "a tracing test must check `ready` first"
    );
}
