//! Helpers shared by the integration tests: building the C probe program and
//! reading `readelf -n`.
#![allow(dead_code)]

pub mod elf;

#[allow(unused_imports)]
pub use usdt_provision::{ready, Need};

/// Root, for the tests that attach uprobes.
pub const ROOT: Need = Need::root("it attaches uprobes (perf_event_open on the uprobe PMU)");
/// tracefs, which bpftrace reads.
pub const TRACEFS: Need = Need::tracefs("bpftrace creates uprobe events in it");
/// `<sys/sdt.h>`, for the C probe programs in tests/c/.
pub const SDT: Need = Need::package(
    usdt_provision::SDT,
    "the tests build C programs with <sys/sdt.h> probes (tests/c/)",
);
/// bpftrace, which the tests compare `usdt trace` with.
pub const BPFTRACE: Need = Need::package(
    usdt_provision::BPFTRACE,
    "tests/trace.rs compares `usdt trace` with it in the same run",
);
/// setpriv, which runs `usdt` without privileges.
pub const SETPRIV: Need = Need::package(
    usdt_provision::SETPRIV,
    "tests/cli.rs runs usdt as nobody with it",
);

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C probe programs (`usdt-trace/tests/c/`), shared by the tests of
/// usdt-trace and of usdt-cli (both packages sit in the workspace root).
pub const C_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../usdt-trace/tests/c");

/// Compiles C sources from `tests/c/` with `cc` into `NAME` (once per test
/// process) and returns the executable's path.
pub fn build_c(name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    let dir = Path::new(C_DIR);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join(std::process::id().to_string()).join(name);
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

/// One note as `readelf -n` prints it.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadelfNote {
    pub provider: String,
    pub name: String,
    pub location: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

/// Runs `readelf -n` and collects its stapsdt notes.
pub fn readelf_notes(path: &Path) -> Vec<ReadelfNote> {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .expect("readelf runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut notes = vec![];
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(provider) = line.strip_prefix("Provider: ") else {
            continue;
        };
        let name = lines.next().unwrap().strip_prefix("Name: ").unwrap();
        let addrs = lines.next().unwrap();
        let field = |key: &str| {
            let rest = &addrs[addrs.find(key).unwrap() + key.len()..];
            let hex = rest.trim_start().trim_start_matches("0x");
            let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
            u64::from_str_radix(&hex, 16).unwrap()
        };
        let args_line = lines.next().unwrap();
        let args = args_line
            .strip_prefix("Arguments:")
            .unwrap_or("")
            .trim()
            .to_string();
        notes.push(ReadelfNote {
            provider: provider.into(),
            name: name.into(),
            location: field("Location:"),
            base: field("Base:"),
            semaphore: field("Semaphore:"),
            args,
        });
    }
    notes
}

/// An example program of usdt-cli (`cargo test -p usdt-cli` builds the
/// examples).
pub fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo test -p usdt-cli`, which builds the examples",
        path.display()
    );
    path
}

/// A demo program in `serve` mode: it fires probes on request.
pub struct Serve {
    pub child: std::process::Child,
    pub pid: u32,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Serve {
    /// Starts `program serve` and waits for its `ready PID` line.
    pub fn start(program: &Path) -> Serve {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = Command::new(program)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .expect("ready PID")
            .parse()
            .unwrap();
        assert_eq!(pid, child.id());
        Serve {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Sends one request (`"5 3 2"`) and returns the `evaluated N` total.
    pub fn fire(&mut self, counts: &str) -> u64 {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{counts}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix("evaluated ")
            .expect("evaluated N")
            .parse()
            .unwrap()
    }

    /// Closes its input, so that it exits, and waits for it.
    pub fn finish(self) -> std::process::ExitStatus {
        let Serve {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        child.wait().unwrap()
    }

    /// Whether `/proc/PID/maps` has a `[uprobes-trampoline]` mapping.
    pub fn has_trampoline(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
            .unwrap()
            .contains("[uprobes-trampoline]")
    }
}

/// Waits up to 10 s for `cond`.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `provider:name COUNT` lines of `usdt count` output.
pub fn parse_counts(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (probe, n) = l.rsplit_once(' ')?;
            probe.contains(':').then_some(())?;
            Some((probe.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// How much the kernel raises a semaphore for one uprobe at `file_offset`
/// of the file at `path` in process `pid`: once per private mapping of the
/// file that covers the offset. LLD lets the read-only segment and the text
/// share a page, which the loader maps twice (`r--p` and `r-xp`); the
/// kernel installs the breakpoint in both mappings and raises the semaphore
/// for each, and lowers it as often on detach.
#[allow(dead_code)]
pub fn raises_per_uprobe(pid: u32, path: &Path, file_offset: u64) -> u16 {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(path).unwrap().ino();
    usdt_trace::read_maps(pid)
        .unwrap()
        .iter()
        .filter(|m| m.inode == inode && m.perms.ends_with('p'))
        .filter(|m| (m.offset..m.offset + (m.end - m.start)).contains(&file_offset))
        .count() as u16
}
