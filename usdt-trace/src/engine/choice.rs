//! Which engine attaches: chosen here, not by a caller (as aya's
//! `AttachMode`). An engine is an [`EngineKind`]; a caller asks with an
//! [`EngineChoice`] (the `usdt` command's `--engine`, a clap `ValueEnum`
//! with this crate's `clap` feature). [`EngineChoice::Auto`] takes BPF
//! where this kernel's uprobe_multi links fit the target and the file's
//! machine has the registers table the BPF sampler needs, else perf, and
//! says why in a [`Picked`]: the engines to try, in order. Where one turns
//! out unsupported by the kernel the next attaches, and when that fails
//! too, [`Error::BothEngines`] reports both ([`attach_first`], the one
//! place the fallback is written, for counting and sampling alike).
//! Aggregation has one engine that can keep it in the kernel, BPF
//! ([`aggregator`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::aggregating::{Aggregating, Kind as AggregateKind};
use super::bpf::{uprobe_multi_support, Aggregator, BpfError, ProbeCounter, UprobeMulti};
use super::perf::counter::PerfCounter;
use super::{AttachPoint, Counting, EngineKind, Target};
use crate::elf::arg::Machine;
use crate::elf::note::Site;
use crate::Error;

/// The engine a caller asks for. With the `clap` feature it is a
/// `clap::ValueEnum` (`auto`, `bpf`, `perf`), with the words of the `usdt`
/// command's help.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EngineChoice {
    /// BPF where it fits, else perf.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "BPF where the kernel has uprobe_multi links, else perf (with a notice)")
    )]
    Auto,
    /// BPF uprobe_multi links, or an error.
    #[cfg_attr(feature = "clap", value(help = "BPF uprobe_multi links, or an error"))]
    Bpf,
    /// Perf events per site.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Perf events per site (per CPU for every process): count sees only the thread whose id is the process id, trace each thread once found"
        )
    )]
    Perf,
}

impl std::str::FromStr for EngineChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<EngineChoice, Error> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "bpf" => Ok(EngineChoice::Bpf),
            "perf" => Ok(EngineChoice::Perf),
            _ => Err(Error::BadEngine { value: s.into() }),
        }
    }
}

/// The engines picked for one use, in the order they are tried, and why
/// not BPF when [`EngineChoice::Auto`] fell back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// The engines to try, in order: the next attaches only where the
    /// kernel turns out not to support one (an automatic choice of BPF:
    /// BPF, then perf; a choice the caller made: that engine alone).
    pub engines: Vec<EngineKind>,
    /// For an automatic fallback to perf: this kernel's uprobe_multi
    /// support (never when it is unknown, such as without privilege, where
    /// perf fails too and says why).
    pub fallback: Option<UprobeMulti>,
}

impl Picked {
    /// `kind` alone, with nothing to fall back on.
    pub fn only(kind: EngineKind) -> Picked {
        Picked {
            engines: vec![kind],
            fallback: None,
        }
    }

    /// The engine tried first.
    pub fn first(&self) -> Option<EngineKind> {
        self.engines.first().copied()
    }

    /// Whether BPF is tried first.
    #[deprecated(note = "the engines are a list in order: `first() == Some(EngineKind::Bpf)`")]
    pub fn bpf(&self) -> bool {
        self.first() == Some(EngineKind::Bpf)
    }

    /// Whether an engine the kernel does not support falls back on the
    /// next.
    #[deprecated(note = "the engines are a list in order: more than one falls back")]
    pub fn auto(&self) -> bool {
        self.engines.len() > 1
    }
}

impl EngineChoice {
    /// The engine that counts the hits of `target`: BPF needs a process
    /// filter that covers every thread, or (for every process) links at
    /// all.
    pub fn for_counting(self, target: Target) -> Picked {
        self.pick(|support| match target {
            Target::Pid(_) => *support == UprobeMulti::Process,
            Target::AllProcesses => support.present(),
        })
    }

    /// The engine that samples files of `machines`: BPF needs a process
    /// filter that covers every thread, and each machine's `pt_regs`
    /// layout (the per-architecture tables).
    pub fn for_sampling(self, machines: &[Machine]) -> Picked {
        let regs = machines.iter().all(|m| crate::arch::pt_regs(*m).is_some());
        self.pick(|support| *support == UprobeMulti::Process && regs)
    }

    fn pick(self, fits: impl FnOnce(&UprobeMulti) -> bool) -> Picked {
        match self {
            EngineChoice::Bpf => Picked::only(EngineKind::Bpf),
            EngineChoice::Perf => Picked::only(EngineKind::Perf),
            EngineChoice::Auto => {
                let support = uprobe_multi_support();
                let bpf = fits(&support);
                let known = !matches!(support, UprobeMulti::Unknown(_));
                Picked {
                    engines: match bpf {
                        true => vec![EngineKind::Bpf, EngineKind::Perf],
                        false => vec![EngineKind::Perf],
                    },
                    fallback: (!bpf && known).then_some(support),
                }
            }
        }
    }
}

/// Attaches with the first of `engines` the kernel supports: `attach`
/// with each kind in turn, going on only when one fails as unsupported
/// ([`BpfError::Unsupported`]: no BPF system call or uprobe_multi links)
/// and another is left; when the next fails too, [`Error::BothEngines`]
/// says both. The one place where the fallback is written, for counting
/// and sampling alike.
pub(crate) fn attach_first<T>(
    engines: &[EngineKind],
    mut attach: impl FnMut(EngineKind) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut unsupported = None;
    for (i, kind) in engines.iter().enumerate() {
        let last = i + 1 == engines.len();
        match attach(*kind) {
            Err(Error::Bpf(bpf @ BpfError::Unsupported)) if !last => unsupported = Some(bpf),
            Err(e) => {
                return Err(match unsupported {
                    Some(bpf) => Error::BothEngines {
                        bpf,
                        perf: Box::new(e),
                    },
                    None => e,
                })
            }
            attached => return attached,
        }
    }
    Err(Error::BadEngine {
        value: String::new(),
    })
}

/// An aggregation of `kind`, nothing attached, in the engine that keeps
/// it: BPF, the one whose programs keep maps in the kernel (perf events
/// send every hit to user space).
pub(crate) fn aggregator(kind: AggregateKind) -> Result<Box<dyn Aggregating>, Error> {
    Ok(Box::new(Aggregator::new(kind)?))
}

/// Hit counts per probe, by the engine picked ([`EngineChoice`]).
#[derive(Debug)]
pub struct Counter(Box<dyn Counting>);

impl Counter {
    /// Attaches the given sites of each file at `point`, counting `target`
    /// with the engines `picked`, in order; `None` when `cancelled` says so
    /// meanwhile (what was attached is detached again). Every site starts
    /// counting at the same moment: one link per file, or perf counters
    /// created disabled and enabled together once all are attached. An
    /// automatic BPF attach the kernel does not support falls back on
    /// perf; if perf fails too, the error says both.
    pub fn attach(
        picked: &Picked,
        files: &[(PathBuf, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Counter>, Error> {
        if cancelled() {
            return Ok(None);
        }
        fn boxed<C: Counting + 'static>(c: Option<C>) -> Option<Counter> {
            c.map(|c| Counter(Box::new(c)))
        }
        attach_first(&picked.engines, |kind| match kind {
            EngineKind::Bpf => {
                <ProbeCounter as Counting>::attach(files, point, target, cancelled).map(boxed)
            }
            EngineKind::Perf => {
                <PerfCounter as Counting>::attach(files, point, target, cancelled).map(boxed)
            }
        })
    }

    /// The engine that counts.
    pub fn kind(&self) -> EngineKind {
        self.0.kind()
    }

    /// Whether the counts come from BPF.
    #[deprecated(note = "the engine is a kind: `kind() == EngineKind::Bpf`")]
    pub fn is_bpf(&self) -> bool {
        self.kind() == EngineKind::Bpf
    }

    /// Hits per probe (`provider:name`).
    pub fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
        self.0.probe_counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_the_caller_makes_is_kept() {
        let p = EngineChoice::Bpf.for_sampling(&[Machine::Aarch64]);
        assert_eq!(p, Picked::only(EngineKind::Bpf));
        let p = EngineChoice::Perf.for_counting(Target::AllProcesses);
        assert_eq!(p, Picked::only(EngineKind::Perf));
        assert_eq!(
            "perf".parse::<EngineChoice>().ok(),
            Some(EngineChoice::Perf)
        );
        assert!("Perf".parse::<EngineChoice>().is_err());
    }

    #[test]
    fn auto_never_samples_a_machine_without_a_registers_table_with_bpf() {
        let p = EngineChoice::Auto.for_sampling(&[Machine::Aarch64]);
        assert_eq!(p.engines, [EngineKind::Perf]);
    }

    /// The next engine is tried only after one the kernel does not
    /// support, and only while one is left; a failure of another kind ends
    /// the list.
    #[test]
    fn the_engines_are_tried_in_order() {
        use EngineKind::{Bpf, Perf};
        let unsupported = || Error::Bpf(BpfError::Unsupported);
        let mut tried = vec![];
        let got = attach_first(&[Bpf, Perf], |k| {
            tried.push(k);
            match k {
                Bpf => Err(unsupported()),
                Perf => Ok(7),
            }
        });
        assert_eq!((got.ok(), &tried[..]), (Some(7), &[Bpf, Perf][..]));
        let e = attach_first(&[Bpf, Perf], |k| match k {
            Bpf => Err::<(), _>(unsupported()),
            Perf => Err(Error::NoProcess(4)),
        });
        assert!(
            matches!(&e, Err(Error::BothEngines { bpf: BpfError::Unsupported, perf }) if matches!(**perf, Error::NoProcess(4))),
            "{e:?}"
        );
        let mut tried = vec![];
        let e = attach_first(&[Bpf, Perf], |k| {
            tried.push(k);
            Err::<(), _>(Error::Bpf(BpfError::NotPermitted))
        });
        assert!(matches!(e, Err(Error::Bpf(BpfError::NotPermitted))));
        assert_eq!(tried, [Bpf]);
        let e = attach_first(&[Bpf], |_| Err::<(), _>(unsupported()));
        assert!(matches!(e, Err(Error::Bpf(BpfError::Unsupported))));
        assert!(matches!(
            attach_first(&[], |_| Ok(())),
            Err(Error::BadEngine { .. })
        ));
    }
}
