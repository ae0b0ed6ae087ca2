//! bpftrace 0.17 (`-c`, which raises the semaphores before the program runs)
//! reads the example's spans and events: span names counted, event level,
//! message and fields exact, span ids nested and matched. Needs root.

use std::collections::BTreeMap;

use usdt_test_support::run_ok;
use usdt_test_support::tracing_demo::{demo, limited, tracing_env};

/// One printf per probe, at most two strings each (bpftrace 0.17 fits about
/// three 64-byte strings in one printf).
const SCRIPT: &str = r#"
usdt:BIN:tracing:span_new { printf("new %d %d %s %s\n", arg0, arg1, str(arg2), str(arg3)); }
usdt:BIN:tracing:span_record { printf("record %d %s %s\n", arg0, str(arg1), str(arg2)); }
usdt:BIN:tracing:span_enter { printf("enter %d %s\n", arg0, str(arg1)); @enters[str(arg1)] = count(); }
usdt:BIN:tracing:span_exit { printf("exit %d %s\n", arg0, str(arg1)); }
usdt:BIN:tracing:span_close { printf("close %d\n", arg0); }
usdt:BIN:tracing:event { printf("event %d %d %s\n", arg0, arg1, str(arg2)); printf("  %s|%s\n", str(arg3), str(arg4)); }
"#;

#[test]
fn bpftrace_reads_spans_and_events() {
    if !usdt_provision::ready(&[
        usdt_provision::Need::root("it attaches uprobes"),
        usdt_provision::Need::tracefs("bpftrace creates uprobe events in it"),
        usdt_provision::Need::package(
            usdt_provision::BPFTRACE,
            "the tests read the layer's probes with it",
        ),
    ]) {
        return;
    }
    tracing_env();
    let demo = demo();
    let script = SCRIPT.replace("BIN", &demo.to_string_lossy());
    let out = run_ok(
        limited("bpftrace")
            .args(["-e", &script, "-c"])
            .arg(format!("{} 2", demo.display())),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    // Every field of every event was formatted once for the probe. The
    // program's own line may come anywhere among bpftrace's (both write to
    // the same pipe): take it out.
    assert!(out.lines().any(|l| l == "displayed 2"), "{out}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("displayed"))
        .collect();

    // Events: level, target, message and fields, exactly, in order.
    let events: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0].starts_with("event "))
        .map(|w| {
            let f: Vec<&str> = w[0].split(' ').collect();
            format!("{} {}{}", f[1], f[3], w[1])
        })
        .collect();
    let want = [
        "4 tracing_demo  query done|rows=3",
        r#"3 tracing_demo  request 0 done|bytes=42 ok=true path="/a b" note=n0"#,
        "4 tracing_demo  query done|rows=3",
        r#"3 tracing_demo  request 1 done|bytes=42 ok=true path="/a b" note=n1"#,
        r#"2 tracing_demo  finished|quote="say \"hi\"" eq="a=b""#,
    ];
    assert_eq!(events, want, "{out}");

    // Spans: enters counted by name.
    let count = |name: &str| lines.iter().any(|l| *l == format!("@enters[{name}]: 2"));
    assert!(count("request") && count("query"), "{out}");

    // Ids: new spans name their parent, enters and exits nest, an event names
    // the innermost entered span, and every span is closed after its exit.
    let mut stack: Vec<(u64, String)> = Vec::new();
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let (mut news, mut records, mut closes) = (0, 0, 0);
    let current = |stack: &Vec<(u64, String)>| stack.last().map_or(0, |s| s.0);
    for (i, line) in lines.iter().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let id = || f[1].parse::<u64>().expect("an id");
        match f[0] {
            "new" => {
                news += 1;
                let parent: u64 = f[2].parse().unwrap();
                assert_eq!(parent, current(&stack), "line {i}: {line}\n{out}");
                let fields = if f[3] == "request" {
                    "id="
                } else {
                    "table=users"
                };
                assert!(f[4].starts_with(fields), "line {i}: {line}");
                names.insert(id(), f[3].to_owned());
            }
            "enter" => {
                assert_eq!(names.get(&id()).map(String::as_str), Some(f[2]), "{line}");
                stack.push((id(), f[2].to_owned()));
            }
            "exit" => {
                assert_eq!(
                    stack.pop(),
                    Some((id(), f[2].to_owned())),
                    "line {i}\n{out}"
                );
            }
            "record" => {
                records += 1;
                assert_eq!(current(&stack), id(), "{line}");
                assert_eq!(&f[2..], ["request", "status=200"], "{line}");
            }
            "close" => {
                closes += 1;
                assert!(stack.iter().all(|s| s.0 != id()), "line {i}\n{out}");
            }
            "event" => {
                let span: u64 = f[2].parse().unwrap();
                assert_eq!(span, current(&stack), "line {i}: {line}\n{out}");
            }
            _ => {}
        }
    }
    assert!(stack.is_empty(), "{out}");
    assert_eq!((news, records, closes), (4, 2, 4), "{out}");
}
