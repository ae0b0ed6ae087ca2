//! What `latency`, `hist`, `count --by` and `serve` share: the target (a
//! running process, every process of a binary, or a command started with
//! the uprobes in place), attaching in-kernel aggregations to the files it
//! maps (and to libraries it maps later), and waiting for the end.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use usdt_trace::{escape, process_alive, Error, PausedCommand, Signatures, Site, Target};

use crate::{
    absolute, command_objects, finish_command, interrupted, not_attached, process_objects,
    read_probes_of, select, MapsWatch, Objects,
};

/// Where the hits come from.
#[derive(Clone, Debug)]
pub(crate) enum Where {
    /// A running process, every thread.
    Process(u32),
    /// Every process that runs (or maps) a file, now or later.
    All(PathBuf),
    /// A command started with the uprobes in place.
    Command(Vec<OsString>),
}

impl Where {
    /// From the options clap lets through: exactly one is given.
    pub(crate) fn of(pid: Option<u32>, all: Option<PathBuf>, command: Vec<OsString>) -> Where {
        match (pid, all) {
            (Some(pid), _) => Where::Process(pid),
            (None, Some(all)) => Where::All(all),
            (None, None) => Where::Command(command),
        }
    }
}

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
    ) -> Result<(), Error>;
    /// Called about every 20 ms while waiting (serve answers requests).
    fn tick(&mut self, _wait: Duration) -> Result<(), Error> {
        std::thread::sleep(Duration::from_millis(20));
        Ok(())
    }
}

/// The matching sites of each object: those with any.
fn matching<'a>(objects: &'a Objects, globs: &[String]) -> Vec<(&'a Path, Vec<&'a Site>)> {
    objects
        .iter()
        .map(|(path, sites)| {
            let matched = sites.iter().filter(|s| crate::matches(globs, s)).collect();
            (path.as_path(), matched)
        })
        .filter(|(_, s): &(&Path, Vec<&Site>)| !s.is_empty())
        .collect()
}

/// Attaches every matching file.
fn attach_all(agg: &mut dyn Aggregates, objects: &Objects, target: Target) -> Result<(), Error> {
    let globs = agg.globs();
    for (path, sites) in matching(objects, &globs) {
        let sigs = crate::typed::signatures([path]);
        agg.attach(path, &sites, &sigs, target)?;
    }
    Ok(())
}

/// Attaches `agg` to `target`'s files and waits for the end of the process
/// or command, of `duration`, or a signal; returns the exit code (the
/// command's, or 128 + the signal). `started` is called once every site is
/// attached, with the sites' count and the target's name.
pub(crate) fn run(
    place: &Where,
    agg: &mut dyn Aggregates,
    duration: Option<Duration>,
    started: &dyn Fn(usize, &str),
) -> Result<i32, Error> {
    crate::catch_signals();
    crate::raise_fd_limit();
    let globs = agg.globs();
    let end = duration.map(|d| Instant::now() + d);
    let not_over = move || end.is_none_or(|end| Instant::now() < end);
    match place {
        Where::Process(pid) => {
            let objects = process_objects(*pid)?;
            let n = select(&objects, &globs, &format!("process {pid}"))?;
            attach_all(agg, &objects, Target::Pid(*pid))?;
            started(n, &format!("process {pid}"));
            let mut maps = MapsWatch::new(*pid, &objects);
            while interrupted().is_none() && process_alive(*pid) && not_over() {
                for (open_path, mapped, sites) in maps.new_objects(&globs) {
                    let sigs = crate::typed::signatures([open_path.as_path()]);
                    let sites: Vec<&Site> = sites.iter().collect();
                    match agg.attach(&open_path, &sites, &sigs, Target::Pid(*pid)) {
                        Ok(()) => eprintln!(
                            "usdt: {} was mapped after the start: attached its {} sites",
                            escape(&mapped),
                            sites.len()
                        ),
                        Err(e) => not_attached(Path::new(&mapped), &e),
                    }
                }
                agg.tick(Duration::from_millis(20))?;
            }
            Ok(interrupted().map_or(0, |sig| 128 + sig))
        }
        Where::All(binary) => {
            let path = absolute(binary);
            let objects: Objects = vec![(path.clone(), read_probes_of(&path)?.sites)];
            let name = format!("every process of {}", escape(&path.to_string_lossy()));
            let n = select(&objects, &globs, &name)?;
            attach_all(agg, &objects, Target::AllProcesses)?;
            started(n, &name);
            while interrupted().is_none() && not_over() {
                agg.tick(Duration::from_millis(20))?;
            }
            Ok(interrupted().map_or(0, |sig| 128 + sig))
        }
        Where::Command(command) => {
            let objects = command_objects(&command[0])?;
            let n = select(&objects.objects, &globs, &objects.name())?;
            let mut child = objects.spawn(command)?;
            let pid = child.pid();
            if let Err(e) = attach_all(agg, &objects.objects, Target::Pid(pid)) {
                child.kill();
                return match e {
                    Error::NoProcess(_) if interrupted().is_some() => {
                        Ok(interrupted().map_or(130, |sig| 128 + sig))
                    }
                    e => Err(e),
                };
            }
            if interrupted().is_some() {
                child.kill();
                return Ok(interrupted().map_or(130, |sig| 128 + sig));
            }
            started(n, &objects.name());
            child.start()?;
            wait_command(&mut child, agg, &objects.objects, &globs, &not_over)
        }
    }
}

/// Waits for a started command (attaching libraries it maps later).
fn wait_command(
    child: &mut PausedCommand,
    agg: &mut dyn Aggregates,
    objects: &Objects,
    globs: &[String],
    not_over: &dyn Fn() -> bool,
) -> Result<i32, Error> {
    let pid = child.pid();
    let mut maps = MapsWatch::new(pid, objects);
    let mut status = None;
    let mut watched = Ok(());
    while interrupted().is_none() && not_over() {
        match child.try_wait() {
            Ok(Some(s)) => {
                status = Some(s);
                break;
            }
            Ok(None) => {}
            Err(e) => {
                watched = Err(e);
                break;
            }
        }
        for (open_path, mapped, sites) in maps.new_objects(globs) {
            let sigs = crate::typed::signatures([open_path.as_path()]);
            let sites: Vec<&Site> = sites.iter().collect();
            if let Err(e) = agg.attach(&open_path, &sites, &sigs, Target::Pid(pid)) {
                not_attached(Path::new(&mapped), &e);
            }
        }
        if let Err(e) = agg.tick(Duration::from_millis(20)) {
            watched = Err(e);
            break;
        }
    }
    if status.is_none() && interrupted().is_none() && watched.is_ok() {
        // --duration is over: the command runs on; its aggregation ends.
        return Ok(0);
    }
    finish_command(child, status, watched)
}

/// The note operand of probe `site` that `arg` names: `argN`, or a
/// parameter of the probe's signature record; with the parameter's kind
/// when recorded.
pub(crate) fn operand_of(
    arg: &str,
    site: &Site,
    sigs: &Signatures,
) -> Result<(usize, Option<usdt_trace::Kind>), Error> {
    let sig = sigs.of_site(site);
    if let Some(sig) = sig {
        if let Some(i) = sig.params.iter().position(|p| p.name == arg) {
            let operand = sig.operand_indices()[i];
            return Ok((operand, Some(sig.params[i].kind)));
        }
    }
    if let Some(n) = arg
        .strip_prefix("arg")
        .and_then(|n| n.parse::<usize>().ok())
    {
        if n < site.args.len() {
            let kind = sig.and_then(|sig| {
                let at = sig.operand_indices();
                at.iter().position(|i| *i == n).map(|p| sig.params[p].kind)
            });
            return Ok((n, kind));
        }
    }
    let names = match sig {
        Some(sig) => {
            let names: Vec<&str> = sig.params.iter().map(|p| p.name.as_str()).collect();
            format!(
                "{} or arg0 to arg{}",
                names.join(", "),
                site.args.len().saturating_sub(1)
            )
        }
        None if site.args.is_empty() => "nothing: it has no arguments".into(),
        None => format!("arg0 to arg{}", site.args.len() - 1),
    };
    Err(Error::Invalid(format!(
        "{} has no argument {arg}; it takes {names}",
        usdt_trace::escape_name(&site.probe())
    )))
}

/// The operand `arg` names in every one of `sites` (the first site's, with
/// its kind), or an error naming two probes where it differs.
pub(crate) fn operand_of_all(
    arg: &str,
    sites: &[&Site],
    sigs: &Signatures,
) -> Result<(usize, Option<usdt_trace::Kind>), Error> {
    let Some(first) = sites.first() else {
        return Err(Error::Invalid(format!("no site to read {arg} at")));
    };
    let found = operand_of(arg, first, sigs)?;
    for site in &sites[1..] {
        let (i, _) = operand_of(arg, site, sigs)?;
        if i != found.0 {
            return Err(Error::Invalid(format!(
                "{arg} is arg{} of {} but arg{i} of {}: aggregate one probe at a time",
                found.0,
                usdt_trace::escape_name(&first.probe()),
                usdt_trace::escape_name(&site.probe())
            )));
        }
    }
    Ok(found)
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
