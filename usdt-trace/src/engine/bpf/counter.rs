//! [`MultiCounter`]: a per-CPU array of counters, the program that fills it,
//! and one uprobe_multi link per attached file.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::program::{create_counter_map, load_count_program};
use super::BpfError;
use super::{uprobe_multi_support, UprobeMulti};
use crate::engine::{path_cstring, Uprobe};
use crate::sys::bpf::{bpf, bpf_fd, LinkCreateAttr, MapElemAttr};
use crate::sys::bpf::{BPF_LINK_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_TRACE_UPROBE_MULTI};
use crate::sys::SyscallError;
use crate::{AttachPoint, Error, KernelFeatures, Site, Target};

/// The most sites one link takes (the kernel's `MAX_UPROBE_MULTI_CNT`).
pub const MAX_SITES_PER_LINK: usize = 1 << 20;

/// One site to attach: where, its semaphore, and the slot its hits go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MultiSite {
    /// The file offset of the instruction the uprobe goes on.
    pub offset: u64,
    /// The file offset of the site's semaphore, which the kernel raises
    /// while the site is attached.
    pub ref_ctr_offset: Option<u64>,
    /// The counter its hits are added to (the link's cookie for the site).
    pub slot: u32,
}

impl MultiSite {
    /// The uprobe for `site` of the file at `path`, placed as a [`PerfCounter`]
    /// places it for `target` (see [`AttachPoint`]), counted in `slot`.
    ///
    /// [`PerfCounter`]: crate::PerfCounter
    pub fn at(
        site: &Site,
        point: AttachPoint,
        features: &KernelFeatures,
        path: &Path,
        slot: u32,
        target: Target,
    ) -> Result<MultiSite, Error> {
        let c_path = path_cstring(path)?;
        let uprobe = Uprobe::at(site, point, features, path, &c_path, target)?;
        Ok(MultiSite {
            offset: uprobe.offset,
            ref_ctr_offset: uprobe.ref_ctr_offset,
            slot,
        })
    }
}

/// One uprobe_multi link: closing its descriptor detaches its sites.
#[derive(Debug)]
struct Link {
    _fd: OwnedFd,
    path: PathBuf,
    sites: usize,
}

/// Counters for up to `slots` sites or probes, filled by one BPF program
/// attached with one uprobe_multi link per file.
///
/// Dropping it closes the links (the kernel removes every uprobe and lowers
/// the semaphores before `close` returns), then the program and the map.
#[derive(Debug)]
pub struct MultiCounter {
    // Declared first: dropped first.
    links: Vec<Link>,
    prog: OwnedFd,
    map: OwnedFd,
    slots: u32,
    cpus: usize,
}

impl MultiCounter {
    /// A counter with `slots` counters (at least 1) and no sites attached.
    pub fn new(slots: u32) -> Result<MultiCounter, BpfError> {
        let cpus = crate::cpus::possible_cpus().map_err(BpfError::Cpus)?;
        let map = create_counter_map(slots.max(1))?;
        let prog = load_count_program(map.as_fd())?;
        Ok(MultiCounter {
            links: vec![],
            prog,
            map,
            slots: slots.max(1),
            cpus,
        })
    }

    /// The number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Attaches `sites` of the file at `path` (an executable or shared
    /// library) with one link, counting the hits of one process, every
    /// thread of it ([`Target::Pid`]), or of every process that runs or maps
    /// the file, now or later ([`Target::AllProcesses`]). Either every site
    /// is attached or none. Attaching no sites does nothing.
    pub fn attach(
        &mut self,
        path: impl AsRef<Path>,
        sites: &[MultiSite],
        target: Target,
    ) -> Result<(), BpfError> {
        let path = path.as_ref();
        if sites.is_empty() {
            return Ok(());
        }
        if let Some(s) = sites.iter().find(|s| s.slot >= self.slots) {
            return Err(BpfError::SlotOutOfRange {
                slot: s.slot,
                slots: self.slots,
            });
        }
        let triples: Vec<(u64, u64, u64)> = sites
            .iter()
            .map(|s| (s.offset, s.ref_ctr_offset.unwrap_or(0), u64::from(s.slot)))
            .collect();
        let fd = link_sites(self.prog.as_fd(), path, &triples, target)?;
        self.links.push(Link {
            _fd: fd,
            path: path.into(),
            sites: sites.len(),
        });
        Ok(())
    }

    /// The attached files and how many sites of each, in attach order.
    pub fn links(&self) -> impl Iterator<Item = (&Path, usize)> {
        self.links.iter().map(|l| (l.path.as_path(), l.sites))
    }

    /// Hits counted in `slot` so far (the sum over every CPU).
    pub fn count(&self, slot: u32) -> Result<u64, BpfError> {
        let mut values = vec![0u64; self.cpus];
        self.lookup(slot, &mut values)?;
        Ok(values.iter().fold(0u64, |sum, v| sum.wrapping_add(*v)))
    }

    /// Hits counted in every slot so far, indexed by slot.
    pub fn counts(&self) -> Result<Vec<u64>, BpfError> {
        let mut values = vec![0u64; self.cpus];
        (0..self.slots)
            .map(|slot| {
                self.lookup(slot, &mut values)?;
                Ok(values.iter().fold(0u64, |sum, v| sum.wrapping_add(*v)))
            })
            .collect()
    }

    /// Detaches everything (the same as dropping the counter).
    pub fn detach(self) {}

    /// Reads one value per possible CPU of `slot` into `values`.
    fn lookup(&self, slot: u32, values: &mut [u64]) -> Result<(), BpfError> {
        if slot >= self.slots {
            return Err(BpfError::SlotOutOfRange {
                slot,
                slots: self.slots,
            });
        }
        assert_eq!(values.len(), self.cpus);
        per_cpu_values(self.map.as_fd(), slot, values, "reading a counter")
    }
}

/// Attaches `prog` with one uprobe_multi link to sites of the file at
/// `path`, each given as its file offset, its semaphore's file offset (0:
/// none) and its cookie, for `target`.
pub(crate) fn link_sites(
    prog: BorrowedFd<'_>,
    path: &Path,
    sites: &[(u64, u64, u64)],
    target: Target,
) -> Result<OwnedFd, BpfError> {
    if sites.len() > MAX_SITES_PER_LINK {
        return Err(BpfError::TooManySites {
            path: path.into(),
            sites: sites.len(),
            max: MAX_SITES_PER_LINK,
        });
    }
    let c_path = path_cstring(path).map_err(|_| BpfError::NulInPath { path: path.into() })?;
    let offsets: Vec<u64> = sites.iter().map(|s| s.0).collect();
    let ref_ctrs: Vec<u64> = sites.iter().map(|s| s.1).collect();
    let cookies: Vec<u64> = sites.iter().map(|s| s.2).collect();
    let pid = match target {
        Target::Pid(pid) => pid,
        Target::AllProcesses => 0,
    };
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        path: c_path.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        ref_ctr_offsets: ref_ctrs.as_ptr() as u64,
        cookies: cookies.as_ptr() as u64,
        cnt: sites.len() as u32,
        pid,
        ..LinkCreateAttr::default()
    };
    // SAFETY: the path and the three arrays of `cnt` values live until the
    // call returns; the kernel copies them.
    unsafe { bpf_fd(BPF_LINK_CREATE, &mut attr) }.map_err(|e| link_error(e, path, sites.len(), pid))
}

/// Reads the per-CPU values of `key` in the per-CPU array `map` of u64 into
/// `values` (one per possible CPU).
pub(super) fn per_cpu_values(
    map: BorrowedFd<'_>,
    key: u32,
    values: &mut [u64],
    what: &str,
) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: values.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: the key is 4 bytes; the value buffer holds 8 bytes per
    // possible CPU, which is what a per-CPU array of u64 writes.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }.map_err(|e| BpfError::from_os(what, e))?;
    Ok(())
}

/// The error for a failed `BPF_LINK_CREATE`.
fn link_error(e: SyscallError, path: &Path, sites: usize, pid: u32) -> BpfError {
    match e.raw_os_error() {
        Some(libc::ESRCH) => BpfError::NoProcess(pid),
        Some(libc::ENOENT | libc::EACCES | libc::ENOTDIR | libc::EBADF) => BpfError::File {
            path: path.into(),
            source: e,
        },
        Some(libc::EINVAL | libc::EOPNOTSUPP)
            if matches!(uprobe_multi_support(), UprobeMulti::Absent(_)) =>
        {
            BpfError::Unsupported
        }
        _ => match BpfError::from_os("", e) {
            BpfError::Syscall { source, .. } => BpfError::Syscall {
                what: format!("attaching {sites} sites of {}", path.display()),
                source,
            },
            other => other,
        },
    }
}
