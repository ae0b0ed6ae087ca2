//! Attaching uprobes to probe sites with `perf_event_open` on the uprobe PMU,
//! and counting their hits.
//!
//! One perf event per site (per CPU when tracing every process), with the
//! semaphore's file offset in `ref_ctr_offset` so that the kernel raises the
//! semaphore while attached. Dropping a [`PerfCounter`] closes the events: the
//! kernel removes the uprobes and lowers the semaphores back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::elf::note::Site;
use crate::perf;
use crate::{Error, KernelFeatures, SiteLayout, UprobeSyscall};

/// Where on a site the uprobe goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttachPoint {
    /// Follow the table in the README's "The probe site": Location + 1 when
    /// this kernel optimizes the site's long nop and a child forked after an
    /// optimized hit survives (the fork self-test, [`fork_test`](crate::fork_test)),
    /// or the program carries usdt-runtime's fork guard (its marker,
    /// [`read_fork_guard`](crate::read_fork_guard)), and the speed self-test
    /// did not find the trap faster ([`auto_delta`](crate::auto_delta));
    /// otherwise Location.
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
    /// One process (and, with [`PerfCounter::inherit`], the children it starts
    /// after attaching).
    Pid(u32),
    /// Every process that runs the file, one event per CPU.
    AllProcesses,
}

/// How far past Location the uprobe goes for `point` on this kernel: 0, 1,
/// or 6 (the nop10 of a `nop; nop5; nop10` site).
///
/// [`AttachPoint::Auto`] follows [`auto_delta`](crate::auto_delta) with what
/// `features` says (the errno and the fork verdict), with no speed measured
/// and no fork guard; a tracer's own attach also weighs the program's fork
/// guard and the speed self-test ([`caps`](crate::caps)).
pub fn attach_delta(
    site: &Site,
    point: AttachPoint,
    features: &KernelFeatures,
) -> Result<u64, Error> {
    match point {
        AttachPoint::Nop => Ok(0),
        AttachPoint::Auto => Ok(crate::auto_delta(
            site.layout,
            &crate::AutoInputs::of(features),
        )),
        // Kernels before the 7.3 series refuse a uprobe on nop10 (its CS
        // prefix) when they install it, which for a program not yet started
        // is silent: say so now.
        AttachPoint::Next
            if site.layout == SiteLayout::NopNop10
                && features.uprobe_syscall != UprobeSyscall::OptimizesNop10 =>
        {
            Err(Error::Nop10Refused {
                probe: site.probe(),
                location: site.location,
            })
        }
        // Both long nops: the one this kernel optimizes, else the nop5
        // (emulated since Linux 6.16).
        AttachPoint::Next if site.layout == SiteLayout::NopNop5Nop10 => {
            Ok(features.optimized_offset(site.layout).unwrap_or(1))
        }
        AttachPoint::Next if site.layout.has_long_nop() => Ok(1),
        AttachPoint::Next => Err(Error::NoLongNop {
            probe: site.probe(),
            location: site.location,
            layout: site.layout,
        }),
    }
}

/// The features a tracer attaching at `point` uses: the fork verdict is
/// needed (and the self-test run) only for [`AttachPoint::Auto`].
pub(crate) fn features_for(point: AttachPoint) -> KernelFeatures {
    match point {
        AttachPoint::Auto => crate::tracer_features(),
        _ => KernelFeatures::detect(),
    }
}

/// [`attach_delta`] as a tracer attaches `site` of the file at `path`: for
/// [`AttachPoint::Auto`], the fork guard's marker in that file (read only
/// where the kernel optimizes the site) and, where the kernel's table, the
/// fork verdict and the guard would take the long nop, the speed self-test
/// (run only then) decide too.
pub(crate) fn tracer_delta(
    site: &Site,
    point: AttachPoint,
    features: &KernelFeatures,
    path: &Path,
) -> Result<u64, Error> {
    if point != AttachPoint::Auto {
        return attach_delta(site, point, features);
    }
    let guarded = features.optimizes(site.layout) && crate::elf::forkguard::fork_guarded(path);
    Ok(crate::caps::auto_delta_here(site.layout, features, guarded))
}

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
        self.fds
            .iter()
            .try_fold(0u64, |sum, fd| Ok(sum.wrapping_add(read_count(fd)?)))
    }
}

/// A set of attached uprobes; dropping it detaches them all.
///
/// The events of one target (and CPU) form one perf group, created
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
            perf::enable(leader, true).map_err(|source| Error::Os {
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
        let cpus = match target {
            Target::Pid(_) => vec![-1],
            Target::AllProcesses => online_cpus(),
        };
        let before = self.sites.len();
        let (leaders, attached) = (self.leaders.clone(), self.attached.clone());
        let result = self.attach_sites(path, &c_path, sites, target, &cpus);
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
                    .map_err(|source| Error::Os {
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
        cpus: &[i32],
    ) -> Result<(), Error> {
        for site in sites {
            let uprobe = Uprobe::at(site, self.point, &self.features, path, c_path)?;
            if !self.attached.insert((path.into(), uprobe.offset, target)) {
                continue; // one uprobe per address
            }
            let mut fds = vec![];
            for (i, &cpu) in cpus.iter().enumerate() {
                let leader = self.leaders.get(&(target, cpu));
                let group = leader.map_or(-1, |&(s, f)| self.sites[s].fds[f].as_raw_fd());
                let fd = self
                    .open(&uprobe, target, cpu, group)
                    .map_err(|e| attach_error(e, path, site, target))?;
                if leader.is_none() {
                    self.leaders.insert((target, cpu), (self.sites.len(), i));
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
    ) -> io::Result<OwnedFd> {
        let inherit = self.inherit;
        open_uprobe_in(&self.features, uprobe, target, cpu, group, |attr| {
            attr.set_disabled(1);
            attr.set_inherit(inherit.into());
        })
    }
}

/// The path as the kernel takes it (`config1` of a uprobe event).
pub(crate) fn path_cstring(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::NulInPath { path: path.into() })
}

/// Opens one uprobe perf event; `customize` adjusts the attributes (sampling,
/// inheritance) before the call.
pub(crate) fn open_uprobe(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    target: Target,
    cpu: i32,
    customize: impl FnOnce(&mut perf::Attr),
) -> io::Result<OwnedFd> {
    open_uprobe_in(features, uprobe, target, cpu, -1, customize)
}

/// [`open_uprobe`] in the perf group led by `group` (-1: none).
pub(crate) fn open_uprobe_in(
    features: &KernelFeatures,
    uprobe: &Uprobe<'_>,
    target: Target,
    cpu: i32,
    group: i32,
    customize: impl FnOnce(&mut perf::Attr),
) -> io::Result<OwnedFd> {
    let pmu = features
        .uprobe_pmu_type
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
    let shift = features.ref_ctr_offset_shift.unwrap_or(32);
    let ref_ctr = match uprobe.ref_ctr_offset {
        Some(off) if features.kernel_semaphores => {
            // The field holds the bits from `shift` up to 63.
            if shift >= 64 || off.checked_shl(shift.into()).map(|v| v >> shift) != Some(off) {
                return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
            }
            off << shift
        }
        _ => 0,
    };
    let mut attr = perf::attr(pmu);
    attr.config = ref_ctr;
    // The uprobe PMU's config1 is the path, config2 the file offset.
    attr.config1 = uprobe.path.as_ptr() as u64;
    attr.config2 = uprobe.offset;
    customize(&mut attr);
    // SAFETY: the path `config1` points to lives until the call returns.
    unsafe { perf_event_open_in(&attr, target, cpu, group) }
}

/// `perf_event_open(attr, pid of target, cpu, no group, CLOEXEC)`.
///
/// # Safety
/// Every pointer in `attr` (such as a uprobe's path in `config1`) must be
/// valid until the call returns.
pub(crate) unsafe fn perf_event_open(
    attr: &perf::Attr,
    target: Target,
    cpu: i32,
) -> io::Result<OwnedFd> {
    // SAFETY: the caller's contract.
    unsafe { perf_event_open_in(attr, target, cpu, -1) }
}

/// [`perf_event_open`] in the group led by the event `group` (-1: none).
///
/// # Safety
/// As for [`perf_event_open`].
pub(crate) unsafe fn perf_event_open_in(
    attr: &perf::Attr,
    target: Target,
    cpu: i32,
    group: i32,
) -> io::Result<OwnedFd> {
    let pid = match target {
        Target::Pid(pid) => pid as libc::pid_t,
        Target::AllProcesses => -1,
    };
    // SAFETY: the caller's contract.
    unsafe { perf::open(attr, pid, cpu, group) }
}

pub(crate) struct Uprobe<'a> {
    pub(crate) path: &'a CString,
    pub(crate) offset: u64,
    pub(crate) ref_ctr_offset: Option<u64>,
}

impl<'a> Uprobe<'a> {
    /// The uprobe for `site` of the file at `path` (`c_path` as the kernel
    /// takes it), at `point` on this kernel, with the site's semaphore.
    pub(crate) fn at(
        site: &Site,
        point: AttachPoint,
        features: &KernelFeatures,
        path: &Path,
        c_path: &'a CString,
    ) -> Result<Uprobe<'a>, Error> {
        let delta = tracer_delta(site, point, features, path)?;
        let location = site.location_offset.ok_or_else(|| Error::NotLoaded {
            probe: site.probe(),
            location: site.location,
            path: path.into(),
        })?;
        Ok(Uprobe {
            path: c_path,
            offset: location + delta,
            ref_ctr_offset: site.semaphore_offset,
        })
    }
}

fn read_count(fd: &OwnedFd) -> Result<u64, Error> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes; `fd` is an open perf event.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n != 8 {
        let source = if n < 0 {
            io::Error::last_os_error()
        } else {
            io::ErrorKind::UnexpectedEof.into()
        };
        return Err(Error::Os {
            what: "reading a uprobe's count".into(),
            source,
        });
    }
    Ok(u64::from_ne_bytes(buf))
}

/// The message for a failed `perf_event_open`.
pub(crate) fn attach_error(e: io::Error, path: &Path, site: &Site, target: Target) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Error::NotPermitted(
            "attaching uprobes is not permitted: run as root, or with CAP_PERFMON and CAP_SYS_ADMIN".into(),
        ),
        Some(libc::ESRCH) => match target {
            Target::Pid(pid) => Error::NoProcess(pid),
            Target::AllProcesses => Error::Os { what: "attaching a uprobe".into(), source: e },
        },
        Some(libc::ENOENT) => Error::Io { path: path.into(), source: e },
        Some(libc::ENODEV) => Error::NoUprobePmu,
        Some(libc::EOVERFLOW) => Error::SemaphoreOutOfRange { probe: site.probe() },
        // ENOTSUPP (the kernel's own 524): an instruction uprobes refuse, such
        // as a nop10 on a kernel that does not optimize nop10.
        Some(524) => Error::InstructionRefused {
            probe: site.probe(),
            location: site.location,
            path: path.into(),
        },
        _ => Error::Os {
            what: format!("attaching a uprobe to {} at {:#x} in {}", site.probe(), site.location, path.display()),
            source: e,
        },
    }
}

/// The online CPUs (`/sys/devices/system/cpu/online`, such as `0-3,6`).
pub fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = parse_cpu_list(&text);
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n as i32).collect();
    }
    cpus
}

pub(crate) fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut cpus = vec![];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        match (a.parse::<i32>(), b.parse::<i32>()) {
            (Ok(a), Ok(b)) if a <= b && b - a < 65536 => cpus.extend(a..=b),
            _ => return vec![],
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(layout: SiteLayout) -> Site {
        Site {
            provider: "p".into(),
            name: "n".into(),
            location: 0x1000,
            location_offset: Some(0x1000),
            note_base: 0,
            stapsdt_base: None,
            semaphore: None,
            semaphore_offset: None,
            args_text: String::new(),
            args: vec![],
            layout,
            bytes: vec![],
        }
    }

    fn kernel(uprobe_syscall: UprobeSyscall) -> KernelFeatures {
        KernelFeatures {
            uprobe_syscall,
            uprobe_pmu_type: Some(8),
            kernel_semaphores: true,
            ref_ctr_offset_shift: Some(32),
            optimized_fork: crate::OptimizedFork::ChildSurvives,
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
        for fork in [
            crate::OptimizedFork::ChildDies,
            crate::OptimizedFork::Untested,
        ] {
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

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,7"), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpu_list("x"), Vec::<i32>::new());
    }
}
