//! Shared by the load and fork tests (`tests/load.rs`, `tests/fork.rs`):
//! building their examples, talking to them line by line, and finding a
//! probe's semaphore in a running process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use usdt_trace::Site;

/// Builds `examples/NAME.rs` with the `release` profile (opt-level 3) in the
/// target directory the release build shape uses, so the dependencies built
/// there are reused; returns its path.
pub fn release_example(name: &str) -> PathBuf {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = LOCK.get_or_init(|| Mutex::new(())).lock();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target/shapes/default");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args(["build", "--quiet", "--release", "--example", name])
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building example {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release/examples").join(name)
}

/// A running example driven through stdin and stdout, killed if the test
/// fails before it exits.
pub struct Program {
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Program {
    pub fn start(bin: &Path, args: &[&str]) -> Program {
        Program::start_env(bin, args, &[])
    }

    /// [`Program::start`] with environment variables set.
    pub fn start_env(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Program {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Program { child, lines }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.child.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    pub fn line(&mut self) -> String {
        self.lines
            .next()
            .expect("the program ended early")
            .expect("read the program's output")
    }

    /// Sends `command` and returns the one-line answer.
    pub fn ask(&mut self, command: &str) -> String {
        self.send(command);
        self.line()
    }

    /// Closes stdin and waits; true if the program exited with 0.
    pub fn finish(mut self) -> bool {
        drop(self.child.stdin.take());
        self.child.wait().unwrap().success()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The value of `key=` in a line of `key=value` words.
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// `field` parsed as a number.
pub fn number(line: &str, key: &str) -> u64 {
    field(line, key)
        .parse()
        .unwrap_or_else(|e| panic!("{key}= in {line:?}: {e}"))
}

/// The sites of `probe` (`provider:name`) in `bin`.
pub fn sites(bin: &Path, probe: &str) -> Vec<Site> {
    let sites: Vec<Site> = usdt_trace::read_file(bin)
        .expect("read notes")
        .into_iter()
        .filter(|s| s.probe() == probe)
        .collect();
    assert!(!sites.is_empty(), "no {probe} in {}", bin.display());
    sites
}

/// The run-time address of `site`'s semaphore in process `pid`.
pub fn semaphore_address(pid: u32, bin: &Path, site: &Site) -> u64 {
    let canonical = std::fs::canonicalize(bin).unwrap();
    let object = usdt_trace::read_process(pid)
        .unwrap()
        .into_iter()
        .find(|o| o.path == canonical)
        .expect("the program is mapped");
    site.semaphore.expect("a lazy probe has a semaphore") + object.bias
}

/// A copy of `bin` of its own (a new inode), named after `tag` and this
/// test process: a tracer of every process running the file
/// (`Target::AllProcesses`), or a semaphore check, then sees only the
/// program this test started, even while other tests run the same example.
pub fn private_copy(bin: &Path, tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/busy");
    std::fs::create_dir_all(&dir).unwrap();
    let name = bin.file_name().unwrap().to_string_lossy();
    let copy = dir.join(format!("{name}-{tag}-{}", std::process::id()));
    std::fs::copy(bin, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", bin.display()));
    copy
}
