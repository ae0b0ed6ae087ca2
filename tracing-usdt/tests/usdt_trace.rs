//! `usdt trace` (usdt-trace's command, perf_event_open, no BPF) shows the
//! example's events with their strings. Needs root.

mod common;

#[test]
fn usdt_trace_shows_events() {
    if !usdt_provision::ready(&[usdt_provision::Need::root("it attaches uprobes")]) {
        return;
    }
    common::tracing_env();
    let out = common::run_ok(
        common::limited(common::usdt())
            .arg("trace")
            .args(["--str", "tracing:event:2", "--str", "tracing:event:3"])
            .args(["--str", "tracing:event:4", "--str", "tracing:span_*:1"])
            .args(["tracing:event", "tracing:span_enter", "--"])
            .arg(common::demo())
            .arg("1"),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let hits: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(" tracing:").map(|(_, hit)| hit))
        .collect();
    let want = [
        r#"span_enter arg0=1 arg1="request""#,
        r#"span_enter arg0=2 arg1="query""#,
        r#"event arg0=4 arg1=2 arg2="tracing_demo" arg3="query done" arg4="rows=3""#,
        r#"event arg0=3 arg1=1 arg2="tracing_demo" arg3="request 0 done" arg4="bytes=42 ok=true path=\"/a b\" note=n0""#,
        r#"event arg0=2 arg1=0 arg2="tracing_demo" arg3="finished" arg4="quote=\"say \\\"hi\\\"\" eq=\"a=b\"""#,
    ];
    assert_eq!(hits, want, "usdt trace printed:\n{out}");
    assert!(out.lines().any(|l| l == "displayed 1"), "{out}");
}
