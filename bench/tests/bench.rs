//! The benchmark runs: `bench --quick --json FILE` reports every row with a
//! positive rate, and the idle instruction counts.
//!
//! The bench is built in release by a nested cargo, in this build's target
//! directory (where the README's `cargo run --release -p usdt-bench` builds
//! it too). Attached rows need root; without it only the idle rows are
//! expected, and the table says why the others are missing.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use usdt_provision::Need;
use usdt_test_support::process;

const IDLE_ROWS: [&str; 4] = [
    "usermode-count",
    "syscall-count",
    "usdt-idle",
    "usdt-idle-lazy",
];
const ATTACHED_ROWS: [&str; 7] = [
    "usdt-nop",
    "usdt-nop5",
    "usdt-nop5-bpf",
    "usdt-lazy",
    "c-sdt-nop",
    "oxide-usdt",
    "probe-crate",
];
const IDLE_KEYS: [&str; 10] = [
    "bare",
    "usdt",
    "usdt-lazy",
    "usdt-str",
    "c-sdt",
    "oxide-usdt",
    "probe-crate",
    "tracing-registry",
    "tracing-usdt-idle",
    "tracing-fmt",
];

/// Whether valgrind runs here.
fn valgrind_ok() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).arg("--quiet");
    cmd
}

#[test]
fn quick_json_has_every_row() {
    // Without root the bench runs its idle rows and names the others; as root
    // every row runs (the C row's sys/sdt.h and valgrind installed first).
    let root = usdt_provision::is_root();
    if root {
        assert!(usdt_provision::ready(&[
            Need::root("the bench attaches uprobes"),
            Need::package(
                usdt_provision::SDT,
                "the bench's C row is a sys/sdt.h probe"
            ),
            Need::package(
                usdt_provision::VALGRIND,
                "the bench counts idle instructions"
            ),
        ]));
    }
    // CARGO_TARGET_TMPDIR is `<target>/tmp`.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    let json = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-quick.json");
    let _ = std::fs::remove_file(&json);

    // Build first (not timed): the bench builds its peers helper when it starts.
    let mut status = cargo()
        .args([
            "build",
            "--release",
            "-p",
            "usdt-bench",
            "--bin",
            "bench",
            "--target-dir",
        ])
        .arg(target)
        .spawn()
        .expect("cargo runs");
    let status = process::wait_deadline(&mut status, 1200);
    assert!(status.success(), "building the bench failed");
    let bench = target.join("release/bench");
    let mut prepare = Command::new(&bench)
        .arg("--prepare")
        .spawn()
        .expect("bench runs");
    let prepare = process::wait_deadline(&mut prepare, 1200);
    assert!(
        prepare.success(),
        "bench --prepare (building bench/peers) failed"
    );

    // Its progress goes to the test's own stderr as it runs, and it runs
    // under a deadline (ten times its usual time): a bench that hangs
    // fails here and says where each of its threads and children waits.
    let start = Instant::now();
    let child = Command::new(&bench)
        .args(["--quick", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bench runs");
    let out = process::wait_output_echoing(child, 600);
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed\n{stdout}\n{stderr}");
    eprintln!("bench --quick --json took {took:?}");

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("--json wrote a file"))
            .expect("valid JSON");
    let rows = doc["rows"].as_array().expect("rows is an array");
    let mut expected = IDLE_ROWS.to_vec();
    if root {
        expected.extend(ATTACHED_ROWS);
    } else {
        assert!(stdout.contains("needs root"), "{stdout}");
    }
    for name in expected {
        let row = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("row {name} missing\n{stdout}\n{stderr}"));
        let mops = row["mops"].as_f64().expect("mops is a number");
        assert!(mops > 0.0, "{name}: {mops} M/s");
        assert!(row["stddev"].as_f64().is_some_and(|s| s >= 0.0), "{name}");
        assert!(
            row["attach"].is_string() && row["optimized"].is_boolean(),
            "{name}"
        );
        assert!(stdout.contains(name), "the table has no {name}\n{stdout}");
    }

    // The many-sites section: as root every engine at its quick size, with
    // exact counts (the bench leaves out a run whose counts are wrong).
    if root {
        let many = doc["many_sites"].as_array().expect("many_sites");
        for engine in ["bpf-link", "perf-per-site", "bpftrace"] {
            let row = many
                .iter()
                .find(|r| r["engine"] == engine)
                .unwrap_or_else(|| panic!("many sites: no {engine} run\n{stdout}"));
            assert!(row["attach_ms"].as_f64().is_some_and(|t| t > 0.0), "{row}");
            assert!(row["fds"].as_u64().is_some_and(|n| n > 0), "{row}");
        }
        let bpf = many.iter().find(|r| r["engine"] == "bpf-link").unwrap();
        // One map, one program, one link, whatever the number of sites.
        assert_eq!(bpf["fds"], 3, "{bpf}");
        assert_eq!(bpf["sites"], 1000, "{bpf}");
    } else {
        assert!(doc["many_sites_skipped"].is_string(), "{doc}");
    }

    // The fork guard's section: both rows measured in the same run; as root
    // on a kernel that optimizes nop5 (and loses the trampoline on fork), the
    // helper's site is optimized and the guard active.
    let fork = &doc["fork_guard"];
    for key in [
        "us_per_fork_with_guard",
        "us_per_fork_without_guard",
        "ratio",
    ] {
        assert!(
            fork[key].as_f64().is_some_and(|v| v > 0.0),
            "fork_guard.{key}: {fork}\n{stdout}"
        );
    }
    let nop5 = usdt_trace::KernelFeatures::detect().uprobe_syscall
        == usdt_trace::UprobeSyscall::OptimizesNop5;
    assert_eq!(fork["guard_active"], nop5, "{fork}");
    if root && nop5 {
        assert_eq!(fork["trampoline"], true, "{fork}");
    }

    // Two threads on one probe: each row's rates and ratio; the counters
    // count the hits of both threads.
    let threads: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Two threads on one probe"))
        .collect();
    let mut names = vec!["usdt-idle", "syscall-count"];
    if root {
        names.extend(["empty program", "perf counter", "bpf counter"]);
    }
    for name in names {
        let lines: Vec<&&str> = threads
            .iter()
            .filter(|l| l.len() > 16 && l[..16].trim_end() == name)
            .collect();
        assert!(!lines.is_empty(), "no threads row {name}\n{stdout}");
        for line in lines {
            let ratio = line
                .split_whitespace()
                .find_map(|w| w.strip_suffix('x')?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no ratio: {line}"));
            assert!(ratio > 0.0, "{line}");
            assert!(!line.contains("counted"), "a counter missed hits: {line}");
        }
    }

    // The site layouts in one binary: every loop timed; with valgrind, the
    // two-nop site costs its 2 instructions and the three-nop one its 3.
    let layouts: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Site layouts in one binary"))
        .collect();
    for what in [
        "idle loop, no site",
        "idle loop, nop;nop5",
        "idle loop, nop;nop5;nop10",
        "idle loop, this build's probe",
        "requests, no probe",
        "requests, 4 nop;nop5",
        "requests, 4 nop;nop5;nop10",
        "requests, 4 of this build's probes",
    ] {
        let line = layouts
            .iter()
            .find(|l| l.len() > 36 && l[..36].trim_end() == what)
            .unwrap_or_else(|| panic!("no layouts row {what}\n{stdout}"));
        let words: Vec<&str> = line[36..].split_whitespace().collect();
        let ns: f64 = words[words.len() - 2].parse().unwrap();
        assert!(ns > 0.0, "{line}");
        let extra = match what {
            "idle loop, nop;nop5" => Some("+2.00"),
            "idle loop, nop;nop5;nop10" => Some("+3.00"),
            _ => None,
        };
        if let Some(extra) = extra.filter(|_| valgrind_ok()) {
            assert_eq!(words[1], extra, "{line}");
        }
    }

    let idle = &doc["idle_instructions"];
    if !valgrind_ok() {
        assert!(doc["idle_instructions_skipped"].is_string(), "{doc}");
        eprintln!("valgrind is not installed: idle instructions not checked");
        return;
    }
    // Without root and without sys/sdt.h, the C loop cannot be built.
    let c_loop = root || usdt_provision::installed(&usdt_provision::SDT);
    if !c_loop {
        assert!(
            stdout.contains("needs root: installs systemtap-sdt-dev"),
            "{stdout}"
        );
    }
    for key in IDLE_KEYS.into_iter().filter(|k| c_loop || *k != "c-sdt") {
        assert!(
            idle[key].is_number(),
            "idle_instructions.{key} missing: {idle}"
        );
    }
    // The eager probe with register arguments is its site's nops, at most:
    // the nop and one or two long nops.
    let nops = match usdt::SITE_LAYOUT {
        usdt::SiteLayout::NopNop5Nop10 => 3.0,
        _ => 2.0,
    };
    assert!(idle["usdt"].as_f64().unwrap() <= nops, "{idle}");
    assert!(idle["usdt-lazy"].as_f64().unwrap() <= 4.0, "{idle}");
    // An untraced event costs less with tracing-usdt's layer alone than with
    // a bare Registry: the layer drops it before it is built.
    let tracing = |key: &str| idle[key].as_f64().unwrap();
    assert!(
        tracing("tracing-usdt-idle") < tracing("tracing-registry"),
        "{idle}"
    );
    assert!(
        tracing("tracing-registry") < tracing("tracing-fmt"),
        "{idle}"
    );
}
