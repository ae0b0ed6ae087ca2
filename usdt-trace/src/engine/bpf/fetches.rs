//! The descriptor row of the BPF sampling program: what it reads at a hit,
//! per argument ([`ArgFetch`]), derived by this engine from the
//! engine-neutral [`SampleSite`] with the `struct pt_regs` slots of the
//! site's machine.

use crate::arch::Arch;
use crate::elf::arg::{Operand, Reg, Reg64};
use crate::engine::{unsupported_registers, SampleSite};
use crate::Error;

/// The arguments a descriptor row (and a record) has room for (a note may
/// have more: those past it are read from the registers and the process).
pub(crate) const ARGS: usize = usdt_runtime::MAX_ARGS;
/// The most value bytes read per argument.
pub(crate) const VALUE_MAX: usize = 24;

/// [`ArgFetch::kind`]: read `size` bytes at the address.
pub(crate) const FETCH_VALUE: u8 = 1;
/// [`ArgFetch::kind`]: read the string the value (or the address, without
/// [`FETCH_VALUE`]) points at.
pub(crate) const FETCH_STRING: u8 = 2;
/// [`ArgFetch::kind`]: read [`BYTES_FETCH`](crate::sample::value::BYTES_FETCH)
/// bytes where the value (or the address) points.
pub(crate) const FETCH_BYTES: u8 = 4;
/// [`ArgFetch::base`] and [`ArgFetch::index`]: no register.
pub(crate) const NO_REG: u8 = 0xff;

/// What the program reads at a hit for one argument: 32 bytes of the
/// descriptor row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArgFetch {
    /// [`FETCH_VALUE`], [`FETCH_STRING`], [`FETCH_BYTES`] bits; 0: nothing.
    pub(crate) kind: u8,
    /// Value bytes to read (at most [`VALUE_MAX`]).
    pub(crate) size: u8,
    /// The `pt_regs` index of the base register, or [`NO_REG`].
    pub(crate) base: u8,
    /// The `pt_regs` index of the index register, or [`NO_REG`].
    pub(crate) index: u8,
    pub(crate) scale: u8,
    /// Which string room the string or bytes go to.
    pub(crate) deref_slot: u8,
    pub(crate) disp: i64,
}

impl Default for ArgFetch {
    fn default() -> ArgFetch {
        ArgFetch {
            kind: 0,
            size: 0,
            base: NO_REG,
            index: NO_REG,
            scale: 0,
            deref_slot: 0,
            disp: 0,
        }
    }
}

impl ArgFetch {
    /// The row's 32 bytes as the program reads them.
    pub(super) fn bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..6].copy_from_slice(&[
            self.kind,
            self.size,
            self.base,
            self.index,
            self.scale,
            self.deref_slot,
        ]);
        b[8..16].copy_from_slice(&self.disp.to_ne_bytes());
        b
    }
}

/// The `struct pt_regs` slot of a register (`None`: none, such as
/// riscv64's `zero`), or an error for a register of another machine.
fn pt_slot(arch: &Arch, reg: Reg64, s: &SampleSite<'_>) -> Result<Option<u8>, Error> {
    let row = arch
        .register(reg)
        .ok_or_else(|| unsupported_registers(s.site))?;
    Ok(row.pt_regs)
}

/// What the program reads at the hit of `s` for each argument (the first
/// [`ARGS`]), from the `struct pt_regs` slots of `arch` (its machine's
/// table): memory operands' values, and the strings and bytes arguments
/// point at, each string or byte slice in its own room.
pub(super) fn fetches(s: &SampleSite<'_>, arch: &Arch) -> Result<[ArgFetch; ARGS], Error> {
    let mut out = [ArgFetch::default(); ARGS];
    let mut rooms = 0u8;
    let pt = |r: &Reg| pt_slot(arch, r.reg, s);
    let ip = pt_slot(arch, arch.ip, s)?;
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
