//! The whole report of what this kernel and machine can do, and where
//! [`AttachPoint::Auto`](crate::AttachPoint::Auto) attaches on them, as one
//! serde type: `usdt features --json` writes it (one JSON object, its keys
//! in usdt-trace's README), and the kernel matrix reads it back through
//! the same type.

use serde::{Deserialize, Serialize};

use super::Caps;
use crate::{OptimizedFork, SiteLayout, UprobeSyscall};

/// What `usdt features --json` prints: the kernel facts of [`Caps`] and
/// where Auto attaches each layout, made by
/// [`Caps::report`](crate::Caps::report).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureReport {
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m`.
    pub machine: String,
    /// What `syscall(336)` said, as its errno's name: `ENOSYS` (no uprobe
    /// syscall), `ENXIO` (it optimizes nop5), `EPROTO` (nop10), another
    /// errno's name, or `errno N`.
    pub uprobe_syscall: String,
    /// The long nop this kernel optimizes, if any.
    pub optimizes: Option<OptimizedNop>,
    /// Whether this kernel has BPF uprobe_multi links.
    pub uprobe_multi: bool,
    /// Whether it has the uprobe PMU for `perf_event_open`.
    pub uprobe_pmu: bool,
    /// Whether it maintains semaphores (`ref_ctr_offset`).
    pub kernel_semaphores: bool,
    /// Whether a tracefs directory with `uprobe_events` is mounted.
    pub tracefs: bool,
    /// The fork self-test's verdict: [`ForkVerdict::Safe`],
    /// [`ForkVerdict::ChildDies`] or [`ForkVerdict::Untested`].
    pub fork_test: ForkVerdict,
    /// Why, in words.
    pub fork_test_why: String,
    /// The same for a program with usdt-runtime's fork guard:
    /// [`ForkVerdict::Guarded`] where the guard keeps its children alive
    /// and the kernel alone does not, otherwise as `fork_test`.
    pub fork_test_guarded: ForkVerdict,
    /// The speed self-test's rates, if measured.
    pub speed_test: Option<SpeedRates>,
    /// Why there are no rates, if none.
    pub speed_test_why: Option<String>,
    /// Where Auto attaches on each layout, for a program without the fork
    /// guard.
    pub default_attach: AutoAttach,
    /// The same for a program with the fork guard.
    pub default_attach_guarded: AutoAttach,
}

/// The long nop a kernel optimizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizedNop {
    /// `nopl 0(%rax,%rax,1)` (`ENXIO`: Linux 6.18 to 7.2).
    Nop5,
    /// The 10-byte nop (`EPROTO`: the 7.3 series).
    Nop10,
}

/// Whether a child forked after an optimized hit survives, as the report
/// words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForkVerdict {
    /// The child survives: the kernel keeps its trampoline.
    #[serde(rename = "safe")]
    Safe,
    /// The child dies at its first hit.
    #[serde(rename = "child dies")]
    ChildDies,
    /// Not tested (nothing optimized, or the test could not run): assumed
    /// to die.
    #[serde(rename = "untested")]
    Untested,
    /// The program's fork guard keeps the child alive.
    #[serde(rename = "guarded")]
    Guarded,
}

impl ForkVerdict {
    /// The report's word for a fork self-test verdict.
    pub fn of(fork: OptimizedFork) -> ForkVerdict {
        match fork {
            OptimizedFork::ChildSurvives => ForkVerdict::Safe,
            OptimizedFork::ChildDies => ForkVerdict::ChildDies,
            OptimizedFork::Untested => ForkVerdict::Untested,
        }
    }
}

/// The speed self-test's rates, in million hits per second, to 3
/// decimals.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedRates {
    /// A uprobe at the nop (`int3`).
    pub trap: f64,
    /// A uprobe at the optimized long nop.
    pub optimized: f64,
}

/// Where Auto attaches on each layout with a long nop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoAttach {
    /// `nop; nop5`: [`AutoAt::Nop`] or [`AutoAt::Next`].
    pub nop5: AutoAt,
    /// `nop; nop10`: [`AutoAt::Nop`] or [`AutoAt::Next`].
    pub nop10: AutoAt,
    /// `nop; nop5; nop10`: [`AutoAt::Nop`], [`AutoAt::Next5`] or
    /// [`AutoAt::Next10`].
    pub nop5_nop10: AutoAt,
}

/// Where on a site Auto attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoAt {
    /// Location, the nop.
    Nop,
    /// Location + 1, the long nop.
    Next,
    /// The nop5 of `nop; nop5; nop10` (Location + 1).
    Next5,
    /// The nop10 of `nop; nop5; nop10` (Location + 6).
    Next10,
}

impl AutoAttach {
    /// The entries for the bytes past Location that `delta` gives each
    /// layout.
    pub fn from_deltas(delta: impl Fn(SiteLayout) -> u64) -> AutoAttach {
        let next = |layout| match delta(layout) {
            0 => AutoAt::Nop,
            _ => AutoAt::Next,
        };
        AutoAttach {
            nop5: next(SiteLayout::NopNop5),
            nop10: next(SiteLayout::NopNop10),
            nop5_nop10: match delta(SiteLayout::NopNop5Nop10) {
                0 => AutoAt::Nop,
                6 => AutoAt::Next10,
                _ => AutoAt::Next5,
            },
        }
    }

    /// Each entry by its key in the report (`nop5`, `nop10`, `nop5_nop10`).
    pub fn entries(&self) -> [(&'static str, AutoAt); 3] {
        [
            ("nop5", self.nop5),
            ("nop10", self.nop10),
            ("nop5_nop10", self.nop5_nop10),
        ]
    }
}

impl FeatureReport {
    /// The report of `caps`, with what the placement decides from them:
    /// whether the fork guard keeps a child alive where the kernel alone
    /// does not (`guard_decides`), and Auto's bytes past Location per
    /// layout for a program without the guard and with it (`delta`).
    pub(crate) fn new(
        caps: &Caps,
        guard_decides: bool,
        delta: impl Fn(SiteLayout, bool) -> u64,
    ) -> FeatureReport {
        let f = &caps.features;
        let fork_test = ForkVerdict::of(caps.fork.verdict);
        FeatureReport {
            kernel: caps.kernel.clone(),
            machine: caps.machine.clone(),
            uprobe_syscall: errno_name(f.uprobe_syscall),
            optimizes: f.optimized_layout().map(|l| match l {
                SiteLayout::NopNop10 => OptimizedNop::Nop10,
                _ => OptimizedNop::Nop5,
            }),
            uprobe_multi: caps.uprobe_multi.present(),
            uprobe_pmu: f.uprobe_pmu_type.is_some(),
            kernel_semaphores: f.kernel_semaphores,
            tracefs: caps.tracefs.is_some(),
            fork_test,
            fork_test_why: caps.fork.why.clone(),
            fork_test_guarded: if guard_decides {
                ForkVerdict::Guarded
            } else {
                fork_test
            },
            speed_test: caps.speed.as_ref().ok().map(|s| SpeedRates {
                trap: round3(s.trap),
                optimized: round3(s.optimized),
            }),
            speed_test_why: caps.speed.as_ref().err().cloned(),
            default_attach: AutoAttach::from_deltas(|l| delta(l, false)),
            default_attach_guarded: AutoAttach::from_deltas(|l| delta(l, true)),
        }
    }
}

/// A rate to 3 decimals, as printed.
fn round3(rate: f64) -> f64 {
    (rate * 1000.0).round() / 1000.0
}

/// What `syscall(336)` said, as the errno's name.
fn errno_name(s: UprobeSyscall) -> String {
    let e = match s {
        UprobeSyscall::Absent => return "ENOSYS".into(),
        UprobeSyscall::OptimizesNop5 => return "ENXIO".into(),
        UprobeSyscall::OptimizesNop10 => return "EPROTO".into(),
        UprobeSyscall::Unknown(e) => e,
    };
    let name = match e {
        0 => "success",
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::EFAULT => "EFAULT",
        libc::EACCES => "EACCES",
        libc::ENOMEM => "ENOMEM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EBUSY => "EBUSY",
        libc::ENOENT => "ENOENT",
        _ => return format!("errno {e}"),
    };
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of 7.3 as the kernel matrix reads it: every key, in the
    /// words `usdt features --json` writes, back to the same value.
    #[test]
    fn the_report_reads_back_as_written() {
        let text = r#"{"kernel":"7.3.4","machine":"x86_64","uprobe_syscall":"EPROTO","optimizes":"nop10","uprobe_multi":true,"uprobe_pmu":true,"kernel_semaphores":true,"tracefs":true,"fork_test":"safe","fork_test_why":"a child forked after the kernel optimized a nop;nop10 site hit it and survived","fork_test_guarded":"safe","speed_test":{"trap":0.05,"optimized":0.08},"speed_test_why":null,"default_attach":{"nop5":"nop","nop10":"next","nop5_nop10":"next10"},"default_attach_guarded":{"nop5":"nop","nop10":"next","nop5_nop10":"next10"}}"#;
        let report: FeatureReport = serde_json::from_str(text).unwrap();
        assert_eq!(report.optimizes, Some(OptimizedNop::Nop10));
        assert_eq!(report.fork_test, ForkVerdict::Safe);
        assert_eq!(report.default_attach.nop5_nop10, AutoAt::Next10);
        assert_eq!(
            report.speed_test,
            Some(SpeedRates {
                trap: 0.05,
                optimized: 0.08
            })
        );
        assert_eq!(serde_json::to_string(&report).unwrap(), text);
        // A child that dies, nothing measured, the guard: their words.
        let old = text
            .replace(r#""fork_test":"safe""#, r#""fork_test":"child dies""#)
            .replace(
                r#""fork_test_guarded":"safe""#,
                r#""fork_test_guarded":"guarded""#,
            )
            .replace(
                r#""speed_test":{"trap":0.05,"optimized":0.08},"speed_test_why":null"#,
                r#""speed_test":null,"speed_test_why":"not measured""#,
            )
            .replace(r#""optimizes":"nop10""#, r#""optimizes":null"#);
        let report: FeatureReport = serde_json::from_str(&old).unwrap();
        assert_eq!(report.fork_test, ForkVerdict::ChildDies);
        assert_eq!(report.fork_test_guarded, ForkVerdict::Guarded);
        assert_eq!(report.speed_test, None);
        assert_eq!(report.optimizes, None);
        assert_eq!(serde_json::to_string(&report).unwrap(), old);
        // A word the report never writes is an error, not a guess.
        let bad = text.replace(r#""fork_test":"safe""#, r#""fork_test":"maybe""#);
        assert!(serde_json::from_str::<FeatureReport>(&bad).is_err());
    }

    #[test]
    fn deltas_in_the_reports_words() {
        let a = AutoAttach::from_deltas(|l| match l {
            SiteLayout::NopNop5 => 1,
            SiteLayout::NopNop5Nop10 => 6,
            _ => 0,
        });
        assert_eq!(
            a.entries(),
            [
                ("nop5", AutoAt::Next),
                ("nop10", AutoAt::Nop),
                ("nop5_nop10", AutoAt::Next10)
            ]
        );
        let b = AutoAttach::from_deltas(|l| u64::from(l == SiteLayout::NopNop5Nop10));
        assert_eq!(b.nop5_nop10, AutoAt::Next5);
    }

    #[test]
    fn errnos_by_name() {
        assert_eq!(errno_name(UprobeSyscall::OptimizesNop5), "ENXIO");
        assert_eq!(errno_name(UprobeSyscall::Unknown(libc::EPERM)), "EPERM");
        assert_eq!(errno_name(UprobeSyscall::Unknown(999)), "errno 999");
    }
}
