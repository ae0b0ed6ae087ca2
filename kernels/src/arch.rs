//! The architectures the matrix boots, and what differs between them: the
//! name Debian gives them, the Rust target their programs are built for
//! and the cross toolchain that links them, the Debian release their
//! userland comes from, the qemu that runs them, the site layouts their
//! builds emit, whether `usdt` unwinds its stacks, and where a guest's
//! result comes back. Everything else in
//! the harness is the same for each.

use usdt_provision::{
    Need, Package, AARCH64_GCC, AARCH64_LIBC, QEMU_SYSTEM, QEMU_SYSTEM_ARM, QEMU_SYSTEM_MISC,
    RISCV64_GCC, RISCV64_LIBC,
};

use crate::Layout;

/// A guest's instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
    Riscv64,
}

/// x86-64's site layouts: each a build of the examples and the bench, with
/// the cargo feature of the `usdt` facade that selects it (`None`: the
/// default, `nop; nop5; nop10`, what applications get), the default first.
const X86_64_LAYOUTS: [Layout; 3] = [
    Layout {
        name: "nop5_nop10",
        feature: None,
    },
    Layout {
        name: "nop5",
        feature: Some("nop5"),
    },
    Layout {
        name: "nop10",
        feature: Some("nop10"),
    },
];

/// aarch64's and riscv64's one layout: a single `nop`, as `sys/sdt.h`'s
/// (`1f 20 03 d5`; riscv64's `13 00 00 00`, where `sys/sdt.h` built for
/// riscv64gc gets the 2-byte `c.nop`), whatever the facade's features say
/// (they choose x86-64's long nops).
const NOP_LAYOUTS: [Layout; 1] = [Layout {
    name: "nop",
    feature: None,
}];

impl Arch {
    /// Every architecture.
    pub const ALL: [Arch; 3] = [Arch::X86_64, Arch::Aarch64, Arch::Riscv64];

    /// The machine this harness runs on.
    pub fn host() -> Arch {
        Arch::from_name(std::env::consts::ARCH).unwrap_or(Arch::X86_64)
    }

    /// The name Rust and `uname -m` give it (`x86_64`, `aarch64`,
    /// `riscv64`): what a row's `arch` says.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Riscv64 => "riscv64",
        }
    }

    /// Parses [`Arch::name`].
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Debian's name (`amd64`, `arm64`, `riscv64`): its packages'
    /// architecture and the suffix of its kernel packages.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
            Arch::Riscv64 => "riscv64",
        }
    }

    /// Whether `usdt trace --stack` and `count --by stack` unwind its
    /// stacks (framehop's unwinders: x86-64 and aarch64); on riscv64 they
    /// refuse ([`crate::stacks::refusal`]).
    pub fn unwinds_stacks(self) -> bool {
        match self {
            Arch::X86_64 | Arch::Aarch64 => true,
            Arch::Riscv64 => false,
        }
    }

    /// The Rust target its programs are built for.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
            Arch::Riscv64 => "riscv64gc-unknown-linux-gnu",
        }
    }

    /// The GNU triple of its cross toolchain (`aarch64-linux-gnu-gcc`) and
    /// of Debian's multiarch directories (`/usr/lib/aarch64-linux-gnu`).
    pub fn gnu_triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
            Arch::Riscv64 => "riscv64-linux-gnu",
        }
    }

    /// The Debian packages of its cross C compiler (`GNU_TRIPLE-gcc`:
    /// rustc's linker, and the compiler of the bench's C row) and of the C
    /// library its static programs link; `None` for x86-64, the machine's
    /// own, built natively.
    pub fn cross_toolchain(self) -> Option<[Package; 2]> {
        match self {
            Arch::X86_64 => None,
            Arch::Aarch64 => Some([AARCH64_GCC, AARCH64_LIBC]),
            Arch::Riscv64 => Some([RISCV64_GCC, RISCV64_LIBC]),
        }
    }

    /// The Debian release a guest of another architecture takes its
    /// userland from (busybox, bpftrace, gdb): the machine's own
    /// (bookworm), or trixie for riscv64, which bookworm does not carry
    /// (it became a release architecture with trixie).
    pub fn userland_suite(self) -> &'static str {
        match self {
            Arch::X86_64 | Arch::Aarch64 => "bookworm",
            Arch::Riscv64 => "trixie",
        }
    }

    /// The site layouts its builds emit, the default first.
    pub fn layouts(self) -> &'static [Layout] {
        match self {
            Arch::X86_64 => &X86_64_LAYOUTS,
            Arch::Aarch64 | Arch::Riscv64 => &NOP_LAYOUTS,
        }
    }

    /// The qemu that emulates it.
    pub fn qemu(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Aarch64 => "qemu-system-aarch64",
            Arch::Riscv64 => "qemu-system-riscv64",
        }
    }

    /// The Debian package of [`Arch::qemu`], as a need.
    pub fn qemu_need(self) -> Need {
        match self {
            Arch::X86_64 => Need::package(
                QEMU_SYSTEM,
                "the kernel matrix boots each kernel in qemu-system-x86_64",
            ),
            Arch::Aarch64 => Need::package(
                QEMU_SYSTEM_ARM,
                "the kernel matrix boots each arm64 kernel in qemu-system-aarch64",
            ),
            Arch::Riscv64 => Need::package(
                QEMU_SYSTEM_MISC,
                "the kernel matrix boots each riscv64 kernel in qemu-system-riscv64",
            ),
        }
    }

    /// The CPU qemu emulates under TCG: `max`, or for aarch64 the `max` CPU
    /// with its pointer authentication computed by qemu's own cheap
    /// algorithm rather than QARMA, which TCG emulates several times slower
    /// (Debian's arm64 kernels sign their return addresses); qemu 7.2 has
    /// no riscv64 `max`, and its `rv64` (RV64GC and more) runs Debian's
    /// riscv64 kernels.
    pub fn tcg_cpu(self) -> &'static str {
        match self {
            Arch::X86_64 => "max",
            Arch::Aarch64 => "max,pauth-impdef=on",
            Arch::Riscv64 => "rv64",
        }
    }

    /// The board, its firmware and devices: `q35` with no display, Arm's
    /// `virt` board (its PL011 UART the console, no network card, whose
    /// option ROM the aarch64 qemu package does not ship), or RISC-V's
    /// `virt` board (its 16550 UART the console) with OpenSBI, qemu's own
    /// build of it (`-bios default`, from qemu-system-data), which starts
    /// the kernel image `-kernel` names.
    pub fn machine_args(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &["-machine", "q35", "-vga", "none"],
            Arch::Aarch64 => &["-machine", "virt", "-nic", "none"],
            Arch::Riscv64 => &["-machine", "virt", "-bios", "default", "-nic", "none"],
        }
    }

    /// The console's device in the guest.
    pub fn console(self) -> &'static str {
        match self {
            Arch::X86_64 | Arch::Riscv64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    /// A second serial port the result can come back on, apart from the
    /// console: x86-64's `ttyS1`. The `virt` boards of Arm and RISC-V (qemu
    /// 7.2) have one UART each, so there the result comes back on the
    /// console, between its markers, with the kernel's messages silenced
    /// first.
    pub fn result_port(self) -> Option<(&'static str, u32, u32)> {
        match self {
            Arch::X86_64 => Some(("/dev/ttyS1", 4, 65)),
            Arch::Aarch64 | Arch::Riscv64 => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
            assert!(a.rust_target().starts_with(a.name()));
            assert_eq!(a.layouts()[0].feature, None, "the default first");
        }
        assert_eq!(Arch::host().name(), std::env::consts::ARCH);
        assert_eq!(Arch::from_name("riscv64"), Some(Arch::Riscv64));
        assert_eq!(Arch::from_name("armv7"), None);
    }
}
