//! The engines that attach uprobes to probe sites and read their hits:
//! [`perf`] (one perf event per site, tracefs fetch events for memory
//! operands) and [`bpf`] (one uprobe_multi link per file and programs
//! assembled here). What both share is here: where on a site the uprobe
//! goes ([`AttachPoint`], [`attach_delta`]), whose hits it sees
//! ([`Target`]), the uprobe a site gets ([`Uprobe`]), and the interface
//! both engines implement, for sampling ([`Engine`]) and for counting
//! ([`Counting`]); which engine attaches is chosen once for both
//! ([`choice`]).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::elf::arg::{Arg, Machine};
use crate::elf::note::Site;
use crate::elf::sites::SiteCheck;
use crate::error::{AttachCause, AttachError};
use crate::{Error, KernelFeatures, SiteLayout, UprobeSyscall};

pub mod bpf;
mod choice;
pub(crate) mod perf;

pub(crate) use choice::attach_with;
pub use choice::{Counter, EngineChoice, Picked};

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
    /// Whether this is the BPF engine.
    fn is_bpf(&self) -> bool;
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
    /// Whether this is the BPF engine.
    fn is_bpf(&self) -> bool;
}

/// The register table of `site`'s machine, for an engine that reads
/// registers at its hits: only the machine this program runs on, whose
/// registers the kernel gives a uprobe (a file of another machine runs
/// here only under an emulator, whose registers no uprobe sees).
pub(crate) fn site_arch(site: &Site) -> Result<&'static Arch, Error> {
    match Machine::host() {
        Some(host) if host == site.machine => Ok(host.arch()),
        host => Err(Error::Unsupported(format!(
            "{} sites ({}) on this {}machine",
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
        "registers that {} does not have (in the arguments of {})",
        site.machine,
        site.probe()
    ))
}

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
    /// One process (and, with [`PerfCounter::inherit`](crate::PerfCounter::inherit), the children it starts
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
    AttachError::of(Path::new(""), site, cause)
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
    Ok(crate::caps::auto_delta_here(site.layout, features, guarded))
}

/// The path as the kernel takes it (`config1` of a uprobe event).
pub(crate) fn path_cstring(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::NulInPath { path: path.into() })
}

/// One uprobe: the file as the kernel takes it, the file offset of the
/// instruction, and the semaphore's file offset.
#[derive(Debug)]
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
        target: Target,
    ) -> Result<Uprobe<'a>, Error> {
        if let SiteCheck::Refused(why) = &site.check {
            return Err(AttachError::of(
                path,
                site,
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
        let location = site
            .location_offset
            .ok_or_else(|| AttachError::of(path, site, AttachCause::NotLoaded))?;
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

    fn site(layout: SiteLayout) -> Site {
        Site::at_0x1000(layout)
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
}
