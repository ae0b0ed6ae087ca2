//! Notes as binutils' `readelf -n` prints them, to compare our reader with.

use std::path::Path;
use std::process::Command;

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
