//! The BPF engine: uprobe_multi links whose programs, assembled here at
//! run time (no compiler, `bpftool` or libbpf at build or run time), count,
//! sample and aggregate the hits of any number of probe sites at once.
//!
//! One link per file takes, for each site, its file offset, its
//! semaphore's file offset (the kernel raises the semaphore while attached)
//! and its cookie, and an optional process filter that covers every thread
//! of the process. Needs Linux 6.6 or later, and root (or `CAP_BPF` and
//! `CAP_PERFMON`); whether this kernel has such links is a kernel fact
//! ([`uprobe_multi_support`], kept in the crate's `facts`).
//!
//! - Counting: [`MultiCounter`] owns a per-CPU array of counters, the
//!   program that adds 1 to the slot its cookie names, and the links;
//!   dropping it detaches every site at once. [`ProbeCounter`] counts per
//!   probe over the sites of several files (the engine's `Counting`).
//! - Sampling: a program per link that copies registers, the stack and
//!   the arguments it can read into a BPF ring buffer (`sampling.rs`,
//!   `ringbuf.rs`: the engine's `Engine`).
//! - Aggregating: programs that keep a latency histogram, a histogram of an
//!   argument or counts per value in BPF maps (`aggregate.rs`,
//!   `aggregator.rs`: the engine's `Aggregating`).
//! - Errors are [`BpfError`]s (defined with the crate's error).

pub(crate) mod aggregate;
mod aggregator;
mod asm;
mod counter;
mod fetches;
mod probes;
mod program;
mod ringbuf;
pub(crate) mod sampling;

pub use crate::error::BpfError;
pub use crate::facts::uprobe_multi::{uprobe_multi_support, UprobeMulti};
pub(crate) use aggregator::Aggregator;
pub(crate) use counter::link_sites;
pub use counter::{MultiCounter, MultiSite, MAX_SITES_PER_LINK};
pub use probes::ProbeCounter;
pub(crate) use program::load_program_for;
