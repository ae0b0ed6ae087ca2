//! Every Rust user's build: `usdt-probes`, `usdt-runtime`, `usdt-macros` and
//! `tracing-usdt`, and a program outside the workspace that uses them
//! (`tests/platforms/`: every kind of probe, tracing-usdt's layer), pass
//! `cargo check` without a warning for each target in [`TARGETS`]: where the
//! target has a site (x86-64, aarch64 and riscv64 ELF systems) and where it
//! has none (Windows, macOS, wasm, 32-bit Arm).
//!
//! Where no site is emitted, the program built for `wasm32-wasip1` and run
//! by Node.js's WASI says what a probe costs there: eager arguments
//! evaluated once, the lazy closure never run, nothing enabled, and
//! `SITE_LAYOUT` `none`. x86-64 FreeBSD's object code has the site but no
//! reference to the fork guard, which only Linux builds link. usdt-trace and
//! the `usdt` command stop at one error naming Linux on any other target.
//!
//! Each target is a rustup target, installed on first use (usdt-provision).
//! All checks share one target directory, `target/targets`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use usdt_test_support::{ready, root, run_ok, Need};

/// The targets every Rust user's build must pass.
const TARGETS: [&str; 10] = [
    "x86_64-pc-windows-msvc",
    "x86_64-pc-windows-gnu",
    "aarch64-apple-darwin",
    "x86_64-apple-darwin",
    "x86_64-unknown-freebsd",
    "x86_64-unknown-illumos",
    "wasm32-unknown-unknown",
    "wasm32-wasip1",
    "riscv64gc-unknown-linux-gnu",
    "armv7-unknown-linux-gnueabihf",
];

/// The packages a program with probes builds.
const PACKAGES: [&str; 4] = ["usdt-probes", "usdt-runtime", "usdt-macros", "tracing-usdt"];

const NODE: Need = Need::package(
    usdt_provision::NODEJS,
    "tests/platforms.rs runs the wasm32-wasip1 build with Node.js's WASI",
);

fn target_need(target: &'static str) -> Need {
    Need::rust_target(target, "tests/platforms.rs builds the probe crates for it")
}

fn target_dir() -> PathBuf {
    root().join("target").join("targets")
}

/// `cargo ARGS --target-dir target/targets` in `dir`, as a user's shell
/// runs it.
fn cargo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .current_dir(dir)
        .args(args)
        .arg("--target-dir")
        .arg(target_dir())
        .env("CARGO_TERM_COLOR", "never")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("run cargo")
}

/// Fails unless cargo succeeded and printed no warning.
fn assert_clean(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    assert!(
        !stderr.lines().any(|l| l.starts_with("warning")),
        "{what} warned:\n{stderr}"
    );
}

/// The program of `tests/platforms/` as a package outside the workspace,
/// depending on `usdt-probes` and `tracing-usdt` by path (written once per
/// test process).
fn outside_package() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = root();
        let dir = target_dir().join("platforms");
        std::fs::create_dir_all(&dir).unwrap();
        let src = root.join("tests").join("platforms");
        let manifest = format!(
            "[package]\nname = \"platforms\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\nautobins = false\n\n\
             [dependencies]\nusdt-probes = {{ path = {root:?} }}\n\
             tracing-usdt = {{ path = {tracing:?} }}\n\n\
             [lib]\npath = {lib:?}\n\n[[bin]]\nname = \"platforms\"\npath = {main:?}\n\n\
             [workspace]\n",
            root = root.display().to_string(),
            tracing = root.join("tracing-usdt").display().to_string(),
            lib = src.join("lib.rs").display().to_string(),
            main = src.join("bin.rs").display().to_string(),
        );
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
        if !dir.join("Cargo.lock").exists() {
            std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
        }
        dir
    })
    .clone()
}

#[test]
fn every_target_builds_without_a_warning() {
    let needs: Vec<Need> = TARGETS.iter().map(|t| target_need(t)).collect();
    if !ready(&needs) {
        return;
    }
    let start = Instant::now();
    for target in TARGETS {
        let mut args = vec!["check", "--target", target];
        for p in PACKAGES {
            args.extend(["-p", p]);
        }
        let out = cargo(&root(), &args);
        assert_clean(
            &out,
            &format!("cargo check --target {target} of {PACKAGES:?}"),
        );
        let out = cargo(&outside_package(), &["check", "--target", target]);
        assert_clean(
            &out,
            &format!("cargo check --target {target} of tests/platforms/"),
        );
    }
    eprintln!(
        "checked {} targets in {:.1} s",
        TARGETS.len(),
        start.elapsed().as_secs_f64()
    );
}

/// The Linux-only crates say so, once: `cargo check` for macOS stops at
/// one error naming Linux.
#[test]
fn the_tracer_stops_at_one_error_naming_linux() {
    let target = "x86_64-apple-darwin";
    if !ready(&[target_need(target)]) {
        return;
    }
    for package in ["usdt-trace", "usdt-cli"] {
        let out = cargo(&root(), &["check", "--target", target, "-p", package]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{package} built for {target}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error"))
            .filter(|l| !l.starts_with("error: could not compile"))
            .collect();
        assert_eq!(errors.len(), 1, "{package} for {target}:\n{stderr}");
        assert!(
            errors[0].starts_with("error: usdt-trace and the `usdt` command run on Linux only"),
            "{package} for {target}:\n{stderr}"
        );
        assert!(
            stderr.contains("error: could not compile `usdt-trace` (lib) due to 1 previous error"),
            "{package} for {target}:\n{stderr}"
        );
    }
}

/// Where there is no site, a probe evaluates its eager arguments once and
/// nothing else: built for wasm32-wasip1 and run with Node.js's WASI.
#[test]
fn without_a_site_probes_cost_only_their_arguments() {
    let target = "wasm32-wasip1";
    if !ready(&[target_need(target), NODE]) {
        return;
    }
    let dir = outside_package();
    let out = cargo(&dir, &["build", "--release", "--target", target]);
    assert_clean(&out, &format!("cargo build --target {target}"));
    let wasm = target_dir().join(target).join("release/platforms.wasm");
    let runner = target_dir().join("wasi.js");
    std::fs::write(
        &runner,
        "const { WASI } = require('wasi');\n\
         const fs = require('fs');\n\
         const file = process.argv[2];\n\
         const wasi = new WASI({ version: 'preview1', args: [file], env: {}, returnOnExit: true });\n\
         WebAssembly.instantiate(fs.readFileSync(file), wasi.getImportObject())\n\
           .then(({ instance }) => { process.exitCode = wasi.start(instance); });\n",
    )
    .unwrap();
    // Node.js 18 (Debian 12's) wants the flag; later ones take it and need
    // none.
    let out = run_ok(
        Command::new("node")
            .args(["--experimental-wasi-unstable-preview1", "--no-warnings"])
            .arg(&runner)
            .arg(&wasm),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "layout none evaluated 1 lazy 0 enabled false\n"
    );
}

/// x86-64 FreeBSD gets the site and its note, and no reference to the fork
/// guard (which usdt-runtime builds for Linux only: a reference would not
/// link there).
#[test]
fn freebsd_sites_do_not_reference_the_fork_guard() {
    let target = "x86_64-unknown-freebsd";
    if !ready(&[target_need(target)]) {
        return;
    }
    let dir = outside_package();
    let out = cargo(&dir, &["build", "--release", "--lib", "--target", target]);
    assert_clean(&out, &format!("cargo build --lib --target {target}"));
    let rlib = target_dir().join(target).join("release/libplatforms.rlib");
    let relocs = run_ok(Command::new("readelf").arg("-rW").arg(&rlib));
    let relocs = String::from_utf8_lossy(&relocs.stdout);
    let notes = run_ok(Command::new("readelf").arg("-nW").arg(&rlib));
    let notes = String::from_utf8_lossy(&notes.stdout);
    assert!(
        notes.contains("NT_STAPSDT"),
        "no note for {target}:\n{notes}"
    );
    assert!(
        relocs.contains("R_X86_64_NONE") && relocs.contains("_.stapsdt.base"),
        "no site for {target}:\n{relocs}"
    );
    let guard = usdt_runtime::forkguard::SYMBOL;
    assert!(
        !relocs.contains(guard),
        "{target}: a reference to {guard}:\n{relocs}"
    );
}
