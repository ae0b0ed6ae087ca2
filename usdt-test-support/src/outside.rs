//! The program written outside the workspace, as a user writes one: a
//! package of its own (its own `[workspace]`, the workspace's lock file for
//! the same versions) with a provider (an eager, a lazy and a derived-type
//! probe) and an ad-hoc probe, depending on the facade either by its package
//! name (`usdt-probes = { path }`, writing `#[usdt::provider]`) or renamed
//! (`renamed = { package = "usdt-probes", path }`, naming it with `crate =
//! "renamed"`). The root's `tests/outside.rs` builds and traces both; the
//! kernel matrix cross-builds the first for its arm64 guests.
//!
//! `PACKAGE N` places N orders: for each id, `shop:order_placed(id,
//! "book")`, `shop:paid(id, -250)` (lazily), `shop:shipped(id, Qty(3))` and
//! the ad-hoc `shop:tick(id)`; then it prints `orders N charged C` (how often
//! the lazy probe's closure ran).

use std::path::{Path, PathBuf};

/// The program; `FACADE` is the name the program gives the dependency and
/// `/*crate*/` where the renamed program says it.
const MAIN: &str = r#"
#[FACADE::provider/*crate*/]
mod shop {
    fn order_placed(id: u64, item: &str) {}
    fn paid(id: u64, cents: i32) {}
    fn shipped(id: u64, qty: Qty) {}
}

#[derive(FACADE::ProbeArg)]
/*derive*/
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
        FACADE::probe!(shop, tick, id);
    }
    println!("orders {n} charged {charged}");
}
"#;

/// How the program depends on the facade.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dependency {
    /// `usdt-probes = { path = .. }`: the library's own name, `usdt`.
    ByPackageName,
    /// `renamed = { package = "usdt-probes", path = .. }`.
    Renamed,
}

impl Dependency {
    /// The package's name, and its program's.
    pub fn package(self) -> &'static str {
        match self {
            Dependency::ByPackageName => "shop-plain",
            Dependency::Renamed => "shop-renamed",
        }
    }

    /// The package's manifest, the facade at `facade` (the workspace root).
    pub fn manifest(self, facade: &Path) -> String {
        let facade = facade.display().to_string();
        let dependency = match self {
            Dependency::ByPackageName => format!("usdt-probes = {{ path = {facade:?} }}"),
            Dependency::Renamed => {
                format!("renamed = {{ package = \"usdt-probes\", path = {facade:?} }}")
            }
        };
        format!(
            "[package]\nname = \"{}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [dependencies]\n{dependency}\n\n[workspace]\n",
            self.package()
        )
    }

    /// The program's `src/main.rs`.
    pub fn source(self) -> String {
        match self {
            Dependency::ByPackageName => MAIN
                .replace("FACADE", "usdt")
                .replace("/*crate*/", "")
                .replace("/*derive*/\n", ""),
            Dependency::Renamed => MAIN
                .replace("FACADE", "renamed")
                .replace("/*crate*/", "(crate = \"renamed\")")
                .replace("/*derive*/", "#[usdt(crate = \"renamed\")]"),
        }
    }

    /// Writes the package into `dir`, the facade at `facade` (the workspace
    /// root, whose lock file it starts from); a file is rewritten only when
    /// it changed, so cargo builds it again only then. Its manifest's path.
    pub fn write(self, dir: &Path, facade: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir.join("src"))?;
        for (path, text) in [
            (dir.join("Cargo.toml"), self.manifest(facade)),
            (dir.join("src/main.rs"), self.source()),
        ] {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&path, text)?;
            }
        }
        if !dir.join("Cargo.lock").exists() {
            std::fs::copy(facade.join("Cargo.lock"), dir.join("Cargo.lock"))?;
        }
        Ok(dir.join("Cargo.toml"))
    }
}
