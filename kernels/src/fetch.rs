//! Fetching a generation's kernel: Debian's packages, with a private apt
//! configuration in the cache for each architecture (its own sources, lists
//! and archives; `-o APT::Architecture=arm64` for arm64's, `=riscv64` for
//! riscv64's), so the machine's sources and installed packages stay as they
//! are.
//!
//! A generation (`6.1`, `arm64-6.1`) is the newest generic-flavour
//! `linux-image-6.1*` package of its architecture the lists offer, with the
//! `linux-image`, `linux-binary` and `linux-modules` packages it depends on
//! (newer kernels split the image into a metapackage, the kernel and its
//! modules; a kernel of another architecture than the machine's boots on an
//! initramfs and needs no modules, so those are left out). They are downloaded with
//! `apt-get download`, unpacked with `dpkg-deb -x` into one tree, and their
//! modules indexed with `depmod -b`. The choice is kept in the cache
//! (`kernels/GEN.json`), so later runs need no network; `--refresh` picks
//! again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use usdt_provision::{Need, KMOD};

use crate::Arch;

/// The suites that carry the generations: bullseye 5.10, bookworm and
/// bullseye-security 6.1, trixie 6.12, trixie-backports 6.19.x and 7.3.x,
/// sid 7.2.x, experimental 7.3-rc (`ARCH`: Debian's name of the
/// architecture; riscv64 is in trixie and later only). bookworm, and
/// trixie for riscv64, also carry the userland of a guest of another
/// architecture (userland.rs).
const SOURCES: &str = "\
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
deb [arch=ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian experimental main
";

/// A kernel ready to boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The generation asked for (`6.1`, `arm64-6.1`).
    pub generation: String,
    /// The architecture it runs.
    pub arch: Arch,
    /// The package that holds the kernel image.
    pub package: String,
    /// Its Debian version.
    pub version: String,
    /// The kernel release (`uname -r` in the guest).
    pub release: String,
    /// The kernel image to boot; its modules are in the same tree.
    pub vmlinuz: PathBuf,
}

impl Kernel {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "generation": self.generation,
            "arch": self.arch.name(),
            "package": self.package,
            "version": self.version,
            "release": self.release,
            "vmlinuz": self.vmlinuz,
        })
    }

    fn from_json(v: &serde_json::Value) -> Option<Kernel> {
        let s = |k: &str| v.get(k)?.as_str().map(String::from);
        Some(Kernel {
            generation: s("generation")?,
            // Kernels chosen before the matrix had arm64 are x86-64's.
            arch: match v.get("arch") {
                None => Arch::X86_64,
                Some(a) => Arch::from_name(a.as_str()?)?,
            },
            package: s("package")?,
            version: s("version")?,
            release: s("release")?,
            vmlinuz: s("vmlinuz")?.into(),
        })
    }
}

/// One package record of `apt-cache show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub package: String,
    pub version: String,
    /// The names it depends on (alternatives and versions dropped).
    pub depends: Vec<String>,
}

/// The private apt configuration of one architecture: `cache/apt` for
/// amd64, `cache/apt-arm64` for arm64.
pub(crate) struct Apt {
    dir: PathBuf,
    arch: Arch,
}

impl Apt {
    pub(crate) fn new(cache: &Path, arch: Arch) -> Apt {
        let dir = match arch {
            Arch::X86_64 => cache.join("apt"),
            a => cache.join(format!("apt-{}", a.debian())),
        };
        Apt { dir, arch }
    }

    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        vec![
            format!("-oDir::Etc::sourcelist={d}/sources.list"),
            "-oDir::Etc::sourceparts=-".into(),
            format!("-oDir::State::Lists={d}/lists"),
            format!("-oDir::Cache={d}/cache"),
            "-oDir::State::status=/dev/null".into(),
            format!("-oAPT::Architecture={}", self.arch.debian()),
            "-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
            "-oDebug::NoLocking=1".into(),
        ]
    }

    pub(crate) fn run(
        &self,
        tool: &str,
        args: &[&str],
        cwd: Option<&Path>,
    ) -> Result<String, String> {
        let mut cmd = Command::new(tool);
        cmd.args(self.options()).args(args).stdin(Stdio::null());
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {tool}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{tool} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Writes the sources and fetches the lists, unless already fetched.
    pub(crate) fn update(&self, refresh: bool) -> Result<(), String> {
        let lists = self.dir.join("lists");
        let fetched = std::fs::read_dir(&lists)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().contains("Packages"))
            })
            .unwrap_or(false);
        if fetched && !refresh {
            return Ok(());
        }
        for sub in ["lists/partial", "cache/archives/partial"] {
            let d = self.dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let sources = self.dir.join("sources.list");
        let text = SOURCES.replace("ARCH", self.arch.debian());
        std::fs::write(&sources, text).map_err(|e| format!("{}: {e}", sources.display()))?;
        eprintln!(
            "kernels: apt-get update with the private sources in {}",
            sources.display()
        );
        self.run("apt-get", &["-qq", "update"], None).map(|_| ())
    }
}

/// The kernel of `generation`, fetched into `cache` on first use.
pub fn fetch(cache: &Path, generation: &str, refresh: bool) -> Result<Kernel, String> {
    let chosen = cache.join("kernels").join(format!("{generation}.json"));
    let Some(crate::Generation { arch, series, .. }) = crate::generation(generation) else {
        return Err(format!("no kernel generation \"{generation}\""));
    };
    if !refresh {
        if let Some(k) = std::fs::read_to_string(&chosen)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .and_then(|v| Kernel::from_json(&v))
            .filter(|k| k.vmlinuz.exists())
        {
            return Ok(k);
        }
    }
    usdt_provision::ensure(&[Need::package(
        KMOD,
        "the kernel matrix indexes each kernel package's modules with depmod",
    )])
    .map_err(|e| e.to_string())?;
    let apt = Apt::new(cache, arch);
    apt.update(refresh)?;
    let names = candidates(
        &apt.run(
            "apt-cache",
            &[
                "search",
                "--names-only",
                &format!("^linux-image-{}[.-]", series.replace('.', "\\.")),
            ],
            None,
        )?,
        arch,
    );
    let debian = arch.debian();
    if names.is_empty() {
        return Err(format!(
            "no linux-image-{series}*-{debian} package in the lists"
        ));
    }
    let records = show(&apt, &names)?;
    // The newest the mirror serves: a package the lists name may be gone
    // from it (bullseye-security's arm64 6.1 answered 404).
    let mut failures = Vec::new();
    for r in newest_first(&records).into_iter().take(CANDIDATES) {
        match unpack_kernel(cache, &apt, r, generation, arch) {
            Ok(kernel) => {
                std::fs::write(&chosen, kernel.to_json().to_string())
                    .map_err(|e| format!("{}: {e}", chosen.display()))?;
                return Ok(kernel);
            }
            Err(e) => {
                eprintln!(
                    "kernels: {generation}: {} {}: {e}; trying the next newest",
                    r.package, r.version
                );
                failures.push(format!("{} {}: {e}", r.package, r.version));
            }
        }
    }
    Err(match failures.is_empty() {
        true => format!("no version of linux-image-{series}*-{debian}"),
        false => failures.join("; "),
    })
}

/// How many of a generation's newest packages are tried before giving up.
const CANDIDATES: usize = 8;

/// `newest` and the kernel packages it depends on, downloaded and unpacked
/// into a tree of the cache: the kernel.
fn unpack_kernel(
    cache: &Path,
    apt: &Apt,
    newest: &Record,
    generation: &str,
    arch: Arch,
) -> Result<Kernel, String> {
    // A kernel of another architecture boots on an initramfs: no modules.
    let packages = closure(apt, newest, arch == Arch::host())?;
    let debs = debs_dir(cache, arch);
    std::fs::create_dir_all(&debs).map_err(|e| format!("{}: {e}", debs.display()))?;
    let tree = cache
        .join("kernels")
        .join(format!("{}_{}", newest.package, newest.version));
    std::fs::create_dir_all(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    let unpacked = packages.iter().try_for_each(|r| {
        let deb = download(apt, &debs, r)?;
        unpack(&deb, &tree)
    });
    if let Err(e) = unpacked {
        let _ = std::fs::remove_dir_all(&tree);
        return Err(e);
    }
    let (vmlinuz, release) = find_image(&tree)?;
    index_modules(&tree, &release)?;
    let holder = packages
        .iter()
        .find(|r| r.package.starts_with("linux-binary-"))
        .or_else(|| packages.iter().find(|r| r.package.contains(&release)))
        .unwrap_or(newest);
    Ok(Kernel {
        generation: generation.into(),
        arch,
        package: holder.package.clone(),
        version: holder.version.clone(),
        release,
        vmlinuz,
    })
}

/// Where the downloaded packages of `arch` are kept: `cache/debs` for the
/// machine's, `cache/debs-arm64` for arm64's.
pub(crate) fn debs_dir(cache: &Path, arch: Arch) -> PathBuf {
    match arch {
        Arch::X86_64 => cache.join("debs"),
        a => cache.join(format!("debs-{}", a.debian())),
    }
}

/// Why `kernel` cannot boot on the machine's root over 9p, if it cannot: it
/// runs another architecture than the machine's (arm64), or its modules (9p
/// and virtio among them) are not in the tree, as for 6.19, whose
/// `linux-modules` package the lists do not offer. Such a kernel boots on an
/// initramfs instead (initramfs.rs).
pub fn unbootable(kernel: &Kernel) -> Option<String> {
    if kernel.arch != Arch::host() {
        return Some(format!(
            "{} {} is a kernel for {}, and the machine's root is {}'s",
            kernel.package,
            kernel.version,
            kernel.arch.debian(),
            Arch::host().debian()
        ));
    }
    let mut dir = kernel.vmlinuz.parent();
    while let Some(d) = dir {
        for base in ["lib/modules", "usr/lib/modules"] {
            if d.join(base).join(&kernel.release).join("kernel").exists() {
                return None;
            }
        }
        if d.join("boot").exists() || d.join("usr").exists() {
            break;
        }
        dir = d.parent();
    }
    Some(format!(
        "{} {} ships no modules and the lists offer no linux-modules package for {}, so its guest has no 9p root",
        kernel.package, kernel.version, kernel.release
    ))
}

/// The generic-flavour kernel packages of `arch` in `apt-cache search`
/// output: not cloud, rt, 16k pages, unsigned or debug symbols.
pub fn candidates(search: &str, arch: Arch) -> Vec<String> {
    let suffix = format!("-{}", arch.debian());
    search
        .lines()
        .filter_map(|l| l.split(" - ").next())
        .map(str::trim)
        .filter(|n| n.ends_with(&suffix))
        .filter(|n| !["-cloud-", "-rt-", "-dbg"].iter().any(|x| n.contains(x)))
        .map(String::from)
        .collect()
}

/// Parses `apt-cache show` records.
pub fn parse_records(text: &str) -> Vec<Record> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                    .map(str::trim)
            };
            let depends = field("Depends")
                .unwrap_or("")
                .split(',')
                .filter_map(|d| d.split_whitespace().next())
                .map(String::from)
                .collect();
            Some(Record {
                package: field("Package")?.into(),
                version: field("Version")?.into(),
                depends,
            })
        })
        .collect()
}

/// The records, highest version first (of equals, the last first: search
/// order is stable, and either one leads to the same kernel through its
/// dependencies).
pub fn newest_first(records: &[Record]) -> Vec<&Record> {
    let mut sorted: Vec<&Record> = records.iter().rev().collect();
    sorted.sort_by(|a, b| crate::debver::compare(&b.version, &a.version));
    sorted
}

pub(crate) fn show(apt: &Apt, names: &[String]) -> Result<Vec<Record>, String> {
    let mut args = vec!["show", "--no-all-versions"];
    args.extend(names.iter().map(String::as_str));
    Ok(parse_records(&apt.run("apt-cache", &args, None)?))
}

/// `root` and the kernel packages it depends on, recursively (the modules
/// only `with_modules`); a dependency the lists do not have (6.19's
/// modules) is left out.
fn closure(apt: &Apt, root: &Record, with_modules: bool) -> Result<Vec<Record>, String> {
    let mut all = vec![root.clone()];
    let mut i = 0;
    while i < all.len() {
        let wanted: Vec<String> = all[i]
            .depends
            .iter()
            .filter(|d| {
                ["linux-image-", "linux-binary-", "linux-modules-"]
                    .iter()
                    .any(|p| d.starts_with(p))
            })
            .filter(|d| with_modules || !d.starts_with("linux-modules-"))
            .filter(|d| !all.iter().any(|r| &r.package == *d))
            .cloned()
            .collect();
        for name in wanted {
            if let Ok(found) = show(apt, std::slice::from_ref(&name)) {
                all.extend(found);
            }
        }
        i += 1;
    }
    Ok(all)
}

pub(crate) fn download(apt: &Apt, debs: &Path, r: &Record) -> Result<PathBuf, String> {
    let find = || {
        std::fs::read_dir(debs)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&format!("{}_", r.package)) && n.ends_with(".deb")
                })
            })
    };
    if let Some(deb) = find() {
        return Ok(deb);
    }
    eprintln!("kernels: downloading {} {}", r.package, r.version);
    let spec = format!("{}={}", r.package, r.version);
    apt.run("apt-get", &["-qq", "download", &spec], Some(debs))?;
    find().ok_or(format!(
        "apt-get download {spec} left no .deb in {}",
        debs.display()
    ))
}

pub(crate) fn unpack(deb: &Path, tree: &Path) -> Result<(), String> {
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(tree)
        .output()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dpkg-deb -x {}: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// `boot/vmlinuz-RELEASE` (older packages; riscv64's uncompressed image is
/// `boot/vmlinux-RELEASE`) or `usr/lib/modules/RELEASE/vmlinuz` (newer
/// ones, every architecture).
fn find_image(tree: &Path) -> Result<(PathBuf, String), String> {
    let boot = tree.join("boot");
    if let Ok(dir) = std::fs::read_dir(&boot) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let release = ["vmlinuz-", "vmlinux-"]
                .iter()
                .find_map(|p| name.strip_prefix(p));
            if let Some(release) = release {
                return Ok((e.path(), release.into()));
            }
        }
    }
    for base in ["usr/lib/modules", "lib/modules"] {
        if let Ok(dir) = std::fs::read_dir(tree.join(base)) {
            for e in dir.flatten() {
                let image = e.path().join("vmlinuz");
                if image.exists() {
                    return Ok((image, e.file_name().to_string_lossy().into_owned()));
                }
            }
        }
    }
    Err(format!("no kernel image in {}", tree.display()))
}

/// `depmod -b` where the package shipped modules without `modules.dep`.
fn index_modules(tree: &Path, release: &str) -> Result<(), String> {
    for base in ["usr", ""] {
        let root = tree.join(base);
        let mods = root.join("lib/modules").join(release);
        if !mods.join("kernel").exists() || mods.join("modules.dep").exists() {
            continue;
        }
        let out = Command::new("depmod")
            .arg("-b")
            .arg(&root)
            .arg(release)
            .output()
            .map_err(|e| format!("cannot run depmod: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "depmod -b {} {release}: {}",
                root.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_modules_is_unbootable() {
        let tree = std::env::temp_dir().join(format!("usdt-kernels-test-{}", std::process::id()));
        let boot = tree.join("boot");
        std::fs::create_dir_all(&boot).unwrap();
        let kernel = Kernel {
            generation: "6.19".into(),
            arch: Arch::X86_64,
            package: "linux-binary-6.19.14+deb13-amd64".into(),
            version: "6.19.14-1~bpo13+1".into(),
            release: "6.19.14+deb13-amd64".into(),
            vmlinuz: boot.join("vmlinuz-6.19.14+deb13-amd64"),
        };
        assert!(unbootable(&kernel)
            .unwrap()
            .contains("no linux-modules package"));
        std::fs::create_dir_all(tree.join("lib/modules/6.19.14+deb13-amd64/kernel")).unwrap();
        assert_eq!(unbootable(&kernel), None);
        // A kernel of another architecture boots on its initramfs, modules
        // or not.
        let arm = Kernel {
            arch: Arch::Aarch64,
            ..kernel.clone()
        };
        assert_eq!(unbootable(&arm).is_some(), Arch::host() != Arch::Aarch64);
        std::fs::remove_dir_all(&tree).unwrap();
        let json = arm.to_json();
        assert_eq!(Kernel::from_json(&json), Some(arm));
        let mut old = json;
        old.as_object_mut().unwrap().remove("arch");
        assert_eq!(Kernel::from_json(&old).unwrap().arch, Arch::X86_64);
    }

    #[test]
    fn finds_each_form_of_kernel_image() {
        let tree = std::env::temp_dir().join(format!("usdt-kernels-image-{}", std::process::id()));
        // riscv64's 6.12: an uncompressed image in /boot.
        let boot = tree.join("boot");
        std::fs::create_dir_all(&boot).unwrap();
        std::fs::write(boot.join("config-6.12.117+deb13-riscv64"), "").unwrap();
        std::fs::write(boot.join("vmlinux-6.12.117+deb13-riscv64"), "").unwrap();
        let (image, release) = find_image(&tree).unwrap();
        assert_eq!(release, "6.12.117+deb13-riscv64");
        assert_eq!(image, boot.join("vmlinux-6.12.117+deb13-riscv64"));
        std::fs::remove_dir_all(&boot).unwrap();
        // Newer packages: the image beside the modules.
        let modules = tree.join("usr/lib/modules/7.2.13+deb14-riscv64");
        std::fs::create_dir_all(&modules).unwrap();
        assert!(find_image(&tree).is_err());
        std::fs::write(modules.join("vmlinuz"), "").unwrap();
        assert_eq!(
            find_image(&tree).unwrap(),
            (modules.join("vmlinuz"), "7.2.13+deb14-riscv64".to_string())
        );
        std::fs::remove_dir_all(&tree).unwrap();
    }

    #[test]
    fn picks_the_newest_generic_kernel() {
        let search = "\
linux-image-6.1-amd64 - Linux for 64-bit PCs (meta-package)
linux-image-6.1.0-47-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-47-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-47-rt-amd64 - Linux 6.1 for 64-bit PCs, PREEMPT_RT (signed)
linux-image-6.1.0-47-amd64-unsigned - Linux 6.1 for 64-bit PCs
linux-image-6.1.0-47-amd64-dbg - Debug symbols for linux-image-6.1.0-47-amd64
";
        assert_eq!(
            candidates(search, Arch::X86_64),
            ["linux-image-6.1-amd64", "linux-image-6.1.0-47-amd64"]
        );
        assert!(candidates(search, Arch::Aarch64).is_empty());
        let arm = "\
linux-image-6.12.117+deb13-arm64 - Linux 6.12 for 64-bit ARMv8 machines (signed)
linux-image-6.12.117+deb13-arm64-16k - Linux 6.12 for 64-bit ARMv8 machines, 16k pages (signed)
linux-image-6.12.117+deb13-rt-arm64 - Linux 6.12 for 64-bit ARMv8 machines, PREEMPT_RT (signed)
";
        assert_eq!(
            candidates(arm, Arch::Aarch64),
            ["linux-image-6.12.117+deb13-arm64"]
        );
        let riscv = "\
linux-image-7.2.13+deb14-riscv64 - Linux 7.2.13 for 64-bit RISC-V platforms
linux-image-7.2.13+deb14-riscv64-dbg - Linux 7.2.13 for 64-bit RISC-V platforms (debug symbols)
";
        assert_eq!(
            candidates(riscv, Arch::Riscv64),
            ["linux-image-7.2.13+deb14-riscv64"]
        );
        assert!(candidates(riscv, Arch::Aarch64).is_empty());
        let show = "\
Package: linux-image-7.3-amd64
Version: 7.3~rc7-1~exp1
Depends: dracut | initramfs-tools (>= 0.120+deb8u2), linux-binary-7.3-amd64 (= 7.3~rc7-1~exp1), linux-modules-7.3-amd64 (= 7.3~rc7-1~exp1)

Package: linux-image-7.3.4+deb13-amd64
Version: 7.3.4-1~bpo13+1
Depends: linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)
";
        let records = parse_records(show);
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0].depends,
            [
                "dracut",
                "linux-binary-7.3-amd64",
                "linux-modules-7.3-amd64"
            ]
        );
        let sorted = newest_first(&records);
        assert_eq!(sorted[0].package, "linux-image-7.3.4+deb13-amd64");
        assert_eq!(sorted[1].package, "linux-image-7.3-amd64");
    }
}
