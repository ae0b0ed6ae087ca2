//! The C probe programs (`usdt-trace/tests/c/`), written the way programs
//! outside the project are, built with `cc`, and for aarch64 and riscv64
//! with the cross compilers of [`CROSS_CCS`].

use std::path::{Path, PathBuf};
use std::process::Command;

use usdt_provision::Need;

use crate::SDT;

/// The C probe programs (`usdt-trace/tests/c/`), shared by the tests of
/// usdt-trace and of usdt-cli (both packages sit in the workspace root).
pub const C_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../usdt-trace/tests/c");

/// Compiles C sources from [`C_DIR`] with `cc` into `NAME` under
/// `<target>/tmp/<pid>/` (once per test process) and returns its path.
pub fn build_c(name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    build(&["cc", "-O2", "-g"], name, sources, flags)
}

/// Compiles with `command` (a compiler and its first arguments), once per
/// test process, under a lock.
fn build(command: &[&str], name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
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
    let status = Command::new(command[0])
        .args(&command[1..])
        .arg("-o")
        .arg(&partial)
        .args(sources.iter().map(|s| dir.join(s)))
        .args(flags)
        .status()
        .unwrap_or_else(|e| panic!("{} runs: {e}", command[0]));
    assert!(
        status.success(),
        "{command:?} failed on {sources:?} {flags:?}"
    );
    std::fs::rename(&partial, &out).unwrap();
    out
}

/// A C compiler that builds for another machine.
#[derive(Clone, Copy, Debug)]
pub struct CrossCc {
    /// A short name, for messages and file names (`aarch64-gcc`).
    pub name: &'static str,
    /// The compiler and its first arguments.
    pub command: &'static [&'static str],
    /// What `readelf -h` says of its files' machine (`AArch64`, `RISC-V`).
    pub machine: &'static str,
    /// What it needs installed.
    pub needs: &'static [Need],
}

const AARCH64_GCC: Need = Need::package(
    usdt_provision::AARCH64_GCC,
    "the tests build C probe programs for aarch64",
);
const AARCH64_LIBC: Need = Need::package(
    usdt_provision::AARCH64_LIBC,
    "the tests link C probe programs for aarch64",
);
const RISCV64_GCC: Need = Need::package(
    usdt_provision::RISCV64_GCC,
    "the tests build C probe programs for riscv64",
);
const RISCV64_LIBC: Need = Need::package(
    usdt_provision::RISCV64_LIBC,
    "the tests link C probe programs for riscv64",
);
const CLANG: Need = Need::package(
    usdt_provision::CLANG,
    "the tests build C probe programs for aarch64 with clang too",
);

/// The cross compilers of the tests: gcc for aarch64 and riscv64, and
/// clang for aarch64 (clang 14 fails on sys/sdt.h's operands for riscv64:
/// "Could not match memory address. Inline asm failure!"). clang links
/// with the aarch64 gcc's C library and start files.
pub const CROSS_CCS: [CrossCc; 3] = [
    CrossCc {
        name: "aarch64-gcc",
        command: &["aarch64-linux-gnu-gcc"],
        machine: "AArch64",
        needs: &[SDT, AARCH64_GCC, AARCH64_LIBC],
    },
    CrossCc {
        name: "aarch64-clang",
        command: &["clang-14", "--target=aarch64-linux-gnu"],
        machine: "AArch64",
        needs: &[SDT, AARCH64_GCC, AARCH64_LIBC, CLANG],
    },
    CrossCc {
        name: "riscv64-gcc",
        command: &["riscv64-linux-gnu-gcc"],
        machine: "RISC-V",
        needs: &[SDT, RISCV64_GCC, RISCV64_LIBC],
    },
];

/// Compiles `source` from [`C_DIR`] with `cc` and `flags`, with the host's
/// `<sys/sdt.h>` (the header is the same for every machine; Debian installs
/// it in the host's multiarch directory only), into `NAME` under
/// `<target>/tmp/<pid>/`, once per test process.
pub fn build_cross(cc: &CrossCc, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let include = format!("-I{}", sdt_include().display());
    let mut command = cc.command.to_vec();
    command.push(&include);
    build(&command, name, &[source], flags)
}

/// A directory with `sys/sdt.h` and `sys/sdt-config.h` copied from the
/// host's, and nothing else of its multiarch headers (made once).
fn sdt_include() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = crate::target_tmp()
            .join(std::process::id().to_string())
            .join("sdt-include");
        let header = usdt_provision::SDT
            .provides
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("sys/sdt.h is installed (ready(&[SDT]) first)");
        let from = header.parent().unwrap();
        std::fs::create_dir_all(dir.join("sys")).unwrap();
        for file in ["sdt.h", "sdt-config.h"] {
            std::fs::copy(from.join(file), dir.join("sys").join(file)).unwrap();
        }
        dir
    })
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
