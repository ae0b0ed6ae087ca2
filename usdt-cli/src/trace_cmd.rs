//! `usdt trace`: one line per probe hit with its decoded arguments.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use usdt_trace::{
    escape_name, globs_match, Attacher, Ended, EngineChoice, Error, Hit, Machine, NewObject,
    Notice, Objects, Picked, Run, Sampler, Session, SessionSampler, Signatures, Value,
};

use crate::args::{CountArgs, TraceArgs};
use crate::count_engine::{self, ENGINE_ENV, TRACE_ENGINE_ENV};
use crate::error::CliError;
use crate::output::{self, catch_signals, interrupted, Stdout, BROKEN_PIPE};
use crate::stacks::{self, Folded};
use crate::target::{
    exit_code, open_session, print_notice, raise_fd_limit, running_where, say_attached,
    select_target, session_name, warn_next,
};
use crate::typed;

pub(crate) fn trace(args: TraceArgs) -> Result<i32, CliError> {
    run(args, None)
}

/// `usdt count --by stack`: the hits per user stack, printed as folded
/// stacks at the end (and drawn with `--svg`): a trace whose hits are
/// counted, not printed.
pub(crate) fn count_stacks(args: CountArgs) -> Result<i32, CliError> {
    let fold = Fold {
        svg: args.svg,
        duration: args.duration,
    };
    let trace = TraceArgs {
        strings: vec![],
        json: false,
        raw: false,
        stack: true,
        limit: None,
        sites: args.sites,
        no_kernel_fetch: false,
        engine: args.engine,
        globs: args.globs,
        target: args.target,
        types: args.types,
    };
    run(trace, Some(fold))
}

/// What `count --by stack` adds to a trace.
struct Fold {
    /// `--svg`: where the flame graph goes.
    svg: Option<PathBuf>,
    /// `--duration`.
    duration: Option<Duration>,
}

fn run(args: TraceArgs, fold: Option<Fold>) -> Result<i32, CliError> {
    catch_signals();
    // clap lets exactly one of -p, --all and COMMAND through.
    let session = open_session(&args.target.place(), &args.globs, args.sites.force_sites)?;
    let what = session_name(&session);
    let matched = select_target(&session, &args.globs, &what)?;
    if session.launcher().is_none() {
        check_strings(session.objects(), &args)?;
    }
    warn_next(args.sites.attach.into(), session.objects(), &args.globs);
    let picked = engine_for(&args, fold.is_some(), session.machines())?;
    // Perf events: one per site, thread (or CPU) and fetch event; Auto's
    // BPF may fall back on them at the first attach.
    raise_fd_limit();
    let duration = fold.as_ref().and_then(|f| f.duration);
    let mut tracing = Tracing::new(&args, &session, picked, matched);
    tracing.out.fold = fold.map(|f| (Folded::default(), f.svg));
    let mut run = Run::new(session).duration(duration);
    let mut ended = run.run(&mut tracing);
    if let Ok(how) = ended {
        tracing.finish(how);
        if tracing.started {
            ended = tracing.out.write_folded(&args.globs, &what).map(|()| how);
        }
    }
    let broken = tracing.out.broken;
    // After --limit or a closed stdout: detach, and let a command finish
    // untraced.
    drop(tracing);
    let code = exit_code(&mut run, ended, &args.globs)?;
    Ok(if broken && interrupted().is_none() {
        BROKEN_PIPE
    } else {
        code
    })
}

/// The engine that samples: `--engine`, else `$USDT_TRACE_ENGINE` (for
/// `count --by stack`, a count: `$USDT_COUNT_ENGINE`), else BPF where the
/// kernel and the files' machines have it (and perf with
/// `--no-kernel-fetch`, which asks for perf's stack copies).
fn engine_for(args: &TraceArgs, fold: bool, machines: &[Machine]) -> Result<Picked, CliError> {
    let env = match fold {
        true => ENGINE_ENV,
        false => TRACE_ENGINE_ENV,
    };
    let engine = match count_engine::chosen(args.engine, env)? {
        EngineChoice::Auto if args.no_kernel_fetch => EngineChoice::Perf,
        engine => engine,
    };
    Ok(count_engine::for_sampling(engine, machines))
}

/// Each `--str` must name an argument of some traced probe.
fn check_strings(objects: &Objects, args: &TraceArgs) -> Result<(), CliError> {
    for (glob, n) in &args.strings {
        let probes: Vec<_> = objects
            .iter()
            .flat_map(|(_, sites)| sites)
            .filter(|s| {
                let probe = s.probe();
                globs_match(&args.globs, &probe) && usdt_trace::glob_match(glob, &probe)
            })
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

/// The uprobes of one `trace` run and where the hits go.
struct Tracing {
    sampler: SessionSampler,
    out: Output,
    /// `--raw`: `argN=` integers even for probes with signatures.
    raw: bool,
    /// How many sites match, for the first line.
    matched: usize,
    /// Whether the target ran with the uprobes attached.
    started: bool,
}

impl Tracing {
    /// `matched`: how many sites match.
    fn new(args: &TraceArgs, session: &Session, picked: Picked, matched: usize) -> Tracing {
        let objects = session.objects();
        let sigs = typed::signatures(
            objects
                .iter()
                .map(|(p, _)| p.as_path())
                .filter(|_| !args.raw),
        );
        let mut sampler = Sampler::new(args.sites.attach.into())
            .kernel_fetch(!args.no_kernel_fetch)
            .engine(picked)
            .stacks(args.stack)
            .per_cpu(true);
        for (glob, n) in &args.strings {
            sampler.add_string_arg(glob, *n);
        }
        let sites = objects.iter().flat_map(|(_, sites)| sites);
        typed::string_args(&mut sampler, &sigs, sites.filter(|s| session.wants(s)));
        Tracing {
            sampler: SessionSampler::new(sampler),
            out: Output::new(args, sigs),
            raw: args.raw,
            matched,
            started: false,
        }
    }

    /// After the run: what the rings hold when the target ended, printed;
    /// after a signal, the probes detached first, then what came after
    /// the signal and what the rings held (not decoded when stdout took
    /// nothing more); what was lost, said.
    fn finish(&mut self, ended: Ended) {
        if !self.started {
            return;
        }
        let sampler = self.sampler.sampler();
        if matches!(ended, Ended::Exited(_) | Ended::ProcessEnded) {
            let out = &mut self.out;
            sampler.drain(|hit| out.hit(&hit));
        }
        if interrupted().is_none() {
            self.out.flush();
            Lost::of(sampler).report();
            return;
        }
        let mut hits = std::mem::take(&mut self.out.held);
        if !self.out.done() {
            sampler.drain(|hit| hits.push(hit));
        }
        let lost = Lost::of(sampler);
        sampler.detach();
        output::detached();
        self.out.detached = true;
        for hit in &hits {
            self.out.hit(hit);
        }
        self.out.flush();
        lost.report();
    }
}

impl Attacher for Tracing {
    type Error = CliError;

    fn library_error(e: &CliError) -> Option<&Error> {
        e.library()
    }

    /// The matching sites of the objects: every thread with BPF, every
    /// process with --all; with perf events, each thread of the process (a
    /// paused command has one).
    fn attach(&mut self, session: &mut Session) -> Result<(), CliError> {
        Ok(self.sampler.attach(session)?)
    }

    fn attach_threads(&mut self, session: &mut Session) -> Result<(), CliError> {
        Ok(self.sampler.attach_threads(session)?)
    }

    /// With its signature records and string arguments.
    fn attach_object(&mut self, object: &NewObject, session: &mut Session) -> Result<(), CliError> {
        if !self.raw {
            self.out.sigs.add_file(&object.open_path);
        }
        typed::string_args(self.sampler.sampler(), &self.out.sigs, &object.sites);
        Ok(self.sampler.attach_object(object, session)?)
    }

    fn attached(
        &mut self,
        object: &NewObject,
        result: Result<(), CliError>,
    ) -> Result<(), CliError> {
        say_attached(object, "tracing its", result);
        Ok(())
    }

    fn notice(&mut self, notice: Notice) {
        print_notice(notice);
    }

    fn ready(&mut self, session: &Session) {
        self.started = true;
        if let Some(at) = running_where(session, true) {
            match self.out.fold {
                Some(_) => eprintln!(
                    "usdt: counting the stacks at {} sites {at}; Ctrl-C prints them",
                    self.matched
                ),
                None => eprintln!("usdt: tracing {} sites {at}; Ctrl-C stops", self.matched),
            }
        }
    }

    /// Prints the hits of the next 50 ms; done at the limit or when stdout
    /// takes nothing more.
    fn tick(&mut self) -> Result<bool, CliError> {
        let out = &mut self.out;
        self.sampler
            .sampler()
            .poll(Duration::from_millis(50), |hit| out.hit(&hit))?;
        self.out.flush();
        Ok(!self.out.done())
    }
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
    /// `count --by stack`: the hits counted per stack, not printed, and
    /// where the flame graph goes.
    fold: Option<(Folded, Option<PathBuf>)>,
}

impl Output {
    fn new(args: &TraceArgs, sigs: Signatures) -> Output {
        Output {
            out: BufWriter::with_capacity(1 << 16, Stdout::new()),
            json: args.json,
            limit: args.limit,
            printed: 0,
            broken: false,
            start_ns: None,
            line: Vec::with_capacity(256),
            sigs,
            held: vec![],
            detached: false,
            fold: None,
        }
    }

    /// With `count --by stack`: the folded stacks on stdout, the flame
    /// graph with `--svg` (of the hits of `globs` in `what`), and how many
    /// hits and stacks on stderr.
    fn write_folded(&mut self, globs: &[String], what: &str) -> Result<(), CliError> {
        let Some((folded, svg)) = &self.fold else {
            return Ok(());
        };
        folded.write(&mut self.out)?;
        self.out.flush().map_err(CliError::Output)?;
        let without = match folded.without {
            0 => String::new(),
            n => format!(" ({n} hits without a stack)"),
        };
        let stacks = folded.lines().len();
        eprintln!("usdt: {} hits in {stacks} stacks{without}", folded.hits());
        if let Some(path) = svg {
            let probes = match globs.is_empty() {
                true => "every probe".to_string(),
                false => escape_name(&globs.join(" ")).into_owned(),
            };
            folded.write_svg(&format!("hits of {probes} in {what}, by stack"), path)?;
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
        if let Some((folded, _)) = &mut self.fold {
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
            Err(e) if output::abandoned(&e) && !self.detached => self.held.push(hit.clone()),
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
