//! Register knowledge, one table per architecture (as gimli's `arch.rs`).
//!
//! Each architecture's module holds one [`Arch`]: a row per register
//! ([`Register`]) with every name a note gives it, perf's register number,
//! its slot in the `struct pt_regs` a BPF program is given and the name a
//! tracefs fetch argument gives it; which registers are the stack pointer,
//! the instruction pointer, the frame pointer and the link register (those
//! a stack is unwound from); and how its notes write operands
//! ([`Operand`], parsed by [`Arch::parse_operand`]). The engines, the
//! decoder and the aggregations reach all of it through the [`Arch`] of a
//! file's [`Machine`] ([`Machine::arch`]) and name no architecture: a new
//! one is a new table here. Every machine's notes are read and listed; the
//! engines read registers only in files of the machine this program runs
//! on ([`Machine::host`]), since the kernel gives a uprobe the host's.

use std::fmt;

mod aarch64;
mod operand;
mod riscv64;
mod x86_64;

pub use operand::Operand;

/// The instruction set a note was written for: it decides the register names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive] // each architecture adds its machine
pub enum Machine {
    /// x86-64 (`EM_X86_64`).
    X86_64,
    /// 64-bit Arm (`EM_AARCH64`).
    Aarch64,
    /// 64-bit RISC-V (`EM_RISCV`, ELF class 64).
    Riscv64,
}

/// The `struct pt_regs` slots that this machine's BPF programs are given
/// when they read the registers of `machine`'s files: only files of the
/// machine it runs on, whose registers are in the `pt_regs` of the host.
pub(crate) fn pt_regs(machine: Machine) -> Option<usize> {
    (Machine::host() == Some(machine)).then_some(machine.arch().pt_regs)
}

/// Every architecture's table.
const ARCHES: [&Arch; 3] = [&x86_64::ARCH, &aarch64::ARCH, &riscv64::ARCH];

impl Machine {
    /// The table of this machine's registers and operand syntax.
    pub(crate) fn arch(self) -> &'static Arch {
        match self {
            Machine::X86_64 => &x86_64::ARCH,
            Machine::Aarch64 => &aarch64::ARCH,
            Machine::Riscv64 => &riscv64::ARCH,
        }
    }

    /// The machine this program runs on, if it is one of the tables':
    /// the kernel gives uprobes its registers, so it is the only machine
    /// whose files the engines read registers of.
    pub fn host() -> Option<Machine> {
        ARCHES
            .into_iter()
            .map(|a| a.machine)
            .find(|m| m.name() == HOST)
    }

    /// Its usual name: `x86-64`, `aarch64`, `riscv64`.
    pub fn name(self) -> &'static str {
        match self {
            Machine::X86_64 => "x86-64",
            Machine::Aarch64 => "aarch64",
            Machine::Riscv64 => "riscv64",
        }
    }
}

/// [`Machine::name`] of the machine this program is built for.
const HOST: &str = if cfg!(target_arch = "x86_64") {
    "x86-64"
} else if cfg!(target_arch = "aarch64") {
    "aarch64"
} else if cfg!(target_arch = "riscv64") {
    "riscv64"
} else {
    "other"
};

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One register: every name a note gives it, and its numbers.
#[derive(Debug)]
pub(crate) struct Register {
    /// The register.
    pub(crate) reg: Reg64,
    /// Each name a note may write for it, with the part it names; the
    /// first name of a width is the one printed.
    pub(crate) names: &'static [(&'static str, RegWidth)],
    /// perf's register number: the bit in `sample_regs_user` and the
    /// position in a sample's registers (`None`: perf does not sample it).
    pub(crate) perf: Option<u32>,
    /// Its 8-byte slot in the `struct pt_regs` a BPF uprobe program is
    /// given (`None`: not there).
    pub(crate) pt_regs: Option<u8>,
    /// Its name in a tracefs fetch argument, without the `%`
    /// (`regoffset_table` in the architecture's `kernel/ptrace.c`).
    pub(crate) tracefs: Option<&'static str>,
}

/// A table's rows: `REG => ["name" WIDTH, ...] perf N pt_regs N tracefs "name";`
/// (the numbers left out where the kernel has none).
macro_rules! registers {
    ($($reg:expr => [$($name:literal $width:ident),+ $(,)?]
        $(perf $perf:literal pt_regs $pt:literal tracefs $tracefs:literal)?;)*) => {
        &[$($crate::arch::Register {
            reg: $reg,
            names: &[$(($name, $crate::arch::RegWidth::$width)),+],
            perf: registers!(@opt $($perf)?),
            pt_regs: registers!(@opt $($pt)?),
            tracefs: registers!(@opt $($tracefs)?),
        },)*]
    };
    (@opt) => { None };
    (@opt $x:literal) => { Some($x) };
}
use registers;

/// One architecture: its registers and its notes' operand syntax.
#[derive(Debug)]
pub(crate) struct Arch {
    /// The machine.
    pub(crate) machine: Machine,
    /// One row per register.
    pub(crate) registers: &'static [Register],
    /// The stack pointer: a sample's stack copy starts there.
    pub(crate) sp: Reg64,
    /// The instruction pointer: at a hit, the uprobe's address in the
    /// process, which gives the load bias.
    pub(crate) ip: Reg64,
    /// The frame pointer (`rbp`, `x29`, `s0`): with the instruction and
    /// stack pointers, a register unwinding a stack starts from.
    pub(crate) fp: Reg64,
    /// The link register (`x30`, `ra`), where a call leaves its return
    /// address, which unwinding a stack then also starts from; none on
    /// x86-64, whose calls push it.
    pub(crate) lr: Option<Reg64>,
    /// The machine as the `object` crate names an ELF file's.
    pub(crate) object: object::Architecture,
    /// The 8-byte slots of the `struct pt_regs` a BPF uprobe program is
    /// given (`bpf_user_pt_regs_t`) and copies whole; 0 where unknown.
    pub(crate) pt_regs: usize,
    /// What a note writes before a register's name (`%` on x86-64).
    pub(crate) reg_prefix: &'static str,
    /// Parses one operand as this machine's notes write it; the error says
    /// why it cannot be read.
    pub(crate) parse_operand: fn(&str) -> Result<Operand, String>,
    /// Writes a memory operand (`base + disp`) as this machine's notes do.
    pub(crate) write_memory: fn(&mut fmt::Formatter<'_>, Reg, i64) -> fmt::Result,
}

impl Arch {
    /// The row of `reg` (none for another machine's register).
    pub(crate) fn register(&self, reg: Reg64) -> Option<&'static Register> {
        self.registers.iter().find(|r| r.reg == reg)
    }

    /// The register whose perf number is `perf`.
    pub(crate) fn by_perf(&self, perf: u32) -> Option<Reg64> {
        let row = self.registers.iter().find(|r| r.perf == Some(perf));
        row.map(|r| r.reg)
    }

    /// The `struct pt_regs` slot of `reg`.
    pub(crate) fn pt_slot(&self, reg: Reg64) -> Option<u8> {
        self.register(reg)?.pt_regs
    }

    /// The registers unwinding a stack starts from ([`Arch::ip`],
    /// [`Arch::sp`], [`Arch::fp`] and [`Arch::lr`]): what a sample copies
    /// for it beside the stack.
    pub(crate) fn unwind_registers(&self) -> impl Iterator<Item = Reg64> {
        [self.ip, self.sp, self.fp].into_iter().chain(self.lr)
    }

    /// tracefs's name of `reg` (without `%`).
    pub(crate) fn tracefs(&self, reg: Reg64) -> Option<&'static str> {
        self.register(reg)?.tracefs
    }

    /// Parses a register name as notes write it (without x86's `%`).
    pub(crate) fn parse_reg(&self, name: &str) -> Option<Reg> {
        self.registers.iter().find_map(|r| {
            let (_, width) = r.names.iter().find(|(n, _)| *n == name)?;
            Some(Reg {
                reg: r.reg,
                width: *width,
            })
        })
    }

    /// The name of `reg` at `width`; a part that has no name (`rsi`'s
    /// second byte, `rip`'s low half) shows as the whole register.
    pub(crate) fn name(&self, reg: Reg64, width: RegWidth) -> &'static str {
        let Some(r) = self.register(reg) else {
            return "";
        };
        let part = r.names.iter().find(|(_, w)| *w == width);
        part.or(r.names.first()).map_or("", |(n, _)| n)
    }

    /// The registers `operand`'s value is computed from at the hit: its
    /// base and index, and the instruction pointer for a symbol's (the
    /// load bias).
    pub(crate) fn operand_registers(&self, operand: &Operand) -> Vec<Reg64> {
        match operand {
            Operand::Register(r) => vec![r.reg],
            Operand::Memory { base, .. } => vec![base.reg],
            Operand::Indexed { base, index, .. } => {
                base.iter().chain([index]).map(|r| r.reg).collect()
            }
            Operand::Symbol { .. } => vec![self.ip],
            Operand::SymbolIndexed { base, index, .. } => base
                .iter()
                .chain(index)
                .map(|r| r.reg)
                .chain([self.ip])
                .collect(),
            Operand::Immediate(_) | Operand::Unreadable { .. } => vec![],
        }
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

/// A 64-bit general register of x86-64, aarch64 or riscv64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // the variant names are the register names
#[non_exhaustive] // each architecture adds its registers
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
    /// The aarch64 program counter.
    Pc,
    /// riscv64 `x0` to `x31` (`zero`, `ra`, `sp`, ... `t6`).
    Riscv(u8),
    /// The riscv64 program counter.
    RiscvPc,
}

impl Reg64 {
    /// The table that has this register.
    fn arch(self) -> Option<&'static Arch> {
        ARCHES.into_iter().find(|a| a.register(self).is_some())
    }
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
    /// The whole register (`%rax`, aarch64 `x0`, `sp`, riscv64 `a0`).
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
        Machine::X86_64.arch().parse_reg(name)
    }

    /// Parses an aarch64 register name (`x0`..`x30`, `w0`..`w30`, `sp`).
    pub fn parse_aarch64(name: &str) -> Option<Reg> {
        Machine::Aarch64.arch().parse_reg(name)
    }

    /// Parses a riscv64 register name (`a0`, `s0`, `fp`, `zero`, `x10`).
    pub fn parse_riscv64(name: &str) -> Option<Reg> {
        Machine::Riscv64.arch().parse_reg(name)
    }

    /// The name as a note writes it, without x86's `%`.
    pub fn name(&self) -> String {
        self.reg
            .arch()
            .map_or("", |a| a.name(self.reg, self.width))
            .into()
    }

    /// The machine whose register this is.
    pub fn machine(&self) -> Option<Machine> {
        self.reg.arch().map(|a| a.machine)
    }

    /// Whether this is an aarch64 register.
    pub fn is_aarch64(&self) -> bool {
        self.machine() == Some(Machine::Aarch64)
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = self.reg.arch().map_or("", |a| a.reg_prefix);
        write!(f, "{prefix}{}", self.name())
    }
}
