//! `usdt latency START END`: the time from each START to the END of the
//! same key as a log2 histogram, and `usdt hist PROBE ARG`: an argument's
//! values as one; both kept in BPF maps and read once at the end.

use std::io::Write;
use std::path::Path;

use serde_json::json;
use usdt_trace::{
    escape_name, Aggregation, AttachPoint, Filter, Histogram, Kind, LatencyKey, Signatures, Site,
    Target,
};

use crate::answers::{human_ns, operand_for, run, Aggregates};
use crate::args::{HistArgs, LatencyArgs};
use crate::error::{ArgUse, CliError};
use crate::filters;
use crate::histograms::{json_buckets, power, write_histogram};
use crate::latency_by::{self, Head, PerValue};

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

/// One latency: its probes, its key, what it keeps a histogram per value
/// of, its filters, and its aggregation once the first file with both
/// probes' sites is known (the key's operands come from the sites and
/// their signature records).
pub(crate) struct LatencyAgg {
    pub(crate) start: String,
    pub(crate) end: String,
    pub(crate) key: KeyArg,
    /// `--by`: the start argument (`argN`, a name, `str(argN)`) whose
    /// values get a histogram each.
    pub(crate) by: Option<String>,
    /// The filters of the starts and of the ends, with the option each
    /// came from.
    filters: [Option<(&'static str, Filter)>; 2],
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
            by: None,
            filters: [None, None],
            point,
            agg: None,
            found: [false; 2],
        }
    }

    /// With a histogram per value of the start's argument `by`.
    pub(crate) fn by(mut self, by: Option<String>) -> LatencyAgg {
        self.by = by;
        self
    }

    /// Times only the pairs whose start passes `start` and whose end
    /// passes `end` (each with the option it came from).
    pub(crate) fn filters(
        mut self,
        start: Option<(&'static str, Filter)>,
        end: Option<(&'static str, Filter)>,
    ) -> LatencyAgg {
        self.filters = [start, end];
        self
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

    /// The aggregation for a file whose first start site is `start` (if
    /// any) and key is `key`.
    fn aggregation(
        &self,
        key: LatencyKey,
        start: Option<&Site>,
        sigs: &Signatures,
    ) -> Result<Aggregation, CliError> {
        let mut agg = match &self.by {
            None => Aggregation::latency(&self.start, &self.end, key, self.point)?,
            Some(by) => {
                let site = start.ok_or_else(|| CliError::NoSite { arg: by.clone() })?;
                let (arg, forced) = match by.strip_prefix("str(").and_then(|b| b.strip_suffix(')'))
                {
                    Some(inner) => (inner, true),
                    None => (by.as_str(), false),
                };
                let (i, kind) = operand_for(arg, &[site], sigs, ArgUse::LatencyBy)?;
                let strings = forced || kind.is_some_and(Kind::is_string);
                let signed = site.args.get(i).is_some_and(|a| a.signed);
                Aggregation::latency_by(
                    &self.start,
                    &self.end,
                    key,
                    i,
                    strings,
                    signed,
                    self.point,
                )?
            }
        };
        if let Some((_, f)) = &self.filters[0] {
            agg = agg.filter_start(f.clone());
        }
        if let Some((_, f)) = &self.filters[1] {
            agg = agg.filter_end(f.clone());
        }
        Ok(agg)
    }
}

impl Aggregates for LatencyAgg {
    fn globs(&self) -> Vec<String> {
        vec![self.start.clone(), self.end.clone()]
    }

    /// Each filter on the sites of its probe.
    fn check(&self, path: &Path, sites: &[&Site]) -> Result<(), CliError> {
        for (probe, filter) in [&self.start, &self.end].into_iter().zip(&self.filters) {
            let Some((flag, filter)) = filter else {
                continue;
            };
            let mine: Vec<&Site> = sites
                .iter()
                .copied()
                .filter(|s| s.probe() == *probe)
                .collect();
            filters::check(flag, Some(filter), path, &mine)?;
        }
        Ok(())
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
            let first = |name: &str| mine.iter().copied().find(|s| s.probe() == name);
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
            self.agg = Some(self.aggregation(key, first(&self.start), sigs)?);
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
    let (start, end) = match filters::prepared(args.filter) {
        Some(f) => (Some(("--if", f.clone())), Some(("--if", f))),
        None => (
            filters::prepared(args.if_start).map(|f| ("--if-start", f)),
            filters::prepared(args.if_end).map(|f| ("--if-end", f)),
        ),
    };
    let mut lat = LatencyAgg::new(&args.start, &args.end, key, args.sites.attach.into())
        .by(args.by.clone())
        .filters(start, end);
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
    // Each value's, then the total (which holds them all), then detach.
    let per_value = match lat.by {
        Some(_) => Some(PerValue::read(agg)?),
        None => None,
    };
    let h = lat.histogram()?;
    lat.agg = None;
    crate::output::detached();
    let mut out = std::io::BufWriter::new(crate::output::Stdout::new());
    if let (Some(values), Some(by)) = (per_value, &lat.by) {
        let shown = values.split(&h, args.top, args.sort);
        let head = Head {
            start: &lat.start,
            end: &lat.end,
            key: &lat.key.words(),
            by,
        };
        match args.json {
            true => latency_by::write_json(&mut out, &head, &shown)?,
            false => latency_by::write_text(&mut out, &head, &shown)?,
        }
    }
    if args.json {
        let mut v = json!({
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
        if let Some(by) = &lat.by {
            v["by"] = by.as_str().into();
        }
        writeln!(out, "{v}").map_err(CliError::Output)?;
    } else {
        match &lat.by {
            // The values above; then all the pairs in one line.
            Some(_) => write!(out, "\nall: ").map_err(CliError::Output)?,
            None => {
                writeln!(
                    out,
                    "{} -> {} by {}, nanoseconds:",
                    escape_name(&lat.start),
                    escape_name(&lat.end),
                    escape_name(&lat.key.words())
                )
                .map_err(CliError::Output)?;
                write_histogram(&mut out, &h)?;
                writeln!(out).map_err(CliError::Output)?;
            }
        }
        writeln!(
            out,
            "count {}  p50 {}  p90 {}  p99 {}  max {}  mean {}",
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

/// A histogram of one argument of the sites of one probe glob.
struct HistAgg {
    glob: String,
    arg: String,
    point: AttachPoint,
    /// `--if`.
    filter: Option<Filter>,
    agg: Option<Aggregation>,
    signed: bool,
}

impl Aggregates for HistAgg {
    fn globs(&self) -> Vec<String> {
        vec![self.glob.clone()]
    }

    fn check(&self, path: &Path, sites: &[&Site]) -> Result<(), CliError> {
        filters::check("--if", self.filter.as_ref(), path, sites)
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
            let mut agg = Aggregation::histogram_of(i, self.point)?;
            if let Some(f) = &self.filter {
                agg = agg.filter(f.clone());
            }
            self.agg = Some(agg);
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
        filter: filters::prepared(args.filter),
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
