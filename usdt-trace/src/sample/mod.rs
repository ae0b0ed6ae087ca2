//! Sampling: every hit of a traced site becomes a [`Hit`] with each probe
//! argument decoded from its note operand. [`Sampler`] plans what each site
//! needs read at the hit ([`plan`]), hands the sites to the engine picked
//! (`crate::engine`), and decodes the engine-neutral raw hits it drains
//! ([`decode`]); lost hits are counted ([`Sampler::lost`]), never dropped
//! silently.
//!
//! What the engines read at the hit:
//!
//! - The BPF engine (`engine::bpf::sampling`, Linux 6.6+): one program on
//!   one uprobe_multi link per file writes a record into one BPF ring buffer
//!   that every CPU shares: the cookie naming the site, pid/tid, the time,
//!   the machine's `pt_regs`, and what each argument reads in memory
//!   (`base + index*scale + disp`, strings, the first bytes of a byte
//!   slice), read by the kernel at the hit: exact.
//! - The perf engine (`engine::perf::sampling`): one perf event per site,
//!   per CPU or per thread, into perf ring buffers. Its sample holds the
//!   registers the operands name; a site with memory operands or string
//!   arguments gets, where tracefs is writable, a fetch event whose fetch
//!   arguments make the kernel read them at the hit (`-8(%sp):u64`,
//!   `+0(%di):string`, a symbol as `@+FILE_OFFSET:u64`), exact, red zone
//!   included; without tracefs (or with [`Sampler::kernel_fetch`] off) the
//!   sample carries a copy of the stack from the stack pointer upward
//!   (`PERF_SAMPLE_STACK_USER`), and what lies outside it is read from the
//!   process with `process_vm_readv` when the hit is decoded: racy, it may
//!   see a newer value or none. The kernel does not fault pages in: a
//!   string it could not read is read from the process instead (racy).
//!
//! How operands become values, whichever engine read them:
//!
//! - A register operand is read at its width and sign: exact.
//! - An immediate (`$5`) is the note's constant: exact.
//! - A float (`4f@`, `8f@`) is decoded as an `f32` or `f64` ([`Value::F32`],
//!   [`Value::F64`]); a 16 or 24-byte value (a struct or `__int128` passed
//!   by value) is kept as its bytes ([`Value::Bytes`]).
//! - An argument the note reader could not read ([`Operand::Unreadable`]:
//!   `%xmm0`, a stripped symbol) is [`Value::Unavailable`], with the reason.
//! - An indexed operand (`8@(%rdx,%rax,8)`) is computed from the registers
//!   and read like a memory operand; a symbol's operand (`sym(%rip)`) is at
//!   the symbol's address plus the load bias, which the instruction pointer
//!   at the hit gives (the uprobe's address in the process minus its
//!   link-time address).
//!
//! [`Operand::Unreadable`]: crate::Operand::Unreadable

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::elf::note::Site;
use crate::engine::bpf::sampling::BpfSampling;
use crate::filter::{Binder, Filter};
use crate::engine::perf::sampling::PerfSampling;
use crate::engine::{attach_first, path_cstring, Engine, EngineKind, Picked, SampleSite, Uprobe};
use crate::glob::glob_match;
use crate::sys::process;

mod decode;
mod plan;
pub(crate) mod value;

use crate::raw::RawHit;
use crate::stack::Stacks;
use crate::{AttachPoint, Error, KernelFeatures, Target};
use decode::decode;
use plan::Plan;
pub use value::{Hit, Value, BYTES_FETCH, STRING_MAX};

/// The stack bytes each sample copies by default, for sites that read memory.
pub const DEFAULT_STACK_BYTES: u32 = 8192;

/// The ring buffer data pages per traced target by default (16 MiB with
/// 4 KiB pages), split between the CPUs when the events are per CPU.
pub const DEFAULT_RING_PAGES: usize = 4096;

/// Uprobes in sampling mode: attach with [`Sampler::attach`], then collect
/// decoded hits with [`Sampler::poll`] and [`Sampler::drain`]. Dropping it
/// detaches every uprobe (and the kernel lowers the semaphores again).
///
/// ```no_run
/// use std::time::Duration;
/// use usdt_trace::{read_file, AttachPoint, Sampler, Target};
///
/// let exe = "/usr/local/bin/server";
/// let sites = read_file(exe)?;
/// let mut sampler = Sampler::new(AttachPoint::Auto).string_arg("http:request_start", 1);
/// sampler.attach(exe, sites.iter().filter(|s| s.provider == "http"), Target::Pid(4242))?;
/// loop {
///     sampler.poll(Duration::from_millis(100), |hit| println!("{} {hit}", hit.probe()))?;
/// }
/// # Ok::<(), usdt_trace::Error>(())
/// ```
#[derive(Debug)]
pub struct Sampler {
    point: AttachPoint,
    features: KernelFeatures,
    per_cpu: bool,
    ring_pages: usize,
    stack_bytes: u32,
    strings: Vec<(String, usize)>,
    bytes: Vec<(String, usize)>,
    plans: Vec<Plan>,
    /// The uprobe addresses attached, per target: one uprobe per address.
    attached: HashSet<(PathBuf, u64, Target)>,
    /// The engine to attach with ([`Sampler::engine`], [`Sampler::bpf`]).
    picked: Picked,
    kernel_fetch: bool,
    /// The unwinder and symbolizer, with [`Sampler::stacks`].
    stacks: Option<Stacks>,
    /// The engine, from the first attach on.
    engine: Option<Box<dyn Engine>>,
    /// The filter every hit must pass ([`Sampler::filter`]), and its
    /// binder for each file attached (which read the file's records).
    filter: Option<Filter>,
    binders: HashMap<PathBuf, Binder>,
    /// Hits counted but never sampled (known after a drain).
    unsampled: u64,
    /// Sample records read so far.
    seen: u64,
    pending: Vec<Hit>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // Each engine releases its parts in its own order.
        self.engine = None;
    }
}

impl Sampler {
    /// A sampler that attaches at `point`, using this kernel's features.
    pub fn new(point: AttachPoint) -> Sampler {
        Sampler {
            point,
            features: crate::engine::features_for(point),
            per_cpu: false,
            ring_pages: DEFAULT_RING_PAGES,
            stack_bytes: DEFAULT_STACK_BYTES,
            strings: vec![],
            bytes: vec![],
            plans: vec![],
            attached: HashSet::new(),
            picked: Picked::only(EngineKind::Perf),
            kernel_fetch: true,
            stacks: None,
            engine: None,
            filter: None,
            binders: HashMap::new(),
            unsampled: 0,
            seen: 0,
            pending: vec![],
        }
    }

    /// Opens the events of a [`Target::Pid`] per CPU, sharing one ring per
    /// CPU with the other threads attached, instead of one event (and one
    /// ring) per thread: for many threads.
    ///
    /// A uprobe perf event samples only the thread it was opened for. The
    /// events are never inherited by threads or children the target starts
    /// later: the kernel would set up each inherited uprobe event again,
    /// reading its path through a pointer into this process from the new
    /// task, and fail the traced program's `fork` or `pthread_create` with
    /// `EFAULT`. Attach to new threads as they appear
    /// ([`process_threads`](crate::process_threads)).
    pub fn per_cpu(mut self, per_cpu: bool) -> Sampler {
        self.per_cpu = per_cpu;
        self
    }

    /// Samples with a BPF program attached by one uprobe_multi link per
    /// file (Linux 6.6 or later; see [`crate::bpf::uprobe_multi_support`]),
    /// instead of perf events: a [`Target::Pid`] is then every thread of
    /// the process, those it starts later included, from their first
    /// instruction; the program reads memory operands, strings and byte
    /// slices at the hit (tracefs is not used); every CPU writes into one
    /// ring of [`Sampler::ring_pages`] pages. Hits the full ring could not
    /// take are counted in [`Sampler::lost`].
    pub fn bpf(mut self, on: bool) -> Sampler {
        self.picked = Picked::only(match on {
            true => EngineKind::Bpf,
            false => EngineKind::Perf,
        });
        self
    }

    /// Samples with the engines `picked` ([`EngineChoice::for_sampling`]),
    /// the first the kernel supports: as [`Sampler::bpf`] for BPF, else
    /// with perf events; an automatic BPF attach that the kernel does not
    /// support falls back on perf at the first attach, and when that fails
    /// too the error says both (as [`Counter`](crate::Counter) does for
    /// counting).
    ///
    /// [`EngineChoice::for_sampling`]: crate::EngineChoice::for_sampling
    pub fn engine(mut self, picked: Picked) -> Sampler {
        self.picked = picked;
        self
    }

    /// The engine the sampler uses: the one that attached, or before the
    /// first attach the first picked ([`Sampler::engine`]).
    pub fn engine_kind(&self) -> Option<EngineKind> {
        match &self.engine {
            Some(engine) => Some(engine.kind()),
            None => self.picked.first(),
        }
    }

    /// Whether the sampler uses BPF ([`Sampler::engine_kind`]).
    pub fn uses_bpf(&self) -> bool {
        self.engine_kind() == Some(EngineKind::Bpf)
    }

    /// The data pages of ring buffer per traced target (rounded up to a power
    /// of two): one ring of that size, or one per CPU sharing it (at least
    /// 256 pages each) when the events are per CPU.
    pub fn ring_pages(mut self, pages: usize) -> Sampler {
        self.ring_pages = pages.max(1);
        self
    }

    /// How many bytes of user stack each sample copies, for sites with
    /// memory operands or string arguments (rounded down to a multiple of 8;
    /// the kernel also caps it so that a sample stays under 64 KiB).
    pub fn stack_bytes(mut self, bytes: u32) -> Sampler {
        self.stack_bytes = bytes & !7;
        self
    }

    /// Reads argument `index` (from 0) of the probes matching `probe_glob`
    /// (`provider:name`, with `*` and `?`) as a pointer to a NUL-terminated
    /// string. Applies to sites attached afterwards.
    pub fn string_arg(mut self, probe_glob: &str, index: usize) -> Sampler {
        self.add_string_arg(probe_glob, index);
        self
    }

    /// [`Sampler::string_arg`] on a sampler in use: for sites attached
    /// afterwards.
    pub fn add_string_arg(&mut self, probe_glob: &str, index: usize) {
        self.strings.push((probe_glob.into(), index));
    }

    /// Reads argument `index` of the probes matching `probe_glob` as the
    /// address of a byte slice (whose length is argument `index + 1`): the
    /// first [`BYTES_FETCH`] bytes there are read at the hit, and the
    /// argument's value is those bytes ([`Value::Str`], not cut to the
    /// length: bytes past the slice are whatever follows it, or the
    /// argument stays the address when they cannot be read).
    pub fn bytes_arg(mut self, probe_glob: &str, index: usize) -> Sampler {
        self.add_bytes_arg(probe_glob, index);
        self
    }

    /// [`Sampler::bytes_arg`] on a sampler in use: for sites attached
    /// afterwards.
    pub fn add_bytes_arg(&mut self, probe_glob: &str, index: usize) {
        self.bytes.push((probe_glob.into(), index));
    }

    /// Whether the kernel reads memory operands and strings at the hit,
    /// through a fetch event, a tracefs uprobe event with fetch arguments
    /// (the default, when tracefs is mounted and writable): exact. Otherwise, or when
    /// tracefs refuses, they are read from the stack copy and the process.
    pub fn kernel_fetch(mut self, on: bool) -> Sampler {
        self.kernel_fetch = on;
        self
    }

    /// Samples only the hits for which `filter` holds, on the sites
    /// attached afterwards (each site's names bound by its probe's
    /// signature: the filter's signatures and the file's records; a name a
    /// probe does not have is an error at attach). The BPF engine runs it
    /// in its program, before it takes a record: a hit that fails it costs
    /// no ring space. The perf engine samples every hit and the sampler
    /// drops those that fail it, decoded, here: they take ring space (and
    /// may be lost when the ring is full) all the same.
    pub fn filter(mut self, filter: Filter) -> Sampler {
        self.filter = Some(filter);
        self
    }

    /// Gives each hit its user stack ([`Hit::stack`]), unwound and
    /// symbolized in this process ([`Stack`](crate::Stack)): every sample then copies the
    /// instruction, stack and frame pointers (and aarch64's link register)
    /// and [`Sampler::stack_bytes`] of the stack, which the DWARF call
    /// frame information of each file the process maps unwinds (no frame
    /// pointers needed): perf's `PERF_SAMPLE_STACK_USER`, or the BPF
    /// program's copy with `bpf_probe_read_user`. On x86-64 and aarch64
    /// only: elsewhere (riscv64) the attach is refused in one sentence
    /// ([`Error::Unsupported`](crate::Error::Unsupported)). Set before the
    /// first attach.
    pub fn stacks(mut self, on: bool) -> Sampler {
        self.stacks = on.then(Stacks::default);
        self
    }

    /// With [`Sampler::stacks`], reads again the memory maps of the
    /// processes attached by pid, which stacks are unwound with: for a
    /// tracer to call while a process is stopped at an exec, its new
    /// program mapped (they are read at every poll too, but a program that
    /// ends between two polls leaves its hits to the maps read last).
    pub fn refresh_stacks(&mut self) {
        if let Some(stacks) = &mut self.stacks {
            stacks.new_round();
        }
    }

    /// Samples lost so far because a ring buffer was full: the kernel's
    /// `PERF_RECORD_LOST` counts, and after [`Sampler::drain`] also the hits
    /// the events counted for which no sample arrived (the kernel writes a
    /// lost record only when a later sample finds room, which may never
    /// come).
    pub fn lost(&self) -> u64 {
        self.engine
            .as_ref()
            .map_or(0, |e| e.lost())
            .max(self.unsampled)
    }

    /// How many sites are attached.
    pub fn site_count(&self) -> usize {
        self.plans.len()
    }

    /// Attaches one sampling uprobe per site of the file at `path` (per CPU
    /// with [`Sampler::per_cpu`] or for [`Target::AllProcesses`]). Either every site is
    /// attached or, on error, none of them.
    pub fn attach<'a>(
        &mut self,
        path: impl AsRef<Path>,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
    ) -> Result<(), Error> {
        if self.stacks.is_some() {
            crate::stack::supported()?;
        }
        let path = path.as_ref();
        let c_path = path_cstring(path)?;
        let first = self.plans.len();
        let attached = self.attached.clone();
        let result = self.attach_sites(path, &c_path, sites, target);
        if result.is_err() {
            self.attached = attached;
            self.plans.truncate(first);
        }
        result
    }

    fn attach_sites<'a>(
        &mut self,
        path: &Path,
        c_path: &CString,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
    ) -> Result<(), Error> {
        let first = self.plans.len();
        let mut chosen = vec![];
        if let Some(filter) = &self.filter {
            if !self.binders.contains_key(path) {
                self.binders.insert(path.into(), filter.binder(path));
            }
        }
        let binder = self.binders.get(path);
        for site in sites {
            let uprobe = Uprobe::at(site, self.point, &self.features, path, c_path, target)?;
            if !self.attached.insert((path.into(), uprobe.offset, target)) {
                continue; // one uprobe per address
            }
            let mut plan = self.plan(site);
            if let Some(binder) = &binder {
                let filter = binder.site(site)?;
                // Its strings are read at the hit, for the sampler to
                // test them where the engine does not.
                for i in &filter.strings {
                    if let Some(s) = plan.strings.get_mut(*i) {
                        *s = true;
                    }
                }
                plan.filter = Some(filter);
            }
            let from_location = uprobe
                .offset
                .wrapping_sub(site.location_offset.unwrap_or(0));
            plan.attach_addr = site.location.wrapping_add(from_location);
            self.plans.push(plan);
            chosen.push((site, uprobe));
        }
        if chosen.is_empty() {
            return Ok(());
        }
        let samples: Vec<SampleSite<'_>> = chosen
            .into_iter()
            .zip(&self.plans[first..])
            .enumerate()
            .map(|(k, ((site, uprobe), plan))| SampleSite {
                index: first + k,
                site,
                uprobe,
                args: &plan.args,
                strings: &plan.strings,
                bytes: &plan.bytes,
                attach_addr: plan.attach_addr,
                filter: plan.filter.as_ref(),
            })
            .collect();
        if let (Some(stacks), Target::Pid(pid)) = (&mut self.stacks, target) {
            // Its files as mapped now: a process that exits before the
            // first poll still has its stacks unwound.
            stacks.watch(crate::process::thread_group(pid).unwrap_or(pid));
        }
        if let Some(engine) = &mut self.engine {
            return engine.attach(path, &samples, target);
        }
        // The first attach picks the engine.
        let attach = |mut engine: Box<dyn Engine>| {
            engine.attach(path, &samples, target)?;
            Ok(engine)
        };
        let engine = attach_first(&self.picked.engines, |kind| match kind {
            EngineKind::Bpf => attach(self.bpf_engine()?),
            EngineKind::Perf => attach(self.perf_engine()),
        })?;
        self.engine = Some(engine);
        Ok(())
    }

    /// How to decode the hits of `site`: its string and byte-slice
    /// arguments as asked for.
    fn plan(&self, site: &Site) -> Plan {
        let probe = site.probe();
        let marked = |globs: &[(String, usize)]| -> Vec<bool> {
            (0..site.args.len())
                .map(|i| globs.iter().any(|(g, n)| *n == i && glob_match(g, &probe)))
                .collect()
        };
        Plan::new(site, marked(&self.strings), marked(&self.bytes))
    }

    /// The perf engine, as configured.
    fn perf_engine(&self) -> Box<dyn Engine> {
        Box::new(PerfSampling::new(
            self.ring_pages,
            self.kernel_fetch,
            self.per_cpu,
            self.stack_bytes,
            self.stacks.is_some(),
            self.features,
        ))
    }

    /// The BPF engine, as configured.
    fn bpf_engine(&self) -> Result<Box<dyn Engine>, Error> {
        crate::engine::perf::tracefs::remove_stale_events();
        let bytes = self.ring_pages as u64 * usdt_runtime::page_size();
        let stack_bytes = match self.stacks {
            Some(_) => self.stack_bytes,
            None => 0,
        };
        Ok(Box::new(BpfSampling::new(bytes, stack_bytes)?))
    }

    /// Waits up to `timeout` for a ring buffer to fill past its watermark,
    /// then decodes what the rings hold; calls `each` per hit in time order.
    /// Hits newer than the moment the rings were read are held back for the
    /// next call, so that hits from different CPUs come out in order.
    /// Returns how many hits were passed on.
    pub fn poll(&mut self, timeout: Duration, each: impl FnMut(Hit)) -> Result<usize, Error> {
        let mut fds: Vec<libc::pollfd> = self
            .engine
            .as_ref()
            .map_or(vec![], |e| e.poll_fds())
            .into_iter()
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        if let Err(e) = process::poll(&mut fds, ms) {
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::Syscall {
                    what: "waiting for samples".into(),
                    source: e,
                });
            }
        }
        Ok(self.collect(false, each))
    }

    /// Decodes everything the rings hold now, held-back hits included, and
    /// calls `each` per hit in time order (use it once the traced process
    /// has exited). Returns how many hits were passed on.
    pub fn drain(&mut self, each: impl FnMut(Hit)) -> usize {
        let n = self.collect(true, each);
        // Every hit counts, sampled or not: what the events counted beyond
        // the hits decoded was lost.
        let counted = self.engine.as_ref().and_then(|e| e.counted()).unwrap_or(0);
        self.unsampled = self.unsampled.max(counted.saturating_sub(self.seen));
        n
    }

    fn collect(&mut self, all: bool, mut each: impl FnMut(Hit)) -> usize {
        let cutoff = monotonic_ns();
        let Sampler {
            engine,
            plans,
            seen,
            pending,
            stacks,
            ..
        } = self;
        if let Some(stacks) = stacks.as_mut() {
            stacks.new_round();
        }
        if let Some(engine) = engine {
            // BPF runs the filters at the hit; perf samples every hit.
            let filtered = engine.kind() == EngineKind::Bpf;
            engine.drain(&mut |raw: Option<RawHit<'_>>| {
                *seen += 1;
                if let Some((plan, raw)) = raw.and_then(|raw| Some((plans.get(raw.site)?, raw))) {
                    let mut hit = decode(plan, &raw);
                    if !filtered && !plan.passes(&hit) {
                        return;
                    }
                    if let Some(stacks) = stacks.as_mut() {
                        hit.stack = stacks.stack(raw.pid, &raw.regs, raw.stack);
                    }
                    pending.push(hit);
                }
            });
        }
        pending.sort_by_key(|h| h.time_ns);
        let keep = if all {
            0
        } else {
            pending.len() - pending.partition_point(|h| h.time_ns < cutoff)
        };
        let ready = pending.len() - keep;
        for hit in pending.drain(..ready) {
            each(hit);
        }
        ready
    }

    /// Detaches every uprobe now (the kernel lowers the semaphores before
    /// this returns), keeping the count [`Sampler::lost`] reports. Hits
    /// still in the rings are gone: [`Sampler::drain`] first.
    pub fn detach(&mut self) {
        self.unsampled = self.lost();
        self.engine = None;
        self.attached.clear();
    }

    /// The size in bytes of each ring buffer's data area.
    pub fn ring_bytes(&self) -> u64 {
        self.engine.as_ref().map_or(0, |e| e.ring_bytes())
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::decode::*;
    use super::plan::*;
    use super::*;

    #[test]
    fn integers_at_their_size_and_sign() {
        assert_eq!(int_value(0xff, 1, true), -1);
        assert_eq!(int_value(0x1ff, 1, false), 255);
        assert_eq!(int_value(0x8000, 2, true), i16::MIN as i128);
        assert_eq!(int_value(u64::MAX, 8, false), u64::MAX as i128);
        assert_eq!(int_value(u64::MAX, 8, true), -1);
        assert_eq!(int_value(0xffff_ffff_8000_0000, 4, true), i32::MIN as i128);
        assert_eq!(int_value(0xdead_0000_0005, 4, false), 5);
    }

    #[test]
    fn values_print_quoted_and_escaped() {
        let s = Value::Str {
            bytes: b"a\"b\\\n\x01\xff".to_vec(),
            truncated: true,
        };
        assert_eq!(s.to_string(), r#""a\"b\\\n\x01\xff"..."#);
        assert_eq!(Value::from(-5i8).to_string(), "-5");
        assert_eq!(Value::from(u64::MAX).to_string(), "18446744073709551615");
        assert_eq!(Value::Unreadable(16).to_string(), "<unreadable 0x10>");
    }

    fn site(args: &str, machine: crate::Machine) -> Site {
        Site::with_args(args, machine)
    }

    #[test]
    fn arguments_decode_from_registers_by_name() {
        let site = site("-1@%r8 2@%ah 4@8(%rdi) 8@$7", crate::Machine::X86_64);
        let plan = Plan::new(&site, vec![false; 4], vec![]);
        let stack = [0u8, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff];
        let mut regs = crate::raw::Regs::default();
        for (reg, v) in [
            (crate::Reg64::Rax, 0x1234),
            (crate::Reg64::Rdi, 0x1000),
            (crate::Reg64::Rsp, 0x1000),
            (crate::Reg64::R8, 0x80),
        ] {
            regs.push(reg, v);
        }
        let cx = Context {
            pid: 0,
            regs: &regs,
            sp: 0x1000,
            stack: &stack,
        };
        let values: Vec<Value> = (0..4)
            .map(|i| decode_arg(&plan, &cx, Default::default(), i))
            .collect();
        assert_eq!(
            values,
            [
                Value::Int(-128),
                Value::Int(0x12),
                Value::Int(0xffff_fffe),
                Value::Int(7)
            ]
        );
    }

    /// The decoder finds another machine's stack pointer in its table: a
    /// memory operand off `sp` reads the stack copy, registers are read at
    /// the note's size and sign.
    #[test]
    fn each_machine_decodes_from_its_own_registers() {
        use crate::Reg64;
        let mut stack = vec![0u8; 32];
        stack[16..20].copy_from_slice(&(-5i32).to_le_bytes());
        stack[24..32].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        for (args, machine, regs) in [
            (
                "-8@x0 -4@[sp, 16] 4@w3 1@x4 8@[x5, 8] -4@-42",
                crate::Machine::Aarch64,
                [
                    (Reg64::X(0), u64::MAX),
                    (Reg64::Sp, 0x7ff0),
                    (Reg64::X(3), 0x1_ffff_fffe),
                    (Reg64::X(4), 0x1ff),
                    (Reg64::X(5), 0x7ff0 + 16),
                ],
            ),
            (
                "-8@a0 -4@16(sp) 4@a3 1@t4 8@8(s0) -4@-42",
                crate::Machine::Riscv64,
                [
                    (Reg64::Riscv(10), u64::MAX),
                    (Reg64::Riscv(2), 0x7ff0),
                    (Reg64::Riscv(13), 0x1_ffff_fffe),
                    (Reg64::Riscv(29), 0x1ff),
                    (Reg64::Riscv(8), 0x7ff0 + 16),
                ],
            ),
        ] {
            let site = site(args, machine);
            let plan = Plan::new(&site, vec![false; 6], vec![]);
            let mut raw = RawHit {
                stack: &stack,
                ..RawHit::default()
            };
            for (reg, v) in regs {
                raw.regs.push(reg, v);
            }
            let hit = decode(&plan, &raw);
            assert_eq!(
                hit.args,
                [
                    Value::Int(-1),
                    Value::Int(-5),
                    Value::Int(0xffff_fffe),
                    Value::Int(0xff),
                    Value::Int(0x1122_3344_5566_7788),
                    Value::Int(-42)
                ],
                "{machine}"
            );
        }
    }
}
