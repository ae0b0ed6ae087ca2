//! usdt-cli's example programs and what its tests read from them.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// A program of usdt-cli's `tests/outside/NAME.rs`, written as a user
/// outside the project writes one: built (once per test process, in
/// release) as a package of its own that depends on the facade by path,
/// in `target/outside`.
pub fn outside(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let root = crate::root();
    let src = root
        .join("usdt-cli/tests/outside")
        .join(format!("{name}.rs"));
    let dir = root.join("target").join("outside");
    let targets = format!(
        "[[bin]]\nname = \"{name}\"\npath = {:?}\n\n",
        src.display().to_string()
    );
    let pkg =
        crate::cell::standalone_package(&dir.join(name), &format!("outside-{name}"), &targets);
    let target_dir = dir.join("target");
    crate::run_ok(
        Command::new(env!("CARGO"))
            .current_dir(&pkg)
            .args(["build", "--quiet", "--release", "--bins"])
            .arg("--target-dir")
            .arg(&target_dir)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET"),
    );
    let path = target_dir.join("release").join(name);
    built.push((name.into(), path.clone()));
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
#[cfg(feature = "trace")]
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

/// A `usdt` run's stdout, after asserting that it succeeded (its status and
/// stderr in the message when not).
pub fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "usdt failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}
