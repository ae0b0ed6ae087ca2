//! How to decode the samples of one site: which registers and how much
//! stack each sample carries, and where a kernel-fetched value sits in the
//! raw record.

use std::sync::Arc;

use crate::elf::arg::{Arg, Operand, Reg64};
use crate::elf::note::Site;
use crate::tracefs::Field;
use crate::Error;

/// perf's number of an x86-64 register (the sampler decodes x86-64
/// registers only).
pub(super) fn perf_reg(reg: Reg64) -> Option<u32> {
    crate::arch::x86_64::register(reg).map(|r| r.perf)
}
pub(super) const PERF_REG_SP: u32 = crate::arch::x86_64::PERF_SP;
pub(super) const PERF_REG_IP: u32 = crate::arch::x86_64::PERF_IP;

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
    /// Read by the kernel at the hit (a tracefs uprobe event): where each
    /// value and string is in the raw record.
    pub(super) raw: Option<RawPlan>,
    /// The link-time address of the uprobe: the sampled instruction pointer
    /// minus this is the load bias.
    pub(super) attach_addr: u64,
}

/// The fields of a tracefs uprobe event's raw record, per argument.
#[derive(Clone, Debug)]
pub(super) struct RawPlan {
    pub(super) values: Vec<Option<Field>>,
    pub(super) strings: Vec<Option<Field>>,
    pub(super) bytes: Vec<Option<Field>>,
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
            raw: None,
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

    /// The sampled value of perf register `n`.
    pub(super) fn reg(&self, regs: &[u64], n: u32) -> u64 {
        let slot = (self.regs_mask & ((1u64 << n) - 1)).count_ones() as usize;
        regs.get(slot).copied().unwrap_or(0)
    }
}
