//! The kernel matrix: the project checked on every kernel generation.
//!
//! Debian publishes a kernel of each generation as a package, for each of
//! its architectures. This crate fetches them into a cache with a private
//! apt configuration ([`fetch`]), boots each under qemu on the machine's own
//! root over 9p with virtme-ng ([`boot`]) — or, for a kernel without a
//! modules package (x86-64's 6.19) and for every kernel of another
//! architecture (arm64 and riscv64, emulated), on an initramfs holding what
//! the checks run ([`initramfs`]; for those, static builds for their
//! architecture ([`build`]) and Debian's userland of it ([`userland`])) —
//! runs the checks inside the
//! guest ([`guest`], this same binary's `guest` command) and reports one row
//! per kernel with the contracts it checks ([`report`]). The machine's own
//! kernel is a row too, checked directly.
//!
//! ```text
//! cargo run --release -p usdt-kernels [-- --json] [--kernel 6.1 ...]
//! ```

pub mod arch;
pub mod boot;
pub mod build;
pub mod debver;
pub mod exec;
pub mod features;
pub mod fetch;
pub mod guest;
pub mod initramfs;
pub mod report;
pub mod stacks;
pub mod userland;
pub mod values;

pub use arch::Arch;

/// A row of the matrix: a kernel series of one architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// Its name on the command line (`6.1`, `arm64-6.1`, `riscv64-7.2`,
    /// `host`).
    pub name: &'static str,
    /// The architecture it runs.
    pub arch: Arch,
    /// The series of Debian's kernel packages (`linux-image-6.1*`), or
    /// `host` for the machine's own kernel.
    pub series: &'static str,
}

const fn x86(series: &'static str) -> Generation {
    Generation {
        name: series,
        arch: Arch::X86_64,
        series,
    }
}

/// The generations the matrix boots, oldest first, x86-64's, then arm64's
/// (the oldest and newest series Debian ships for it, and its current
/// stable one), then riscv64's (trixie's, the first release that has it,
/// and the newest, sid's). "host" is the machine's own kernel, checked
/// without qemu.
pub const GENERATIONS: [Generation; 12] = [
    x86("5.10"),
    x86("6.1"),
    x86("6.12"),
    x86("host"),
    x86("6.19"),
    x86("7.2"),
    x86("7.3"),
    Generation {
        name: "arm64-6.1",
        arch: Arch::Aarch64,
        series: "6.1",
    },
    Generation {
        name: "arm64-6.12",
        arch: Arch::Aarch64,
        series: "6.12",
    },
    Generation {
        name: "arm64-7.3",
        arch: Arch::Aarch64,
        series: "7.3",
    },
    Generation {
        name: "riscv64-6.12",
        arch: Arch::Riscv64,
        series: "6.12",
    },
    Generation {
        name: "riscv64-7.2",
        arch: Arch::Riscv64,
        series: "7.2",
    },
];

/// The generation named `name`.
pub fn generation(name: &str) -> Option<Generation> {
    GENERATIONS.iter().find(|g| g.name == name).copied()
}

/// A site layout: its name in the output and how to build it (see
/// [`Arch::layouts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `nop5`, `nop10`, `nop5_nop10`: the long nops after the site's first
    /// `nop` (x86-64); `nop`: the one `nop` (aarch64, riscv64).
    pub name: &'static str,
    /// The facade's cargo feature that selects it.
    pub feature: Option<&'static str>,
}

impl Layout {
    /// The layout named `name`, of any architecture.
    pub fn named(name: &str) -> Option<Layout> {
        Arch::ALL
            .iter()
            .flat_map(|a| a.layouts())
            .find(|l| l.name == name)
            .copied()
    }

    /// Whether its site has a long nop after the `nop` (Location + 1, where
    /// `--attach next` goes and the kernel may optimize).
    pub fn has_long_nop(&self) -> bool {
        self.name != "nop"
    }
}

/// The uprobe syscall's errno that a kernel release should give from a
/// normal caller on x86-64: ENOSYS before 6.18 (no syscall), ENXIO from 6.18
/// to early 7.2 (nop5 optimized), EPROTO from 7.2.6 and 7.3 (nop10
/// optimized). aarch64 and riscv64 have no uprobe syscall (336 is
/// unallocated in their table, the generic one): ENOSYS on every release.
pub fn expected_errno(arch: Arch, release: &str) -> Option<&'static str> {
    let (major, minor, patch) = release_numbers(release)?;
    if arch != Arch::X86_64 {
        return Some("ENOSYS");
    }
    Some(match (major, minor) {
        (m, _) if m < 6 => "ENOSYS",
        (6, n) if n < 18 => "ENOSYS",
        (6, _) => "ENXIO",
        (7, n) if n < 2 => "ENXIO",
        (7, 2) if patch < 6 => "ENXIO",
        _ => "EPROTO",
    })
}

/// Whether a kernel release has BPF uprobe_multi links: Linux 6.6 and
/// later (every architecture; Debian builds them in).
pub fn expects_uprobe_multi(release: &str) -> Option<bool> {
    let (major, minor, _) = release_numbers(release)?;
    Some((major, minor) >= (6, 6))
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
        let e = |r| expected_errno(Arch::X86_64, r);
        assert_eq!(e("5.10.0-46-amd64"), Some("ENOSYS"));
        assert_eq!(e("6.1.0-0.deb11.52-amd64"), Some("ENOSYS"));
        assert_eq!(e("6.12.117+deb13-amd64"), Some("ENOSYS"));
        assert_eq!(e("6.18.44"), Some("ENXIO"));
        assert_eq!(e("6.19.14+deb13-amd64"), Some("ENXIO"));
        assert_eq!(e("7.2.5"), Some("ENXIO"));
        assert_eq!(e("7.2.6+deb13-amd64"), Some("EPROTO"));
        assert_eq!(e("7.2.13+deb14-amd64"), Some("EPROTO"));
        assert_eq!(e("7.3-amd64"), Some("EPROTO"));
        assert_eq!(e("7.3.4+deb13-amd64"), Some("EPROTO"));
        assert_eq!(e("garbage"), None);
        // No uprobe syscall on aarch64, old or new.
        for r in [
            "6.1.0-57-arm64",
            "6.12.117+deb13-arm64",
            "7.3.4+deb13-arm64",
        ] {
            assert_eq!(expected_errno(Arch::Aarch64, r), Some("ENOSYS"));
        }
        // Nor on riscv64.
        for r in ["6.12.117+deb13-riscv64", "7.2.13+deb14-riscv64"] {
            assert_eq!(expected_errno(Arch::Riscv64, r), Some("ENOSYS"));
        }
    }

    #[test]
    fn uprobe_multi_from_6_6() {
        assert_eq!(expects_uprobe_multi("6.1.0-57-arm64"), Some(false));
        assert_eq!(expects_uprobe_multi("6.6.1"), Some(true));
        assert_eq!(expects_uprobe_multi("7.3.4+deb13-arm64"), Some(true));
        assert_eq!(expects_uprobe_multi("x"), None);
    }

    #[test]
    fn every_generation_has_its_layouts_and_a_unique_name() {
        for (i, g) in GENERATIONS.iter().enumerate() {
            assert_eq!(generation(g.name), Some(*g));
            assert!(GENERATIONS[i + 1..].iter().all(|o| o.name != g.name));
        }
        assert_eq!(Layout::named("nop").map(|l| l.has_long_nop()), Some(false));
        assert_eq!(Layout::named("nop10").map(|l| l.has_long_nop()), Some(true));
        assert_eq!(Layout::named("nop7"), None);
    }
}
