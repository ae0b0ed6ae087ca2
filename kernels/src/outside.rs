//! A program written outside the project, as a user writes one: a package
//! of its own (its own `[workspace]`) that depends on the facade by its
//! package name, `usdt-probes = { path }`, with a provider (an eager, a lazy
//! and a derived-type probe) and an ad-hoc probe. The cross build writes it
//! into its target directory and builds it for the guests' architecture
//! ([`crate::build`]); the values checks count and trace it there
//! ([`crate::values`]).
//!
//! `shop N` places N orders: for each id, `shop:order_placed(id, "book")`,
//! `shop:paid(id, -250)` (lazily), `shop:shipped(id, Qty(3))` and the
//! ad-hoc `shop:tick(id)`; then it prints `orders N charged C` (how often
//! the lazy probe's closure ran).

use std::path::{Path, PathBuf};

/// The program's name (its package's and its binary's).
pub const NAME: &str = "shop";

/// The program.
const MAIN: &str = r#"#[usdt::provider]
mod shop {
    fn order_placed(id: u64, item: &str) {}
    fn paid(id: u64, cents: i32) {}
    fn shipped(id: u64, qty: Qty) {}
}

#[derive(usdt::ProbeArg)]
struct Qty(u16);

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut charged = 0;
    for id in 0..n {
        shop::order_placed!(id, "book");
        shop::paid!(|| {
            charged += 1;
            (id, -250)
        });
        shop::shipped!(id, Qty(3));
        usdt::probe!(shop, tick, id);
    }
    println!("orders {n} charged {charged}");
}
"#;

/// Writes the package into `dir` (with the workspace's lock file, for the
/// same versions) unless it is there as written; its manifest.
pub fn write(dir: &Path, workspace: &Path) -> Result<PathBuf, String> {
    let manifest = format!(
        "[package]\nname = \"{NAME}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nusdt-probes = {{ path = \"{}\" }}\n\n[workspace]\n",
        workspace.display()
    );
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(dir.join("src")).map_err(|e| io(dir, e))?;
    for (path, text) in [
        (dir.join("Cargo.toml"), manifest.as_str()),
        (dir.join("src/main.rs"), MAIN),
    ] {
        // Rewritten only when changed: cargo rebuilds what is newer.
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        }
    }
    let lock = dir.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(workspace.join("Cargo.lock"), &lock).map_err(|e| io(&lock, e))?;
    }
    Ok(dir.join("Cargo.toml"))
}
