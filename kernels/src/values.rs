//! g. The values checks, on the examples that say what they did:
//!
//! - `types phases`, traced by `usdt trace --json -p PID` with each engine
//!   the kernel offers: every hit with exactly the arguments the program
//!   passed (every argument type, extremes, strings, the pointers it
//!   printed, twelve arguments), its lazy probe's closure run while traced
//!   only, and its semaphore back at 0 once the tracer has left;
//! - the `latency` example (requests whose start and end are 1 ms and 8 ms
//!   apart in turn, on two threads): `usdt latency --key id` pairs every
//!   request, its sum is what the program measured itself; `usdt hist`
//!   puts the ids 0 to 19 each in its power of two; `usdt count --by path`
//!   counts each path; `usdt serve --all` gives Prometheus the 5 hits of
//!   `lat:route` of a run it did not start. These aggregate in BPF maps
//!   behind uprobe_multi links: on a kernel without them, each must refuse
//!   in one line that names them;
//! - a program written outside the project ([`crate::build::OUTSIDE`]): `usdt
//!   count` and `usdt trace` with each engine, exact counts and values, and
//!   `usdt latency` pairing its starts and ends.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::build::LayoutBins;
use crate::exec::{logged, run, usdt_on, Outcome, Plan, Running};
use crate::features::FeatureReport;

/// The values checks' results.
#[derive(Clone, Debug)]
pub struct Values {
    /// One object per check: `tool`, `engine`, `status`, `exact`.
    pub checks: Vec<Value>,
}

impl Values {
    /// Whether every check held.
    pub fn exact(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c["exact"] == true)
    }
}

/// Every values check, on the examples beside `bins`' (the default layout).
pub fn check(
    plan: &Plan,
    bins: &LayoutBins,
    engines: &[&str],
    features: &Option<FeatureReport>,
    log: &mut Vec<String>,
) -> Values {
    let mut checks = Vec::new();
    let types = bins.examples.join("types");
    for engine in engines {
        checks.push(types_check(plan, &types, engine, log));
    }
    let latency = bins.examples.join("latency");
    let multi = features.as_ref().is_some_and(|f| f.uprobe_multi);
    checks.push(latency_check(plan, &latency, multi, log));
    checks.push(hist_check(plan, &latency, multi, log));
    checks.push(count_by_check(plan, &latency, multi, log));
    checks.push(serve_check(plan, &latency, multi, log));
    let shop = bins.examples.join(crate::build::OUTSIDE.package());
    for engine in engines {
        checks.push(outside_count(plan, &shop, engine, log));
        checks.push(outside_trace(plan, &shop, engine, log));
    }
    checks.push(outside_latency(plan, &shop, multi, log));
    Values { checks }
}

/// The hits `types phases` makes while traced: everything once, then the
/// lazy probe 50 times, then `types:done`.
const TYPES_HITS: usize = 17 + 50 + 1;

/// One hit as `usdt trace --json` prints it, without time and ids.
fn hit(name: &str, args: Value) -> Value {
    json!({ "probe": format!("types:{name}"), "args": args })
}

/// What `types phases` passes while traced (`pointers`: the addresses it
/// printed), as typed JSON.
pub fn types_expected(pointers: [u64; 3]) -> Vec<Value> {
    let mut hits = vec![
        hit(
            "unsigned",
            json!({"a": u8::MAX, "b": 60000, "c": u32::MAX, "d": u64::MAX, "e": u64::MAX}),
        ),
        hit("unsigned", json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0})),
        hit(
            "signed",
            json!({"a": -1, "b": i16::MIN, "c": i32::MIN, "d": i64::MIN, "e": i64::MIN}),
        ),
        hit(
            "signed",
            json!({"a": i8::MAX, "b": i16::MAX, "c": i32::MAX, "d": i64::MAX, "e": -2}),
        ),
        hit(
            "other",
            json!({"a": true, "b": false, "c": "é", "d": 1.5, "e": -2.0}),
        ),
        hit(
            "strings",
            json!({"a": "hello", "b": "owned string", "c": "c string", "d": "owned c string"}),
        ),
        // A string's staged copy stops at 255 bytes.
        hit(
            "strings",
            json!({"a": "x".repeat(255), "b": "", "c": "", "d": ""}),
        ),
        hit(
            "pointers",
            json!({
                "a": format!("{:#x}", pointers[0]),
                "b": format!("{:#x}", pointers[1]),
                "c": format!("{:#x}", pointers[2]),
            }),
        ),
        hit(
            "twelve",
            json!({
                "a0": u64::MAX, "a1": i64::MIN, "a2": u32::MAX, "a3": -5, "a4": 60000,
                "a5": -300, "a6": 200, "a7": -100, "a8": true, "a9": "z", "a10": 12345,
                "a11": -12345,
            }),
        ),
    ];
    hits.extend((1..=3).map(|v| hit("generic", json!({ "v": v }))));
    hits.extend((1..=5).map(|v| hit("inlined", json!({ "v": v }))));
    hits.extend((0..50).map(|n| hit("lazy", json!({ "n": n, "s": "lazy" }))));
    hits.push(hit("done", json!({})));
    hits
}

/// How `out` (`usdt trace --json`) differs from the hits `want`, in any
/// order: the hits wanted and not printed, and those printed and not
/// wanted (each as its JSON). Both empty: exactly the hits wanted.
pub fn hit_differences(out: &str, want: &[Value]) -> (Vec<String>, Vec<String>) {
    let canonical = |v: &Value| json!({ "probe": v["probe"], "args": v["args"] }).to_string();
    let mut extra: Vec<String> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("probe").is_some())
        .map(|v| canonical(&v))
        .collect();
    let mut missing = Vec::new();
    for w in want.iter().map(canonical) {
        match extra.iter().position(|g| *g == w) {
            Some(i) => {
                extra.swap_remove(i);
            }
            None => missing.push(w),
        }
    }
    (missing, extra)
}

/// Whether `out` holds exactly the hits `want`, in any order.
pub fn same_hits(out: &str, want: &[Value]) -> bool {
    let (missing, extra) = hit_differences(out, want);
    missing.is_empty() && extra.is_empty()
}

/// `usdt trace --json --engine E -p PID 'types:*'` on `types phases`,
/// stopping after its hits: the values, and the semaphore up while traced
/// and down after.
fn types_check(plan: &Plan, types: &Path, engine: &str, log: &mut Vec<String>) -> Value {
    let what = format!("usdt trace --json --engine {engine} -p PID 'types:*' (types phases)");
    let failed = |why: String, log: &mut Vec<String>| {
        log.push(format!("{what}: {why}"));
        json!({ "tool": "usdt trace", "engine": engine, "example": "types", "status": why, "exact": false })
    };
    let mut program = match Running::start(types, &["phases"]) {
        Ok(p) => p,
        Err(e) => return failed(e, log),
    };
    let untraced = program.line(plan.timeout).unwrap_or_default();
    let pid = program.pid().to_string();
    let limit = TYPES_HITS.to_string();
    let args = [
        "trace", "--json", "--engine", engine, "--limit", &limit, "-p", &pid, "types:*",
    ];
    let mut tracer = match Running::start(&plan.usdt, &args) {
        Ok(t) => t,
        Err(e) => {
            program.finish(Duration::from_secs(1));
            return failed(e, log);
        }
    };
    let started = tracer.err_line_starting("usdt: tracing", plan.timeout);
    // Attached: let the program fire. A tracer that could not attach has
    // left: the program, which waits for the semaphore, is stopped.
    program.send("\n");
    let traced = tracer.finish(plan.timeout);
    let ran = program.finish(match started {
        Some(_) => plan.timeout,
        None => Duration::from_secs(1),
    });
    logged(log, what, &traced);
    logged(log, "types phases (traced above)".into(), &ran);
    let line = |prefix: &str| {
        ran.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or("")
            .to_string()
    };
    let pointers: Vec<u64> = line("pointers ")
        .split_whitespace()
        .skip(1)
        .filter_map(|p| p.parse().ok())
        .collect();
    let (missing, extra) = match <[u64; 3]>::try_from(pointers) {
        Ok(p) => hit_differences(&traced.stdout, &types_expected(p)),
        Err(_) => (vec!["the program's pointers line".into()], Vec::new()),
    };
    let values = missing.is_empty() && extra.is_empty();
    // What differed, the first few of each.
    for (what, hits) in [("missing", &missing), ("not passed", &extra)] {
        for h in hits.iter().take(3) {
            log.push(format!("  {what}: {h}"));
        }
    }
    // The lazy probe's closure runs while traced only, and its semaphore
    // reads 0 again once the tracer has detached.
    let semaphore = untraced.trim() == "untraced runs=0 enabled=false"
        && line("traced ") == "traced runs=50 enabled=true"
        && line("detached ") == "detached runs=0 enabled=false";
    json!({
        "tool": "usdt trace",
        "engine": engine,
        "example": "types",
        "status": traced.status,
        "attached": started.is_some(),
        "values": values,
        "missing": missing.len(),
        "not_passed": extra.len(),
        "semaphore_released": semaphore,
        "exact": traced.ok() && ran.ok() && values && semaphore,
    })
}

/// A refusal where the kernel lacks uprobe_multi links: exit 1, one line
/// that names them.
fn refused_for_multi(o: &Outcome) -> bool {
    o.status == "exit=1" && o.stderr.contains("uprobe_multi")
}

/// The last JSON object line of `out` (the program prints its own lines
/// first).
fn last_json(out: &str) -> Value {
    out.lines()
        .rfind(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null)
}

/// `usdt latency lat:start lat:done --key id --json -- latency 6`.
fn latency_check(plan: &Plan, latency: &Path, multi: bool, log: &mut Vec<String>) -> Value {
    let n = 6u64;
    let o = run(
        &plan.usdt,
        &[
            "latency",
            "lat:start",
            "lat:done",
            "--key",
            "id",
            "--json",
            "--",
            &latency.to_string_lossy(),
            &n.to_string(),
        ],
        "",
        plan.timeout,
    );
    logged(
        log,
        format!("usdt latency lat:start lat:done --key id --json -- latency {n}"),
        &o,
    );
    let (exact, why) = match (multi, latency_right(&o.stdout, n)) {
        (true, Ok(())) => (o.ok(), None),
        (true, Err(why)) => {
            log.push(format!("  {why}"));
            (false, Some(why))
        }
        (false, _) => (refused_for_multi(&o), None),
    };
    json!({ "tool": "usdt latency", "engine": "bpf", "example": "latency", "status": o.status, "exact": exact, "why": why })
}

/// Whether `usdt latency --json` output of `latency n` pairs every request
/// and agrees with the program's known waits (1 ms and 8 ms in turn) and
/// its own `pairs N sum_ns S below_4194304 K`: at most half below 4.2 ms,
/// as many as the program measured (but for one at the edge), at least one
/// of 8 ms, and a sum no less than the waits and no more than the
/// program's own, which encloses each of the kernel's durations (it reads
/// its clock before the start probe and after the end probe: on an
/// emulated CPU sharing the machine, the probes' own cost between the two
/// can be milliseconds); else what disagreed.
pub fn latency_right(out: &str, n: u64) -> Result<(), String> {
    let v = last_json(out);
    let own = out
        .lines()
        .find(|l| l.starts_with("pairs "))
        .ok_or("the program printed no pairs line")?;
    let words: Vec<u64> = own
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [pairs, own_sum, own_below] = words[..] else {
        return Err(format!("the program printed \"{own}\""));
    };
    let buckets = v["buckets"].as_array().cloned().unwrap_or_default();
    let count = |b: &Value| b["count"].as_u64().unwrap_or(0);
    let total: u64 = buckets.iter().map(count).sum();
    let below: u64 = buckets
        .iter()
        .filter(|b| b["high_ns"].as_u64().is_some_and(|h| h <= 1 << 22))
        .map(count)
        .sum();
    let sum = v["sum_ns"].as_u64().unwrap_or(0) as f64;
    let waits: u64 = (0..n)
        .map(|id| if id % 2 == 0 { 1_000_000 } else { 8_000_000 })
        .sum();
    let summary = format!(
        "count {} unmatched {} lost_starts {} in buckets {total} below 4.2 ms {below} (the program's {own_below}) max {} sum {sum} ns (the waits {waits}, the program's {own_sum}, {pairs} pairs)",
        v["count"], v["unmatched"], v["lost_starts"], v["max_ns"]
    );
    let right = pairs == n
        && v["count"] == n
        && v["unmatched"] == 0
        && v["lost_starts"] == 0
        && total == n
        && below <= n / 2
        && below.abs_diff(own_below) <= 1
        && v["max_ns"].as_u64().is_some_and(|m| m >= 8_000_000)
        && sum >= waits as f64
        // A microsecond per pair for the order of the two clocks' reads.
        && sum <= (own_sum + n * 1_000) as f64;
    match right {
        true => Ok(()),
        false => Err(summary),
    }
}

/// `usdt ARGS -- PROGRAM N` (the program written outside the project),
/// logged.
fn shop(plan: &Plan, program: &Path, args: &[&str], n: u64, log: &mut Vec<String>) -> Outcome {
    usdt_on(plan, args, program, &[&n.to_string()], log)
}

/// `usdt count --engine E -- shop 4`: each probe 4 times, the lazy one's
/// closure run each time.
fn outside_count(plan: &Plan, program: &Path, engine: &str, log: &mut Vec<String>) -> Value {
    let o = shop(plan, program, &["count", "--engine", engine], 4, log);
    let counts = usdt_test_support::cli::parse_counts(&o.stdout);
    let want = ["order_placed", "paid", "shipped", "tick"].map(|p| (format!("shop:{p}"), 4));
    let counted = counts == want.into_iter().collect();
    let exact = o.ok() && counted && o.stdout.contains("orders 4 charged 4");
    json!({ "tool": "usdt count", "engine": engine, "example": "shop", "status": o.status, "exact": exact })
}

/// What the program written outside the project passes for `n` orders,
/// as typed JSON.
pub fn shop_expected(n: u64) -> Vec<Value> {
    (0..n)
        .flat_map(|id| {
            [
                json!({"probe": "shop:order_placed", "args": {"id": id, "item": "book"}}),
                json!({"probe": "shop:paid", "args": {"id": id, "cents": -250}}),
                json!({"probe": "shop:shipped", "args": {"id": id, "qty": 3}}),
                json!({"probe": "shop:tick", "args": [id]}),
            ]
        })
        .collect()
}

/// `usdt trace --json --engine E -- shop 3`: every hit with its values.
fn outside_trace(plan: &Plan, program: &Path, engine: &str, log: &mut Vec<String>) -> Value {
    let o = shop(
        plan,
        program,
        &["trace", "--json", "--engine", engine],
        3,
        log,
    );
    let (missing, extra) = hit_differences(&o.stdout, &shop_expected(3));
    for (what, hits) in [("missing", &missing), ("not passed", &extra)] {
        for h in hits.iter().take(3) {
            log.push(format!("  {what}: {h}"));
        }
    }
    let exact = o.ok() && missing.is_empty() && extra.is_empty();
    json!({ "tool": "usdt trace", "engine": engine, "example": "shop", "status": o.status, "exact": exact })
}

/// `usdt latency shop:order_placed shop:shipped --key id --json -- shop
/// 5`: every order's placing paired with its shipping (or, without
/// uprobe_multi links, the refusal).
fn outside_latency(plan: &Plan, program: &Path, multi: bool, log: &mut Vec<String>) -> Value {
    let args = [
        "latency",
        "shop:order_placed",
        "shop:shipped",
        "--key",
        "id",
        "--json",
    ];
    let o = shop(plan, program, &args, 5, log);
    let v = last_json(&o.stdout);
    let in_buckets: u64 = v["buckets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["count"].as_u64())
        .sum();
    let exact = match multi {
        true => {
            o.ok()
                && v["count"] == 5
                && v["unmatched"] == 0
                && v["lost_starts"] == 0
                && in_buckets == 5
                && v["sum_ns"].as_u64().is_some_and(|s| s > 0)
        }
        false => refused_for_multi(&o),
    };
    json!({ "tool": "usdt latency", "engine": "bpf", "example": "shop", "status": o.status, "exact": exact })
}

/// `usdt serve --all LATENCY 'lat:*'` on a free port while `latency 5`
/// runs: a scrape of `/metrics` gives `lat:route` its 5 hits, and serve
/// ends on SIGTERM; where the kernel has no uprobe_multi links, a refusal
/// that names them.
fn serve_check(plan: &Plan, latency: &Path, multi: bool, log: &mut Vec<String>) -> Value {
    let path = latency.to_string_lossy();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(19464, |a| a.port());
    let listen = format!("127.0.0.1:{port}");
    let what = format!("usdt serve --listen {listen} --all latency 'lat:*'; latency 5");
    let args = ["serve", "--listen", &listen, "--all", &path, "lat:*"];
    let mut serve = match Running::start(&plan.usdt, &args) {
        Ok(r) => r,
        Err(why) => {
            log.push(format!("{what}: {why}"));
            return json!({ "tool": "usdt serve", "engine": "bpf", "example": "latency", "status": why, "exact": false });
        }
    };
    let serving = serve
        .err_line_starting("usdt: serving", plan.timeout)
        .is_some();
    let want =
        format!("usdt_probe_hits_total{{binary=\"{path}\",provider=\"lat\",probe=\"route\"}} 5");
    let mut scraped = false;
    if serving {
        let program = run(latency, &["5"], "", plan.timeout);
        logged(log, "latency 5 (served)".into(), &program);
        let start = std::time::Instant::now();
        while !scraped && start.elapsed() < Duration::from_secs(10) {
            scraped = metrics(port).is_some_and(|m| m.lines().any(|l| l == want));
            if !scraped {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // SAFETY: kill(2) on the pid of a child not yet waited for.
        unsafe { libc::kill(serve.pid() as i32, libc::SIGTERM) };
    }
    let o = serve.finish(plan.timeout);
    logged(log, what, &o);
    let exact = match multi {
        true => serving && scraped && o.status == format!("exit={}", 128 + libc::SIGTERM),
        false => refused_for_multi(&o),
    };
    json!({ "tool": "usdt serve", "engine": "bpf", "example": "latency", "status": o.status, "exact": exact })
}

/// The body of `GET /metrics` on 127.0.0.1:`port`, if it answered 200.
fn metrics(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
}

/// `usdt hist lat:done id --json -- latency 20`: ids 0 to 19 in their
/// powers of two.
fn hist_check(plan: &Plan, latency: &Path, multi: bool, log: &mut Vec<String>) -> Value {
    let o = run(
        &plan.usdt,
        &[
            "hist",
            "lat:done",
            "id",
            "--json",
            "--",
            &latency.to_string_lossy(),
            "20",
        ],
        "",
        plan.timeout,
    );
    logged(log, "usdt hist lat:done id --json -- latency 20".into(), &o);
    let exact = match multi {
        true => o.ok() && hist_right(&o.stdout),
        false => refused_for_multi(&o),
    };
    json!({ "tool": "usdt hist", "engine": "bpf", "example": "latency", "status": o.status, "exact": exact })
}

/// Whether `usdt hist --json` of the ids 0 to 19 is exact.
pub fn hist_right(out: &str) -> bool {
    let v = last_json(out);
    let buckets: Vec<(u64, u64, u64)> = v["buckets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            let n = |k: &str| b[k].as_u64().unwrap_or(u64::MAX);
            (n("low"), n("high"), n("count"))
        })
        .collect();
    buckets
        == [
            (0, 1, 1),
            (1, 2, 1),
            (2, 4, 2),
            (4, 8, 4),
            (8, 16, 8),
            (16, 32, 4),
        ]
        && v["count"] == 20
        && v["sum"] == 190
        && v["max"] == 19
}

/// `usdt count --by path lat:route -- latency 5`: three `/fast`, two
/// `/slow`.
fn count_by_check(plan: &Plan, latency: &Path, multi: bool, log: &mut Vec<String>) -> Value {
    let o = run(
        &plan.usdt,
        &[
            "count",
            "--by",
            "path",
            "lat:route",
            "--",
            &latency.to_string_lossy(),
            "5",
        ],
        "",
        plan.timeout,
    );
    logged(
        log,
        "usdt count --by path lat:route -- latency 5".into(),
        &o,
    );
    let exact = match multi {
        true => o.ok() && count_by_right(&o.stdout),
        false => refused_for_multi(&o),
    };
    json!({ "tool": "usdt count --by", "engine": "bpf", "example": "latency", "status": o.status, "exact": exact })
}

/// Whether `usdt count --by path` of `latency 5` counted each path.
pub fn count_by_right(out: &str) -> bool {
    let rows: Vec<(u64, String)> = out
        .lines()
        .filter_map(|l| {
            let (n, v) = l.trim_start().split_once("  ")?;
            Some((n.parse().ok()?, v.trim().to_string()))
        })
        .collect();
    out.contains("lat:route by path: 5 hits, 2 values")
        && rows == [(3, "\"/fast\"".to_string()), (2, "\"/slow\"".to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_hits_match_in_any_order_and_only_exactly() {
        let want = types_expected([1, 2, 3]);
        assert_eq!(want.len(), TYPES_HITS);
        let mut out: Vec<String> = want
            .iter()
            .enumerate()
            .map(|(i, h)| {
                json!({"time_ns": i, "pid": 7, "tid": 7, "probe": h["probe"], "args": h["args"]})
                    .to_string()
            })
            .collect();
        out.reverse();
        out.push("pointers 1 2 3".into());
        let text = out.join("\n");
        assert!(same_hits(&text, &want));
        assert!(!same_hits(&text.replace("\"0x3\"", "\"0x4\""), &want));
        assert!(!same_hits(&text.replace("60000", "60001"), &want));
        let missing: Vec<&str> = text.lines().skip(1).collect();
        assert!(!same_hits(&missing.join("\n"), &want));
        let (gone, extra) = hit_differences(&text.replace("\"0x3\"", "\"0x4\""), &want);
        assert_eq!((gone.len(), extra.len()), (1, 1));
        assert!(gone[0].contains("0x3") && extra[0].contains("0x4"));
        // The typed JSON of a float and a char, as `usdt trace` prints them.
        let other =
            r#"{"probe":"types:other","args":{"a":true,"b":false,"c":"é","d":1.5,"e":-2.0}}"#;
        assert!(same_hits(other, &want[4..5]));
    }

    #[test]
    fn reads_latency_against_the_programs_own_measure() {
        let out = "ready 42\npairs 6 sum_ns 28000000 below_4194304 3
{\"count\":6,\"unmatched\":0,\"lost_starts\":0,\"sum_ns\":27500000,\"max_ns\":8100000,\"buckets\":[{\"low_ns\":1048576,\"high_ns\":2097152,\"count\":3},{\"low_ns\":8388608,\"high_ns\":16777216,\"count\":3}]}\n";
        assert_eq!(latency_right(out, 6), Ok(()));
        assert!(latency_right(out, 7).is_err());
        // Less than the waits, or more than the program's own measure.
        let off = latency_right(&out.replace("27500000", "20000000"), 6);
        assert!(off
            .unwrap_err()
            .contains("sum 20000000 ns (the waits 27000000, the program's 28000000"));
        assert!(latency_right(&out.replace("27500000", "28100000"), 6).is_err());
        // Within both, however far from the program's.
        let loaded = out.replace("sum_ns 28000000", "sum_ns 62000000");
        assert_eq!(latency_right(&loaded, 6), Ok(()));
        let unmatched = out.replace("\"unmatched\":0", "\"unmatched\":1");
        assert!(latency_right(&unmatched, 6).is_err());
        assert!(latency_right("no output", 6).is_err());
    }

    #[test]
    fn the_outside_programs_hits() {
        let out = "{\"time_ns\":1,\"pid\":2,\"tid\":2,\"probe\":\"shop:order_placed\",\"args\":{\"id\":0,\"item\":\"book\"}}
orders 1 charged 1
{\"probe\":\"shop:paid\",\"args\":{\"id\":0,\"cents\":-250}}
{\"probe\":\"shop:shipped\",\"args\":{\"id\":0,\"qty\":3}}
{\"probe\":\"shop:tick\",\"args\":[0]}";
        assert!(same_hits(out, &shop_expected(1)));
        assert!(!same_hits(&out.replace("-250", "250"), &shop_expected(1)));
        assert!(!same_hits(out, &shop_expected(2)));
    }

    #[test]
    fn reads_hist_and_count_by() {
        let hist = r#"{"count":20,"sum":190,"max":19,"buckets":[{"low":0,"high":1,"count":1},{"low":1,"high":2,"count":1},{"low":2,"high":4,"count":2},{"low":4,"high":8,"count":4},{"low":8,"high":16,"count":8},{"low":16,"high":32,"count":4}]}"#;
        assert!(hist_right(hist));
        assert!(!hist_right(&hist.replace("\"sum\":190", "\"sum\":191")));
        let by = "lat:route by path: 5 hits, 2 values\n  COUNT  VALUE\n      3  \"/fast\"\n      2  \"/slow\"\n";
        assert!(count_by_right(by));
        assert!(!count_by_right(
            &by.replace("      2  \"/slow\"", "      1  \"/slow\"")
        ));
    }

    #[test]
    fn a_refusal_names_uprobe_multi() {
        let o = Outcome {
            status: "exit=1".into(),
            stdout: String::new(),
            stderr: "usdt: BPF uprobe_multi links: no: this kernel has no BPF uprobe_multi links\n"
                .into(),
        };
        assert!(refused_for_multi(&o));
        let crashed = Outcome {
            status: "signal=11".into(),
            ..o
        };
        assert!(!refused_for_multi(&crashed));
    }
}
