//! The one decoder: each argument of a raw hit (`crate::raw`), whichever
//! engine read it, from what the engine fetched at the hit, the registers,
//! the stack copy or, after the fact, the process's memory.

use super::plan::Plan;
use super::{Hit, Value, BYTES_FETCH, STRING_MAX};
use crate::elf::arg::{Arg, Operand, Reg, RegWidth};
use crate::raw::{Fetched, RawHit, Regs};
use crate::sys::process::read_process_memory;

/// A sample's registers and stack copy, and the process to read the rest from.
pub(super) struct Context<'a> {
    pub(super) pid: u32,
    pub(super) regs: &'a Regs,
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

/// Decodes every argument of `raw`, a hit of `plan`'s site.
pub(super) fn decode(plan: &Plan, raw: &RawHit<'_>) -> Hit {
    let cx = Context {
        pid: raw.pid,
        regs: &raw.regs,
        sp: raw.regs.get(plan.arch.sp).unwrap_or(0),
        stack: raw.stack,
    };
    let args = (0..plan.args.len())
        .map(|i| {
            let fetched = raw.fetched.get(i).copied().unwrap_or_default();
            decode_arg(plan, &cx, fetched, i)
        })
        .collect();
    plan.hit(raw.time_ns, raw.pid, raw.tid, args)
}

/// Argument `i`: its bytes as fetched at the hit, or computed from the
/// registers and read; then the string or bytes it points at.
pub(super) fn decode_arg(plan: &Plan, cx: &Context<'_>, fetched: Fetched<'_>, i: usize) -> Value {
    let arg = &plan.args[i];
    let reg = |r: &Reg| cx.regs.get(r.reg).unwrap_or(0);
    let bytes: Vec<u8> = match (&arg.operand, fetched.value) {
        (Operand::Unreadable { reason, .. }, _) => return Value::Unavailable(reason.clone()),
        (Operand::Immediate(n), _) => n.to_le_bytes().to_vec(),
        (Operand::Register(r), Some(v)) => register_part(le_u64(v), r.width).to_le_bytes().to_vec(),
        (_, Some(v)) => v.to_vec(),
        // Neither fetched nor registers to compute it from.
        (_, None) if cx.regs.is_empty() => return Value::Unreadable(0),
        (Operand::Register(r), None) => register_part(reg(r), r.width).to_le_bytes().to_vec(),
        (operand, None) => {
            let addr = match address(plan, cx, operand) {
                Ok(addr) => addr,
                Err(value) => return value,
            };
            match cx.read(addr, arg.size.into()) {
                Some(bytes) => bytes,
                None => return Value::Unreadable(addr),
            }
        }
    };
    let value = value_of(arg, &bytes);
    let Value::Int(ptr) = value else {
        return value;
    };
    if plan.bytes.get(i).copied().unwrap_or(false) {
        // A byte slice's first bytes: read at the hit, else now.
        let bytes = match fetched.pointed {
            Some(b) => Some(b.to_vec()),
            None => cx.read(ptr as u64, BYTES_FETCH),
        };
        return match bytes {
            Some(bytes) => Value::Str {
                bytes,
                truncated: false,
            },
            None => value,
        };
    }
    if plan.strings.get(i).copied().unwrap_or(false) {
        return match fetched.pointed {
            Some(s) => Value::Str {
                bytes: s[..s.len().min(STRING_MAX)].to_vec(),
                truncated: s.len() > STRING_MAX,
            },
            // Not read at the hit (engines do not fault pages in): now.
            None => cx.string(ptr as u64),
        };
    }
    value
}

/// The address a memory operand names, from the registers; a symbol not
/// looked up is said as a value.
fn address(plan: &Plan, cx: &Context<'_>, operand: &Operand) -> Result<u64, Value> {
    let reg = |r: &Reg| cx.regs.get(r.reg).unwrap_or(0);
    Ok(match operand {
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
            return Err(Value::Unavailable(format!(
                "symbol `{name}` was not looked up"
            )))
        }
        Operand::Register(_) | Operand::Immediate(_) | Operand::Unreadable { .. } => 0,
    })
}

/// How far the file is loaded from its link-time addresses: the
/// instruction pointer at the hit (the uprobe's address in the process)
/// minus the uprobe's link-time address.
fn load_bias(plan: &Plan, cx: &Context<'_>) -> u64 {
    cx.regs
        .get(plan.arch.ip)
        .unwrap_or(0)
        .wrapping_sub(plan.attach_addr)
}

/// Up to 8 little-endian bytes as a u64.
fn le_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(word)
}
