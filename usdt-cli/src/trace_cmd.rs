//! `usdt trace`: one line per probe hit with its decoded arguments.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use usdt_trace::{
    escape_name, process_alive, process_threads, Error, Hit, Machine, Objects, Picked, Sampler,
    Session, Signatures, Site, Target, Value,
};

use crate::args::{CountArgs, TraceArgs};
use crate::count_engine::{Engine, ENGINE_ENV, TRACE_ENGINE_ENV};
use crate::error::CliError;
use crate::output::Stdout;
use crate::stacks::{self, Folded};
use crate::{
    catch_signals, finish_command, interrupted, matches, open_session, print_notices,
    raise_fd_limit, say_attached, select, session_name, typed, warn_next, write_error, Opts,
    BROKEN_PIPE,
};

pub(crate) fn trace(args: TraceArgs) -> Result<i32, CliError> {
    run(Opts::from(args))
}

/// `usdt count --by stack`: the hits per user stack, printed as folded
/// stacks at the end (and drawn with `--svg`).
pub(crate) fn count_stacks(args: CountArgs) -> Result<i32, CliError> {
    run(Opts {
        stack: true,
        fold: true,
        ..Opts::from(args)
    })
}

fn run(opts: Opts) -> Result<i32, CliError> {
    catch_signals();
    // clap lets exactly one of -p, --all and COMMAND through.
    let mut session = open_session(&opts.place, &opts.operands, opts.force_sites)?;
    let what = session_name(&session);
    let matched = select(&session, &opts.operands, &what)?;
    check_strings(session.objects(), &opts)?;
    warn_next(opts.attach, session.objects(), &opts.operands);
    let command = session.exec_path().is_some();
    if command {
        session.spawn()?;
    }
    let picked = engine_for(&opts, session.machines())?;
    // Perf events: one per site, thread (or CPU) and fetch event; Auto's
    // BPF may fall back on them at the first attach.
    raise_fd_limit();
    let mut tracing = Tracing::new(&opts, session, &picked);
    if let Some(sig) = tracing.attach()? {
        // A command not started is killed with the session.
        return Ok(128 + sig);
    }
    if command {
        return trace_command(tracing);
    }
    // Stopped at exec from now on (and what the process did while
    // attaching is caught up on) before saying it traces.
    tracing.attach_new()?;
    let (doing, stops) = match opts.fold {
        true => ("counting the stacks at", "Ctrl-C prints them"),
        false => ("tracing", "Ctrl-C stops"),
    };
    // A duration past what the clock can count is no end at all.
    let end = opts.duration.and_then(|d| Instant::now().checked_add(d));
    let not_over = move || end.is_none_or(|end| Instant::now() < end);
    match tracing.session.target() {
        Target::Pid(pid) => {
            let threads = process_threads(pid).map_or(0, |t| t.len());
            eprintln!(
                "usdt: {doing} {matched} sites of process {pid} ({threads} threads); {stops}"
            );
            tracing.follow(|_| Ok(process_alive(pid) && not_over()))?;
        }
        Target::AllProcesses => {
            eprintln!("usdt: {doing} {matched} sites in every process of {what}; {stops}");
            tracing.follow(|_| Ok(not_over()))?;
        }
    }
    tracing.out.finish(&what)?;
    if let Some(sig) = interrupted() {
        return Ok(128 + sig);
    }
    if tracing.out.broken {
        return Ok(BROKEN_PIPE);
    }
    Ok(0)
}

/// The engine that samples: `--engine`, else `$USDT_TRACE_ENGINE`, else
/// BPF where the kernel and the files' machines have it (and perf with
/// `--no-kernel-fetch`, which asks for perf's stack copies).
fn engine_for(opts: &Opts, machines: &[Machine]) -> Result<Picked, CliError> {
    // `count --by stack` is a count: its engine is count's.
    let env = match opts.fold {
        true => ENGINE_ENV,
        false => TRACE_ENGINE_ENV,
    };
    let engine = match Engine::chosen(opts.engine, env)? {
        Engine::Auto if opts.no_kernel_fetch => Engine::Perf,
        engine => engine,
    };
    Ok(engine.for_sampling(machines))
}

/// Each `--str` must name an argument of some traced probe.
fn check_strings(objects: &Objects, opts: &Opts) -> Result<(), CliError> {
    for (glob, n) in &opts.strings {
        let probes: Vec<_> = objects
            .iter()
            .flat_map(|(_, sites)| sites)
            .filter(|s| matches(&opts.operands, s) && usdt_trace::glob_match(glob, &s.probe()))
            .collect();
        let Some(first) = probes.first() else {
            return Err(CliError::StrMatchesNothing {
                glob: glob.clone(),
                n: *n,
            });
        };
        if !probes.iter().any(|s| s.args.len() > *n) {
            return Err(CliError::StrPastArgs {
                glob: glob.clone(),
                n: *n,
                probe: first.probe(),
                args: first.args.len(),
            });
        }
    }
    Ok(())
}

/// The uprobes of one `trace` run, the session that owns what they are
/// attached to, and where the hits go.
struct Tracing<'o> {
    opts: &'o Opts,
    pid: u32,
    sampler: Sampler,
    out: Output,
    /// With perf events, attach to each thread (an event samples only its
    /// thread); not with BPF, whose link covers every thread.
    per_thread: bool,
    session: Session,
}

impl<'o> Tracing<'o> {
    fn new(opts: &'o Opts, session: Session, picked: &Picked) -> Tracing<'o> {
        let objects = session.objects();
        let sigs = typed::signatures(
            objects
                .iter()
                .map(|(p, _)| p.as_path())
                .filter(|_| !opts.raw),
        );
        let mut sampler = Sampler::new(opts.attach)
            .kernel_fetch(!opts.no_kernel_fetch)
            .engine(picked.clone())
            .stacks(opts.stack)
            .per_cpu(true);
        for (glob, n) in &opts.strings {
            sampler.add_string_arg(glob, *n);
        }
        let sites = objects.iter().flat_map(|(_, sites)| sites);
        typed::string_args(
            &mut sampler,
            &sigs,
            sites.filter(|s| matches(&opts.operands, s)),
        );
        let pid = match session.target() {
            Target::Pid(pid) => pid,
            Target::AllProcesses => 0,
        };
        Tracing {
            opts,
            pid,
            sampler,
            out: Output::new(opts, sigs),
            per_thread: !picked.bpf && pid != 0,
            session,
        }
    }

    /// Attaches the matching sites of the objects (every thread with BPF,
    /// every process with --all; with perf events, the process's threads
    /// not attached yet: a paused command has one);
    /// `Some(signal)` when a signal stopped it.
    fn attach(&mut self) -> Result<Option<i32>, CliError> {
        if self.per_thread {
            let tids = match self.session.child() {
                // Paused: its one thread.
                Some(_) => vec![self.pid],
                None => self.session.new_threads(),
            };
            return self.attach_threads(tids);
        }
        let target = self.session.target();
        for (path, sites) in self.session.matched() {
            if let Some(sig) = interrupted() {
                return Ok(Some(sig));
            }
            attach_sites(&mut self.sampler, &path, &sites, target)?;
            // Auto's BPF proved unsupported at the first attach: perf
            // events sample one thread each.
            self.per_thread = !self.sampler.uses_bpf() && self.pid != 0;
            if self.per_thread {
                break;
            }
        }
        if self.per_thread {
            return self.attach();
        }
        Ok(interrupted())
    }

    /// With perf events, attaches to the threads `tids`; `Some(signal)`
    /// when a signal stopped it.
    fn attach_threads(&mut self, tids: Vec<u32>) -> Result<Option<i32>, CliError> {
        for tid in tids {
            match attach_all(
                &mut self.sampler,
                self.session.objects(),
                &self.opts.operands,
                tid,
            ) {
                // A thread that ended meanwhile.
                Err(CliError::Trace(e)) if e.no_process().is_some() && tid != self.pid => continue,
                Ok(Some(sig)) => return Ok(Some(sig)),
                other => other?,
            };
        }
        Ok(None)
    }

    /// Attaches to the threads started and the objects mapped since the
    /// last look.
    fn attach_new(&mut self) -> Result<(), CliError> {
        let globs = &self.opts.operands;
        if self.per_thread {
            let tids = self.session.new_threads();
            self.attach_threads(tids)?;
        }
        let found = self.session.new_objects();
        print_notices(&mut self.session);
        for object in found {
            if !self.opts.raw {
                self.out.sigs.add_file(&object.open_path);
            }
            typed::string_args(&mut self.sampler, &self.out.sigs, &object.sites);
            let file = [(object.open_path.clone(), object.sites.clone())];
            let attached = match self.per_thread {
                true => self.session.threads().iter().try_for_each(|tid| {
                    match attach_all(&mut self.sampler, &file, globs, *tid) {
                        // A thread that ended meanwhile.
                        Err(CliError::Trace(Error::NoProcess(_))) if *tid != self.pid => Ok(()),
                        other => other.map(drop),
                    }
                }),
                false => {
                    let sites: Vec<&Site> = file[0].1.iter().collect();
                    let target = self.session.target();
                    attach_sites(&mut self.sampler, &file[0].0, &sites, target)
                }
            };
            say_attached(&object, "tracing its", attached.map_err(|e| e.to_string()));
        }
        // A process stopped at an exec has its new program mapped.
        self.sampler.refresh_stacks();
        self.session.resume();
        Ok(())
    }

    /// Prints hits until `running` says the target is gone (then everything
    /// left in the rings), Ctrl-C, or the limit; meanwhile attaches to new
    /// threads and objects.
    fn follow(
        &mut self,
        mut running: impl FnMut(&mut Session) -> Result<bool, Error>,
    ) -> Result<(), CliError> {
        while interrupted().is_none() && !self.out.done() {
            if !running(&mut self.session)? {
                self.sampler.drain(|hit| self.out.hit(&hit));
                break;
            }
            self.attach_new()?;
            self.sampler
                .poll(Duration::from_millis(50), |hit| self.out.hit(&hit))?;
            self.out.flush();
        }
        if interrupted().is_some() {
            // Detach first, then print what came after the signal and what
            // the rings held (not decoded when stdout took nothing more).
            let mut hits = std::mem::take(&mut self.out.held);
            if !self.out.done() {
                self.sampler.drain(|hit| hits.push(hit));
            }
            let lost = Lost::of(&self.sampler);
            self.sampler.detach();
            crate::output::detached();
            self.out.detached = true;
            for hit in &hits {
                self.out.hit(hit);
            }
            self.out.flush();
            lost.report();
            return Ok(());
        }
        self.out.flush();
        Lost::of(&self.sampler).report();
        Ok(())
    }
}

/// Attaches `sites` of the file at `path` for `target`: every thread of a
/// process (BPF: one link), or every process (--all).
fn attach_sites(
    sampler: &mut Sampler,
    path: &Path,
    sites: &[&Site],
    target: Target,
) -> Result<(), CliError> {
    match sampler.attach(path, sites.iter().copied(), target) {
        // Ctrl-C reaches the paused command too.
        Err(e) if e.no_process().is_some() && interrupted().is_some() => Ok(()),
        other => Ok(other?),
    }
}

/// Attaches to the matching sites for one thread, one site at a time:
/// `Some(signal)` when a signal stopped it.
fn attach_all(
    sampler: &mut Sampler,
    objects: &[(std::path::PathBuf, Vec<Site>)],
    globs: &[String],
    pid: u32,
) -> Result<Option<i32>, CliError> {
    for (path, sites) in objects {
        for site in sites.iter().filter(|s| matches(globs, s)) {
            if let Some(sig) = interrupted() {
                return Ok(Some(sig));
            }
            match sampler.attach(path, [site], Target::Pid(pid)) {
                // Ctrl-C reaches the paused command too.
                Err(e) if e.no_process().is_some() && interrupted().is_some() => {
                    return Ok(interrupted())
                }
                other => other?,
            }
        }
    }
    Ok(interrupted())
}

/// Runs the paused command, attached, and prints hits until it ends;
/// returns its exit code.
fn trace_command(mut tracing: Tracing<'_>) -> Result<i32, CliError> {
    tracing.session.start()?;
    let mut status = None;
    let followed = tracing.follow(|session| {
        if let Some(child) = session.child() {
            status = child.try_wait()?;
        }
        Ok(status.is_none())
    });
    let broken = tracing.out.broken;
    // After --limit or a closed stdout: detach and let the command finish
    // untraced.
    let mut session = tracing.session;
    drop(tracing.sampler);
    if followed.is_ok() {
        let what = session_name(&session);
        tracing.out.finish(&what)?;
    }
    let code = match session.child() {
        Some(child) => finish_command(child, status, followed)?,
        None => followed.map(|()| 0)?,
    };
    Ok(if broken && interrupted().is_none() {
        BROKEN_PIPE
    } else {
        code
    })
}

/// What a sampler lost, read before it detaches.
struct Lost {
    lost: u64,
    bpf: bool,
    ring_bytes: u64,
}

impl Lost {
    fn of(sampler: &Sampler) -> Lost {
        Lost {
            lost: sampler.lost(),
            bpf: sampler.uses_bpf(),
            ring_bytes: sampler.ring_bytes(),
        }
    }

    fn report(&self) {
        if self.lost > 0 {
            let per = if self.bpf { "" } else { " per CPU" };
            eprintln!(
                "usdt: {} samples were lost because the ring buffer ({} KiB{per}) was full",
                self.lost,
                self.ring_bytes / 1024
            );
        }
    }
}

/// Where hits go: text or JSON lines on stdout, up to the limit.
struct Output {
    out: BufWriter<Stdout>,
    json: bool,
    limit: Option<u64>,
    printed: u64,
    broken: bool,
    start_ns: Option<u64>,
    line: Vec<u8>,
    /// Recorded probes print `name=value` by kind.
    sigs: Signatures,
    /// Hits that came after a signal, before the probes were detached:
    /// printed once they are.
    held: Vec<Hit>,
    /// Whether the probes are detached after a signal.
    detached: bool,
    /// `count --by stack`: hits counted per stack, not printed.
    folded: Option<Folded>,
    /// `count --by stack --svg`: where the flame graph goes.
    svg: Option<PathBuf>,
    /// The probe globs, for the flame graph's title.
    globs: Vec<String>,
}

impl Output {
    fn new(opts: &Opts, sigs: Signatures) -> Output {
        Output {
            out: BufWriter::with_capacity(1 << 16, Stdout::new()),
            json: opts.json,
            limit: opts.limit,
            printed: 0,
            broken: false,
            start_ns: None,
            line: Vec::with_capacity(256),
            sigs,
            held: vec![],
            detached: false,
            folded: opts.fold.then(Folded::default),
            svg: opts.svg.clone(),
            globs: opts.operands.clone(),
        }
    }

    /// With `count --by stack`: the folded stacks on stdout, the flame
    /// graph with `--svg`, and how many hits and stacks on stderr.
    fn finish(&mut self, what: &str) -> Result<(), CliError> {
        let Some(folded) = &self.folded else {
            return Ok(());
        };
        folded.write(&mut self.out)?;
        self.out.flush().map_err(write_error)?;
        let stacks = folded.lines().len();
        eprintln!(
            "usdt: {} hits in {stacks} stacks{}",
            folded.hits(),
            match folded.without {
                0 => String::new(),
                n => format!(" ({n} hits without a stack)"),
            }
        );
        if let Some(path) = &self.svg {
            let globs = match self.globs.is_empty() {
                true => "every probe".to_string(),
                false => self.globs.join(" "),
            };
            let title = format!("hits of {} in {what}, by stack", escape_name(&globs));
            folded.write_svg(&title, path)?;
        }
        Ok(())
    }

    /// Whether output waits until the probes are detached: after a
    /// signal, nothing is written while they are attached.
    fn holding(&self) -> bool {
        interrupted().is_some() && !self.detached
    }

    fn done(&self) -> bool {
        self.broken || self.limit.is_some_and(|l| self.printed >= l)
    }

    fn hit(&mut self, hit: &Hit) {
        if self.done() {
            return;
        }
        if self.holding() {
            self.held.push(hit.clone());
            return;
        }
        if let Some(folded) = &mut self.folded {
            folded.add(hit.stack.as_ref());
            return;
        }
        let result = if self.json {
            self.json_line(hit)
        } else {
            self.text_line(hit)
        };
        match result {
            Ok(()) => self.printed += 1,
            // The signal came while this line waited for stdout: it is
            // printed once the probes are detached.
            Err(e) if crate::output::abandoned(&e) && !self.detached => self.held.push(hit.clone()),
            Err(_) => {
                self.printed += 1;
                self.broken = true;
            }
        }
    }

    /// `SECS.NANOS PID/TID provider:name arg0=V ...`, time since the first
    /// hit; formatted by hand (a million lines a second in a debug build).
    fn text_line(&mut self, hit: &Hit) -> std::io::Result<()> {
        let start = *self.start_ns.get_or_insert(hit.time_ns);
        let t = hit.time_ns.saturating_sub(start);
        let line = &mut self.line;
        line.clear();
        push_uint(line, t / 1_000_000_000, 1);
        line.push(b'.');
        push_uint(line, t % 1_000_000_000, 9);
        line.push(b' ');
        push_uint(line, hit.pid.into(), 1);
        line.push(b'/');
        push_uint(line, hit.tid.into(), 1);
        line.push(b' ');
        line.extend_from_slice(escape_name(&hit.provider).as_bytes());
        line.push(b':');
        line.extend_from_slice(escape_name(&hit.name).as_bytes());
        if let Some(typed) = typed::text(&self.sigs, hit) {
            if !typed.is_empty() {
                line.push(b' ');
                line.extend_from_slice(typed.as_bytes());
            }
            line.push(b'\n');
            if let Some(stack) = &hit.stack {
                stacks::push_stack(line, stack);
            }
            return self.out.write_all(&self.line);
        }
        for (i, arg) in hit.args.iter().enumerate() {
            line.push(b' ');
            line.extend_from_slice(b"arg");
            push_uint(line, i as u64, 1);
            line.push(b'=');
            match arg {
                Value::Int(n) if *n < 0 => {
                    line.push(b'-');
                    push_uint(line, n.unsigned_abs() as u64, 1);
                }
                Value::Int(n) if *n <= u64::MAX as i128 => push_uint(line, *n as u64, 1),
                other => line.extend_from_slice(other.to_string().as_bytes()),
            }
        }
        line.push(b'\n');
        if let Some(stack) = &hit.stack {
            stacks::push_stack(line, stack);
        }
        self.out.write_all(&self.line)
    }

    fn json_line(&mut self, hit: &Hit) -> std::io::Result<()> {
        let args = typed::json(&self.sigs, hit)
            .unwrap_or_else(|| hit.args.iter().map(json_value).collect());
        let mut line = serde_json::json!({
            "time_ns": hit.time_ns,
            "pid": hit.pid,
            "tid": hit.tid,
            "probe": hit.probe(),
            "args": args,
        });
        if let Some(stack) = &hit.stack {
            line["stack"] = stacks::json_stack(stack);
        }
        writeln!(self.out, "{line}")
    }

    fn flush(&mut self) {
        if !self.holding() && self.out.flush().is_err() {
            self.broken = true;
        }
    }
}

/// Integers and floats as JSON numbers (exact: serde_json keeps 64-bit
/// integers), strings as JSON strings (invalid UTF-8 replaced), 16 and
/// 24-byte values as hex strings, unreadable (and NaN, infinities) as null.
fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Int(n) => match (i64::try_from(*n), u64::try_from(*n)) {
            (Ok(i), _) => i.into(),
            (_, Ok(u)) => u.into(),
            _ => serde_json::Value::Null,
        },
        Value::Str { bytes, .. } => String::from_utf8_lossy(bytes).into_owned().into(),
        Value::F32(_) | Value::F64(_) => v.float().map_or(serde_json::Value::Null, Into::into),
        Value::Bytes(_) => v.to_string().trim_start_matches("hex:").into(),
        Value::Unreadable(_) | Value::Unavailable(_) => serde_json::Value::Null,
    }
}

/// Appends `n` in decimal, zero-padded to `width` digits.
fn push_uint(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    while n > 0 || digits.len() - i < width {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits[i..]);
}
