//! `shared_libraries` (read from dynamic sections, the loader's cache and
//! its directories, never by running the program) against `ldd` (which the
//! test may run): the C demo with its library by RPATH, the same library
//! found through `$ORIGIN` in DT_RUNPATH and in DT_RPATH, and programs of the
//! system.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use usdt_test_support::c::{build_c, cdemo, cdemolib};
use usdt_test_support::{ready, SDT};
use usdt_trace::shared_libraries;

/// The files `ldd` lists for `program` (those with a path).
fn ldd(program: &Path) -> BTreeSet<PathBuf> {
    let out = Command::new("ldd").arg(program).output().expect("ldd runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            // `libc.so.6 => /lib/.../libc.so.6 (0x...)` or `/lib64/ld-linux... (0x...)`.
            let rest = line.split_once("=> ").map_or(line, |(_, r)| r);
            let path = rest.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

fn agrees_with_ldd(program: &Path) -> Vec<PathBuf> {
    let ours = shared_libraries(program);
    let set: BTreeSet<PathBuf> = ours.iter().cloned().collect();
    assert_eq!(set.len(), ours.len(), "each library once: {ours:?}");
    assert_eq!(set, ldd(program), "{}", program.display());
    ours
}

#[test]
fn the_c_demo_and_its_library() {
    if !ready(&[SDT]) {
        return;
    }
    let libs = agrees_with_ldd(&cdemo());
    assert!(
        libs.iter().any(|l| l.ends_with("libcdemolib.so")),
        "{libs:?}"
    );
}

/// The demo library beside a program that finds it through `$ORIGIN`,
/// in DT_RUNPATH (the linker's default) or in DT_RPATH.
#[test]
fn origin_in_runpath_and_rpath() {
    if !ready(&[SDT]) {
        return;
    }
    let lib = cdemolib();
    for (name, dtags) in [
        ("origin-runpath", "-Wl,--enable-new-dtags"),
        ("origin-rpath", "-Wl,--disable-new-dtags"),
    ] {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-{name}", std::process::id()))
            .join("bin");
        std::fs::create_dir_all(dir.join("../lib")).unwrap();
        std::fs::copy(&lib, dir.join("../lib/libcdemolib.so")).unwrap();
        // Linked by name (-L, -l): DT_NEEDED is the bare file name.
        let built = build_c(
            name,
            &["cdemo.c", "cdemo_guarded.c"],
            &[
                "-L",
                dir.join("../lib").to_str().unwrap(),
                "-lcdemolib",
                "-Wl,-rpath,$ORIGIN/../lib",
                dtags,
            ],
        );
        let program = dir.join(name);
        std::fs::copy(&built, &program).unwrap();
        let libs = agrees_with_ldd(&program);
        assert!(
            libs.iter().any(|l| l.ends_with("lib/libcdemolib.so")),
            "{name}: {libs:?}"
        );
        // Elsewhere, without the library beside it: not found, as for the
        // loader (ldd says "not found").
        let alone = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}-{name}-alone", std::process::id()));
        std::fs::create_dir_all(&alone).unwrap();
        std::fs::copy(&built, alone.join(name)).unwrap();
        let libs = shared_libraries(&alone.join(name));
        assert!(
            !libs.iter().any(|l| l.ends_with("libcdemolib.so")),
            "{name}: {libs:?}"
        );
        assert!(!libs.is_empty(), "libc is still found");
    }
}

#[test]
fn programs_of_the_system() {
    for program in [
        "/bin/ls",
        "/usr/bin/gdb",
        "/usr/bin/python3",
        "/usr/bin/readelf",
    ] {
        let program = Path::new(program);
        if program.exists() {
            agrees_with_ldd(program);
        }
    }
}

#[test]
fn a_static_program_and_a_missing_one_have_none() {
    assert!(shared_libraries(Path::new("/no/such/program")).is_empty());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/cdemo.c");
    assert!(shared_libraries(Path::new(script)).is_empty());
}
