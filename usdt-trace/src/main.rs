//! `usdt`: list the USDT probes of a binary or process, count their hits, and
//! say what the kernel can do for them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod count_engine;
mod trace_cmd;
mod typed;

use count_engine::{Counter, Engine};

use usdt_trace::{
    auto_attach_words, closest, glob_match, process_alive, read_file_probes, read_process,
    read_semaphore, resolve_program, shared_libraries, AttachPoint, ElfProbes, Error,
    KernelFeatures, PausedCommand, Site, SiteLayout, Target, UprobeSyscall,
};

const USAGE: &str = "\
usage:
  usdt features
  usdt list [--sites] BINARY
  usdt list [--sites] -p PID
  usdt count [--interval N] [--attach auto|nop|next] [--engine auto|bpf|perf] [--duration S]
             [PROBE-GLOB...] (-p PID | -- COMMAND [ARGS...] | --all BINARY)
  usdt trace [--str PROBE-GLOB:N]... [--json] [--raw] [--limit N] [--attach auto|nop|next]
             [--no-tracefs] [PROBE-GLOB...] (-p PID | -- COMMAND [ARGS...])
  usdt bpftrace BINARY [PROBE-GLOB...]

PROBE-GLOB matches provider:name, with * and ? ('http:*'); none means every probe.
trace shows a #[usdt::provider] probe's arguments by name and type (id=1
path=\"/a\"); --raw, and probes without a signature, show arg0=N...
bpftrace prints a bpftrace program printing the same lines:
  bpftrace -e \"$(usdt bpftrace BIN)\" -c BIN
count --all counts every process that runs BINARY (or maps it, for a library).
count's engine: one BPF uprobe_multi link per file, counting every thread
(Linux 6.6+), or one perf event per site (the main thread only); auto picks
BPF when the kernel has it. $USDT_COUNT_ENGINE sets the default.";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(args) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("usdt: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Vec<OsString>) -> Result<i32, Error> {
    let usage = || Error::Invalid(USAGE.into());
    let (command, rest) = args.split_first().ok_or_else(usage)?;
    match command.to_str().ok_or_else(usage)? {
        "features" if rest.is_empty() => features(),
        "list" => list(rest),
        "count" => count(rest),
        "trace" => trace_cmd::trace(rest),
        "bpftrace" => typed::bpftrace(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(0)
        }
        _ => Err(usage()),
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
    println!("uprobe syscall: {syscall}");
    println!(
        "BPF uprobe_multi links: {}",
        usdt_trace::bpf::uprobe_multi_support()
    );
    match f.optimized_layout() {
        Some(layout) => println!("optimized site layout: {layout} (a uprobe at Location + 1)"),
        None => println!("optimized site layout: none"),
    }
    for layout in [SiteLayout::NopNop5, SiteLayout::NopNop10, SiteLayout::Nop] {
        println!(
            "auto attach on a {layout} site: {}",
            auto_attach_words(layout, &f)
        );
    }
    match f.uprobe_pmu_type {
        Some(t) => println!("uprobe PMU: type {t}"),
        None => println!("uprobe PMU: absent (perf_event_open cannot attach uprobes)"),
    }
    match (f.kernel_semaphores, f.ref_ctr_offset_shift) {
        (true, Some(s)) => {
            println!("semaphores: maintained by the kernel (ref_ctr_offset in config bits {s}-63)")
        }
        (true, None) => println!("semaphores: maintained by the kernel (ref_ctr_offset)"),
        (false, _) => println!("semaphores: not maintained by the kernel (no ref_ctr_offset)"),
    }
    Ok(0)
}

/// Options and operands shared by `list` and `count`.
#[derive(Default)]
struct Opts {
    pid: Option<u32>,
    sites: bool,
    interval: Option<Duration>,
    attach: AttachPoint,
    operands: Vec<String>,
    command: Vec<OsString>,
    /// `trace --str`: probe glob and argument index.
    strings: Vec<(String, usize)>,
    json: bool,
    /// `trace --raw`: `argN=` integers even for probes with signatures.
    raw: bool,
    limit: Option<u64>,
    no_tracefs: bool,
    /// `count --engine`.
    engine: Option<Engine>,
    /// `count --all BINARY`.
    all: Option<PathBuf>,
    /// `count --duration`.
    duration: Option<Duration>,
}

/// Which command the options are for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cmd {
    List,
    Count,
    Trace,
}

fn parse_opts(args: &[OsString], cmd: Cmd) -> Result<Opts, Error> {
    let count = cmd != Cmd::List;
    let trace = cmd == Cmd::Trace;
    let usage = || Error::Invalid(USAGE.into());
    let mut opts = Opts::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--" && count {
            opts.command = it.by_ref().cloned().collect();
            break;
        }
        let arg = arg.to_str().ok_or_else(usage)?;
        let mut value = |name: &str| {
            let v = it.next().and_then(|v| v.to_str()).map(str::to_string);
            v.ok_or_else(|| Error::Invalid(format!("{name} needs a value")))
        };
        match arg {
            "-p" | "--pid" => {
                let v = value("-p")?;
                let pid = v
                    .parse()
                    .map_err(|_| Error::Invalid(format!("\"{v}\" is not a process id")))?;
                opts.pid = Some(pid);
            }
            "--sites" if !count => opts.sites = true,
            "--str" if trace => {
                let v = value("--str")?;
                opts.strings.push(parse_str_option(&v)?);
            }
            "--json" if trace => opts.json = true,
            "--raw" if trace => opts.raw = true,
            "--no-tracefs" if trace => opts.no_tracefs = true,
            "--limit" if trace => {
                let v = value("--limit")?;
                let n = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::Invalid(format!(
                        "the limit is a positive number of hits, not \"{v}\""
                    ))
                })?;
                opts.limit = Some(n);
            }
            "--interval" | "-i" if count && !trace => {
                let v = value("--interval")?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && s.is_finite())
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "the interval is a positive number of seconds, not \"{v}\""
                        ))
                    })?;
                opts.interval = Some(Duration::from_secs_f64(secs));
            }
            "--attach" if count => opts.attach = value("--attach")?.parse()?,
            "--engine" if count && !trace => opts.engine = Some(value("--engine")?.parse()?),
            "--all" if count && !trace => opts.all = Some(value("--all")?.into()),
            "--duration" if count && !trace => {
                let v = value("--duration")?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && s.is_finite())
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "the duration is a positive number of seconds, not \"{v}\""
                        ))
                    })?;
                opts.duration = Some(Duration::from_secs_f64(secs));
            }
            "-h" | "--help" => return Err(usage()),
            a if a.starts_with('-') && a.len() > 1 => {
                return Err(Error::Invalid(format!("unknown option {a}\n{USAGE}")))
            }
            a => opts.operands.push(a.into()),
        }
    }
    Ok(opts)
}

/// `PROBE-GLOB:N`, split at the last colon.
fn parse_str_option(v: &str) -> Result<(String, usize), Error> {
    let bad = || {
        Error::Invalid(format!(
            "--str takes PROBE-GLOB:N, such as 'http:request_start:1', not \"{v}\""
        ))
    };
    let (glob, n) = v.rsplit_once(':').ok_or_else(bad)?;
    let n: usize = n.parse().map_err(|_| bad())?;
    if !glob.contains(':') || n >= usdt_trace::MAX_ARGS {
        return Err(bad());
    }
    Ok((glob.into(), n))
}

fn list(args: &[OsString]) -> Result<i32, Error> {
    let opts = parse_opts(args, Cmd::List)?;
    match (opts.pid, opts.operands.as_slice()) {
        (Some(pid), []) => list_process(pid, opts.sites),
        (None, [binary]) => {
            let probes = read_probes_of(Path::new(binary))?;
            if probes.sites.is_empty() {
                return Err(Error::Invalid(format!("{binary} has no probes")));
            }
            let sigs = typed::signatures([Path::new(binary)]);
            print_table(&probes.sites, &sigs, 0, opts.sites, &|_| None);
            Ok(0)
        }
        _ => Err(Error::Invalid(USAGE.into())),
    }
}

/// A table per mapped object with probes, with semaphore values.
fn list_process(pid: u32, with_sites: bool) -> Result<i32, Error> {
    let mut any = false;
    for object in read_process(pid)? {
        if let Ok(p) = &object.probes {
            warn_skipped(&object.path, p);
        }
        let probes = match object.probes {
            Ok(p) if !p.sites.is_empty() => p,
            Ok(_) => continue,
            Err(e) => {
                eprintln!("usdt: {}: {e}", object.path.display());
                continue;
            }
        };
        any = true;
        println!("{} (load bias {:#x})", object.path.display(), object.bias);
        let value = |addr: u64| read_semaphore(pid, addr.wrapping_add(object.bias)).ok();
        let sigs = typed::signatures([object.open_path.as_path()]);
        print_table(&probes.sites, &sigs, object.bias, with_sites, &value);
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
/// row per site below it.
fn print_table(
    sites: &[Site],
    sigs: &usdt_trace::Signatures,
    bias: u64,
    with_sites: bool,
    semaphore_value: &dyn Fn(u64) -> Option<u16>,
) {
    let features = &KernelFeatures::detect();
    let mut probes: BTreeMap<String, Vec<&Site>> = BTreeMap::new();
    for site in sites {
        probes
            .entry(typed::probe_column(sigs, site))
            .or_default()
            .push(site);
    }
    let width = probes.keys().map(String::len).max().unwrap_or(0).max(5);
    println!(
        "{:width$}  SITES  LAYOUT     SEMAPHORE           ATTACH          ARGUMENTS",
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
            first.args_text.clone()
        } else {
            format!("{} (differs between sites)", first.args_text)
        };
        println!(
            "{name:width$}  {:5}  {layout:9}  {semaphore:18}  {attach:14}  {args}",
            sites.len()
        );
        if with_sites {
            for s in sites {
                let offset = s.location_offset.map_or("-".into(), |o| format!("{o:#x}"));
                println!(
                    "  site {:#x} offset {offset} base {:#x} semaphore {:#x} layout {} args {}",
                    s.location.wrapping_add(bias),
                    s.note_base,
                    s.semaphore.map_or(0, |a| a.wrapping_add(bias)),
                    s.layout,
                    s.args_text
                );
            }
        }
    }
}

/// Set by SIGINT and SIGTERM.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
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

fn count(args: &[OsString]) -> Result<i32, Error> {
    let opts = parse_opts(args, Cmd::Count)?;
    match (opts.pid, opts.command.is_empty(), &opts.all) {
        (Some(pid), true, None) => count_process(pid, &opts),
        (None, false, None) => count_command(&opts),
        (None, true, Some(binary)) => count_all(binary, &opts),
        _ => Err(Error::Invalid(USAGE.into())),
    }
}

/// Files and their sites, as found for a process or a command.
type Objects = Vec<(PathBuf, Vec<Site>)>;

/// Attaches to a running process until it exits or Ctrl-C.
fn count_process(pid: u32, opts: &Opts) -> Result<i32, Error> {
    let objects = process_objects(read_process(pid)?);
    let matched = select(&objects, &opts.operands, &format!("process {pid}"))?;
    let engine = Engine::chosen(opts.engine)?;
    let counter = attach(engine, &objects, opts, Target::Pid(pid))?;
    catch_signals();
    // Only now is every event counting (the kernel raises semaphores a
    // little earlier, while it registers the uprobes).
    eprintln!("usdt: counting {matched} sites of process {pid}; Ctrl-C prints the counts");
    let end = opts.duration.map(|d| Instant::now() + d);
    watch(&counter, opts.interval, || {
        Ok(process_alive(pid) && end.is_none_or(|end| Instant::now() < end))
    })?;
    Ok(0)
}

/// Counts every process that runs (or maps) `binary` until Ctrl-C or the
/// duration ends.
fn count_all(binary: &Path, opts: &Opts) -> Result<i32, Error> {
    let path = absolute(binary);
    let objects: Objects = vec![(path.clone(), read_probes_of(&path)?.sites)];
    let matched = select(&objects, &opts.operands, &path.display().to_string())?;
    let engine = Engine::chosen(opts.engine)?;
    let counter = attach(engine, &objects, opts, Target::AllProcesses)?;
    catch_signals();
    eprintln!(
        "usdt: counting {matched} sites in every process of {}; Ctrl-C prints the counts",
        path.display()
    );
    let end = opts.duration.map(|d| Instant::now() + d);
    watch(&counter, opts.interval, || {
        Ok(end.is_none_or(|end| Instant::now() < end))
    })?;
    Ok(0)
}

/// Starts a command with the uprobes in place; returns its exit code.
fn count_command(opts: &Opts) -> Result<i32, Error> {
    let (program, objects) = command_objects(&opts.command[0])?;
    select(&objects, &opts.operands, &program.display().to_string())?;
    // Not inherited: the kernel fails the program's fork and pthread_create
    // (EFAULT) when it copies uprobe events into the new task.
    let engine = Engine::chosen(opts.engine)?;
    let mut child = PausedCommand::spawn(&program, &opts.command[1..])?;
    let counter = match attach(engine, &objects, opts, Target::Pid(child.pid())) {
        Ok(counter) => counter,
        Err(e) => {
            child.kill();
            return Err(e);
        }
    };
    catch_signals();
    child.start()?;
    let mut status = None;
    watch(&counter, opts.interval, || {
        status = child.try_wait()?;
        Ok(status.is_none())
    })?;
    Ok(status.map_or(130, |s| s.shell_code()))
}

/// Attaches to the sites that match the globs with `engine`.
fn attach(
    engine: Engine,
    objects: &Objects,
    opts: &Opts,
    target: Target,
) -> Result<Counter, Error> {
    let files: Vec<(PathBuf, Vec<&Site>)> = objects
        .iter()
        .map(|(path, sites)| {
            let matched = sites.iter().filter(|s| matches(&opts.operands, s));
            (path.clone(), matched.collect())
        })
        .collect();
    Counter::attach(engine, &files, opts.attach, target)
}

/// The probes of a file, with errors that name it.
/// The program a command runs, and the sites of the program and of the
/// shared libraries it will load.
fn command_objects(command: &OsString) -> Result<(PathBuf, Objects), Error> {
    let program = absolute(&resolve_program(Path::new(command))?);
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
    Ok((program, objects))
}

fn read_probes_of(path: &Path) -> Result<ElfProbes, Error> {
    let probes = read_file_probes(path).map_err(|e| match e {
        Error::Io { .. } => e,
        Error::NotElf => Error::Invalid(format!("{} is not an ELF file", path.display())),
        e => Error::Invalid(format!("{}: {e}", path.display())),
    })?;
    warn_skipped(path, &probes);
    Ok(probes)
}

/// One line per note skipped because it is malformed as a whole.
fn warn_skipped(path: &Path, probes: &ElfProbes) {
    for skipped in &probes.skipped {
        eprintln!("usdt: {}: {skipped}", path.display());
    }
}

/// One line for a file whose probes cannot be read: never skipped in silence.
fn not_attached(path: &Path, e: &Error) {
    eprintln!("usdt: {}: {e}; its probes are not attached", path.display());
}

/// The sites of a process's objects (saying which cannot be read, and
/// which notes are skipped).
fn process_objects(objects: Vec<usdt_trace::MappedObject>) -> Objects {
    objects
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
        .collect()
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.into())
}

fn matches(globs: &[String], site: &Site) -> bool {
    let probe = site.probe();
    globs.is_empty() || globs.iter().any(|g| glob_match(g, &probe))
}

/// How many sites match the globs; an error if none (with the closest names)
/// or if there are no probes at all.
fn select(objects: &Objects, globs: &[String], what: &str) -> Result<usize, Error> {
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
    let near = closest(&globs.join(" "), names.iter().map(String::as_str), 3).join(", ");
    let globs = globs.join(" ");
    Err(Error::Invalid(format!(
        "no probe of {what} matches {globs}; the closest are {near}"
    )))
}

/// Prints counts every `interval` and once more when `running` says the
/// target is gone (`Ok(None)`) or on Ctrl-C.
fn watch(
    counter: &Counter,
    interval: Option<Duration>,
    mut running: impl FnMut() -> Result<bool, Error>,
) -> Result<(), Error> {
    let mut next = interval.map(|i| Instant::now() + i);
    while !INTERRUPTED.load(Ordering::Relaxed) && running()? {
        std::thread::sleep(Duration::from_millis(20));
        if let (Some(at), Some(i)) = (next, interval) {
            if Instant::now() >= at {
                print_counts(counter)?;
                println!();
                next = Some(at + i);
            }
        }
    }
    print_counts(counter)
}

fn print_counts(counter: &Counter) -> Result<(), Error> {
    let counts = counter.probe_counts()?;
    let mut out = std::io::stdout().lock();
    for (probe, n) in counts {
        let _ = writeln!(out, "{probe} {n}");
    }
    let _ = out.flush();
    Ok(())
}
