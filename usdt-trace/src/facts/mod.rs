//! What this kernel and machine can do for probes, found once per process:
//! the one home of every kernel fact. `usdt features`, the placement of
//! uprobes (`placement.rs`, which decides from these), the engines and the
//! tests read them here; nothing here imports from the placement or the
//! engines.
//!
//! | fact | found by |
//! |---|---|
//! | kernel release, machine | `uname` |
//! | uprobe syscall, uprobe PMU, kernel semaphores | [`KernelFeatures::detect`] (usdt-runtime's small detection, which every traced program links) |
//! | BPF uprobe_multi links | [`uprobe_multi_support`] (`uprobe_multi.rs`) |
//! | tracefs | the directory with `uprobe_events` |
//! | fork after an optimized hit | the fork self-test ([`fork_test`], `fork.rs`) |
//! | trap against optimized path | the speed self-test ([`speed_test`], `speed.rs`) |
//!
//! The self-tests run only where the kernel optimizes a layout, once per
//! boot: their verdicts are kept in one cache (`cache.rs`) under
//! `/run/usdt/`. They open their uprobes through `sys/` (`scratch.rs`
//! holds what both share). [`Caps`] gathers every fact; [`FeatureReport`]
//! is the whole report as one serde type, which `usdt features --json`
//! writes and the kernel matrix reads (`report.rs`).

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::KernelFeatures;

mod cache;
// The fork and speed self-tests run on x86-64 only, the one machine whose
// kernels optimize a uprobe: elsewhere their verdicts are fixed and the
// machinery they share goes unused.
#[cfg_attr(not(all(target_os = "linux", target_arch = "x86_64")), allow(dead_code, unused_imports))]
pub(crate) mod fork;
mod report;
#[cfg_attr(not(all(target_os = "linux", target_arch = "x86_64")), allow(dead_code, unused_imports))]
mod scratch;
#[cfg_attr(not(all(target_os = "linux", target_arch = "x86_64")), allow(dead_code, unused_imports))]
pub(crate) mod speed;
pub(crate) mod uprobe_multi;

pub use fork::{fork_test, tracer_features, ForkTest, FORK_TEST_CACHE};
pub use report::{AutoAt, AutoAttach, FeatureReport, ForkVerdict, OptimizedNop, SpeedRates};
pub use speed::{speed_test, SpeedTest, SPEED_TEST_CACHE};
pub use uprobe_multi::{uprobe_multi_support, UprobeMulti};

/// The machine's capabilities, as [`caps`] found them.
///
/// Where [`AttachPoint::Auto`](crate::AttachPoint::Auto) attaches from
/// them is the placement's to say: [`Caps::auto_inputs`] and
/// [`Caps::report`] are defined there.
#[derive(Debug)]
pub struct Caps {
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m`.
    pub machine: String,
    /// The kernel's features, with the fork self-test's verdict filled in.
    pub features: KernelFeatures,
    /// What BPF uprobe_multi links can do.
    pub uprobe_multi: UprobeMulti,
    /// The tracefs directory with `uprobe_events`, if any.
    pub tracefs: Option<PathBuf>,
    /// The fork self-test.
    pub fork: &'static ForkTest,
    /// The speed self-test, or why there is none.
    pub speed: &'static Result<SpeedTest, String>,
}

/// The capabilities, found at the first call and kept for the process.
pub fn caps() -> &'static Caps {
    static CAPS: OnceLock<Caps> = OnceLock::new();
    CAPS.get_or_init(|| {
        let (kernel, machine) = uname();
        Caps {
            kernel,
            machine,
            features: tracer_features(),
            uprobe_multi: uprobe_multi_support(),
            tracefs: tracefs_root(),
            fork: fork_test(),
            speed: speed_test(),
        }
    })
}

/// What usdt-runtime's detection says of this kernel (asked once per
/// process), without the fork self-test's verdict, which
/// [`tracer_features`] adds: the one place this crate asks it.
pub(crate) fn kernel_features() -> KernelFeatures {
    KernelFeatures::detect()
}

/// The tracefs directory with `uprobe_events`, if any.
pub fn tracefs_root() -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("uprobe_events").exists())
}

fn uname() -> (String, String) {
    // SAFETY: an all-zero utsname is a valid buffer for uname to fill.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (String::new(), String::new());
    }
    let text = |field: &[libc::c_char]| {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| c.to_ne_bytes()[0]) // c_char is i8 or u8, by machine
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (text(&u.release), text(&u.machine))
}
