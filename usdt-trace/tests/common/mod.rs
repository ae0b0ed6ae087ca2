//! Helpers shared by the integration tests: building the C probe program and
//! reading `readelf -n`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles C sources from `tests/c/` with `cc` into `NAME` (once per test
/// process) and returns the executable's path.
pub fn build_c(name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join(format!("{name}-{}", std::process::id()));
    if out.exists() {
        return out;
    }
    // Tests run in parallel: build under a unique name, then rename.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = tmp.join(format!("{name}-{}.{seq}.partial", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&partial)
        .args(sources.iter().map(|s| dir.join(s)))
        .args(flags)
        .status()
        .expect("cc runs (apt install gcc systemtap-sdt-dev)");
    assert!(status.success(), "cc failed on {sources:?}");
    std::fs::rename(&partial, &out).unwrap();
    out
}

/// The C demo program: `cdemo:plain` without and `cdemo:guarded` with a semaphore.
pub fn cdemo() -> PathBuf {
    build_c("cdemo", &["cdemo.c", "cdemo_guarded.c"], &[])
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
