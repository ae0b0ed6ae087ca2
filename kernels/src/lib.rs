//! The kernel matrix: the project checked on every kernel generation.
//!
//! Debian publishes a kernel of each generation as a package. This crate
//! fetches them into a cache with a private apt configuration ([`fetch`]),
//! boots each under qemu on the machine's own root over 9p with virtme-ng
//! ([`boot`]) — or, for a kernel without a modules package (6.19), on an
//! initramfs holding what the checks run ([`initramfs`]) — runs the checks inside the guest ([`guest`], this same binary's
//! `guest` command) and reports one row per kernel with the contracts it
//! checks ([`report`]). The machine's own kernel is a row too, checked
//! directly.
//!
//! ```text
//! cargo run --release -p usdt-kernels [-- --json] [--kernel 6.1 ...]
//! ```

pub mod boot;
pub mod build;
pub mod debver;
pub mod features;
pub mod fetch;
pub mod guest;
pub mod initramfs;
pub mod report;

/// The generations the matrix boots, oldest first. "host" is the machine's
/// own kernel, checked without qemu.
pub const GENERATIONS: [&str; 7] = ["5.10", "6.1", "6.12", "host", "6.19", "7.2", "7.3"];

/// The site layouts the matrix builds and checks, each with the cargo
/// feature of the `usdt` facade that selects it (`None`: the default,
/// [`DEFAULT_LAYOUT`]).
pub const LAYOUTS: [Layout; 3] = [
    Layout {
        name: "nop5",
        feature: Some("nop5"),
    },
    Layout {
        name: "nop10",
        feature: Some("nop10"),
    },
    DEFAULT_LAYOUT,
];

/// The layout a build without features emits, what applications get:
/// `nop; nop5; nop10`.
pub const DEFAULT_LAYOUT: Layout = Layout {
    name: "nop5_nop10",
    feature: None,
};

/// A site layout: its name in the output and how to build it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `nop5`, `nop10`, `nop5_nop10`: the long nops after the site's first
    /// `nop`.
    pub name: &'static str,
    /// The facade's cargo feature that selects it.
    pub feature: Option<&'static str>,
}

/// The uprobe syscall's errno that a kernel release should give from a
/// normal caller: ENOSYS before 6.18 (no syscall), ENXIO from 6.18 to early
/// 7.2 (nop5 optimized), EPROTO from 7.2.6 and 7.3 (nop10 optimized).
pub fn expected_errno(release: &str) -> Option<&'static str> {
    let (major, minor, patch) = release_numbers(release)?;
    Some(match (major, minor) {
        (m, _) if m < 6 => "ENOSYS",
        (6, n) if n < 18 => "ENOSYS",
        (6, _) => "ENXIO",
        (7, n) if n < 2 => "ENXIO",
        (7, 2) if patch < 6 => "ENXIO",
        _ => "EPROTO",
    })
}

/// `6.19.14+deb13-amd64` -> (6, 19, 14); `7.3-amd64` (an rc) -> (7, 3, 0).
pub fn release_numbers(release: &str) -> Option<(u32, u32, u32)> {
    let numeric: String = release
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numeric.split('.').filter(|p| !p.is_empty());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// Where the matrix keeps its kernels, apt lists and virtualenv:
/// `$USDT_KERNELS_CACHE`, else `/var/cache/usdt-kernels`.
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("USDT_KERNELS_CACHE")
        .map(Into::into)
        .unwrap_or_else(|| "/var/cache/usdt-kernels".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_generation_expects_its_errno() {
        assert_eq!(expected_errno("5.10.0-46-amd64"), Some("ENOSYS"));
        assert_eq!(expected_errno("6.1.0-0.deb11.52-amd64"), Some("ENOSYS"));
        assert_eq!(expected_errno("6.12.117+deb13-amd64"), Some("ENOSYS"));
        assert_eq!(expected_errno("6.18.44"), Some("ENXIO"));
        assert_eq!(expected_errno("6.19.14+deb13-amd64"), Some("ENXIO"));
        assert_eq!(expected_errno("7.2.5"), Some("ENXIO"));
        assert_eq!(expected_errno("7.2.6+deb13-amd64"), Some("EPROTO"));
        assert_eq!(expected_errno("7.2.13+deb14-amd64"), Some("EPROTO"));
        assert_eq!(expected_errno("7.3-amd64"), Some("EPROTO"));
        assert_eq!(expected_errno("7.3.4+deb13-amd64"), Some("EPROTO"));
        assert_eq!(expected_errno("garbage"), None);
    }
}
