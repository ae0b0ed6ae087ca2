//! Aggregation in the kernel: programs, assembled at run time, that turn
//! hits into a latency histogram, a histogram of an argument's values, or
//! counts per argument value, inside BPF maps. No record per hit goes to
//! user space; user space reads the maps when it prints or is scraped.
//!
//! Every site of a link gets a cookie naming its *variant*: its role (a
//! latency's start or end, a value to put in a histogram, a value to
//! count) and how its argument is read (a register of the `struct pt_regs`
//! the program is given, memory at registers plus a displacement, an
//! immediate, or the thread). The program starts with a jump per variant;
//! sites that read alike share one, so a probe's many sites cost a few
//! instructions, not a few per site.
//!
//! The maps:
//!
//! - `stats`, a per-CPU array of one value of [`STATS_SLOTS`] u64 in the
//!   layout of the engine interface (`engine/aggregating.rs`): the log2
//!   buckets (slot 0 holds 0, slot `b` holds `[2^(b-1), 2^b)`), then the
//!   count, sum and maximum, and the hits that could not be aggregated
//!   (an end without its start, a start or value lost to a full map, a
//!   negative value, an argument that could not be read).
//! - `starts` (latency), a hash of 16-byte keys (the key's value and the
//!   process id) to the start's `CLOCK_MONOTONIC` nanoseconds.
//! - `values` (counts per value), a hash of 8-byte integers or
//!   [`STRING_KEY`]-byte strings to a count.

use super::asm::{
    add64_imm, add64_reg, and64_imm, arsh64_imm, atomic_add64, call, exit, load, load_map_fd,
    lsh64_imm, mov64_imm, mov64_reg, rsh64_imm, store, store32, sub64_reg, Asm, Cmp, Insn, Label,
    Reg, Size, R0, R1, R10, R2, R3, R4, R6, R7, R8, R9,
};
use crate::elf::arg::{Operand, RegWidth};
use super::filter::{self, Code};
use crate::engine::aggregating::{
    Role, BY_FULL, COUNT, LOST, MAX, NEGATIVE, STRING_KEY, SUM, UNMATCHED, UNREADABLE,
};
use crate::sys::bpf::helper::{
    GET_ATTACH_COOKIE, GET_CURRENT_PID_TGID, KTIME_GET_NS, MAP_DELETE_ELEM, MAP_LOOKUP_ELEM,
    MAP_UPDATE_ELEM, PROBE_READ_USER, PROBE_READ_USER_STR,
};
use crate::sys::bpf::BPF_NOEXIST;
use crate::{Error, Site};

/// The u64 slots of the `stats` value (a power of two, so that a bucket
/// index masked with `STATS_SLOTS - 1` is in bounds for the verifier).
pub(crate) const STATS_SLOTS: usize = 128;
/// The entries of the `starts` and `values` maps.
pub(crate) const MAP_ENTRIES: u32 = 65_536;

// The stack (below r10).
/// A value read from memory.
const READ_AT: i16 = -8;
/// The u32 key 0 of `stats`.
const ZERO_KEY_AT: i16 = -12;
/// The 16-byte key of `starts`: value, then process id; or the 8-byte
/// integer key of `values`.
const KEY_AT: i16 = -32;
/// A value to store: the start time, or a first count of 1.
const VALUE_AT: i16 = -40;
/// A string key of `values`.
const STRING_AT: i16 = -40 - STRING_KEY as i16;
/// The value of `starts` with a value per pair: the start time, then the
/// value (8 bytes, or a string of [`STRING_KEY`]).
const BY_START_AT: i16 = STRING_AT - 8 - 8 - STRING_KEY as i16;
/// The key of `by`: the pair's value, copied from its start.
const BY_KEY_AT: i16 = -256;
const _: () = assert!(BY_KEY_AT + STRING_KEY as i16 <= BY_START_AT);
const _: () = assert!(super::filter::SCRATCH_AT + 256 <= BY_KEY_AT);

/// Where an argument's value is at the hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// The thread (`bpf_get_current_pid_tgid`: process and thread id).
    Thread,
    /// A constant.
    Immediate(i32),
    /// A register: its `pt_regs` index, and whether it is the second byte
    /// (`%ah`).
    Register { pt: u8, high8: bool },
    /// Memory at `regs[base] + regs[index] * scale + disp`.
    Memory {
        base: Option<u8>,
        index: Option<u8>,
        scale: u8,
        disp: i32,
    },
}

/// How a site reads the argument it aggregates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Read {
    pub(crate) source: Source,
    /// The value's bytes: 1, 2, 4 or 8.
    pub(crate) size: u8,
    pub(crate) signed: bool,
    /// The value is the address of a NUL-terminated string: the string is
    /// the value (counted per value only).
    pub(crate) string: bool,
}

impl Read {
    /// The thread as a key.
    pub(crate) const THREAD: Read = Read {
        source: Source::Thread,
        size: 8,
        signed: false,
        string: false,
    };
}

/// A site's role, how it reads, the filter its hits pass and, for a start
/// of a latency per value, how it reads the value: sites with the same
/// variant share code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Variant {
    pub(crate) role: Role,
    pub(crate) read: Read,
    pub(crate) filter: Option<Code>,
    pub(crate) by: Option<Read>,
}

impl Variant {
    /// Whether its code can find memory it cannot read (and count it).
    fn reads_memory(&self) -> bool {
        let memory = |r: &Read| r.string || matches!(r.source, Source::Memory { .. });
        memory(&self.read) || self.by.as_ref().is_some_and(memory)
    }
}

/// One site to attach: its uprobe, its semaphore and its variant.
#[derive(Clone, Debug)]
pub(crate) struct AggSite {
    pub(crate) offset: u64,
    pub(crate) ref_ctr_offset: Option<u64>,
    pub(crate) variant: Variant,
}

/// The maps a program uses, by descriptor (`-1`: none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Maps {
    pub(crate) stats: i32,
    pub(crate) starts: i32,
    pub(crate) values: i32,
    /// A latency per value: the histogram of each value (a hash map), and
    /// the zeroed histogram a new value starts from (an array of one).
    pub(crate) by: i32,
    pub(crate) zero: i32,
    /// Whether the values of `by` are strings (else integers).
    pub(crate) by_strings: bool,
}

/// The program for `variants` (site cookie `i` is `variants[i]`).
/// Registers: r6 the context, r7 the `stats` value, r8 the argument, r9
/// the time.
pub(crate) fn aggregate_program(maps: &Maps, variants: &[Variant]) -> Result<Vec<Insn>, String> {
    let mut a = Asm::default();
    let done = a.label();
    let unreadable = a.label();
    a.push([
        mov64_reg(R6, R1),
        call(GET_ATTACH_COOKIE),
        mov64_reg(R7, R0),
    ]);
    let entries: Vec<Label> = variants.iter().map(|_| a.label()).collect();
    for (i, entry) in entries.iter().enumerate() {
        a.jump_if(R7, Cmp::Eq, i as i32, *entry);
    }
    a.jump(done);
    for (variant, entry) in variants.iter().zip(entries) {
        a.bind(entry);
        let drop = a.label();
        if let Some(code) = &variant.filter {
            filter::emit(&mut a, code, drop);
        }
        read_value(&mut a, &variant.read, unreadable);
        match variant.role {
            Role::Start => start(&mut a, maps, variant.by.as_ref(), unreadable, done),
            Role::End => end(&mut a, maps, maps.by >= 0, done),
            Role::Record => {
                if variant.read.signed {
                    let negative = a.label();
                    a.jump_if(R8, Cmp::Slt, 0, negative);
                    a.push([mov64_reg(R9, R8)]);
                    record(&mut a, maps, done);
                    a.bind(negative);
                    stat_add(&mut a, maps, NEGATIVE, done);
                } else {
                    a.push([mov64_reg(R9, R8)]);
                    record(&mut a, maps, done);
                }
            }
            Role::Count if variant.read.string => {
                a.push([mov64_imm(R1, 0)]);
                for i in 0..(STRING_KEY / 8) as i16 {
                    a.push([store(Size::DW, R10, STRING_AT + i * 8, R1)]);
                }
                a.push([
                    mov64_reg(R1, R10),
                    add64_imm(R1, STRING_AT.into()),
                    mov64_imm(R2, STRING_KEY as i32),
                    mov64_reg(R3, R8),
                    call(PROBE_READ_USER_STR),
                ]);
                a.jump_if(R0, Cmp::Slt, 0, unreadable);
                count_key(&mut a, maps, STRING_AT, done);
            }
            Role::Count => {
                a.push([store(Size::DW, R10, KEY_AT, R8)]);
                count_key(&mut a, maps, KEY_AT, done);
            }
        }
        // A hit its filter drops does nothing, but for an end, which
        // forgets its start (else the map would keep it).
        if variant.filter.is_some() {
            a.bind(drop);
            if variant.role == Role::End {
                read_value(&mut a, &variant.read, done);
                start_key(&mut a);
                a.push(load_map_fd(R1, maps.starts));
                a.push([
                    mov64_reg(R2, R10),
                    add64_imm(R2, KEY_AT.into()),
                    call(MAP_DELETE_ELEM),
                ]);
            }
            a.jump(done);
        }
    }
    // Only where something jumps to it: the verifier refuses unreachable
    // instructions.
    if variants.iter().any(Variant::reads_memory) {
        a.bind(unreadable);
        stat_add(&mut a, maps, UNREADABLE, done);
    }
    a.bind(done);
    a.push([mov64_imm(R0, 0), exit()]);
    a.finish()
}

/// `r8 = ` the argument (sign- or zero-extended from its size); to
/// `unreadable` when its memory cannot be read.
fn read_value(a: &mut Asm, read: &Read, unreadable: Label) {
    load_operand(a, read, R8, unreadable);
}

/// `dst = ` the argument `read` reads, from the context in r6 (sign- or
/// zero-extended from its size); to `unreadable` when its memory cannot
/// be read. Uses r0 to r3 and the stack at [`READ_AT`].
pub(crate) fn load_operand(a: &mut Asm, read: &Read, dst: Reg, unreadable: Label) {
    let reg_at = |pt: u8| (pt as i16) * 8;
    match read.source {
        Source::Thread => {
            a.push([call(GET_CURRENT_PID_TGID), mov64_reg(dst, R0)]);
            return;
        }
        Source::Immediate(v) => a.push([mov64_imm(dst, v)]),
        Source::Register { pt, high8 } => {
            a.push([load(Size::DW, dst, R6, reg_at(pt))]);
            if high8 {
                a.push([rsh64_imm(dst, 8)]);
            }
        }
        Source::Memory {
            base,
            index,
            scale,
            disp,
        } => {
            a.push([mov64_imm(R3, disp)]);
            if let Some(base) = base {
                a.push([load(Size::DW, R1, R6, reg_at(base)), add64_reg(R3, R1)]);
            }
            if let Some(index) = index {
                a.push([load(Size::DW, R1, R6, reg_at(index))]);
                if scale > 1 {
                    a.push([lsh64_imm(R1, scale.trailing_zeros() as i32)]);
                }
                a.push([add64_reg(R3, R1)]);
            }
            a.push([
                mov64_imm(R1, 0),
                store(Size::DW, R10, READ_AT, R1),
                mov64_reg(R1, R10),
                add64_imm(R1, READ_AT.into()),
                mov64_imm(R2, i32::from(read.size.clamp(1, 8))),
                call(PROBE_READ_USER),
            ]);
            a.jump_if(R0, Cmp::Ne, 0, unreadable);
            a.push([load(Size::DW, dst, R10, READ_AT)]);
        }
    }
    if read.size < 8 {
        let shift = 64 - 8 * i32::from(read.size.max(1));
        a.push([lsh64_imm(dst, shift)]);
        a.push([if read.signed && !read.string {
            arsh64_imm(dst, shift)
        } else {
            rsh64_imm(dst, shift)
        }]);
    }
}

/// The 16-byte key of `starts` from r8: the value and the process id.
fn start_key(a: &mut Asm) {
    a.push([
        store(Size::DW, R10, KEY_AT, R8),
        call(GET_CURRENT_PID_TGID),
        rsh64_imm(R0, 32),
        store(Size::DW, R10, KEY_AT + 8, R0),
    ]);
}

/// A start: `starts[key] = now` (and, with `by`, the value the pair's
/// histogram is kept under), or a lost start when the map is full.
fn start(a: &mut Asm, maps: &Maps, by: Option<&Read>, unreadable: Label, done: Label) {
    start_key(a);
    let value = match by {
        None => VALUE_AT,
        Some(_) => BY_START_AT,
    };
    a.push([call(KTIME_GET_NS), store(Size::DW, R10, value, R0)]);
    match by {
        None => {}
        Some(by) if by.string => {
            // Zeroed first: the key of `by` is all the bytes.
            a.push([mov64_imm(R1, 0)]);
            for i in 0..(STRING_KEY / 8) as i16 {
                a.push([store(Size::DW, R10, value + 8 + i * 8, R1)]);
            }
            load_operand(a, by, R3, unreadable);
            a.push([
                mov64_reg(R1, R10),
                add64_imm(R1, (value + 8).into()),
                mov64_imm(R2, STRING_KEY as i32),
                call(PROBE_READ_USER_STR),
            ]);
            a.jump_if(R0, Cmp::Slt, 0, unreadable);
        }
        Some(by) => {
            load_operand(a, by, R1, unreadable);
            a.push([store(Size::DW, R10, value + 8, R1)]);
        }
    }
    a.push(load_map_fd(R1, maps.starts));
    a.push([
        mov64_reg(R2, R10),
        add64_imm(R2, KEY_AT.into()),
        mov64_reg(R3, R10),
        add64_imm(R3, value.into()),
        mov64_imm(R4, 0),
        call(MAP_UPDATE_ELEM),
    ]);
    a.jump_if(R0, Cmp::Eq, 0, done);
    stat_add(a, maps, LOST, done);
}

/// An end: the time since its key's start goes to the histogram (and,
/// `by` (the maps keep a histogram per value), to the histogram of the
/// start's value), and the start is removed; without a start, an
/// unmatched end.
fn end(a: &mut Asm, maps: &Maps, by: bool, done: Label) {
    let found = a.label();
    let ordered = a.label();
    a.push([call(KTIME_GET_NS), mov64_reg(R9, R0)]);
    start_key(a);
    a.push(load_map_fd(R1, maps.starts));
    a.push([
        mov64_reg(R2, R10),
        add64_imm(R2, KEY_AT.into()),
        call(MAP_LOOKUP_ELEM),
    ]);
    a.jump_if(R0, Cmp::Ne, 0, found);
    stat_add(a, maps, UNMATCHED, done);
    a.bind(found);
    a.push([load(Size::DW, R1, R0, 0), sub64_reg(R9, R1)]);
    if by {
        // The value, before its start is removed.
        let words = maps_by_words(maps);
        for i in 0..words {
            a.push([
                load(Size::DW, R1, R0, 8 + i * 8),
                store(Size::DW, R10, BY_KEY_AT + i * 8, R1),
            ]);
        }
    }
    a.push(load_map_fd(R1, maps.starts));
    a.push([
        mov64_reg(R2, R10),
        add64_imm(R2, KEY_AT.into()),
        call(MAP_DELETE_ELEM),
    ]);
    // A start stored on another CPU a little later than this end's clock.
    a.jump_if(R9, Cmp::Sge, 0, ordered);
    a.push([mov64_imm(R9, 0)]);
    a.bind(ordered);
    if !by {
        record(a, maps, done);
        return;
    }
    stats_value(a, maps, done);
    record_into(a);
    by_histogram(a, maps, done);
}

/// How many 8-byte words the value of a latency per value takes.
fn maps_by_words(maps: &Maps) -> i16 {
    match maps.by_strings {
        true => (STRING_KEY / 8) as i16,
        false => 1,
    }
}

/// r9 into the histogram of the value at [`BY_KEY_AT`], a new value's
/// histogram made from the zeroed one (a pair whose new value finds the
/// map full counts in [`BY_FULL`]); then to `done`.
fn by_histogram(a: &mut Asm, maps: &Maps, done: Label) {
    let full = a.label();
    let zeroed = |a: &mut Asm| first_value(a, maps.zero, R3, done);
    find_or_insert(a, maps.by, BY_KEY_AT, &zeroed, full);
    a.push([mov64_reg(R7, R0)]);
    record_into(a);
    a.jump(done);
    a.bind(full);
    stat_add(a, maps, BY_FULL, done);
}

/// `r0 = ` the value of the key at `r10 + at` in the hash `map`, inserted
/// first when new (from the value `initial` points r3 at); to `full` when
/// the map has no room for it. Another CPU may insert the same key
/// meanwhile (`EEXIST`): the second lookup finds it.
fn find_or_insert(a: &mut Asm, map: i32, at: i16, initial: &dyn Fn(&mut Asm), full: Label) {
    let found = a.label();
    let lookup = |a: &mut Asm| {
        a.push(load_map_fd(R1, map));
        a.push([
            mov64_reg(R2, R10),
            add64_imm(R2, at.into()),
            call(MAP_LOOKUP_ELEM),
        ]);
    };
    lookup(a);
    a.jump_if(R0, Cmp::Ne, 0, found);
    initial(a);
    a.push(load_map_fd(R1, map));
    a.push([
        mov64_reg(R2, R10),
        add64_imm(R2, at.into()),
        mov64_imm(R4, BPF_NOEXIST),
        call(MAP_UPDATE_ELEM),
    ]);
    lookup(a);
    a.jump_if(R0, Cmp::Eq, 0, full);
    a.bind(found);
}

/// r7 = this CPU's `stats` value; to `done` if the lookup fails.
fn stats_value(a: &mut Asm, maps: &Maps, done: Label) {
    first_value(a, maps.stats, R7, done);
}

/// `dst = ` the value of key 0 of the array `map` (this CPU's, for a
/// per-CPU array); to `done` if the lookup fails.
fn first_value(a: &mut Asm, map: i32, dst: Reg, done: Label) {
    a.push([mov64_imm(R1, 0), store32(R10, ZERO_KEY_AT, R1)]);
    a.push(load_map_fd(R1, map));
    a.push([
        mov64_reg(R2, R10),
        add64_imm(R2, ZERO_KEY_AT.into()),
        call(MAP_LOOKUP_ELEM),
    ]);
    a.jump_if(R0, Cmp::Eq, 0, done);
    a.push([mov64_reg(dst, R0)]);
}

/// `stats[slot] += 1`, then to `done`.
fn stat_add(a: &mut Asm, maps: &Maps, slot: usize, done: Label) {
    stats_value(a, maps, done);
    a.push([mov64_imm(R1, 1), atomic_add64(R7, (slot * 8) as i16, R1)]);
    a.jump(done);
}

/// r9 into the histogram: its log2 bucket, the count, the sum and the
/// maximum; then to `done`.
fn record(a: &mut Asm, maps: &Maps, done: Label) {
    stats_value(a, maps, done);
    record_into(a);
    a.jump(done);
}

/// r9 into the histogram r7 points at (in the layout of `stats`); falls
/// through.
fn record_into(a: &mut Asm) {
    let not_max = a.label();
    let bucketed = a.label();
    a.push([
        mov64_imm(R1, 1),
        atomic_add64(R7, (COUNT * 8) as i16, R1),
        atomic_add64(R7, (SUM * 8) as i16, R9),
        load(Size::DW, R1, R7, (MAX * 8) as i16),
    ]);
    // Per CPU: only a task preempted here on the same CPU could race, and
    // it would lower the maximum by one value at most (a histogram per
    // value, shared by the CPUs: a hit on another CPU at the same moment).
    a.jump_if_reg(R1, Cmp::Ge, R9, not_max);
    a.push([store(Size::DW, R7, (MAX * 8) as i16, R9)]);
    a.bind(not_max);
    // r1 = 0 for 0, else floor(log2(r9)) + 1, by halving the width.
    a.push([mov64_imm(R1, 0), mov64_reg(R2, R9)]);
    a.jump_if(R2, Cmp::Eq, 0, bucketed);
    a.push([mov64_imm(R1, 1)]);
    for shift in [32, 16, 8, 4, 2, 1] {
        let skip = a.label();
        a.push([mov64_reg(R3, R2), rsh64_imm(R3, shift)]);
        a.jump_if(R3, Cmp::Eq, 0, skip);
        a.push([mov64_reg(R2, R3), add64_imm(R1, shift)]);
        a.bind(skip);
    }
    a.bind(bucketed);
    a.push([
        and64_imm(R1, (STATS_SLOTS - 1) as i32),
        lsh64_imm(R1, 3),
        add64_reg(R1, R7),
        mov64_imm(R2, 1),
        atomic_add64(R1, 0, R2),
    ]);
}

/// `values[key at r10 + at] += 1`, inserting 0 for a new key first; a
/// value lost to a full map is counted in `stats`. Then to `done`.
fn count_key(a: &mut Asm, maps: &Maps, at: i16, done: Label) {
    let lost = a.label();
    let zero = |a: &mut Asm| {
        a.push([
            mov64_imm(R1, 0),
            store(Size::DW, R10, VALUE_AT, R1),
            mov64_reg(R3, R10),
            add64_imm(R3, VALUE_AT.into()),
        ]);
    };
    find_or_insert(a, maps.values, at, &zero, lost);
    a.push([mov64_imm(R1, 1), atomic_add64(R0, 0, R1)]);
    a.jump(done);
    a.bind(lost);
    stat_add(a, maps, LOST, done);
}

/// How the program reads operand `i` of `site` (a pointer, with `string`)
/// to `verb` it (`aggregate`, `filter on`).
pub(crate) fn arg_read(site: &Site, i: usize, string: bool, verb: &str) -> Result<Read, Error> {
    let probe = site.probe();
    let arg = site.args.get(i).ok_or_else(|| Error::NoSuchArg {
        probe: probe.clone(),
        arg: i,
        args: site.args.len(),
    })?;
    let unsupported = |what: &str| {
        Error::Unsupported(format!(
            "cannot {verb} arg{i} of {probe} ({}) in the kernel: it {what}",
            site.args_text.split_whitespace().nth(i).unwrap_or("?")
        ))
    };
    if arg.float {
        return Err(unsupported("is a floating-point value"));
    }
    // The `pt_regs` slot of a register, by the table of its file's
    // machine, which must be this one.
    let arch = crate::engine::site_arch(site)?;
    let pt = |r: &crate::elf::arg::Reg| {
        arch.pt_slot(r.reg)
            .ok_or_else(|| unsupported("is in a register BPF cannot read"))
    };
    let small = |v: i64| i32::try_from(v).map_err(|_| unsupported("has a displacement past 2 GiB"));
    let source = match &arg.operand {
        Operand::Immediate(v) => Source::Immediate(small(*v)?),
        Operand::Register(r) => Source::Register {
            pt: pt(r)?,
            high8: r.width == RegWidth::High8,
        },
        Operand::Memory { base, disp } => Source::Memory {
            base: Some(pt(base)?),
            index: None,
            scale: 1,
            disp: small(*disp)?,
        },
        Operand::Indexed {
            base,
            index,
            scale,
            disp,
        } => Source::Memory {
            base: base.as_ref().map(pt).transpose()?,
            index: Some(pt(index)?),
            scale: *scale,
            disp: small(*disp)?,
        },
        _ => {
            return Err(unsupported(
                "is addressed by a symbol; `usdt trace` reads it",
            ))
        }
    };
    Ok(Read {
        source,
        size: if arg.size == 0 { 8 } else { arg.size.min(8) },
        signed: arg.signed,
        string,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::aggregating::BUCKETS;

    const MAPS: Maps = Maps {
        stats: 3,
        starts: 4,
        values: 5,
        by: 6,
        zero: 7,
        by_strings: true,
    };

    fn read(source: Source, string: bool) -> Read {
        Read {
            source,
            size: 4,
            signed: true,
            string,
        }
    }

    fn variant(role: Role, source: Source, string: bool) -> Variant {
        Variant {
            role,
            read: read(source, string),
            filter: None,
            by: None,
        }
    }

    #[test]
    fn every_program_ends_in_exit_and_fits() {
        let mem = Source::Memory {
            base: Some(4),
            index: Some(10),
            scale: 8,
            disp: -16,
        };
        let reg = Source::Register {
            pt: 14,
            high8: false,
        };
        let all = [
            variant(Role::Start, Source::Thread, false),
            variant(Role::End, reg, false),
            variant(Role::Record, mem, false),
            variant(Role::Count, reg, true),
            variant(Role::Count, Source::Immediate(3), false),
        ];
        let p = aggregate_program(&MAPS, &all).unwrap();
        assert_eq!(p.last(), Some(&exit()));
        assert!(p.len() < 4096, "{} instructions", p.len());
        // Filtered, and a latency per value (a string, an integer).
        let filtered = Code::Int {
            read: read(reg, false),
            cmp: Cmp::Sge,
            value: 500,
        };
        let mut by = vec![];
        for (string, by_read) in [(true, read(mem, true)), (false, read(reg, false))] {
            let mut start = variant(Role::Start, reg, false);
            start.by = Some(by_read);
            start.filter = Some(filtered.clone());
            let mut end = variant(Role::End, Source::Thread, false);
            end.filter = Some(filtered.clone());
            let maps = Maps {
                by_strings: string,
                ..MAPS
            };
            let p = aggregate_program(&maps, &[start, end]).unwrap();
            assert_eq!(p.last(), Some(&exit()));
            by.push(p.len());
        }
        assert!(by.iter().all(|n| *n < 4096), "{by:?}");
    }

    #[test]
    fn the_slots_fit_the_mask() {
        const { assert!(UNREADABLE < STATS_SLOTS) };
        const { assert!(STATS_SLOTS.is_power_of_two()) };
        const { assert!(BUCKETS <= COUNT) };
        // The stack below r10 (512 bytes) holds every slot.
        const { assert!(STRING_AT >= -512) };
    }
}
