//! Register knowledge, one table per architecture (as gimli's `arch.rs`):
//! each register's names in notes (AT&T for x86-64), and for x86-64, which
//! the sampler decodes, perf's register number and tracefs's fetch name,
//! in one row. aarch64's table holds the names only.

use std::fmt;

pub(crate) mod aarch64;
pub(crate) mod x86_64;

/// The instruction set a note was written for: it decides the register names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    /// x86-64 (`EM_X86_64`).
    X86_64,
    /// 64-bit Arm (`EM_AARCH64`).
    Aarch64,
}

/// A machine's `struct pt_regs`, as a BPF uprobe program is given it: how
/// many 8-byte registers, and where perf's register `n` sits in it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PtRegs {
    /// The number of 8-byte slots.
    pub(crate) len: usize,
    /// The slot of perf's register number `n`, if `pt_regs` has it.
    pub(crate) index: fn(u32) -> Option<u8>,
}

/// The `pt_regs` layout of `machine`, where its table has one (x86-64;
/// not aarch64 yet).
pub(crate) fn pt_regs(machine: Machine) -> Option<PtRegs> {
    match machine {
        Machine::X86_64 => Some(PtRegs {
            len: x86_64::PT_REGS,
            index: x86_64::pt_regs_index,
        }),
        Machine::Aarch64 => None,
    }
}

/// A register as the note names it: the full 64-bit register and the part of
/// it the note uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    /// The 64-bit register.
    pub reg: Reg64,
    /// The part named in the note (`%al` is [`RegWidth::Low8`] of `rax`).
    pub width: RegWidth,
}

/// A 64-bit general register of x86-64 or aarch64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the variant names are the register names
pub enum Reg64 {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    Rbp,
    Rsp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
    /// The x86-64 instruction pointer (`%rip`), only as a memory base.
    Rip,
    /// aarch64 `x0` to `x30`.
    X(u8),
    /// The aarch64 stack pointer.
    Sp,
}

/// The part of a register a note names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegWidth {
    /// The low byte (`%al`, `%sil`, `%r8b`).
    Low8,
    /// The second byte (`%ah`, `%bh`, `%ch`, `%dh`).
    High8,
    /// The low 16 bits (`%ax`, `%r8w`).
    W16,
    /// The low 32 bits (`%eax`, `%r8d`, aarch64 `w0`).
    W32,
    /// The whole register (`%rax`, aarch64 `x0`, `sp`).
    W64,
}

impl RegWidth {
    /// The size of this part in bytes.
    pub fn bytes(self) -> u8 {
        match self {
            RegWidth::Low8 | RegWidth::High8 => 1,
            RegWidth::W16 => 2,
            RegWidth::W32 => 4,
            RegWidth::W64 => 8,
        }
    }
}

impl Reg {
    /// Parses an x86-64 register name without its `%` (`eax`, `r8b`, `rip`).
    pub fn parse_x86_64(name: &str) -> Option<Reg> {
        x86_64::parse(name)
    }

    /// Parses an aarch64 register name (`x0`..`x30`, `w0`..`w30`, `sp`).
    pub fn parse_aarch64(name: &str) -> Option<Reg> {
        aarch64::parse(name)
    }

    /// The name as a note writes it, without x86's `%`.
    pub fn name(&self) -> String {
        if self.is_aarch64() {
            aarch64::name(self.reg, self.width)
        } else {
            x86_64::name(self.reg, self.width).into()
        }
    }

    /// Whether this is an aarch64 register.
    pub fn is_aarch64(&self) -> bool {
        matches!(self.reg, Reg64::X(_) | Reg64::Sp)
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_aarch64() {
            f.write_str(&self.name())
        } else {
            write!(f, "%{}", self.name())
        }
    }
}
