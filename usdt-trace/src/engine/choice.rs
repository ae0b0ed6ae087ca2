//! Which engine attaches: chosen here, not by a caller (as aya's
//! `AttachMode`). [`EngineChoice::Auto`] takes BPF where this kernel's
//! uprobe_multi links fit the target and the file's machine has the
//! registers table the BPF sampler needs, else perf, and says why in a
//! [`Picked`]; when BPF then turns out unsupported it falls back on perf,
//! and when both fail, [`Error::BothEngines`] reports both
//! ([`attach_with`], for counting and sampling alike).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::bpf::{uprobe_multi_support, BpfError, ProbeCounter, UprobeMulti};
use super::perf::counter::PerfCounter;
use super::{AttachPoint, Counting, Target};
use crate::elf::arg::Machine;
use crate::elf::note::Site;
use crate::Error;

/// The engine a caller asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineChoice {
    /// BPF where it fits, else perf.
    #[default]
    Auto,
    /// Perf events per site.
    Perf,
    /// BPF uprobe_multi links, or an error.
    Bpf,
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

/// The engine picked for one use, and why not BPF when
/// [`EngineChoice::Auto`] fell back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// Whether BPF attaches.
    pub bpf: bool,
    /// Whether the choice was [`EngineChoice::Auto`] (then a BPF attach
    /// that the kernel turns out not to support falls back on perf).
    pub auto: bool,
    /// For an automatic fallback to perf: this kernel's uprobe_multi
    /// support (never when it is unknown, such as without privilege, where
    /// perf fails too and says why).
    pub fallback: Option<UprobeMulti>,
}

impl EngineChoice {
    /// The engine that counts the hits of `target`: BPF needs a process
    /// filter that covers every thread, or (for every process) links at
    /// all.
    pub fn for_counting(self, target: Target) -> Picked {
        self.pick(|support| match target {
            Target::Pid(_) => *support == UprobeMulti::Process,
            Target::AllProcesses => {
                matches!(support, UprobeMulti::Process | UprobeMulti::ThreadOnly)
            }
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
            EngineChoice::Bpf => Picked {
                bpf: true,
                auto: false,
                fallback: None,
            },
            EngineChoice::Perf => Picked {
                bpf: false,
                auto: false,
                fallback: None,
            },
            EngineChoice::Auto => {
                let support = uprobe_multi_support();
                let bpf = fits(&support);
                let known = !matches!(support, UprobeMulti::Unknown(_));
                Picked {
                    bpf,
                    auto: true,
                    fallback: (!bpf && known).then_some(support),
                }
            }
        }
    }
}

/// Attaches with the engine `picked`: `bpf` when it picked BPF, else
/// `perf`. An automatic BPF attach that the kernel does not support
/// ([`BpfError::Unsupported`]) falls back on `perf`; when that fails too,
/// [`Error::BothEngines`] says both. The one place where the fallback is
/// written, for counting and sampling alike.
pub(crate) fn attach_with<T>(
    picked: &Picked,
    bpf: impl FnOnce() -> Result<T, Error>,
    perf: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    if !picked.bpf {
        return perf();
    }
    match bpf() {
        Err(Error::Bpf(bpf @ BpfError::Unsupported)) if picked.auto => {
            perf().map_err(|perf| Error::BothEngines {
                bpf,
                perf: Box::new(perf),
            })
        }
        other => other,
    }
}

/// Hit counts per probe, by the engine picked ([`EngineChoice`]).
#[derive(Debug)]
pub struct Counter(Box<dyn Counting>);

impl Counter {
    /// Attaches the given sites of each file at `point`, counting `target`
    /// with the engine `picked`; `None` when `cancelled` says so meanwhile
    /// (what was attached is detached again). Every site starts counting
    /// at the same moment: one link per file, or perf counters created
    /// disabled and enabled together once all are attached. An automatic
    /// BPF attach the kernel does not support falls back on perf; if perf
    /// fails too, the error says both.
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
        attach_with(
            picked,
            || <ProbeCounter as Counting>::attach(files, point, target, cancelled).map(boxed),
            || <PerfCounter as Counting>::attach(files, point, target, cancelled).map(boxed),
        )
    }

    /// Whether the counts come from BPF.
    pub fn is_bpf(&self) -> bool {
        self.0.is_bpf()
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
        assert!(p.bpf && !p.auto && p.fallback.is_none());
        let p = EngineChoice::Perf.for_counting(Target::AllProcesses);
        assert!(!p.bpf && p.fallback.is_none());
        assert_eq!(
            "perf".parse::<EngineChoice>().ok(),
            Some(EngineChoice::Perf)
        );
        assert!("Perf".parse::<EngineChoice>().is_err());
    }

    #[test]
    fn auto_never_samples_a_machine_without_a_registers_table_with_bpf() {
        assert!(!EngineChoice::Auto.for_sampling(&[Machine::Aarch64]).bpf);
    }
}
