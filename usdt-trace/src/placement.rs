//! Where on a site a uprobe goes, and for whom: [`AttachPoint`] and
//! [`Target`], the Auto policy and its inputs ([`auto_delta`],
//! [`AutoInputs`], [`Speed`]), and the bytes past Location each point
//! takes ([`attach_delta`], and `tracer_delta` for a tracer's own attach).
//!
//! The policy is a pure function of the kernel facts ([`crate::facts`]),
//! table-tested below; what it reads of them (the fork and speed
//! self-tests, the file's fork guard) is gathered here too, so that the
//! engines, which build on this module, ask one place where a site's
//! uprobe goes (`Uprobe::at`).

use std::ffi::CStr;
use std::path::Path;

use crate::elf::note::Site;
use crate::elf::sites::SiteCheck;
use crate::error::{AttachCause, AttachError, Error};
use crate::facts::{kernel_features, speed_test, tracer_features, Caps, FeatureReport, SpeedTest};
use crate::sys::perf::Uprobe;
use crate::{KernelFeatures, Machine, OptimizedFork, SiteLayout, UprobeSyscall};

/// Whether a kernel may optimize a uprobe on `machine`'s sites: x86-64's
/// only (the uprobe syscall and its trampoline exist there alone, from
/// Linux 6.18). On aarch64 and riscv64 every uprobe traps at the `nop`,
/// which is the site's only instruction: Auto attaches there.
pub fn optimizable_on(machine: Machine) -> bool {
    machine == Machine::X86_64
}

/// `machine`'s probe site in words, for `usdt features` and `usdt list`.
pub fn site_words(machine: Machine) -> &'static str {
    match machine {
        Machine::X86_64 => {
            "nop;nop5;nop10 (the nop5 or nop10 feature: nop;nop5 or nop;nop10); from Linux 6.18 the kernel may optimize a uprobe on the long nop"
        }
        Machine::Aarch64 => {
            "nop (1f 20 03 d5), as sys/sdt.h's; no kernel optimizes an aarch64 uprobe: every tracer attaches at the nop"
        }
        Machine::Riscv64 => {
            "nop (13 00 00 00), as sys/sdt.h's; no kernel optimizes a riscv64 uprobe: every tracer attaches at the nop"
        }
    }
}

/// Where on a site the uprobe goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttachPoint {
    /// Follow the table in docs/site.md, "Where a tracer attaches": Location + 1 when
    /// this kernel optimizes the site's long nop and a child forked after an
    /// optimized hit survives (the fork self-test, [`fork_test`](crate::fork_test)),
    /// or the program carries usdt-runtime's fork guard (its marker,
    /// [`read_fork_guard`](crate::read_fork_guard)), and the speed self-test
    /// did not find the trap faster ([`auto_delta`]); otherwise Location.
    #[default]
    Auto,
    /// Always Location (the first `nop`), as tools that do not know nop5 do.
    Nop,
    /// Always Location + 1 (the long nop); refused on a site without one.
    /// Where the kernel optimizes the site and the fork self-test failed, a
    /// child the traced program forks after a hit dies at its own first hit.
    Next,
}

impl std::str::FromStr for AttachPoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "auto" => Ok(AttachPoint::Auto),
            "nop" => Ok(AttachPoint::Nop),
            "next" => Ok(AttachPoint::Next),
            _ => Err(Error::BadAttachPoint { value: s.into() }),
        }
    }
}

/// Whose hits a uprobe counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// One process (and, with [`PerfCounter::inherit`](crate::PerfCounter::inherit), the children it starts
    /// after attaching).
    Pid(u32),
    /// Every process that runs the file, one event per CPU.
    AllProcesses,
}

impl Target {
    /// The pid `perf_event_open` takes: the process, or -1 for every one.
    pub(crate) fn pid(self) -> libc::pid_t {
        match self {
            Target::Pid(pid) => pid as libc::pid_t,
            Target::AllProcesses => -1,
        }
    }
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

impl Speed {
    /// The verdict of a speed self-test ([`speed_test`](crate::speed_test)).
    fn of(test: &Result<SpeedTest, String>) -> Speed {
        match test {
            Ok(s) if s.optimized_faster() => Speed::OptimizedFaster,
            Ok(_) => Speed::TrapFaster,
            Err(_) => Speed::Unmeasured,
        }
    }
}

/// Everything [`AttachPoint::Auto`] decides from.
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

/// Where [`AttachPoint::Auto`] puts the uprobe on a site of `layout`, as
/// bytes past Location: the long nop the kernel optimizes (1, or 6 for the
/// nop10 of `nop; nop5; nop10`) only where
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

/// Where [`AttachPoint::Auto`] attaches a site of `layout` for a tracer on
/// this machine: [`auto_delta`] with `features` (a tracer's, with the fork
/// verdict: [`tracer_features`](crate::tracer_features)), the fork guard as
/// given, and the speed self-test, run only where the other inputs would
/// take the long nop.
pub fn auto_delta_here(layout: SiteLayout, features: &KernelFeatures, guarded: bool) -> u64 {
    let mut inputs = AutoInputs {
        guarded,
        ..AutoInputs::of(features)
    };
    if auto_delta(layout, &inputs) == 0 {
        return 0;
    }
    inputs.speed = Speed::of(speed_test());
    auto_delta(layout, &inputs)
}

impl Caps {
    /// What [`auto_delta`] decides from, for a program that carries a fork
    /// guard (`guarded`) or not.
    pub fn auto_inputs(&self, guarded: bool) -> AutoInputs {
        AutoInputs {
            uprobe_syscall: self.features.uprobe_syscall,
            fork: self.features.optimized_fork,
            guarded,
            speed: Speed::of(self.speed),
        }
    }

    /// Whether the fork guard changes the fork verdict here: the kernel
    /// optimizes a layout but does not keep a forked child alive, and a
    /// guarded program does ([`fork_safe`]).
    pub fn guard_decides(&self) -> bool {
        let fork = self.features.optimized_fork;
        self.features.optimized_layout().is_some()
            && fork_safe(fork, true)
            && !fork_safe(fork, false)
    }

    /// The whole report (`usdt features --json`): these facts, and where
    /// [`AttachPoint::Auto`] attaches each layout for a program without
    /// the fork guard and with it.
    pub fn report(&self) -> FeatureReport {
        FeatureReport::new(self, self.guard_decides(), |layout, guarded| {
            auto_delta(layout, &self.auto_inputs(guarded))
        })
    }
}

/// How far past Location the uprobe goes for `point` on this kernel: 0, 1,
/// or 6 (the nop10 of a `nop; nop5; nop10` site).
///
/// [`AttachPoint::Auto`] follows [`auto_delta`] with what `features` says
/// (the errno and the fork verdict), with no speed measured and no fork
/// guard; a tracer's own attach also weighs the program's fork guard and
/// the speed self-test ([`caps`](crate::caps)).
pub fn attach_delta(
    site: &Site,
    point: AttachPoint,
    features: &KernelFeatures,
) -> Result<u64, Error> {
    match point {
        AttachPoint::Nop => Ok(0),
        AttachPoint::Auto => Ok(auto_delta(site.layout, &AutoInputs::of(features))),
        // Kernels before the 7.3 series refuse a uprobe on nop10 (its CS
        // prefix) when they install it, which for a program not yet started
        // is silent: say so now.
        AttachPoint::Next
            if site.layout == SiteLayout::NopNop10
                && features.uprobe_syscall != UprobeSyscall::OptimizesNop10 =>
        {
            Err(refused(site, AttachCause::Nop10Refused))
        }
        // Both long nops: the one this kernel optimizes, else the nop5
        // (emulated since Linux 6.16).
        AttachPoint::Next if site.layout == SiteLayout::NopNop5Nop10 => {
            Ok(features.optimized_offset(site.layout).unwrap_or(1))
        }
        AttachPoint::Next if site.layout.has_long_nop() => Ok(1),
        AttachPoint::Next => Err(refused(
            site,
            AttachCause::NoLongNop {
                layout: site.layout,
            },
        )),
    }
}

/// An attach error of `site` before any file is opened: the path is
/// unknown here ([`Uprobe::at`] names it).
fn refused(site: &Site, cause: AttachCause) -> Error {
    AttachError::of(Path::new(""), site.probe(), site.location, cause)
}

/// The features a tracer attaching at `point` uses: the fork verdict is
/// needed (and the self-test run) only for [`AttachPoint::Auto`].
pub(crate) fn features_for(point: AttachPoint) -> KernelFeatures {
    match point {
        AttachPoint::Auto => tracer_features(),
        _ => kernel_features(),
    }
}

/// [`attach_delta`] as a tracer attaches `site` of the file at `path`: for
/// [`AttachPoint::Auto`], the fork guard's marker in that file (read only
/// where the kernel optimizes the site) and, where the kernel's table, the
/// fork verdict and the guard would take the long nop, the speed self-test
/// (run only then) decide too.
///
/// The guard counts only for one process ([`Target::Pid`]): it keeps a
/// forked child alive by making its optimized sites return at once, so the
/// child's hits there reach no uprobe, which a tracer of every process
/// ([`Target::AllProcesses`]) would miss. For that one Auto stays at the nop
/// unless the kernel itself keeps the child's trampoline.
pub(crate) fn tracer_delta(
    site: &Site,
    point: AttachPoint,
    features: &KernelFeatures,
    path: &Path,
    target: Target,
) -> Result<u64, Error> {
    if point != AttachPoint::Auto {
        return attach_delta(site, point, features);
    }
    let guarded = matches!(target, Target::Pid(_))
        && features.optimizes(site.layout)
        && crate::elf::forkguard::fork_guarded(path);
    Ok(auto_delta_here(site.layout, features, guarded))
}

impl<'a> Uprobe<'a> {
    /// The uprobe for `site` of the file at `path` (`c_path` as the kernel
    /// takes it), at `point` on this kernel, with the site's semaphore: a
    /// site its check refused is refused here, for every engine.
    pub(crate) fn at(
        site: &Site,
        point: AttachPoint,
        features: &KernelFeatures,
        path: &Path,
        c_path: &'a CStr,
        target: Target,
    ) -> Result<Uprobe<'a>, Error> {
        if let SiteCheck::Refused(why) = &site.check {
            return Err(AttachError::of(
                path,
                site.probe(),
                site.location,
                AttachCause::SiteRefused(why.clone()),
            ));
        }
        let delta = tracer_delta(site, point, features, path, target).map_err(|e| match e {
            Error::Attach(mut e) => {
                e.path = path.into();
                Error::Attach(e)
            }
            e => e,
        })?;
        let location = site.location_offset.ok_or_else(|| {
            AttachError::of(path, site.probe(), site.location, AttachCause::NotLoaded)
        })?;
        Ok(Uprobe {
            path: c_path,
            offset: location + delta,
            ref_ctr_offset: site.semaphore_offset,
        })
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

    fn site(layout: SiteLayout) -> Site {
        Site::at_0x1000(layout)
    }

    fn kernel(uprobe_syscall: UprobeSyscall) -> KernelFeatures {
        KernelFeatures {
            uprobe_syscall,
            uprobe_pmu_type: Some(8),
            kernel_semaphores: true,
            ref_ctr_offset_shift: Some(32),
            optimized_fork: OptimizedFork::ChildSurvives,
        }
    }

    #[test]
    fn attach_points_follow_the_design_table() {
        use AttachPoint::{Auto, Next};
        use SiteLayout::{Nop, NopNop10, NopNop5, Other};
        let delta = |p, l, k| attach_delta(&site(l), p, &kernel(k)).ok();
        for k in [UprobeSyscall::Absent, UprobeSyscall::Unknown(1)] {
            assert_eq!(delta(Auto, NopNop5, k), Some(0));
            assert_eq!(delta(Auto, NopNop10, k), Some(0));
        }
        assert_eq!(delta(Auto, NopNop5, UprobeSyscall::OptimizesNop5), Some(1));
        assert_eq!(delta(Auto, NopNop10, UprobeSyscall::OptimizesNop5), Some(0));
        assert_eq!(delta(Auto, NopNop5, UprobeSyscall::OptimizesNop10), Some(0));
        assert_eq!(
            delta(Auto, NopNop10, UprobeSyscall::OptimizesNop10),
            Some(1)
        );
        assert_eq!(
            delta(AttachPoint::Nop, NopNop5, UprobeSyscall::OptimizesNop5),
            Some(0)
        );
        assert_eq!(delta(Next, NopNop5, UprobeSyscall::Absent), Some(1));
        assert_eq!(
            delta(Next, NopNop10, UprobeSyscall::OptimizesNop10),
            Some(1)
        );
        assert_eq!(delta(Next, NopNop10, UprobeSyscall::OptimizesNop5), None);
        assert_eq!(delta(Next, Nop, UprobeSyscall::OptimizesNop5), None);
        assert_eq!(delta(Next, Other, UprobeSyscall::OptimizesNop5), None);
        assert_eq!(delta(Auto, Other, UprobeSyscall::OptimizesNop5), Some(0));
        // Both long nops: each kernel's own.
        use SiteLayout::NopNop5Nop10;
        assert_eq!(
            delta(Auto, NopNop5Nop10, UprobeSyscall::OptimizesNop5),
            Some(1)
        );
        assert_eq!(
            delta(Auto, NopNop5Nop10, UprobeSyscall::OptimizesNop10),
            Some(6)
        );
        assert_eq!(delta(Auto, NopNop5Nop10, UprobeSyscall::Absent), Some(0));
        assert_eq!(
            delta(Next, NopNop5Nop10, UprobeSyscall::OptimizesNop10),
            Some(6)
        );
        assert_eq!(
            delta(Next, NopNop5Nop10, UprobeSyscall::OptimizesNop5),
            Some(1)
        );
        assert_eq!(delta(Next, NopNop5Nop10, UprobeSyscall::Absent), Some(1));
        // Where a forked child dies, or nobody knows: the nop.
        for fork in [OptimizedFork::ChildDies, OptimizedFork::Untested] {
            let k = KernelFeatures {
                optimized_fork: fork,
                ..kernel(UprobeSyscall::OptimizesNop5)
            };
            assert_eq!(attach_delta(&site(NopNop5), Auto, &k).ok(), Some(0));
            assert_eq!(attach_delta(&site(NopNop5), Next, &k).ok(), Some(1));
        }
    }

    #[test]
    fn attach_point_names() {
        assert_eq!("next".parse::<AttachPoint>().unwrap(), AttachPoint::Next);
        assert!("Next".parse::<AttachPoint>().is_err());
    }
}
