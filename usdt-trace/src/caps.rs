//! What this machine can do for probes, found once per process: the one
//! capabilities probe that `usdt features`, the attach code and the tests
//! read, and the one function that decides where [`AttachPoint::Auto`]
//! attaches.
//!
//! | capability | found by |
//! |---|---|
//! | kernel release, machine | `uname` |
//! | uprobe syscall, uprobe PMU, kernel semaphores | [`KernelFeatures::detect`] (usdt-runtime's small detection) |
//! | BPF uprobe_multi links | [`bpf::uprobe_multi_support`](crate::bpf::uprobe_multi_support) |
//! | tracefs | the directory with `uprobe_events` |
//! | fork after an optimized hit | the fork self-test ([`fork_test`]) |
//! | trap against optimized path | the speed self-test ([`speed_test`]) |
//!
//! The self-tests run only where the kernel optimizes a layout, once per
//! boot (their verdicts are cached under `/run/usdt/`).
//!
//! [`AttachPoint::Auto`]: crate::AttachPoint::Auto

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::bpf::UprobeMulti;
use crate::{
    fork_test, speed_test, ForkTest, KernelFeatures, OptimizedFork, SiteLayout, SpeedTest,
    UprobeSyscall,
};

/// The machine's capabilities, as [`caps`] found them.
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
        let fork = fork_test();
        Caps {
            kernel,
            machine,
            features: KernelFeatures {
                optimized_fork: fork.verdict,
                ..KernelFeatures::detect()
            },
            uprobe_multi: crate::bpf::uprobe_multi_support(),
            tracefs: tracefs_root(),
            fork,
            speed: speed_test(),
        }
    })
}

impl Caps {
    /// What [`auto_delta`] decides from, for a program that carries a fork
    /// guard (`guarded`) or not.
    pub fn auto_inputs(&self, guarded: bool) -> AutoInputs {
        AutoInputs {
            uprobe_syscall: self.features.uprobe_syscall,
            fork: self.features.optimized_fork,
            guarded,
            speed: match self.speed {
                Ok(s) if s.optimized_faster() => Speed::OptimizedFaster,
                Ok(_) => Speed::TrapFaster,
                Err(_) => Speed::Unmeasured,
            },
        }
    }
}

/// Where [`AttachPoint::Auto`](crate::AttachPoint::Auto) attaches a site of
/// `layout` for a tracer on this machine: [`auto_delta`] with `features`
/// (a tracer's, with the fork verdict: [`tracer_features`](crate::tracer_features)),
/// the fork guard as given, and the speed self-test, run only where the
/// other inputs would take the long nop.
pub fn auto_delta_here(layout: SiteLayout, features: &KernelFeatures, guarded: bool) -> u64 {
    let mut inputs = AutoInputs {
        guarded,
        ..AutoInputs::of(features)
    };
    if auto_delta(layout, &inputs) == 0 {
        return 0;
    }
    inputs.speed = match speed_test() {
        Ok(s) if s.optimized_faster() => Speed::OptimizedFaster,
        Ok(_) => Speed::TrapFaster,
        Err(_) => Speed::Unmeasured,
    };
    auto_delta(layout, &inputs)
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
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (text(&u.release), text(&u.machine))
}

/// How the optimized path compared with the trap on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Speed {
    /// Not measured (no speed test, or it could not run): the kernel's
    /// table is followed, as the optimized path is the kernel's fast path.
    Unmeasured,
    /// The optimized path measured faster.
    OptimizedFaster,
    /// The trap measured as fast or faster.
    TrapFaster,
}

/// Everything [`AttachPoint::Auto`](crate::AttachPoint::Auto) decides from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AutoInputs {
    /// Which long nop the kernel optimizes (its errno).
    pub uprobe_syscall: UprobeSyscall,
    /// The fork self-test's verdict.
    pub fork: OptimizedFork,
    /// Whether the traced program keeps a forked child alive at an
    /// optimized site by itself (a fork guard).
    pub guarded: bool,
    /// The speed self-test's verdict.
    pub speed: Speed,
}

impl AutoInputs {
    /// The inputs a [`KernelFeatures`] alone gives: no guard, speed not
    /// measured.
    pub fn of(features: &KernelFeatures) -> AutoInputs {
        AutoInputs {
            uprobe_syscall: features.uprobe_syscall,
            fork: features.optimized_fork,
            guarded: false,
            speed: Speed::Unmeasured,
        }
    }
}

/// Whether a child that a program forks after an optimized hit survives:
/// the kernel keeps its trampoline (the fork self-test's `fork`), or the
/// program carries usdt-runtime's fork guard (`guarded`, its marker:
/// [`read_fork_guard`](crate::read_fork_guard)), which maps a page of `ret`
/// there in the child.
pub fn fork_safe(fork: OptimizedFork, guarded: bool) -> bool {
    fork == OptimizedFork::ChildSurvives || guarded
}

/// Where [`AttachPoint::Auto`](crate::AttachPoint::Auto) puts the uprobe on
/// a site of `layout`, as bytes past Location: the long nop the kernel
/// optimizes (1, or 6 for the nop10 of `nop; nop5; nop10`) only where
///
/// 1. the kernel optimizes a long nop this layout has,
/// 2. a child forked after an optimized hit survives (the kernel copies the
///    trampoline, or the program guards its children), and
/// 3. the optimized path was not measured slower than the trap here;
///
/// otherwise 0, the nop, which is safe for every program on every kernel.
pub fn auto_delta(layout: SiteLayout, inputs: &AutoInputs) -> u64 {
    let kernel = KernelFeatures {
        uprobe_syscall: inputs.uprobe_syscall,
        uprobe_pmu_type: None,
        kernel_semaphores: false,
        ref_ctr_offset_shift: None,
        optimized_fork: inputs.fork,
    };
    let Some(offset) = kernel.optimized_offset(layout) else {
        return 0;
    };
    let faster = inputs.speed != Speed::TrapFaster;
    if fork_safe(inputs.fork, inputs.guarded) && faster {
        offset
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every errno x layout x fork verdict x guard x speed.
    #[test]
    fn the_decision_table() {
        use SiteLayout::*;
        let errnos = [
            UprobeSyscall::Absent,
            UprobeSyscall::OptimizesNop5,
            UprobeSyscall::OptimizesNop10,
            UprobeSyscall::Unknown(libc::EPERM),
        ];
        let layouts = [NopNop5, NopNop10, NopNop5Nop10, Nop, Nop5, Other];
        let forks = [
            OptimizedFork::Untested,
            OptimizedFork::ChildDies,
            OptimizedFork::ChildSurvives,
        ];
        let speeds = [Speed::Unmeasured, Speed::OptimizedFaster, Speed::TrapFaster];
        let mut taken = 0;
        for uprobe_syscall in errnos {
            for layout in layouts {
                for fork in forks {
                    for guarded in [false, true] {
                        for speed in speeds {
                            let inputs = AutoInputs {
                                uprobe_syscall,
                                fork,
                                guarded,
                                speed,
                            };
                            let got = auto_delta(layout, &inputs);
                            let offset = match (uprobe_syscall, layout) {
                                (UprobeSyscall::OptimizesNop5, NopNop5 | NopNop5Nop10) => 1,
                                (UprobeSyscall::OptimizesNop10, NopNop10) => 1,
                                (UprobeSyscall::OptimizesNop10, NopNop5Nop10) => 6,
                                _ => 0,
                            };
                            let safe = fork == OptimizedFork::ChildSurvives || guarded;
                            let want = if safe && speed != Speed::TrapFaster {
                                offset
                            } else {
                                0
                            };
                            assert_eq!(got, want, "{layout} {inputs:?}");
                            taken += (got != 0) as usize;
                        }
                    }
                }
            }
        }
        // 4 (errno, layout) pairs optimize, each taken for 4 fork/guard
        // combinations that are safe and 2 speeds that allow it.
        assert_eq!(taken, 4 * 4 * 2);
    }

    /// The fork guard makes a nop5 kernel fork-safe for a guarded program:
    /// where the child dies (or nobody knows), `Auto` takes the nop5 of a
    /// guarded program's site where the speed allows, and the nop for an
    /// unguarded one; where the kernel keeps the child alive itself, the
    /// guard changes nothing.
    #[test]
    fn the_fork_guard_makes_nop5_kernels_safe_for_guarded_programs() {
        use SiteLayout::*;
        for fork in [OptimizedFork::ChildDies, OptimizedFork::Untested] {
            assert!(!fork_safe(fork, false));
            assert!(fork_safe(fork, true));
            let nop5 = |guarded, speed| AutoInputs {
                uprobe_syscall: UprobeSyscall::OptimizesNop5,
                fork,
                guarded,
                speed,
            };
            for speed in [Speed::Unmeasured, Speed::OptimizedFaster] {
                assert_eq!(auto_delta(NopNop5, &nop5(false, speed)), 0);
                assert_eq!(auto_delta(NopNop5, &nop5(true, speed)), 1);
                assert_eq!(auto_delta(NopNop5Nop10, &nop5(true, speed)), 1);
                assert_eq!(auto_delta(NopNop10, &nop5(true, speed)), 0);
            }
            assert_eq!(auto_delta(NopNop5, &nop5(true, Speed::TrapFaster)), 0);
            // Nothing optimized: the nop, guard or not.
            for other in [UprobeSyscall::Absent, UprobeSyscall::Unknown(1)] {
                let k = AutoInputs {
                    uprobe_syscall: other,
                    ..nop5(true, Speed::OptimizedFaster)
                };
                for layout in [NopNop5, NopNop10, NopNop5Nop10] {
                    assert_eq!(auto_delta(layout, &k), 0, "{layout} {k:?}");
                }
            }
        }
        // Where the kernel keeps the child alive itself, its verdict stays.
        assert!(fork_safe(OptimizedFork::ChildSurvives, false));
        for uprobe_syscall in [UprobeSyscall::OptimizesNop5, UprobeSyscall::OptimizesNop10] {
            for layout in [NopNop5, NopNop10, NopNop5Nop10] {
                let fixed = AutoInputs {
                    uprobe_syscall,
                    fork: OptimizedFork::ChildSurvives,
                    guarded: false,
                    speed: Speed::OptimizedFaster,
                };
                let guarded = AutoInputs {
                    guarded: true,
                    ..fixed
                };
                assert_eq!(auto_delta(layout, &guarded), auto_delta(layout, &fixed));
            }
        }
    }

    #[test]
    fn this_hosts_numbers_keep_the_nop() {
        // 6.18.44 on the project's AMD host: ENXIO, the child dies, and the
        // optimized path measured 1.32 against the trap's 1.63 M/s.
        let host = AutoInputs {
            uprobe_syscall: UprobeSyscall::OptimizesNop5,
            fork: OptimizedFork::ChildDies,
            guarded: false,
            speed: Speed::TrapFaster,
        };
        assert_eq!(auto_delta(SiteLayout::NopNop5, &host), 0);
        // Even for a guarded program: the trap is faster here.
        let guarded = AutoInputs {
            guarded: true,
            ..host
        };
        assert_eq!(auto_delta(SiteLayout::NopNop5, &guarded), 0);
        // On 7.3 (EPROTO, fork fixed) with a faster optimized path: +6 on
        // the two-nop site.
        let fixed = AutoInputs {
            uprobe_syscall: UprobeSyscall::OptimizesNop10,
            fork: OptimizedFork::ChildSurvives,
            guarded: false,
            speed: Speed::OptimizedFaster,
        };
        assert_eq!(auto_delta(SiteLayout::NopNop5Nop10, &fixed), 6);
        assert_eq!(auto_delta(SiteLayout::NopNop5, &fixed), 0);
    }
}
