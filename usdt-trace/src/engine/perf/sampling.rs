//! Sampling with perf events: one uprobe event per site (per CPU, or per
//! thread), or a tracefs fetch event whose fetch arguments read memory
//! operands at the hit, writing samples into perf rings shared per CPU or
//! per thread. What a sample means is for the caller to decode: this
//! module hands over the raw records, with the event ids that name their
//! sites.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::ring::{Ring, RECORD_LOST, RECORD_SAMPLE};
use super::tracefs::{data_loc_string, FetchEvent, FetchPlan, Field};
use super::{attach_error, open_uprobe, perf_event_open};
use crate::arch::Arch;
use crate::cpus::online_cpus;
use crate::elf::arg::{Arg, Operand};
use crate::elf::note::Site;
use crate::engine::{
    site_arch, unsupported_registers, Engine, EngineKind, SampleSite, Target, Uprobe,
};
use crate::raw::{Fetched, Fields, RawHit};
use crate::sys::perf::{
    self, SAMPLE_IDENTIFIER, SAMPLE_RAW, SAMPLE_REGS_USER, SAMPLE_STACK_USER, SAMPLE_TID,
    SAMPLE_TIME, TYPE_TRACEPOINT,
};
use crate::sys::SyscallError;
use crate::{Error, KernelFeatures};

/// The fewest data pages of a per-CPU ring buffer.
const MIN_CPU_RING_PAGES: usize = 256;

/// One ring buffer and the event whose descriptor it is mapped from. A
/// per-CPU ring takes the samples of every task on its CPU; a ring of a
/// per-task event (CPU -1) only those of its task (the kernel's rule for
/// `PERF_EVENT_IOC_SET_OUTPUT`).
#[derive(Debug)]
struct Slot {
    target: Target,
    cpu: i32,
    owner: usize,
    ring: Ring,
}

/// What a site's samples carry: a fetch event's raw fields, and the
/// registers of `regs_mask` and a stack copy (either may be empty).
#[derive(Debug)]
struct PerfSite {
    arch: &'static Arch,
    args: usize,
    regs_mask: u64,
    stack_bytes: u32,
    fetch: Option<FetchPlan>,
}

/// One `PERF_RECORD_SAMPLE` (header included) as a raw hit: the registers
/// the site's mask asked for, by name, and its stack copy; or, from a
/// fetch event, the fields the kernel read.
fn raw_hit<'a>(
    ids: &HashMap<u64, usize>,
    sites: &HashMap<usize, PerfSite>,
    record: &'a [u8],
) -> Option<RawHit<'a>> {
    let mut f = Fields(record.get(8..)?);
    let index = *ids.get(&f.u64()?)?;
    let site = sites.get(&index)?;
    let pid = f.u32()?;
    let tid = f.u32()?;
    let time_ns = f.u64()?;
    let mut raw = RawHit {
        site: index,
        pid,
        tid,
        time_ns,
        ..RawHit::default()
    };
    if let Some(fetch) = &site.fetch {
        let size = f.u32()? as usize;
        let data = f.take(size)?;
        let field = |fl: Option<&Option<Field>>| {
            fl.copied()
                .flatten()
                .and_then(|fl| data.get(fl.offset..fl.offset + fl.size))
        };
        raw.fetched = (0..site.args)
            .map(|i| Fetched {
                value: field(fetch.values.get(i)),
                pointed: field(fetch.bytes.get(i)).or_else(|| {
                    let string = fetch.strings.get(i).copied().flatten()?;
                    data_loc_string(data, string)
                }),
            })
            .collect();
    }
    // The sampled registers come in perf's order (abi 0: none).
    if site.regs_mask != 0 && f.u64()? != 0 {
        for n in (0..64u32).filter(|n| site.regs_mask & (1 << n) != 0) {
            let value = f.u64()?;
            if let Some(reg) = site.arch.by_perf(n) {
                raw.regs.push(reg, value);
            }
        }
    }
    if site.stack_bytes > 0 {
        let size = f.u64()? as usize;
        if size > 0 {
            let data = f.take(size)?;
            let dyn_size = (f.u64()? as usize).min(size);
            raw.stack = &data[..dyn_size];
        }
    }
    Some(raw)
}

/// What the perf engine needs to know of a site it samples.
#[derive(Debug)]
pub(crate) struct SiteSampling<'a> {
    /// The registers of the site's machine.
    pub(crate) arch: &'static Arch,
    pub(crate) args: &'a [Arg],
    /// Which arguments are string pointers.
    pub(crate) strings: &'a [bool],
    /// Which arguments are the addresses of byte slices.
    pub(crate) bytes: &'a [bool],
    /// The uprobe's link-time address.
    pub(crate) attach_addr: u64,
    /// `sample_regs_user`.
    pub(crate) regs_mask: u64,
    /// `sample_stack_user` (0: no stack copy).
    pub(crate) stack_bytes: u32,
    /// Whether the site's arguments read memory (memory operands,
    /// strings, byte slices): through a fetch event, or from the stack
    /// copy and the process.
    pub(crate) memory: bool,
    /// Whether the samples carry what unwinding needs: the registers it
    /// starts from ([`Arch::unwind_registers`]) and a stack copy.
    pub(crate) stacks: bool,
}

impl<'a> SiteSampling<'a> {
    /// What the events of `s` sample: the registers its operands name
    /// (and the stack pointer), by the perf numbers of `arch` (its
    /// machine's table), and `stack_bytes` of stack for a site that reads
    /// memory (memory operands, strings, byte slices); with `stacks`, the
    /// registers unwinding starts from and the stack copy too. A register
    /// without a perf number always reads 0 (riscv64's `zero`).
    pub(crate) fn of(
        s: &SampleSite<'a>,
        arch: &'static Arch,
        stack_bytes: u32,
        stacks: bool,
    ) -> Result<SiteSampling<'a>, Error> {
        let perf = |reg| match arch.register(reg) {
            Some(row) => Ok(row.perf.map_or(0, |n| 1u64 << n)),
            None => Err(unsupported_registers(s.site)),
        };
        let mut mask = perf(arch.sp)?;
        if stacks {
            mask |= stack_mask(arch);
        }
        let marked = |flags: &[bool]| flags.iter().any(|f| *f);
        let mut memory = marked(s.strings) || marked(s.bytes);
        for arg in s.args {
            if matches!(
                arg.operand,
                Operand::Immediate(_) | Operand::Unreadable { .. }
            ) {
                continue;
            }
            memory |= !matches!(arg.operand, Operand::Register(_));
            for reg in arch.operand_registers(&arg.operand) {
                mask |= perf(reg)?;
            }
        }
        Ok(SiteSampling {
            arch,
            args: s.args,
            strings: s.strings,
            bytes: s.bytes,
            attach_addr: s.attach_addr,
            regs_mask: mask,
            stack_bytes: if memory || stacks { stack_bytes } else { 0 },
            memory,
            stacks,
        })
    }
}

/// The registers unwinding starts from, as the machine's table names them
/// ([`Arch::unwind_registers`]: the instruction, stack and frame pointers,
/// and the link register where the machine has one).
fn stack_mask(arch: &Arch) -> u64 {
    arch.unwind_registers()
        .filter_map(|reg| arch.register(reg)?.perf)
        .fold(0, |mask, n| mask | 1 << n)
}

/// The perf events, rings and fetch events of a sampler.
#[derive(Debug)]
pub(crate) struct PerfSampling {
    /// The ring data pages per traced target.
    pub(crate) ring_pages: usize,
    /// Whether to read memory operands through fetch events.
    pub(crate) kernel_fetch: bool,
    /// Events per CPU (else per thread, for a process).
    per_cpu: bool,
    /// The stack each sample of a site that reads memory copies.
    stack_bytes: u32,
    /// Whether every sample carries what unwinding its stack needs.
    stacks: bool,
    features: KernelFeatures,
    fetch_plans: HashMap<(PathBuf, u64), Option<(u64, FetchPlan)>>,
    /// The site (the caller's index) of each event id.
    ids: HashMap<u64, usize>,
    /// What each site's samples carry, by the caller's index.
    sites: HashMap<usize, PerfSite>,
    // Released in this order by `Drop`: unmap the rings, close the events,
    // then remove the fetch events they used (deleting a uprobe event still
    // in use by perf is refused, and has hung tracing on a kernel).
    slots: Vec<Slot>,
    fds: Vec<OwnedFd>,
    fetch_events: Vec<FetchEvent>,
    lost: u64,
}

impl Drop for PerfSampling {
    fn drop(&mut self) {
        // The order matters (see the fields), whatever the fields' order.
        self.slots.clear();
        self.fds.clear();
        self.fetch_events.clear();
    }
}

/// How far a sampler had got: what to roll back to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    fds: usize,
    slots: usize,
}

impl PerfSampling {
    /// Nothing attached yet; rings of `ring_pages` data pages per target,
    /// fetch events when `kernel_fetch`, `stack_bytes` of stack copied by
    /// each sample of a site that reads memory, or by every sample with
    /// `stacks`.
    pub(crate) fn new(
        ring_pages: usize,
        kernel_fetch: bool,
        per_cpu: bool,
        stack_bytes: u32,
        stacks: bool,
        features: KernelFeatures,
    ) -> PerfSampling {
        PerfSampling {
            ring_pages,
            kernel_fetch,
            per_cpu,
            stack_bytes,
            stacks,
            features,
            fetch_plans: HashMap::new(),
            ids: HashMap::new(),
            sites: HashMap::new(),
            slots: vec![],
            fds: vec![],
            fetch_events: vec![],
            lost: 0,
        }
    }

    /// Where things stand now.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            fds: self.fds.len(),
            slots: self.slots.len(),
        }
    }

    /// Closes what was opened since `mark`, for sites from `first_site` on.
    pub(crate) fn roll_back(&mut self, mark: Mark, first_site: usize) {
        self.slots.truncate(mark.slots);
        self.fds.truncate(mark.fds);
        self.ids.retain(|_, site| *site < first_site);
        self.sites.retain(|site, _| *site < first_site);
    }

    /// Enables the events opened since `mark`.
    pub(crate) fn enable_since(&self, mark: Mark) -> Result<(), SyscallError> {
        self.fds[mark.fds..]
            .iter()
            .try_for_each(|fd| perf::enable(fd, false))
    }

    /// Opens the events of one site (caller's index `index`) on `cpus`
    /// (-1: any CPU, for one thread), each routed to its ring; returns
    /// where a fetch event puts the values, when one is used.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attach_site(
        &mut self,
        features: &KernelFeatures,
        path: &Path,
        site: &Site,
        uprobe: &Uprobe<'_>,
        plan: &SiteSampling<'_>,
        index: usize,
        target: Target,
        cpus: &[i32],
    ) -> Result<Option<FetchPlan>, Error> {
        let fetch = match plan.memory && self.kernel_fetch {
            true => self.fetch_event(path, uprobe, plan, features.kernel_semaphores),
            false => None,
        };
        for &cpu in cpus {
            let fd = match &fetch {
                Some((id, _)) => self.open_fetch_event(*id, plan, target, cpu),
                None => self.open(features, uprobe, plan, target, cpu),
            }
            .map_err(|e| attach_error(e, path, site, target))?;
            self.ids.insert(event_id(&fd)?, index);
            self.fds.push(fd);
            self.route(target, cpu)?;
        }
        let fetch = fetch.map(|(_, plan)| plan);
        // A fetch event samples registers and stack only for unwinding.
        let (regs_mask, stack_bytes) = match (&fetch, plan.stacks) {
            (Some(_), false) => (0, 0),
            (Some(_), true) => (stack_mask(plan.arch), plan.stack_bytes),
            (None, _) => (plan.regs_mask, plan.stack_bytes),
        };
        self.sites.insert(
            index,
            PerfSite {
                arch: plan.arch,
                args: plan.args.len(),
                regs_mask,
                stack_bytes,
                fetch: fetch.clone(),
            },
        );
        Ok(fetch)
    }

    /// The fetch event for a site (made once per file offset and shared by
    /// every thread), if tracefs takes it.
    pub(crate) fn fetch_event(
        &mut self,
        path: &Path,
        uprobe: &Uprobe<'_>,
        plan: &SiteSampling<'_>,
        kernel_semaphores: bool,
    ) -> Option<(u64, FetchPlan)> {
        let key = (path.to_path_buf(), uprobe.offset);
        if let Some(found) = self.fetch_plans.get(&key) {
            return found.clone();
        }
        let ref_ctr = uprobe.ref_ctr_offset.filter(|_| kernel_semaphores);
        let event = FetchEvent::create(
            plan.arch,
            path,
            (plan.attach_addr, uprobe.offset),
            ref_ctr,
            plan.args,
            plan.strings,
            plan.bytes,
        );
        // Every value, string and byte slice must have its field.
        let complete = event.filter(|e| {
            plan.args.iter().enumerate().all(|(i, a)| {
                let constant = matches!(
                    a.operand,
                    Operand::Immediate(_) | Operand::Unreadable { .. }
                );
                (constant || e.values[i].is_some())
                    && (!plan.strings[i] || e.strings[i].is_some())
                    && (!plan.bytes.get(i).copied().unwrap_or(false) || e.bytes[i].is_some())
            })
        });
        let found = complete.map(|e| {
            let fetch = FetchPlan {
                values: e.values.clone(),
                strings: e.strings.clone(),
                bytes: e.bytes.clone(),
            };
            let id = e.id;
            self.fetch_events.push(e);
            (id, fetch)
        });
        self.fetch_plans.insert(key, found.clone());
        found
    }

    fn open_fetch_event(
        &self,
        id: u64,
        plan: &SiteSampling<'_>,
        target: Target,
        cpu: i32,
    ) -> Result<OwnedFd, SyscallError> {
        let mut attr = perf::attr(TYPE_TRACEPOINT);
        attr.config = id;
        attr.sample_period = 1;
        attr.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_RAW;
        if plan.stacks {
            // The user registers and stack of the task the uprobe hit.
            attr.sample_type |= SAMPLE_REGS_USER | SAMPLE_STACK_USER;
            attr.sample_regs_user = stack_mask(plan.arch);
            attr.sample_stack_user = plan.stack_bytes;
        }
        attr.set_disabled(1);
        attr.set_use_clockid(1);
        attr.set_watermark(1);
        attr.wakeup_watermark = 1 << 20;
        attr.clockid = libc::CLOCK_MONOTONIC;
        // SAFETY: a tracepoint event's attributes point to nothing.
        unsafe { perf_event_open(&attr, target, cpu) }
    }

    fn open(
        &self,
        features: &KernelFeatures,
        uprobe: &Uprobe<'_>,
        plan: &SiteSampling<'_>,
        target: Target,
        cpu: i32,
    ) -> Result<OwnedFd, SyscallError> {
        open_uprobe(features, uprobe, target, cpu, |attr: &mut perf::Attr| {
            attr.sample_period = 1;
            attr.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_REGS_USER;
            attr.sample_regs_user = plan.regs_mask;
            attr.set_disabled(1);
            attr.set_use_clockid(1);
            attr.clockid = libc::CLOCK_MONOTONIC;
            if plan.stack_bytes > 0 {
                attr.sample_type |= SAMPLE_STACK_USER;
                attr.sample_stack_user = plan.stack_bytes;
            }
            if plan.memory {
                // Memory outside the stack copy is read after the fact: wake
                // the reader at every sample to keep that window short. (Not
                // for stacks: a wakeup per sample costs the traced thread
                // about 10 us, measured by the bench; the maps stacks are
                // unwound with are kept past the process's exit.)
                attr.wakeup_events = 1;
            } else {
                // Otherwise wake it when a quarter of the ring is full.
                attr.set_watermark(1);
                attr.wakeup_watermark = 1 << 20;
            }
        })
    }

    /// Sends the newest event's samples to the ring of its target and CPU,
    /// mapping that ring from it if there is none yet.
    fn route(&mut self, target: Target, cpu: i32) -> Result<(), Error> {
        let index = self.fds.len() - 1;
        let fd = &self.fds[index];
        if let Some(slot) = self
            .slots
            .iter()
            .find(|s| s.cpu == cpu && (cpu != -1 || s.target == target))
        {
            return perf::set_output(fd, &self.fds[slot.owner]).map_err(|source| Error::Syscall {
                what: "sharing a perf ring buffer".into(),
                source,
            });
        }
        let pages = match cpu {
            -1 => self.ring_pages,
            _ => (self.ring_pages / online_cpus().len().max(1)).max(MIN_CPU_RING_PAGES),
        };
        let ring = Ring::map(fd.as_fd(), pages)?;
        self.slots.push(Slot {
            target,
            cpu,
            owner: index,
            ring,
        });
        Ok(())
    }

    /// Calls `each` with every sample the rings hold, as a raw hit
    /// (`None`: a record that could not be read); counts the lost records.
    fn drain_raw(&mut self, each: &mut dyn FnMut(Option<RawHit<'_>>)) {
        let PerfSampling {
            slots,
            ids,
            sites,
            lost,
            ..
        } = self;
        for slot in slots.iter_mut() {
            slot.ring.drain(|kind, record| match kind {
                RECORD_SAMPLE => each(raw_hit(ids, sites, record)),
                RECORD_LOST => {
                    // { header; u64 id; u64 lost; }
                    let n = record.get(16..24).and_then(|b| b.try_into().ok());
                    *lost += n.map_or(0, u64::from_ne_bytes);
                }
                _ => {}
            });
        }
    }
}

impl Engine for PerfSampling {
    fn attach(
        &mut self,
        path: &Path,
        sites: &[SampleSite<'_>],
        target: Target,
    ) -> Result<(), Error> {
        let Some(first) = sites.first() else {
            return Ok(());
        };
        let cpus = match target {
            Target::Pid(_) if !self.per_cpu => vec![-1],
            _ => online_cpus(),
        };
        let plans = sites
            .iter()
            .map(|s| SiteSampling::of(s, site_arch(s.site)?, self.stack_bytes, self.stacks))
            .collect::<Result<Vec<_>, _>>()?;
        let mark = self.mark();
        let features = self.features;
        let result = sites
            .iter()
            .zip(&plans)
            .try_for_each(|(s, plan)| {
                self.attach_site(
                    &features, path, s.site, &s.uprobe, plan, s.index, target, &cpus,
                )
                .map(drop)
            })
            .and_then(|()| {
                self.enable_since(mark).map_err(|source| Error::Syscall {
                    what: format!("enabling the uprobes of {}", path.display()),
                    source,
                })
            });
        if result.is_err() {
            self.roll_back(mark, first.index);
        }
        result
    }

    fn drain(&mut self, each: &mut dyn FnMut(Option<RawHit<'_>>)) {
        self.drain_raw(each);
    }

    /// The samples the kernel said it lost (`PERF_RECORD_LOST`).
    fn lost(&self) -> u64 {
        self.lost
    }

    /// Every hit the events counted, sampled or not.
    fn counted(&self) -> Option<u64> {
        let counts = self.fds.iter().map(|fd| perf::read_count(fd).unwrap_or(0));
        Some(counts.fold(0u64, u64::wrapping_add))
    }

    /// One per ring.
    fn poll_fds(&self) -> Vec<RawFd> {
        self.slots
            .iter()
            .map(|s| self.fds[s.owner].as_raw_fd())
            .collect()
    }

    fn ring_bytes(&self) -> u64 {
        self.slots.first().map_or(0, |s| s.ring.data_size())
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Perf
    }
}

fn event_id(fd: &OwnedFd) -> Result<u64, Error> {
    perf::id(fd).map_err(|source| Error::Syscall {
        what: "reading a perf event's id".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(args: &str, machine: crate::Machine) -> Site {
        Site::with_args(args, machine)
    }

    /// What the perf engine samples for `site`, with no strings marked.
    fn sampling(site: &Site, stack_bytes: u32) -> Result<(u64, u32), Error> {
        let path = std::ffi::CString::new("/x").unwrap();
        let none = vec![false; site.args.len()];
        let s = SampleSite::of(0, site, &path, &none);
        SiteSampling::of(&s, site.machine.arch(), stack_bytes, false)
            .map(|p| (p.regs_mask, p.stack_bytes))
    }

    #[test]
    fn registers_come_in_mask_order() {
        let s = site("-1@%r8 2@%ah 4@8(%rdi) 8@$7", crate::Machine::X86_64);
        // rax (for %ah), rdi, rsp and r8, in perf's order; memory: a stack
        // copy.
        let mask = 1 | 1 << 5 | 1 << 7 | 1 << 16;
        assert_eq!(sampling(&s, 64).unwrap(), (mask, 64));
        // Immediates and registers alone need no stack copy.
        let plain = site("8@%rax 4@$1", crate::Machine::X86_64);
        assert_eq!(sampling(&plain, 64).unwrap().1, 0);
        // Unless stacks are unwound: then the instruction, stack and frame
        // pointers (8, 7, 6) and the copy.
        let path = std::ffi::CString::new("/x").unwrap();
        let none = vec![false; plain.args.len()];
        let s = SampleSite::of(0, &plain, &path, &none);
        let plan = SiteSampling::of(&s, plain.machine.arch(), 64, true).unwrap();
        assert_eq!(plan.regs_mask, 1 | 1 << 6 | 1 << 7 | 1 << 8);
        assert_eq!((plan.stack_bytes, plan.memory), (64, false));
    }

    /// Unwinding an aarch64 stack starts from its table's registers: the
    /// frame pointer `x29` (29), the link register `x30` (30), `sp` (31)
    /// and `pc` (32), by their perf numbers; the same for a fetch event.
    #[test]
    fn aarch64_stacks_sample_the_frame_and_link_registers() {
        let plain = site("8@x0", crate::Machine::Aarch64);
        let path = std::ffi::CString::new("/x").unwrap();
        let none = vec![false; plain.args.len()];
        let s = SampleSite::of(0, &plain, &path, &none);
        let arch = plain.machine.arch();
        let plan = SiteSampling::of(&s, arch, 64, true).unwrap();
        let unwind = 1 << 29 | 1 << 30 | 1 << 31 | 1 << 32;
        assert_eq!(plan.regs_mask, 1 | unwind);
        assert_eq!(stack_mask(arch), unwind);
        // x86-64 has no link register: rip, rsp and rbp.
        assert_eq!(stack_mask(crate::Machine::X86_64.arch()), 1 << 6 | 1 << 7 | 1 << 8);
    }

    /// Each machine's perf numbers (`arch/*/include/uapi/asm/perf_regs.h`):
    /// aarch64 `x0` = 0, `x3` = 3, `sp` = 31; riscv64 `sp` = 2, `s0` = 8,
    /// `a0` = 10; riscv64's `zero` reads 0 and is not sampled.
    #[test]
    fn other_machines_sample_their_own_perf_numbers() {
        let a64 = site("8@x0 -4@[sp, 16] 4@w3 -4@-42", crate::Machine::Aarch64);
        assert_eq!(sampling(&a64, 64).unwrap(), (1 | 1 << 3 | 1 << 31, 64));
        let rv = site("8@a0 -4@-16(s0) 8@zero", crate::Machine::Riscv64);
        assert_eq!(sampling(&rv, 64).unwrap(), (1 << 2 | 1 << 8 | 1 << 10, 64));
        let rv = site("-8@a1 1@a2", crate::Machine::Riscv64);
        assert_eq!(sampling(&rv, 64).unwrap(), (1 << 2 | 1 << 11 | 1 << 12, 0));
    }

    /// A `PERF_RECORD_SAMPLE` of a site sampled with `mask` and a stack
    /// copy, as the kernel lays it out for this engine's `sample_type`
    /// (identifier, pid and tid, time, `PERF_SAMPLE_REGS_USER` as abi and
    /// the registers in mask order, `PERF_SAMPLE_STACK_USER` as size,
    /// bytes and dynamic size).
    fn sample_record(id: u64, regs: &[u64], stack: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; 8]; // the header, which raw_hit skips
        r.extend(id.to_ne_bytes());
        r.extend(42u32.to_ne_bytes());
        r.extend(43u32.to_ne_bytes());
        r.extend(1_000u64.to_ne_bytes());
        r.extend(2u64.to_ne_bytes()); // PERF_SAMPLE_REGS_ABI_64
        regs.iter().for_each(|v| r.extend(v.to_ne_bytes()));
        r.extend((stack.len() as u64).to_ne_bytes());
        r.extend(stack);
        r.extend((stack.len() as u64).to_ne_bytes());
        r
    }

    /// The registers of another machine's sample come by name from that
    /// machine's perf numbers: decoding needs no kernel of that machine.
    #[test]
    fn samples_of_each_machine_give_its_registers_by_name() {
        use crate::Reg64;
        for (args, machine, values) in [
            (
                "8@x0 -4@[sp, 16] 4@w3",
                crate::Machine::Aarch64,
                // Mask order: x0 (0), x3 (3), sp (31).
                [
                    (Reg64::X(0), 7),
                    (Reg64::X(3), 0xffff_fffe),
                    (Reg64::Sp, 0x7ff0),
                ],
            ),
            (
                "8@a0 -4@-16(s0)",
                crate::Machine::Riscv64,
                // Mask order: sp (2), s0 (8), a0 (10).
                [
                    (Reg64::Riscv(2), 0x7ff0),
                    (Reg64::Riscv(8), 0x8000),
                    (Reg64::Riscv(10), 7),
                ],
            ),
        ] {
            let site = site(args, machine);
            let path = std::ffi::CString::new("/x").unwrap();
            let none = vec![false; site.args.len()];
            let s = SampleSite::of(5, &site, &path, &none);
            let plan = SiteSampling::of(&s, machine.arch(), 32, false).unwrap();
            let perf_site = PerfSite {
                arch: plan.arch,
                args: site.args.len(),
                regs_mask: plan.regs_mask,
                stack_bytes: plan.stack_bytes,
                fetch: None,
            };
            let stack: Vec<u8> = (0..32).collect();
            let record = sample_record(99, &values.map(|(_, v)| v), &stack);
            let ids = HashMap::from([(99u64, 5usize)]);
            let sites = HashMap::from([(5usize, perf_site)]);
            let raw = raw_hit(&ids, &sites, &record).unwrap();
            assert_eq!(
                (raw.site, raw.pid, raw.tid, raw.time_ns),
                (5, 42, 43, 1_000)
            );
            for (reg, value) in values {
                assert_eq!(raw.regs.get(reg), Some(value), "{machine} {reg:?}");
            }
            assert_eq!(raw.regs.get(machine.arch().sp), Some(0x7ff0));
            assert_eq!(raw.stack, &stack[..]);
            // A record cut short is no hit.
            assert!(raw_hit(&ids, &sites, &record[..40]).is_none());
        }
    }

    #[test]
    fn a_site_of_another_machine_than_this_one_is_refused_in_words() {
        let (other, here) = match crate::Machine::host() {
            Some(crate::Machine::X86_64) => (crate::Machine::Aarch64, "x86-64"),
            Some(crate::Machine::Aarch64) => (crate::Machine::X86_64, "aarch64"),
            _ => return,
        };
        let e = site_arch(&site("", other)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{other} sites (p:n) on this {here} machine are not supported")
        );
    }
}
