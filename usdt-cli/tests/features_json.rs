//! `usdt features --json`: one object, whose every key agrees with the
//! kernel asked directly and with the self-tests' verdicts; and `usdt list`
//! on a `nop; nop5; nop10` build.

use std::process::Command;

use serde_json::Value;
use usdt_test_support::process::output_within;
use usdt_trace::{auto_delta, caps, SiteLayout, Speed};

fn usdt(args: &[&str]) -> std::process::Output {
    output_within(Command::new(env!("CARGO_BIN_EXE_usdt")).args(args), 600)
}

fn root() -> bool {
    usdt_provision::ready(&[usdt_provision::Need::root(
        "the self-tests behind `usdt features` attach uprobes",
    )])
}

#[test]
fn features_json_is_one_object_that_agrees_with_the_kernel() {
    if !root() {
        return;
    }
    let out = usdt(&["features", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    // SAFETY: syscall 336 takes no arguments and only fails outside a
    // uprobe trampoline; errno is read right after.
    let errno = unsafe {
        libc::syscall(336);
        *libc::__errno_location()
    };
    let name = match errno {
        libc::ENOSYS => "ENOSYS",
        libc::ENXIO => "ENXIO",
        libc::EPROTO => "EPROTO",
        _ => "other",
    };
    assert_eq!(v["uprobe_syscall"], name, "{v}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(v["kernel"], release.trim());
    assert_eq!(v["machine"], "x86_64");
    let optimizes = match name {
        "ENXIO" => Value::from("nop5"),
        "EPROTO" => Value::from("nop10"),
        _ => Value::Null,
    };
    assert_eq!(v["optimizes"], optimizes);
    assert_eq!(
        v["uprobe_pmu"],
        std::path::Path::new("/sys/bus/event_source/devices/uprobe/type").exists()
    );
    assert!(v["uprobe_multi"].is_boolean());
    // This kernel (6.18.44): a forked child dies at an optimized site.
    assert_eq!(v["fork_test"], "child dies", "{v}");
    assert!(v["fork_test_why"].as_str().unwrap().contains("SIGSEGV"));
    // With the fork guard the child runs on.
    assert_eq!(v["fork_test_guarded"], "guarded", "{v}");
    let trap = v["speed_test"]["trap"].as_f64().unwrap();
    let optimized = v["speed_test"]["optimized"].as_f64().unwrap();
    assert!(trap > 0.0 && optimized > 0.0, "{v}");
    // The same numbers as this process's own capabilities (cached per boot).
    let caps = caps();
    let speed = caps.speed.as_ref().unwrap();
    assert!((speed.trap - trap).abs() < 1e-3 && (speed.optimized - optimized).abs() < 1e-3);
    // Unguarded: the nop everywhere here, whatever the speed.
    for key in ["nop5", "nop10", "nop5_nop10"] {
        assert_eq!(v["default_attach"][key], "nop", "{v}");
    }
    // Guarded: the nop5 exactly when it measured faster.
    let faster = caps.auto_inputs(true).speed == Speed::OptimizedFaster;
    assert_eq!(faster, optimized > trap);
    let guarded = &v["default_attach_guarded"];
    assert_eq!(guarded["nop5"], if faster { "next" } else { "nop" }, "{v}");
    assert_eq!(guarded["nop10"], "nop");
    assert_eq!(guarded["nop5_nop10"], if faster { "next5" } else { "nop" });
    assert_eq!(
        auto_delta(SiteLayout::NopNop5, &caps.auto_inputs(true)),
        u64::from(faster)
    );
    // The text form says the same.
    let text = String::from_utf8(usdt(&["features"]).stdout).unwrap();
    assert!(
        text.contains(&format!("trap (nop) {trap:.3} M/s")),
        "{text}"
    );
    assert!(
        text.contains("auto attach on a nop;nop5;nop10 site: nop (fork-safe)"),
        "{text}"
    );
    assert!(
        text.contains("fork after an optimized hit: the child dies")
            && text.contains("fork-safe (guarded by the program"),
        "{text}"
    );
    let guarded_nop5 = if faster {
        "+1 (guarded)"
    } else {
        "nop (faster here)"
    };
    assert!(
        text.contains(&format!(
            "auto attach on a nop;nop5 site of a program with a fork guard: {guarded_nop5}"
        )),
        "{text}"
    );
}

#[test]
fn list_shows_the_two_nop_layout() {
    let root_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root_dir.join("target/shapes/nop5-nop10");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root_dir)
        .args(["build", "--quiet", "--release", "--example", "layouts"])
        .args([
            "--features",
            "nop5-nop10",
            "-p",
            "usdt-probes",
            "--target-dir",
        ])
        .arg(&dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = dir.join("release/examples/layouts");
    let out = usdt(&["list", "--sites", exe.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text.lines().find(|l| l.starts_with("lay:tick")).unwrap();
    assert!(row.contains("nop;nop5;nop10"), "{text}");
    if root() {
        // 6.18: the nop5 is what this kernel optimizes, and a forked child
        // would die there, but the build carries the fork guard: Auto takes
        // the nop5 where the speed self-test favours it, else keeps the nop.
        assert!(usdt_trace::read_file_fork_guard(&exe).unwrap());
        let guarded = caps().auto_inputs(true);
        let words = if auto_delta(SiteLayout::NopNop5Nop10, &guarded) == 1 {
            "+1 (nop5, guarded)"
        } else {
            "nop (faster here)"
        };
        assert!(row.contains(words), "{words}: {row}");
    }
    let site = text
        .lines()
        .find(|l| l.trim_start().starts_with("site "))
        .unwrap();
    assert!(site.contains(" layout nop;nop5;nop10 "), "{site}");
}
