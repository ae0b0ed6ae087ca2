//! The userland of a guest of another architecture than the machine's
//! (arm64, riscv64): the machine's root cannot serve it, so its initramfs
//! takes Debian's programs of its architecture (busybox-static, and the
//! consumers bpftrace and gdb), from the release [`Arch::userland_suite`]
//! names (bookworm, trixie for riscv64), with the packages they depend on. They come through the same private apt configuration as the
//! kernels (fetch.rs): `apt-get -s install` names the closure, `apt-get
//! download` fetches it, `dpkg-deb -x` unpacks it into a tree of the cache
//! (a sysroot, `userland/ARCH/KEY/root`), from which the initramfs takes
//! each program and the shared libraries its ELF headers name
//! ([`dynamic`], read with `readelf`).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use usdt_provision::{Need, BINUTILS};

use crate::fetch::{self, Apt, Record};
use crate::Arch;

/// The packages every such guest runs: the root's layout (trixie's
/// packages install into `/usr` alone, and its base-files holds the `/bin`,
/// `/lib` and `/sbin` links to `/usr` through which their paths and
/// interpreters are named) and busybox (the shell, `mount`, ...).
pub const BASE: &[&str] = &["base-files", "busybox-static"];

/// The consumers the guest's checks run beside `usdt`, by package: each
/// installs `/usr/bin/NAME`.
pub const CONSUMERS: &[&str] = &["bpftrace", "gdb"];

/// An unpacked userland.
#[derive(Clone, Debug)]
pub struct Userland {
    pub arch: Arch,
    /// The unpacked tree: the guest's `/` on the machine.
    pub root: PathBuf,
    /// The packages asked for.
    pub packages: Vec<String>,
}

impl Userland {
    /// The consumers it holds, as the guest's paths (`/usr/bin/gdb`).
    pub fn consumers(&self) -> Vec<PathBuf> {
        CONSUMERS
            .iter()
            .filter(|c| self.packages.iter().any(|p| p == *c))
            .map(|c| Path::new("/usr/bin").join(c))
            .collect()
    }
}

/// The packages `packages` of `arch` and what they depend on, unpacked in
/// the cache on first use.
pub fn fetch(cache: &Path, arch: Arch, packages: &[&str]) -> Result<Userland, String> {
    let apt = Apt::new(cache, arch);
    apt.update(false)?;
    let suite = arch.userland_suite();
    let mut args = vec!["-s", "-t", suite, "--no-install-recommends", "install"];
    args.extend(packages);
    let plan = parse_simulation(&apt.run("apt-get", &args, None)?);
    if plan.is_empty() {
        return Err(format!(
            "apt-get -s install {} ({}) named no package",
            packages.join(" "),
            arch.debian()
        ));
    }
    let dir = cache
        .join("userland")
        .join(arch.debian())
        .join(format!("{:016x}", key(&plan)));
    let root = dir.join("root");
    let done = dir.join("unpacked");
    if !done.exists() {
        eprintln!(
            "kernels: unpacking {} packages of {} ({}) into {}",
            plan.len(),
            arch.debian(),
            packages.join(", "),
            root.display()
        );
        let debs = fetch::debs_dir(cache, arch);
        std::fs::create_dir_all(&debs).map_err(|e| format!("{}: {e}", debs.display()))?;
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        for r in &plan {
            let deb = fetch::download(&apt, &debs, r)?;
            fetch::unpack(&deb, &root)?;
        }
        std::fs::write(&done, "").map_err(|e| format!("{}: {e}", done.display()))?;
    }
    Ok(Userland {
        arch,
        root,
        packages: packages.iter().map(|p| p.to_string()).collect(),
    })
}

/// A hash of the package versions: a new version unpacks a new tree.
fn key(plan: &[Record]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in plan {
        (&r.package, &r.version).hash(&mut h);
    }
    h.finish()
}

/// The packages of `apt-get -s install` output: its `Inst NAME (VERSION
/// ...)` lines.
pub fn parse_simulation(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("Inst ")?;
            let (name, rest) = rest.split_once(' ')?;
            let version = rest.strip_prefix('(')?.split(' ').next()?;
            Some(Record {
                package: name.into(),
                version: version.into(),
                depends: Vec::new(),
            })
        })
        .collect()
}

/// What an ELF file needs to load: its interpreter, the shared libraries
/// it names, and where it says to look for them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dynamic {
    /// `PT_INTERP`: `/lib/ld-linux-aarch64.so.1`.
    pub interpreter: Option<String>,
    /// `DT_NEEDED`: `libc.so.6`, ...
    pub needed: Vec<String>,
    /// `DT_RUNPATH` or `DT_RPATH`, split at `:`.
    pub runpath: Vec<String>,
}

/// [`Dynamic`] of `file`, read by `readelf`, which reads any
/// architecture's ELF files.
pub fn dynamic(file: &Path) -> Result<Dynamic, String> {
    usdt_provision::ensure(&[Need::package(
        BINUTILS,
        "the kernel matrix reads the ELF headers of a foreign architecture's programs",
    )])
    .map_err(|e| e.to_string())?;
    let out = Command::new("readelf")
        .args(["--wide", "--dynamic", "--program-headers"])
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run readelf: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "readelf {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(parse_readelf(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses `readelf --wide --dynamic --program-headers` output.
pub fn parse_readelf(text: &str) -> Dynamic {
    let mut d = Dynamic::default();
    let bracketed = |l: &str| {
        let (_, rest) = l.split_once('[')?;
        rest.rsplit_once(']').map(|(v, _)| v.to_string())
    };
    for l in text.lines() {
        if l.contains("Requesting program interpreter:") {
            d.interpreter = l
                .split_once(": ")
                .and_then(|(_, p)| p.strip_suffix(']'))
                .map(String::from);
        } else if l.contains("(NEEDED)") {
            d.needed.extend(bracketed(l));
        } else if l.contains("(RUNPATH)") || l.contains("(RPATH)") {
            if let Some(v) = bracketed(l) {
                d.runpath.extend(v.split(':').map(String::from));
            }
        }
    }
    d
}

/// Where the dynamic loader of Debian's `triple` looks after a file's own
/// run path.
pub fn library_dirs(triple: &str) -> Vec<PathBuf> {
    [
        format!("/lib/{triple}"),
        format!("/usr/lib/{triple}"),
        "/lib".into(),
        "/usr/lib".into(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_apts_plan() {
        let text = "\
NOTE: This is only a simulation!
Inst gcc-12-base (12.2.0-14+deb12u1 Debian:12.13/oldstable [arm64])
Inst libc6 (2.36-9+deb12u13 Debian:12.13/oldstable [arm64])
Conf libc6 (2.36-9+deb12u13 Debian:12.13/oldstable [arm64])
";
        let plan = parse_simulation(text);
        assert_eq!(plan.len(), 2);
        assert_eq!(
            (plan[1].package.as_str(), plan[1].version.as_str()),
            ("libc6", "2.36-9+deb12u13")
        );
    }

    #[test]
    fn reads_the_dynamic_section() {
        let text = "
Program Headers:
  Type           Offset   VirtAddr           PhysAddr           FileSiz  MemSiz   Flg Align
  INTERP         0x000238 0x0000000000000238 0x0000000000000238 0x00001b 0x00001b R   0x1
      [Requesting program interpreter: /lib/ld-linux-aarch64.so.1]

Dynamic section at offset 0x1e5d0 contains 30 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libbpf.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN/../lib:/opt/x]
";
        let d = parse_readelf(text);
        assert_eq!(d.interpreter.as_deref(), Some("/lib/ld-linux-aarch64.so.1"));
        assert_eq!(d.needed, ["libbpf.so.1", "libc.so.6"]);
        assert_eq!(d.runpath, ["$ORIGIN/../lib", "/opt/x"]);
        assert_eq!(parse_readelf("no dynamic section"), Dynamic::default());
    }
}
