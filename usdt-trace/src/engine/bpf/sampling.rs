//! Sampling with BPF: a program assembled at run time, attached with one
//! uprobe_multi link per file, writes one record per hit into a BPF ring
//! buffer: the site's cookie, the pid and thread id, the time, the user
//! registers, and what the site's arguments read from memory, read at the
//! hit.
//!
//! A link with a process filter covers every thread of the process, those
//! started later included, from their first instruction: nothing to
//! discover, nothing missed.
//!
//! Each site's cookie names a row of a descriptor array: per argument, how
//! to compute an address from the registers (`base + index * scale + disp`),
//! how many bytes to read there, and whether to read the string or the
//! bytes the value points at. The record (the numbers of x86-64, whose
//! `struct pt_regs` has 21 registers; each machine's table says how many
//! its program is given):
//!
//! ```text
//!   0  u64 cookie
//!   8  u64 pid (high 32 bits) and thread id (low 32)
//!  16  u64 CLOCK_MONOTONIC time in ns
//!  24  struct pt_regs (21 u64)
//! 192  per argument up to the last one that reads memory in any site of
//!      the link, 32 bytes: 24 value bytes, i32 result of reading them,
//!      i32 result of reading the string or bytes they point at
//!   …  the strings and byte slices, 264 bytes each, as many as a site of
//!      the link needs
//!   …  with a stack copy (for unwinding): u64 bytes copied, then the
//!      stack from the stack pointer up
//! ```
//!
//! A link whose sites read no memory writes 192 bytes per hit.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use super::asm::{
    add64_imm, add64_reg, and64_imm, atomic_add64, call, exit, load, load_map_fd, lsh64_imm,
    mov64_imm, mov64_reg, mul64_reg, store, store32, sub64_imm, Asm, Cmp, Insn, Size, R0, R1, R10,
    R2, R3, R4, R6, R7, R8, R9,
};
use super::counter::{link_sites, per_cpu_values};
use super::fetches::{ArgFetch, ARGS, FETCH_BYTES, FETCH_STRING, FETCH_VALUE, VALUE_MAX};
use super::filter::{self, Code};
use super::program::{create_counter_map, load_program};
use super::ringbuf::RingBuf;
use super::BpfError;
use crate::arch::Arch;
use crate::engine::{site_arch, Engine, EngineKind, SampleSite};
use crate::raw::{Fetched, Fields, RawHit};
use crate::sys::bpf::{bpf, bpf_fd, MapCreateAttr, MapElemAttr};
use crate::sys::bpf::{
    object_name, BPF_MAP_CREATE, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_RINGBUF, BPF_MAP_UPDATE_ELEM,
};
use crate::Target;

/// Where the registers start in a record.
pub(crate) const REGS_AT: usize = 24;
/// A per-argument slot's size.
pub(crate) const SLOT: usize = 32;
/// A string's or byte slice's room.
pub(crate) const DEREF: usize = 264;
/// How many bytes of a string are read, its NUL included: one more than
/// the longest kept, so that a longer one shows as cut.
pub(crate) const STRING_READ: i32 = crate::raw::STRING_MAX as i32 + 2;

/// One site to sample: its uprobe, semaphore, cookie and what its arguments
/// read.
#[derive(Clone, Debug)]
pub(crate) struct SampledSite {
    pub(crate) offset: u64,
    pub(crate) ref_ctr_offset: Option<u64>,
    /// The sampler's index of the site (what the record's cookie says in
    /// its low 32 bits).
    pub(crate) cookie: u64,
    pub(crate) fetch: [ArgFetch; ARGS],
    /// Its filter's variant in the link's filters, if filtered.
    pub(crate) filter: Option<usize>,
}

/// The layout of the records of one link: how many `struct pt_regs`
/// registers, argument slots and string rooms they have, and the stack
/// copy they end with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) regs: usize,
    pub(crate) slots: usize,
    pub(crate) derefs: usize,
    pub(crate) stack: Option<StackCopy>,
}

/// A copy of the stack at each hit: how many bytes from the stack pointer
/// up, and which `struct pt_regs` slot holds the stack pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackCopy {
    pub(crate) bytes: usize,
    pub(crate) sp_slot: u8,
}

/// Where the stack ends within the bytes a [`StackCopy`] asks for, the
/// copy falls back on chunks of this many bytes, keeping those below the
/// first that cannot be read.
const STACK_CHUNK: usize = 512;

impl Layout {
    /// The layout that `sites` need, with `regs` registers.
    fn of(regs: usize, sites: &[SampledSite]) -> Layout {
        let per_site = sites.iter().map(|s| Layout {
            regs,
            slots: s
                .fetch
                .iter()
                .rposition(|f| f.kind != 0)
                .map_or(0, |i| i + 1),
            derefs: s
                .fetch
                .iter()
                .filter(|f| f.kind & (FETCH_STRING | FETCH_BYTES) != 0)
                .map(|f| usize::from(f.deref_slot) + 1)
                .max()
                .unwrap_or(0),
            stack: None,
        });
        let none = Layout {
            regs,
            ..Layout::default()
        };
        per_site.fold(none, |a, b| Layout {
            regs,
            slots: a.slots.max(b.slots).min(ARGS),
            derefs: a.derefs.max(b.derefs).min(ARGS),
            stack: None,
        })
    }

    /// Where the per-argument slots start.
    pub(crate) fn slots_at(&self) -> usize {
        REGS_AT + self.regs * 8
    }

    /// Where argument `i`'s slot starts.
    fn slot_at(&self, i: usize) -> usize {
        self.slots_at() + i * SLOT
    }

    /// Where the strings and byte slices start.
    pub(crate) fn deref_at(&self) -> usize {
        self.slot_at(self.slots)
    }

    /// Where the stack copy starts (its size first).
    pub(crate) fn stack_at(&self) -> usize {
        self.deref_at() + self.derefs * DEREF
    }

    /// The size of a record.
    pub(crate) fn size(&self) -> usize {
        self.stack_at() + self.stack.map_or(0, |s| 8 + s.bytes)
    }
}

use crate::sys::bpf::helper::{
    GET_ATTACH_COOKIE, GET_CURRENT_PID_TGID, KTIME_GET_NS, MAP_LOOKUP_ELEM, PROBE_READ_USER,
    PROBE_READ_USER_STR, RINGBUF_QUERY, RINGBUF_RESERVE, RINGBUF_SUBMIT,
};

/// The maps a sampling program uses, by descriptor, and when it wakes the
/// reader.
pub(crate) struct Maps {
    pub(crate) ring: i32,
    pub(crate) lost: i32,
    pub(crate) descriptors: i32,
    /// The bytes of unread records from which a record's submission wakes
    /// a reader waiting in `poll` (below it, the reader finds the records
    /// at its next poll, by its timeout at the latest).
    pub(crate) watermark: i32,
}

/// `bpf_ringbuf_submit`'s flag: wake no reader (`BPF_RB_NO_WAKEUP`).
const RB_NO_WAKEUP: i32 = 1;
/// `bpf_ringbuf_submit`'s flag: wake the readers (`BPF_RB_FORCE_WAKEUP`).
const RB_FORCE_WAKEUP: i32 = 2;
/// `bpf_ringbuf_query`'s question: the bytes not yet read
/// (`BPF_RB_AVAIL_DATA`).
const RB_AVAIL_DATA: i32 = 0;

/// A reader is woken once a ring holds this much unread (at most half the
/// ring), as the perf engine's rings wake theirs (`wakeup_watermark`).
pub(crate) const WATERMARK: u64 = 1 << 20;

/// The sampling program for sites whose cookies start at `first_cookie`,
/// writing records of `layout`. Registers: r6 the context (`struct pt_regs
/// *`), r7 the record, r8 the site's descriptor row, r9 the cookie.
///
/// A record is submitted without waking the reader unless the ring holds
/// [`Maps::watermark`] bytes unread: the kernel's own wake-up (when the
/// reader has caught up) would wake it for nearly every record of a
/// reader that keeps up, and each wake-up is an `irq_work` (a self-IPI,
/// a VM exit in a guest) on the hit's path.
pub(crate) fn sampling_program(
    maps: &Maps,
    first_cookie: u64,
    layout: Layout,
) -> Result<Vec<Insn>, String> {
    let size = layout.size() as i32;
    let mut a = Asm::default();
    let submit = a.label();
    let reserved = a.label();
    let done = a.label();
    a.push([
        mov64_reg(R6, R1),
        call(GET_ATTACH_COOKIE),
        mov64_reg(R9, R0),
    ]);
    a.push(load_map_fd(R1, maps.ring));
    a.push([mov64_imm(R2, size), mov64_imm(R3, 0), call(RINGBUF_RESERVE)]);
    a.jump_if(R0, Cmp::Ne, 0, reserved);
    // The ring is full: count the hit as lost.
    a.push([mov64_imm(R1, 0), store32(R10, -4, R1), mov64_reg(R2, R10)]);
    a.push([add64_imm(R2, -4)]);
    a.push(load_map_fd(R1, maps.lost));
    a.push([call(MAP_LOOKUP_ELEM)]);
    a.jump_if(R0, Cmp::Eq, 0, done);
    a.push([mov64_imm(R1, 1), atomic_add64(R0, 0, R1)]);
    a.jump(done);

    a.bind(reserved);
    a.push([mov64_reg(R7, R0), store(Size::DW, R7, 0, R9)]);
    a.push([call(GET_CURRENT_PID_TGID), store(Size::DW, R7, 8, R0)]);
    a.push([call(KTIME_GET_NS), store(Size::DW, R7, 16, R0)]);
    for i in 0..layout.regs as i16 {
        a.push([
            load(Size::DW, R1, R6, i * 8),
            store(Size::DW, R7, REGS_AT as i16 + i * 8, R1),
        ]);
    }
    if let Some(stack) = layout.stack {
        copy_stack(&mut a, layout.stack_at(), stack);
    }
    if layout.slots > 0 {
        // The site's descriptor row: key = cookie - first_cookie.
        a.push([mov64_reg(R1, R9)]);
        if first_cookie > 0 {
            a.push([sub64_imm(R1, first_cookie as i32)]);
        }
        a.push([store32(R10, -4, R1), mov64_reg(R2, R10), add64_imm(R2, -4)]);
        a.push(load_map_fd(R1, maps.descriptors));
        a.push([call(MAP_LOOKUP_ELEM)]);
        a.jump_if(R0, Cmp::Eq, 0, submit);
        a.push([mov64_reg(R8, R0)]);
        for i in 0..layout.slots {
            fetch_arg(&mut a, i, layout);
        }
    }
    a.bind(submit);
    let wake = a.label();
    let submit_with = a.label();
    a.push(load_map_fd(R1, maps.ring));
    a.push([mov64_imm(R2, RB_AVAIL_DATA), call(RINGBUF_QUERY)]);
    a.jump_if(R0, Cmp::Ge, maps.watermark, wake);
    a.push([mov64_imm(R2, RB_NO_WAKEUP)]);
    a.jump(submit_with);
    a.bind(wake);
    a.push([mov64_imm(R2, RB_FORCE_WAKEUP)]);
    a.bind(submit_with);
    a.push([mov64_reg(R1, R7), call(RINGBUF_SUBMIT)]);
    a.bind(done);
    a.push([mov64_imm(R0, 0), exit()]);
    a.finish()
}

/// The code that copies the stack from the stack pointer (in the copied
/// registers) up, after the u64 that says how many bytes it copied: all
/// of them in one read, else (the stack ends within them) chunk after
/// chunk of [`STACK_CHUNK`] bytes until one cannot be read.
fn copy_stack(a: &mut Asm, at: usize, stack: StackCopy) {
    let sp = (REGS_AT + usize::from(stack.sp_slot) * 8) as i16;
    let data = (at + 8) as i32;
    let done = a.label();
    let chunks = a.label();
    let read = |a: &mut Asm, from: usize, len: usize| {
        a.push([
            load(Size::DW, R3, R7, sp),
            add64_imm(R3, from as i32),
            mov64_reg(R1, R7),
            add64_imm(R1, data + from as i32),
            mov64_imm(R2, len as i32),
            call(PROBE_READ_USER),
        ]);
    };
    let copied = |a: &mut Asm, n: usize| {
        a.push([mov64_imm(R1, n as i32), store(Size::DW, R7, at as i16, R1)]);
    };
    read(a, 0, stack.bytes);
    a.jump_if(R0, Cmp::Ne, 0, chunks);
    copied(a, stack.bytes);
    a.jump(done);
    a.bind(chunks);
    copied(a, 0);
    for k in 0..stack.bytes / STACK_CHUNK {
        read(a, k * STACK_CHUNK, STACK_CHUNK);
        a.jump_if(R0, Cmp::Ne, 0, done);
        copied(a, (k + 1) * STACK_CHUNK);
    }
    a.bind(done);
}

/// The code for argument `i`: its address from the copied registers, its
/// value, then the string or bytes it points at.
fn fetch_arg(a: &mut Asm, i: usize, layout: Layout) {
    let derefs = layout.derefs;
    let desc = (i * 32) as i16;
    let slot = layout.slot_at(i) as i16;
    let next = a.label();
    let no_base = a.label();
    let no_index = a.label();
    let deref = a.label();
    a.push([load(Size::B, R1, R8, desc)]);
    a.jump_if(R1, Cmp::Eq, 0, next);
    // r3 = disp + regs[base] + regs[index] * scale
    a.push([
        load(Size::DW, R3, R8, desc + 8),
        load(Size::B, R2, R8, desc + 2),
    ]);
    a.jump_if(R2, Cmp::Ge, layout.regs as i32, no_base);
    a.push([
        lsh64_imm(R2, 3),
        add64_reg(R2, R7),
        load(Size::DW, R2, R2, REGS_AT as i16),
        add64_reg(R3, R2),
    ]);
    a.bind(no_base);
    a.push([load(Size::B, R2, R8, desc + 3)]);
    a.jump_if(R2, Cmp::Ge, layout.regs as i32, no_index);
    a.push([
        lsh64_imm(R2, 3),
        add64_reg(R2, R7),
        load(Size::DW, R2, R2, REGS_AT as i16),
        load(Size::B, R4, R8, desc + 4),
        mul64_reg(R2, R4),
        add64_reg(R3, R2),
    ]);
    a.bind(no_index);
    // The value: probe_read_user(slot, size, r3); then r3 = what it read.
    a.push([
        load(Size::B, R1, R8, desc),
        and64_imm(R1, FETCH_VALUE.into()),
    ]);
    a.jump_if(R1, Cmp::Eq, 0, deref);
    a.push([load(Size::B, R2, R8, desc + 1)]);
    a.jump_if(R2, Cmp::Gt, VALUE_MAX as i32, next);
    a.push([
        mov64_reg(R1, R7),
        add64_imm(R1, slot.into()),
        call(PROBE_READ_USER),
        store32(R7, slot + VALUE_MAX as i16, R0),
        load(Size::DW, R3, R7, slot),
    ]);
    a.bind(deref);
    if derefs > 0 {
        let bytes = a.label();
        let read = a.label();
        a.push([load(Size::B, R1, R8, desc), and64_imm(R1, 6)]);
        a.jump_if(R1, Cmp::Eq, 0, next);
        a.push([load(Size::B, R4, R8, desc + 5)]);
        a.jump_if(R4, Cmp::Ge, derefs as i32, next);
        a.push([
            mov64_imm(R2, DEREF as i32),
            mul64_reg(R4, R2),
            mov64_reg(R1, R7),
            add64_imm(R1, layout.deref_at() as i32),
            add64_reg(R1, R4),
            load(Size::B, R4, R8, desc),
            and64_imm(R4, FETCH_STRING.into()),
        ]);
        a.jump_if(R4, Cmp::Eq, 0, bytes);
        a.push([mov64_imm(R2, STRING_READ), call(PROBE_READ_USER_STR)]);
        a.jump(read);
        a.bind(bytes);
        a.push([
            mov64_imm(R2, crate::raw::BYTES_FETCH as i32),
            call(PROBE_READ_USER),
        ]);
        a.bind(read);
        a.push([store32(R7, slot + VALUE_MAX as i16 + 4, R0)]);
    }
    a.bind(next);
}

/// One record (see the module documentation) as a raw hit: the registers
/// by name, and per argument the value and the string or bytes the program
/// read (what it could not read, a page not present, is left to the
/// decoder).
fn raw_hit<'a>(sites: &HashMap<u64, SiteRecords>, record: &'a [u8]) -> Option<RawHit<'a>> {
    let mut f = Fields(record);
    // The high 32 bits name a filter variant (`filter::cookie`).
    let cookie = f.u64()? & 0xffff_ffff;
    let pid_tgid = f.u64()?;
    let time_ns = f.u64()?;
    let mut raw = RawHit {
        site: usize::try_from(cookie).ok()?,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        time_ns,
        ..RawHit::default()
    };
    let Some(site) = sites.get(&cookie) else {
        return Some(raw);
    };
    let mut regs = Fields(f.take(site.layout.regs * 8)?);
    let pt: Vec<u64> = std::iter::from_fn(|| regs.u64()).collect();
    for row in site.arch.registers {
        if let Some(value) = row.pt_regs.and_then(|i| pt.get(usize::from(i))) {
            raw.regs.push(row.reg, *value);
        }
    }
    raw.fetched = site
        .fetch
        .iter()
        .enumerate()
        .take(site.layout.slots)
        .map(|(i, f)| fetched(record, &site.layout, i, f))
        .collect();
    if let Some(stack) = site.layout.stack {
        let at = site.layout.stack_at();
        let mut copy = Fields(record.get(at..)?);
        let n = usize::try_from(copy.u64()?).ok()?.min(stack.bytes);
        raw.stack = copy.take(n)?;
    }
    Some(raw)
}

/// What the program read for argument `i`.
fn fetched<'a>(record: &'a [u8], layout: &Layout, i: usize, f: &ArgFetch) -> Fetched<'a> {
    let at = layout.slot_at(i);
    let Some(slot) = record.get(at..at + SLOT) else {
        return Fetched::default();
    };
    if f.kind == 0 {
        return Fetched::default();
    }
    let rc = |at: usize| i32::from_ne_bytes(slot[at..at + 4].try_into().unwrap_or_default());
    let mut out = Fetched::default();
    if f.kind & FETCH_VALUE != 0 {
        if rc(VALUE_MAX) != 0 {
            // Not read: the decoder computes and reads it itself.
            return out;
        }
        out.value = Some(&slot[..usize::from(f.size).min(VALUE_MAX)]);
    }
    let room_at = layout.deref_at() + usize::from(f.deref_slot) * DEREF;
    let read = rc(VALUE_MAX + 4);
    if f.kind & FETCH_STRING != 0 {
        // The length read, its NUL included; 0 is an empty string too
        // (`bpf_probe_read_user_str` of Linux 6.12 gives 0 for one, where
        // newer kernels give 1); below 0, not read.
        out.pointed = usize::try_from(read)
            .ok()
            .and_then(|n| record.get(room_at..room_at + n.saturating_sub(1)));
    } else if f.kind & FETCH_BYTES != 0 && read == 0 {
        out.pointed = record.get(room_at..room_at + crate::raw::BYTES_FETCH);
    }
    out
}

/// One uprobe_multi link with its program and descriptor array; closing
/// the link detaches its sites.
#[derive(Debug)]
struct Link {
    // Declared first: dropped first.
    _link: OwnedFd,
    _prog: OwnedFd,
    _descriptors: OwnedFd,
}

/// The ring buffer, the lost-hit counter and the links of a BPF sampler.
/// Dropping it closes the links first (the kernel removes every uprobe and
/// lowers the semaphores before `close` returns).
#[derive(Debug)]
pub(crate) struct BpfSampling {
    links: Vec<Link>,
    ring: RingBuf,
    ring_map: OwnedFd,
    lost: OwnedFd,
    cpus: usize,
    /// What each site's records hold, by cookie.
    sites: HashMap<u64, SiteRecords>,
    /// The stack each record copies (0: none).
    stack_bytes: usize,
}

/// What the records of one site hold.
#[derive(Clone, Copy, Debug)]
struct SiteRecords {
    /// The registers of the site's machine.
    arch: &'static Arch,
    layout: Layout,
    fetch: [ArgFetch; ARGS],
}

impl BpfSampling {
    /// A ring of `bytes` (rounded up to a power of two of at least a page);
    /// each record copies `stack_bytes` of the stack (0: none).
    pub(crate) fn new(bytes: u64, stack_bytes: u32) -> Result<BpfSampling, BpfError> {
        let cpus = crate::cpus::possible_cpus().map_err(BpfError::Cpus)?;
        let size = bytes.max(usdt_runtime::page_size()).next_power_of_two();
        let size32 = u32::try_from(size).map_err(|_| BpfError::RingTooLarge { bytes: size })?;
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_RINGBUF,
            max_entries: size32,
            map_name: object_name("usdt_samples"),
            ..MapCreateAttr::default()
        };
        // SAFETY: the attributes hold no pointers.
        let ring_map = unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
            .map_err(|e| BpfError::from_os("creating the sample ring buffer", e))?;
        let ring = RingBuf::map(ring_map.as_fd(), size)
            .map_err(|e| BpfError::from_os("mapping the sample ring buffer", e))?;
        Ok(BpfSampling {
            links: vec![],
            ring,
            ring_map,
            lost: create_counter_map(1)?,
            cpus,
            sites: HashMap::new(),
            stack_bytes: stack_bytes as usize & !7,
        })
    }

    /// Attaches `sites` of the file at `path` (registers of `arch`) with
    /// one link, sampling the hits of `target` (every thread of a process,
    /// or every process). The sites' cookies must be consecutive from the
    /// first one's.
    /// The sites' filters are `filters` (a site's `filter` indexes it): the
    /// program then runs them first ([`filter::prologue`]).
    pub(crate) fn attach_sampled(
        &mut self,
        path: &Path,
        arch: &'static Arch,
        sites: &[SampledSite],
        filters: &[Code],
        target: Target,
    ) -> Result<(), BpfError> {
        let Some(first) = sites.first() else {
            return Ok(());
        };
        let mut layout = Layout::of(arch.pt_regs, sites);
        layout.stack = arch
            .pt_slot(arch.sp)
            .filter(|_| self.stack_bytes > 0)
            .map(|sp_slot| StackCopy {
                bytes: self.stack_bytes,
                sp_slot,
            });
        let descriptors = self.descriptors(sites)?;
        let maps = Maps {
            ring: self.ring_map.as_raw_fd(),
            lost: self.lost.as_raw_fd(),
            descriptors: descriptors.as_raw_fd(),
            watermark: WATERMARK.min(self.ring.size() / 2) as i32,
        };
        let verifier = |log| BpfError::Verifier {
            program: "usdt_sample".into(),
            log,
        };
        let mut insns = sampling_program(&maps, first.cookie, layout).map_err(verifier)?;
        if !filters.is_empty() {
            insns = filter::filtered(filters, insns).map_err(verifier)?;
        }
        let prog = load_program(&insns, "usdt_sample")?;
        let triples: Vec<(u64, u64, u64)> = sites
            .iter()
            .map(|s| {
                let cookie = match s.filter {
                    Some(v) => filter::cookie(v, s.cookie),
                    None => s.cookie,
                };
                (s.offset, s.ref_ctr_offset.unwrap_or(0), cookie)
            })
            .collect();
        let link = link_sites(prog.as_fd(), path, &triples, target)?;
        self.links.push(Link {
            _link: link,
            _prog: prog,
            _descriptors: descriptors,
        });
        for site in sites {
            let records = SiteRecords {
                arch,
                layout,
                fetch: site.fetch,
            };
            self.sites.insert(site.cookie, records);
        }
        Ok(())
    }

    /// The descriptor array of `sites`, one row per site in cookie order.
    fn descriptors(&self, sites: &[SampledSite]) -> Result<OwnedFd, BpfError> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: (ARGS * 32) as u32,
            max_entries: sites.len() as u32,
            map_name: object_name("usdt_fetch"),
            ..MapCreateAttr::default()
        };
        // SAFETY: the attributes hold no pointers.
        let map = unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
            .map_err(|e| BpfError::from_os("creating the argument descriptors", e))?;
        let first = sites[0].cookie;
        let mut row = vec![0u8; ARGS * 32];
        for site in sites {
            if site.fetch.iter().all(|f| f.kind == 0) {
                continue; // a zeroed row reads nothing
            }
            for (i, f) in site.fetch.iter().enumerate() {
                row[i * 32..(i + 1) * 32].copy_from_slice(&f.bytes());
            }
            let key = (site.cookie - first) as u32;
            let mut attr = MapElemAttr {
                map_fd: map.as_raw_fd() as u32,
                key: &key as *const u32 as u64,
                value: row.as_ptr() as u64,
                ..MapElemAttr::default()
            };
            // SAFETY: the key is 4 bytes and the row the map's value size.
            unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
                .map_err(|e| BpfError::from_os("writing the argument descriptors", e))?;
        }
        Ok(map)
    }
}

impl Engine for BpfSampling {
    /// One link for the sites (their indexes are the cookies).
    fn attach(
        &mut self,
        path: &Path,
        sites: &[SampleSite<'_>],
        target: Target,
    ) -> Result<(), crate::Error> {
        let Some(first) = sites.first() else {
            return Ok(());
        };
        // The program reads the host's `struct pt_regs`.
        let arch = site_arch(first.site)?;
        let mut filters = vec![];
        let sampled: Vec<SampledSite> = sites
            .iter()
            .map(|s| {
                site_arch(s.site)?;
                let filter = match s.filter {
                    Some(f) => Some(filter::variant_of(&mut filters, filter::code(f, s.site)?)),
                    None => None,
                };
                Ok(SampledSite {
                    offset: s.uprobe.offset,
                    ref_ctr_offset: s.uprobe.ref_ctr_offset,
                    cookie: s.index as u64,
                    fetch: super::fetches::fetches(s, arch)?,
                    filter,
                })
            })
            .collect::<Result<_, crate::Error>>()?;
        // Filtered and unfiltered sites in one link: the unfiltered pass a
        // filter that always holds.
        if !filters.is_empty() && sampled.iter().any(|s| s.filter.is_none()) {
            return Err(crate::Error::Unsupported(
                "a filter applies to every site a sampler attaches".into(),
            ));
        }
        Ok(self.attach_sampled(path, arch, &sampled, &filters, target)?)
    }

    fn drain(&mut self, each: &mut dyn FnMut(Option<RawHit<'_>>)) {
        let BpfSampling { ring, sites, .. } = self;
        ring.drain(|record| each(raw_hit(sites, record)));
    }

    /// The BPF program counts no hit it sampled.
    fn counted(&self) -> Option<u64> {
        None
    }

    fn poll_fds(&self) -> Vec<std::os::fd::RawFd> {
        vec![self.ring_map.as_raw_fd()]
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Bpf
    }

    fn ring_bytes(&self) -> u64 {
        self.ring.size()
    }

    /// Hits not sampled because the ring was full.
    fn lost(&self) -> u64 {
        let mut values = vec![0u64; self.cpus];
        match per_cpu_values(self.lost.as_fd(), 0, &mut values, "reading the lost hits") {
            Ok(()) => values.iter().fold(0, |s, v| s.wrapping_add(*v)),
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::bpf::fetches::NO_REG;
    use crate::Machine;

    #[test]
    fn the_record_layout_adds_up() {
        let x86 = Machine::X86_64.arch().pt_regs;
        let none = Layout {
            regs: x86,
            ..Layout::default()
        };
        assert_eq!(none.slots_at(), 192);
        assert_eq!(none.size(), 192);
        let all = Layout {
            regs: x86,
            slots: ARGS,
            derefs: 2,
            stack: None,
        };
        assert_eq!(all.deref_at(), 576);
        assert_eq!(all.size(), 576 + 528);
        let stack = StackCopy {
            bytes: 8192,
            sp_slot: 19,
        };
        let copied = Layout {
            stack: Some(stack),
            ..all
        };
        assert_eq!(copied.stack_at(), 576 + 528);
        assert_eq!(copied.size(), 576 + 528 + 8 + 8192);
        assert_eq!(
            Machine::X86_64.arch().pt_slot(crate::Reg64::Rsp),
            Some(stack.sp_slot)
        );
        const { assert!(STRING_READ as usize <= DEREF) };
        const { assert!(crate::raw::BYTES_FETCH <= DEREF) };
        assert_eq!(ArgFetch::default().bytes()[2], NO_REG);
    }

    /// A record of an aarch64 site, as the program writes it: the
    /// registers come from `struct user_pt_regs` (34 slots) and are named
    /// by the aarch64 table; the value read for a memory operand is its
    /// slot's. Decoding needs no aarch64 kernel.
    #[test]
    fn an_aarch64_record_gives_its_registers_by_name() {
        use crate::{Reg64, Site};
        let machine = Machine::Aarch64;
        let arch = machine.arch();
        let site = Site::with_args("8@x0 -4@[sp, 16] 8@[x1, 8]", machine);
        let path = std::ffi::CString::new("/x").unwrap();
        let s = SampleSite::of(0, &site, &path, &[false; 3]);
        let fetch = super::super::fetches::fetches(&s, arch).unwrap();
        // The base registers' `user_pt_regs` slots: sp is 31, x1 is 1.
        assert_eq!((fetch[1].base, fetch[1].disp), (31, 16));
        assert_eq!((fetch[2].base, fetch[2].disp), (1, 8));
        assert_eq!(fetch[0].kind, 0); // a register: from the copy
        let sampled = SampledSite {
            offset: 0,
            ref_ctr_offset: None,
            cookie: 7,
            fetch,
            filter: None,
        };
        let layout = Layout::of(arch.pt_regs, std::slice::from_ref(&sampled));
        assert_eq!((layout.regs, layout.slots, layout.derefs), (34, 3, 0));
        assert_eq!(layout.slots_at(), 24 + 34 * 8);

        let mut record = vec![0u8; layout.size()];
        record[..8].copy_from_slice(&7u64.to_ne_bytes());
        record[8..16].copy_from_slice(&(42u64 << 32 | 43).to_ne_bytes());
        record[16..24].copy_from_slice(&1_000u64.to_ne_bytes());
        for slot in 0..34u64 {
            let at = REGS_AT + slot as usize * 8;
            record[at..at + 8].copy_from_slice(&(0x100 + slot).to_ne_bytes());
        }
        let value = layout.slot_at(1);
        record[value..value + 4].copy_from_slice(&(-5i32).to_ne_bytes());
        let records = SiteRecords {
            arch,
            layout,
            fetch: sampled.fetch,
        };
        let sites = HashMap::from([(7u64, records)]);
        let raw = raw_hit(&sites, &record).unwrap();
        assert_eq!(
            (raw.site, raw.pid, raw.tid, raw.time_ns),
            (7, 42, 43, 1_000)
        );
        // A filtered site's cookie carries its variant above the index.
        let mut filtered = record.clone();
        filtered[..8].copy_from_slice(&filter::cookie(2, 7).to_ne_bytes());
        assert_eq!(raw_hit(&sites, &filtered).unwrap().site, 7);
        assert_eq!(raw.regs.get(Reg64::X(0)), Some(0x100));
        assert_eq!(raw.regs.get(Reg64::X(30)), Some(0x100 + 30));
        assert_eq!(raw.regs.get(Reg64::Sp), Some(0x100 + 31));
        assert_eq!(raw.regs.get(Reg64::Pc), Some(0x100 + 32));
        assert_eq!(raw.regs.get(Reg64::Rsp), None);
        assert_eq!(raw.fetched[1].value, Some(&(-5i32).to_ne_bytes()[..]));
        // The third read failed (its result is not 0): left to the decoder.
        let failed = layout.slot_at(2) + VALUE_MAX;
        record[failed..failed + 4].copy_from_slice(&(-14i32).to_ne_bytes());
        let raw = raw_hit(&sites, &record).unwrap();
        assert_eq!(raw.fetched[2].value, None);
        // A record cut inside the registers is no hit.
        assert!(raw_hit(&sites, &record[..100]).is_none());
    }

    /// A string read gives its length with the NUL (`"ab"`: 3), or 0 for
    /// an empty string on some kernels (6.12), or below 0 when it could not
    /// be read: only then is it left to the decoder, which reads it after
    /// the fact.
    #[test]
    fn a_string_read_as_0_bytes_is_empty_not_unread() {
        let machine = Machine::X86_64;
        let arch = machine.arch();
        let site = crate::Site::with_args("8@%rdi", machine);
        let path = std::ffi::CString::new("/x").unwrap();
        let s = SampleSite::of(0, &site, &path, &[true]);
        let fetch = super::super::fetches::fetches(&s, arch).unwrap();
        assert_ne!(fetch[0].kind & FETCH_STRING, 0);
        let sampled = SampledSite {
            offset: 0,
            ref_ctr_offset: None,
            cookie: 1,
            fetch,
            filter: None,
        };
        let layout = Layout::of(arch.pt_regs, std::slice::from_ref(&sampled));
        let mut record = vec![0u8; layout.size()];
        let room = layout.deref_at() + usize::from(fetch[0].deref_slot) * DEREF;
        record[room..room + 3].copy_from_slice(b"ab\0");
        let rc = layout.slot_at(0) + VALUE_MAX + 4;
        let pointed = |record: &mut Vec<u8>, read: i32| {
            record[rc..rc + 4].copy_from_slice(&read.to_ne_bytes());
            fetched(record, &layout, 0, &fetch[0])
                .pointed
                .map(<[u8]>::to_vec)
        };
        assert_eq!(pointed(&mut record, 3), Some(b"ab".to_vec()));
        assert_eq!(pointed(&mut record, 1), Some(Vec::new()));
        assert_eq!(pointed(&mut record, 0), Some(Vec::new()));
        assert_eq!(pointed(&mut record, -14), None);
    }

    #[test]
    fn the_program_ends_in_exit_and_fits() {
        let maps = Maps {
            ring: 3,
            lost: 4,
            descriptors: 5,
            watermark: 1 << 20,
        };
        let regs = Machine::X86_64.arch().pt_regs;
        let stack = Some(StackCopy {
            bytes: 8192,
            sp_slot: 19,
        });
        for (slots, derefs, stack) in [
            (0, 0, None),
            (3, 0, None),
            (1, 1, None),
            (ARGS, ARGS, None),
            (0, 0, stack),
            (ARGS, ARGS, stack),
        ] {
            let layout = Layout {
                regs,
                slots,
                derefs,
                stack,
            };
            let p = sampling_program(&maps, 7, layout).unwrap();
            assert_eq!(p.last(), Some(&exit()));
            assert!(p.len() < 4096, "{} instructions", p.len());
        }
    }
}
