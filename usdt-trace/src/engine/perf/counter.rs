//! Attaching uprobes to probe sites with `perf_event_open` on the uprobe PMU,
//! and counting their hits.
//!
//! One perf event per site and thread of a traced process (a uprobe perf
//! event counts only the hits of its own thread), or per site and CPU when
//! tracing every process, with the semaphore's file offset in
//! `ref_ctr_offset` so that the kernel raises the semaphore while attached. Dropping a [`PerfCounter`] closes the events: the
//! kernel removes the uprobes and lowers the semaphores back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::attach_error;
use crate::cpus::online_cpus;
use crate::process::process_threads;
use crate::elf::note::Site;
use crate::engine::{
    features_for, path_cstring, AttachPoint, Counting, EngineKind, Target, Uprobe,
};
use crate::sys::{perf, SyscallError};
use crate::{Error, KernelFeatures};

/// A site with its uprobe(s) attached.
#[derive(Debug)]
pub struct AttachedSite {
    /// The file the site is in, as given to [`PerfCounter::attach`].
    pub path: PathBuf,
    /// The site.
    pub site: Site,
    /// The file offset the uprobe is at (Location's offset, plus 1 for
    /// [`AttachPoint::Next`]).
    pub offset: u64,
    fds: Vec<OwnedFd>,
}

impl AttachedSite {
    /// `provider:name`.
    pub fn probe(&self) -> String {
        self.site.probe()
    }

    /// Hits so far (the sum over this site's events).
    pub fn count(&self) -> Result<u64, Error> {
        self.fds.iter().try_fold(0u64, |sum, fd| {
            let count = perf::read_count(fd).map_err(|source| Error::Syscall {
                what: "reading a uprobe's count".into(),
                source,
            })?;
            Ok(sum.wrapping_add(count))
        })
    }
}

/// A set of attached uprobes; dropping it detaches them all.
///
/// A [`Target::Pid`] gets one event per site for each thread the process
/// has when it is attached: a uprobe perf event counts only its own
/// thread's hits, and threads started later are not counted (inheriting
/// the events would fail the program's `pthread_create`, see
/// [`PerfCounter::inherit`]). The BPF engine's counter
/// ([`ProbeCounter`](crate::bpf::ProbeCounter)) covers every thread, later
/// ones included.
///
/// The events of one thread (or CPU) form one perf group, created
/// disabled: with [`PerfCounter::enable_later`] they all start counting at the
/// same moment, at [`PerfCounter::enable`]. A site whose uprobe address is
/// attached already (two notes at one address) is attached once.
#[derive(Debug)]
pub struct PerfCounter {
    point: AttachPoint,
    features: KernelFeatures,
    inherit: bool,
    enable_later: bool,
    /// The group leader's index in `sites` and in its `fds`, per target and CPU.
    /// (The thread's target, or [`Target::AllProcesses`], and the CPU.)
    leaders: HashMap<(Target, i32), (usize, usize)>,
    attached: HashSet<(PathBuf, u64, Target)>,
    sites: Vec<AttachedSite>,
}

impl PerfCounter {
    /// A tracer that attaches at `point`, using this kernel's features.
    pub fn new(point: AttachPoint) -> PerfCounter {
        PerfCounter {
            point,
            features: features_for(point),
            inherit: false,
            enable_later: false,
            leaders: HashMap::new(),
            attached: HashSet::new(),
            sites: vec![],
        }
    }

    /// The same tracer, attaching as on a kernel with `features`.
    #[cfg(test)]
    pub(crate) fn with_features(mut self, features: KernelFeatures) -> PerfCounter {
        self.features = features;
        self
    }

    /// Leave the events disabled when attaching, until [`PerfCounter::enable`]
    /// starts them all at once (so that counts of probes fired together
    /// agree).
    pub fn enable_later(mut self, later: bool) -> PerfCounter {
        self.enable_later = later;
        self
    }

    /// Starts every event attached so far counting, each group at once.
    pub fn enable(&self) -> Result<(), Error> {
        for &(site, fd) in self.leaders.values() {
            let leader = &self.sites[site].fds[fd];
            perf::enable(leader, true).map_err(|source| Error::Syscall {
                what: format!("enabling the uprobes of {}", self.sites[site].probe()),
                source,
            })?;
        }
        Ok(())
    }

    /// Also count in children a traced process starts after attaching; their
    /// hits are added when they exit.
    ///
    /// Measured on Linux 6.18: with inherited uprobe events, the traced
    /// program's `fork` and `pthread_create` fail with `EFAULT` (the kernel
    /// sets each inherited event up again, reading the uprobe's path through
    /// a pointer into the tracer, from the new task). Use it only for
    /// programs that start neither.
    pub fn inherit(mut self, inherit: bool) -> PerfCounter {
        self.inherit = inherit;
        self
    }

    /// The attach point.
    pub fn point(&self) -> AttachPoint {
        self.point
    }

    /// Attaches one uprobe per site of the file at `path` (an executable or
    /// shared library). Either every site is attached or, on error, none of
    /// them.
    pub fn attach<'a>(
        &mut self,
        path: impl AsRef<Path>,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
    ) -> Result<(), Error> {
        let path = path.as_ref();
        let c_path = path_cstring(path)?;
        // Each site's events: the thread (as a target) and the CPU.
        let events: Vec<(Target, i32)> = match target {
            Target::Pid(pid) => match process_threads(pid) {
                Ok(tids) if !tids.is_empty() => {
                    tids.into_iter().map(|t| (Target::Pid(t), -1)).collect()
                }
                // Gone: opening its event says so.
                _ => vec![(target, -1)],
            },
            Target::AllProcesses => online_cpus()
                .into_iter()
                .map(|c| (Target::AllProcesses, c))
                .collect(),
        };
        let before = self.sites.len();
        let (leaders, attached) = (self.leaders.clone(), self.attached.clone());
        let result = self.attach_sites(path, &c_path, sites, target, &events);
        if result.is_err() {
            self.sites.truncate(before);
            (self.leaders, self.attached) = (leaders, attached);
            return result;
        }
        if !self.enable_later {
            let enabled = self.sites[before..].iter().try_for_each(|s| {
                s.fds
                    .iter()
                    .try_for_each(|fd| perf::enable(fd, false))
                    .map_err(|source| Error::Syscall {
                        what: format!("enabling the uprobe of {}", s.probe()),
                        source,
                    })
            });
            if let Err(e) = enabled {
                self.sites.truncate(before);
                (self.leaders, self.attached) = (leaders, attached);
                return Err(e);
            }
        }
        Ok(())
    }

    fn attach_sites<'a>(
        &mut self,
        path: &Path,
        c_path: &CString,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
        events: &[(Target, i32)],
    ) -> Result<(), Error> {
        for site in sites {
            let uprobe = Uprobe::at(site, self.point, &self.features, path, c_path, target)?;
            if !self.attached.insert((path.into(), uprobe.offset, target)) {
                continue; // one uprobe per address
            }
            let mut fds = vec![];
            for &(thread, cpu) in events {
                let leader = self.leaders.get(&(thread, cpu));
                let group = leader.map_or(-1, |&(s, f)| self.sites[s].fds[f].as_raw_fd());
                let fd = match self.open(&uprobe, thread, cpu, group) {
                    Ok(fd) => fd,
                    // A thread that ended since the process's were listed.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && thread != target => continue,
                    Err(e) => return Err(attach_error(e, path, site, target)),
                };
                if leader.is_none() {
                    self.leaders
                        .insert((thread, cpu), (self.sites.len(), fds.len()));
                }
                fds.push(fd);
            }
            self.sites.push(AttachedSite {
                path: path.into(),
                site: site.clone(),
                offset: uprobe.offset,
                fds,
            });
        }
        Ok(())
    }

    /// The attached sites, in attach order.
    pub fn sites(&self) -> &[AttachedSite] {
        &self.sites
    }

    /// Hits per probe (`provider:name`), summed over its sites.
    pub fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
        let mut counts = BTreeMap::new();
        for site in &self.sites {
            *counts.entry(site.probe()).or_insert(0) += site.count()?;
        }
        Ok(counts)
    }

    /// Detaches everything (the same as dropping the tracer).
    pub fn detach(self) {}

    fn open(
        &self,
        uprobe: &Uprobe<'_>,
        target: Target,
        cpu: i32,
        group: i32,
    ) -> Result<OwnedFd, SyscallError> {
        let inherit = self.inherit;
        perf::open_uprobe(&self.features, uprobe, target.pid(), cpu, group, |attr| {
            attr.set_disabled(1);
            attr.set_inherit(inherit.into());
        })
    }
}

impl Counting for PerfCounter {
    /// One perf event per site (per CPU for every process), created
    /// disabled and enabled together once all are attached.
    fn attach(
        files: &[(PathBuf, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<PerfCounter>, Error> {
        let mut counter = PerfCounter::new(point).enable_later(true);
        for (path, sites) in files {
            for site in sites {
                if cancelled() {
                    return Ok(None);
                }
                counter.attach(path, [*site], target)?;
            }
        }
        if cancelled() {
            return Ok(None);
        }
        counter.enable()?;
        Ok(Some(counter))
    }

    fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
        PerfCounter::probe_counts(self)
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Perf
    }
}
