//! The architectures the matrix boots, and what differs between them: the
//! name Debian gives them, the Rust target their programs are built for,
//! the qemu that runs them, the site layouts their builds emit, and where
//! a guest's result comes back. Everything else in the harness is the same
//! for each.

use crate::Layout;

/// A guest's instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
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

/// aarch64's one layout: `sys/sdt.h`'s single `nop`, whatever the facade's
/// features say (they choose x86-64's long nops).
const AARCH64_LAYOUTS: [Layout; 1] = [Layout {
    name: "nop",
    feature: None,
}];

impl Arch {
    /// Every architecture.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The machine this harness runs on.
    pub fn host() -> Arch {
        match std::env::consts::ARCH {
            "aarch64" => Arch::Aarch64,
            _ => Arch::X86_64,
        }
    }

    /// The name Rust and `uname -m` give it (`x86_64`, `aarch64`): what a
    /// row's `arch` says.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Parses [`Arch::name`].
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Debian's name (`amd64`, `arm64`): its packages' architecture and
    /// the suffix of its kernel packages.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The Rust target its programs are built for.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// The GNU triple of its cross toolchain (`aarch64-linux-gnu-gcc`) and
    /// of Debian's multiarch directories (`/usr/lib/aarch64-linux-gnu`).
    pub fn gnu_triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The site layouts its builds emit, the default first.
    pub fn layouts(self) -> &'static [Layout] {
        match self {
            Arch::X86_64 => &X86_64_LAYOUTS,
            Arch::Aarch64 => &AARCH64_LAYOUTS,
        }
    }

    /// The qemu that emulates it.
    pub fn qemu(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Aarch64 => "qemu-system-aarch64",
        }
    }

    /// The board and its devices: `q35` with no display, or Arm's `virt`
    /// board (its PL011 UART the console, no network card, whose option ROM
    /// the aarch64 qemu package does not ship).
    pub fn machine_args(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &["-machine", "q35", "-vga", "none"],
            Arch::Aarch64 => &["-machine", "virt", "-nic", "none"],
        }
    }

    /// The console's device in the guest.
    pub fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    /// A second serial port the result can come back on, apart from the
    /// console: x86-64's `ttyS1`. Arm's `virt` board (qemu 7.2) has one
    /// UART, so there the result comes back on the console, between its
    /// markers, with the kernel's messages silenced first.
    pub fn result_port(self) -> Option<(&'static str, u32, u32)> {
        match self {
            Arch::X86_64 => Some(("/dev/ttyS1", 4, 65)),
            Arch::Aarch64 => None,
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
        assert_eq!(Arch::from_name("riscv64"), None);
    }
}
