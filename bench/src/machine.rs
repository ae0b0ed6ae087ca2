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

/// CPU time spent by the whole machine and by this process (with its waited
/// children: the peers helper, valgrind), to tell afterwards how much other
/// work shared the machine with the bench.
#[derive(Clone, Copy, Debug)]
pub struct CpuClock {
    busy_ticks: u64,
    own_ticks: u64,
    at: std::time::Instant,
}

impl CpuClock {
    /// Reads the clocks now.
    pub fn now() -> CpuClock {
        // `cpu  user nice system idle iowait irq softirq steal ...`: all but
        // idle and iowait is busy; `steal` counts the host's other guests.
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let busy_ticks = cpu
            .iter()
            .take(8)
            .enumerate()
            .filter(|(i, _)| *i != 3 && *i != 4)
            .map(|(_, v)| v)
            .sum();
        // /proc/self/stat fields 14-17: utime stime cutime cstime, after the
        // parenthesized command name.
        let me = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let own_ticks = me
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .skip(11)
                    .take(4)
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum()
            })
            .unwrap_or(0);
        CpuClock {
            busy_ticks,
            own_ticks,
            at: std::time::Instant::now(),
        }
    }

    /// CPUs' worth of work that was not the bench's, on average since `self`.
    pub fn others_since(&self) -> f64 {
        let now = CpuClock::now();
        // SAFETY: sysconf has no memory arguments.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let others = now
            .busy_ticks
            .saturating_sub(self.busy_ticks)
            .saturating_sub(now.own_ticks - self.own_ticks);
        others as f64 / hz / now.at.duration_since(self.at).as_secs_f64().max(1e-3)
    }
}
