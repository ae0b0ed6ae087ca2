//! The engines that attach uprobes to probe sites and read their hits, each
//! an [`EngineKind`]: [`perf`] (one perf event per site, tracefs fetch
//! events for memory operands) and [`bpf`] (one uprobe_multi link per file
//! and programs assembled here). What they share is here: the interface
//! the engines implement, for sampling ([`Engine`]), for counting
//! ([`Counting`]) and for aggregating (`Aggregating`, `aggregating.rs`);
//! which engine attaches is chosen once for all, from an ordered list of
//! kinds ([`choice`]). [`floor`] attaches a BPF program that does nothing
//! through either engine's kind of link: what the kernel costs per hit.
//!
//! Where on a site a uprobe goes and whose hits it sees is the
//! [`placement`](crate::placement)'s, below the engines: its names are
//! re-exported here for them.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::elf::arg::{Arg, Machine};
use crate::elf::note::Site;
use crate::Error;

pub(crate) mod aggregating;
pub mod bpf;
mod choice;
pub mod floor;
pub(crate) mod perf;

pub(crate) use crate::placement::features_for;
pub use crate::placement::{AttachPoint, Target};
pub(crate) use crate::sys::perf::Uprobe;
pub(crate) use choice::{aggregator, attach_first};
pub use choice::{Counter, EngineChoice, Picked};

/// An engine: how uprobes are attached and their hits read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// BPF uprobe_multi links and programs ([`bpf`](crate::bpf)).
    Bpf,
    /// Perf events per site ([`PerfCounter`](crate::PerfCounter), the
    /// [`Sampler`](crate::Sampler)'s perf rings).
    Perf,
}

impl EngineKind {
    /// Its name, as `--engine` takes it: `bpf` or `perf`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Bpf => "bpf",
            EngineKind::Perf => "perf",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One site to sample, as the sampler planned it: engine-neutral. Each
/// engine derives from it what it reads at the hit (the perf engine its
/// registers mask and stack copy, the BPF engine its fetch rows).
#[derive(Debug)]
pub(crate) struct SampleSite<'a> {
    /// The sampler's number for the site: raw hits name it, and BPF
    /// records carry it as the cookie.
    pub(crate) index: usize,
    pub(crate) site: &'a Site,
    pub(crate) uprobe: Uprobe<'a>,
    /// The note's arguments.
    pub(crate) args: &'a [Arg],
    /// Which arguments are string pointers.
    pub(crate) strings: &'a [bool],
    /// Which arguments are the addresses of byte slices.
    pub(crate) bytes: &'a [bool],
    /// The uprobe's link-time address.
    pub(crate) attach_addr: u64,
}

#[cfg(test)]
impl<'a> SampleSite<'a> {
    /// `site` as the sampler's site `index`, at offset 0 of `path`, with
    /// the string arguments `strings` marked and no byte slices, for unit
    /// tests.
    pub(crate) fn of(
        index: usize,
        site: &'a Site,
        path: &'a CString,
        strings: &'a [bool],
    ) -> SampleSite<'a> {
        SampleSite {
            index,
            site,
            uprobe: Uprobe {
                path,
                offset: 0,
                ref_ctr_offset: None,
            },
            args: &site.args,
            strings,
            bytes: &[],
            attach_addr: 0,
        }
    }
}

/// What both engines do to sample hits; each decodes its own records into
/// engine-neutral raw hits (`crate::raw`).
pub(crate) trait Engine: std::fmt::Debug {
    /// Attaches `sites` of the file at `path`, sampling the hits of
    /// `target`: all of them, or on error none.
    fn attach(
        &mut self,
        path: &Path,
        sites: &[SampleSite<'_>],
        target: Target,
    ) -> Result<(), Error>;
    /// Calls `each` with every hit read so far (`None`: a record that
    /// could not be read).
    fn drain(&mut self, each: &mut dyn FnMut(Option<crate::raw::RawHit<'_>>));
    /// Hits lost because a ring was full.
    fn lost(&self) -> u64;
    /// Every hit the kernel counted, sampled or not, where the engine
    /// counts them.
    fn counted(&self) -> Option<u64>;
    /// The descriptors to wait on.
    fn poll_fds(&self) -> Vec<std::os::fd::RawFd>;
    /// The size in bytes of each ring's data area.
    fn ring_bytes(&self) -> u64;
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
}

/// What both engines do to count hits per probe: the peer of [`Engine`]
/// for counting. [`Counter`] holds one, chosen by [`EngineChoice`].
pub(crate) trait Counting: std::fmt::Debug {
    /// Attaches the given sites of each file at `point`, counting the hits
    /// of `target`, every site from the same moment; `None` when
    /// `cancelled` says so meanwhile (what was attached is detached
    /// again). Either every file is attached or none.
    fn attach(
        files: &[(PathBuf, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Self>, Error>
    where
        Self: Sized;
    /// Hits per probe (`provider:name`), summed over its sites.
    fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error>;
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
}

/// The register table of `site`'s machine, for an engine that reads
/// registers at its hits: only the machine this program runs on, whose
/// registers the kernel gives a uprobe (a file of another machine runs
/// here only under an emulator, whose registers no uprobe sees).
pub(crate) fn site_arch(site: &Site) -> Result<&'static Arch, Error> {
    match Machine::host() {
        Some(host) if host == site.machine => Ok(host.arch()),
        host => Err(Error::Unsupported(format!(
            "{} sites ({}) on this {}machine are not supported",
            site.machine,
            site.probe(),
            host.map_or(String::new(), |h| format!("{h} "))
        ))),
    }
}

/// The error for a site with an argument register its machine's table
/// does not have (a site put together by hand).
pub(crate) fn unsupported_registers(site: &Site) -> Error {
    Error::Unsupported(format!(
        "registers that {} does not have (in the arguments of {}) are not supported",
        site.machine,
        site.probe()
    ))
}

/// The path as the kernel takes it (`config1` of a uprobe event).
pub(crate) fn path_cstring(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::NulInPath { path: path.into() })
}
