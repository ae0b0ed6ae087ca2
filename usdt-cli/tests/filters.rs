//! Filters (`--if`) and latency per value (`latency --by`) on a program
//! written outside the project (`tests/outside/requests.rs`: requests with
//! a path, a status and a size, which it prints): `count --if` counts
//! exactly the hits the program says matched (integers signed and not,
//! strings, prefixes, `and`/`or`/`not`, names and `argN`), `trace --if`
//! prints exactly them with either engine, `latency --by path` gives each
//! path the wait the program measured; a filter that is malformed, names
//! what a probe does not have, or compares a string with a number is
//! refused in one line naming its column before anything is attached; and
//! a hit the filter drops takes no room in the BPF ring (a ring of one
//! page, 99.95% of the hits dropped: none lost, where without the filter
//! most are). Needs root and BPF uprobe_multi links (Linux 6.6+).

use std::process::{Command, Output};

use serde_json::Value;
use usdt_test_support::cli::outside;
use usdt_test_support::cli::stdout;
use usdt_test_support::process::output_within;
use usdt_test_support::{ready, ROOT};
use usdt_trace::{EngineKind, Filter, Picked, Recorder};

fn usdt(args: &[&str]) -> Output {
    output_within(Command::new(env!("CARGO_BIN_EXE_usdt")).args(args), 600)
}

/// One request as the program printed it.
#[derive(Clone, Debug)]
struct Request {
    id: u64,
    path: String,
    status: u16,
    bytes: i64,
}

/// The `request ID PATH STATUS BYTES` lines of the program's output.
fn requests(text: &str) -> Vec<Request> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.strip_prefix("request ")?.split(' ').collect();
            Some(Request {
                id: w[0].parse().ok()?,
                path: w[1].into(),
                status: w[2].parse().ok()?,
                bytes: w[3].parse().ok()?,
            })
        })
        .collect()
}

/// The JSON objects of the output, one a line.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `provider:name N` of `usdt count`'s output.
fn counted(text: &str, probe: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(probe)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no count of {probe} in {text}"))
}

const N: u64 = 3000;

#[test]
fn count_if_counts_exactly_the_hits_that_matched() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let p = program.to_str().unwrap();
    type Pred = fn(&Request) -> bool;
    let cases: [(&str, &str, Pred); 9] = [
        ("http:request_done", "status >= 500", |r| r.status >= 500),
        ("http:request_done", "status == 404 or bytes < 0", |r| {
            r.status == 404 || r.bytes < 0
        }),
        (
            "http:request_done",
            "not (status < 300) and arg0 < 1000",
            |r| r.status >= 300 && r.id < 1000,
        ),
        ("http:request_done", "-500 > bytes", |r| r.bytes < -500),
        ("http:request_start", r#"path == "/api/users""#, |r| {
            r.path == "/api/users"
        }),
        ("http:request_start", r#"path ^= "/static/""#, |r| {
            r.path.starts_with("/static/")
        }),
        (
            "http:request_start",
            r#"path != "/health" && (id >= 2500 || path ^= "/api/")"#,
            |r| r.path != "/health" && (r.id >= 2500 || r.path.starts_with("/api/")),
        ),
        ("http:request_start", r#"str(arg1) ^= "/api/o""#, |r| {
            r.path.starts_with("/api/o")
        }),
        ("http:request_start", r#"path == "/api/user""#, |_| false),
    ];
    for (probe, filter, pred) in cases {
        let out = usdt(&[
            "count",
            "--if",
            filter,
            probe,
            "--",
            p,
            "count",
            &N.to_string(),
        ]);
        let text = stdout(&out);
        let reqs = requests(&text);
        assert_eq!(reqs.len() as u64, N);
        let expected = reqs.iter().filter(|r| pred(r)).count() as u64;
        assert_eq!(counted(&text, probe), expected, "{probe} --if '{filter}'");
        assert!(
            expected == 0 || expected < N,
            "{filter}: a filter that drops nothing tests nothing"
        );
    }
    // In the aggregating program: counts per value, a histogram.
    let out = usdt(&[
        "count",
        "--by",
        "status",
        "--if",
        "bytes < 0",
        "http:request_done",
        "--",
        p,
        "count",
        "800",
    ]);
    let text = stdout(&out);
    let reqs = requests(&text);
    let mut expected: Vec<(u64, String)> = [200u16, 201, 404, 500, 503]
        .iter()
        .map(|st| {
            let n = reqs
                .iter()
                .filter(|r| r.bytes < 0 && r.status == *st)
                .count() as u64;
            (n, st.to_string())
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let rows: Vec<(u64, String)> = text
        .lines()
        .skip_while(|l| !l.starts_with("http:request_done by status"))
        .skip(1)
        .filter_map(|l| {
            let (n, v) = l.trim_start().split_once("  ")?;
            Some((n.parse().ok()?, v.to_string()))
        })
        .collect();
    assert_eq!(rows, expected, "{text}");
    let out = usdt(&[
        "hist",
        "--json",
        "--if",
        r#"path == "/health""#,
        "http:request_start",
        "id",
        "--",
        p,
        "count",
        "800",
    ]);
    let text = stdout(&out);
    let health = requests(&text)
        .iter()
        .filter(|r| r.path == "/health")
        .count();
    let line = text.lines().rfind(|l| l.starts_with('{')).unwrap();
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["count"], health as u64, "{v}");
    // Both probes have an `id`: each counts its own.
    let out = usdt(&[
        "count", "--if", "id < 100", "http:*", "--", p, "count", "500",
    ]);
    let text = stdout(&out);
    assert_eq!(counted(&text, "http:request_start"), 100);
    assert_eq!(counted(&text, "http:request_done"), 100);
}

#[test]
fn trace_if_prints_exactly_the_hits_that_matched_with_either_engine() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let p = program.to_str().unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("filters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The program's lines in a file of their own: on stdout they would
    // interleave with usdt's.
    let file = dir.join("requests");
    let f = file.to_str().unwrap();
    let made = || requests(&std::fs::read_to_string(&file).unwrap());
    for engine in ["bpf", "perf"] {
        let filter = r#"status >= 500 and bytes >= 0 or status == 201"#;
        let out = usdt(&[
            "trace",
            "--json",
            "--engine",
            engine,
            "--if",
            filter,
            "http:request_done",
            "--",
            p,
            "count",
            "1000",
            f,
        ]);
        let text = stdout(&out);
        let expected: Vec<u64> = made()
            .iter()
            .filter(|r| r.status >= 500 && r.bytes >= 0 || r.status == 201)
            .map(|r| r.id)
            .collect();
        let traced: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["args"]["id"].as_u64().unwrap()
            })
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(traced, expected, "--engine {engine}");
        // Strings, tested by the kernel (BPF) or by usdt (perf).
        let out = usdt(&[
            "trace",
            "--engine",
            engine,
            "--if",
            r#"path ^= "/api/" and not path == "/api/orders""#,
            "http:request_start",
            "--",
            p,
            "count",
            "300",
            f,
        ]);
        let text = stdout(&out);
        let users = made().iter().filter(|r| r.path == "/api/users").count();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(" http:")).collect();
        assert_eq!(lines.len(), users, "--engine {engine}: {text}");
        assert!(
            lines.iter().all(|l| l.ends_with(r#"path="/api/users""#)),
            "{lines:?}"
        );
    }
    // Perf events count every hit: count --if refuses them in one line.
    let out = usdt(&[
        "count", "--engine", "perf", "--if", "id > 3", "http:*", "--", p, "count", "3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "usdt: count --if tests each hit in a BPF program, and perf events count every hit in the kernel; `usdt trace --if EXPR --engine perf` tests them in usdt instead\n"
    );
}

#[test]
fn mistakes_are_refused_at_their_column_before_anything_runs() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let p = program.to_str().unwrap();
    for (args, error) in [
        (
            vec!["count", "--if", "status >> 500", "http:request_done"],
            "usdt: --if: column 9: expected a number or a \"string\" after `>`, found `>`",
        ),
        (
            vec!["count", "--if", "(status == 500", "http:request_done"],
            "usdt: --if: column 1: this `(` is not closed with `)`",
        ),
        (
            vec!["count", "--if", "status >= 500", "http:*"],
            "usdt: --if: column 1: http:request_start has no argument `status`; it takes id, path or arg0 to arg1",
        ),
        (
            vec!["trace", "--if", "path == 404", "http:request_start"],
            "usdt: --if: column 9: `path` (&str) is a string: compare it with a string in double quotes",
        ),
        (
            vec!["hist", "--if", "status == \"500\"", "http:request_done", "bytes"],
            "usdt: --if: column 11: `status` (u16) is an integer, not a string",
        ),
        (
            vec!["count", "--by", "path", "--if", "status > 65536", "http:request_done"],
            "usdt: --if: column 10: 65536 is out of the range of `status` (u16) (0 to 65535)",
        ),
        (
            vec![
                "latency",
                "http:request_start",
                "http:request_done",
                "--if-start",
                "bytes < 0",
            ],
            "usdt: --if-start: column 1: http:request_start has no argument `bytes`; it takes id, path or arg0 to arg1",
        ),
        (
            vec![
                "latency",
                "http:request_start",
                "http:request_done",
                "--if-end",
                "path ^= \"/a\"",
            ],
            "usdt: --if-end: column 1: http:request_done has no argument `path`; it takes id, status, bytes or arg0 to arg2",
        ),
    ] {
        let mut all = args.clone();
        all.extend(["--", p, "count", "5"]);
        let out = usdt(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("{error}\n"),
            "{args:?}"
        );
        // The program never ran: it was killed before its first request.
        assert!(requests(&String::from_utf8_lossy(&out.stdout)).is_empty());
    }
}

#[test]
fn latency_by_path_gives_each_path_its_own_wait() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let rounds = 15;
    let out = usdt(&[
        "latency",
        "http:request_start",
        "http:request_done",
        "--key",
        "id",
        "--by",
        "path",
        "--json",
        "--",
        program.to_str().unwrap(),
        "latency",
        &rounds.to_string(),
    ]);
    let text = stdout(&out);
    let objects = json_lines(&text);
    let mut buckets = vec![];
    for line in text.lines().filter(|l| l.starts_with("path ")) {
        // `path PATH requests N median_ns M`
        let w: Vec<&str> = line.split(' ').collect();
        let (path, n, median): (&str, u64, u64) =
            (w[1], w[3].parse().unwrap(), w[5].parse().unwrap());
        assert_eq!(n, rounds);
        let v = objects
            .iter()
            .find(|o| o["value"] == path)
            .unwrap_or_else(|| panic!("no object for {path}: {text}"));
        assert_eq!(v["by"], "path");
        assert_eq!(v["count"], rounds, "{v}");
        // The kernel's p50 is in the log2 bucket of the program's own
        // median: [2^k, 2^(k+1)) ns.
        let p50 = v["p50_ns"].as_u64().unwrap();
        let bucket = |ns: u64| 64 - ns.leading_zeros();
        assert_eq!(
            bucket(p50),
            bucket(median),
            "{path}: p50 {p50} ns, the program's median {median} ns"
        );
        buckets.push(bucket(median));
    }
    assert_eq!(buckets.len(), 4, "{text}");
    // Each path waits in a bucket of its own.
    let mut distinct = buckets.clone();
    distinct.dedup();
    assert_eq!(distinct, buckets);
    // The values, then "other" (none), then the total.
    let other = &objects[4];
    assert_eq!(other["value"], Value::Null);
    assert_eq!(
        (other["count"].as_u64(), other["other_values"].as_u64()),
        (Some(0), Some(0))
    );
    let total = objects.last().unwrap();
    assert_eq!(total["count"], 4 * rounds);

    // The text: the top 2 by p99 (the two slowest paths), each with its
    // histogram, the other two summed.
    let out = usdt(&[
        "latency",
        "http:request_start",
        "http:request_done",
        "--key",
        "id",
        "--by",
        "path",
        "--top",
        "2",
        "--sort",
        "p99",
        "--",
        program.to_str().unwrap(),
        "latency",
        "3",
    ]);
    let text = stdout(&out);
    let heads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("path \"") || l.starts_with("other"))
        .collect();
    assert_eq!(heads.len(), 3, "{text}");
    assert!(
        heads[0].starts_with("path \"/static/app.js\": count 3  p50 "),
        "{text}"
    );
    assert!(
        heads[1].starts_with("path \"/api/orders\": count 3  p50 "),
        "{text}"
    );
    assert!(
        heads[2].starts_with("other (2 values): count 6  p50 "),
        "{text}"
    );
    assert!(text.contains("\nall: count 12  p50 "), "{text}");
}

/// The map of values holds 1,024: the pairs of the values after them are
/// in the total and in "other", said apart.
#[test]
fn values_past_the_full_map_are_other() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let out = usdt(&[
        "latency",
        "http:request_start",
        "http:request_done",
        "--key",
        "id",
        "--by",
        "id",
        "--top",
        "3",
        "--json",
        "--",
        program.to_str().unwrap(),
        "count",
        "1100",
    ]);
    let text = stdout(&out);
    let objects = json_lines(&text);
    let [a, b, c, other, total] = &objects[..] else {
        panic!("{text}");
    };
    for v in [a, b, c] {
        assert_eq!(v["count"], 1, "{v}");
    }
    assert_eq!(other["values_not_kept"], 1100 - 1024, "{other}");
    assert_eq!(other["other_values"], 1024 - 3, "{other}");
    assert_eq!(other["count"], 1100 - 3, "{other}");
    assert_eq!(total["count"], 1100, "{total}");
}

/// The BPF ring holds one page (some 20 records): the program's 20,000
/// hits, as fast as they go, overflow it; with a filter that passes 10 of
/// them, none is lost and exactly those 10 are read.
#[test]
fn a_hit_the_filter_drops_takes_no_room_in_the_ring() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = outside("requests");
    let record = |filter: Option<&str>| {
        let mut r = Recorder::new(&program)
            .args(["burst", "20000"])
            .probes("http:request_done")
            .engine(Picked::only(EngineKind::Bpf))
            .ring_pages(1);
        if let Some(f) = filter {
            r = r.filter(Filter::parse(f).unwrap());
        }
        r.run().unwrap()
    };
    let all = record(None);
    assert!(all.lost > 0, "{} hits, none lost", all.hits.len());
    let run = record(Some("id >= 19990"));
    assert_eq!(run.lost, 0);
    let ids: Vec<i128> = run.hits.iter().map(|h| h.args[0].int().unwrap()).collect();
    assert_eq!(ids, (19990..20000).collect::<Vec<i128>>());
}
