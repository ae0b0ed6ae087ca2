//! Building, on the host, what the guests run: the `usdt` command, and for
//! each site layout the examples (`demo`, `fork`, `redzone`) and the bench,
//! each layout into a target directory of its own (`target/kernels/...`). The guests see them
//! through the machine's root, shared read-only.
//!
//! For a guest of another architecture ([`build_cross`]: arm64, riscv64),
//! the same programs, the examples `types`, `latency` and `stacks` (whose
//! values and stacks the guest checks) and this harness itself are cross-built, statically linked
//! (`-C target-feature=+crt-static`: the guest has no C library of its
//! own), into `target/kernels-ARCH` (`kernels-aarch64`, `kernels-riscv64`),
//! and the bench's C row is compiled for it with the cross compiler and
//! `<sys/sdt.h>`.

use std::path::{Path, PathBuf};
use std::process::Command;

use usdt_provision::{Need, SDT};
use usdt_test_support::outside::Dependency;

use crate::{Arch, Layout};

/// The built programs of one layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutBins {
    pub layout: Layout,
    /// `target/.../release/examples`.
    pub examples: PathBuf,
    /// The bench binary, built with this layout.
    pub bench: PathBuf,
}

impl LayoutBins {
    /// `NAME=EXAMPLES,BENCH`, the guest command's `--layout` argument.
    pub fn to_arg(&self) -> String {
        format!(
            "{}={},{}",
            self.layout.name,
            self.examples.display(),
            self.bench.display()
        )
    }

    /// Parses [`LayoutBins::to_arg`].
    pub fn from_arg(arg: &str) -> Result<LayoutBins, String> {
        let bad = || format!("--layout takes NAME=EXAMPLES_DIR,BENCH, not \"{arg}\"");
        let (name, rest) = arg.split_once('=').ok_or_else(bad)?;
        let (examples, bench) = rest.split_once(',').ok_or_else(bad)?;
        let layout = Layout::named(name).ok_or_else(|| {
            let names: Vec<&str> = Arch::ALL
                .iter()
                .flat_map(|a| a.layouts())
                .map(|l| l.name)
                .collect();
            format!("no layout \"{name}\"; the layouts: {}", names.join(", "))
        })?;
        Ok(LayoutBins {
            layout,
            examples: examples.into(),
            bench: bench.into(),
        })
    }

    /// The library of the bench's C row, which the bench finds beside its
    /// target directory (`bench-c/`).
    pub fn bench_c(&self) -> Option<PathBuf> {
        Some(
            self.bench
                .ancestors()
                .nth(2)?
                .join("bench-c/libusdt_bench_c.so"),
        )
    }
}

/// The program written outside the project, as a user writes it (a
/// package of its own on `usdt-probes`, by that name), which the values
/// checks count and trace: `shop-plain N`.
pub const OUTSIDE: Dependency = Dependency::ByPackageName;

/// Everything the checks run, built for one architecture.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub arch: Arch,
    pub usdt: PathBuf,
    /// This harness, whose `guest` command runs the checks.
    pub harness: PathBuf,
    pub layouts: Vec<LayoutBins>,
    /// Whether the examples `types`, `latency` and `stacks` are built
    /// beside the default layout's: the guest then checks every argument
    /// type's value, the semaphore after detaching, latency, hist, `count
    /// --by` and stacks (guest.rs, `values`, `stacks`).
    pub values: bool,
    /// The program written outside the project ([`OUTSIDE`]), for the
    /// values checks; the guest finds it beside the examples.
    pub outside: Option<PathBuf>,
}

/// The workspace's root (this package's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// What the guests of `arch` run: [`build_all`] for the machine's own
/// architecture, [`build_cross`] for another.
pub fn build(arch: Arch) -> Result<Binaries, String> {
    match arch == Arch::host() {
        true => build_all(),
        false => build_cross(arch),
    }
}

/// Builds everything (cargo does nothing when it is up to date) into
/// `target/kernels` (the default layout) and `target/kernels/LAYOUT`: a
/// target directory of their own, which the matrix run by `cargo run` and
/// the one run by `cargo test` (while cargo holds `target/`) share.
pub fn build_all() -> Result<Binaries, String> {
    let root = workspace();
    let target = root.join("target").join("kernels");
    cargo(
        &root,
        &["build", "--release", "-p", "usdt-cli", "--bin", "usdt"],
        &target,
        &[],
    )?;
    let mut layouts = Vec::new();
    for layout in Arch::host().layouts().iter().copied() {
        let dir = match layout.feature {
            None => target.clone(),
            Some(_) => target.join(layout.name),
        };
        let mut examples = vec!["build", "--release", "-p", "usdt-probes"];
        examples.extend([
            "--example",
            "demo",
            "--example",
            "fork",
            "--example",
            "redzone",
        ]);
        let facade = layout.feature.map(|f| format!("usdt-probes/{f}"));
        if let Some(f) = &facade {
            examples.extend(["--features", f.as_str()]);
        }
        cargo(&root, &examples, &dir, &[])?;
        let mut bench = vec!["build", "--release", "-p", "usdt-bench", "--bin", "bench"];
        if let Some(f) = &facade {
            bench.extend(["--features", f.as_str()]);
        }
        cargo(&root, &bench, &dir, &[])?;
        // The guests see the target directory read-only: the C row's
        // library, which the bench compiles on first use, is compiled here,
        // beside the target directory the bench knows by its tag.
        mark_target(&dir)?;
        prepare_c(&dir.join("release/bench"))?;
        layouts.push(LayoutBins {
            layout,
            examples: dir.join("release/examples"),
            bench: dir.join("release/bench"),
        });
    }
    Ok(Binaries {
        arch: Arch::host(),
        usdt: target.join("release/usdt"),
        harness: std::env::current_exe().map_err(|e| format!("this harness: {e}"))?,
        layouts,
        values: false,
        outside: None,
    })
}

/// Builds what a guest of `arch` runs, statically linked for its Rust
/// target, into `target/kernels-ARCH` (one cargo run), and the bench's C
/// row with the cross compiler. Installs the rustup target, the cross
/// compiler and C library, and `<sys/sdt.h>` on first use.
pub fn build_cross(arch: Arch) -> Result<Binaries, String> {
    let triple = arch.rust_target();
    let [gcc, libc] = arch
        .cross_toolchain()
        .ok_or(format!("no cross toolchain builds for {}", arch.name()))?;
    usdt_provision::ensure(&[
        Need::rust_target(
            triple,
            "the kernel matrix builds the programs of its guests of another architecture",
        ),
        Need::package(
            gcc,
            "the kernel matrix links the programs of its guests of another architecture and compiles their C row",
        ),
        Need::package(
            libc,
            "the kernel matrix links the programs of its guests of another architecture statically",
        ),
        Need::package(
            SDT,
            "the bench's C row in the guests of another architecture is a <sys/sdt.h> probe",
        ),
    ])
    .map_err(|e| e.to_string())?;
    let root = workspace();
    // Beside `target/kernels`, not in it: the one would make the other's
    // directory before cargo could tag it as its own.
    let target = root.join("target").join(format!("kernels-{}", arch.name()));
    let var = triple.to_uppercase().replace('-', "_");
    let linker = format!("{}-gcc", arch.gnu_triple());
    #[rustfmt::skip]
    let args = [
        "build", "--release", "--target", triple,
        "-p", "usdt-cli", "--bin", "usdt", "--example", "latency",
        "-p", "usdt-probes", "--example", "demo", "--example", "fork",
        "--example", "redzone", "--example", "types", "--example", "stacks",
        "-p", "usdt-bench", "--bin", "bench",
        "-p", "usdt-kernels", "--bin", "usdt-kernels",
    ];
    let env = [
        (format!("CARGO_TARGET_{var}_LINKER"), linker.clone()),
        (
            format!("CARGO_TARGET_{var}_RUSTFLAGS"),
            "-C target-feature=+crt-static".to_string(),
        ),
    ];
    cargo(&root, &args, &target, &env)?;
    // The program written outside the project: a workspace of its own.
    let dir = target.join(OUTSIDE.package());
    let manifest = OUTSIDE
        .write(&dir, &root)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let manifest = manifest.to_string_lossy();
    cargo(
        &root,
        &[
            "build",
            "--release",
            "--target",
            triple,
            "--manifest-path",
            &manifest,
        ],
        &target,
        &env,
    )?;
    let release = target.join(triple).join("release");
    let layout = LayoutBins {
        layout: arch.layouts()[0],
        examples: release.join("examples"),
        bench: release.join("bench"),
    };
    if let Some(lib) = layout.bench_c() {
        compile_c(&linker, &lib)?;
    }
    Ok(Binaries {
        arch,
        usdt: release.join("usdt"),
        harness: release.join("usdt-kernels"),
        layouts: vec![layout],
        values: true,
        outside: Some(release.join(OUTSIDE.package())),
    })
}

/// The bench's C row (`bench/c/loop.c`) compiled by `cc` into `lib`, as
/// the bench compiles it for itself, unless `lib` is newer than the source.
fn compile_c(cc: &str, lib: &Path) -> Result<(), String> {
    let source = workspace().join("bench/c/loop.c");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(lib).is_some() && modified(lib) >= modified(&source) {
        return Ok(());
    }
    // The header is the machine's: `sys/sdt.h` is the same for every
    // architecture, and searched after the cross compiler's own headers.
    let header = SDT
        .provides
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or("no <sys/sdt.h> on the machine (systemtap-sdt-dev)")?;
    let include = header
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let dir = lib.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let partial = dir.join(format!("libusdt_bench_c.so.{}", std::process::id()));
    eprintln!("kernels: {cc} {} -o {}", source.display(), lib.display());
    let out = Command::new(cc)
        .args(["-O2", "-g", "-shared", "-fPIC", "-Wall", "-idirafter"])
        .arg(include)
        .arg("-o")
        .arg(&partial)
        .arg(&source)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "{cc} {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(&partial, lib).map_err(|e| format!("{}: {e}", lib.display()))
}

/// The contents of `CACHEDIR.TAG`, which marks a target directory.
pub const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55
# This file is a cache directory tag created by cargo.
";

/// `dir`'s `CACHEDIR.TAG`, written if cargo did not (it tags only a
/// directory it creates): the bench finds its C row's library beside the
/// target directory it tags.
fn mark_target(dir: &Path) -> Result<(), String> {
    let tag = dir.join("CACHEDIR.TAG");
    match tag.exists() {
        true => Ok(()),
        false => std::fs::write(&tag, CACHEDIR_TAG).map_err(|e| format!("{}: {e}", tag.display())),
    }
}

fn prepare_c(bench: &Path) -> Result<(), String> {
    eprintln!("kernels: {} --prepare-c", bench.display());
    let status = Command::new(bench)
        .arg("--prepare-c")
        .status()
        .map_err(|e| format!("{}: {e}", bench.display()))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("{} --prepare-c: {status}", bench.display())),
    }
}

fn cargo(
    root: &Path,
    args: &[&str],
    target: &Path,
    env: &[(String, String)],
) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "kernels: cargo {} (target {})",
        args.join(" "),
        target.display()
    );
    let status = Command::new(cargo)
        .args(args)
        .arg("--target-dir")
        .arg(target)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo {} failed ({status})", args.join(" ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_argument_round_trips() {
        let bins = LayoutBins {
            layout: Arch::X86_64.layouts()[1],
            examples: "/t/nop10/release/examples".into(),
            bench: "/t/nop10/release/bench".into(),
        };
        assert_eq!(LayoutBins::from_arg(&bins.to_arg()), Ok(bins));
        assert!(LayoutBins::from_arg("nop7=/a,/b").is_err());
        assert!(LayoutBins::from_arg("nop5").is_err());
        let arm = LayoutBins::from_arg("nop=/a/release/examples,/a/release/bench").unwrap();
        assert!(!arm.layout.has_long_nop());
        assert_eq!(arm.bench_c(), Some("/a/bench-c/libusdt_bench_c.so".into()));
    }
}
