//! Decoding a sample: each argument from the sampled registers, the stack
//! copy, the raw record of a fetch event or, after the fact, the
//! process's memory.

use std::collections::HashMap;

use super::plan::{perf_reg, FetchPlan, Plan, PERF_REG_IP, PERF_REG_SP};
use super::{Hit, Value, BYTES_FETCH, STRING_MAX};
use crate::elf::arg::{Arg, Operand, Reg, RegWidth};
use crate::engine::bpf::sampling::{
    DEREF, FETCH_BYTES, FETCH_STRING, FETCH_VALUE, PT_REGS, SLOT, SLOTS_AT, VALUE_MAX,
};
use crate::engine::perf::tracefs::data_loc_string;
use crate::sys::process::read_process_memory;

/// A sample's registers and stack copy, and the process to read the rest from.
pub(super) struct Context<'a> {
    pub(super) pid: u32,
    pub(super) regs: &'a [u64],
    pub(super) sp: u64,
    pub(super) stack: &'a [u8],
}

impl Context<'_> {
    /// `len` bytes at `addr`: from the stack copy when they lie inside it,
    /// else from the process.
    pub(super) fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if let Some(bytes) = self.in_stack(addr, len) {
            return Some(bytes.to_vec());
        }
        let mut buf = vec![0u8; len];
        (read_process_memory(self.pid, addr, &mut buf) == len).then_some(buf)
    }

    pub(super) fn in_stack(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        self.stack.get(start..start.checked_add(len)?)
    }

    /// The NUL-terminated string at `addr`, at most [`STRING_MAX`] bytes.
    pub(super) fn string(&self, addr: u64) -> Value {
        if addr == 0 {
            return Value::Unreadable(0);
        }
        let in_stack = self
            .in_stack(addr, 1)
            .map(|_| &self.stack[(addr - self.sp) as usize..]);
        let bytes = match in_stack {
            Some(s) if s.iter().take(STRING_MAX + 1).any(|b| *b == 0) => s.to_vec(),
            _ => {
                let mut buf = vec![0u8; STRING_MAX + 1];
                let n = read_process_memory(self.pid, addr, &mut buf);
                if n == 0 {
                    return Value::Unreadable(addr);
                }
                buf.truncate(n);
                buf
            }
        };
        let end = bytes.iter().position(|b| *b == 0);
        let len = end.unwrap_or(bytes.len()).min(STRING_MAX);
        Value::Str {
            bytes: bytes[..len].to_vec(),
            truncated: end.is_none_or(|e| e > STRING_MAX),
        }
    }
}

/// Converts the low `size` bytes of `raw` to the argument's value.
pub(super) fn int_value(raw: u64, size: u8, signed: bool) -> i128 {
    let bits = u32::from(size.clamp(1, 8)) * 8;
    let masked = if bits == 64 {
        raw
    } else {
        raw & ((1u64 << bits) - 1)
    };
    if signed {
        let shift = 64 - bits;
        (((masked << shift) as i64) >> shift) as i128
    } else {
        masked as i128
    }
}

/// The part of a register's value a note names.
pub(super) fn register_part(v: u64, width: RegWidth) -> u64 {
    match width {
        RegWidth::Low8 => v & 0xff,
        RegWidth::High8 => (v >> 8) & 0xff,
        RegWidth::W16 => v & 0xffff,
        RegWidth::W32 => v & 0xffff_ffff,
        RegWidth::W64 => v,
    }
}

/// An argument's value from its little-endian bytes (`arg.size` of them,
/// or a register's 8).
pub(super) fn value_of(arg: &Arg, bytes: &[u8]) -> Value {
    let size = usize::from(arg.size);
    if size > 8 {
        return Value::Bytes(bytes[..size.min(bytes.len())].to_vec());
    }
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    let raw = u64::from_le_bytes(word);
    match (arg.float, arg.size) {
        (true, 4) => Value::F32(raw as u32),
        (true, 8) => Value::F64(raw),
        _ => Value::Int(int_value(raw, arg.size, arg.signed)),
    }
}

pub(super) fn decode_arg(plan: &Plan, cx: &Context<'_>, i: usize) -> Value {
    let arg = &plan.args[i];
    let reg = |r: &Reg| perf_reg(r.reg).map_or(0, |n| plan.reg(cx.regs, n));
    let addr = match &arg.operand {
        Operand::Unreadable { reason, .. } => return Value::Unavailable(reason.clone()),
        Operand::Immediate(n) => return finish(plan, cx, i, &n.to_le_bytes()),
        Operand::Register(r) => {
            let v = register_part(reg(r), r.width);
            return finish(plan, cx, i, &v.to_le_bytes());
        }
        Operand::Memory { base, disp } => reg(base).wrapping_add(*disp as u64),
        Operand::Indexed {
            base,
            index,
            scale,
            disp,
        } => base
            .as_ref()
            .map_or(0, reg)
            .wrapping_add(reg(index).wrapping_mul((*scale).into()))
            .wrapping_add(*disp as u64),
        Operand::Symbol { addr: Some(a), .. } => a.wrapping_add(load_bias(plan, cx)),
        Operand::SymbolIndexed {
            addr: Some(a),
            base,
            index,
            scale,
            ..
        } => a
            .wrapping_add(load_bias(plan, cx))
            .wrapping_add(base.as_ref().map_or(0, reg))
            .wrapping_add(index.as_ref().map_or(0, reg).wrapping_mul((*scale).into())),
        Operand::Symbol { name, .. } | Operand::SymbolIndexed { name, .. } => {
            return Value::Unavailable(format!("symbol `{name}` was not looked up"))
        }
    };
    match cx.read(addr, arg.size.into()) {
        Some(bytes) => finish(plan, cx, i, &bytes),
        None => Value::Unreadable(addr),
    }
}

/// How far the file is loaded from its link-time addresses: the sampled
/// instruction pointer (the uprobe's address in the process) minus the
/// uprobe's link-time address.
fn load_bias(plan: &Plan, cx: &Context<'_>) -> u64 {
    plan.reg(cx.regs, PERF_REG_IP)
        .wrapping_sub(plan.attach_addr)
}

/// The value of argument `i` from its bytes, or the string it points at.
pub(super) fn finish(plan: &Plan, cx: &Context<'_>, i: usize, bytes: &[u8]) -> Value {
    let value = value_of(&plan.args[i], bytes);
    match value {
        Value::Int(n) if plan.strings.get(i).copied().unwrap_or(false) => cx.string(n as u64),
        // A byte slice's first bytes, read after the hit.
        Value::Int(n) if plan.bytes.get(i).copied().unwrap_or(false) => {
            match cx.read(n as u64, BYTES_FETCH) {
                Some(bytes) => Value::Str {
                    bytes,
                    truncated: false,
                },
                None => value,
            }
        }
        value => value,
    }
}

/// Decodes argument `i` from a fetch event's raw record.
pub(super) fn decode_fetched_arg(
    plan: &Plan,
    fetch: &FetchPlan,
    data: &[u8],
    pid: u32,
    i: usize,
) -> Value {
    let arg = &plan.args[i];
    let bytes = match (&arg.operand, fetch.values[i]) {
        (Operand::Unreadable { reason, .. }, _) => return Value::Unavailable(reason.clone()),
        (Operand::Immediate(n), _) => n.to_le_bytes().to_vec(),
        (operand, Some(field)) => {
            let Some(bytes) = data.get(field.offset..field.offset + field.size) else {
                return Value::Unreadable(0);
            };
            match operand {
                Operand::Register(r) => {
                    let mut word = [0u8; 8];
                    let n = bytes.len().min(8);
                    word[..n].copy_from_slice(&bytes[..n]);
                    register_part(u64::from_le_bytes(word), r.width)
                        .to_le_bytes()
                        .to_vec()
                }
                _ => bytes.to_vec(),
            }
        }
        (_, None) => return Value::Unreadable(0),
    };
    let value = value_of(arg, &bytes);
    let Value::Int(ptr) = value else {
        return value;
    };
    // A byte slice's first bytes, read by the kernel at the hit.
    if let Some(field) = fetch.bytes.get(i).copied().flatten() {
        if let Some(bytes) = data.get(field.offset..field.offset + field.size) {
            return Value::Str {
                bytes: bytes.to_vec(),
                truncated: false,
            };
        }
    }
    if !plan.strings.get(i).copied().unwrap_or(false) {
        return value;
    }
    let ptr = ptr as u64;
    match fetch.strings[i].and_then(|f| data_loc_string(data, f)) {
        Some(bytes) => Value::Str {
            bytes: bytes[..bytes.len().min(STRING_MAX)].to_vec(),
            truncated: bytes.len() > STRING_MAX,
        },
        // The kernel does not fault pages in: read what it could not.
        None => Context {
            pid,
            regs: &[],
            sp: 0,
            stack: &[],
        }
        .string(ptr),
    }
}

/// Reads the fields of a sample record in order.
pub(super) struct Fields<'a>(pub(super) &'a [u8]);

impl<'a> Fields<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Decodes one `PERF_RECORD_SAMPLE` (header included).
pub(super) fn decode_sample(
    plans: &[Plan],
    ids: &HashMap<u64, usize>,
    record: &[u8],
) -> Option<Hit> {
    let mut f = Fields(record.get(8..)?);
    let plan = &plans[*ids.get(&f.u64()?)?];
    let pid_tid = f.take(8)?;
    let pid = u32::from_ne_bytes(pid_tid[0..4].try_into().ok()?);
    let tid = u32::from_ne_bytes(pid_tid[4..8].try_into().ok()?);
    let time_ns = f.u64()?;
    if let Some(fetch) = &plan.fetch {
        let size = u32::from_ne_bytes(f.take(4)?.try_into().ok()?) as usize;
        let data = f.take(size)?;
        let args = (0..plan.args.len())
            .map(|i| decode_fetched_arg(plan, fetch, data, pid, i))
            .collect();
        return Some(plan.hit(time_ns, pid, tid, args));
    }
    let abi = f.u64()?;
    let mut regs = [0u64; 64];
    let nregs = if abi == 0 {
        0
    } else {
        plan.regs_mask.count_ones() as usize
    };
    for r in &mut regs[..nregs] {
        *r = f.u64()?;
    }
    let regs = &regs[..nregs];
    let mut stack: &[u8] = &[];
    if plan.stack_bytes > 0 {
        let size = f.u64()? as usize;
        if size > 0 {
            let data = f.take(size)?;
            let dyn_size = (f.u64()? as usize).min(size);
            stack = &data[..dyn_size];
        }
    }
    let cx = Context {
        pid,
        regs,
        sp: plan.reg(regs, PERF_REG_SP),
        stack,
    };
    let args = (0..plan.args.len())
        .map(|i| decode_arg(plan, &cx, i))
        .collect();
    Some(plan.hit(time_ns, pid, tid, args))
}

/// Decodes one record of the BPF sampling program (see
/// [`crate::engine::bpf::sampling`]): the cookie is the plan's index.
pub(super) fn decode_bpf_record(plans: &[Plan], record: &[u8]) -> Option<Hit> {
    let mut f = Fields(record);
    let plan = plans.get(usize::try_from(f.u64()?).ok()?)?;
    let pid_tgid = f.u64()?;
    let (pid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    let time_ns = f.u64()?;
    let mut pt = [0u64; PT_REGS];
    for r in &mut pt {
        *r = f.u64()?;
    }
    // The registers the plan names, in perf's order, as a perf sample
    // carries them.
    let regs: Vec<u64> = (0..64u32)
        .filter(|n| plan.regs_mask & (1 << n) != 0)
        .map(|n| crate::arch::x86_64::pt_regs_index(n).map_or(0, |i| pt[usize::from(i)]))
        .collect();
    let cx = Context {
        pid,
        regs: &regs,
        sp: plan.reg(&regs, PERF_REG_SP),
        stack: &[],
    };
    let args = (0..plan.args.len())
        .map(|i| decode_bpf_arg(plan, &cx, record, i))
        .collect();
    Some(plan.hit(time_ns, pid, tid, args))
}

/// Argument `i` from what the program read at the hit; what it could not
/// read (a page not present: BPF programs do not fault pages in) is read
/// from the process now.
fn decode_bpf_arg(plan: &Plan, cx: &Context<'_>, record: &[u8], i: usize) -> Value {
    let Some(f) = plan
        .bpf_fetch
        .get(i)
        .filter(|f| f.kind != 0 && i < plan.bpf_layout.slots)
    else {
        return decode_arg(plan, cx, i);
    };
    let Some(slot) = record.get(SLOTS_AT + i * SLOT..SLOTS_AT + (i + 1) * SLOT) else {
        return decode_arg(plan, cx, i);
    };
    let rc = |at: usize| i32::from_ne_bytes(slot[at..at + 4].try_into().unwrap_or_default());
    let arg = &plan.args[i];
    let bytes: Vec<u8> = if f.kind & FETCH_VALUE != 0 {
        if rc(VALUE_MAX) != 0 {
            return decode_arg(plan, cx, i);
        }
        slot[..usize::from(f.size).min(VALUE_MAX)].to_vec()
    } else {
        match &arg.operand {
            Operand::Register(r) => {
                let v = perf_reg(r.reg).map_or(0, |n| plan.reg(cx.regs, n));
                register_part(v, r.width).to_le_bytes().to_vec()
            }
            _ => return decode_arg(plan, cx, i),
        }
    };
    let value = value_of(arg, &bytes);
    let Value::Int(ptr) = value else {
        return value;
    };
    let room_at = plan.bpf_layout.deref_at() + usize::from(f.deref_slot) * DEREF;
    let read = rc(VALUE_MAX + 4);
    if f.kind & FETCH_STRING != 0 {
        // The length read, its NUL included.
        let room = usize::try_from(read - 1)
            .ok()
            .and_then(|len| record.get(room_at..room_at + len));
        return match room {
            Some(s) => Value::Str {
                bytes: s[..s.len().min(STRING_MAX)].to_vec(),
                truncated: s.len() > STRING_MAX,
            },
            None => cx.string(ptr as u64),
        };
    }
    if f.kind & FETCH_BYTES != 0 {
        return match record.get(room_at..room_at + BYTES_FETCH) {
            Some(b) if read == 0 => Value::Str {
                bytes: b.to_vec(),
                truncated: false,
            },
            _ => finish(plan, cx, i, &bytes),
        };
    }
    value
}
