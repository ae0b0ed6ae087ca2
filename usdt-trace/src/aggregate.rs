//! Answers instead of hits: a latency histogram between two probes, a
//! histogram of an argument, and counts per argument value, each kept in
//! the kernel by the engine that aggregates (the engine interface
//! `Aggregating`, `engine/aggregating.rs`: BPF maps filled by a program
//! that runs at the hit, `engine/bpf/aggregate.rs`). Nothing is sent to
//! user space per hit; [`Aggregation::histogram`] and
//! [`Aggregation::counts`] read the totals whenever asked.
//!
//! Needs BPF uprobe_multi links (Linux 6.6+), x86-64, and root.
//!
//! ```no_run
//! use usdt_trace::{read_file, Aggregation, AttachPoint, LatencyKey, Target};
//! let sites = read_file("/usr/bin/server")?;
//! let ends: Vec<_> = sites.iter().filter(|s| s.name.starts_with("request_")).collect();
//! let mut latency = Aggregation::latency(
//!     "http:request_start",
//!     "http:request_done",
//!     LatencyKey::Arg { start: 0, end: 0 },
//!     AttachPoint::Auto,
//! )?;
//! latency.attach("/usr/bin/server", &ends, Target::AllProcesses)?;
//! let h = latency.histogram()?;
//! println!("{} requests, p99 {} ns", h.count, h.quantile(0.99));
//! # Ok::<(), usdt_trace::Error>(())
//! ```

use std::path::Path;

use crate::engine::aggregating::{
    AggregateSite, Aggregating, Kind as AggKind, Role, BUCKETS, BY_FULL, BY_VALUES, COUNT, LOST,
    MAX, NEGATIVE, STRING_KEY, SUM, UNMATCHED, UNREADABLE,
};
use crate::engine::{aggregator, AttachPoint, Target};
use crate::filter::{Binder, Filter};
use crate::{Error, KernelFeatures, Site};

/// What pairs a latency's end with its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencyKey {
    /// The thread: an end pairs with the last start of its own thread.
    Thread,
    /// An argument's value, by its note operand index in the start probe
    /// and in the end probe: requests that cross threads pair right.
    Arg {
        /// The operand of the start probe.
        start: usize,
        /// The operand of the end probe.
        end: usize,
    },
}

/// A log2 histogram read from the kernel, with what could not go in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// [`Histogram::BUCKETS`] counts: bucket 0 holds 0, bucket `b` holds
    /// `[2^(b-1), 2^b)` ([`Histogram::bounds`]).
    pub buckets: Vec<u64>,
    /// Values in the histogram.
    pub count: u64,
    /// Their sum (nanoseconds for a latency).
    pub sum: u64,
    /// The largest.
    pub max: u64,
    /// Ends without a start (latency).
    pub unmatched: u64,
    /// Starts lost to a full map (latency), or values (counts).
    pub lost: u64,
    /// Negative values of a signed argument, not in the histogram.
    pub negative: u64,
    /// Hits whose argument could not be read.
    pub unreadable: u64,
}

impl Histogram {
    /// The number of buckets.
    pub const BUCKETS: usize = BUCKETS;

    /// The values of bucket `b`: `low..high` (the last bucket's `high` is
    /// `u64::MAX`, included).
    pub fn bounds(b: usize) -> (u64, u64) {
        match b {
            0 => (0, 1),
            64.. => (1 << 63, u64::MAX),
            b => (1 << (b - 1), 1 << b),
        }
    }

    /// The value below which a fraction `q` (0 to 1) of the values lie,
    /// interpolated linearly within its bucket and at most the maximum; 0
    /// for an empty histogram.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0);
        let mut below = 0u64;
        for (b, n) in self.buckets.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            if (below + n) as f64 >= rank {
                let (low, high) = Histogram::bounds(b);
                let within = (rank - below as f64) / *n as f64;
                let value = low as f64 + within * (high - low) as f64;
                return (value as u64).min(self.max).max(low.min(self.max));
            }
            below += n;
        }
        self.max
    }

    /// The mean, 0 for an empty histogram.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum as f64 / self.count as f64
    }

    /// Adds `other` to this one.
    pub fn add(&mut self, other: &Histogram) {
        self.buckets.resize(BUCKETS, 0);
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.wrapping_add(other.sum);
        self.max = self.max.max(other.max);
        self.unmatched += other.unmatched;
        self.lost += other.lost;
        self.negative += other.negative;
        self.unreadable += other.unreadable;
    }

    fn from_stats(s: &[u64]) -> Histogram {
        Histogram {
            buckets: s[..BUCKETS].to_vec(),
            count: s[COUNT],
            sum: s[SUM],
            max: s[MAX],
            unmatched: s[UNMATCHED],
            lost: s[LOST],
            negative: s[NEGATIVE],
            unreadable: s[UNREADABLE],
        }
    }
}

/// A counted value of an argument.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CountedValue {
    /// An unsigned integer.
    Unsigned(u64),
    /// A signed integer.
    Signed(i64),
    /// A string's bytes (at most [`Aggregation::STRING_BYTES`]).
    Str(Vec<u8>),
}

impl CountedValue {
    /// The value of a key the kernel kept: a string's bytes to its NUL,
    /// or an 8-byte integer.
    fn of(key: &[u8], strings: bool, signed: bool) -> CountedValue {
        if strings {
            let end = key.iter().position(|b| *b == 0).unwrap_or(key.len());
            return CountedValue::Str(key[..end].to_vec());
        }
        let mut b = [0u8; 8];
        let n = key.len().min(8);
        b[..n].copy_from_slice(&key[..n]);
        let v = u64::from_ne_bytes(b);
        match signed {
            true => CountedValue::Signed(v as i64),
            false => CountedValue::Unsigned(v),
        }
    }
}

impl std::fmt::Display for CountedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountedValue::Unsigned(n) => write!(f, "{n}"),
            CountedValue::Signed(n) => write!(f, "{n}"),
            CountedValue::Str(s) => write!(f, "{:?}", String::from_utf8_lossy(s)),
        }
    }
}

/// What an [`Aggregation`] aggregates.
#[derive(Clone, Debug)]
enum What {
    Latency {
        start: String,
        end: String,
        key: LatencyKey,
        by: Option<By>,
    },
    Histogram {
        arg: usize,
    },
    Count {
        arg: usize,
        strings: bool,
        signed: bool,
    },
}

/// The start argument a latency keeps a histogram per value of.
#[derive(Clone, Copy, Debug)]
struct By {
    /// Its note operand in the start probe.
    arg: usize,
    /// The operand is the address of a string (its first
    /// [`Aggregation::STRING_BYTES`] are the value).
    strings: bool,
    /// How an integer shows.
    signed: bool,
}

/// One aggregation in the kernel: its maps and one uprobe_multi link per
/// attached file. Dropping it detaches every site (semaphores go back
/// down) and frees its maps.
#[derive(Debug)]
pub struct Aggregation {
    agg: Box<dyn Aggregating>,
    what: What,
    point: AttachPoint,
    features: KernelFeatures,
    sites: usize,
    /// The filters of the value sites (a latency's starts), and of a
    /// latency's ends.
    filters: [Option<Filter>; 2],
}

impl Aggregation {
    /// The bytes of a string that are counted: longer strings are cut.
    pub const STRING_BYTES: usize = STRING_KEY;

    /// How many values a latency per value keeps, each with its
    /// histogram ([`Aggregation::latency_by`]): the pairs of a value first
    /// seen once the map holds them all are in the total only
    /// ([`Aggregation::values_not_kept`]).
    pub const BY_VALUES: usize = BY_VALUES;

    fn new(kind: AggKind, what: What, point: AttachPoint) -> Result<Aggregation, Error> {
        Ok(Aggregation {
            agg: aggregator(kind)?,
            what,
            point,
            features: crate::placement::features_for(point),
            sites: 0,
            filters: [None, None],
        })
    }

    /// Aggregates only the hits for which `filter` holds: the sites of a
    /// histogram or of counts per value, both probes of a latency (its
    /// names bound at each site by the probe's signature: the filter's
    /// signatures and the attached file's records). It runs in the
    /// program before anything is kept: a hit that fails it takes no map
    /// slot. An end that fails it forgets its start, uncounted.
    pub fn filter(mut self, filter: Filter) -> Aggregation {
        self.filters = [Some(filter.clone()), Some(filter)];
        self
    }

    /// [`Aggregation::filter`] for a latency's starts only: a start that
    /// fails it is not kept, so that its end is unmatched.
    pub fn filter_start(mut self, filter: Filter) -> Aggregation {
        self.filters[0] = Some(filter);
        self
    }

    /// [`Aggregation::filter`] for a latency's ends only: an end that
    /// fails it forgets its start, and the pair is not in the histogram.
    pub fn filter_end(mut self, filter: Filter) -> Aggregation {
        self.filters[1] = Some(filter);
        self
    }

    /// The time from each hit of probe `start` (`provider:name`) to the
    /// next hit of probe `end` with the same key.
    pub fn latency(
        start: &str,
        end: &str,
        key: LatencyKey,
        point: AttachPoint,
    ) -> Result<Aggregation, Error> {
        Aggregation::latency_of(start, end, key, None, point)
    }

    /// [`Aggregation::latency`], with a histogram per value of note
    /// operand `by` of the start probe as well: an integer (`signed` says
    /// how to show it), or with `strings` the string it points at (its
    /// first [`Aggregation::STRING_BYTES`]). At most
    /// [`Aggregation::BY_VALUES`] values are kept.
    pub fn latency_by(
        start: &str,
        end: &str,
        key: LatencyKey,
        by: usize,
        strings: bool,
        signed: bool,
        point: AttachPoint,
    ) -> Result<Aggregation, Error> {
        let by = By {
            arg: by,
            strings,
            signed,
        };
        Aggregation::latency_of(start, end, key, Some(by), point)
    }

    fn latency_of(
        start: &str,
        end: &str,
        key: LatencyKey,
        by: Option<By>,
        point: AttachPoint,
    ) -> Result<Aggregation, Error> {
        if start == end {
            return Err(Error::SameProbe {
                probe: start.into(),
            });
        }
        let kind = match by {
            Some(by) => AggKind::LatencyBy {
                strings: by.strings,
            },
            None => AggKind::Latency,
        };
        let what = What::Latency {
            start: start.into(),
            end: end.into(),
            key,
            by,
        };
        Aggregation::new(kind, what, point)
    }

    /// A log2 histogram of note operand `arg` of the attached sites.
    pub fn histogram_of(arg: usize, point: AttachPoint) -> Result<Aggregation, Error> {
        Aggregation::new(AggKind::Histogram, What::Histogram { arg }, point)
    }

    /// Counts per value of note operand `arg`: an integer (`signed` says how
    /// to show it), or, with `strings`, the NUL-terminated string it points
    /// at.
    pub fn count_by(
        arg: usize,
        strings: bool,
        signed: bool,
        point: AttachPoint,
    ) -> Result<Aggregation, Error> {
        let kind = if strings {
            AggKind::CountStrings
        } else {
            AggKind::CountInts
        };
        let what = What::Count {
            arg,
            strings,
            signed,
        };
        Aggregation::new(kind, what, point)
    }

    /// Attaches `sites` of the file at `path` with one link, aggregating
    /// the hits of `target`. For a latency, each site is a start or an end
    /// by its probe name (sites of other probes are refused).
    pub fn attach<P: AsRef<Path>>(
        &mut self,
        path: P,
        sites: &[&Site],
        target: Target,
    ) -> Result<(), Error> {
        let binders = self
            .filters
            .each_ref()
            .map(|f| f.as_ref().map(|f| f.binder(path.as_ref())));
        let sites = sites
            .iter()
            .map(|site| self.aggregated(site, &binders))
            .collect::<Result<Vec<_>, Error>>()?;
        let attached =
            self.agg
                .attach(path.as_ref(), &sites, self.point, &self.features, target)?;
        self.sites += attached;
        Ok(())
    }

    /// How many sites are attached.
    pub fn sites(&self) -> usize {
        self.sites
    }

    /// The histogram so far (for counts per value: only what was lost and
    /// unreadable).
    pub fn histogram(&self) -> Result<Histogram, Error> {
        Ok(Histogram::from_stats(&self.agg.stats()?))
    }

    /// The counts per value so far, the largest first (empty unless made by
    /// [`Aggregation::count_by`]).
    pub fn counts(&self) -> Result<Vec<(CountedValue, u64)>, Error> {
        let (strings, signed) = match self.what {
            What::Count {
                strings, signed, ..
            } => (strings, signed),
            _ => return Ok(vec![]),
        };
        let mut out: Vec<(CountedValue, u64)> = self
            .agg
            .values()?
            .into_iter()
            .map(|(key, n)| (CountedValue::of(&key, strings, signed), n))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// The histogram of each value of a latency per value so far, the
    /// most counted first (empty unless made by
    /// [`Aggregation::latency_by`]). Their sum is
    /// [`Aggregation::histogram`] but for the pairs whose value was not
    /// kept ([`Aggregation::values_not_kept`]).
    pub fn histograms_by(&self) -> Result<Vec<(CountedValue, Histogram)>, Error> {
        let What::Latency { by: Some(by), .. } = &self.what else {
            return Ok(vec![]);
        };
        let mut out: Vec<(CountedValue, Histogram)> = self
            .agg
            .histograms()?
            .into_iter()
            .map(|(key, slots)| {
                let h = Histogram::from_stats(&slots);
                (CountedValue::of(&key, by.strings, by.signed), h)
            })
            .collect();
        out.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// The pairs of a latency per value whose value was new when the map
    /// already held [`Aggregation::BY_VALUES`]: in the total histogram, in
    /// no value's.
    pub fn values_not_kept(&self) -> Result<u64, Error> {
        Ok(self.agg.stats()?.get(BY_FULL).copied().unwrap_or(0))
    }

    /// What the hits of `site` do, which operand they read, and the
    /// filter they pass (bound by `binders`, of the value sites and of the
    /// ends).
    fn aggregated<'s>(
        &self,
        site: &'s Site,
        binders: &[Option<Binder>; 2],
    ) -> Result<AggregateSite<'s>, Error> {
        let probe = site.probe();
        let (role, arg, string, by) = match &self.what {
            What::Latency {
                start,
                end,
                key,
                by,
            } => {
                if probe == *start {
                    (Role::Start, key_arg(key, true), false, by.map(|b| b.arg))
                } else if probe == *end {
                    (Role::End, key_arg(key, false), false, None)
                } else {
                    return Err(Error::NotStartOrEnd {
                        probe,
                        start: start.clone(),
                        end: end.clone(),
                    });
                }
            }
            What::Histogram { arg } => (Role::Record, Some(*arg), false, None),
            What::Count { arg, strings, .. } => (Role::Count, Some(*arg), *strings, None),
        };
        let binder = &binders[usize::from(role == Role::End)];
        let filter = match binder {
            Some(b) => Some(b.site(site)?),
            None => None,
        };
        Ok(AggregateSite {
            site,
            role,
            arg,
            string,
            filter,
            by,
        })
    }
}

fn key_arg(key: &LatencyKey, start: bool) -> Option<usize> {
    match key {
        LatencyKey::Thread => None,
        LatencyKey::Arg { start: s, end: e } => Some(if start { *s } else { *e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: &[(usize, u64)], max: u64) -> Histogram {
        let mut h = Histogram {
            buckets: vec![0; BUCKETS],
            max,
            ..Histogram::default()
        };
        for (b, n) in buckets {
            h.buckets[*b] = *n;
            h.count += n;
        }
        h
    }

    #[test]
    fn bounds_are_powers_of_two() {
        assert_eq!(Histogram::bounds(0), (0, 1));
        assert_eq!(Histogram::bounds(1), (1, 2));
        assert_eq!(Histogram::bounds(21), (1 << 20, 1 << 21));
        assert_eq!(Histogram::bounds(64), (1 << 63, u64::MAX));
    }

    #[test]
    fn quantiles_fall_in_their_buckets() {
        // Half near 1 ms (bucket 21: [1 Mi, 2 Mi)), half near 8 ms (bucket 23).
        let h = hist(&[(21, 50), (23, 50)], 8_300_000);
        let p50 = h.quantile(0.5);
        assert!((1 << 20..=1 << 21).contains(&p50), "{p50}");
        let p90 = h.quantile(0.9);
        assert!((1 << 22..=8_300_000).contains(&p90), "{p90}");
        assert_eq!(h.quantile(1.0), 8_300_000);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn values_show_as_written() {
        assert_eq!(CountedValue::Signed(-3).to_string(), "-3");
        assert_eq!(CountedValue::Str(b"/a".to_vec()).to_string(), "\"/a\"");
    }
}
