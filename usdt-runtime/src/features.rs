//! What the running kernel can do for probes: the uprobe syscall (which site
//! layout it optimizes), kernel-maintained semaphores and the uprobe PMU.
//!
//! Detection never fails and never panics: a missing sysfs file or an
//! unexpected errno is an answer. It runs once per process; later calls read
//! the cached result.

use core::sync::atomic::{AtomicU64, Ordering};

/// The instructions at a probe site's Location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteLayout {
    /// `nop; nop5` (`90 0f 1f 44 00 00`): the facade's `nop5` feature, and
    /// C probes with a hand-written nop5. Linux 6.18 to 7.2 optimize a uprobe
    /// placed at Location + 1.
    NopNop5,
    /// `nop; nop10` (`90 66 2e 0f 1f 84 00 00 00 00 00`): the 7.3 kernel
    /// series optimizes a uprobe placed at Location + 1.
    NopNop10,
    /// `nop; nop5; nop10` (`90`, `0f 1f 44 00 00`, `66 2e 0f 1f 84 00 00 00 00
    /// 00`): this project's default. Both long nops, so that each kernel
    /// generation finds the one it optimizes, the nop5 at Location + 1 (Linux
    /// 6.18 to 7.2) or the nop10 at Location + 6 (the 7.3 series).
    NopNop5Nop10,
    /// A single `nop`, as sys/sdt.h emits: x86 `90`; aarch64 `d503201f`
    /// (`1f 20 03 d5`); riscv64 `addi x0, x0, 0` (`13 00 00 00`, the form
    /// this project's sites take) or the compressed `c.nop` (`01 00`, what
    /// sys/sdt.h's `nop` assembles to on `rv64gc`). The only site of aarch64
    /// and riscv64, which have no optimized uprobe.
    Nop,
    /// A `nop5` alone (`0f 1f 44 00 00`), as the kernel's BPF selftests
    /// write their sites: a uprobe goes at Location.
    Nop5,
    /// Anything else.
    Other,
    /// No site at all: the layout of a build for a target where probes
    /// compile to nothing but their arguments (Windows, macOS, wasm, 32-bit
    /// targets). Never found at a note's Location.
    NoSite,
}

impl SiteLayout {
    /// Whether a long nop follows the first nop, so that a uprobe may be
    /// placed at Location + 1.
    pub const fn has_long_nop(self) -> bool {
        matches!(
            self,
            SiteLayout::NopNop5 | SiteLayout::NopNop10 | SiteLayout::NopNop5Nop10
        )
    }

    /// Where past Location the long nop of `kind` (`NopNop5` or `NopNop10`)
    /// starts in a site of this layout, if it has one: 1 for `nop; nop5` and
    /// `nop; nop10`; 1 (the nop5) and 6 (the nop10) for `nop; nop5; nop10`.
    pub const fn long_nop_at(self, kind: SiteLayout) -> Option<u64> {
        match (self, kind) {
            (SiteLayout::NopNop5, SiteLayout::NopNop5)
            | (SiteLayout::NopNop10, SiteLayout::NopNop10)
            | (SiteLayout::NopNop5Nop10, SiteLayout::NopNop5) => Some(1),
            (SiteLayout::NopNop5Nop10, SiteLayout::NopNop10) => Some(6),
            _ => None,
        }
    }

    /// A short name: `nop;nop5`, `nop;nop10`, `nop;nop5;nop10`, `nop`, `nop5`,
    /// `other` or `none`.
    pub const fn name(self) -> &'static str {
        match self {
            SiteLayout::NopNop5 => "nop;nop5",
            SiteLayout::NopNop10 => "nop;nop10",
            SiteLayout::NopNop5Nop10 => "nop;nop5;nop10",
            SiteLayout::Nop => "nop",
            SiteLayout::Nop5 => "nop5",
            SiteLayout::Other => "other",
            SiteLayout::NoSite => "none",
        }
    }
}

impl core::fmt::Display for SiteLayout {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `syscall(336)` (the x86-64 uprobe syscall) says when called from
/// outside a uprobe trampoline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UprobeSyscall {
    /// `ENOSYS`, or not x86-64: no optimized uprobes (before Linux 6.18).
    Absent,
    /// `ENXIO`: uprobes on `nop5` are optimized (Linux 6.18 to 7.2).
    OptimizesNop5,
    /// `EPROTO`: uprobes on `nop10` are optimized (the 7.3 series).
    OptimizesNop10,
    /// Any other result, kept: the errno (0 if the call succeeded).
    Unknown(i32),
}

/// Whether a child forked from a process whose site the kernel optimized
/// survives its own first hit of that site.
///
/// The kernel rewrites an optimized long nop into a `call` to the
/// `[uprobes-trampoline]` page; a forked child inherits the `call` but (on
/// Linux 6.18) not the trampoline, and dies of SIGSEGV at its first hit.
/// Only a live test tells (a tracer runs it: usdt-trace's fork self-test);
/// this crate never runs it and leaves the verdict [`OptimizedFork::Untested`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OptimizedFork {
    /// Not tested (or the test could not tell): assume the child dies.
    #[default]
    Untested,
    /// The child of a process with an optimized site hit it and survived.
    ChildSurvives,
    /// The child of a process with an optimized site died at its first hit
    /// (unless the program carries this crate's fork guard,
    /// its `forkguard` module, which a tracer reads from the program's file).
    ChildDies,
}

/// The kernel's capabilities, as [`KernelFeatures::detect`] found them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelFeatures {
    /// The uprobe syscall and the site layout it optimizes.
    pub uprobe_syscall: UprobeSyscall,
    /// The uprobe PMU's type for `perf_event_open`
    /// (`/sys/bus/event_source/devices/uprobe/type`), if it has one.
    pub uprobe_pmu_type: Option<u32>,
    /// Whether the kernel maintains semaphores itself while a uprobe with
    /// `ref_ctr_offset` is attached (the PMU has `format/ref_ctr_offset`).
    pub kernel_semaphores: bool,
    /// The first bit of `attr.config` that holds `ref_ctr_offset`
    /// (`config:32-63` gives 32), when the format file says.
    pub ref_ctr_offset_shift: Option<u8>,
    /// Whether a forked child survives an optimized site: always
    /// [`OptimizedFork::Untested`] from [`KernelFeatures::detect`]; a tracer
    /// that ran the live test fills it in.
    pub optimized_fork: OptimizedFork,
}

const SYS_UPROBE: i64 = 336;
const PMU_TYPE: &[u8] = b"/sys/bus/event_source/devices/uprobe/type\0";
const PMU_REF_CTR: &[u8] = b"/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset\0";

/// The cache: 0 until detected, then the packed answer with `DETECTED` set.
static CACHE: AtomicU64 = AtomicU64::new(0);
const DETECTED: u64 = 1 << 63;

impl KernelFeatures {
    /// Detects the kernel's capabilities once and returns the cached answer
    /// afterwards.
    pub fn detect() -> KernelFeatures {
        let cached = CACHE.load(Ordering::Acquire);
        if cached & DETECTED != 0 {
            return Self::unpack(cached);
        }
        let features = Self::detect_uncached();
        // Threads racing here compute the same answer; any store wins.
        CACHE.store(features.pack(), Ordering::Release);
        features
    }

    /// Detects the kernel's capabilities now, without the cache.
    pub fn detect_uncached() -> KernelFeatures {
        let ref_ctr = read_small(PMU_REF_CTR);
        KernelFeatures {
            uprobe_syscall: uprobe_syscall(),
            uprobe_pmu_type: read_small(PMU_TYPE).and_then(|b| parse_u32(b.text())),
            kernel_semaphores: ref_ctr.is_some(),
            ref_ctr_offset_shift: ref_ctr.and_then(|b| parse_config_shift(b.text())),
            optimized_fork: OptimizedFork::Untested,
        }
    }

    /// The site layout whose long nop this kernel optimizes, if any.
    pub const fn optimized_layout(&self) -> Option<SiteLayout> {
        match self.uprobe_syscall {
            UprobeSyscall::OptimizesNop5 => Some(SiteLayout::NopNop5),
            UprobeSyscall::OptimizesNop10 => Some(SiteLayout::NopNop10),
            UprobeSyscall::Absent | UprobeSyscall::Unknown(_) => None,
        }
    }

    /// Whether this kernel optimizes a uprobe on a long nop of a site of
    /// this layout (the table in docs/site.md, "Where a tracer attaches"): for the
    /// layout it optimizes, and for `nop; nop5; nop10`, which carries both.
    pub fn optimizes(&self, layout: SiteLayout) -> bool {
        self.optimized_offset(layout).is_some()
    }

    /// Where past Location the long nop this kernel optimizes lies in a site
    /// of this layout: 1 or 6, or `None` where it optimizes none of them.
    pub const fn optimized_offset(&self, layout: SiteLayout) -> Option<u64> {
        match self.optimized_layout() {
            Some(kind) => layout.long_nop_at(kind),
            None => None,
        }
    }

    /// Whether a tracer attaches at Location + 1 (the long nop) on a site of
    /// this layout: only when this kernel optimizes exactly that layout and
    /// a forked child is known to survive an optimized site
    /// ([`OptimizedFork::ChildSurvives`]); otherwise at the nop, which is
    /// safe for every program. (A tracer also weighs the program's fork
    /// guard and the measured speed: usdt-trace's `auto_delta`.)
    pub fn attach_after_nop(&self, layout: SiteLayout) -> bool {
        self.optimizes(layout) && self.optimized_fork == OptimizedFork::ChildSurvives
    }

    /// One word, so that a reader sees a whole answer or none. Bits 0-31
    /// errno, 32-33 syscall kind, 34 PMU type known, 35 kernel semaphores,
    /// 36 shift known, 37-38 fork verdict, 40-47 shift, 48-62 PMU type
    /// (dynamic PMU types are small numbers), 63 `DETECTED`.
    fn pack(&self) -> u64 {
        let (kind, errno) = match self.uprobe_syscall {
            UprobeSyscall::Absent => (0, 0),
            UprobeSyscall::OptimizesNop5 => (1, 0),
            UprobeSyscall::OptimizesNop10 => (2, 0),
            UprobeSyscall::Unknown(e) => (3, e as u32),
        };
        // A type that does not fit in 15 bits is not cached as known.
        let pmu = self.uprobe_pmu_type.filter(|t| *t < 1 << 15);
        let mut word = DETECTED | errno as u64 | kind << 32;
        word |= (pmu.is_some() as u64) << 34 | (self.kernel_semaphores as u64) << 35;
        word |= (self.ref_ctr_offset_shift.is_some() as u64) << 36;
        let fork = match self.optimized_fork {
            OptimizedFork::Untested => 0,
            OptimizedFork::ChildSurvives => 1,
            OptimizedFork::ChildDies => 2,
        };
        word |= fork << 37;
        word |= (self.ref_ctr_offset_shift.unwrap_or(0) as u64) << 40;
        word | (pmu.unwrap_or(0) as u64) << 48
    }

    fn unpack(word: u64) -> KernelFeatures {
        let bit = |n: u32| word >> n & 1 == 1;
        KernelFeatures {
            uprobe_syscall: match word >> 32 & 3 {
                0 => UprobeSyscall::Absent,
                1 => UprobeSyscall::OptimizesNop5,
                2 => UprobeSyscall::OptimizesNop10,
                _ => UprobeSyscall::Unknown(word as u32 as i32),
            },
            uprobe_pmu_type: bit(34).then_some((word >> 48 & 0x7fff) as u32),
            kernel_semaphores: bit(35),
            ref_ctr_offset_shift: bit(36).then_some((word >> 40) as u8),
            optimized_fork: match word >> 37 & 3 {
                1 => OptimizedFork::ChildSurvives,
                2 => OptimizedFork::ChildDies,
                _ => OptimizedFork::Untested,
            },
        }
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn uprobe_syscall() -> UprobeSyscall {
    match uprobe_syscall_errno() {
        Some(libc::ENOSYS) => UprobeSyscall::Absent,
        Some(libc::ENXIO) => UprobeSyscall::OptimizesNop5,
        Some(libc::EPROTO) => UprobeSyscall::OptimizesNop10,
        Some(e) => UprobeSyscall::Unknown(e),
        None => UprobeSyscall::Unknown(0),
    }
}

/// The errno of `syscall(336)`, or `None` if it succeeded. Also read by the
/// fork guard, once per process.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn uprobe_syscall_errno() -> Option<i32> {
    // SAFETY: the uprobe syscall takes no arguments; called from outside a
    // uprobe trampoline it only returns an error, and kernels without it
    // return ENOSYS. Reading errno right after is the documented protocol.
    let (ret, errno) = unsafe {
        let ret = libc::syscall(SYS_UPROBE as libc::c_long);
        (ret, *libc::__errno_location())
    };
    (ret == -1).then_some(errno)
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn uprobe_syscall() -> UprobeSyscall {
    let _ = SYS_UPROBE;
    UprobeSyscall::Absent
}

/// The first bytes of a small file.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // never read elsewhere
struct Small {
    buf: [u8; 64],
    len: usize,
}

impl Small {
    fn text(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Reads up to 64 bytes of a file named by a NUL-terminated path; `None` if
/// it cannot be opened or read.
#[cfg(target_os = "linux")]
fn read_small(path: &[u8]) -> Option<Small> {
    if path.last() != Some(&0) {
        return None;
    }
    // SAFETY: `path` is NUL-terminated (checked above) and outlives the call.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut small = Small {
        buf: [0; 64],
        len: 0,
    };
    // SAFETY: `buf` is a writable buffer of the length passed; `fd` is open.
    let n = unsafe { libc::read(fd, small.buf.as_mut_ptr().cast(), small.buf.len()) };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    small.len = usize::try_from(n).ok()?;
    Some(small)
}

#[cfg(not(target_os = "linux"))]
fn read_small(_path: &[u8]) -> Option<Small> {
    None
}

/// A decimal number followed by optional whitespace.
fn parse_u32(text: &[u8]) -> Option<u32> {
    let digits = trim(text);
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + (d - b'0') as u32))
}

/// `config:32-63` gives 32; only `config` holds ref_ctr_offset.
fn parse_config_shift(text: &[u8]) -> Option<u8> {
    let range = trim(text).strip_prefix(b"config:")?;
    let end = range.iter().position(|b| *b == b'-').unwrap_or(range.len());
    parse_u32(&range[..end])
        .filter(|s| *s < 64)
        .map(|s| s as u8)
}

fn trim(text: &[u8]) -> &[u8] {
    let end = text
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_every_answer() {
        for uprobe_syscall in [
            UprobeSyscall::Absent,
            UprobeSyscall::OptimizesNop5,
            UprobeSyscall::OptimizesNop10,
            UprobeSyscall::Unknown(libc::EPERM),
            UprobeSyscall::Unknown(0),
        ] {
            for (pmu, shift, optimized_fork) in [
                (Some(8), Some(32), OptimizedFork::ChildDies),
                (None, None, OptimizedFork::Untested),
                (Some(0x7fff), Some(0), OptimizedFork::ChildSurvives),
            ] {
                let f = KernelFeatures {
                    uprobe_syscall,
                    uprobe_pmu_type: pmu,
                    kernel_semaphores: shift.is_some(),
                    ref_ctr_offset_shift: shift,
                    optimized_fork,
                };
                assert_eq!(KernelFeatures::unpack(f.pack()), f);
            }
        }
    }

    #[test]
    fn sysfs_text() {
        assert_eq!(parse_u32(b"8\n"), Some(8));
        assert_eq!(parse_u32(b""), None);
        assert_eq!(parse_u32(b"x"), None);
        assert_eq!(parse_config_shift(b"config:32-63\n"), Some(32));
        assert_eq!(parse_config_shift(b"config1:0-63\n"), None);
        assert_eq!(parse_config_shift(b"config:99-63\n"), None);
    }

    #[test]
    fn the_table() {
        let f = |s| KernelFeatures {
            uprobe_syscall: s,
            uprobe_pmu_type: None,
            kernel_semaphores: false,
            ref_ctr_offset_shift: None,
            optimized_fork: OptimizedFork::ChildSurvives,
        };
        // Where a forked child would die (or nobody tested), always the nop.
        for fork in [OptimizedFork::Untested, OptimizedFork::ChildDies] {
            for s in [UprobeSyscall::OptimizesNop5, UprobeSyscall::OptimizesNop10] {
                let k = KernelFeatures {
                    optimized_fork: fork,
                    ..f(s)
                };
                for layout in [SiteLayout::NopNop5, SiteLayout::NopNop10] {
                    assert!(!k.attach_after_nop(layout));
                    assert_eq!(k.optimizes(layout), f(s).attach_after_nop(layout));
                }
            }
        }
        let nop5 = f(UprobeSyscall::OptimizesNop5);
        assert!(nop5.attach_after_nop(SiteLayout::NopNop5));
        assert!(!nop5.attach_after_nop(SiteLayout::NopNop10));
        let nop10 = f(UprobeSyscall::OptimizesNop10);
        assert!(!nop10.attach_after_nop(SiteLayout::NopNop5));
        assert!(nop10.attach_after_nop(SiteLayout::NopNop10));
        // Both long nops: each kernel finds its own.
        assert_eq!(nop5.optimized_offset(SiteLayout::NopNop5Nop10), Some(1));
        assert_eq!(nop10.optimized_offset(SiteLayout::NopNop5Nop10), Some(6));
        assert_eq!(nop10.optimized_offset(SiteLayout::NopNop5), None);
        assert_eq!(
            f(UprobeSyscall::Absent).optimized_offset(SiteLayout::NopNop5Nop10),
            None
        );
        for layout in [SiteLayout::Nop, SiteLayout::Other, SiteLayout::NopNop5] {
            assert!(!f(UprobeSyscall::Absent).attach_after_nop(layout));
            assert!(!f(UprobeSyscall::Unknown(1)).attach_after_nop(layout));
        }
    }

    #[test]
    fn detection_is_cached_and_stable() {
        let a = KernelFeatures::detect();
        assert_eq!(KernelFeatures::detect(), a);
        assert_eq!(KernelFeatures::detect_uncached(), a);
        assert_eq!(a.optimized_fork, OptimizedFork::Untested);
    }
}
