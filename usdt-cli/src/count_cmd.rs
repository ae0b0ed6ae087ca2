//! `usdt count`: hits per probe, printed at the end (and every interval),
//! for a command it starts, a running process, or every process of a file.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use usdt_trace::{
    escape_name, AttachPoint, Attacher, Counter, Error, NewObject, Notice, Picked, Run, Session,
    Target, TICK,
};

use crate::args::CountArgs;
use crate::count_engine::{self, ENGINE_ENV};
use crate::error::CliError;
use crate::output::{self, catch_signals};
use crate::target::{
    exit_code, open_session, print_notice, raise_fd_limit, running_where, say_attached,
    select_target, session_name, warn_next,
};

pub(crate) fn count(args: CountArgs) -> Result<i32, CliError> {
    catch_signals();
    raise_fd_limit();
    let point: AttachPoint = args.sites.attach.into();
    // clap lets exactly one of -p, --all and COMMAND through.
    let session = open_session(&args.target.place(), &args.globs, args.sites.force_sites)?;
    let matched = select_target(&session, &args.globs, &session_name(&session))?;
    warn_next(point, session.objects(), &args.globs);
    let engine = count_engine::chosen(args.engine, ENGINE_ENV)?;
    let picked = count_engine::for_counting(engine, session.target());
    let mut counting = Counting {
        parts: vec![],
        picked,
        point,
        matched,
        interval: args.interval,
        next: None,
        started: false,
    };
    let mut run = Run::new(session).duration(args.duration);
    let ended = run
        .run(&mut counting)
        .and_then(|ended| counting.finish().map(|()| ended));
    // Detach before waiting for a command.
    counting.parts.clear();
    exit_code(&mut run, ended, &args.globs)
}

/// The counters of one `count` run: those attached at the start, and one
/// more for each object with matching probes that the process maps later
/// (a library it loads with `dlopen`, a program it executes), found by
/// the session.
struct Counting {
    parts: Vec<Counter>,
    picked: Picked,
    point: AttachPoint,
    /// How many sites match, for the first line.
    matched: usize,
    /// `--interval`, and when the counts are printed next.
    interval: Option<std::time::Duration>,
    next: Option<Instant>,
    /// Whether the target ran with the counters attached.
    started: bool,
}

impl Counting {
    /// Counts the sites the globs match in `files`, for `target`.
    fn attach_files(
        &mut self,
        files: &[(std::path::PathBuf, Vec<&usdt_trace::Site>)],
        target: Target,
        session: &Session,
    ) -> Result<(), Error> {
        if files.iter().all(|(_, sites)| sites.is_empty()) {
            // A launcher's: its probes come with the programs it executes.
            return Ok(());
        }
        let cancelled = || session.cancelled();
        let counter = Counter::attach(&self.picked, files, self.point, target, &cancelled)?;
        self.parts.extend(counter);
        Ok(())
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

    /// Reads the counts, detaches, then prints them: once the target ran.
    fn finish(&mut self) -> Result<(), CliError> {
        if !self.started {
            return Ok(());
        }
        let counts = self.probe_counts()?;
        self.parts.clear();
        output::detached();
        print_counts(counts, false)
    }
}

impl Attacher for Counting {
    type Error = CliError;

    fn library_error(e: &CliError) -> Option<&Error> {
        e.library()
    }

    fn attach(&mut self, session: &mut Session) -> Result<(), CliError> {
        Ok(self.attach_files(&session.matched(), session.target(), session)?)
    }

    fn attach_object(&mut self, object: &NewObject, session: &mut Session) -> Result<(), CliError> {
        let files = [(object.open_path.clone(), object.sites.iter().collect())];
        Ok(self.attach_files(&files, object.target, session)?)
    }

    fn attached(
        &mut self,
        object: &NewObject,
        result: Result<(), CliError>,
    ) -> Result<(), CliError> {
        say_attached(object, "counting its", result);
        Ok(())
    }

    fn notice(&mut self, notice: Notice) {
        print_notice(notice);
    }

    /// Only now is every site counting (the kernel raises semaphores a
    /// little earlier, while it registers the uprobes).
    fn ready(&mut self, session: &Session) {
        self.started = true;
        if let Some(at) = running_where(session, false) {
            let n = self.matched;
            eprintln!("usdt: counting {n} sites {at}; Ctrl-C prints the counts");
        }
    }

    /// Prints the counts every `--interval`.
    fn tick(&mut self) -> Result<bool, CliError> {
        std::thread::sleep(TICK);
        let Some(interval) = self.interval else {
            return Ok(true);
        };
        let next = *self.next.get_or_insert_with(|| Instant::now() + interval);
        if Instant::now() >= next {
            print_counts(self.probe_counts()?, true)?;
            self.next = Some(next + interval);
        }
        Ok(true)
    }
}

/// `provider:name count` per probe, names escaped; `blank`: an empty line
/// after them.
fn print_counts(probe_counts: BTreeMap<String, u64>, blank: bool) -> Result<(), CliError> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (probe, n) in probe_counts {
        *counts.entry(escape_name(&probe).into_owned()).or_insert(0) += n;
    }
    let mut out = std::io::BufWriter::new(output::Stdout::new());
    for (probe, n) in counts {
        writeln!(out, "{probe} {n}").map_err(CliError::Output)?;
    }
    if blank {
        writeln!(out).map_err(CliError::Output)?;
    }
    out.flush().map_err(CliError::Output)
}
