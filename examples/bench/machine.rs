//! What the numbers were measured on: kernel, CPU, virtualization. The
//! uprobe paths' costs differ a lot between bare metal and virtual machines.

use std::ffi::CStr;

/// The machine, as the output header names it.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `uname -sr` and the architecture, e.g. `Linux 6.18.44 x86_64`.
    pub kernel: String,
    /// `/proc/cpuinfo`'s model name.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// `bare metal`, or the hypervisor CPUID names (`KVM guest`).
    pub virtualization: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the bench started:
    /// other work on the machine shows in the numbers.
    pub load: String,
}

impl Machine {
    /// Reads it from this machine.
    pub fn probe() -> Machine {
        Machine {
            kernel: kernel(),
            cpu: cpu(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            virtualization: virtualization(),
            load: std::fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        }
    }

    /// One line for the header.
    pub fn line(&self) -> String {
        format!(
            "{} | {} ({} CPUs) | {}",
            self.kernel, self.cpu, self.cpus, self.virtualization
        )
    }
}

fn kernel() -> String {
    // SAFETY: utsname is plain bytes; uname fills it or fails.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown kernel".into();
    }
    let field = |f: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates every field within its array.
        unsafe { CStr::from_ptr(f.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    )
}

fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

#[cfg(target_arch = "x86_64")]
fn virtualization() -> String {
    use std::arch::x86_64::__cpuid;
    // CPUID.1:ECX bit 31 is set by hypervisors; leaf 0x4000_0000 names them.
    if __cpuid(1).ecx & (1 << 31) == 0 {
        return "bare metal (no hypervisor CPUID bit)".into();
    }
    let leaf = __cpuid(0x4000_0000);
    let bytes: Vec<u8> = [leaf.ebx, leaf.ecx, leaf.edx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    let vendor = String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .to_owned();
    let name = match vendor.as_str() {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU TCG",
        _ => vendor.as_str(),
    };
    format!("virtual machine: {name} guest")
}

#[cfg(not(target_arch = "x86_64"))]
fn virtualization() -> String {
    "virtualization unknown".into()
}
