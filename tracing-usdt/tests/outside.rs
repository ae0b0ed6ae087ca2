//! A program written outside the workspace, instrumented only with `tracing`
//! macros and this layer: untraced, none of its field values is formatted;
//! bpftrace reads its spans and events exactly. The bpftrace half needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

use usdt_test_support::run_ok;
use usdt_test_support::tracing_demo::{limited, tracing_env};

const MAIN: &str = r#"
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tracing_subscriber::prelude::*;

static FORMATTED: AtomicU64 = AtomicU64::new(0);

struct Secret(u32);

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        FORMATTED.fetch_add(1, Relaxed);
        write!(f, "s{}", self.0)
    }
}

fn main() {
    tracing_subscriber::registry().with(tracing_usdt::layer()).init();
    let n: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    for i in 0..n {
        let span = tracing::info_span!("job", n = i, secret = %Secret(1));
        let _entered = span.enter();
        tracing::error!(code = 7, secret = %Secret(2), "job {i} failed");
    }
    println!("formatted {}", FORMATTED.load(Relaxed));
}
"#;

/// Writes the package (its own `[workspace]`, the workspace's lock file for
/// the same versions) and builds it; returns the program.
fn outside_program() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join("tracing-usdt-outside");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"outside\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\ntracing = \"0.1\"\n\
         tracing-subscriber = {{ version = \"0.3\", default-features = false, features = [\"registry\", \"std\"] }}\n\
         tracing-usdt = {{ path = {:?} }}\n\n[workspace]\n",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), MAIN).unwrap();
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    if !dir.join("Cargo.lock").exists() {
        std::fs::copy(lock, dir.join("Cargo.lock")).unwrap();
    }
    let target = tmp.join("tracing-usdt-outside-target");
    run_ok(
        Command::new(env!("CARGO"))
            .current_dir(&dir)
            .args(["build", "--quiet", "--target-dir"])
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    );
    target.join("debug/outside")
}

#[test]
fn outside_program_untraced_formats_nothing_and_bpftrace_reads_it() {
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
    let program = outside_program();
    let out = run_ok(limited(&program).arg("3"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "formatted 0\n");

    tracing_env();
    let b = program.display();
    let script = format!(
        r#"usdt:{b}:tracing:span_new {{ printf("new %s|%s\n", str(arg2), str(arg3)); }}
usdt:{b}:tracing:span_enter {{ @enters[str(arg1)] = count(); }}
usdt:{b}:tracing:event {{ printf("event %d %s|%s\n", arg0, str(arg3), str(arg4)); }}"#
    );
    let out = run_ok(
        limited("bpftrace")
            .args(["-e", &script, "-c"])
            .arg(format!("{b} 2")),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    // The program's own line may come anywhere among bpftrace's: both write
    // to the same pipe. The span's and the event's field were formatted,
    // twice each.
    assert!(lines.contains(&"formatted 4"), "{out}");
    let want = [
        "new job|n=0 secret=s1",
        "event 1 job 0 failed|code=7 secret=s2",
        "new job|n=1 secret=s1",
        "event 1 job 1 failed|code=7 secret=s2",
        "@enters[job]: 2",
    ];
    let seen: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("Attaching") && !l.starts_with("formatted"))
        .collect();
    assert_eq!(seen, want, "bpftrace printed:\n{out}");
}
