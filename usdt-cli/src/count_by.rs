//! `usdt count --by ARG PROBE`: hits per value of an argument (integers or
//! strings), counted in a BPF hash map; the most counted values printed.

use std::io::Write;
use std::path::Path;

use usdt_trace::{escape, escape_name, Aggregation, AttachPoint, Kind, Signatures, Site, Target};

use crate::answers::{operand_for, run, Aggregates};
use crate::args::CountArgs;
use crate::error::{ArgUse, CliError};

/// Counts per value of one argument over the sites the globs match.
struct CountBy {
    globs: Vec<String>,
    arg: String,
    /// `--string`: the argument is a C string's address.
    string: bool,
    point: AttachPoint,
    agg: Option<Aggregation>,
}

impl Aggregates for CountBy {
    fn globs(&self) -> Vec<String> {
        self.globs.clone()
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
        let (i, kind) = operand_for(&self.arg, sites, sigs, ArgUse::CountBy)?;
        let strings = self.string || kind.is_some_and(Kind::is_string);
        let signed = first.args.get(i).is_some_and(|a| a.signed);
        if self.agg.is_none() {
            self.agg = Some(Aggregation::count_by(i, strings, signed, self.point)?);
        }
        match &mut self.agg {
            Some(agg) => Ok(agg.attach(path, sites, target)?),
            None => Ok(()),
        }
    }
}

/// `count --by ARG`, `arg` taken out of `args`.
pub(crate) fn count_by(args: CountArgs, arg: String) -> Result<i32, CliError> {
    if args.svg.is_some() {
        return Err(CliError::SvgNeedsStack { by: arg });
    }
    let place = args.target.place();
    let mut c = CountBy {
        globs: args.globs,
        arg,
        string: args.string,
        point: args.sites.attach.into(),
        agg: None,
    };
    let code = run(
        &place,
        args.sites.force_sites,
        &mut c,
        args.duration,
        &|n, name| {
            eprintln!("usdt: counting values at {n} sites of {name}; Ctrl-C prints the counts")
        },
    )?;
    let Some(agg) = &c.agg else {
        return Ok(code);
    };
    let counts = agg.counts()?;
    let h = agg.histogram()?;
    // Read, detach, then print.
    c.agg = None;
    crate::output::detached();
    let mut out = std::io::BufWriter::new(crate::output::Stdout::new());
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    writeln!(
        out,
        "{} by {}: {} hits, {} values",
        escape_name(&c.globs.join(" ")),
        escape_name(&c.arg),
        total,
        counts.len()
    )
    .map_err(CliError::Output)?;
    for (value, n) in counts.iter().take(args.top) {
        writeln!(out, "{n:>10}  {}", escape(&value.to_string())).map_err(CliError::Output)?;
    }
    if counts.len() > args.top {
        let rest: u64 = counts[args.top..].iter().map(|(_, n)| n).sum();
        writeln!(
            out,
            "{rest:>10}  ({} other values)",
            counts.len() - args.top
        )
        .map_err(CliError::Output)?;
    }
    if h.lost > 0 || h.unreadable > 0 {
        writeln!(
            out,
            "lost to a full map {}  unreadable {}",
            h.lost, h.unreadable
        )
        .map_err(CliError::Output)?;
    }
    out.flush().map_err(CliError::Output)?;
    Ok(code)
}
