//! Sampling attach mode: every hit of a uprobe writes the user registers the
//! note's operands name, the pid and thread id, a timestamp and (for sites
//! that read memory) a copy of the user stack into a perf ring buffer, and
//! [`Sampler`] decodes each probe argument from its note operand.
//!
//! - A register operand is read at its width and sign from the sampled
//!   registers: exact.
//! - An immediate (`$5`) is the note's constant: exact.
//! - A float (`4f@`, `8f@`) is decoded as an `f32` or `f64` ([`Value::F32`],
//!   [`Value::F64`]); a 16 or 24-byte value (a struct or `__int128` passed
//!   by value) is kept as its bytes ([`Value::Bytes`]).
//! - An argument the note reader could not read ([`Operand::Unreadable`]:
//!   `%xmm0`, a stripped symbol) is [`Value::Unavailable`], with the reason.
//! - An indexed operand (`8@(%rdx,%rax,8)`) is computed from the sampled
//!   registers and read like a memory operand below; a symbol's operand
//!   (`sym(%rip)`) is at the symbol's address plus the load bias, which the
//!   sampled instruction pointer gives (the uprobe's address in the process
//!   minus its link-time address).
//! - A site with memory operands (`disp(%reg)`, symbols) or string arguments (see
//!   [`Sampler::string_arg`]) gets, when tracefs is mounted and writable, a
//!   fetch event: a uprobe event defined in `uprobe_events` whose fetch
//!   arguments make the kernel read them at the hit (`-8(%sp):u64`,
//!   `+0(%di):string`, a symbol as `@+FILE_OFFSET:u64`) into the
//!   sample's raw record: exact, including GCC's red-zone operands
//!   (`-8@-16(%rsp)`) and strings freed right after the probe. The kernel
//!   does not fault pages in: a string it could not read is read from the
//!   process instead (racy).
//! - Without tracefs (or with [`Sampler::kernel_fetch`] off), the sample
//!   carries a copy of the stack from the stack pointer upward
//!   (`PERF_SAMPLE_STACK_USER`): a memory operand or string inside it is read
//!   from the copy, exact (Rust probes stage `&str` copies on the probing
//!   frame's stack); anything else, the red zone below the stack pointer
//!   included, is read from the process with `process_vm_readv` when the
//!   sample is decoded, after the fact: racy, it may see a newer value or
//!   none (the process exited).
//!
//! All sites share one ring buffer per CPU (with [`Sampler::per_cpu`]) or
//! one per traced thread (the events are then per thread, on any CPU). Lost samples
//! (`PERF_RECORD_LOST`, written when a ring is full) are counted in
//! [`Sampler::lost`], never dropped silently.

use std::collections::HashSet;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::elf::note::Site;
use crate::engine::bpf::sampling::BpfSampling;
use crate::engine::perf::sampling::PerfSampling;
use crate::engine::{attach_with, path_cstring, Engine, Picked, SampleSite, Uprobe};
use crate::glob::glob_match;
use crate::sys::process;

mod decode;
mod plan;
pub(crate) mod value;

use crate::raw::RawHit;
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
    /// The engine, from the first attach on.
    engine: Option<Box<dyn Engine>>,
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
            picked: Picked {
                bpf: false,
                auto: false,
                fallback: None,
            },
            kernel_fetch: true,
            engine: None,
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
        self.picked = Picked {
            bpf: on,
            auto: false,
            fallback: None,
        };
        self
    }

    /// Samples with the engine `picked` ([`EngineChoice::for_sampling`]):
    /// as [`Sampler::bpf`] when it picked BPF, else with perf events; an
    /// automatic BPF attach that the kernel does not support falls back on
    /// perf at the first attach, and when that fails too the error says
    /// both (as [`Counter`](crate::Counter) does for counting).
    ///
    /// [`EngineChoice::for_sampling`]: crate::EngineChoice::for_sampling
    pub fn engine(mut self, picked: Picked) -> Sampler {
        self.picked = picked;
        self
    }

    /// Whether the sampler uses BPF: the engine that attached, or before
    /// the first attach the one picked ([`Sampler::engine`]).
    pub fn uses_bpf(&self) -> bool {
        match &self.engine {
            Some(engine) => engine.is_bpf(),
            None => self.picked.bpf,
        }
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
        for site in sites {
            let uprobe = Uprobe::at(site, self.point, &self.features, path, c_path, target)?;
            if !self.attached.insert((path.into(), uprobe.offset, target)) {
                continue; // one uprobe per address
            }
            let mut plan = self.plan(site);
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
            })
            .collect();
        if let Some(engine) = &mut self.engine {
            return engine.attach(path, &samples, target);
        }
        // The first attach picks the engine.
        let attach = |mut engine: Box<dyn Engine>| {
            engine.attach(path, &samples, target)?;
            Ok(engine)
        };
        let engine = attach_with(
            &self.picked,
            || attach(self.bpf_engine()?),
            || attach(self.perf_engine()),
        )?;
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
            self.features,
        ))
    }

    /// The BPF engine, as configured.
    fn bpf_engine(&self) -> Result<Box<dyn Engine>, Error> {
        crate::engine::perf::tracefs::remove_stale_events();
        let bytes = self.ring_pages as u64 * usdt_runtime::page_size();
        Ok(Box::new(BpfSampling::new(bytes)?))
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
            ..
        } = self;
        if let Some(engine) = engine {
            engine.drain(&mut |raw: Option<RawHit<'_>>| {
                *seen += 1;
                if let Some((plan, raw)) = raw.and_then(|raw| Some((plans.get(raw.site)?, raw))) {
                    pending.push(decode(plan, &raw));
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
