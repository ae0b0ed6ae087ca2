//! The target of `count`, `trace`, `latency`, `hist`, `count --by` and
//! `serve`, around the library's run ([`usdt_trace::Run`]): opening its
//! session, selecting its probes, the lines that say what happens to it,
//! and the exit code it ends with. Also the probes of one file, as `list`
//! and `bpftrace` read them.

use std::path::{Path, PathBuf};

use usdt_trace::{
    escape, escape_name, fork_safe, fork_test, globs_match, process_threads, read_file_fork_guard,
    read_file_probes, AttachPoint, Cause, ElfProbes, Ended, Error, ExitStatus, KernelFeatures,
    Launcher, NewObject, Notice, Objects, Run, Session, Site, Target,
};

use crate::args::Place;
use crate::closest::closest;
use crate::error::CliError;
use crate::output::{interrupted, BROKEN_PIPE};

/// Opens the session for `-p PID`, `--all BINARY` or the command, with
/// the probe `globs`, cancelled by a signal, and says what it skipped: the
/// one place where the commands' target becomes the library's.
pub(crate) fn open_session(
    place: &Place,
    globs: &[String],
    force_sites: bool,
) -> Result<Session, CliError> {
    // Whatever engine this run uses: a killed `usdt`'s events go now.
    usdt_trace::remove_stale_events();
    let session = match place {
        Place::Process(pid) => Session::process(*pid),
        Place::All(binary) => Session::binary(binary),
        Place::Command(command) => Session::command(command),
    }
    .map_err(file_error)?;
    // The run polls `new_objects`, which lets the process go on from its
    // stops.
    let mut session = session
        .globs(globs)
        .force_sites(force_sites)
        .cancel_when(|| interrupted().is_some())
        .follow_exec();
    for notice in session.take_notices() {
        print_notice(notice);
    }
    Ok(session)
}

/// Many threads times sites times CPUs is many descriptors: allow as many
/// as the hard limit does.
pub(crate) fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The exit code of a run that ended so (`ended`, with what the command
/// did after it: reading and printing): the command's status; 128 + the
/// signal that stopped us (passed on to a command still running); the
/// pipe status when stdout was closed (a command then runs to its end,
/// untraced); for a command the caller had enough of, its status once it
/// ran to its end, untraced. A launcher that ran to its end without
/// executing a program with a probe the `globs` match: an error.
pub(crate) fn exit_code(
    run: &mut Run,
    ended: Result<Ended, CliError>,
    globs: &[String],
) -> Result<i32, CliError> {
    let command = run.session().exec_path().is_some();
    match ended {
        Ok(Ended::Exited(status)) => {
            found_in_launched(run.session(), globs)?;
            Ok(status.shell_code())
        }
        Ok(Ended::Enough) if interrupted().is_none() => {
            Ok(run.wait()?.map_or(0, ExitStatus::shell_code))
        }
        Ok(_) => Ok(passed_on(run)),
        Err(_) if command && interrupted().is_some() => Ok(passed_on(run)),
        Err(e) if e.is_broken_pipe() => {
            let _ = run.wait();
            Ok(BROKEN_PIPE)
        }
        Err(e) => Err(e),
    }
}

/// 128 + the signal that stopped us, passed on to the command; 0 without
/// a signal.
fn passed_on(run: &mut Run) -> i32 {
    match interrupted() {
        Some(sig) => {
            run.pass_on(sig);
            128 + sig
        }
        None => 0,
    }
}

/// `--attach next` where the kernel optimizes the site and a forked child
/// would die (the kernel loses its trampoline and the program carries no
/// fork guard): obeyed, with one line saying so.
pub(crate) fn warn_next(point: AttachPoint, objects: &Objects, globs: &[String]) {
    if point != AttachPoint::Next {
        return;
    }
    let features = KernelFeatures {
        optimized_fork: fork_test().verdict,
        ..KernelFeatures::detect()
    };
    let exposed = |path: &PathBuf, sites: &Vec<Site>| {
        let optimized = sites
            .iter()
            .any(|s| globs_match(globs, &s.probe()) && features.optimizes(s.layout));
        let guarded = || read_file_fork_guard(path).unwrap_or(false);
        optimized && !fork_safe(features.optimized_fork, guarded())
    };
    if objects.iter().any(|(path, sites)| exposed(path, sites)) {
        eprintln!(
            "usdt: warning: --attach next on this kernel: a child the program forks after a hit dies (SIGSEGV) at its own first hit (usdt features says why)"
        );
    }
}

/// The probes of a file, with errors that name it.
pub(crate) fn read_probes_of(path: &Path) -> Result<ElfProbes, CliError> {
    let probes = read_file_probes(path).map_err(file_error)?;
    warn_skipped(path, &probes);
    Ok(probes)
}

/// One line per note skipped because it is malformed as a whole.
pub(crate) fn warn_skipped(path: &Path, probes: &ElfProbes) {
    for skipped in &probes.skipped {
        eprintln!(
            "usdt: {}: {}",
            escape(&path.to_string_lossy()),
            escape(&skipped.to_string())
        );
    }
}

/// One line for a file whose probes cannot be read: never skipped in silence.
fn not_attached(path: &Path, e: &dyn std::fmt::Display) {
    eprintln!(
        "usdt: {}: {}; its probes are not attached",
        escape(&path.to_string_lossy()),
        escape(&e.to_string())
    );
}

/// How many sites match the globs; an error if none (with the closest names)
/// or if there are no probes at all, or if every site that matches was
/// refused.
pub(crate) fn select(session: &Session, globs: &[String], what: &str) -> Result<usize, CliError> {
    let refused = session.refused().filter(|(_, s)| session.wants(s)).count();
    match select_in(session.objects(), globs, what) {
        Err(CliError::NoMatch { .. } | CliError::NoProbes { .. }) if refused > 0 => {
            Err(CliError::AllRefused {
                what: what.into(),
                refused,
            })
        }
        other => other,
    }
}

/// [`select`] for the target of a run: a command without probes of its
/// own (a [`Launcher`]) is not refused, since its probes are those of the
/// programs it executes, found at each exec (0 sites now);
/// [`exit_code`] says at its end if it executed none with a match.
pub(crate) fn select_target(
    session: &Session,
    globs: &[String],
    what: &str,
) -> Result<usize, CliError> {
    match select(session, globs, what) {
        Err(_) if session.launcher().is_some() => Ok(0),
        other => other,
    }
}

/// For a launcher that ran to its end: an error when no program it
/// executed had a probe the globs match (as [`select`] says it of a
/// program that executed nothing else).
fn found_in_launched(session: &Session, globs: &[String]) -> Result<(), CliError> {
    let Some(launcher) = session.launcher() else {
        return Ok(());
    };
    let what = session_name(session);
    match select(session, globs, &what) {
        Ok(_) => Ok(()),
        // A program that executed nothing else: what `select` says.
        Err(e) if launcher == Launcher::Program && !session.ran_another_program() => Err(e),
        Err(e @ CliError::AllRefused { .. }) => Err(e),
        Err(_) => Err(CliError::NoneExecuted {
            what,
            globs: globs.join(" "),
            script: launcher == Launcher::Script,
        }),
    }
}

/// [`select`] among `objects`.
pub(crate) fn select_in(
    objects: &Objects,
    globs: &[String],
    what: &str,
) -> Result<usize, CliError> {
    let sites = || objects.iter().flat_map(|(_, sites)| sites);
    let matched = sites().filter(|s| globs_match(globs, &s.probe())).count();
    if matched > 0 {
        return Ok(matched);
    }
    let mut names: Vec<String> = sites().map(Site::probe).collect();
    if names.is_empty() {
        return Err(CliError::NoProbes { what: what.into() });
    }
    names.sort();
    names.dedup();
    let near = closest(&globs.join(" "), names.iter().map(String::as_str), 3);
    let near: Vec<String> = near.iter().map(|n| escape_name(n).into_owned()).collect();
    let globs = globs.join(" ");
    Err(CliError::NoMatch {
        what: what.into(),
        globs,
        closest: near,
    })
}

/// A file's error, named as `list` names it.
fn file_error(e: Error) -> CliError {
    match e {
        Error::File { path, source } => {
            let name = escape(&path.to_string_lossy()).into_owned();
            match *source {
                Error::NotElf => CliError::NotElf { name },
                e => CliError::Read { name, source: e },
            }
        }
        e => CliError::Trace(e),
    }
}

/// What the session traces, for messages: `process PID`, the command's
/// program or the file.
pub(crate) fn session_name(session: &Session) -> String {
    match (session.exec_path(), session.binary_path(), session.target()) {
        (Some(path), _, _) | (None, Some(path), _) => escape(&path.to_string_lossy()).into_owned(),
        (None, None, Target::Pid(pid)) => format!("process {pid}"),
        (None, None, Target::AllProcesses) => String::new(),
    }
}

/// Where the sites of a run's target are, for the line that says it has
/// started: `of process PID` (with its count of threads when `threads`),
/// `in every process of FILE`; `None` for a command, which says nothing
/// before it runs.
pub(crate) fn running_where(session: &Session, threads: bool) -> Option<String> {
    match (session.exec_path(), session.target()) {
        (Some(_), _) => None,
        (None, Target::Pid(pid)) if threads => {
            let threads = process_threads(pid).map_or(0, |t| t.len());
            Some(format!("of process {pid} ({threads} threads)"))
        }
        (None, Target::Pid(pid)) => Some(format!("of process {pid}")),
        (None, Target::AllProcesses) => {
            Some(format!("in every process of {}", session_name(session)))
        }
    }
}

/// The one line that says an object found after the start is attached
/// (`doing`: "counting its"), or why it is not.
pub(crate) fn say_attached(object: &NewObject, doing: &str, attached: Result<(), CliError>) {
    let shown = escape(&object.mapped);
    let n = object.sites.len();
    if let Err(e) = attached {
        return not_attached(Path::new(&object.mapped), &e);
    }
    match &object.cause {
        Cause::Exec { missed: None } => {
            eprintln!("usdt: the process executed a program that maps {shown}: {doing} {n} sites")
        }
        Cause::Exec { missed: Some(why) } => eprintln!(
            "usdt: the process executed a program that maps {shown}: {doing} {n} sites; \
             its hits before now may be missed ({})",
            escape(why)
        ),
        Cause::Replaced => eprintln!(
            "usdt: a new file is at {shown}: {doing} {n} sites too; processes still running \
             the old file stay traced"
        ),
        _ => eprintln!("usdt: {shown} was mapped after the start: {doing} {n} sites"),
    }
}

/// One line for a file that could not be read, a note skipped or a site
/// refused.
pub(crate) fn print_notice(notice: Notice) {
    match notice {
        Notice::Skipped { path, note } => eprintln!(
            "usdt: {}: {}",
            escape(&path.to_string_lossy()),
            escape(&note.to_string())
        ),
        Notice::Unreadable { path, error } => not_attached(&path, error.without_path()),
        Notice::Refused { path, site, forced } => {
            let what = match forced {
                true => "attached all the same (--force-sites)",
                false => "not attached (--force-sites attaches it)",
            };
            eprintln!(
                "usdt: {}: probe {} at {:#x} refused: {}; {what}",
                escape(&path.to_string_lossy()),
                escape_name(&site.probe()),
                site.location,
                site.check
                    .reason()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
        }
        _ => {}
    }
}
