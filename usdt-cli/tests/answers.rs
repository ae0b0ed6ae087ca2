//! `usdt latency`, `usdt hist` and `usdt count --by`, aggregated in the
//! kernel, against programs that say what they did: the latency example
//! (start and done of one request on two threads, 1 ms and 8 ms apart in
//! turn) and `traced` (known counts and argument values). Needs root and
//! BPF uprobe_multi links (Linux 6.6+, x86-64).

#[path = "../../usdt-trace/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};

use serde_json::Value;

fn usdt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "usdt failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The last JSON line of the output (the command prints its own lines
/// first).
fn json_of(out: &Output) -> Value {
    let text = stdout(out);
    let line = text
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    serde_json::from_str(line).unwrap()
}

/// The example's own `pairs N sum_ns S` line.
fn measured(out: &Output) -> (u64, u64) {
    let text = stdout(out);
    let line = text
        .lines()
        .find(|l| l.starts_with("pairs "))
        .unwrap_or_else(|| panic!("no pairs line in {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    (words[1].parse().unwrap(), words[3].parse().unwrap())
}

#[test]
fn latency_by_argument_pairs_requests_across_threads() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    let program = common::example("latency");
    let n = 40;
    let out = usdt(&[
        "latency",
        "lat:start",
        "lat:done",
        "--key",
        "arg0",
        "--json",
        "--",
        program.to_str().unwrap(),
        &n.to_string(),
    ]);
    let v = json_of(&out);
    let (pairs, sum_ns) = measured(&out);
    assert_eq!(pairs, n);
    assert_eq!(v["count"], n, "{v}");
    assert_eq!(v["unmatched"], 0, "{v}");
    assert_eq!(v["lost_starts"], 0, "{v}");
    let buckets = v["buckets"].as_array().unwrap();
    let total: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(total, n);
    // 1 ms waits land below 4.2 ms, 8 ms waits above (a loaded machine may
    // stretch a few 1 ms waits).
    let below: u64 = buckets
        .iter()
        .filter(|b| b["high_ns"].as_u64().unwrap() <= 4_194_304)
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert!(
        (n * 35 / 100..=n / 2).contains(&below),
        "{below} of {n} below 4.2 ms: {v}"
    );
    for b in buckets {
        assert!(b["low_ns"].as_u64().unwrap() < b["high_ns"].as_u64().unwrap());
    }
    let p50 = v["p50_ns"].as_u64().unwrap();
    let p99 = v["p99_ns"].as_u64().unwrap();
    let max = v["max_ns"].as_u64().unwrap();
    assert!(
        (1_000_000..=p99).contains(&p50) && p99 <= max,
        "{p50} {p99} {max}"
    );
    assert!(max >= 8_000_000, "{max}");
    assert!(v["p90_ns"].as_u64().unwrap() >= 4_194_304, "{v}");
    // The kernel's sum is the program's own measure, less what the
    // program's clock reads add around the probes.
    let kernel = v["sum_ns"].as_u64().unwrap() as f64;
    let own = sum_ns as f64;
    assert!(
        (kernel - own).abs() / own < 0.05,
        "kernel {kernel} ns, program {own} ns"
    );
}

#[test]
fn latency_by_thread_pairs_none_across_threads() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    let program = common::example("latency");
    let out = usdt(&[
        "latency",
        "lat:start",
        "lat:done",
        "--json",
        "--",
        program.to_str().unwrap(),
        "6",
    ]);
    let v = json_of(&out);
    assert_eq!(v["count"], 0, "{v}");
    assert_eq!(v["unmatched"], 6, "{v}");
    assert_eq!(v["buckets"].as_array().unwrap().len(), 0, "{v}");
}

#[test]
fn latency_by_parameter_name_prints_a_histogram() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    let program = common::example("latency");
    let out = usdt(&[
        "latency",
        "lat:start",
        "lat:done",
        "--key",
        "id",
        "--",
        program.to_str().unwrap(),
        "10",
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("lat:start -> lat:done by id, nanoseconds:"),
        "{text}"
    );
    // bpftrace's rows: `[1M, 2M)   5 |@@@@|`.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert!(rows.len() >= 2, "{text}");
    assert!(rows.iter().all(|r| r.ends_with('|')), "{text}");
    assert!(text.contains("count 10  p50 "), "{text}");
    assert!(text.contains("unmatched ends 0  lost starts 0"), "{text}");
}

#[test]
fn latency_refuses_what_cannot_pair() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    let program = common::example("latency");
    let p = program.to_str().unwrap();
    let out = usdt(&[
        "latency",
        "lat:start",
        "lat:done",
        "--key",
        "nope",
        "--",
        p,
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().last().unwrap(),
        "usdt: lat:start has no argument nope; it takes id or arg0 to arg0",
        "{err}"
    );
    let out = usdt(&["latency", "lat:*", "lat:done", "--", p, "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a probe: write provider:name"), "{err}");
}
