//! Every example the README names is built and traced as the README and
//! docs/ say to trace it: the `usdt` command (trace, count, list, latency)
//! and bpftrace read exactly the probes, counts and values each program
//! fires. Needs root and tracefs, and bpftrace (installed on first use).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use usdt_test_support::cli::parse_counts;
use usdt_test_support::tracing_demo::limited;
use usdt_test_support::{ready, root, run_ok, Need, BPFTRACE, ROOT, TRACEFS};

const NEEDS: [Need; 2] = [ROOT, TRACEFS];

/// The examples of the root package, the library example's program and the
/// `usdt` command, built once per test process by a nested cargo into the
/// examples' target directory (usdt_test_support::shapes).
fn built() -> &'static PathBuf {
    static DEBUG: OnceLock<PathBuf> = OnceLock::new();
    DEBUG.get_or_init(|| {
        let target = root().join("target/shapes/default");
        run_ok(
            Command::new(env!("CARGO"))
                .current_dir(root())
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "usdt-probes",
                    "-p",
                    "minidb",
                    "-p",
                    "usdt-cli",
                ])
                .args([
                    "--example",
                    "requests",
                    "--example",
                    "lazy",
                    "--example",
                    "demo",
                ])
                .args(["--bin", "minidb", "--bin", "usdt", "--target-dir"])
                .arg(&target)
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_TARGET_DIR"),
        );
        target.join("debug")
    })
}

fn example(name: &str) -> PathBuf {
    built().join("examples").join(name)
}

fn usdt(args: &[&str], program: &Path, program_args: &[&str]) -> Output {
    run_ok(
        limited(built().join("usdt"))
            .args(args)
            .arg("--")
            .arg(program)
            .args(program_args),
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `usdt trace`'s hit lines without their time and pid/tid columns:
/// `provider:name arg=value ...`.
fn hits(out: &Output) -> Vec<String> {
    stdout(out)
        .lines()
        .filter_map(|line| {
            let mut words = line.splitn(3, ' ');
            let time = words.next()?;
            let ids = words.next()?;
            let looks_like_hit = time.parse::<f64>().is_ok() && ids.contains('/');
            looks_like_hit.then(|| words.next().unwrap_or("").to_string())
        })
        .collect()
}

/// The examples the README links to: `examples/NAME.rs` or `examples/NAME/`.
fn named_in_readme() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    text.split("](examples/")
        .skip(1)
        .map(|rest| {
            let name = &rest[..rest.find(')').unwrap()];
            name.trim_end_matches('/')
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect()
}

/// Each example the README names, with the check that traces it.
const CHECKS: [(&str, fn()); 4] = [
    ("requests", requests),
    ("lazy", lazy),
    ("library", library),
    ("demo", demo),
];

#[test]
fn every_example_the_readme_names_is_built_and_traced() {
    let checked: BTreeSet<String> = CHECKS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(
        named_in_readme(),
        checked,
        "the README's examples and those this test traces differ"
    );
    if !ready(&NEEDS) {
        return;
    }
    for (name, check) in CHECKS {
        eprintln!("tracing the example {name}");
        check();
    }
}

/// A web server's probes: every request's start and done, by name and
/// value; bpftrace's reading of the same; the latency of 100 requests.
fn requests() {
    let program = example("requests");
    let out = usdt(&["trace"], &program, &["4"]);
    assert!(stdout(&out).contains("served 4 requests, 1 not found\n"));
    let hits = hits(&out);
    let starts: Vec<&String> = hits
        .iter()
        .filter(|h| h.contains("request_start"))
        .collect();
    assert_eq!(
        starts,
        [
            r#"http:request_start id=0 method="GET" path="/""#,
            r#"http:request_start id=1 method="GET" path="/items/7""#,
            r#"http:request_start id=2 method="POST" path="/items""#,
            r#"http:request_start id=3 method="GET" path="/missing""#,
        ]
    );
    let done: Vec<(String, u64)> = hits
        .iter()
        .filter_map(|h| h.strip_prefix("http:request_done "))
        .map(|h| {
            let (head, elapsed) = h.rsplit_once(" elapsed=").unwrap();
            (
                head.to_string(),
                elapsed.strip_suffix("ns").unwrap().parse().unwrap(),
            )
        })
        .collect();
    let heads: Vec<&str> = done.iter().map(|(head, _)| head.as_str()).collect();
    assert_eq!(
        heads,
        [
            "id=0 status=200",
            "id=1 status=200",
            "id=2 status=201",
            "id=3 status=404"
        ]
    );
    // Each duration is the program's own measurement, below a second.
    assert!(done.iter().all(|(_, ns)| *ns < 1_000_000_000), "{done:?}");

    // The README's bpftrace command.
    if ready(&[BPFTRACE]) {
        let b = program.display();
        let script = format!(
            r#"usdt:{b}:http:request_start {{ printf("%d %s %s\n", arg0, str(arg1), str(arg2)); }}"#
        );
        let out = run_ok(
            limited("bpftrace")
                .arg("-e")
                .arg(&script)
                .arg("-c")
                .arg(&program),
        );
        let text = stdout(&out);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert_eq!(
            lines,
            [
                "0 GET /",
                "1 GET /items/7",
                "2 POST /items",
                "3 GET /missing"
            ]
        );
    }

    let out = usdt(
        &[
            "latency",
            "http:request_start",
            "http:request_done",
            "--key",
            "id",
            "--json",
        ],
        &program,
        &["100"],
    );
    let text = stdout(&out);
    let json = text.lines().rfind(|l| l.starts_with('{')).unwrap();
    for field in [
        r#""count":100,"#,
        r#""unmatched":0,"#,
        r#""lost_starts":0,"#,
    ] {
        assert!(json.contains(field), "{field} in {json}");
    }
}

/// Lazy probes: untraced, no closure runs; traced, one per hit, and the
/// `*_enabled()` branch once.
fn lazy() {
    let program = example("lazy");
    let out = run_ok(Command::new(&program).arg("6"));
    assert_eq!(stdout(&out), "looked up 6 keys, built arguments 0 times\n");

    let out = usdt(&["count", "cache:*"], &program, &["6"]);
    assert!(stdout(&out).contains("looked up 6 keys, built arguments 7 times\n"));
    let counts = parse_counts(&stdout(&out));
    assert_eq!(counts.get("cache:lookup"), Some(&6), "{counts:?}");
    assert_eq!(counts.get("cache:summary"), Some(&1), "{counts:?}");

    let out = usdt(&["trace"], &program, &["4"]);
    assert_eq!(
        hits(&out),
        [
            r#"cache:lookup key=0 hit=true keys="0,2""#,
            r#"cache:lookup key=1 hit=false keys="0,2""#,
            r#"cache:lookup key=2 hit=true keys="0,2""#,
            r#"cache:lookup key=3 hit=false keys="0,2""#,
            "cache:summary entries=2 total=20",
        ]
    );
}

/// Probes declared in a library crate, fired in its functions, traced in
/// the program that uses it, with their Rust signatures.
fn library() {
    let program = built().join("minidb");
    let list = run_ok(limited(built().join("usdt")).arg("list").arg(&program));
    let list = stdout(&list);
    for signature in [
        "minidb:insert(id: u64, name: &str)",
        "minidb:select(prefix: &str, rows: u64)",
    ] {
        assert!(list.contains(signature), "{signature} in\n{list}");
    }
    let out = usdt(&["trace"], &program, &[]);
    // The program's own lines, between the hits' (they share the pipe).
    let text = stdout(&out);
    let own: Vec<&str> = text.lines().filter(|l| l.contains(": [")).collect();
    assert_eq!(own, ["a: [1, 2]", "g: [3]", "x: []"], "{text}");
    assert_eq!(
        hits(&out),
        [
            r#"minidb:insert id=1 name="ada""#,
            r#"minidb:insert id=2 name="alan""#,
            r#"minidb:insert id=3 name="grace""#,
            r#"minidb:select prefix="a" rows=2"#,
            r#"minidb:select prefix="g" rows=1"#,
            r#"minidb:select prefix="x" rows=0"#,
        ]
    );
}

/// The demo: every kind of probe, each counted once per request.
fn demo() {
    let out = usdt(&["count", "http:*"], &example("demo"), &["3"]);
    assert!(stdout(&out).contains("fired 3 requests; 3 were traced at request_done\n"));
    let counts = parse_counts(&stdout(&out));
    for probe in ["http:request_start", "http:request_done", "http:tick"] {
        assert_eq!(counts.get(probe), Some(&3), "{probe}: {counts:?}");
    }
}
