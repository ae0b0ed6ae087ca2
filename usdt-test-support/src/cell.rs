//! Build cells: the examples built as the binaries of a small standalone
//! package that depends on the facade (`usdt-probes`) by path (so that no
//! dev-dependency of the workspace is built, and any target can be asked
//! for), with one choice of profile settings, relocation model, linker and
//! target per cell.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::root;

/// The binaries every cell builds: `examples/<name>.rs`.
pub const CELL_BINS: [&str; 4] = ["types", "demo", "redzone", "gc"];

/// One build shape of the examples, in cargo's `release` profile.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    /// Names the output directory.
    pub name: &'static str,
    /// `opt-level` as TOML: `0`..`3`, `"s"`, `"z"`.
    pub opt_level: &'static str,
    /// `lto` as TOML: `false`, `"thin"`, `"fat"`.
    pub lto: &'static str,
    pub codegen_units: u32,
    /// `panic = "abort"` (otherwise `"unwind"`).
    pub panic_abort: bool,
    /// `debug = true` (otherwise `false`).
    pub debug: bool,
    /// `-C relocation-model=static`: a non-PIE executable.
    pub non_pie: bool,
    /// `-C link-arg=-fuse-ld=bfd`: GNU ld instead of rustc's bundled LLD.
    pub gnu_ld: bool,
    /// The target triple; the linker for a foreign one is its GNU cross
    /// compiler (`cross::Cross::linker`).
    pub target: &'static str,
}

/// The host's target triple (the tests run on x86-64 Linux).
pub const HOST: &str = "x86_64-unknown-linux-gnu";

/// The default cell: `release` as cargo defines it, on the host.
pub const RELEASE: Cell = Cell {
    name: "release",
    opt_level: "3",
    lto: "false",
    codegen_units: 16,
    panic_abort: false,
    debug: false,
    non_pie: false,
    gnu_ld: false,
    target: HOST,
};

/// opt-level 0, no LTO, 16 codegen units, debug info, PIE, LLD.
pub const O0: Cell = Cell {
    name: "o0",
    opt_level: "0",
    lto: "false",
    codegen_units: 16,
    panic_abort: false,
    debug: true,
    non_pie: false,
    gnu_ld: false,
    target: HOST,
};

/// opt-level 1, thin LTO, no debug info, GNU ld.
pub const O1_THIN_GNU_LD: Cell = Cell {
    name: "o1-thin-gnu-ld",
    opt_level: "1",
    lto: "\"thin\"",
    codegen_units: 16,
    panic_abort: false,
    debug: false,
    non_pie: false,
    gnu_ld: true,
    target: HOST,
};

/// opt-level 2, one codegen unit, debug info, non-PIE, LLD.
pub const O2_NON_PIE: Cell = Cell {
    name: "o2-non-pie",
    opt_level: "2",
    lto: "false",
    codegen_units: 1,
    panic_abort: false,
    debug: true,
    non_pie: true,
    gnu_ld: false,
    target: HOST,
};

/// opt-level 3, fat LTO, one codegen unit, `panic = "abort"`, LLD.
pub const O3_FAT_ABORT: Cell = Cell {
    name: "o3-fat-abort",
    opt_level: "3",
    lto: "\"fat\"",
    codegen_units: 1,
    panic_abort: true,
    debug: false,
    non_pie: false,
    gnu_ld: false,
    target: HOST,
};

/// opt-level "s", thin LTO, `panic = "abort"`, debug info, non-PIE, GNU ld.
pub const OS_THIN_NON_PIE_GNU_LD: Cell = Cell {
    name: "os-thin-non-pie-gnu-ld",
    opt_level: "\"s\"",
    lto: "\"thin\"",
    codegen_units: 16,
    panic_abort: true,
    debug: true,
    non_pie: true,
    gnu_ld: true,
    target: HOST,
};

/// opt-level "z", fat LTO, 16 codegen units, GNU ld.
pub const OZ_FAT_GNU_LD: Cell = Cell {
    name: "oz-fat-gnu-ld",
    opt_level: "\"z\"",
    lto: "\"fat\"",
    codegen_units: 16,
    panic_abort: false,
    debug: false,
    non_pie: false,
    gnu_ld: true,
    target: HOST,
};

/// The cells of `tests/shapes.rs`, which `tests/perf.rs` traces too.
pub const SHAPES: [Cell; 6] = [
    O0,
    O1_THIN_GNU_LD,
    O2_NON_PIE,
    O3_FAT_ABORT,
    OS_THIN_NON_PIE_GNU_LD,
    OZ_FAT_GNU_LD,
];

impl Cell {
    /// The settings, in words, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}: opt-level={} lto={} codegen-units={} panic={} debug={} {} {} {}",
            self.name,
            self.opt_level,
            self.lto,
            self.codegen_units,
            if self.panic_abort { "abort" } else { "unwind" },
            self.debug,
            if self.non_pie { "non-PIE" } else { "PIE" },
            if self.gnu_ld { "GNU ld" } else { "LLD" },
            self.target
        )
    }

    /// The `--config` arguments that set this cell's profile.
    fn config(&self) -> Vec<String> {
        let panic = if self.panic_abort { "abort" } else { "unwind" };
        [
            format!("profile.release.opt-level={}", self.opt_level),
            format!("profile.release.lto={}", self.lto),
            format!("profile.release.codegen-units={}", self.codegen_units),
            format!("profile.release.panic=\"{panic}\""),
            format!("profile.release.debug={}", self.debug),
        ]
        .into_iter()
        .flat_map(|c| ["--config".to_owned(), c])
        .collect()
    }

    fn rustflags(&self) -> String {
        let mut flags = vec![];
        if self.non_pie {
            flags.push("-C relocation-model=static");
        }
        if self.gnu_ld {
            flags.push("-C link-arg=-fuse-ld=bfd");
        }
        flags.join(" ")
    }

    /// Builds the cell's binaries (once per test process) and returns the
    /// path of binary `name`.
    pub fn bin(&self, name: &str) -> PathBuf {
        static BUILT: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
        let built = BUILT.get_or_init(|| Mutex::new(HashSet::new()));
        let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
        let out = cells_dir().join("out").join(self.name);
        if !built.contains(self.name) {
            self.build(&out);
            built.insert(self.name);
        }
        let path = out.join(name);
        assert!(path.exists(), "{} was not built", path.display());
        path
    }

    fn build(&self, out: &Path) {
        let pkg = package();
        let target_dir = cells_dir().join("target");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(&pkg)
            .args(["build", "--quiet", "--release", "--bins", "--target"])
            .arg(self.target)
            .arg("--target-dir")
            .arg(&target_dir)
            .args(self.config())
            // --target keeps RUSTFLAGS off the proc-macro crates, which a
            // static relocation model would break.
            .env("RUSTFLAGS", self.rustflags())
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("CARGO_ENCODED_RUSTFLAGS");
        if let Some(cross) = crate::cross::Cross::of(self.target) {
            let var = format!(
                "CARGO_TARGET_{}_LINKER",
                self.target.to_uppercase().replace('-', "_")
            );
            cmd.env(var, cross.linker());
        }
        let start = Instant::now();
        let status = cmd.output().expect("run cargo");
        assert!(
            status.status.success(),
            "building cell {} failed:\n{}",
            self.describe(),
            String::from_utf8_lossy(&status.stderr)
        );
        eprintln!(
            "built cell {} in {:.1} s",
            self.describe(),
            start.elapsed().as_secs_f64()
        );
        // The next cell overwrites the binaries: keep this cell's.
        std::fs::create_dir_all(out).unwrap();
        let built = target_dir.join(self.target).join("release");
        for bin in CELL_BINS {
            std::fs::copy(built.join(bin), out.join(bin))
                .unwrap_or_else(|e| panic!("copy {bin} of cell {}: {e}", self.name));
        }
    }
}

/// `target/shapes/cells`: the package, the shared target directory (cells
/// share the proc-macro builds) and each cell's binaries.
pub fn cells_dir() -> PathBuf {
    root().join("target").join("shapes").join("cells")
}

/// Writes the cells' package (once per test process) and returns its
/// directory.
pub fn package() -> PathBuf {
    static PKG: OnceLock<PathBuf> = OnceLock::new();
    PKG.get_or_init(|| {
        let root = root();
        let mut targets = String::new();
        for bin in CELL_BINS {
            let src = root.join("examples").join(format!("{bin}.rs"));
            targets.push_str(&format!(
                "[[bin]]\nname = \"{bin}\"\npath = {:?}\n\n",
                src.display().to_string()
            ));
        }
        standalone_package(&cells_dir().join("pkg"), "usdt-cells", &targets)
    })
    .clone()
}

/// Writes a package named `name` in `dir`, outside the workspace, that
/// depends on the facade (`usdt-probes`, library `usdt`) by path and has the given `[lib]`/`[[bin]]` tables
/// (with `autobins = false`, so it has only those), and returns `dir`.
/// Several test binaries may write it at once: each file is replaced
/// atomically, and only when it changes.
pub fn standalone_package(dir: &Path, name: &str, targets: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let root = root();
    let manifest = format!(
        "# Written by usdt-test-support/src/cell.rs.\n\
         [package]\n\
         name = \"{name}\"\n\
         version = \"0.0.0\"\n\
         edition = \"2021\"\n\
         publish = false\n\
         autobins = false\n\
         \n\
         [dependencies]\n\
         usdt-probes = {{ path = {:?} }}\n\
         \n\
         {targets}\
         [workspace]\n",
        root.display().to_string()
    );
    write_atomic(&dir.join("Cargo.toml"), manifest.as_bytes());
    // The workspace's lock file pins the same versions and needs no
    // registry index; cargo drops what the package does not use.
    if !dir.join("Cargo.lock").exists() {
        let lock = std::fs::read(root.join("Cargo.lock")).expect("Cargo.lock");
        write_atomic(&dir.join("Cargo.lock"), &lock);
    }
    dir.to_path_buf()
}

fn write_atomic(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
