//! Shared by the integration tests: building the examples in a given build
//! shape (`Shape`: a profile of this workspace; [`Cell`]: any profile
//! settings, linker and target), the note checks every shape must pass,
//! counting probe hits, running programs, and the environment tracers need.
#![allow(dead_code)]

pub mod cdylib;
mod cell;
mod check;
mod signature;
mod trace;

// Each test uses some of these.
#[allow(unused_imports)]
pub use cell::{
    standalone_package, Cell, CELL_BINS, HOST, O0, O1_THIN_GNU_LD, O2_NON_PIE, O3_FAT_ABORT,
    OS_THIN_NON_PIE_GNU_LD, OZ_FAT_GNU_LD, RELEASE, SHAPES,
};
#[allow(unused_imports)]
pub use check::{check_notes, expected, Expected};
#[allow(unused_imports)]
pub use signature::check_signatures;
#[allow(unused_imports)]
pub use trace::{check_redzone, check_types, count_run, redzone_run, REDZONE_HITS, TYPES_COUNTS};

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

#[allow(unused_imports)]
pub use usdt_provision::{ready, ready_part, Need};

/// Root, for the tests that attach uprobes.
pub const ROOT: Need =
    Need::root("it attaches uprobes (perf_event_open on the uprobe PMU, or BPF)");
/// tracefs, which bpftrace and perf read.
pub const TRACEFS: Need = Need::tracefs("bpftrace and perf create uprobe events in it");
/// bpftrace, for the tests that trace the examples with it.
pub const BPFTRACE: Need = Need::package(
    usdt_provision::BPFTRACE,
    "the tests trace the examples with it and compare what it reads",
);
/// gdb, for the tests that stop at the probes.
pub const GDB: Need = Need::package(usdt_provision::GDB, "the tests stop at probes with it");
/// perf, for tests/perf.rs.
pub const PERF: Need = Need::package(
    usdt_provision::PERF,
    "tests/perf.rs adds, counts and records the probes with perf",
);
/// `<sys/sdt.h>`, for the C probes linked with ours.
pub const SDT: Need = Need::package(
    usdt_provision::SDT,
    "the tests link C <sys/sdt.h> probes with ours",
);
/// A C compiler, for the C programs the tests load our libraries into.
pub const CC: Need = Need::package(usdt_provision::GCC, "the tests build C programs");

/// A way of building the examples: a cargo profile of this workspace and
/// features of the `usdt` crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `dev`: opt-level 0.
    Debug,
    /// `release`: opt-level 3.
    Release,
    /// `o3-fat`: opt-level 3, `lto = "fat"`, `codegen-units = 1`.
    O3Fat,
    /// `release` with the `nop10` feature.
    Nop10,
}

impl Shape {
    pub const ALL: [Shape; 4] = [Shape::Debug, Shape::Release, Shape::O3Fat, Shape::Nop10];

    fn profile(self) -> &'static str {
        match self {
            Shape::Debug => "dev",
            Shape::Release | Shape::Nop10 => "release",
            Shape::O3Fat => "o3-fat",
        }
    }

    fn profile_dir(self) -> &'static str {
        match self {
            Shape::Debug => "debug",
            Shape::Release | Shape::Nop10 => "release",
            Shape::O3Fat => "o3-fat",
        }
    }

    /// A target directory per feature set, so that shapes do not rebuild each
    /// other's artifacts.
    fn target_dir(self) -> PathBuf {
        let features = if self == Shape::Nop10 {
            "nop10"
        } else {
            "default"
        };
        root().join("target").join("shapes").join(features)
    }
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The examples the tests build and trace.
pub const EXAMPLES: [&str; 4] = ["demo", "types", "redzone", "gc"];

/// Builds the test examples in `shape` (once per test process) and returns the
/// path of example `name`.
pub fn example(name: &str, shape: Shape) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<Shape>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&shape) {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(root())
            .args(["build", "--quiet", "--profile", shape.profile()])
            .arg("--target-dir")
            .arg(shape.target_dir())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
        for example in EXAMPLES {
            cmd.args(["--example", example]);
        }
        if shape == Shape::Nop10 {
            cmd.args(["--features", "nop10"]);
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "building the examples ({shape:?}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(shape);
    }
    let path = shape
        .target_dir()
        .join(shape.profile_dir())
        .join("examples")
        .join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
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

/// Asserts what every tracing helper needs (a test checks it first with
/// [`ready`], and returns early without it): root and tracefs, memlock
/// raised.
pub fn tracing_env() {
    assert!(
        ready(&[ROOT, TRACEFS]),
        "a tracing test must check `common::ready` first"
    );
}

/// Whether the process has a `[uprobes-trampoline]` mapping: the kernel
/// optimized a uprobe on a nop5 in it.
pub fn has_trampoline(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| maps.contains("[uprobes-trampoline]"))
        .unwrap_or(false)
}
