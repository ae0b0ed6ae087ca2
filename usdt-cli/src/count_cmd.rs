//! `usdt count`: hits per probe, printed at the end (and every interval),
//! for a command it starts, a running process, or every process of a file.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use usdt_trace::{escape_name, process_alive, Counter, Picked, Session, Target};

use crate::args::CountArgs;
use crate::count_engine::{self, ENGINE_ENV};
use crate::error::CliError;
use crate::{
    catch_signals, finish_command, interrupted, open_session, print_notices, raise_fd_limit,
    say_attached, select, session_name, warn_next, write_error, Opts,
};

pub(crate) fn count(args: CountArgs) -> Result<i32, CliError> {
    catch_signals();
    let opts = Opts::from(args);
    raise_fd_limit();
    // clap lets exactly one of -p, --all and COMMAND through.
    let mut session = open_session(&opts.place, &opts.operands, opts.force_sites)?;
    let what = session_name(&session);
    let matched = select(&session, &opts.operands, &what)?;
    warn_next(opts.attach, session.objects(), &opts.operands);
    let engine = count_engine::chosen(opts.engine, ENGINE_ENV)?;
    let command = session.exec_path().is_some();
    if command {
        session.spawn()?;
    }
    let picked = count_engine::for_counting(engine, session.target());
    // A command not started is killed when the session is dropped.
    let Some(counter) = attach(&picked, &session, &opts)? else {
        return Ok(interrupted().map_or(130, |sig| 128 + sig));
    };
    let target = session.target();
    let mut counting = Counting {
        parts: vec![counter],
        picked,
        point: opts.attach,
        session,
    };
    if command {
        return count_command(counting, &opts);
    }
    // Stopped at exec from now on (and what the process did while
    // attaching is caught up on) before saying it counts.
    counting.poll();
    // Only now is every site counting (the kernel raises semaphores a little
    // earlier, while it registers the uprobes).
    match target {
        Target::Pid(pid) => {
            eprintln!("usdt: counting {matched} sites of process {pid}; Ctrl-C prints the counts")
        }
        Target::AllProcesses => eprintln!(
            "usdt: counting {matched} sites in every process of {what}; Ctrl-C prints the counts"
        ),
    }
    // A duration past what the clock can count is no end at all.
    let end = opts.duration.and_then(|d| Instant::now().checked_add(d));
    watch(&mut counting, opts.interval, |_| {
        let alive = match target {
            Target::Pid(pid) => process_alive(pid),
            Target::AllProcesses => true,
        };
        Ok(alive && end.is_none_or(|end| Instant::now() < end))
    })?;
    Ok(interrupted().map_or(0, |sig| 128 + sig))
}

/// Runs the paused command with the uprobes in place; returns its exit
/// code.
fn count_command(mut counting: Counting, opts: &Opts) -> Result<i32, CliError> {
    counting.session.start()?;
    let mut status = None;
    let watched = watch(&mut counting, opts.interval, |session| {
        if let Some(child) = session.child() {
            status = child.try_wait()?;
        }
        Ok(status.is_none())
    });
    // Detach before waiting for the command.
    counting.parts.clear();
    match counting.session.child() {
        Some(child) => finish_command(child, status, watched),
        None => watched.map(|()| 0),
    }
}

/// Attaches to the sites that match the globs with the engine `picked`:
/// `None` when a signal stopped it (what was attached is detached again).
fn attach(picked: &Picked, session: &Session, opts: &Opts) -> Result<Option<Counter>, CliError> {
    let files = session.matched();
    match Counter::attach(picked, &files, opts.attach, session.target(), &|| {
        interrupted().is_some()
    }) {
        // Ctrl-C reaches the paused command too: it is gone because of the
        // signal, not a failure of ours.
        Err(e) if e.no_process().is_some() && interrupted().is_some() => Ok(None),
        other => Ok(other?),
    }
}

/// The counters of one `count` run: those attached at the start, and one
/// more for each object with matching probes that the process maps later
/// (a library it loads with `dlopen`), found by the session.
struct Counting {
    parts: Vec<Counter>,
    picked: Picked,
    point: usdt_trace::AttachPoint,
    session: Session,
}

impl Counting {
    /// Attaches to the objects with matching probes that the process has
    /// mapped since the last look (a library, or a program it executed)
    /// or, for every process of a file, a new file at its path; one line
    /// each. A process stopped at an exec goes on after.
    fn poll(&mut self) {
        let found = self.session.new_objects();
        print_notices(&mut self.session);
        for object in found {
            let files = [(object.open_path.clone(), object.sites.iter().collect())];
            let attached = match Counter::attach(
                &self.picked,
                &files,
                self.point,
                self.session.target(),
                &|| interrupted().is_some(),
            ) {
                Ok(Some(counter)) => {
                    self.parts.push(counter);
                    Ok(())
                }
                Ok(None) => break,
                Err(e) => Err(e.to_string()),
            };
            say_attached(&object, "counting its", attached);
        }
        self.session.resume();
    }

    /// Hits per probe over every part.
    fn probe_counts(&self) -> Result<BTreeMap<String, u64>, CliError> {
        let mut counts = BTreeMap::new();
        for part in &self.parts {
            for (probe, n) in part.probe_counts()? {
                *counts.entry(probe).or_insert(0) += n;
            }
        }
        Ok(counts)
    }
}

/// Prints counts every `interval` and once more when `running` says the
/// target is gone or on a signal; meanwhile attaches to objects the process
/// maps later.
fn watch(
    counter: &mut Counting,
    interval: Option<Duration>,
    mut running: impl FnMut(&mut Session) -> Result<bool, CliError>,
) -> Result<(), CliError> {
    let mut next = interval.map(|i| Instant::now() + i);
    while interrupted().is_none() && running(&mut counter.session)? {
        counter.poll();
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(at), Some(i)) = (next, interval) {
            if Instant::now() >= at {
                print_counts(counter.probe_counts()?, true)?;
                next = Some(at + i);
            }
        }
    }
    // Read, detach, then print.
    let counts = counter.probe_counts()?;
    counter.parts.clear();
    crate::output::detached();
    print_counts(counts, false)
}

/// `provider:name count` per probe, names escaped; `blank`: an empty line
/// after them.
fn print_counts(probe_counts: BTreeMap<String, u64>, blank: bool) -> Result<(), CliError> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (probe, n) in probe_counts {
        *counts.entry(escape_name(&probe).into_owned()).or_insert(0) += n;
    }
    let mut out = std::io::BufWriter::new(crate::output::Stdout::new());
    for (probe, n) in counts {
        writeln!(out, "{probe} {n}").map_err(write_error)?;
    }
    if blank {
        writeln!(out).map_err(write_error)?;
    }
    out.flush().map_err(write_error)
}
