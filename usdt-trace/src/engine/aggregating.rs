//! What an engine does to aggregate hits in the kernel: the peer of
//! [`Engine`](super::Engine) (sampling) and [`Counting`](super::Counting)
//! (counting) for [`Aggregation`](crate::Aggregation). The aggregation
//! says, engine-neutrally, what each site's hit does ([`Role`]) and which
//! argument it reads; the engine derives how it reads it, keeps the
//! totals and counts, and reads them back in the layout below. Which
//! engine aggregates is chosen with the others (`choice.rs`).

use std::fmt::Debug;
use std::path::Path;

use super::{AttachPoint, Target};
use crate::elf::note::Site;
use crate::{Error, KernelFeatures};

/// What an aggregation keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Start times by key, and a histogram of the time to the end.
    Latency,
    /// A histogram of values.
    Histogram,
    /// Counts per integer value.
    CountInts,
    /// Counts per string.
    CountStrings,
}

/// What a site's hit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Stores the time under its key.
    Start,
    /// Finds its key's start: the time since goes to the histogram.
    End,
    /// Its argument goes to the histogram.
    Record,
    /// Its argument's value is counted.
    Count,
}

/// One site to aggregate, engine-neutral: its role, and the note operand
/// it reads (`None`: the thread is the key).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AggregateSite<'a> {
    pub(crate) site: &'a Site,
    pub(crate) role: Role,
    pub(crate) arg: Option<usize>,
    /// The operand is the address of a NUL-terminated string, which is
    /// the value (counted per value only).
    pub(crate) string: bool,
}

/// The totals an engine reads back, as slots: [`BUCKETS`] log2 buckets
/// (slot 0 holds 0, slot `b` holds `[2^(b-1), 2^b)`), then the slots
/// named below.
pub(crate) const BUCKETS: usize = 65;
/// Values in the histogram.
pub(crate) const COUNT: usize = 65;
/// Their sum.
pub(crate) const SUM: usize = 66;
/// The largest.
pub(crate) const MAX: usize = 67;
/// Ends without a start.
pub(crate) const UNMATCHED: usize = 68;
/// Starts (or values to count) lost to a full map.
pub(crate) const LOST: usize = 69;
/// Negative values of a signed argument (a histogram holds magnitudes).
pub(crate) const NEGATIVE: usize = 70;
/// Hits whose argument could not be read.
pub(crate) const UNREADABLE: usize = 71;

/// The bytes of a counted string: longer strings are cut.
pub(crate) const STRING_KEY: usize = 64;

/// Each counted value's key bytes (8 for an integer, a string's bytes up
/// to a NUL) and its count.
pub(crate) type RawCounts = Vec<(Vec<u8>, u64)>;

/// What an engine does to aggregate hits.
pub(crate) trait Aggregating: Debug {
    /// Attaches `sites` of the file at `path` at `point`, aggregating the
    /// hits of `target`; how many uprobes that took (one per address).
    fn attach(
        &mut self,
        path: &Path,
        sites: &[AggregateSite<'_>],
        point: AttachPoint,
        features: &KernelFeatures,
        target: Target,
    ) -> Result<usize, Error>;
    /// The totals so far, in the slots above (summed over every CPU; the
    /// maximum: the largest).
    fn stats(&self) -> Result<Vec<u64>, Error>;
    /// Every counted value so far (none for kinds that count no values).
    fn values(&self) -> Result<RawCounts, Error>;
}
