//! What `latency`, `hist`, `count --by` and `serve` share: the target (a
//! running process, every process of a binary, or a command started with
//! the uprobes in place), attaching in-kernel aggregations to the files it
//! maps (and to libraries it maps later), and waiting for the end.

use std::path::Path;
use std::time::Duration;

use usdt_trace::{
    escape_name, Attacher, Error, Kind, NewObject, Notice, Run, Session, Signatures, Site, Target,
    TICK,
};

use crate::args::Place;
use crate::error::{ArgUse, CliError};
use crate::output::catch_signals;
use crate::target::{
    exit_code, open_session, print_notice, raise_fd_limit, say_attached, select_target,
    session_name,
};
use crate::typed::signatures;

/// Aggregations to attach to the sites of a target's files.
pub(crate) trait Aggregates {
    /// The probe globs whose sites are attached.
    fn globs(&self) -> Vec<String>;
    /// Attaches the matching `sites` of the file at `path` (the signature
    /// records of the file are in `sigs`).
    fn attach(
        &mut self,
        path: &Path,
        sites: &[&Site],
        sigs: &Signatures,
        target: Target,
    ) -> Result<(), CliError>;
    /// Whether the filters fit the matching `sites` of the file at `path`:
    /// checked for every file before anything is attached.
    fn check(&self, _path: &Path, _sites: &[&Site]) -> Result<(), CliError> {
        Ok(())
    }
    /// Called about every 20 ms while waiting (serve answers requests).
    fn tick(&mut self, _wait: Duration) -> Result<(), CliError> {
        std::thread::sleep(TICK);
        Ok(())
    }
}

/// Attaches `agg` to the target's files and waits for the end of the
/// process or command, of `duration`, or a signal; returns the exit code
/// (the command's, or 128 + the signal). `started` is called once every
/// site is attached, with the sites' count and the target's name.
pub(crate) fn run(
    place: &Place,
    force_sites: bool,
    agg: &mut dyn Aggregates,
    duration: Option<Duration>,
    started: &dyn Fn(usize, &str),
) -> Result<i32, CliError> {
    catch_signals();
    raise_fd_limit();
    let globs = agg.globs();
    let session = open_session(place, &globs, force_sites)?;
    let name = match place {
        Place::All(_) => format!("every process of {}", session_name(&session)),
        _ => session_name(&session),
    };
    let n = select_target(&session, &globs, &name)?;
    for (path, sites) in session.matched() {
        agg.check(&path, &sites)?;
    }
    let mut run = Run::new(session).duration(duration);
    let ended = run.run(&mut Aggregated {
        agg,
        n,
        name,
        started,
    });
    exit_code(&mut run, ended, &globs)
}

/// [`Aggregates`] as the run attaches them, with the line that says they
/// are.
struct Aggregated<'a> {
    agg: &'a mut dyn Aggregates,
    /// How many sites match, and the target's name, for `started`.
    n: usize,
    name: String,
    started: &'a dyn Fn(usize, &str),
}

impl Attacher for Aggregated<'_> {
    type Error = CliError;

    fn library_error(e: &CliError) -> Option<&Error> {
        e.library()
    }

    /// Every file of the session with matching sites.
    fn attach(&mut self, session: &mut Session) -> Result<(), CliError> {
        let target = session.target();
        for (path, sites) in session.matched() {
            if sites.is_empty() {
                continue;
            }
            let sigs = signatures([path.as_path()]);
            self.agg.attach(&path, &sites, &sigs, target)?;
        }
        Ok(())
    }

    fn attach_object(&mut self, object: &NewObject, _: &mut Session) -> Result<(), CliError> {
        let sigs = signatures([object.open_path.as_path()]);
        let sites: Vec<&Site> = object.sites.iter().collect();
        self.agg
            .attach(&object.open_path, &sites, &sigs, object.target)
    }

    fn attached(
        &mut self,
        object: &NewObject,
        result: Result<(), CliError>,
    ) -> Result<(), CliError> {
        say_attached(object, "attached its", result);
        Ok(())
    }

    fn notice(&mut self, notice: Notice) {
        print_notice(notice);
    }

    /// Not for a launcher with no site yet: the line that says the
    /// program it executes is attached comes first.
    fn ready(&mut self, _: &Session) {
        if self.n > 0 {
            (self.started)(self.n, &self.name);
        }
    }

    fn tick(&mut self) -> Result<bool, CliError> {
        self.agg.tick(TICK)?;
        Ok(true)
    }
}

/// The note operand of probe `site` that `arg` names: `argN`, or a
/// parameter of the probe's signature record; with the parameter's kind
/// when recorded.
pub(crate) fn operand_of(
    arg: &str,
    site: &Site,
    sigs: &Signatures,
) -> Result<(usize, Option<Kind>), CliError> {
    match sigs.arg_named(site, arg) {
        Some(named) => Ok((named.operand, named.kind())),
        None => Err(CliError::NoSuchArg {
            probe: escape_name(&site.probe()).into_owned(),
            arg: arg.into(),
            takes: sigs.arg_names(site),
        }),
    }
}

/// The operand `arg` names in every one of `sites` (the first site's, with
/// its kind), or an error naming two probes where it differs.
pub(crate) fn operand_of_all(
    arg: &str,
    sites: &[&Site],
    sigs: &Signatures,
) -> Result<(usize, Option<Kind>), CliError> {
    let Some(first) = sites.first() else {
        return Err(CliError::NoSite { arg: arg.into() });
    };
    let found = operand_of(arg, first, sigs)?;
    for site in &sites[1..] {
        let (i, _) = operand_of(arg, site, sigs)?;
        if i != found.0 {
            return Err(CliError::ArgDiffers {
                arg: arg.into(),
                first: (found.0, escape_name(&first.probe()).into_owned()),
                other: (i, escape_name(&site.probe()).into_owned()),
            });
        }
    }
    Ok(found)
}

/// The operand `arg` names in every one of `sites` ([`operand_of_all`]),
/// refused when its recorded kind cannot serve `by`: `count --by` counts
/// integers and strings, `latency --key` and `hist` take integers.
pub(crate) fn operand_for(
    arg: &str,
    sites: &[&Site],
    sigs: &Signatures,
    by: ArgUse,
) -> Result<(usize, Option<Kind>), CliError> {
    let refused: &[Kind] = match by {
        ArgUse::CountBy | ArgUse::LatencyBy => &[Kind::Bytes, Kind::F32, Kind::F64],
        ArgUse::Key | ArgUse::Hist => &[Kind::Str, Kind::CStr, Kind::Bytes, Kind::F32, Kind::F64],
    };
    let (i, kind) = operand_of_all(arg, sites, sigs)?;
    match (kind, sites.first()) {
        (Some(k), Some(first)) if refused.contains(&k) => Err(CliError::ArgKind {
            arg: escape_name(arg).into_owned(),
            probe: escape_name(&first.probe()).into_owned(),
            by,
        }),
        _ => Ok((i, kind)),
    }
}

/// `1.05ms`: a duration in nanoseconds with three digits.
pub(crate) fn human_ns(ns: u64) -> String {
    let ns = ns as f64;
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "us")
    } else {
        (ns, "ns")
    };
    if v >= 100.0 || unit == "ns" {
        format!("{v:.0}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_ns(999), "999ns");
        assert_eq!(human_ns(1_050_000), "1.05ms");
        assert_eq!(human_ns(8_390_000), "8.39ms");
        assert_eq!(human_ns(12_345), "12.3us");
        assert_eq!(human_ns(250_000_000), "250ms");
    }
}
