//! Booting a kernel under qemu with virtme-ng: the machine's own root,
//! read-only over 9p (so the guest has the built binaries and the machine's
//! bpftrace and gdb), the kernel's modules from its package's tree, one
//! command, the console kept in a log. The command writes its result into a
//! directory shared read-write with the host.
//!
//! KVM where the machine offers it to ordinary kernels; a PVM host
//! (`kvm_pvm`) boots only PVM guest kernels, so there, and without
//! `/dev/kvm`, the guests run under TCG emulation, as every guest of
//! another architecture does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use usdt_provision::{Need, BUSYBOX, KMOD, VIRTME_NG};

use crate::fetch::Kernel;
use crate::Arch;

/// How qemu runs the guest's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// KVM or TCG here for a guest of `arch`, and why: another architecture
/// than the machine's is emulated.
pub fn accel_for(arch: Arch) -> (Accel, String) {
    match arch == Arch::host() {
        true => accel(),
        false => (
            Accel::Tcg,
            format!(
                "tcg: a guest for {} is emulated on this {} machine",
                arch.debian(),
                Arch::host().debian()
            ),
        ),
    }
}

/// KVM or TCG here, and why.
pub fn accel() -> (Accel, String) {
    // A loaded module is in /proc/modules, a built-in one only in /sys/module.
    let mut modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    if std::path::Path::new("/sys/module/kvm_pvm").exists() {
        modules += "kvm_pvm (built in)\n";
    }
    decide_accel(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok(),
        &modules,
    )
}

/// The decision, from whether `/dev/kvm` opens and `/proc/modules`.
pub fn decide_accel(kvm_opens: bool, modules: &str) -> (Accel, String) {
    if modules.lines().any(|l| l.starts_with("kvm_pvm ")) {
        return (
            Accel::Tcg,
            "tcg: /dev/kvm is a PVM host (kvm_pvm), which boots only PVM guest kernels".into(),
        );
    }
    if !kvm_opens {
        return (Accel::Tcg, "tcg: /dev/kvm cannot be opened".into());
    }
    (Accel::Kvm, "kvm".into())
}

/// Installs what booting guests of `arches` needs (each one's qemu; for
/// the machine's own, busybox for virtme-ng's initramfs and virtme-ng in a
/// virtualenv of the cache); `Err` says why qemu cannot run.
pub fn prepare(cache: &Path, arches: &[Arch]) -> Result<PathBuf, String> {
    usdt_provision::ensure(&[Need::root(
        "the guests' checks attach uprobes, and qemu's 9p root is the machine's",
    )])
    .map_err(|e| e.to_string())?;
    let qemus: Vec<Need> = arches.iter().map(|a| a.qemu_need()).collect();
    usdt_provision::ensure(&qemus).map_err(|e| e.to_string())?;
    let venv = cache.join("venv");
    if !arches.contains(&Arch::X86_64) {
        return Ok(venv.join("bin"));
    }
    usdt_provision::ensure(&[
        Need::package(
            BUSYBOX,
            "virtme-ng builds the guests' initramfs with busybox",
        ),
        Need::package(KMOD, "virtme-ng finds the guests' modules with modprobe"),
    ])
    .map_err(|e| e.to_string())?;
    usdt_provision::ensure_pip(
        &venv,
        VIRTME_NG,
        "the kernel matrix boots each kernel on the machine's own root with vng",
    )
    .map_err(|e| e.to_string())?;
    Ok(venv.join("bin"))
}

/// What a boot brought back.
#[derive(Clone, Debug)]
pub struct Boot {
    /// vng's exit, or `timeout`.
    pub status: String,
    /// The console log's path.
    pub console: PathBuf,
    pub seconds: f64,
}

/// Boots `kernel` and runs `command` (a program and its arguments) in it,
/// for at most `timeout`.
pub fn boot(
    venv_bin: &Path,
    kernel: &Kernel,
    accel: Accel,
    command: &[String],
    shared: &Path,
    timeout: Duration,
) -> Result<Boot, String> {
    std::fs::create_dir_all(shared).map_err(|e| format!("{}: {e}", shared.display()))?;
    let console = shared.join("console.log");
    let log = std::fs::File::create(&console).map_err(|e| format!("{}: {e}", console.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(venv_bin.join("vng"));
    cmd.arg("--run").arg(&kernel.vmlinuz);
    if accel == Accel::Tcg {
        cmd.arg("--disable-kvm");
    }
    cmd.args(["--verbose", "-m", "2G", "--cpus", "1"])
        .arg(format!("--rwdir={}", shared.display()))
        .arg("--")
        .arg(shell_line(command))
        .env("PATH", path)
        .current_dir(shared)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    let (status, seconds) = run_machine(&mut cmd, "vng", timeout)?;
    Ok(Boot {
        status,
        console,
        seconds,
    })
}

/// Runs `cmd` (a machine: vng, or qemu itself) as the leader of its own
/// process group for at most `timeout`, then kills the whole group (the
/// qemu a vng started too); its status (`timeout` when killed) and the
/// seconds it took. `name` names it in an error.
pub(crate) fn run_machine(
    cmd: &mut Command,
    name: &str,
    timeout: Duration,
) -> Result<(String, f64), String> {
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {name}: {e}"))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break format!("{s}"),
            Ok(None) if start.elapsed() > timeout => {
                // SAFETY: the child leads its own process group (process_group(0)):
                // this ends it and what it started, nothing else.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.wait();
                break "timeout".into();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => break format!("wait: {e}"),
        }
    };
    Ok((status, start.elapsed().as_secs_f64()))
}

/// The command as one shell line, each word single-quoted.
pub fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pvm_host_boots_debian_kernels_under_tcg() {
        let pvm = "kvm_pvm 200704 0 - Live 0x0000000000000000\nkvm 1392640 1 kvm_pvm, Live 0x0\n";
        assert_eq!(decide_accel(true, pvm).0, Accel::Tcg);
        assert_eq!(decide_accel(false, "").0, Accel::Tcg);
        assert_eq!(
            decide_accel(true, "kvm_intel 1 0 - Live 0x0\n").0,
            Accel::Kvm
        );
    }

    #[test]
    fn quotes_each_word() {
        let words = ["/a b/x".to_string(), "it's".into()];
        assert_eq!(shell_line(&words), "'/a b/x' 'it'\\''s'");
    }
}
