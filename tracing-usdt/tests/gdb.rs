//! gdb stops at `tracing:event` (it raises the semaphore itself) and reads
//! the arguments of the example's first event, `debug!(rows = 3, "query
//! done")` inside the `query` span.

use usdt_test_support::run_ok;
use usdt_test_support::tracing_demo::{demo, limited};

#[test]
fn gdb_stops_at_tracing_event_and_reads_its_arguments() {
    if !usdt_provision::ready(&[usdt_provision::Need::package(
        usdt_provision::GDB,
        "the test stops at the layer's probes with it",
    )]) {
        return;
    }
    let demo = demo();
    let out = run_ok(
        limited("gdb")
            .args(["-batch", "-nx"])
            .args(["-ex", "info probes stap tracing"])
            .args(["-ex", "break -probe-stap tracing:event"])
            .args(["-ex", "run"])
            .args(["-ex", "set language c"])
            .args(["-ex", "print $_probe_argc"])
            .args(["-ex", "print $_probe_arg0"])
            .args(["-ex", "print $_probe_arg1"])
            .args(["-ex", "print (char *) $_probe_arg2"])
            .args(["-ex", "print (char *) $_probe_arg3"])
            .args(["-ex", "print (char *) $_probe_arg4"])
            .args(["-ex", "kill", "--args"])
            .arg(demo)
            .arg("1"),
    );
    let out = String::from_utf8_lossy(&out.stdout);

    for probe in [
        "event",
        "span_new",
        "span_record",
        "span_enter",
        "span_exit",
        "span_close",
    ] {
        assert!(
            out.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() >= 3 && cols[..3] == ["stap", "tracing", probe]
            }),
            "info probes lacks tracing:{probe}:\n{out}"
        );
    }

    let values: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix('$'))
        .map(|l| l.split_once(" = ").expect("gdb value").1)
        .map(|v| v.split_once(' ').map_or(v, |(_, s)| s)) // 0x7ffe... "text"
        .collect();
    // The span id is the `query` span's: 2, after `request`'s 1.
    let want = [
        "5",
        "4",
        "2",
        "\"tracing_demo\"",
        "\"query done\"",
        "\"rows=3\"",
    ];
    assert_eq!(values, want, "gdb printed:\n{out}");
}
