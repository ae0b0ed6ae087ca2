//! One hit as an engine read it, before any argument is decoded: the
//! engine-neutral form both engines decode their own records into (perf
//! samples and fetch events in `engine::perf`, BPF ring records in
//! `engine::bpf`), and the one decoder (`sample::decode`) turns into
//! values, knowing no engine.

use crate::arch::Reg64;

/// The longest string read for a string argument, in bytes (without its
/// NUL): the same bound as the Rust probes' staged copies.
pub const STRING_MAX: usize = 255;

/// How many bytes of a byte-slice argument
/// ([`Sampler::bytes_arg`](crate::Sampler::bytes_arg)) are read at the hit.
pub const BYTES_FETCH: usize = 64;

/// Registers by name, as the hit left them (those the engine read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Regs(Vec<(Reg64, u64)>);

impl Regs {
    /// Adds `reg`'s value.
    pub(crate) fn push(&mut self, reg: Reg64, value: u64) {
        self.0.push((reg, value));
    }

    /// `reg`'s value, if the engine read it.
    pub(crate) fn get(&self, reg: Reg64) -> Option<u64> {
        self.0.iter().find(|(r, _)| *r == reg).map(|(_, v)| *v)
    }

    /// Whether the engine read no register.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What an engine read at the hit for one argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fetched<'a> {
    /// The argument's little-endian bytes: a memory operand's value, or a
    /// register's (a fetch event reads registers too).
    pub(crate) value: Option<&'a [u8]>,
    /// What the value points at: a string without its NUL (as long as it
    /// was read), or a byte slice's first bytes.
    pub(crate) pointed: Option<&'a [u8]>,
}

/// One hit, engine-neutral.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawHit<'a> {
    /// The site, as the sampler numbers them.
    pub(crate) site: usize,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    /// `CLOCK_MONOTONIC`, in ns.
    pub(crate) time_ns: u64,
    pub(crate) regs: Regs,
    /// A copy of the stack from the stack pointer upward (may be empty).
    pub(crate) stack: &'a [u8],
    /// Per argument (may be shorter than the arguments: nothing fetched).
    pub(crate) fetched: Vec<Fetched<'a>>,
}

/// Reads the fields of a record in order.
pub(crate) struct Fields<'a>(pub(crate) &'a [u8]);

impl<'a> Fields<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_found_by_name() {
        let mut regs = Regs::default();
        regs.push(Reg64::Rsp, 0x1000);
        assert_eq!(regs.get(Reg64::Rsp), Some(0x1000));
        assert_eq!(regs.get(Reg64::Rax), None);
        let mut f = Fields(&[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!((f.u32(), f.u64(), f.u32()), (Some(1), Some(2), None));
    }
}
