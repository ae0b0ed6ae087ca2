//! `usdt`: list the USDT probes of a binary or process, count their hits,
//! trace them with their arguments, write a bpftrace program that prints
//! them, and say what the kernel can do for them.

// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `eprintln!` that never panics: a closed stderr loses the line, not the
/// run (std's panics when the write fails). Defined before the modules,
/// it stands in for std's in all of them.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod answers;
mod args;
mod closest;
mod count_by;
mod count_cmd;
mod count_engine;
mod error;
mod latency;
mod output;
mod pictures;
mod serve;
mod stacks;
mod trace_cmd;
mod typed;

use args::{Cli, Command, CountArgs, ListArgs, Place, TraceArgs};
use closest::closest;
use count_engine::Engine;
use error::CliError;
pub(crate) use output::{catch_signals, interrupted};

use usdt_trace::{
    escape, escape_name, fork_safe, fork_test, glob_match, read_file_fork_guard, read_file_probes,
    read_process, read_semaphore, AttachPoint, Cause, ElfProbes, Error, ExitStatus, KernelFeatures,
    NewObject, Notice, Objects, PausedCommand, Session, Site, Target,
};

/// The exit status after stdout was closed, as if SIGPIPE had ended us.
const BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

fn main() -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err((text, to_stderr, code)) => {
            let _ = if to_stderr {
                std::io::stderr().write_all(text.as_bytes())
            } else {
                std::io::stdout().write_all(text.as_bytes())
            };
            return ExitCode::from(code as u8);
        }
    };
    let code = match run(cli.command) {
        Ok(code) => code,
        // Output abandoned after a signal: the signal's status.
        Err(CliError::Output(e)) if output::abandoned(&e) => {
            128 + interrupted().unwrap_or(libc::SIGINT)
        }
        Err(e) if e.is_broken_pipe() => BROKEN_PIPE,
        Err(e) => {
            // Names from binaries may be in the message: no raw control
            // characters to the terminal.
            let text = e.to_string();
            let lines: Vec<String> = text.split('\n').map(|l| escape(l).into_owned()).collect();
            let _ = writeln!(std::io::stderr(), "usdt: {}", lines.join("\n"));
            1
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// A failed write to stdout, as an error (`BrokenPipe` ends quietly).
fn write_error(source: std::io::Error) -> CliError {
    CliError::Output(source)
}

/// `println!` that returns an error instead of panicking when stdout is
/// closed, and gives up after a signal (`output::Stdout`).
macro_rules! out {
    ($($arg:tt)*) => {
        crate::output::write_stdout(format!("{}\n", format_args!($($arg)*)).as_bytes())
            .map_err(crate::write_error)?
    };
}

// After `out!`, which it prints with.
mod features;

fn run(command: Command) -> Result<i32, CliError> {
    match command {
        Command::Features(args) => features::features(args),
        Command::List(args) => list(args),
        Command::Count(mut args) => match args.by.take() {
            Some(by) if by == "stack" => trace_cmd::count_stacks(args),
            Some(by) => count_by::count_by(args, by),
            None => count_cmd::count(args),
        },
        Command::Latency(args) => latency::latency(args),
        Command::Hist(args) => latency::hist(args),
        Command::Serve(args) => serve::serve(args),
        Command::Trace(args) => trace_cmd::trace(args),
        Command::Bpftrace(args) => typed::bpftrace(args),
    }
}

/// What `count` and `trace` do, from their command lines.
struct Opts {
    /// `-p`, `--all` or the command.
    place: Place,
    interval: Option<Duration>,
    attach: AttachPoint,
    /// The probe globs.
    operands: Vec<String>,
    /// `trace --str`: probe glob and argument index.
    strings: Vec<(String, usize)>,
    json: bool,
    /// `trace --raw`: `argN=` integers even for probes with signatures.
    raw: bool,
    limit: Option<u64>,
    no_kernel_fetch: bool,
    /// `count --engine`, `trace --engine`.
    engine: Option<Engine>,
    /// `count --duration`.
    duration: Option<Duration>,
    /// `--force-sites`: attach the sites the check refuses too.
    force_sites: bool,
    /// `trace --stack`, `count --by stack`: each hit's user stack.
    stack: bool,
    /// `count --by stack`: hits counted per stack, printed folded.
    fold: bool,
    /// `count --by stack --svg`: where the flame graph goes.
    svg: Option<PathBuf>,
}

impl From<CountArgs> for Opts {
    fn from(a: CountArgs) -> Opts {
        Opts {
            place: a.target.place(),
            interval: a.interval,
            attach: a.sites.attach.into(),
            force_sites: a.sites.force_sites,
            operands: a.globs,
            strings: vec![],
            json: false,
            raw: false,
            limit: None,
            no_kernel_fetch: false,
            engine: a.engine,
            duration: a.duration,
            stack: false,
            fold: false,
            svg: a.svg,
        }
    }
}

impl From<TraceArgs> for Opts {
    fn from(a: TraceArgs) -> Opts {
        Opts {
            place: a.target.place(),
            interval: None,
            attach: a.sites.attach.into(),
            force_sites: a.sites.force_sites,
            operands: a.globs,
            strings: a.strings,
            json: a.json,
            raw: a.raw,
            limit: a.limit,
            no_kernel_fetch: a.no_kernel_fetch,
            engine: a.engine,
            duration: None,
            stack: a.stack,
            fold: false,
            svg: None,
        }
    }
}

fn list(args: ListArgs) -> Result<i32, CliError> {
    match (args.pid, args.binary) {
        (Some(pid), _) => list_process(pid, args.sites),
        (None, Some(binary)) => {
            let binary = binary.as_str();
            let probes = read_probes_of(Path::new(binary))?;
            if probes.sites.is_empty() {
                return Err(CliError::NoProbes {
                    what: escape(binary).into_owned(),
                });
            }
            let sigs = typed::signatures([Path::new(binary)]);
            let guarded = read_file_fork_guard(binary).unwrap_or(false);
            print_table(&probes.sites, &sigs, 0, guarded, args.sites, &|_| None)?;
            Ok(0)
        }
        // clap asks for one of them.
        (None, None) => unreachable!("list without -p or BINARY"),
    }
}

/// A table per mapped object with probes, with semaphore values.
fn list_process(pid: u32, with_sites: bool) -> Result<i32, CliError> {
    let mut any = false;
    for object in read_process(pid)? {
        let path = escape(&object.path.to_string_lossy()).into_owned();
        if let Ok(p) = &object.probes {
            warn_skipped(&object.path, p);
        }
        let probes = match object.probes {
            Ok(p) if !p.sites.is_empty() => p,
            Ok(_) => continue,
            Err(e) => {
                eprintln!("usdt: {path}: {}", escape(&e.without_path().to_string()));
                continue;
            }
        };
        any = true;
        out!("{path} (load bias {:#x})", object.bias);
        let value = |addr: u64| read_semaphore(pid, addr.wrapping_add(object.bias)).ok();
        let sigs = typed::signatures([object.open_path.as_path()]);
        let guarded = read_file_fork_guard(&object.open_path).unwrap_or(false);
        print_table(
            &probes.sites,
            &sigs,
            object.bias,
            guarded,
            with_sites,
            &value,
        )?;
    }
    if !any {
        return Err(CliError::NoProcessProbes { pid });
    }
    Ok(0)
}

/// One row per probe (a recorded probe with its parameters:
/// `http:request_start(id: u64, path: &str)`); with `sites`, one indented
/// row per site below it. Names, parameters and argument strings come from
/// the binary: escaped. `guarded`: the binary carries the fork guard.
fn print_table(
    sites: &[Site],
    sigs: &usdt_trace::Signatures,
    bias: u64,
    guarded: bool,
    with_sites: bool,
    semaphore_value: &dyn Fn(u64) -> Option<u16>,
) -> Result<(), CliError> {
    let mut probes: BTreeMap<String, Vec<&Site>> = BTreeMap::new();
    for site in sites {
        probes
            .entry(typed::probe_column(sigs, site))
            .or_default()
            .push(site);
    }
    let width = probes.keys().map(String::len).max().unwrap_or(0).max(5);
    out!(
        "{:width$}  SITES  LAYOUT     SEMAPHORE           ATTACH           ARGUMENTS",
        "PROBE"
    );
    for (name, sites) in &probes {
        let first = sites[0];
        let layout = if sites.iter().all(|s| s.layout == first.layout) {
            first.layout.name()
        } else {
            "mixed"
        };
        let semaphore = match first.semaphore {
            Some(addr) => match semaphore_value(addr) {
                Some(v) => format!("{:#x}={v}", addr.wrapping_add(bias)),
                None => format!("{:#x}", addr.wrapping_add(bias)),
            },
            None => "-".into(),
        };
        let refused: Vec<&Site> = sites
            .iter()
            .copied()
            .filter(|s| s.refused().is_some())
            .collect();
        let attach = if refused.len() == sites.len() {
            "refused"
        } else if !refused.is_empty() {
            "some refused"
        } else if sites.iter().all(|s| s.layout == first.layout) {
            features::auto_attach_words(first.layout, guarded)
        } else {
            "per site"
        };
        let args = if sites.iter().all(|s| s.args_text == first.args_text) {
            escape(&first.args_text).into_owned()
        } else {
            format!("{} (differs between sites)", escape(&first.args_text))
        };
        let why = match refused.first().and_then(|s| s.refused()) {
            Some(why) => format!("  (refused: {})", escape(&why.to_string())),
            None => String::new(),
        };
        out!(
            "{name:width$}  {:5}  {layout:9}  {semaphore:18}  {attach:15}  {args}{why}",
            sites.len()
        );
        if with_sites {
            for s in sites {
                let offset = s.location_offset.map_or("-".into(), |o| format!("{o:#x}"));
                let why = match s.refused() {
                    Some(why) => format!(" refused: {}", escape(&why.to_string())),
                    None => String::new(),
                };
                out!(
                    "  site {:#x} offset {offset} base {:#x} semaphore {:#x} layout {} args {}{why}",
                    s.location.wrapping_add(bias),
                    s.note_base,
                    s.semaphore.map_or(0, |a| a.wrapping_add(bias)),
                    s.layout,
                    escape(&s.args_text)
                );
            }
        }
    }
    Ok(())
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

/// After detaching from a command: its exit code, or 128 + the signal that
/// stopped us (passed on to the command), or the pipe status when stdout
/// was closed (the command then runs to its end, untraced).
pub(crate) fn finish_command(
    child: &mut PausedCommand,
    status: Option<ExitStatus>,
    watched: Result<(), CliError>,
) -> Result<i32, CliError> {
    if let Some(status) = status {
        watched?;
        return Ok(status.shell_code());
    }
    if let Some(sig) = interrupted() {
        child.signal(sig);
        return Ok(128 + sig);
    }
    match watched {
        Err(e) if e.is_broken_pipe() => {
            let _ = child.wait();
            Ok(BROKEN_PIPE)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(child.wait()?.shell_code()),
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
            .any(|s| matches(globs, s) && features.optimizes(s.layout));
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
fn read_probes_of(path: &Path) -> Result<ElfProbes, CliError> {
    let probes = read_file_probes(path).map_err(file_error)?;
    warn_skipped(path, &probes);
    Ok(probes)
}

/// One line per note skipped because it is malformed as a whole.
fn warn_skipped(path: &Path, probes: &ElfProbes) {
    for skipped in &probes.skipped {
        eprintln!(
            "usdt: {}: {}",
            escape(&path.to_string_lossy()),
            escape(&skipped.to_string())
        );
    }
}

/// One line for a file whose probes cannot be read: never skipped in silence.
pub(crate) fn not_attached(path: &Path, e: &dyn std::fmt::Display) {
    eprintln!(
        "usdt: {}: {}; its probes are not attached",
        escape(&path.to_string_lossy()),
        escape(&e.to_string())
    );
}

pub(crate) fn matches(globs: &[String], site: &Site) -> bool {
    let probe = site.probe();
    globs.is_empty() || globs.iter().any(|g| glob_match(g, &probe))
}

/// How many sites match the globs; an error if none (with the closest names)
/// or if there are no probes at all, or if every site that matches was
/// refused.
pub(crate) fn select(session: &Session, globs: &[String], what: &str) -> Result<usize, CliError> {
    let refused = session.refused().filter(|(_, s)| matches(globs, s)).count();
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

/// [`select`] among `objects`.
pub(crate) fn select_in(
    objects: &Objects,
    globs: &[String],
    what: &str,
) -> Result<usize, CliError> {
    let sites = || objects.iter().flat_map(|(_, sites)| sites);
    let matched = sites().filter(|s| matches(globs, s)).count();
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
    // Every user of a session polls `new_objects`, which lets the process
    // go on from its stops.
    let mut session = session
        .globs(globs)
        .force_sites(force_sites)
        .cancel_when(|| interrupted().is_some())
        .follow_exec();
    print_notices(&mut session);
    Ok(session)
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

/// The one line that says an object found after the start is attached
/// (`doing`: "counting its"), or why it is not.
pub(crate) fn say_attached(object: &NewObject, doing: &str, attached: Result<(), String>) {
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

/// One line per file that could not be read and per note skipped.
pub(crate) fn print_notices(session: &mut Session) {
    for notice in session.take_notices() {
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
}
