//! Building, on the host, what the guests run: the `usdt` command, and for
//! each site layout the examples (`demo`, `fork`, `redzone`) and the bench,
//! each layout into a target directory of its own (`target/kernels/...`). The guests see them
//! through the machine's root, shared read-only.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Layout, LAYOUTS};

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
        let layout = LAYOUTS
            .iter()
            .find(|l| l.name == name)
            .copied()
            .ok_or_else(|| {
                let names: Vec<&str> = LAYOUTS.iter().map(|l| l.name).collect();
                format!("no layout \"{name}\"; the layouts: {}", names.join(", "))
            })?;
        Ok(LayoutBins {
            layout,
            examples: examples.into(),
            bench: bench.into(),
        })
    }
}

/// Everything the checks run.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub usdt: PathBuf,
    pub layouts: Vec<LayoutBins>,
}

/// The workspace's root (this package's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
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
    )?;
    let mut layouts = Vec::new();
    for layout in LAYOUTS {
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
        cargo(&root, &examples, &dir)?;
        let mut bench = vec!["build", "--release", "-p", "usdt-bench", "--bin", "bench"];
        if let Some(f) = &facade {
            bench.extend(["--features", f.as_str()]);
        }
        cargo(&root, &bench, &dir)?;
        // The guests see the target directory read-only: the C row's
        // library, which the bench compiles on first use, is compiled here.
        prepare_c(&dir.join("release/bench"))?;
        layouts.push(LayoutBins {
            layout,
            examples: dir.join("release/examples"),
            bench: dir.join("release/bench"),
        });
    }
    Ok(Binaries {
        usdt: target.join("release/usdt"),
        layouts,
    })
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

fn cargo(root: &Path, args: &[&str], target: &Path) -> Result<(), String> {
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
            layout: LAYOUTS[1],
            examples: "/t/nop10/release/examples".into(),
            bench: "/t/nop10/release/bench".into(),
        };
        assert_eq!(LayoutBins::from_arg(&bins.to_arg()), Ok(bins));
        assert!(LayoutBins::from_arg("nop7=/a,/b").is_err());
        assert!(LayoutBins::from_arg("nop5").is_err());
    }
}
