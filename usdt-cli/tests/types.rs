//! `--types FILE.d`: argument names and types from a DTrace provider
//! file, for the probes without a signature record (an ad-hoc
//! `usdt::probe!`), never over a record; a malformed file refused with
//! its line and column before anything runs.

use std::path::PathBuf;
use std::process::{Command, Output};

use usdt_test_support::cli::example;
use usdt_test_support::{ready, ROOT, TRACEFS};

/// A provider file in the test's scratch directory.
fn provider_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `traced:adhoc` is ad-hoc (no record); `traced:eager` has its record,
/// which wins over this declaration of the same argument count.
const TRACED_D: &str = "/* the traced example's probes */\n\
    provider traced {\n\
    \tprobe adhoc(uint64_t iteration);\n\
    \tprobe eager(unsigned long x, int y);\n\
    };\n";

fn usdt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn list_shows_declared_types_under_records() {
    let d = provider_file("traced-list.d", TRACED_D);
    let exe = example("traced");
    let out = stdout(&usdt(&[
        "list",
        "--types",
        d.to_str().unwrap(),
        exe.to_str().unwrap(),
    ]));
    let probe = |p: &str| {
        out.lines()
            .find(|l| l.starts_with(p))
            .map(|l| l.split("  ").next().unwrap().trim().to_string())
    };
    assert_eq!(
        probe("traced:adhoc").unwrap(),
        format!("traced:adhoc(iteration: uint64_t) [types: {}]", d.display())
    );
    assert_eq!(
        probe("traced:eager").unwrap(),
        "traced:eager(i: u64, neg: i32)"
    );
    assert_eq!(probe("traced:lazy").unwrap(), "traced:lazy(i: u64)");
    // Without the file, the ad-hoc probe has no names.
    let out = stdout(&usdt(&["list", exe.to_str().unwrap()]));
    assert!(
        out.lines().any(|l| l.starts_with("traced:adhoc  ")),
        "{out}"
    );
}

#[test]
fn trace_and_count_by_take_the_declared_names() {
    if !ready(&[ROOT, TRACEFS]) {
        return;
    }
    let d = provider_file("traced-trace.d", TRACED_D);
    let exe = example("traced");
    let (d, exe) = (d.to_str().unwrap(), exe.to_str().unwrap());
    let out = stdout(&usdt(&[
        "trace",
        "--types",
        d,
        "traced:adhoc",
        "--",
        exe,
        "0",
        "0",
        "3",
    ]));
    let hits: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(" traced:adhoc ").map(|(_, args)| args))
        .collect();
    assert_eq!(hits, ["iteration=0", "iteration=1", "iteration=2"], "{out}");
    let out = stdout(&usdt(&[
        "count",
        "--types",
        d,
        "--by",
        "iteration",
        "traced:adhoc",
        "--",
        exe,
        "0",
        "0",
        "4",
    ]));
    assert!(
        out.contains("\ntraced:adhoc by iteration: 4 hits, 4 values\n"),
        "{out}"
    );
}

#[test]
fn a_malformed_file_is_refused_with_its_line_and_column() {
    let d = provider_file(
        "malformed.d",
        "provider traced {\n\tprobe adhoc(uint64_t iteration;\n};\n",
    );
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("malformed-ran");
    let _ = std::fs::remove_file(&marker);
    for args in [
        vec!["list", "--types", d.to_str().unwrap(), "/bin/true"],
        vec![
            "count",
            "--types",
            d.to_str().unwrap(),
            "--",
            "/usr/bin/touch",
            marker.to_str().unwrap(),
        ],
    ] {
        let out = usdt(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            format!(
                "usdt: {}:2:32: expected `,` or `)` after an argument, found `;`\n",
                d.display()
            )
        );
    }
    assert!(!marker.exists(), "the command ran");
    let missing = usdt(&["list", "--types", "/nonexistent/x.d", "/bin/true"]);
    assert_eq!(
        String::from_utf8(missing.stderr).unwrap(),
        "usdt: /nonexistent/x.d does not exist\n"
    );
}

/// The built-in catalog describes every probe of Debian's PostgreSQL,
/// CPython and libstdc++, each with as many arguments as its notes.
#[test]
fn the_catalog_describes_debians_programs() {
    use usdt_test_support::{POSTGRESQL, PYTHON};
    use usdt_trace::{Declarations, SignatureSource, Signatures};
    if !ready(&[POSTGRESQL, PYTHON]) {
        return;
    }
    let sigs = Signatures::with_declarations(std::sync::Arc::new(Declarations::catalog().clone()));
    for (path, catalog, probes) in [
        ("/usr/lib/postgresql/15/bin/postgres", "postgresql", 57),
        ("/usr/bin/python3.11", "python", 8),
        ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "libstdcxx", 3),
    ] {
        let sites = usdt_trace::read_file(path).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for site in &sites {
            let (sig, source) = sigs
                .source_of_site(site)
                .unwrap_or_else(|| panic!("{path}: {} is not in the catalog", site.probe()));
            assert_eq!(
                *source,
                SignatureSource::Catalog(catalog),
                "{}",
                site.probe()
            );
            assert_eq!(sig.params.len(), site.args.len(), "{}", site.probe());
            seen.insert(site.probe());
        }
        assert_eq!(seen.len(), probes, "{path}: {seen:?}");
    }
}
