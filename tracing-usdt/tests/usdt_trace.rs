//! `usdt trace` (usdt-trace's command, perf_event_open, no BPF) shows the
//! example's events by name, strings and all, without flags: the layer's
//! probes are declared with `#[usdt::provider]`, whose records say what each
//! argument is. Needs root.

use usdt_test_support::run_ok;

use usdt_test_support::tracing_demo::{self, demo, limited, tracing_env};

#[test]
fn usdt_trace_shows_events() {
    if !usdt_provision::ready(&[usdt_provision::Need::root("it attaches uprobes")]) {
        return;
    }
    tracing_env();
    let out = run_ok(
        limited(tracing_demo::usdt())
            .arg("trace")
            .args(["tracing:event", "tracing:span_enter", "--"])
            .arg(demo())
            .arg("1"),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let hits: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(" tracing:").map(|(_, hit)| hit))
        .collect();
    let want = [
        r#"span_enter id=1 name="request""#,
        r#"span_enter id=2 name="query""#,
        r#"event level=4 span=2 target="tracing_demo" message="query done" fields="rows=3""#,
        r#"event level=3 span=1 target="tracing_demo" message="request 0 done" fields="bytes=42 ok=true path=\"/a b\" note=n0""#,
        r#"event level=2 span=0 target="tracing_demo" message="finished" fields="quote=\"say \\\"hi\\\"\" eq=\"a=b\"""#,
    ];
    assert_eq!(hits, want, "usdt trace printed:\n{out}");
    assert!(out.lines().any(|l| l == "displayed 1"), "{out}");
}
