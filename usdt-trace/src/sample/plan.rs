//! How to decode the samples of one site: which registers and how much
//! stack each sample carries, and where a kernel-fetched value sits in the
//! raw record.

use std::sync::Arc;

use super::{Hit, Value};
use crate::elf::arg::{Arg, Operand, Reg, Reg64};
use crate::elf::note::Site;
use crate::engine::bpf::sampling::{
    ArgFetch, ARGS, FETCH_BYTES, FETCH_STRING, FETCH_VALUE, NO_REG, VALUE_MAX,
};
use crate::Error;

/// perf's number of an x86-64 register (the sampler decodes x86-64
/// registers only).
pub(super) fn perf_reg(reg: Reg64) -> Option<u32> {
    crate::arch::x86_64::register(reg).map(|r| r.perf)
}
pub(super) const PERF_REG_SP: u32 = crate::arch::x86_64::PERF_SP;

/// How to decode the samples of one site.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) provider: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) args: Vec<Arg>,
    /// Which arguments are string pointers.
    pub(super) strings: Vec<bool>,
    /// Which arguments are the addresses of byte slices (the length is the
    /// next argument): [`BYTES_FETCH`] bytes are read at the hit.
    pub(super) bytes: Vec<bool>,
    /// `sample_regs_user`.
    pub(super) regs_mask: u64,
    /// `sample_stack_user` (0: no stack copy).
    pub(super) stack_bytes: u32,
    /// The link-time address of the uprobe: the sampled instruction pointer
    /// minus this is the load bias.
    pub(super) attach_addr: u64,
}

impl Plan {
    pub(super) fn new(site: &Site, strings: Vec<bool>, stack_bytes: u32) -> Result<Plan, Error> {
        let mut mask = 1u64 << PERF_REG_SP;
        let mut memory = strings.iter().any(|s| *s);
        for arg in &site.args {
            let regs: Vec<Reg64> = match &arg.operand {
                Operand::Register(r) => vec![r.reg],
                Operand::Memory { base, .. } => vec![base.reg],
                Operand::Indexed { base, index, .. } => {
                    base.iter().chain([index]).map(|r| r.reg).collect()
                }
                Operand::Symbol { .. } => vec![Reg64::Rip],
                Operand::SymbolIndexed { base, index, .. } => base
                    .iter()
                    .chain(index)
                    .map(|r| r.reg)
                    .chain([Reg64::Rip])
                    .collect(),
                Operand::Immediate(_) | Operand::Unreadable { .. } => continue,
            };
            memory |= !matches!(arg.operand, Operand::Register(_));
            for reg in regs {
                let n = perf_reg(reg).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "aarch64 registers (in the arguments of {})",
                        site.probe()
                    ))
                })?;
                mask |= 1 << n;
            }
        }
        Ok(Plan {
            provider: site.provider.as_str().into(),
            name: site.name.as_str().into(),
            args: site.args.clone(),
            strings,
            bytes: vec![],
            regs_mask: mask,
            stack_bytes: if memory { stack_bytes } else { 0 },
            attach_addr: site.location,
        })
    }

    /// Marks the byte-slice arguments, which read memory like strings.
    pub(super) fn with_bytes(mut self, bytes: Vec<bool>, stack_bytes: u32) -> Plan {
        if bytes.iter().any(|b| *b) {
            self.stack_bytes = stack_bytes;
        }
        self.bytes = bytes;
        self
    }

    /// What a BPF sampling program reads at the hit for each argument (the
    /// first [`ARGS`]): memory operands' values, and the strings and bytes
    /// arguments point at, each string or byte slice in its own room.
    pub(super) fn fetches(&self) -> [ArgFetch; ARGS] {
        let mut out = [ArgFetch::default(); ARGS];
        let mut rooms = 0u8;
        let pt = |r: &Reg| perf_reg(r.reg).and_then(crate::arch::x86_64::pt_regs_index);
        let ip = perf_reg(Reg64::Rip).and_then(crate::arch::x86_64::pt_regs_index);
        for (i, (arg, f)) in self.args.iter().zip(out.iter_mut()).enumerate() {
            let (value, base, index, scale, disp) = match &arg.operand {
                Operand::Register(r) => (false, pt(r), None, 0, 0),
                Operand::Memory { base, disp } => (true, pt(base), None, 0, *disp),
                Operand::Indexed {
                    base,
                    index,
                    scale,
                    disp,
                } => (true, base.as_ref().and_then(pt), pt(index), *scale, *disp),
                Operand::Symbol { addr: Some(a), .. } => {
                    (true, ip, None, 0, a.wrapping_sub(self.attach_addr) as i64)
                }
                // The load bias is the instruction pointer minus the
                // uprobe's link-time address: added through a free register
                // slot; with both taken (gcc -fno-pie writes these, where the
                // bias is 0), the symbol's address alone.
                Operand::SymbolIndexed {
                    addr: Some(a),
                    base,
                    index,
                    scale,
                    ..
                } => {
                    let biased = a.wrapping_sub(self.attach_addr) as i64;
                    match (base, index) {
                        (None, index) => (true, ip, index.as_ref().and_then(pt), *scale, biased),
                        (Some(b), None) => (true, pt(b), ip, 1, biased),
                        (Some(b), Some(i)) => (true, pt(b), pt(i), *scale, *a as i64),
                    }
                }
                _ => continue,
            };
            let string = self.strings.get(i).copied().unwrap_or(false);
            let bytes = self.bytes.get(i).copied().unwrap_or(false);
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
        out
    }

    /// A hit of this plan's probe.
    pub(super) fn hit(&self, time_ns: u64, pid: u32, tid: u32, args: Vec<Value>) -> Hit {
        Hit {
            time_ns,
            pid,
            tid,
            provider: self.provider.clone(),
            name: self.name.clone(),
            args,
        }
    }
}
