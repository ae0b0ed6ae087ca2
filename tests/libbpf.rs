//! Attaching through libbpf itself: `tests/libbpf/` (its own workspace, so
//! applications never depend on it) loads a BPF program built by libbpf-cargo
//! with clang, attaches it to every probe of the `types` example with libbpf
//! 1.7's `bpf_program__attach_usdt` (libbpf-rs over libbpf-sys 1.7, which
//! vendors libbpf 1.7), reads every argument with `bpf_usdt_arg` and sends it
//! back through a ring buffer.
//!
//! - `nop; nop5` (default build): libbpf puts the uprobe at Location + 1
//!   (`90 cc` at Location after attaching), the kernel optimizes every hit
//!   site (`90 e8`, a `call` to `[uprobes-trampoline]`), and every argument,
//!   the lazy closure's run count and the detach all stay exact.
//! - `nop; nop10` (feature `nop10`): libbpf 1.7 knows no nop10 combination
//!   and attaches at Location (`cc 66`), the probe is emulated, nothing is
//!   optimized, and everything is just as exact.
//!
//! Needs root, `clang-14`, `bpftool`, `libelf-dev`, `zlib1g-dev`,
//! `pkg-config` and `make` (CI installs them). The checker's first build
//! takes about 1.5 minutes.

mod common;

use common::Shape;
use std::process::Command;

/// Runs the checker on the `types` example of `shape` and returns its lines.
fn check_with_libbpf(shape: Shape) -> Vec<String> {
    common::tracing_env();
    let types = common::example("types", shape);
    let root = common::root();
    let out = common::run_ok(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["run", "--quiet", "--manifest-path"])
            .arg(root.join("tests/libbpf/Cargo.toml"))
            .arg("--target-dir")
            .arg(root.join("target/libbpf"))
            .arg("--")
            .arg(&types)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The events `types phases` must produce, in order: what `fire_all` and
/// `fire_lazy(50)` pass (see examples/types.rs). `pointers` are the
/// addresses the program printed.
fn expected_events(pointers: &str) -> Vec<String> {
    let x255 = "x".repeat(255);
    let mut events = vec![
        "unsigned 255 60000 4294967295 18446744073709551615 18446744073709551615".to_owned(),
        "unsigned 0 0 0 0 0".to_owned(),
        "signed -1 -32768 -2147483648 -9223372036854775808 -9223372036854775808".to_owned(),
        "signed 127 32767 2147483647 9223372036854775807 -2".to_owned(),
        "other true false é 1.5 -2".to_owned(),
        r#"strings "hello" "owned string" "c string" "owned c string""#.to_owned(),
        format!(r#"strings "{x255}" "" "" """#),
        format!("pointers {pointers}"),
        "twelve 18446744073709551615 -9223372036854775808 4294967295 -5 60000 -300 200 -100 true z 12345 -12345".to_owned(),
    ];
    events.extend((1..=3).map(|v| format!("generic {v}")));
    events.extend((1..=5).map(|v| format!("inlined {v}")));
    events.extend((0..50).map(|i| format!(r#"lazy {i} "lazy""#)));
    events.push("done".to_owned());
    events
}

fn with_prefix<'a>(lines: &'a [String], prefix: &'a str) -> impl Iterator<Item = &'a str> {
    lines.iter().filter_map(move |l| l.strip_prefix(prefix))
}

/// Checks the arguments and the program's own results; returns every site's
/// probe and its `attached=XXXX hit=XXXX` bytes at Location (after attaching,
/// and after the hits).
fn check_exact(lines: &[String]) -> Vec<(String, String)> {
    let program: Vec<&str> = with_prefix(lines, "program ").collect();
    let pointers = program
        .iter()
        .find_map(|l| l.strip_prefix("pointers "))
        .unwrap_or_else(|| panic!("types printed no pointers: {lines:#?}"));
    let events: Vec<&str> = with_prefix(lines, "event ").collect();
    assert_eq!(events, expected_events(pointers), "what libbpf read");
    for want in [
        "untraced runs=0 enabled=false",
        "traced runs=50 enabled=true",
        "detached runs=0 enabled=false",
    ] {
        assert!(program.contains(&want), "{want:?} not in {program:#?}");
    }
    assert!(
        lines.contains(&"exit exit status: 0".to_owned()),
        "{lines:#?}"
    );
    with_prefix(lines, "site ")
        .map(|l| {
            let mut words = l.split_whitespace();
            let probe = words.next().unwrap().to_owned();
            (probe, words.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

#[test]
fn libbpf_attaches_at_location_plus_one_and_reads_every_argument() {
    let lines = check_with_libbpf(Shape::Release);
    let sites = check_exact(&lines);
    assert!(!sites.is_empty());
    for (probe, bytes) in &sites {
        // Every site got its uprobe on the nop5; the ones that fired were
        // optimized into a call (the lazy probe has unfired copies).
        assert!(
            bytes == "attached=90cc hit=90e8"
                || (probe == "types:lazy" && bytes == "attached=90cc hit=90cc"),
            "{probe} {bytes}: libbpf should attach at Location + 1 and the kernel optimize it"
        );
    }
    assert!(
        sites
            .iter()
            .any(|(p, b)| p == "types:lazy" && b.ends_with("hit=90e8")),
        "the lazy probe's site that fired was optimized"
    );
    assert!(lines.contains(&"trampoline true".to_owned()), "{lines:#?}");
}

#[test]
fn libbpf_attaches_nop10_sites_at_location() {
    let lines = check_with_libbpf(Shape::Nop10);
    let sites = check_exact(&lines);
    assert!(!sites.is_empty());
    for (probe, bytes) in &sites {
        assert_eq!(
            bytes, "attached=cc66 hit=cc66",
            "{probe}: libbpf 1.7 should attach at the nop of a nop;nop10 site"
        );
    }
    assert!(lines.contains(&"trampoline false".to_owned()), "{lines:#?}");
}
