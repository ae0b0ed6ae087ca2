//! libstdc++'s exception probes, in the shared library a C++ program
//! loads: a program that throws and catches N exceptions, counted by
//! `usdt count 'libstdcxx:*'` and traced with the catalog's names.

use std::path::PathBuf;
use std::process::Command;

use usdt_test_support::cli::parse_counts;
use usdt_test_support::{ready, run_ok, GXX, ROOT, TRACEFS};

const THROWS: u64 = 250;

/// The program, built with g++ in the test's scratch directory: it
/// throws and catches `THROWS` exceptions, and rethrows none.
fn thrower() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("thrower.cc");
    std::fs::write(
        &source,
        format!(
            "#include <cstdio>\n#include <stdexcept>\n\
             int main() {{\n  long caught = 0;\n\
             for (int i = 0; i < {THROWS}; i++) {{\n\
             try {{ throw std::runtime_error(\"no\"); }}\n\
             catch (const std::runtime_error &) {{ caught++; }}\n  }}\n\
             std::printf(\"caught %ld\\n\", caught);\n  return 0;\n}}\n"
        ),
    )
    .unwrap();
    let binary = dir.join("thrower");
    run_ok(
        Command::new("g++")
            .arg("-O2")
            .arg("-o")
            .arg(&binary)
            .arg(&source),
    );
    binary
}

#[test]
fn throws_and_catches_are_counted_in_libstdcxx() {
    if !ready(&[ROOT, TRACEFS, GXX]) {
        return;
    }
    let binary = thrower();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(["count", "libstdcxx:*", "--"])
            .arg(&binary),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("caught {THROWS}")), "{text}");
    let counts = parse_counts(&text);
    assert_eq!(counts.get("libstdcxx:throw"), Some(&THROWS), "{text}");
    assert_eq!(counts.get("libstdcxx:catch"), Some(&THROWS), "{text}");
    assert_eq!(counts.get("libstdcxx:rethrow"), Some(&0), "{text}");
    // The probes are the shared library's: the program has none.
    let own = usdt_trace::read_file(&binary).unwrap();
    assert!(own.is_empty(), "{own:?}");
    let lib = usdt_trace::shared_libraries(&binary)
        .into_iter()
        .find(|l| l.to_string_lossy().contains("libstdc++.so"))
        .expect("the program loads libstdc++");
    let sites = usdt_trace::read_file(&lib).unwrap();
    assert!(sites.iter().any(|s| s.provider == "libstdcxx"), "{sites:?}");

    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(["trace", "libstdcxx:throw", "--limit", "1", "--"])
            .arg(&binary),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("libstdcxx:throw"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(" libstdcxx:throw obj=0x") && line.contains(" tinfo=0x"),
        "{line}"
    );
}
