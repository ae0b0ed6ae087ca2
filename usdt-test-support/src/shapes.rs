//! The workspace's examples built in a given build shape ([`Shape`]: a
//! profile of this workspace and features of the `usdt` crate), by a nested
//! cargo into a target directory per feature set.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// A way of building the examples: a cargo profile of this workspace and
/// features of the `usdt` crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `dev`: opt-level 0.
    Debug,
    /// `release`: opt-level 3.
    Release,
    /// `o3-fat`: opt-level 3, `lto = "fat"`, `codegen-units = 1`.
    O3Fat,
    /// `release` with the `nop10` feature.
    Nop10,
}

impl Shape {
    pub const ALL: [Shape; 4] = [Shape::Debug, Shape::Release, Shape::O3Fat, Shape::Nop10];

    fn profile(self) -> &'static str {
        match self {
            Shape::Debug => "dev",
            Shape::Release | Shape::Nop10 => "release",
            Shape::O3Fat => "o3-fat",
        }
    }

    fn profile_dir(self) -> &'static str {
        match self {
            Shape::Debug => "debug",
            Shape::Release | Shape::Nop10 => "release",
            Shape::O3Fat => "o3-fat",
        }
    }

    /// A target directory per feature set, so that shapes do not rebuild each
    /// other's artifacts.
    fn target_dir(self) -> PathBuf {
        let features = if self == Shape::Nop10 {
            "nop10"
        } else {
            "default"
        };
        crate::root().join("target").join("shapes").join(features)
    }
}

/// The examples the tests build and trace.
pub const EXAMPLES: [&str; 4] = ["demo", "types", "redzone", "gc"];

/// Builds the test examples in `shape` (once per test process), and example
/// `name` too when it is not one of them, and returns the path of example
/// `name`.
pub fn example(name: &str, shape: Shape) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(Shape, String)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&(shape, name.to_string())) {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(crate::root())
            .args(["build", "--quiet", "--profile", shape.profile()])
            .arg("--target-dir")
            .arg(shape.target_dir())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
        for example in EXAMPLES {
            cmd.args(["--example", example]);
        }
        if !EXAMPLES.contains(&name) {
            cmd.args(["--example", name]);
        }
        if shape == Shape::Nop10 {
            cmd.args(["--features", "nop10"]);
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "building the examples ({shape:?}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.extend(
            EXAMPLES
                .iter()
                .chain([&name])
                .map(|e| (shape, e.to_string())),
        );
    }
    let path = shape
        .target_dir()
        .join(shape.profile_dir())
        .join("examples")
        .join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}
