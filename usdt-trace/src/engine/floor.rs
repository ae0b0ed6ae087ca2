//! The kernel's floor: [`EmptyProgram`], a BPF program that does nothing
//! (`r0 = 0; exit`) attached to sites by either link a uprobe program can
//! have: a perf event per site (the perf engine's uprobe events) or a
//! uprobe_multi link (the BPF engine's). What a hit costs with it is what the kernel costs to take the hit
//! and run a program at all; what an engine's program costs more is its
//! own work (helper calls, map lookups, the record it writes).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use crate::engine::bpf::{link_sites, load_program_for, BpfError};
use crate::engine::{features_for, path_cstring, AttachPoint, Target, Uprobe};
use crate::sys::bpf::BPF_TRACE_UPROBE_MULTI;
use crate::sys::perf::open_uprobe;
use crate::sys::bpf::{
    bpf_fd, PerfLinkCreateAttr, BPF_LINK_CREATE, BPF_PERF_EVENT, RETURN_ZERO,
};
use crate::{Error, Site};

/// How a BPF program is linked to its uprobes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// One perf event on the uprobe PMU per site, and the program linked
    /// to each (`BPF_LINK_CREATE`, attach type `BPF_PERF_EVENT`, Linux
    /// 5.15): how bpftrace and libbpf's single uprobes attach.
    PerfEvent,
    /// One uprobe_multi link for all the sites of a file (Linux 6.6): how
    /// this crate's BPF engine attaches.
    UprobeMulti,
}

impl LinkKind {
    /// Its name in the bench's tables: `uprobe` or `uprobe_multi`.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::PerfEvent => "uprobe",
            LinkKind::UprobeMulti => "uprobe_multi",
        }
    }
}

/// An empty program attached to sites; dropping it detaches them (the
/// links first, then the perf events, then the program).
#[derive(Debug)]
pub struct EmptyProgram {
    // Declared in the order they are dropped.
    links: Vec<OwnedFd>,
    events: Vec<OwnedFd>,
    _prog: OwnedFd,
    offsets: Vec<u64>,
    kind: LinkKind,
}

impl EmptyProgram {
    /// Attaches the empty program to `sites` of the file at `path`, at
    /// `point` (placed as every engine places its uprobes, semaphores
    /// raised), for `target`, through links of `kind`. Either every site
    /// is attached or none.
    pub fn attach<'a>(
        path: impl AsRef<Path>,
        sites: impl IntoIterator<Item = &'a Site>,
        point: AttachPoint,
        kind: LinkKind,
        target: Target,
    ) -> Result<EmptyProgram, Error> {
        let path = path.as_ref();
        let c_path = path_cstring(path)?;
        let features = features_for(point);
        let uprobes = sites
            .into_iter()
            .map(|s| Uprobe::at(s, point, &features, path, &c_path, target))
            .collect::<Result<Vec<_>, _>>()?;
        let expected = match kind {
            LinkKind::PerfEvent => 0,
            LinkKind::UprobeMulti => BPF_TRACE_UPROBE_MULTI,
        };
        let prog = load_program_for(&RETURN_ZERO, "usdt_empty", expected)?;
        let mut out = EmptyProgram {
            links: vec![],
            events: vec![],
            offsets: uprobes.iter().map(|u| u.offset).collect(),
            _prog: prog,
            kind,
        };
        match kind {
            LinkKind::UprobeMulti => {
                let triples: Vec<(u64, u64, u64)> = uprobes
                    .iter()
                    .map(|u| (u.offset, u.ref_ctr_offset.unwrap_or(0), 0))
                    .collect();
                if !triples.is_empty() {
                    let link = link_sites(out._prog.as_fd(), path, &triples, target)?;
                    out.links.push(link);
                }
            }
            LinkKind::PerfEvent => {
                // A process's event (every thread of it passes the
                // uprobe's filter, and the program runs at each of their
                // hits); for every process, one event on CPU 0, whose
                // program runs at every CPU's hit.
                let cpu = match target {
                    Target::Pid(_) => -1,
                    Target::AllProcesses => 0,
                };
                for u in &uprobes {
                    let event = open_uprobe(&features, u, target.pid(), cpu, -1, |_| {}).map_err(
                        |source| Error::Syscall {
                            what: format!("opening a uprobe event at {:#x}", u.offset),
                            source,
                        },
                    )?;
                    let mut attr = PerfLinkCreateAttr {
                        prog_fd: out._prog.as_raw_fd() as u32,
                        target_fd: event.as_raw_fd() as u32,
                        attach_type: BPF_PERF_EVENT,
                        ..PerfLinkCreateAttr::default()
                    };
                    // SAFETY: the attributes hold no pointers.
                    let link = unsafe { bpf_fd(BPF_LINK_CREATE, &mut attr) }.map_err(|e| {
                        Error::from(BpfError::from_os("linking a program to a uprobe event", e))
                    })?;
                    out.events.push(event);
                    out.links.push(link);
                }
            }
        }
        Ok(out)
    }

    /// The file offsets of the attached uprobes, in the order of the sites.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// How the program is linked.
    pub fn kind(&self) -> LinkKind {
        self.kind
    }

    /// Detaches everything (the same as dropping it).
    pub fn detach(self) {}
}
