//! `usdt latency START END`: the time from each START to the END of the
//! same key as a log2 histogram, and `usdt hist PROBE ARG`: an argument's
//! values as one; both kept in BPF maps and read once at the end.

use std::io::Write;
use std::path::Path;

use serde_json::json;
use usdt_trace::{
    escape_name, Aggregation, AttachPoint, Histogram, LatencyKey, Signatures, Site, Target,
};

use crate::answers::{human_ns, operand_for, run, Aggregates};
use crate::args::{HistArgs, LatencyArgs};
use crate::error::{ArgUse, CliError};

/// How `--key` pairs ends with starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyArg {
    Thread,
    /// `argN` or a parameter name.
    Arg(String),
}

impl KeyArg {
    pub(crate) fn parse(key: Option<&str>) -> KeyArg {
        match key {
            None | Some("tid") | Some("thread") => KeyArg::Thread,
            Some(arg) => KeyArg::Arg(arg.into()),
        }
    }

    fn words(&self) -> String {
        match self {
            KeyArg::Thread => "thread".into(),
            KeyArg::Arg(a) => a.clone(),
        }
    }
}

/// One latency: its probes, its key, and its aggregation once the first
/// file with both probes' sites is known (the key's operands come from the
/// sites and their signature records).
pub(crate) struct LatencyAgg {
    pub(crate) start: String,
    pub(crate) end: String,
    pub(crate) key: KeyArg,
    point: AttachPoint,
    pub(crate) agg: Option<Aggregation>,
    /// Which of the two probes had sites attached.
    found: [bool; 2],
}

impl LatencyAgg {
    pub(crate) fn new(start: &str, end: &str, key: KeyArg, point: AttachPoint) -> LatencyAgg {
        LatencyAgg {
            start: start.into(),
            end: end.into(),
            key,
            point,
            agg: None,
            found: [false; 2],
        }
    }

    /// The operand of the key in `site`, checked to be an integer.
    fn operand(&self, site: &Site, sigs: &Signatures) -> Result<Option<usize>, CliError> {
        let KeyArg::Arg(arg) = &self.key else {
            return Ok(None);
        };
        let (i, _) = operand_for(arg, &[site], sigs, ArgUse::Key)?;
        Ok(Some(i))
    }

    /// The histogram so far (empty before anything was attached).
    pub(crate) fn histogram(&self) -> Result<Histogram, CliError> {
        match &self.agg {
            Some(a) => Ok(a.histogram()?),
            None => Ok(Histogram {
                buckets: vec![0; Histogram::BUCKETS],
                ..Histogram::default()
            }),
        }
    }
}

impl Aggregates for LatencyAgg {
    fn globs(&self) -> Vec<String> {
        vec![self.start.clone(), self.end.clone()]
    }

    /// Attaches the sites of the start and end probes among `sites`.
    fn attach(
        &mut self,
        path: &Path,
        sites: &[&Site],
        sigs: &Signatures,
        target: Target,
    ) -> Result<(), CliError> {
        let mine: Vec<&Site> = sites
            .iter()
            .copied()
            .filter(|s| {
                let p = s.probe();
                p == self.start || p == self.end
            })
            .collect();
        if mine.is_empty() {
            return Ok(());
        }
        for s in &mine {
            self.found[usize::from(s.probe() == self.end)] = true;
        }
        if self.agg.is_none() {
            let first = |name: &str| mine.iter().find(|s| s.probe() == name);
            let key = match (first(&self.start), first(&self.end)) {
                _ if self.key == KeyArg::Thread => LatencyKey::Thread,
                (Some(s), Some(e)) => match (self.operand(s, sigs)?, self.operand(e, sigs)?) {
                    (Some(start), Some(end)) => LatencyKey::Arg { start, end },
                    _ => LatencyKey::Thread,
                },
                // One probe in this file, the other elsewhere: the key's
                // operand is that of the probe here, in both.
                (Some(s), None) | (None, Some(s)) => match self.operand(s, sigs)? {
                    Some(i) => LatencyKey::Arg { start: i, end: i },
                    None => LatencyKey::Thread,
                },
                (None, None) => return Ok(()),
            };
            self.agg = Some(Aggregation::latency(
                &self.start,
                &self.end,
                key,
                self.point,
            )?);
        }
        match &mut self.agg {
            Some(agg) => Ok(agg.attach(path, &mine, target)?),
            None => Ok(()),
        }
    }
}

/// Each probe named must exist in the target: checked by `select` for the
/// pair as a whole, and here for each.
fn check_probe(name: &str) -> Result<(), CliError> {
    if name.split(':').count() != 2 || name.contains(['*', '?']) {
        return Err(CliError::NotAProbe {
            name: escape_name(name).into_owned(),
        });
    }
    Ok(())
}

pub(crate) fn latency(args: LatencyArgs) -> Result<i32, CliError> {
    check_probe(&args.start)?;
    check_probe(&args.end)?;
    let place = args.target.place();
    let key = KeyArg::parse(args.key.as_deref());
    let mut lat = LatencyAgg::new(&args.start, &args.end, key, args.sites.attach.into());
    let code = run(
        &place,
        args.sites.force_sites,
        &mut lat,
        args.duration,
        &|n, name| eprintln!("usdt: timing {n} sites of {name}; Ctrl-C prints the histogram"),
    )?;
    let Some(agg) = &lat.agg else {
        return Ok(code);
    };
    if agg.sites() == 0 || lat.found != [true, true] {
        eprintln!(
            "usdt: warning: {} or {} has no site in the target: no pair can be timed",
            escape_name(&lat.start),
            escape_name(&lat.end)
        );
    }
    let h = lat.histogram()?;
    // Read, detach, then print.
    lat.agg = None;
    crate::output::detached();
    let mut out = std::io::BufWriter::new(crate::output::Stdout::new());
    if args.json {
        let v = json!({
            "start": lat.start,
            "end": lat.end,
            "key": lat.key.words(),
            "count": h.count,
            "unmatched": h.unmatched,
            "lost_starts": h.lost,
            "sum_ns": h.sum,
            "buckets": json_buckets(&h, "_ns"),
            "p50_ns": h.quantile(0.5),
            "p90_ns": h.quantile(0.9),
            "p99_ns": h.quantile(0.99),
            "max_ns": h.max,
        });
        writeln!(out, "{v}").map_err(CliError::Output)?;
    } else {
        writeln!(
            out,
            "{} -> {} by {}, nanoseconds:",
            escape_name(&lat.start),
            escape_name(&lat.end),
            escape_name(&lat.key.words())
        )
        .map_err(CliError::Output)?;
        write_histogram(&mut out, &h)?;
        writeln!(
            out,
            "\ncount {}  p50 {}  p90 {}  p99 {}  max {}  mean {}",
            h.count,
            human_ns(h.quantile(0.5)),
            human_ns(h.quantile(0.9)),
            human_ns(h.quantile(0.99)),
            human_ns(h.max),
            human_ns(h.mean() as u64)
        )
        .map_err(CliError::Output)?;
        writeln!(
            out,
            "unmatched ends {}  lost starts {}{}",
            h.unmatched,
            h.lost,
            unreadable_words(&h)
        )
        .map_err(CliError::Output)?;
    }
    out.flush().map_err(CliError::Output)?;
    if let Some(path) = &args.svg {
        let caption = format!(
            "usdt latency {} -> {} by {}: count {}, p50 {}, p90 {}, p99 {}, max {}",
            escape_name(&lat.start),
            escape_name(&lat.end),
            escape_name(&lat.key.words()),
            h.count,
            human_ns(h.quantile(0.5)),
            human_ns(h.quantile(0.9)),
            human_ns(h.quantile(0.99)),
            human_ns(h.max),
        );
        let label = |low, high| format!("[{}, {})", human_ns(low), human_ns(high));
        crate::pictures::histogram(path, &h, caption, "pairs per log2 bucket", &label)?;
    }
    Ok(code)
}

fn unreadable_words(h: &Histogram) -> String {
    if h.unreadable > 0 {
        format!("  unreadable keys {}", h.unreadable)
    } else {
        String::new()
    }
}

/// The non-empty buckets as `{"low<unit>","high<unit>","count"}`.
pub(crate) fn json_buckets(h: &Histogram, unit: &str) -> serde_json::Value {
    h.buckets
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| {
            let (low, high) = Histogram::bounds(b);
            let mut m = serde_json::Map::new();
            m.insert(format!("low{unit}"), low.into());
            m.insert(format!("high{unit}"), high.into());
            m.insert("count".into(), (*n).into());
            serde_json::Value::Object(m)
        })
        .collect()
}

/// `1K`, `4M`: a power of two with bpftrace's suffixes.
fn power(v: u64) -> String {
    for (shift, suffix) in [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ] {
        if v >= 1 << shift && v % (1 << shift) == 0 {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// The buckets from the first to the last non-empty one, as bpftrace
/// prints `hist()`: `[4M, 8M)   50 |@@@@@   |`.
pub(crate) fn write_histogram(out: &mut dyn Write, h: &Histogram) -> Result<(), CliError> {
    let first = h.buckets.iter().position(|n| *n > 0);
    let last = h.buckets.iter().rposition(|n| *n > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return writeln!(out, "(no values)").map_err(CliError::Output);
    };
    let top = h.buckets[first..=last].iter().copied().max().unwrap_or(1);
    for b in first..=last {
        let (low, high) = Histogram::bounds(b);
        let range = match b {
            0 | 1 => format!("[{low}]"),
            64 => format!("[{}, ...)", power(low)),
            _ => format!("[{}, {})", power(low), power(high)),
        };
        let n = h.buckets[b];
        let bar = (n as u128 * 52).div_ceil(top as u128) as usize;
        writeln!(out, "{range:<20}{n:>8} |{:<52}|", "@".repeat(bar)).map_err(CliError::Output)?;
    }
    Ok(())
}

/// A histogram of one argument of the sites of one probe glob.
struct HistAgg {
    glob: String,
    arg: String,
    point: AttachPoint,
    agg: Option<Aggregation>,
    signed: bool,
}

impl Aggregates for HistAgg {
    fn globs(&self) -> Vec<String> {
        vec![self.glob.clone()]
    }

    fn attach(
        &mut self,
        path: &Path,
        sites: &[&Site],
        sigs: &Signatures,
        target: Target,
    ) -> Result<(), CliError> {
        let Some(first) = sites.first() else {
            return Ok(());
        };
        let (i, _) = operand_for(&self.arg, sites, sigs, ArgUse::Hist)?;
        self.signed |= first.args.get(i).is_some_and(|a| a.signed);
        if self.agg.is_none() {
            self.agg = Some(Aggregation::histogram_of(i, self.point)?);
        }
        match &mut self.agg {
            Some(agg) => Ok(agg.attach(path, sites, target)?),
            None => Ok(()),
        }
    }
}

pub(crate) fn hist(args: HistArgs) -> Result<i32, CliError> {
    let place = args.target.place();
    let mut h = HistAgg {
        glob: args.probe,
        arg: args.arg,
        point: args.sites.attach.into(),
        agg: None,
        signed: false,
    };
    let code = run(
        &place,
        args.sites.force_sites,
        &mut h,
        args.duration,
        &|n, name| {
            eprintln!(
                "usdt: reading an argument at {n} sites of {name}; Ctrl-C prints the histogram"
            )
        },
    )?;
    let Some(agg) = &h.agg else {
        return Ok(code);
    };
    let hist = agg.histogram()?;
    // Read, detach, then print.
    h.agg = None;
    crate::output::detached();
    let mut out = std::io::BufWriter::new(crate::output::Stdout::new());
    if args.json {
        let v = json!({
            "probe": h.glob,
            "arg": h.arg,
            "count": hist.count,
            "sum": hist.sum,
            "max": hist.max,
            "negative": hist.negative,
            "unreadable": hist.unreadable,
            "buckets": json_buckets(&hist, ""),
            "p50": hist.quantile(0.5),
            "p90": hist.quantile(0.9),
            "p99": hist.quantile(0.99),
        });
        writeln!(out, "{v}").map_err(CliError::Output)?;
    } else {
        writeln!(out, "{} {}:", escape_name(&h.glob), escape_name(&h.arg))
            .map_err(CliError::Output)?;
        write_histogram(&mut out, &hist)?;
        writeln!(
            out,
            "\ncount {}  p50 {}  p90 {}  p99 {}  max {}  mean {:.1}",
            hist.count,
            hist.quantile(0.5),
            hist.quantile(0.9),
            hist.quantile(0.99),
            hist.max,
            hist.mean()
        )
        .map_err(CliError::Output)?;
        if hist.negative > 0 || h.signed {
            writeln!(out, "negative values (not shown) {}", hist.negative)
                .map_err(CliError::Output)?;
        }
        if hist.unreadable > 0 {
            writeln!(out, "unreadable {}", hist.unreadable).map_err(CliError::Output)?;
        }
    }
    out.flush().map_err(CliError::Output)?;
    if let Some(path) = &args.svg {
        let caption = format!(
            "usdt hist {} {}: count {}, p50 {}, p90 {}, p99 {}, max {}",
            escape_name(&h.glob),
            escape_name(&h.arg),
            hist.count,
            hist.quantile(0.5),
            hist.quantile(0.9),
            hist.quantile(0.99),
            hist.max,
        );
        let label = |low, high| format!("[{}, {})", power(low), power(high));
        crate::pictures::histogram(path, &hist, caption, "values per log2 bucket", &label)?;
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_print_as_bpftrace_does() {
        let mut h = Histogram {
            buckets: vec![0; Histogram::BUCKETS],
            ..Histogram::default()
        };
        h.buckets[21] = 4;
        h.buckets[23] = 2;
        let mut out = vec![];
        write_histogram(&mut out, &h).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("[1M, 2M)                   4 |@@@@"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("[2M, 4M)                   0 |  "),
            "{text}"
        );
        assert!(
            lines[2].starts_with("[4M, 8M)                   2 |@@@"),
            "{text}"
        );
        assert_eq!(power(1 << 10), "1K");
        assert_eq!(power(3), "3");
    }
}
