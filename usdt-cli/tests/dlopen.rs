//! Libraries a program loads with `dlopen` after `usdt count` started
//! (`-- CMD`) or attached (`-p`) are found by watching the process's
//! mappings and counted and traced, with either engine.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use usdt_test_support::c::build_c;
use usdt_test_support::cli::parse_counts;
use usdt_test_support::{ready, ROOT, SDT};

fn programs() -> (PathBuf, PathBuf) {
    let lib = build_c("libdlprobes.so", &["dlprobes.c"], &["-shared", "-fPIC"]);
    let exe = build_c("dlopener", &["dlopener.c"], &["-ldl"]);
    (exe, lib)
}

/// `usdt count ARGS` under a deadline: (status code, stdout, stderr).
fn count(args: &[&str], engine: &str) -> (Option<i32>, String, String) {
    let out = Command::new("timeout")
        .args(["-k", "5", "120", env!("CARGO_BIN_EXE_usdt"), "count"])
        .args(args)
        .env("USDT_COUNT_ENGINE", engine)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(out: &str, err: &str) {
    let counts = parse_counts(out);
    assert_eq!(counts.get("dl:hit"), Some(&500), "{out}\n{err}");
    assert_eq!(counts.get("dlmain:tick"), Some(&1), "{out}\n{err}");
    assert!(
        err.contains("libdlprobes.so was mapped after the start: counting its 1 sites"),
        "{err}"
    );
}

#[test]
fn a_library_loaded_after_a_command_started_is_counted() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let (exe, lib) = programs();
    for engine in ["bpf", "perf"] {
        let (code, out, err) = count(
            &[
                "--",
                exe.to_str().unwrap(),
                lib.to_str().unwrap(),
                "500",
                "0",
                "800",
            ],
            engine,
        );
        assert_eq!(code, Some(0), "{engine}: {out}\n{err}");
        check(&out, &err);
    }
}

#[test]
fn a_library_loaded_after_attaching_to_a_process_is_counted() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let (exe, lib) = programs();
    for engine in ["bpf", "perf"] {
        // The program loads the library 2 s after it starts: by then usdt is
        // counting it (it misses the tick the program fired at its start).
        let mut prog = Command::new("timeout")
            .args(["-k", "5", "60"])
            .arg(&exe)
            .args([lib.to_str().unwrap(), "500", "2000", "800"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = prog.id();
        // `timeout` is the parent: count its child, the program.
        let child = loop {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            if let Some(c) = children.split_whitespace().next() {
                break c.to_string();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let (code, out, err) = count(&["-p", &child], engine);
        assert!(prog.wait().unwrap().success());
        assert_eq!(code, Some(0), "{engine}: {out}\n{err}");
        let counts = parse_counts(&out);
        assert_eq!(counts.get("dl:hit"), Some(&500), "{engine}: {out}\n{err}");
        assert!(
            err.contains("libdlprobes.so was mapped after the start: counting its 1 sites"),
            "{err}"
        );
    }
}

/// `usdt trace` watches the mappings too: every hit of a library loaded
/// after the command started, or after attaching, with its argument.
#[test]
fn a_library_loaded_later_is_traced() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let (exe, lib) = programs();
    for engine in ["bpf", "perf"] {
        let out = Command::new("timeout")
            .args(["-k", "5", "120", env!("CARGO_BIN_EXE_usdt"), "trace"])
            .args(["--engine", engine, "--"])
            .arg(&exe)
            .args([lib.to_str().unwrap(), "500", "0", "800"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{engine}: {err}");
        assert!(
            err.contains("libdlprobes.so was mapped after the start: tracing its 1 sites"),
            "{engine}: {err}"
        );
        let hits: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once(" dl:hit ").map(|(_, args)| args))
            .collect();
        let want: Vec<String> = (0..500).map(|i| format!("arg0={i}")).collect();
        assert_eq!(hits, want, "{engine}: {err}");
        assert_eq!(text.matches(" dlmain:tick").count(), 1, "{engine}");
    }
}
