//! What the BPF sampling program reads at a hit, per argument: derived by
//! this engine from the engine-neutral [`SampleSite`].

use super::sampling::{ArgFetch, ARGS, FETCH_BYTES, FETCH_STRING, FETCH_VALUE, NO_REG, VALUE_MAX};
use crate::elf::arg::{Operand, Reg, Reg64};
use crate::engine::{unsupported_registers, SampleSite};
use crate::Error;

/// The `struct pt_regs` index of a register (`None`: not in `pt_regs`,
/// such as `%fs`), or an error for a register of no x86-64 table (the BPF
/// engine reads x86-64 `pt_regs` only).
fn pt_index(reg: Reg64, s: &SampleSite<'_>) -> Result<Option<u8>, Error> {
    let perf = crate::arch::x86_64::register(reg).ok_or_else(|| unsupported_registers(s.site))?;
    Ok(crate::arch::x86_64::pt_regs_index(perf.perf))
}

/// What the program reads at the hit of `s` for each argument (the first
/// [`ARGS`]): memory operands' values, and the strings and bytes arguments
/// point at, each string or byte slice in its own room. A register the
/// x86-64 `pt_regs` has no room for is refused.
pub(super) fn fetches(s: &SampleSite<'_>) -> Result<[ArgFetch; ARGS], Error> {
    let mut out = [ArgFetch::default(); ARGS];
    let mut rooms = 0u8;
    let pt = |r: &Reg| pt_index(r.reg, s);
    let ip = pt_index(Reg64::Rip, s)?;
    for (i, arg) in s.args.iter().enumerate() {
        let (value, base, index, scale, disp) = match &arg.operand {
            Operand::Register(r) => (false, pt(r)?, None, 0, 0),
            Operand::Memory { base, disp } => (true, pt(base)?, None, 0, *disp),
            Operand::Indexed {
                base,
                index,
                scale,
                disp,
            } => {
                let base = base.as_ref().map(pt).transpose()?.flatten();
                (true, base, pt(index)?, *scale, *disp)
            }
            Operand::Symbol { addr: Some(a), .. } => {
                (true, ip, None, 0, a.wrapping_sub(s.attach_addr) as i64)
            }
            // The load bias is the instruction pointer minus the uprobe's
            // link-time address: added through a free register slot; with
            // both taken (gcc -fno-pie writes these, where the bias is 0),
            // the symbol's address alone.
            Operand::SymbolIndexed {
                addr: Some(a),
                base,
                index,
                scale,
                ..
            } => {
                let biased = a.wrapping_sub(s.attach_addr) as i64;
                let index_pt = index.as_ref().map(pt).transpose()?.flatten();
                let base_pt = base.as_ref().map(pt).transpose()?.flatten();
                match (base, index) {
                    (None, _) => (true, ip, index_pt, *scale, biased),
                    (Some(_), None) => (true, base_pt, ip, 1, biased),
                    (Some(_), Some(_)) => (true, base_pt, index_pt, *scale, *a as i64),
                }
            }
            _ => continue,
        };
        let Some(f) = out.get_mut(i) else {
            continue;
        };
        let string = s.strings.get(i).copied().unwrap_or(false);
        let bytes = s.bytes.get(i).copied().unwrap_or(false);
        if !value && !string && !bytes {
            continue;
        }
        f.kind = if value { FETCH_VALUE } else { 0 };
        if string || bytes {
            f.kind |= if string { FETCH_STRING } else { FETCH_BYTES };
            f.deref_slot = rooms;
            rooms += 1;
        }
        f.size = match arg.size {
            0 => 8,
            n => n.min(VALUE_MAX as u8),
        };
        f.base = base.unwrap_or(NO_REG);
        f.index = index.unwrap_or(NO_REG);
        f.scale = scale;
        f.disp = disp;
    }
    Ok(out)
}
