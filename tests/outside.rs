//! Programs written outside the workspace, as a user writes them: one
//! depends on the facade by its package name (`usdt-probes = { path }`, no
//! renaming) and writes `#[usdt::provider]`, `#[derive(usdt::ProbeArg)]`
//! and `usdt::probe!`; the other renames the dependency
//! (`renamed = { package = "usdt-probes", path }`), so that no crate named
//! `usdt` is in scope, and names it with `crate = "renamed"`. Both build and
//! their notes are exactly the declared probes; bpftrace reads the first
//! one's probes back (that half needs root).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use usdt_test_support::outside::Dependency;

/// Writes the package (its own `[workspace]`, the workspace's lock file for
/// the same versions) and builds it, once per test process; returns the
/// program.
fn program(dependency: Dependency) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[dependency as usize]
        .get_or_init(|| build(dependency))
        .clone()
}

fn build(dependency: Dependency) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(dependency.package());
    dependency.write(&dir, &usdt_test_support::root()).unwrap();
    // One target directory for both programs: they share the facade's build.
    let target = tmp.join("outside-target");
    usdt_test_support::run_ok(
        Command::new(env!("CARGO"))
            .current_dir(&dir)
            .args(["build", "--quiet", "--target-dir"])
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    );
    target.join("debug").join(dependency.package())
}

/// Builds the program, runs it, and checks every note against what it
/// declares: one site each (a debug build), sizes and signs, semaphores
/// for the provider's probes and none for the ad-hoc one.
fn builds_and_notes_are_right(dependency: Dependency) {
    let manifest = dependency.manifest(&usdt_test_support::root());
    match dependency {
        Dependency::ByPackageName => {
            assert!(!manifest.contains("package ="), "{manifest}");
            assert!(manifest.contains("\nusdt-probes = { path = "), "{manifest}");
        }
        // No dependency and no path in the program names `usdt`.
        Dependency::Renamed => {
            assert!(!manifest.contains("\nusdt"), "{manifest}");
            assert!(
                !dependency.source().contains("usdt::"),
                "the renamed source"
            );
        }
    }
    let program = program(dependency);
    let out = usdt_test_support::run_ok(Command::new(&program).arg("3"));
    // Untraced, the lazy probe's closure never ran.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "orders 3 charged 0\n");

    let expected: usdt_test_support::notes::Expected = [
        ("shop:order_placed", (vec![8, 8], 1, true)),
        ("shop:paid", (vec![8, -4], 1, true)),
        ("shop:shipped", (vec![8, 2], 1, true)),
        ("shop:tick", (vec![8], 1, false)),
    ]
    .into_iter()
    .collect();
    let what = format!("{dependency:?}");
    let probes = usdt_test_support::notes::check_notes(
        &program,
        &expected,
        usdt_test_support::notes::DEFAULT_LAYOUT,
        &what,
    );
    let data = std::fs::read(&program).unwrap();
    usdt_test_support::signatures::check_signatures(&program, &data, &probes, &what);
    let mut signatures: Vec<String> = usdt_trace::read_signatures(&data)
        .expect("read signature records")
        .iter()
        .map(|s| format!("{}:{}{}", s.provider, s.name, s.params_text()))
        .collect();
    signatures.sort();
    assert_eq!(
        signatures,
        [
            "shop:order_placed(id: u64, item: &str)",
            "shop:paid(id: u64, cents: i32)",
            "shop:shipped(id: u64, qty: Qty)",
        ],
        "{what}"
    );
}

#[test]
fn by_package_name_builds_and_its_notes_are_right() {
    builds_and_notes_are_right(Dependency::ByPackageName);
}

#[test]
fn renamed_builds_and_its_notes_are_right() {
    builds_and_notes_are_right(Dependency::Renamed);
}

#[test]
fn by_package_name_bpftrace_reads_its_probes() {
    if !usdt_test_support::ready(&[
        usdt_test_support::ROOT,
        usdt_test_support::TRACEFS,
        usdt_test_support::BPFTRACE,
    ]) {
        return;
    }
    usdt_test_support::tracing_env();
    let program = program(Dependency::ByPackageName);
    let b = program.display();
    let script = format!(
        r#"usdt:{b}:shop:order_placed {{ printf("placed %lu %s\n", arg0, str(arg1)); }}
usdt:{b}:shop:paid {{ printf("paid %lu %ld\n", arg0, arg1); }}
usdt:{b}:shop:shipped {{ printf("shipped %lu %lu\n", arg0, arg1); }}
usdt:{b}:shop:tick {{ @ticks = count(); }}"#
    );
    let out = usdt_test_support::run_ok(
        Command::new("timeout")
            .args(["-k", "5", "120", "bpftrace", "-e", &script, "-c"])
            .arg(format!("{b} 2")),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("Attaching"))
        .collect();
    // The program's own line may come anywhere among bpftrace's: both write
    // to the same pipe. bpftrace raised the lazy probe's semaphore, so its
    // closure ran for both orders.
    assert!(lines.contains(&"orders 2 charged 2"), "{out}");
    let traced: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("orders"))
        .collect();
    assert_eq!(
        traced,
        [
            "placed 0 book",
            "paid 0 -250",
            "shipped 0 3",
            "placed 1 book",
            "paid 1 -250",
            "shipped 1 3",
            "@ticks: 2",
        ],
        "bpftrace printed:\n{out}"
    );
}
