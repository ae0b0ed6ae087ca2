//! The `cdylib` with probes (`tests/cdylib/lib.rs`) and its two loaders,
//! shared by `tests/cdylib.rs` and `tests/perf.rs`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The library's file name.
pub const LIB: &str = "libusdt_cdylib.so";

/// The library, the Rust loader and the C loader, built once per process.
pub struct Built {
    pub lib: PathBuf,
    pub rust: PathBuf,
    pub c: PathBuf,
}

/// Builds the library and its loaders (once per test process).
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = crate::root();
        let src = root.join("tests").join("cdylib");
        let dir = root.join("target").join("shapes").join("cdylib");
        let targets = format!(
            "[lib]\nname = \"usdt_cdylib\"\npath = {:?}\ncrate-type = [\"cdylib\"]\n\n\
             [[bin]]\nname = \"dlopen\"\npath = {:?}\n\n",
            src.join("lib.rs").display().to_string(),
            src.join("dlopen.rs").display().to_string()
        );
        let pkg = crate::cell::standalone_package(&dir.join("pkg"), "usdt-cdylib", &targets);
        let target_dir = dir.join("target");
        crate::run_ok(
            Command::new(env!("CARGO"))
                .current_dir(&pkg)
                .args(["build", "--quiet", "--release", "--lib", "--bins"])
                .arg("--target-dir")
                .arg(&target_dir)
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("CARGO_BUILD_TARGET"),
        );
        let c = target_dir.join("dlopen_c");
        crate::run_ok(
            Command::new("cc")
                .args(["-O2", "-Wall", "-Werror", "-o"])
                .arg(&c)
                .arg(src.join("main.c"))
                .arg("-ldl"),
        );
        let release = target_dir.join("release");
        Built {
            lib: release.join(LIB),
            rust: release.join("dlopen"),
            c,
        }
    })
}
