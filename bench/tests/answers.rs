//! The answers section: `bench --answers-only --quick` measures every row
//! (each checks that every request was aggregated, bpftrace's by the sum of
//! its histogram; `trace` and `trace --stack` that every hit was read, with
//! its stack; `count --if` and bpftrace's predicate the 1% of hits they
//! pass), each beside the empty program's row of its site and link,
//! the ratio of `trace --stack` to `trace`, of `count --if` to `count`, of
//! `latency --by path` to `latency` and of bpftrace's scripts to both, and
//! `usdt serve`'s CPU; `--latency-svg` draws a `usdt
//! latency --json` object; `--postgres-only --quick` measures PostgreSQL
//! under pgbench, untraced and traced. The bench is built in release in
//! this build's target directory, as tests/bench.rs builds it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use usdt_provision::Need;
use usdt_test_support::process;

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).arg("--quiet");
    cmd
}

/// The release bench, built (and the release `usdt` beside it, which the
/// section runs as `usdt serve`).
fn bench() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    for (package, bin) in [("usdt-bench", "bench"), ("usdt-cli", "usdt")] {
        let status = cargo()
            .args(["build", "--release", "-p", package, "--bin", bin])
            .arg("--target-dir")
            .arg(target)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building {bin} failed");
    }
    target.join("release/bench")
}

/// What `bench ARGS` prints, once it succeeded.
fn section(args: &[&str]) -> String {
    // Under a deadline, its progress shown as it runs (as tests/bench.rs).
    let child = Command::new(bench())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bench runs");
    let out = process::wait_output_echoing(child, 600);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// Each of `rows` is measured: a positive value and ratio after its name;
/// nothing is "not measured".
fn check_rows(stdout: &str, rows: &[&str]) {
    for row in rows {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row}\n{stdout}"));
        let words: Vec<&str> = line[row.len()..].split_whitespace().collect();
        let (value, ratio): (f64, f64) = (words[0].parse().unwrap(), words[1].parse().unwrap());
        assert!(value > 0.0 && ratio > 0.0, "{line}");
    }
    assert!(!stdout.contains("not measured"), "{stdout}");
}

#[test]
fn every_answers_row_is_measured_with_its_ratio() {
    if !usdt_provision::ready(&[
        Need::root("the bench attaches uprobes and loads BPF programs"),
        Need::package(
            usdt_provision::BPFTRACE,
            "the answers section runs bpftrace's latency script",
        ),
    ]) {
        return;
    }
    let stdout = section(&["--answers-only", "--quick"]);
    // The name is 30 columns wide; then site, link, ns/hit, x floor, x
    // count.
    let row = |name: &str| -> Vec<Vec<String>> {
        stdout
            .lines()
            .filter(|l| l.len() > 30 && l[..30].trim_end() == name)
            .map(|l| l[30..].split_whitespace().map(String::from).collect())
            .collect()
    };
    let floors = row("empty program");
    let mut kinds: Vec<(&str, &str)> = floors
        .iter()
        .map(|w| (w[0].as_str(), w[1].as_str()))
        .collect();
    kinds.sort();
    let long = if floors.iter().any(|w| w[0] == "nop10") {
        "nop10"
    } else {
        "nop5"
    };
    assert_eq!(
        kinds,
        [
            ("nop", "uprobe"),
            ("nop", "uprobe_multi"),
            (long, "uprobe"),
            (long, "uprobe_multi")
        ],
        "{stdout}"
    );
    for w in &floors {
        assert!(w[2].parse::<f64>().unwrap() > 0.0, "{w:?}");
    }
    for name in [
        "count",
        "count (perf)",
        "count --by kind",
        "latency --key id",
        "latency (tid, nop)",
        "hist kind",
        "bpftrace @start/hist()",
        "trace",
        "trace --stack",
        "trace --engine perf",
        "trace --stack --engine perf",
        "count --if 'id < 10'",
        "bpftrace count()",
        "bpftrace /arg0 < 10/ count()",
        "latency (tid, paths)",
        "latency --by path",
        "bpftrace @lat[str(arg1)]",
    ] {
        let rows = row(name);
        let [w] = rows.as_slice() else {
            panic!("no row {name}\n{stdout}");
        };
        // Its floor is a row of the same site and link.
        assert!(
            floors.iter().any(|f| f[..2] == w[..2]),
            "{name}: no floor at {} by {}\n{stdout}",
            w[0],
            w[1]
        );
        let numbers: Vec<f64> = w[2..5].iter().map(|v| v.parse().unwrap()).collect();
        assert!(numbers.iter().all(|v| *v > 0.0), "{name}: {w:?}");
    }
    assert!(!stdout.contains("not measured"), "{stdout}");
    // trace --stack against trace, each engine, in the same run.
    // ... and the filter and the histograms per value against their
    // plain rows, and bpftrace's scripts against both.
    for pair in [
        "trace --stack / trace: ",
        "trace --stack --engine perf / trace --engine perf: ",
        "count --if 'id < 10' / count: ",
        "bpftrace /arg0 < 10/ count() / bpftrace count(): ",
        "bpftrace /arg0 < 10/ count() / count --if 'id < 10': ",
        "latency --by path / latency (tid, paths): ",
        "bpftrace @lat[str(arg1)] / latency --by path: ",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(pair))
            .unwrap_or_else(|| panic!("no {pair}\n{stdout}"));
        let ratio: f64 = line[pair.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ratio > 0.0, "{line}");
    }
    let serve = stdout
        .lines()
        .find(|l| l.starts_with("usdt serve: "))
        .expect("the serve line");
    assert!(
        serve.contains("% of a CPU between scrapes") && serve.contains("ms of CPU per scrape"),
        "{serve}"
    );
}

#[test]
fn a_latency_histogram_is_drawn() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("latency.json");
    std::fs::write(
        &json,
        r#"{"start":"lat:start","end":"lat:done","key":"id","count":6,"unmatched":0,"lost_starts":0,"sum_ns":27000000,"buckets":[{"low_ns":1048576,"high_ns":2097152,"count":3},{"low_ns":4194304,"high_ns":8388608,"count":3}],"p50_ns":2097152,"p90_ns":8000000,"p99_ns":8100000,"max_ns":8100000}"#,
    )
    .unwrap();
    let svg = dir.join("latency.svg");
    let status = Command::new(bench())
        .arg("--latency-svg")
        .arg(&json)
        .arg(&svg)
        .status()
        .expect("bench runs");
    assert!(status.success());
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("usdt latency lat:start -&gt; lat:done by id: count 6"),
        "{text}"
    );
    // Three buckets from the first to the last, the empty one included, and
    // the two counts.
    for label in [
        "[1.049, 2.097) ms",
        "[2.097, 4.194) ms",
        "[4.194, 8.389) ms",
    ] {
        assert!(text.contains(label), "no {label}");
    }
    let bars = text.matches("fill=\"#1F77B4\"").count();
    assert_eq!(bars, 3, "{text}");
}

#[test]
fn postgresql_under_pgbench_has_each_row_and_its_ratio() {
    if !usdt_provision::ready(&[
        Need::root("the bench attaches uprobes to every backend"),
        Need::package(
            usdt_provision::BPFTRACE,
            "the PostgreSQL section runs bpftrace's latency script",
        ),
        Need::package(
            usdt_provision::POSTGRESQL,
            "the PostgreSQL section runs pgbench against a cluster of its own",
        ),
    ]) {
        return;
    }
    let stdout = section(&["--postgres-only", "--quick"]);
    assert!(
        stdout.contains("\nPostgreSQL under pgbench -n -S "),
        "{stdout}"
    );
    check_rows(
        &stdout,
        &[
            "untraced ",
            "usdt count --all ",
            "usdt latency --all ",
            "bpftrace @start/hist() ",
        ],
    );
}
