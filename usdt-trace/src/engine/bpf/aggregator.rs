//! The maps of one aggregation in the kernel and the uprobe_multi links
//! whose programs (`aggregate.rs`) fill them; reading them back: the BPF
//! engine's [`Aggregating`].

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::aggregate::{
    aggregate_program, arg_read, AggSite, Maps, Read, Variant, MAP_ENTRIES, STATS_SLOTS,
};
use super::counter::{link_sites, MultiSite};
use super::program::load_program;
use super::BpfError;
use super::filter;
use crate::engine::aggregating::{
    AggregateSite, Aggregating, Kind, RawCounts, RawHistograms, BY_VALUES, MAX, STRING_KEY,
};
use crate::engine::{AttachPoint, Target};
use crate::sys::bpf::{
    bpf, bpf_fd, object_name, MapCreateAttr, MapElemAttr, BPF_MAP_CREATE, BPF_MAP_GET_NEXT_KEY,
    BPF_MAP_LOOKUP_ELEM, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_PERCPU_ARRAY,
};
use crate::{Error, KernelFeatures};

/// One uprobe_multi link and its program.
#[derive(Debug)]
struct Link {
    // Declared first: dropped first.
    _link: OwnedFd,
    _prog: OwnedFd,
}

/// The maps of one aggregation and the links that fill them. Dropping it
/// closes the links first (the kernel removes every uprobe and lowers the
/// semaphores before `close` returns), then the programs and the maps.
#[derive(Debug)]
pub(crate) struct Aggregator {
    links: Vec<Link>,
    stats: OwnedFd,
    starts: Option<OwnedFd>,
    values: Option<OwnedFd>,
    /// A latency per value: each value's histogram, and the zeroed one.
    by: Option<OwnedFd>,
    zero: Option<OwnedFd>,
    kind: Kind,
    cpus: usize,
}

fn create_map(
    map_type: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size: key,
        value_size: value,
        max_entries: entries,
        map_name: object_name(name),
        ..MapCreateAttr::default()
    };
    // SAFETY: the attributes hold no pointers.
    unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
        .map_err(|e| BpfError::from_os(&format!("creating the map {name}"), e))
}

impl Aggregator {
    /// The maps of an aggregation of `kind`, nothing attached.
    pub(crate) fn new(kind: Kind) -> Result<Aggregator, BpfError> {
        let cpus = crate::cpus::possible_cpus().map_err(BpfError::Cpus)?;
        let stats = create_map(
            BPF_MAP_TYPE_PERCPU_ARRAY,
            4,
            (STATS_SLOTS * 8) as u32,
            1,
            "usdt_stats",
        )?;
        // A start's time, then (per value) its value.
        let start_value = match kind {
            Kind::Latency => Some(8),
            Kind::LatencyBy { strings: false } => Some(16),
            Kind::LatencyBy { strings: true } => Some(8 + STRING_KEY as u32),
            _ => None,
        };
        let starts = match start_value {
            Some(value) => Some(create_map(
                BPF_MAP_TYPE_HASH,
                16,
                value,
                MAP_ENTRIES,
                "usdt_starts",
            )?),
            None => None,
        };
        let histogram = (STATS_SLOTS * 8) as u32;
        let (by, zero) = match kind {
            Kind::LatencyBy { strings } => {
                let key = if strings { STRING_KEY as u32 } else { 8 };
                let by = create_map(BPF_MAP_TYPE_HASH, key, histogram, BY_VALUES as u32, "usdt_by")?;
                let zero = create_map(BPF_MAP_TYPE_ARRAY, 4, histogram, 1, "usdt_zero")?;
                (Some(by), Some(zero))
            }
            _ => (None, None),
        };
        let key = match kind {
            Kind::CountInts => Some(8),
            Kind::CountStrings => Some(STRING_KEY as u32),
            _ => None,
        };
        let values = match key {
            Some(key) => Some(create_map(
                BPF_MAP_TYPE_HASH,
                key,
                8,
                MAP_ENTRIES,
                "usdt_values",
            )?),
            None => None,
        };
        Ok(Aggregator {
            links: vec![],
            stats,
            starts,
            values,
            by,
            zero,
            kind,
            cpus,
        })
    }

    /// Attaches `sites` of the file at `path` with one link and a program
    /// for their variants, aggregating the hits of `target`. Attaching no
    /// sites does nothing.
    fn link(&mut self, path: &Path, sites: &[AggSite], target: Target) -> Result<(), BpfError> {
        if sites.is_empty() {
            return Ok(());
        }
        let mut variants: Vec<Variant> = vec![];
        let mut triples = vec![];
        for site in sites {
            let cookie = match variants.iter().position(|v| *v == site.variant) {
                Some(i) => i,
                None => {
                    variants.push(site.variant.clone());
                    variants.len() - 1
                }
            };
            triples.push((site.offset, site.ref_ctr_offset.unwrap_or(0), cookie as u64));
        }
        let fd = |m: &Option<OwnedFd>| m.as_ref().map_or(-1, |m| m.as_raw_fd());
        let maps = Maps {
            stats: self.stats.as_raw_fd(),
            starts: fd(&self.starts),
            values: fd(&self.values),
            by: fd(&self.by),
            zero: fd(&self.zero),
            by_strings: self.kind == Kind::LatencyBy { strings: true },
        };
        let insns = aggregate_program(&maps, &variants).map_err(|log| BpfError::Verifier {
            program: "usdt_aggregate".into(),
            log,
        })?;
        let prog = load_program(&insns, "usdt_aggregate")?;
        let link = link_sites(prog.as_fd(), path, &triples, target)?;
        self.links.push(Link {
            _link: link,
            _prog: prog,
        });
        Ok(())
    }
}

impl Aggregating for Aggregator {
    /// One link for the sites of the file, one uprobe per address, with a
    /// program that reads each site's argument as its operand says.
    fn attach(
        &mut self,
        path: &Path,
        sites: &[AggregateSite<'_>],
        point: AttachPoint,
        features: &KernelFeatures,
        target: Target,
    ) -> Result<usize, Error> {
        let mut seen = HashSet::new();
        let mut agg = vec![];
        let strings = self.kind == Kind::LatencyBy { strings: true };
        for s in sites {
            let read = match s.arg {
                None => Read::THREAD,
                Some(i) => arg_read(s.site, i, s.string, "aggregate")?,
            };
            let by = match s.by {
                Some(i) => Some(arg_read(s.site, i, strings, "keep a histogram per value of")?),
                None => None,
            };
            let filter = match &s.filter {
                Some(f) => Some(filter::code(f, s.site)?),
                None => None,
            };
            let m = MultiSite::at(s.site, point, features, path, 0, target)?;
            // Duplicate notes of one site: one uprobe per address.
            if seen.insert(m.offset) {
                agg.push(AggSite {
                    offset: m.offset,
                    ref_ctr_offset: m.ref_ctr_offset,
                    variant: Variant {
                        role: s.role,
                        read,
                        filter,
                        by,
                    },
                });
            }
        }
        self.link(path, &agg, target)?;
        Ok(agg.len())
    }

    /// The `stats` slots summed over every CPU (the maximum: the largest).
    fn stats(&self) -> Result<Vec<u64>, Error> {
        let mut values = vec![0u64; STATS_SLOTS * self.cpus];
        let key = 0u32;
        lookup(
            self.stats.as_fd(),
            &key.to_ne_bytes(),
            &mut values,
            "reading the histogram",
        )?;
        let mut out = vec![0u64; STATS_SLOTS];
        for cpu in values.chunks(STATS_SLOTS) {
            for (i, (o, v)) in out.iter_mut().zip(cpu).enumerate() {
                *o = if i == MAX {
                    (*o).max(*v)
                } else {
                    o.wrapping_add(*v)
                };
            }
        }
        Ok(out)
    }

    /// Every counted value's key bytes and count (none for other kinds).
    fn values(&self) -> Result<RawCounts, Error> {
        let Some(map) = &self.values else {
            return Ok(vec![]);
        };
        let size = match self.kind {
            Kind::CountStrings => STRING_KEY,
            _ => 8,
        };
        let entries = entries(map.as_fd(), size, 1, "reading the counted values")?;
        Ok(entries.into_iter().map(|(k, v)| (k, v[0])).collect())
    }

    /// Every value's key bytes and histogram (none for other kinds).
    fn histograms(&self) -> Result<RawHistograms, Error> {
        let Some(map) = &self.by else {
            return Ok(vec![]);
        };
        let size = match self.kind {
            Kind::LatencyBy { strings: true } => STRING_KEY,
            _ => 8,
        };
        entries(map.as_fd(), size, STATS_SLOTS, "reading the histograms per value")
    }
}

/// Every key of the hash `map` (of `key_size` bytes) with its value of
/// `words` u64.
fn entries(
    map: BorrowedFd<'_>,
    key_size: usize,
    words: usize,
    what: &str,
) -> Result<RawHistograms, Error> {
    let mut out = vec![];
    let mut key: Option<Vec<u8>> = None;
    loop {
        let mut next = vec![0u8; key_size];
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: key.as_ref().map_or(0, |k| k.as_ptr() as u64),
            value: next.as_mut_ptr() as u64,
            ..MapElemAttr::default()
        };
        // SAFETY: the key (or NULL: the first key) and the next key are
        // the map's key size.
        match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) => return Err(BpfError::from_os(what, e).into()),
        }
        let mut value = vec![0u64; words];
        match lookup(map, &next, &mut value, what) {
            Ok(()) => out.push((next.clone(), value)),
            // Removed meanwhile: none are, but a race must not fail.
            Err(BpfError::Syscall { source, .. })
                if source.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
        key = Some(next);
    }
    Ok(out)
}

/// Looks `key` up in `map`, writing its value (all CPUs' for a per-CPU
/// map) to `values`, which must be the value's size.
fn lookup(map: BorrowedFd<'_>, key: &[u8], values: &mut [u64], what: &str) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: values.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: callers pass a key of the map's key size and a value buffer
    // of its value size (times the possible CPUs for a per-CPU map).
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }.map_err(|e| BpfError::from_os(what, e))?;
    Ok(())
}
