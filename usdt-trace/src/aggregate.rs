//! Answers instead of hits: a latency histogram between two probes, a
//! histogram of an argument, and counts per argument value, each kept in
//! BPF maps by a program that runs at the hit (see `engine/bpf/aggregate.rs`).
//! Nothing is sent to user space per hit; [`Aggregation::histogram`] and
//! [`Aggregation::counts`] read the maps whenever asked.
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

use std::collections::HashSet;
use std::path::Path;

use crate::elf::arg::{Operand, RegWidth};
use crate::engine::bpf::aggregate::{
    AggSite, Aggregator, Kind as AggKind, Read, Role, Source, Variant, BUCKETS, COUNT, LOST, MAX,
    NEGATIVE, STRING_KEY, SUM, UNMATCHED, UNREADABLE,
};
use crate::engine::bpf::MultiSite;
use crate::engine::{AttachPoint, Target};
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

/// One aggregation in the kernel: its maps and one uprobe_multi link per
/// attached file. Dropping it detaches every site (semaphores go back
/// down) and frees its maps.
#[derive(Debug)]
pub struct Aggregation {
    agg: Aggregator,
    what: What,
    point: AttachPoint,
    features: KernelFeatures,
    sites: usize,
}

impl Aggregation {
    /// The bytes of a string that are counted: longer strings are cut.
    pub const STRING_BYTES: usize = STRING_KEY;

    fn new(kind: AggKind, what: What, point: AttachPoint) -> Result<Aggregation, Error> {
        Ok(Aggregation {
            agg: Aggregator::new(kind)?,
            what,
            point,
            features: KernelFeatures::detect(),
            sites: 0,
        })
    }

    /// The time from each hit of probe `start` (`provider:name`) to the
    /// next hit of probe `end` with the same key.
    pub fn latency(
        start: &str,
        end: &str,
        key: LatencyKey,
        point: AttachPoint,
    ) -> Result<Aggregation, Error> {
        if start == end {
            return Err(Error::SameProbe {
                probe: start.into(),
            });
        }
        let what = What::Latency {
            start: start.into(),
            end: end.into(),
            key,
        };
        Aggregation::new(AggKind::Latency, what, point)
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
        let path = path.as_ref();
        let mut seen = HashSet::new();
        let mut agg = vec![];
        for site in sites {
            let variant = self.variant(site)?;
            let m = MultiSite::at(site, self.point, &self.features, path, 0, target)?;
            // Duplicate notes of one site: one uprobe per address.
            if seen.insert(m.offset) {
                agg.push(AggSite {
                    offset: m.offset,
                    ref_ctr_offset: m.ref_ctr_offset,
                    variant,
                });
            }
        }
        self.agg.attach(path, &agg, target)?;
        self.sites += agg.len();
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
            .map(|(key, n)| {
                let value = if strings {
                    let end = key.iter().position(|b| *b == 0).unwrap_or(key.len());
                    CountedValue::Str(key[..end].to_vec())
                } else {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&key[..8]);
                    let v = u64::from_ne_bytes(b);
                    if signed {
                        CountedValue::Signed(v as i64)
                    } else {
                        CountedValue::Unsigned(v)
                    }
                };
                (value, n)
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(out)
    }

    /// The role and the read of `site`.
    fn variant(&self, site: &Site) -> Result<Variant, Error> {
        let probe = site.probe();
        let (role, read) = match &self.what {
            What::Latency { start, end, key } => {
                let (role, arg) = if probe == *start {
                    (Role::Start, key_arg(key, true))
                } else if probe == *end {
                    (Role::End, key_arg(key, false))
                } else {
                    return Err(Error::NotStartOrEnd {
                        probe,
                        start: start.clone(),
                        end: end.clone(),
                    });
                };
                match arg {
                    None => (role, Read::THREAD),
                    Some(i) => (role, arg_read(site, i, false)?),
                }
            }
            What::Histogram { arg } => (Role::Record, arg_read(site, *arg, false)?),
            What::Count { arg, strings, .. } => (Role::Count, arg_read(site, *arg, *strings)?),
        };
        Ok(Variant { role, read })
    }
}

fn key_arg(key: &LatencyKey, start: bool) -> Option<usize> {
    match key {
        LatencyKey::Thread => None,
        LatencyKey::Arg { start: s, end: e } => Some(if start { *s } else { *e }),
    }
}

/// How the program reads operand `i` of `site` (a pointer, with `string`).
fn arg_read(site: &Site, i: usize, string: bool) -> Result<Read, Error> {
    let probe = site.probe();
    let arg = site.args.get(i).ok_or_else(|| Error::NoSuchArg {
        probe: probe.clone(),
        arg: i,
        args: site.args.len(),
    })?;
    let unsupported = |what: &str| {
        Error::Unsupported(format!(
            "arg{i} of {probe} ({}) {what}",
            site.args_text.split_whitespace().nth(i).unwrap_or("?")
        ))
    };
    if arg.float {
        return Err(unsupported("is a floating-point value"));
    }
    // The `pt_regs` slot of a register, by the table of its file's
    // machine, which must be this one.
    let arch = crate::engine::site_arch(site)?;
    let pt = |r: &crate::elf::arg::Reg| {
        arch.pt_slot(r.reg)
            .ok_or_else(|| unsupported("is in a register BPF cannot read"))
    };
    let small = |v: i64| i32::try_from(v).map_err(|_| unsupported("has a displacement past 2 GiB"));
    let source = match &arg.operand {
        Operand::Immediate(v) => Source::Immediate(small(*v)?),
        Operand::Register(r) => Source::Register {
            pt: pt(r)?,
            high8: r.width == RegWidth::High8,
        },
        Operand::Memory { base, disp } => Source::Memory {
            base: Some(pt(base)?),
            index: None,
            scale: 1,
            disp: small(*disp)?,
        },
        Operand::Indexed {
            base,
            index,
            scale,
            disp,
        } => Source::Memory {
            base: base.as_ref().map(pt).transpose()?,
            index: Some(pt(index)?),
            scale: *scale,
            disp: small(*disp)?,
        },
        _ => {
            return Err(unsupported(
                "is addressed by a symbol; `usdt trace` reads it",
            ))
        }
    };
    Ok(Read {
        source,
        size: if arg.size == 0 { 8 } else { arg.size.min(8) },
        signed: arg.signed,
        string,
    })
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
