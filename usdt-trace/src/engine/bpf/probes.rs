//! [`ProbeCounter`]: hits per probe (`provider:name`) over the sites of one
//! or more files, one uprobe_multi link per file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::filter::{self, Code};
use super::{MultiCounter, MultiSite};
use crate::engine::{Counting, EngineKind};
use crate::filter::Filter;
use crate::{AttachPoint, Error, Site, Target};

/// The sites of one file to attach: each with its filter's variant, when
/// filtered.
struct FilePlan {
    path: PathBuf,
    multi: Vec<MultiSite>,
    variant: Vec<usize>,
    variants: Vec<Code>,
}

/// Counts per probe, every site of a probe adding to one counter.
#[derive(Debug)]
pub struct ProbeCounter {
    counter: MultiCounter,
    names: Vec<String>,
    sites: usize,
}

impl ProbeCounter {
    /// Attaches the given sites of each file (an executable or shared
    /// library) at `point`, one link per file with sites, counting the hits
    /// of `target`. Either every file is attached or none.
    pub fn attach<P: AsRef<Path>>(
        files: &[(P, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
    ) -> Result<ProbeCounter, Error> {
        ProbeCounter::attach_with(files, point, target, None)
    }

    /// [`ProbeCounter::attach`], counting only the hits for which `filter`
    /// holds: the filter runs in the program before it counts, each site's
    /// names bound by the probe's signature (`filter`'s signatures and the
    /// file's records).
    pub fn attach_filtered<P: AsRef<Path>>(
        files: &[(P, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        filter: &Filter,
    ) -> Result<ProbeCounter, Error> {
        ProbeCounter::attach_with(files, point, target, Some(filter))
    }

    fn attach_with<P: AsRef<Path>>(
        files: &[(P, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        filter: Option<&Filter>,
    ) -> Result<ProbeCounter, Error> {
        let mut names: Vec<String> = files
            .iter()
            .flat_map(|(_, sites)| sites.iter().map(|s| s.probe()))
            .collect();
        names.sort();
        names.dedup();
        let features = crate::engine::features_for(point);
        let mut plan: Vec<FilePlan> = vec![];
        for (path, sites) in files {
            let path = path.as_ref();
            let binder = filter.map(|f| f.binder(path));
            let mut multi = vec![];
            let mut variant = vec![];
            let mut variants = vec![];
            // Duplicate notes of one site: one uprobe per address, so that a
            // hit counts once (as bpftrace and the perf engine count it).
            let mut seen = std::collections::HashSet::new();
            for s in sites {
                let slot = names.binary_search(&s.probe()).unwrap_or(0) as u32;
                let m = MultiSite::at(s, point, &features, path, slot, target)?;
                if !seen.insert(m.offset) {
                    continue;
                }
                if let Some(binder) = &binder {
                    let code = filter::code(&binder.site(s)?, s)?;
                    variant.push(filter::variant_of(&mut variants, code));
                }
                multi.push(m);
            }
            plan.push(FilePlan {
                path: path.into(),
                multi,
                variant,
                variants,
            });
        }
        let mut counter = MultiCounter::new(names.len() as u32)?;
        for p in &plan {
            match filter {
                None => counter.attach(&p.path, &p.multi, target)?,
                Some(_) => {
                    counter.attach_filtered(&p.path, &p.multi, &p.variant, &p.variants, target)?
                }
            }
        }
        let sites = plan.iter().map(|p| p.multi.len()).sum();
        Ok(ProbeCounter {
            counter,
            names,
            sites,
        })
    }

    /// How many sites are attached.
    pub fn sites(&self) -> usize {
        self.sites
    }

    /// Hits per probe (`provider:name`), summed over its sites.
    pub fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
        let counts = self.counter.counts()?;
        Ok(self.names.iter().cloned().zip(counts).collect())
    }

    /// The counter underneath.
    pub fn counter(&self) -> &MultiCounter {
        &self.counter
    }
}

impl Counting for ProbeCounter {
    /// One link per file, all attached before the program counts a hit of
    /// them (the map is read only by [`ProbeCounter::probe_counts`]).
    fn attach(
        files: &[(PathBuf, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<ProbeCounter>, Error> {
        let counter = ProbeCounter::attach(files, point, target)?;
        Ok((!cancelled()).then_some(counter))
    }

    fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
        ProbeCounter::probe_counts(self)
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Bpf
    }
}
