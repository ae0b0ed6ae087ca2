//! Idle cost in instructions, counted by `valgrind --tool=callgrind` (this
//! machine has no hardware counters).
//!
//! Each loop runs in a child under callgrind twice, with `N1` and `N2`
//! iterations; `(Ir(N2) - Ir(N1)) / (N2 - N1)` is its cost per iteration, with
//! start-up and exit cancelled out. Every probe is then reported as its
//! difference from the bare loop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const N1: u64 = 1_000_000;
const N2: u64 = 2_000_000;
/// The `tracing` loops and the request loops cost hundreds to thousands of
/// instructions per iteration: they run this many times fewer iterations.
const TRACING_SCALE: u64 = 100;

/// The loops counted, as (key in the JSON, program, argument of
/// `--callgrind-child`). `bare` first: the others are reported against it.
pub fn jobs(bench: &Path, peers: Option<&Path>) -> Vec<(&'static str, PathBuf, &'static str)> {
    let mut jobs = vec![
        ("bare", bench.to_owned(), "bare"),
        ("usdt", bench.to_owned(), "usdt"),
        ("usdt-lazy", bench.to_owned(), "usdt-lazy"),
        ("usdt-str", bench.to_owned(), "usdt-str"),
        ("c-sdt", bench.to_owned(), "c-sdt"),
        ("probe-crate", bench.to_owned(), "probe-crate"),
        ("tracing-registry", bench.to_owned(), "tracing-registry"),
        ("tracing-usdt-idle", bench.to_owned(), "tracing-usdt-idle"),
        ("tracing-floor", bench.to_owned(), "tracing-floor"),
        ("tracing-fmt", bench.to_owned(), "tracing-fmt"),
    ];
    if let Some(peers) = peers {
        // The helper's own bare loop, to check it compiles like ours.
        jobs.push(("peers-bare", peers.to_owned(), "bare"));
        jobs.push(("oxide-usdt", peers.to_owned(), "oxide-usdt"));
    }
    jobs
}

/// Is valgrind there (installed now, as root, if it is not)? `Err` says why not.
pub fn available() -> Result<(), String> {
    usdt_provision::ensure(&[usdt_provision::Need::package(
        usdt_provision::VALGRIND,
        "the bench counts idle instructions with callgrind",
    )])
    .map_err(|e| e.to_string())
}

/// Instructions per iteration of `program --callgrind-child LOOP N`.
pub fn per_iteration(program: &Path, name: &str) -> Result<f64, String> {
    let scale = if name.starts_with("tracing") || name.starts_with("requests") {
        TRACING_SCALE
    } else {
        1
    };
    let (n1, n2) = (N1 / scale, N2 / scale);
    let i1 = instructions(program, name, n1)?;
    let i2 = instructions(program, name, n2)?;
    Ok((i2 as f64 - i1 as f64) / (n2 - n1) as f64)
}

/// Total instructions (`Ir`) of one child under callgrind.
fn instructions(program: &Path, name: &str, n: u64) -> Result<u64, String> {
    let out = std::env::temp_dir().join(format!(
        "usdt-bench-{}-{name}-{n}.callgrind",
        std::process::id()
    ));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(program)
        .args(["--callgrind-child", name, &n.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("could not run valgrind: {e}"))?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        return Err(format!(
            "valgrind on `{} --callgrind-child {name} {n}` failed ({status})",
            program.display()
        ));
    }
    let text = text.map_err(|e| format!("{}: {e}", out.display()))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no `totals:` line in callgrind's output for {name}"))
}
