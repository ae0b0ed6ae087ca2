//! What the tests and the benchmark need from the machine, installed on first
//! use.
//!
//! The README's two commands must work on a fresh machine of the project's
//! kind, which has only the image's packages. Each test (and each bench row)
//! names what it needs and why; [`ensure`] checks each need by a file the
//! package provides, and as root installs what is missing with `apt-get` (or
//! `rustup target add`), printing one line per install with the reason. A
//! user without root gets [`Missing::NeedsRoot`] with that reason instead, so
//! the caller can skip in one line rather than fail with a kernel errno.
//!
//! Test binaries run in parallel threads and cargo may run several test
//! binaries of several checkouts at once: installs are serialized by an
//! advisory lock on [`LOCK`], and every check is made again under it.

use std::ffi::CString;
use std::fmt;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A Debian package, known to be installed by a file it provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Package {
    /// The package's name for `apt-get install`.
    pub name: &'static str,
    /// Files the package installs; any one of them present means installed.
    pub provides: &'static [&'static str],
}

/// `bpftrace`: the tests trace the examples with it.
pub const BPFTRACE: Package = Package {
    name: "bpftrace",
    provides: &["/usr/bin/bpftrace"],
};
/// `<sys/sdt.h>`, the C probes the tests and the bench compare with.
pub const SDT: Package = Package {
    name: "systemtap-sdt-dev",
    provides: &[
        "/usr/include/x86_64-linux-gnu/sys/sdt.h",
        "/usr/include/aarch64-linux-gnu/sys/sdt.h",
        "/usr/include/sys/sdt.h",
    ],
};
/// gdb, which reads the notes and stops at probes.
pub const GDB: Package = Package {
    name: "gdb",
    provides: &["/usr/bin/gdb"],
};
/// valgrind, whose callgrind counts the idle probes' instructions.
pub const VALGRIND: Package = Package {
    name: "valgrind",
    provides: &["/usr/bin/valgrind"],
};
/// perf, from Debian's `linux-perf`.
pub const PERF: Package = Package {
    name: "linux-perf",
    provides: &["/usr/bin/perf"],
};
/// readelf and GNU ld.
pub const BINUTILS: Package = Package {
    name: "binutils",
    provides: &["/usr/bin/readelf"],
};
/// A C compiler for the C probe programs.
pub const GCC: Package = Package {
    name: "gcc",
    provides: &["/usr/bin/cc"],
};
/// clang, which libbpf-sys's build uses for BPF programs.
pub const CLANG: Package = Package {
    name: "clang-14",
    provides: &["/usr/bin/clang-14"],
};
/// bpftool, which dumps the kernel's BTF as `vmlinux.h` for a BPF program.
pub const BPFTOOL: Package = Package {
    name: "bpftool",
    provides: &["/usr/sbin/bpftool"],
};
/// libelf headers, for the libbpf-sys build.
pub const LIBELF: Package = Package {
    name: "libelf-dev",
    provides: &["/usr/include/libelf.h"],
};
/// zlib headers, for the libbpf-sys build.
pub const ZLIB: Package = Package {
    name: "zlib1g-dev",
    provides: &["/usr/include/zlib.h"],
};
/// pkg-config, for the libbpf-sys build.
pub const PKG_CONFIG: Package = Package {
    name: "pkgconf",
    provides: &["/usr/bin/pkg-config"],
};
/// make, for the libbpf-sys build.
pub const MAKE: Package = Package {
    name: "make",
    provides: &["/usr/bin/make"],
};
/// qemu-aarch64 and qemu-riscv64, which run the cross-built examples.
pub const QEMU: Package = Package {
    name: "qemu-user",
    provides: &["/usr/bin/qemu-aarch64"],
};
/// The aarch64 cross C compiler, rustc's linker for that target.
pub const AARCH64_GCC: Package = Package {
    name: "gcc-aarch64-linux-gnu",
    provides: &["/usr/bin/aarch64-linux-gnu-gcc"],
};
/// The aarch64 C library the cross linker links against.
pub const AARCH64_LIBC: Package = Package {
    name: "libc6-dev-arm64-cross",
    provides: &["/usr/aarch64-linux-gnu/lib/crt1.o"],
};
/// The riscv64 cross C compiler, rustc's linker for that target, and the
/// compiler of the C `sys/sdt.h` probes compared with ours.
pub const RISCV64_GCC: Package = Package {
    name: "gcc-riscv64-linux-gnu",
    provides: &["/usr/bin/riscv64-linux-gnu-gcc"],
};
/// The riscv64 C library the cross linker links against.
pub const RISCV64_LIBC: Package = Package {
    name: "libc6-dev-riscv64-cross",
    provides: &["/usr/riscv64-linux-gnu/lib/crt1.o"],
};
/// gdb for every architecture: stops the cross-built examples at their
/// probes under qemu-user's gdb stub.
pub const GDB_MULTIARCH: Package = Package {
    name: "gdb-multiarch",
    provides: &["/usr/bin/gdb-multiarch"],
};
/// Node.js, whose WASI runs the wasm32-wasip1 build of a program with probes.
pub const NODEJS: Package = Package {
    name: "nodejs",
    provides: &["/usr/bin/node"],
};
/// setpriv, which runs a command without root's privileges.
pub const SETPRIV: Package = Package {
    name: "util-linux",
    provides: &["/usr/bin/setpriv"],
};

/// qemu-system-x86_64, which boots the kernel matrix's guests (kernels/).
pub const QEMU_SYSTEM: Package = Package {
    name: "qemu-system-x86",
    provides: &["/usr/bin/qemu-system-x86_64"],
};
/// qemu-system-aarch64, which boots the kernel matrix's arm64 guests
/// (kernels/), emulated.
pub const QEMU_SYSTEM_ARM: Package = Package {
    name: "qemu-system-arm",
    provides: &["/usr/bin/qemu-system-aarch64"],
};
/// qemu-system-riscv64, which boots the kernel matrix's riscv64 guests
/// (kernels/), emulated, with qemu-system-data's OpenSBI as their firmware.
pub const QEMU_SYSTEM_MISC: Package = Package {
    name: "qemu-system-misc",
    provides: &["/usr/bin/qemu-system-riscv64"],
};
/// busybox, the init virtme-ng puts in a guest's initramfs.
pub const BUSYBOX: Package = Package {
    name: "busybox-static",
    provides: &["/bin/busybox", "/usr/bin/busybox"],
};
/// depmod and modprobe: a kernel package's modules indexed, and found by
/// virtme-ng, for its guest.
pub const KMOD: Package = Package {
    name: "kmod",
    provides: &["/usr/sbin/modprobe", "/sbin/modprobe"],
};
/// Python's venv module, for a private virtualenv of a PyPI tool.
pub const PYTHON_VENV: Package = Package {
    name: "python3-venv",
    provides: &["/usr/lib/python3.11/ensurepip/__init__.py"],
};

/// Prometheus, which scrapes `usdt serve` in the tests and the bench.
pub const PROMETHEUS: Package = Package {
    name: "prometheus",
    provides: &["/usr/bin/prometheus"],
};

/// PostgreSQL 15's server and client programs (`postgres`, `initdb`,
/// `pg_ctl`, `pgbench`), whose probes the tests and the bench trace.
pub const POSTGRESQL: Package = Package {
    name: "postgresql-15",
    provides: &["/usr/lib/postgresql/15/bin/postgres"],
};
/// Debian's Python 3.11 interpreter, built with its probes.
pub const PYTHON311: Package = Package {
    name: "python3.11",
    provides: &["/usr/bin/python3.11"],
};
/// The C++ compiler (and libstdc++, whose exception probes the tests count).
pub const GXX: Package = Package {
    name: "g++",
    provides: &["/usr/bin/g++"],
};

/// Every package a need may name, for `.ci/run` and for the unit test.
pub const PACKAGES: [Package; 31] = [
    BPFTRACE,
    SDT,
    GDB,
    VALGRIND,
    PERF,
    BINUTILS,
    GCC,
    CLANG,
    BPFTOOL,
    LIBELF,
    ZLIB,
    PKG_CONFIG,
    MAKE,
    QEMU,
    AARCH64_GCC,
    AARCH64_LIBC,
    RISCV64_GCC,
    RISCV64_LIBC,
    GDB_MULTIARCH,
    NODEJS,
    SETPRIV,
    QEMU_SYSTEM,
    QEMU_SYSTEM_ARM,
    QEMU_SYSTEM_MISC,
    BUSYBOX,
    KMOD,
    PYTHON_VENV,
    PROMETHEUS,
    POSTGRESQL,
    PYTHON311,
    GXX,
];

/// Something a test or a bench row needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// Root itself (attaching uprobes, loading BPF).
    Root,
    /// A Debian package.
    Package(Package),
    /// A rustup target, e.g. `aarch64-unknown-linux-gnu`.
    RustTarget(&'static str),
    /// tracefs mounted at `/sys/kernel/tracing` (bpftrace and perf read it).
    Tracefs,
}

/// A need and why: "tests/bpftrace.rs attaches it to the examples".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub what: What,
    pub why: &'static str,
}

impl Need {
    /// A package, for `why`.
    pub const fn package(package: Package, why: &'static str) -> Need {
        Need {
            what: What::Package(package),
            why,
        }
    }

    /// Root, for `why`.
    pub const fn root(why: &'static str) -> Need {
        Need {
            what: What::Root,
            why,
        }
    }

    /// A rustup target, for `why`.
    pub const fn rust_target(target: &'static str, why: &'static str) -> Need {
        Need {
            what: What::RustTarget(target),
            why,
        }
    }

    /// tracefs, for `why`.
    pub const fn tracefs(why: &'static str) -> Need {
        Need {
            what: What::Tracefs,
            why,
        }
    }
}

/// Why a need cannot be met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// Not root: the need is root itself, or something only root can install.
    NeedsRoot(String),
    /// Root tried and failed: the install's own error.
    Failed(String),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::NeedsRoot(why) => write!(f, "needs root: {why}"),
            Missing::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Missing {}

/// The lock that serializes installs across threads and processes.
pub const LOCK: &str = "/tmp/usdt-provision.lock";

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `need` is met now, without installing anything.
pub fn met(need: &Need) -> bool {
    match need.what {
        What::Root => is_root(),
        What::Package(p) => installed(&p),
        What::RustTarget(t) => rust_target_installed(t),
        What::Tracefs => Path::new("/sys/kernel/tracing/uprobe_events").exists(),
    }
}

/// Whether a package's files are present.
pub fn installed(package: &Package) -> bool {
    package.provides.iter().any(|f| Path::new(f).exists())
}

/// Meets every need, installing what is missing (as root), one line per
/// install on stderr. Without root, the first need that only root can meet
/// is returned as [`Missing::NeedsRoot`].
pub fn ensure(needs: &[Need]) -> Result<(), Missing> {
    if needs.iter().all(met) {
        return Ok(());
    }
    if !is_root() {
        let need = needs.iter().find(|n| !met(n)).expect("one need is unmet");
        return Err(Missing::NeedsRoot(reason(need)));
    }
    let _lock = Lock::take()?;
    for need in needs {
        if met(need) {
            continue;
        }
        match need.what {
            What::Root => {}
            What::Package(p) => install(&p, need.why)?,
            What::RustTarget(t) => add_rust_target(t, need.why)?,
            What::Tracefs => mount_tracefs()?,
        }
    }
    Ok(())
}

/// For a test's first line: meets `needs` and returns true, or, without root,
/// says in one line that the test is skipped and why, and returns false. As
/// root nothing is skipped: a failed install fails the test.
///
/// ```no_run
/// use usdt_provision::{Need, BPFTRACE};
/// const NEEDS: &[Need] = &[
///     Need::root("it attaches uprobes"),
///     Need::package(BPFTRACE, "tests/bpftrace.rs attaches it to the examples"),
/// ];
/// if !usdt_provision::ready(NEEDS) {
///     return;
/// }
/// ```
pub fn ready(needs: &[Need]) -> bool {
    ready_for(None, needs)
}

/// [`ready`] for one part of a test (the rest of which runs without it):
/// "test NAME: PART skipped: needs root: ...".
pub fn ready_part(part: &str, needs: &[Need]) -> bool {
    ready_for(Some(part), needs)
}

fn ready_for(part: Option<&str>, needs: &[Need]) -> bool {
    match ensure(needs) {
        Ok(()) => {
            if is_root() {
                raise_memlock();
            }
            true
        }
        Err(e @ Missing::NeedsRoot(_)) => {
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("?");
            match part {
                None => say(&format!("test {name} skipped: {e}")),
                Some(part) => say(&format!("test {name}: {part} skipped: {e}")),
            }
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// BPF maps count against the locked-memory limit on kernels before 5.11.
fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit; failing leaves the limit as it was, and a tracer
    // that needs more says so itself.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

/// What root would do for an unmet need, and why.
fn reason(need: &Need) -> String {
    match need.what {
        What::Root => need.why.to_string(),
        What::Package(p) => format!("installs {} because {}", p.name, need.why),
        What::RustTarget(t) => format!("adds rustup target {t} because {}", need.why),
        What::Tracefs => format!("mounts tracefs because {}", need.why),
    }
}

/// Prints a line past the test harness's output capture (which takes only
/// `print!`/`eprint!`), so that a test's install shows even when it passes.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

fn install(package: &Package, why: &str) -> Result<(), Missing> {
    say(&format!("installing {}: {why}", package.name));
    let mut out = apt_install(package.name);
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        // Stale or absent package lists: refresh them once and try again.
        let update = apt(&["update", "-qq"]);
        if let Ok(u) = &update {
            if !u.status.success() {
                return Err(failed(
                    &format!("apt-get update (for {})", package.name),
                    &update,
                ));
            }
        }
        out = apt_install(package.name);
    }
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        return Err(failed(&format!("apt-get install {}", package.name), &out));
    }
    if !installed(package) {
        return Err(Missing::Failed(format!(
            "apt-get installed {} but none of {:?} exists",
            package.name, package.provides
        )));
    }
    Ok(())
}

fn apt_install(name: &str) -> std::io::Result<Output> {
    apt(&["install", "-y", "-qq", "--no-install-recommends", name])
}

fn apt(args: &[&str]) -> std::io::Result<Output> {
    Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
}

fn failed(what: &str, out: &std::io::Result<Output>) -> Missing {
    Missing::Failed(match out {
        Ok(o) => format!(
            "{what} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("{what}: cannot run apt-get: {e}"),
    })
}

/// The rustup targets installed for the toolchain cargo runs with.
fn rust_target_installed(target: &str) -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == target)
        })
}

fn add_rust_target(target: &str, why: &str) -> Result<(), Missing> {
    say(&format!("adding rustup target {target}: {why}"));
    let out = Command::new("rustup")
        .args(["target", "add", target])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(failed(&format!("rustup target add {target}"), &out)),
    }
}

fn mount_tracefs() -> Result<(), Missing> {
    let out = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .output();
    if Path::new("/sys/kernel/tracing/uprobe_events").exists() {
        return Ok(());
    }
    Err(failed("mount -t tracefs nodev /sys/kernel/tracing", &out))
}

/// A PyPI package installed with pip into a virtualenv of its own (made with
/// the machine's `/usr/bin/python3`), known to be installed by a file in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipPackage {
    /// The name for `pip install`.
    pub name: &'static str,
    /// A file the package installs, relative to the virtualenv.
    pub provides: &'static str,
}

/// virtme-ng, which boots a kernel on the machine's own root over 9p.
pub const VIRTME_NG: PipPackage = PipPackage {
    name: "virtme-ng",
    provides: "bin/vng",
};

/// Installs `package` into the virtualenv `venv` unless it is there, saying
/// so in one line with `why`. Needs root only where `venv` does.
pub fn ensure_pip(venv: &Path, package: PipPackage, why: &str) -> Result<(), Missing> {
    if venv.join(package.provides).exists() {
        return Ok(());
    }
    ensure(&[Need::package(
        PYTHON_VENV,
        "a PyPI tool gets a virtualenv of its own",
    )])?;
    let _lock = Lock::take()?;
    if venv.join(package.provides).exists() {
        return Ok(());
    }
    say(&format!(
        "installing {} (PyPI) into {}: {why}",
        package.name,
        venv.display()
    ));
    if !venv.join("bin/pip").exists() {
        let out = Command::new("/usr/bin/python3")
            .arg("-m")
            .arg("venv")
            .arg(venv)
            .stdin(Stdio::null())
            .output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            return Err(failed(&format!("python3 -m venv {}", venv.display()), &out));
        }
    }
    let out = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", package.name])
        .stdin(Stdio::null())
        .output();
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        return Err(failed(&format!("pip install {}", package.name), &out));
    }
    if !venv.join(package.provides).exists() {
        return Err(Missing::Failed(format!(
            "pip installed {} but {} is not in {}",
            package.name,
            package.provides,
            venv.display()
        )));
    }
    Ok(())
}

/// An exclusive `flock` on [`LOCK`], released on drop (or when the process
/// ends, however it ends).
struct Lock(libc::c_int);

impl Lock {
    fn take() -> Result<Lock, Missing> {
        let path = CString::new(Path::new(LOCK).as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: a valid NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o666,
            )
        };
        if fd < 0 {
            return Err(Missing::Failed(format!(
                "{LOCK}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let lock = Lock(fd);
        loop {
            // SAFETY: fd is open; flock blocks until the lock is ours.
            if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                return Ok(lock);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Missing::Failed(format!("flock {LOCK}: {e}")));
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed once; closing releases the lock.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        for (i, a) in PACKAGES.iter().enumerate() {
            assert!(!a.provides.is_empty());
            for b in &PACKAGES[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
    }

    /// Every package installs a file its need checks for: a wrong path would
    /// make every run reinstall, or never find the package.
    #[test]
    fn each_package_installs_what_it_is_known_by() {
        if !is_root() {
            say("test each_package_installs_what_it_is_known_by skipped: needs root: installs every package the tests use");
            return;
        }
        for package in PACKAGES {
            let need = Need::package(package, "usdt-provision checks what each package installs");
            ensure(&[need]).unwrap_or_else(|e| panic!("{}: {e}", package.name));
            assert!(
                installed(&package),
                "{} installed but not found",
                package.name
            );
        }
    }

    #[test]
    fn a_missing_package_says_what_root_would_install_and_why() {
        let fake = Package {
            name: "usdt-provision-no-such-package",
            provides: &["/nonexistent/usdt-provision"],
        };
        let need = Need::package(fake, "the unit test asks for it");
        assert!(!met(&need));
        assert_eq!(
            Missing::NeedsRoot(reason(&need)).to_string(),
            "needs root: installs usdt-provision-no-such-package because the unit test asks for it"
        );
        if !is_root() {
            assert_eq!(ensure(&[need]), Err(Missing::NeedsRoot(reason(&need))));
        }
    }
}
