//! The one place a machine's unwinder is chosen: framehop's x86-64 or
//! aarch64 unwinder behind one type, started from the registers the
//! machine's table names ([`Arch::unwind_registers`]). framehop has no
//! other unwinder (riscv64's stacks are refused: [`super::supported`]).
//!
//! [`Arch::unwind_registers`]: crate::arch::Arch::unwind_registers

use std::sync::Arc;

use framehop::aarch64::{CacheAarch64, PtrAuthMask, UnwindRegsAarch64, UnwinderAarch64};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, UnwindIterator, Unwinder as _};

use crate::arch::Machine;
use crate::raw::Regs;

/// The machines whose stacks are unwound: those [`Unwinder::of`] has an
/// unwinder for.
pub(crate) const MACHINES: [Machine; 2] = [Machine::X86_64, Machine::Aarch64];

/// The registers at a hit that unwinding starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// The instruction pointer: the probe's site.
    pub(crate) ip: u64,
    /// The stack pointer: where the stack copy starts.
    pub(crate) sp: u64,
    /// The frame pointer.
    pub(crate) fp: u64,
    /// The link register (0 on a machine without one).
    pub(crate) lr: u64,
}

impl Start {
    /// The registers of `machine`'s table ([`Arch::unwind_registers`])
    /// in `regs`; `None` when one is missing.
    ///
    /// [`Arch::unwind_registers`]: crate::arch::Arch::unwind_registers
    pub(crate) fn of(machine: Machine, regs: &Regs) -> Option<Start> {
        let arch = machine.arch();
        let lr = match arch.lr {
            Some(lr) => regs.get(lr)?,
            None => 0,
        };
        Some(Start {
            ip: regs.get(arch.ip)?,
            sp: regs.get(arch.sp)?,
            fp: regs.get(arch.fp)?,
            lr,
        })
    }
}

/// framehop's unwinder of one machine, with its cache.
pub(crate) enum Unwinder {
    X86_64(UnwinderX86_64<Arc<[u8]>>, CacheX86_64),
    Aarch64(UnwinderAarch64<Arc<[u8]>>, CacheAarch64),
}

impl Unwinder {
    /// An unwinder of `machine`'s stacks (with no file yet), if framehop
    /// has one.
    pub(crate) fn of(machine: Machine) -> Option<Unwinder> {
        match machine {
            Machine::X86_64 => Some(Unwinder::X86_64(UnwinderX86_64::new(), CacheX86_64::new())),
            Machine::Aarch64 => Some(Unwinder::Aarch64(
                UnwinderAarch64::new(),
                CacheAarch64::new(),
            )),
            _ => None,
        }
    }

    /// An unwinder of the stacks of the machine this program runs on (the
    /// kernel gives a uprobe its registers), if framehop has one.
    pub(crate) fn host() -> Option<Unwinder> {
        Machine::host().and_then(Unwinder::of)
    }

    /// The machine it unwinds.
    pub(crate) fn machine(&self) -> Machine {
        match self {
            Unwinder::X86_64(..) => Machine::X86_64,
            Unwinder::Aarch64(..) => Machine::Aarch64,
        }
    }

    /// Adds a mapped file's unwind tables.
    pub(crate) fn add_module(&mut self, module: Module<Arc<[u8]>>) {
        match self {
            Unwinder::X86_64(u, _) => u.add_module(module),
            Unwinder::Aarch64(u, _) => u.add_module(module),
        }
    }

    /// Forgets the file mapped from `start`.
    pub(crate) fn remove_module(&mut self, start: u64) {
        match self {
            Unwinder::X86_64(u, _) => u.remove_module(start),
            Unwinder::Aarch64(u, _) => u.remove_module(start),
        }
    }

    /// Unwinds from `start`, reading the stack with `read`: each frame,
    /// innermost first, goes to `keep`, until it returns false. Whether
    /// the unwinder reached the outermost frame.
    ///
    /// On aarch64 a return address may carry a pointer authentication
    /// code in its high bits (code built with `-mbranch-protection`):
    /// the bits above the highest code address of the files mapped are
    /// stripped.
    pub(crate) fn unwind(
        &mut self,
        start: Start,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
        keep: impl FnMut(FrameAddress) -> bool,
    ) -> bool {
        match self {
            Unwinder::X86_64(u, cache) => {
                let regs = UnwindRegsX86_64::new(start.ip, start.sp, start.fp);
                walk(u.iter_frames(start.ip, regs, cache, read), keep)
            }
            Unwinder::Aarch64(u, cache) => {
                let mask = match u.max_known_code_address() {
                    0 => PtrAuthMask::new_no_strip(),
                    max => PtrAuthMask::from_max_known_address(max),
                };
                let regs =
                    UnwindRegsAarch64::new_with_ptr_auth_mask(mask, start.lr, start.sp, start.fp);
                walk(u.iter_frames(start.ip, regs, cache, read), keep)
            }
        }
    }
}

/// Each frame of `frames` to `keep` until it returns false; whether the
/// unwinder reached the outermost frame.
fn walk<U, F>(
    mut frames: UnwindIterator<'_, '_, '_, U, F>,
    mut keep: impl FnMut(FrameAddress) -> bool,
) -> bool
where
    U: framehop::Unwinder,
    F: FnMut(u64) -> Result<u64, ()>,
{
    loop {
        match frames.next() {
            Ok(Some(frame)) if keep(frame) => {}
            Ok(Some(_)) | Err(_) => return false,
            Ok(None) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reg64;

    /// framehop unwinds x86-64 and aarch64: those have an unwinder, and
    /// only those; riscv64 none.
    #[test]
    fn the_machines_with_an_unwinder_are_those_listed() {
        for machine in [Machine::X86_64, Machine::Aarch64, Machine::Riscv64] {
            let unwinder = Unwinder::of(machine);
            assert_eq!(unwinder.is_some(), MACHINES.contains(&machine), "{machine}");
            if let Some(u) = unwinder {
                assert_eq!(u.machine(), machine);
            }
        }
    }

    fn regs(values: &[(Reg64, u64)]) -> Regs {
        let mut regs = Regs::default();
        for (reg, v) in values {
            regs.push(*reg, *v);
        }
        regs
    }

    /// Each machine's start is its table's registers: aarch64's link
    /// register `x30` and frame pointer `x29` beside `sp` and `pc`.
    #[test]
    fn the_start_is_the_tables_registers() {
        let a64 = regs(&[
            (Reg64::Pc, 0x1000),
            (Reg64::Sp, 0x7ff0),
            (Reg64::X(29), 0x8000),
            (Reg64::X(30), 0x2000),
            (Reg64::X(0), 7),
        ]);
        let want = Start {
            ip: 0x1000,
            sp: 0x7ff0,
            fp: 0x8000,
            lr: 0x2000,
        };
        assert_eq!(Start::of(Machine::Aarch64, &a64), Some(want));
        // Without the link register, no start.
        let no_lr = regs(&[(Reg64::Pc, 1), (Reg64::Sp, 2), (Reg64::X(29), 3)]);
        assert_eq!(Start::of(Machine::Aarch64, &no_lr), None);
        // x86-64 has none: rip, rsp and rbp.
        let x86 = regs(&[(Reg64::Rip, 1), (Reg64::Rsp, 2), (Reg64::Rbp, 3)]);
        let want = Start {
            ip: 1,
            sp: 2,
            fp: 3,
            lr: 0,
        };
        assert_eq!(Start::of(Machine::X86_64, &x86), Some(want));
        assert_eq!(Start::of(Machine::Aarch64, &x86), None);
    }
}
