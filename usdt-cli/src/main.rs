//! `usdt`: list the USDT probes of a binary or process, count their hits,
//! trace them with their arguments, write a bpftrace program that prints
//! them, and say what the kernel can do for them.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

mod answers;
mod args;
mod closest;
mod count_by;
mod count_engine;
mod latency;
mod serve;
mod trace_cmd;
mod typed;

use args::{Cli, Command, CountArgs, ListArgs, TraceArgs};
use closest::closest;
use count_engine::{Counter, Engine};

use usdt_trace::{
    escape, escape_name, fork_test, glob_match, process_alive, read_file_probes, read_process,
    read_semaphore, resolve_program, shared_libraries, tracer_features, AttachPoint, ElfProbes,
    Error, ExitStatus, KernelFeatures, OptimizedFork, PausedCommand, Site, SiteLayout, Target,
    UprobeSyscall, FORK_TEST_CACHE,
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
        Err(e) if is_broken_pipe(&e) => BROKEN_PIPE,
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

fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Os { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// A failed write to stdout, as an error (`BrokenPipe` ends quietly).
fn write_error(source: std::io::Error) -> Error {
    Error::Os {
        what: "writing the output".into(),
        source,
    }
}

/// `println!` that returns an error instead of panicking when stdout is closed.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*).map_err(crate::write_error)?
    };
}

fn run(command: Command) -> Result<i32, Error> {
    match command {
        Command::Features => features(),
        Command::List(args) => list(args),
        Command::Count(args) if args.by.is_some() => count_by::count_by(args),
        Command::Count(args) => count(args),
        Command::Latency(args) => latency::latency(args),
        Command::Hist(args) => latency::hist(args),
        Command::Serve(args) => serve::serve(args),
        Command::Trace(args) => trace_cmd::trace(args),
        Command::Bpftrace(args) => typed::bpftrace(args),
    }
}

fn features() -> Result<i32, Error> {
    let f = KernelFeatures::detect();
    let syscall = match f.uprobe_syscall {
        UprobeSyscall::Absent => {
            "absent (uprobes are never optimized; kernels before 6.18)".to_string()
        }
        UprobeSyscall::OptimizesNop5 => {
            "present, optimizes uprobes on nop5 (ENXIO: Linux 6.18 to 7.2)".into()
        }
        UprobeSyscall::OptimizesNop10 => {
            "present, optimizes uprobes on nop10 (EPROTO: the 7.3 series)".into()
        }
        UprobeSyscall::Unknown(e) => {
            format!(
                "unknown (syscall 336 failed with {})",
                std::io::Error::from_raw_os_error(e)
            )
        }
    };
    out!("uprobe syscall: {syscall}");
    out!(
        "BPF uprobe_multi links: {}",
        usdt_trace::bpf::uprobe_multi_support()
    );
    match f.optimized_layout() {
        Some(layout) => out!("optimized site layout: {layout} (a uprobe at Location + 1)"),
        None => out!("optimized site layout: none"),
    }
    let test = fork_test();
    let f = tracer_features();
    let verdict = match test.verdict {
        OptimizedFork::ChildSurvives => "the child survives",
        OptimizedFork::ChildDies => "the child dies",
        OptimizedFork::Untested => "untested (assumed to die)",
    };
    let source = match (test.cached, test.took) {
        (true, _) => format!("; cached for this boot in {FORK_TEST_CACHE}"),
        (false, Some(t)) => format!("; self-test took {} ms", t.as_millis()),
        (false, None) => String::new(),
    };
    out!(
        "fork after an optimized hit: {verdict} ({}{source})",
        test.why
    );
    for layout in [SiteLayout::NopNop5, SiteLayout::NopNop10, SiteLayout::Nop] {
        out!(
            "auto attach on a {layout} site: {}",
            auto_attach_words(layout, &f)
        );
    }
    match f.uprobe_pmu_type {
        Some(t) => out!("uprobe PMU: type {t}"),
        None => out!("uprobe PMU: absent (perf_event_open cannot attach uprobes)"),
    }
    match (f.kernel_semaphores, f.ref_ctr_offset_shift) {
        (true, Some(s)) => {
            out!("semaphores: maintained by the kernel (ref_ctr_offset in config bits {s}-63)")
        }
        (true, None) => out!("semaphores: maintained by the kernel (ref_ctr_offset)"),
        (false, _) => out!("semaphores: not maintained by the kernel (no ref_ctr_offset)"),
    }
    Ok(0)
}

/// Where `Auto` attaches on this kernel, in words (for listings).
fn auto_attach_words(layout: SiteLayout, features: &KernelFeatures) -> &'static str {
    if features.attach_after_nop(layout) {
        "+1 (optimized)"
    } else if features.optimizes(layout) {
        "nop (fork-safe)"
    } else {
        "nop"
    }
}

/// What `count` and `trace` do, from their command lines.
#[derive(Default)]
struct Opts {
    pid: Option<u32>,
    interval: Option<Duration>,
    attach: AttachPoint,
    /// The probe globs.
    operands: Vec<String>,
    command: Vec<OsString>,
    /// `trace --str`: probe glob and argument index.
    strings: Vec<(String, usize)>,
    json: bool,
    /// `trace --raw`: `argN=` integers even for probes with signatures.
    raw: bool,
    limit: Option<u64>,
    no_kernel_fetch: bool,
    /// `count --engine`, `trace --engine`.
    engine: Option<Engine>,
    /// `count --all BINARY`.
    all: Option<PathBuf>,
    /// `count --duration`.
    duration: Option<Duration>,
}

impl From<CountArgs> for Opts {
    fn from(a: CountArgs) -> Opts {
        Opts {
            pid: a.pid,
            interval: a.interval,
            attach: a.attach.into(),
            operands: a.globs,
            command: a.command,
            engine: a.engine,
            all: a.all,
            duration: a.duration,
            ..Opts::default()
        }
    }
}

impl From<TraceArgs> for Opts {
    fn from(a: TraceArgs) -> Opts {
        Opts {
            pid: a.pid,
            attach: a.attach.into(),
            operands: a.globs,
            command: a.command,
            strings: a.strings,
            json: a.json,
            raw: a.raw,
            limit: a.limit,
            no_kernel_fetch: a.no_kernel_fetch,
            engine: a.engine,
            ..Opts::default()
        }
    }
}

fn list(args: ListArgs) -> Result<i32, Error> {
    match (args.pid, args.binary) {
        (Some(pid), _) => list_process(pid, args.sites),
        (None, Some(binary)) => {
            let binary = binary.as_str();
            let probes = read_probes_of(Path::new(binary))?;
            if probes.sites.is_empty() {
                return Err(Error::Invalid(format!("{} has no probes", escape(binary))));
            }
            let sigs = typed::signatures([Path::new(binary)]);
            print_table(&probes.sites, &sigs, 0, args.sites, &|_| None)?;
            Ok(0)
        }
        // clap asks for one of them.
        (None, None) => unreachable!("list without -p or BINARY"),
    }
}

/// A table per mapped object with probes, with semaphore values.
fn list_process(pid: u32, with_sites: bool) -> Result<i32, Error> {
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
                eprintln!("usdt: {path}: {}", escape(&e.to_string()));
                continue;
            }
        };
        any = true;
        out!("{path} (load bias {:#x})", object.bias);
        let value = |addr: u64| read_semaphore(pid, addr.wrapping_add(object.bias)).ok();
        let sigs = typed::signatures([object.open_path.as_path()]);
        print_table(&probes.sites, &sigs, object.bias, with_sites, &value)?;
    }
    if !any {
        return Err(Error::Invalid(format!(
            "process {pid} maps no file with probes"
        )));
    }
    Ok(0)
}

/// One row per probe (a recorded probe with its parameters:
/// `http:request_start(id: u64, path: &str)`); with `sites`, one indented
/// row per site below it. Names, parameters and argument strings come from
/// the binary: escaped.
fn print_table(
    sites: &[Site],
    sigs: &usdt_trace::Signatures,
    bias: u64,
    with_sites: bool,
    semaphore_value: &dyn Fn(u64) -> Option<u16>,
) -> Result<(), Error> {
    let features = &tracer_features();
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
        let attach = if sites.iter().all(|s| s.layout == first.layout) {
            auto_attach_words(first.layout, features)
        } else {
            "per site"
        };
        let args = if sites.iter().all(|s| s.args_text == first.args_text) {
            escape(&first.args_text).into_owned()
        } else {
            format!("{} (differs between sites)", escape(&first.args_text))
        };
        out!(
            "{name:width$}  {:5}  {layout:9}  {semaphore:18}  {attach:15}  {args}",
            sites.len()
        );
        if with_sites {
            for s in sites {
                let offset = s.location_offset.map_or("-".into(), |o| format!("{o:#x}"));
                out!(
                    "  site {:#x} offset {offset} base {:#x} semaphore {:#x} layout {} args {}",
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

/// The signal that asked us to stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
}

/// The signal (SIGINT, SIGTERM or SIGHUP) received so far, if any.
pub(crate) fn interrupted() -> Option<i32> {
    Some(SIGNAL.load(Ordering::Relaxed)).filter(|s| *s != 0)
}

/// Catches SIGINT, SIGTERM and SIGHUP from the first moment of `count` and
/// `trace`: every path then detaches, removes its fetch events and ends
/// what it started before exiting with 128 + the signal.
pub(crate) fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an
        // atomic (async-signal-safe) is a valid disposition.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
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

fn count(args: CountArgs) -> Result<i32, Error> {
    catch_signals();
    let opts = Opts::from(args);
    raise_fd_limit();
    // clap lets exactly one of -p, --all and COMMAND through.
    match (opts.pid, &opts.all) {
        (Some(pid), _) => count_process(pid, &opts),
        (None, Some(binary)) => count_all(binary, &opts),
        (None, None) => count_command(&opts),
    }
}

/// Files and their sites, as found for a process or a command.
pub(crate) type Objects = Vec<(PathBuf, Vec<Site>)>;

/// The objects of a process with their sites (saying in one line which
/// cannot be read, and which notes are skipped).
pub(crate) fn process_objects(pid: u32) -> Result<Objects, Error> {
    Ok(read_process(pid)?
        .into_iter()
        .filter_map(|o| match o.probes {
            Ok(probes) => {
                warn_skipped(&o.path, &probes);
                Some((o.open_path, probes.sites))
            }
            Err(e) => {
                not_attached(&o.path, &e);
                None
            }
        })
        .collect())
}

/// Attaches to a running process until it exits, the duration ends or a
/// signal.
fn count_process(pid: u32, opts: &Opts) -> Result<i32, Error> {
    let objects = process_objects(pid)?;
    let matched = select(&objects, &opts.operands, &format!("process {pid}"))?;
    warn_next(opts.attach, &objects, &opts.operands);
    let engine = Engine::chosen(opts.engine, count_engine::ENGINE_ENV)?;
    let Some(counter) = attach(engine, &objects, opts, Target::Pid(pid))? else {
        return Ok(interrupted().map_or(130, |sig| 128 + sig));
    };
    let mut counter = Counting::new(counter, engine, opts, pid, &objects);
    // Only now is every site counting (the kernel raises semaphores a little
    // earlier, while it registers the uprobes).
    eprintln!("usdt: counting {matched} sites of process {pid}; Ctrl-C prints the counts");
    let end = opts.duration.map(|d| Instant::now() + d);
    watch(&mut counter, opts.interval, || {
        Ok(process_alive(pid) && end.is_none_or(|end| Instant::now() < end))
    })?;
    Ok(interrupted().map_or(0, |sig| 128 + sig))
}

/// Counts every process that runs (or maps) `binary` until a signal or the
/// duration ends.
fn count_all(binary: &Path, opts: &Opts) -> Result<i32, Error> {
    let path = absolute(binary);
    let objects: Objects = vec![(path.clone(), read_probes_of(&path)?.sites)];
    let name = escape(&path.to_string_lossy()).into_owned();
    let matched = select(&objects, &opts.operands, &name)?;
    warn_next(opts.attach, &objects, &opts.operands);
    let engine = Engine::chosen(opts.engine, count_engine::ENGINE_ENV)?;
    let Some(counter) = attach(engine, &objects, opts, Target::AllProcesses)? else {
        return Ok(interrupted().map_or(130, |sig| 128 + sig));
    };
    // Every process of the file is counted already: nothing to watch.
    let mut counter = Counting::fixed(counter);
    eprintln!(
        "usdt: counting {matched} sites in every process of {name}; Ctrl-C prints the counts"
    );
    let end = opts.duration.map(|d| Instant::now() + d);
    watch(&mut counter, opts.interval, || {
        Ok(end.is_none_or(|end| Instant::now() < end))
    })?;
    Ok(interrupted().map_or(0, |sig| 128 + sig))
}

/// Starts a command with the uprobes in place; returns its exit code.
fn count_command(opts: &Opts) -> Result<i32, Error> {
    let command = command_objects(&opts.command[0])?;
    select(&command.objects, &opts.operands, &command.name())?;
    warn_next(opts.attach, &command.objects, &opts.operands);
    let engine = Engine::chosen(opts.engine, count_engine::ENGINE_ENV)?;
    let mut child = command.spawn(&opts.command)?;
    let counter = match attach(engine, &command.objects, opts, Target::Pid(child.pid())) {
        Ok(Some(counter)) => counter,
        Ok(None) => {
            child.kill();
            return Ok(interrupted().map_or(130, |sig| 128 + sig));
        }
        Err(e) => {
            child.kill();
            return Err(e);
        }
    };
    let mut counter = Counting::new(counter, engine, opts, child.pid(), &command.objects);
    child.start()?;
    let mut status = None;
    let watched = watch(&mut counter, opts.interval, || {
        status = child.try_wait()?;
        Ok(status.is_none())
    });
    drop(counter);
    finish_command(&mut child, status, watched)
}

/// After detaching from a command: its exit code, or 128 + the signal that
/// stopped us (passed on to the command), or the pipe status when stdout
/// was closed (the command then runs to its end, untraced).
pub(crate) fn finish_command(
    child: &mut PausedCommand,
    status: Option<ExitStatus>,
    watched: Result<(), Error>,
) -> Result<i32, Error> {
    if let Some(status) = status {
        watched?;
        return Ok(status.shell_code());
    }
    if let Some(sig) = interrupted() {
        child.signal(sig);
        return Ok(128 + sig);
    }
    match watched {
        Err(e) if is_broken_pipe(&e) => {
            let _ = child.wait();
            Ok(BROKEN_PIPE)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(child.wait()?.shell_code()),
    }
}

/// `--attach next` where the kernel optimizes the site and a forked child
/// would die: obeyed, with one line saying so.
pub(crate) fn warn_next(point: AttachPoint, objects: &Objects, globs: &[String]) {
    if point != AttachPoint::Next {
        return;
    }
    let features = KernelFeatures::detect();
    let optimized = objects
        .iter()
        .flat_map(|(_, sites)| sites)
        .any(|s| matches(globs, s) && features.optimizes(s.layout));
    if optimized && fork_test().verdict != OptimizedFork::ChildSurvives {
        eprintln!(
            "usdt: warning: --attach next on this kernel: a child the program forks after a hit dies (SIGSEGV) at its own first hit (usdt features says why)"
        );
    }
}

/// Attaches to the sites that match the globs with `engine`: `None` when a
/// signal stopped it (what was attached is detached again).
fn attach(
    engine: Engine,
    objects: &Objects,
    opts: &Opts,
    target: Target,
) -> Result<Option<Counter>, Error> {
    let files: Vec<(PathBuf, Vec<&Site>)> = objects
        .iter()
        .map(|(path, sites)| {
            let matched = sites.iter().filter(|s| matches(&opts.operands, s));
            (path.clone(), matched.collect())
        })
        .collect();
    match Counter::attach(engine, &files, opts.attach, target, &|| interrupted()) {
        // Ctrl-C reaches the paused command too: it is gone because of the
        // signal, not a failure of ours.
        Err(Error::NoProcess(_)) if interrupted().is_some() => Ok(None),
        other => other,
    }
}

/// The program a command runs and the sites of it and of the shared
/// libraries it will load.
pub(crate) struct CommandObjects {
    /// The program as found in PATH (not canonicalized): what is executed.
    pub(crate) exec_path: PathBuf,
    pub(crate) objects: Objects,
}

impl CommandObjects {
    pub(crate) fn name(&self) -> String {
        escape(&self.exec_path.to_string_lossy()).into_owned()
    }

    /// Forks the command, paused, with argv\[0\] as the user wrote it.
    pub(crate) fn spawn(&self, command: &[OsString]) -> Result<PausedCommand, Error> {
        PausedCommand::spawn_as(&self.exec_path, &command[0], &command[1..])
    }
}

/// The program a command runs, and the sites of the program and of the
/// shared libraries it will load.
pub(crate) fn command_objects(command: &OsString) -> Result<CommandObjects, Error> {
    let exec_path = resolve_program(Path::new(command))?;
    let program = absolute(&exec_path);
    let mut objects: Objects = vec![(program.clone(), read_probes_of(&program)?.sites)];
    for lib in shared_libraries(&program) {
        match read_file_probes(&lib) {
            Ok(probes) => {
                warn_skipped(&lib, &probes);
                objects.push((lib, probes.sites));
            }
            Err(e) => not_attached(&lib, &e),
        }
    }
    Ok(CommandObjects { exec_path, objects })
}

/// The probes of a file, with errors that name it.
pub(crate) fn read_probes_of(path: &Path) -> Result<ElfProbes, Error> {
    let name = escape(&path.to_string_lossy()).into_owned();
    let probes = read_file_probes(path).map_err(|e| match e {
        Error::Io { .. } => e,
        Error::NotElf => Error::Invalid(format!("{name} is not an ELF file")),
        e => Error::Invalid(format!("{name}: {e}")),
    })?;
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
pub(crate) fn not_attached(path: &Path, e: &Error) {
    eprintln!(
        "usdt: {}: {}; its probes are not attached",
        escape(&path.to_string_lossy()),
        escape(&e.to_string())
    );
}

/// The file to read and attach to: symlinks resolved (the kernel attaches
/// to the file itself).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.into())
}

pub(crate) fn matches(globs: &[String], site: &Site) -> bool {
    let probe = site.probe();
    globs.is_empty() || globs.iter().any(|g| glob_match(g, &probe))
}

/// How many sites match the globs; an error if none (with the closest names)
/// or if there are no probes at all.
pub(crate) fn select(objects: &Objects, globs: &[String], what: &str) -> Result<usize, Error> {
    let sites = || objects.iter().flat_map(|(_, sites)| sites);
    let matched = sites().filter(|s| matches(globs, s)).count();
    if matched > 0 {
        return Ok(matched);
    }
    let mut names: Vec<String> = sites().map(Site::probe).collect();
    if names.is_empty() {
        return Err(Error::Invalid(format!("{what} has no probes")));
    }
    names.sort();
    names.dedup();
    let near = closest(&globs.join(" "), names.iter().map(String::as_str), 3);
    let near: Vec<String> = near.iter().map(|n| escape_name(n).into_owned()).collect();
    let globs = globs.join(" ");
    Err(Error::Invalid(format!(
        "no probe of {what} matches {globs}; the closest are {}",
        near.join(", ")
    )))
}

/// The counters of one `count` run: those attached at the start, and one
/// more for each object with matching probes that the process maps later
/// (a library it loads with `dlopen`), found by watching its mappings.
struct Counting {
    parts: Vec<Counter>,
    /// What to watch: the process, and how to attach.
    watched: Option<Watched>,
}

struct Watched {
    engine: Engine,
    point: AttachPoint,
    globs: Vec<String>,
    maps: MapsWatch,
}

/// How often a traced process's mappings are read for new objects.
const MAPS_POLL: Duration = Duration::from_millis(100);

/// The files a process maps, read every [`MAPS_POLL`] for those not seen
/// before: a library it loads with `dlopen` after the tracer attached.
pub(crate) struct MapsWatch {
    pid: u32,
    /// The inodes of the files already looked at.
    seen: BTreeSet<u64>,
    next_poll: Instant,
}

impl MapsWatch {
    /// Watches `pid`, whose `objects` are attached already.
    pub(crate) fn new(pid: u32, objects: &Objects) -> MapsWatch {
        use std::os::unix::fs::MetadataExt;
        let seen = objects
            .iter()
            .filter_map(|(path, _)| std::fs::metadata(path).ok())
            .map(|m| m.ino())
            .collect();
        MapsWatch {
            pid,
            seen,
            next_poll: Instant::now(),
        }
    }

    /// The files mapped since the last look (none until [`MAPS_POLL`] has
    /// passed) that have sites `globs` match: the path to open, the path
    /// the process maps, and those sites. One line for each file that
    /// cannot be read.
    pub(crate) fn new_objects(&mut self, globs: &[String]) -> Vec<(PathBuf, String, Vec<Site>)> {
        if Instant::now() < self.next_poll {
            return vec![];
        }
        self.next_poll = Instant::now() + MAPS_POLL;
        let Ok(maps) = usdt_trace::read_maps(self.pid) else {
            return vec![]; // gone: the caller notices
        };
        let mut found = vec![];
        for m in maps {
            if m.inode == 0 || !m.path.starts_with('/') || !self.seen.insert(m.inode) {
                continue;
            }
            let open_path = PathBuf::from(format!("/proc/{}/root{}", self.pid, m.path));
            let probes = match read_file_probes(&open_path) {
                Ok(p) => p,
                Err(Error::NotElf) => continue,
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::InvalidInput =>
                {
                    continue
                }
                Err(e) => {
                    not_attached(Path::new(&m.path), &e);
                    continue;
                }
            };
            warn_skipped(Path::new(&m.path), &probes);
            let sites: Vec<Site> = probes
                .sites
                .into_iter()
                .filter(|s| matches(globs, s))
                .collect();
            if !sites.is_empty() {
                found.push((open_path, m.path, sites));
            }
        }
        found
    }
}

impl Counting {
    /// Counts `pid` with `counter`, watching for objects beyond `objects`.
    fn new(counter: Counter, engine: Engine, opts: &Opts, pid: u32, objects: &Objects) -> Counting {
        Counting {
            parts: vec![counter],
            watched: Some(Watched {
                engine,
                point: opts.attach,
                globs: opts.operands.clone(),
                maps: MapsWatch::new(pid, objects),
            }),
        }
    }

    /// Counts with `counter` alone.
    fn fixed(counter: Counter) -> Counting {
        Counting {
            parts: vec![counter],
            watched: None,
        }
    }

    /// Attaches to the objects with matching probes that the process has
    /// mapped since the last look, saying so in one line each.
    fn poll(&mut self) {
        let Some(w) = &mut self.watched else {
            return;
        };
        for (open_path, mapped, sites) in w.maps.new_objects(&w.globs) {
            let shown = escape(&mapped);
            let files = [(open_path, sites.iter().collect::<Vec<&Site>>())];
            let pid = w.maps.pid;
            match Counter::attach(w.engine, &files, w.point, Target::Pid(pid), &|| {
                interrupted()
            }) {
                Ok(Some(counter)) => {
                    eprintln!(
                        "usdt: {shown} was mapped after the start: counting its {} sites",
                        sites.len()
                    );
                    self.parts.push(counter);
                }
                Ok(None) => return,
                Err(e) => not_attached(Path::new(&mapped), &e),
            }
        }
    }

    /// Hits per probe over every part.
    fn probe_counts(&self) -> Result<BTreeMap<String, u64>, Error> {
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
    mut running: impl FnMut() -> Result<bool, Error>,
) -> Result<(), Error> {
    let mut next = interval.map(|i| Instant::now() + i);
    while interrupted().is_none() && running()? {
        counter.poll();
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(at), Some(i)) = (next, interval) {
            if Instant::now() >= at {
                print_counts(counter)?;
                out!();
                next = Some(at + i);
            }
        }
    }
    print_counts(counter)
}

/// `provider:name count` per probe, names escaped.
fn print_counts(counter: &Counting) -> Result<(), Error> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (probe, n) in counter.probe_counts()? {
        *counts.entry(escape_name(&probe).into_owned()).or_insert(0) += n;
    }
    let mut out = std::io::stdout().lock();
    for (probe, n) in counts {
        writeln!(out, "{probe} {n}").map_err(write_error)?;
    }
    out.flush().map_err(write_error)
}
