//! CPython traced as a Python developer would: Debian's python3.11 (by its
//! path: a `python3` earlier in PATH may be another build), its probes
//! typed by the built-in catalog, counted beside bpftrace on the same
//! script.
//!
//! CPython 3.11 fires `function__entry` only for the calls its
//! interpreter does not inline, and `function__return` for every return:
//! the counts are compared with bpftrace's, and the known calls of the
//! script's function are looked for in the returns.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use usdt_test_support::cli::parse_counts;
use usdt_test_support::{ready, run_ok, BPFTRACE, PYTHON, ROOT, TRACEFS};

const PYTHON3: &str = "/usr/bin/python3.11";

fn needs() -> bool {
    ready(&[ROOT, TRACEFS, PYTHON, BPFTRACE])
}

/// A script in the test's scratch directory that calls `work` `calls`
/// times; `work`'s `return` is on line 2.
fn script(calls: u64) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("python-work-{calls}.py"));
    let text = format!("def work(i):\n    return i * 2\n\nfor i in range({calls}):\n    work(i)\n");
    std::fs::write(&path, text).unwrap();
    path
}

fn usdt(args: &[&str], script: &Path) -> Output {
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(args)
            .arg("--")
            .arg(PYTHON3)
            .arg(script),
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// bpftrace's `@name[key] = count()` maps, as `name key count` triples
/// (`key` empty for a plain count).
fn bpftrace(program: &str, script: &Path) -> Vec<(String, String, u64)> {
    let out = run_ok(
        Command::new("bpftrace")
            .args(["-f", "text", "-e", program, "-c"])
            .arg(format!("{PYTHON3} {}", script.display())),
    );
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let (left, n) = l.rsplit_once(": ")?;
            let n = n.trim().parse().ok()?;
            let left = left.strip_prefix('@')?;
            let (name, key) = match left.split_once('[') {
                Some((name, key)) => (name, key.trim_end_matches(']')),
                None => (left, ""),
            };
            Some((name.to_string(), key.to_string(), n))
        })
        .collect()
}

#[test]
fn counts_equal_bpftraces() {
    if !needs() {
        return;
    }
    let script = script(1000);
    let ours = parse_counts(&stdout(&usdt(
        &["count", "python:function__entry", "python:function__return"],
        &script,
    )));
    let theirs = bpftrace(
        &format!(
            "usdt:{PYTHON3}:python:function__entry {{ @entry = count(); }} \
             usdt:{PYTHON3}:python:function__return {{ @return = count(); }}"
        ),
        &script,
    );
    let of = |name: &str| {
        theirs
            .iter()
            .find(|(n, _, _)| n == name)
            .map_or(0, |(_, _, c)| *c)
    };
    eprintln!("usdt {ours:?}, bpftrace {theirs:?}");
    assert_eq!(ours["python:function__entry"], of("entry"));
    assert_eq!(ours["python:function__return"], of("return"));
    assert!(ours["python:function__return"] > 1000, "{ours:?}");
}

/// `count --by funcname`: the function's name read in the kernel, `work`
/// returned from exactly as often as the script calls it, as bpftrace's
/// `@[str(arg1)]` counts.
#[test]
fn count_by_funcname() {
    if !needs() {
        return;
    }
    let script = script(1000);
    let out = stdout(&usdt(
        &[
            "count",
            "--by",
            "funcname",
            "--top",
            "1000",
            "python:function__return",
        ],
        &script,
    ));
    let work = out
        .lines()
        .find_map(|l| l.trim().strip_suffix("  \"work\""))
        .unwrap_or_else(|| panic!("no work in {out}"));
    assert_eq!(work.trim(), "1000", "{out}");
    let theirs = bpftrace(
        &format!("usdt:{PYTHON3}:python:function__return {{ @[str(arg1)] = count(); }}"),
        &script,
    );
    let by_name = |name: &str| theirs.iter().find(|(_, k, _)| k == name).map(|t| t.2);
    assert_eq!(by_name("work"), Some(1000), "{theirs:?}");
    // Every other name is counted alike.
    for line in out.lines().skip(1) {
        let Some((n, name)) = line.trim().split_once("  \"") else {
            continue;
        };
        let name = name.trim_end_matches('"');
        assert_eq!(by_name(name), Some(n.parse().unwrap()), "{name}: {out}");
    }
}

/// `trace`: file, function and line by name.
#[test]
fn trace_prints_file_function_and_line() {
    if !needs() {
        return;
    }
    let script = script(3);
    let out = stdout(&usdt(&["trace", "python:function__return"], &script));
    let want = format!(
        "python:function__return filename=\"{}\" funcname=\"work\" lineno=2",
        script.display()
    );
    assert_eq!(
        out.lines().filter(|l| l.ends_with(&want)).count(),
        3,
        "{out}"
    );
    let list = stdout(&run_ok(
        Command::new(env!("CARGO_BIN_EXE_usdt")).args(["list", PYTHON3]),
    ));
    assert!(
        list.contains(
            "python:function__entry(filename: char *, funcname: char *, lineno: int) [catalog: python]"
        ),
        "{list}"
    );
}
