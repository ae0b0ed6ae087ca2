//! x86-64's general registers: one row per register with every name a note,
//! perf and tracefs give it.

use super::{Reg, Reg64, RegWidth};

/// One x86-64 register.
#[derive(Debug)]
pub(crate) struct Register {
    /// The register.
    pub(crate) reg: Reg64,
    /// Its AT&T names (as notes write them, without `%`) for the whole
    /// register, the low 32, 16 and 8 bits (see [`WIDTHS`]); `rip` has only
    /// the first.
    pub(crate) names: [&'static str; 4],
    /// The second byte's name (`ah`), for the four registers that have one.
    pub(crate) high8: Option<&'static str>,
    /// perf's register number (`arch/x86/include/uapi/asm/perf_regs.h`),
    /// the bit in `sample_regs_user` and the position in a sample's
    /// registers.
    pub(crate) perf: u32,
    /// The fetch argument's name in a tracefs uprobe event (`%ax`:
    /// `regoffset_table` in `arch/x86/kernel/ptrace.c`).
    pub(crate) tracefs: &'static str,
}

/// The widths of [`Register::names`], in order.
pub(crate) const WIDTHS: [RegWidth; 4] =
    [RegWidth::W64, RegWidth::W32, RegWidth::W16, RegWidth::Low8];

macro_rules! registers {
    ($($reg:ident = ($names:expr, $high8:expr, $perf:expr, $tracefs:expr),)*) => {
        /// Every register a note may name, with its perf number and tracefs
        /// name.
        pub(crate) const REGISTERS: &[Register] = &[$(Register {
            reg: Reg64::$reg,
            names: $names,
            high8: $high8,
            perf: $perf,
            tracefs: $tracefs,
        },)*];
    };
}

registers! {
    Rax = (["rax", "eax", "ax", "al"], Some("ah"), 0, "ax"),
    Rbx = (["rbx", "ebx", "bx", "bl"], Some("bh"), 1, "bx"),
    Rcx = (["rcx", "ecx", "cx", "cl"], Some("ch"), 2, "cx"),
    Rdx = (["rdx", "edx", "dx", "dl"], Some("dh"), 3, "dx"),
    Rsi = (["rsi", "esi", "si", "sil"], None, 4, "si"),
    Rdi = (["rdi", "edi", "di", "dil"], None, 5, "di"),
    Rbp = (["rbp", "ebp", "bp", "bpl"], None, 6, "bp"),
    Rsp = (["rsp", "esp", "sp", "spl"], None, 7, "sp"),
    Rip = (["rip", "", "", ""], None, 8, "ip"),
    R8 = (["r8", "r8d", "r8w", "r8b"], None, 16, "r8"),
    R9 = (["r9", "r9d", "r9w", "r9b"], None, 17, "r9"),
    R10 = (["r10", "r10d", "r10w", "r10b"], None, 18, "r10"),
    R11 = (["r11", "r11d", "r11w", "r11b"], None, 19, "r11"),
    R12 = (["r12", "r12d", "r12w", "r12b"], None, 20, "r12"),
    R13 = (["r13", "r13d", "r13w", "r13b"], None, 21, "r13"),
    R14 = (["r14", "r14d", "r14w", "r14b"], None, 22, "r14"),
    R15 = (["r15", "r15d", "r15w", "r15b"], None, 23, "r15"),
}

/// perf's number of the stack pointer.
pub(crate) const PERF_SP: u32 = 7;

/// The register whose perf number is `perf`.
pub(crate) fn by_perf(perf: u32) -> Option<Reg64> {
    REGISTERS.iter().find(|r| r.perf == perf).map(|r| r.reg)
}

/// The 8-byte registers of x86-64's `struct pt_regs`.
pub(crate) const PT_REGS: usize = 21;

/// The index of perf register `perf` in the kernel's `struct pt_regs`
/// (`arch/x86/include/asm/ptrace.h`: r15, r14, r13, r12, bp, bx, r11, r10,
/// r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss), which a BPF
/// uprobe program is given.
pub(crate) fn pt_regs_index(perf: u32) -> Option<u8> {
    const BY_PERF: [u8; 24] = [
        10, 5, 11, 12, 13, 14, 4, 19, 16, 18, 17, 20, // ax .. ss
        0xff, 0xff, 0xff, 0xff, // ds, es, fs, gs: not in pt_regs
        9, 8, 7, 6, 3, 2, 1, 0, // r8 .. r15
    ];
    BY_PERF.get(perf as usize).copied().filter(|i| *i != 0xff)
}

/// The row of `reg` (none for an aarch64 register).
pub(crate) fn register(reg: Reg64) -> Option<&'static Register> {
    REGISTERS.iter().find(|r| r.reg == reg)
}

/// Parses a register name without its `%` (`eax`, `r8b`, `ah`, `rip`).
pub(crate) fn parse(name: &str) -> Option<Reg> {
    if name.is_empty() {
        return None;
    }
    REGISTERS.iter().find_map(|r| {
        if let Some(i) = r.names.iter().position(|n| *n == name) {
            return Some(Reg {
                reg: r.reg,
                width: WIDTHS[i],
            });
        }
        (r.high8 == Some(name)).then_some(Reg {
            reg: r.reg,
            width: RegWidth::High8,
        })
    })
}

/// The name of `reg` at `width` (`%`-less); a part that does not exist
/// (`rsi`'s second byte, `rip`'s low half) shows as the whole register.
pub(crate) fn name(reg: Reg64, width: RegWidth) -> &'static str {
    let Some(r) = register(reg) else {
        return "";
    };
    let part = match width {
        RegWidth::High8 => r.high8,
        w => WIDTHS
            .iter()
            .position(|x| *x == w)
            .map(|i| r.names[i])
            .filter(|n| !n.is_empty()),
    };
    part.unwrap_or(r.names[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back() {
        for r in REGISTERS {
            for (n, w) in r.names.iter().zip(WIDTHS).filter(|(n, _)| !n.is_empty()) {
                let reg = parse(n).unwrap();
                assert_eq!((reg.reg, reg.width), (r.reg, w));
                assert_eq!(name(reg.reg, reg.width), *n);
            }
        }
        assert_eq!(parse("ah").map(|r| r.width), Some(RegWidth::High8));
        assert_eq!(name(Reg64::Rsi, RegWidth::High8), "rsi");
        assert_eq!(parse(""), None);
        assert_eq!(parse("xmm0"), None);
        assert_eq!(register(Reg64::Rsp).map(|r| r.perf), Some(PERF_SP));
        assert_eq!(register(Reg64::Rip).map(|r| r.perf), Some(8));
        assert_eq!(by_perf(8), Some(Reg64::Rip));
    }

    /// `struct pt_regs` in order, by the names tracefs gives its fields.
    const PT_REGS: [&str; 21] = [
        "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si",
        "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
    ];

    #[test]
    fn pt_regs_indexes_agree_with_tracefs_names() {
        for r in REGISTERS {
            let i = pt_regs_index(r.perf).unwrap();
            assert_eq!(PT_REGS[usize::from(i)], r.tracefs, "{:?}", r.reg);
        }
        assert_eq!(pt_regs_index(12), None);
        assert_eq!(pt_regs_index(24), None);
    }

    /// The runtime's list of low bytes that notes name by the whole
    /// register is this table's r8..r15, in order, and each name parses.
    #[test]
    fn the_runtime_names_the_same_low_bytes() {
        use usdt_runtime::site::X86_64_LOW8_WRITTEN_WHOLE;
        let numbered: Vec<(&str, &str)> = REGISTERS
            .iter()
            .filter(|r| r.names[0][1..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|r| (r.names[3], r.names[0]))
            .collect();
        assert_eq!(numbered, X86_64_LOW8_WRITTEN_WHOLE);
        for (low8, whole) in X86_64_LOW8_WRITTEN_WHOLE {
            let reg = parse(low8).unwrap();
            assert_eq!(reg.width, RegWidth::Low8);
            assert_eq!(name(reg.reg, RegWidth::W64), whole);
        }
    }
}
