//! `usdt trace`: one line per probe hit with its decoded arguments.

use std::ffi::OsString;
use std::io::{BufWriter, Stdout, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use usdt_trace::{
    process_alive, process_threads, read_process, Error, Hit, PausedCommand, Sampler, Signatures,
    Target, Value,
};

use crate::{
    catch_signals, command_objects, matches, parse_opts, process_objects, select, typed, Cmd,
    Objects, Opts, INTERRUPTED, USAGE,
};

pub(crate) fn trace(args: &[OsString]) -> Result<i32, Error> {
    let opts = parse_opts(args, Cmd::Trace)?;
    match (opts.pid, opts.command.is_empty()) {
        (Some(pid), true) => trace_process(pid, &opts),
        (None, false) => trace_command(&opts),
        _ => Err(Error::Invalid(USAGE.into())),
    }
}

fn sampler(opts: &Opts, objects: &Objects, sigs: &Signatures) -> Sampler {
    let mut sampler = Sampler::new(opts.attach).kernel_fetch(!opts.no_tracefs);
    for (glob, n) in &opts.strings {
        sampler = sampler.string_arg(glob, *n);
    }
    let sites = objects.iter().flat_map(|(_, sites)| sites);
    typed::string_args(sampler, sigs, sites.filter(|s| matches(&opts.operands, s)))
}

/// Each `--str` must name an argument of some traced probe.
fn check_strings(objects: &Objects, opts: &Opts) -> Result<(), Error> {
    for (glob, n) in &opts.strings {
        let probes: Vec<_> = objects
            .iter()
            .flat_map(|(_, sites)| sites)
            .filter(|s| matches(&opts.operands, s) && usdt_trace::glob_match(glob, &s.probe()))
            .collect();
        let Some(first) = probes.first() else {
            return Err(Error::Invalid(format!(
                "--str {glob}:{n} matches no traced probe"
            )));
        };
        if !probes.iter().any(|s| s.args.len() > *n) {
            return Err(Error::Invalid(format!(
                "--str {glob}:{n} names argument {n}, but {} has {} arguments (counted from 0)",
                first.probe(),
                first.args.len()
            )));
        }
    }
    Ok(())
}

fn attach_all(
    sampler: &mut Sampler,
    objects: &Objects,
    globs: &[String],
    pid: u32,
) -> Result<(), Error> {
    for (path, sites) in objects {
        let sites = sites.iter().filter(|s| matches(globs, s));
        sampler.attach(path, sites, Target::Pid(pid))?;
    }
    Ok(())
}

/// Attaches to a running process until it exits, Ctrl-C or the limit.
///
/// A uprobe perf event samples only the thread it was opened for: one set
/// of per-CPU events per thread the process has, and for threads it starts
/// later as they appear.
fn trace_process(pid: u32, opts: &Opts) -> Result<i32, Error> {
    let objects = process_objects(read_process(pid)?);
    let matched = select(&objects, &opts.operands, &format!("process {pid}"))?;
    check_strings(&objects, opts)?;
    raise_fd_limit();
    let sigs = typed::signatures(
        objects
            .iter()
            .map(|(p, _)| p.as_path())
            .filter(|_| !opts.raw),
    );
    let mut sampler = sampler(opts, &objects, &sigs).per_cpu(true);
    let mut threads = Threads::new(pid);
    threads.attach_new(&mut sampler, &objects, &opts.operands)?;
    catch_signals();
    eprintln!(
        "usdt: tracing {matched} sites of process {pid} ({} threads); Ctrl-C stops",
        threads.seen.len()
    );
    let mut out = Output::new(opts, sigs);
    follow(&mut sampler, &mut out, |sampler| {
        threads.attach_new(sampler, &objects, &opts.operands)?;
        Ok(process_alive(pid))
    })?;
    report_lost(&sampler);
    Ok(0)
}

/// The threads of a traced process: a uprobe perf event samples only the
/// thread it was opened for, so each thread gets its own events, and threads
/// started later get theirs when [`Threads::attach_new`] next looks (their
/// hits before that are not seen).
struct Threads {
    pid: u32,
    seen: std::collections::BTreeSet<u32>,
}

impl Threads {
    fn new(pid: u32) -> Threads {
        Threads {
            pid,
            seen: Default::default(),
        }
    }

    /// Attaches to the threads not attached yet.
    fn attach_new(
        &mut self,
        sampler: &mut Sampler,
        objects: &Objects,
        globs: &[String],
    ) -> Result<(), Error> {
        let Ok(tids) = process_threads(self.pid) else {
            return Ok(()); // the process is gone: the caller notices
        };
        for tid in tids {
            if !self.seen.insert(tid) {
                continue;
            }
            match attach_all(sampler, objects, globs, tid) {
                // A thread that ended meanwhile.
                Err(Error::NoProcess(_)) if tid != self.pid => continue,
                other => other?,
            }
        }
        Ok(())
    }
}

/// Many threads times sites times CPUs is many descriptors: allow as many
/// as the hard limit does.
fn raise_fd_limit() {
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

/// Starts a command with the uprobes in place; returns its exit code.
fn trace_command(opts: &Opts) -> Result<i32, Error> {
    let (program, objects) = command_objects(&opts.command[0])?;
    select(&objects, &opts.operands, &program.display().to_string())?;
    check_strings(&objects, opts)?;
    raise_fd_limit();
    let sigs = typed::signatures(
        objects
            .iter()
            .map(|(p, _)| p.as_path())
            .filter(|_| !opts.raw),
    );
    let mut sampler = sampler(opts, &objects, &sigs).per_cpu(true);
    let mut child = PausedCommand::spawn(&program, &opts.command[1..])?;
    if let Err(e) = attach_all(&mut sampler, &objects, &opts.operands, child.pid()) {
        child.kill();
        return Err(e);
    }
    catch_signals();
    child.start()?;
    let mut out = Output::new(opts, sigs);
    let mut status = None;
    let mut threads = Threads::new(child.pid());
    threads.seen.insert(child.pid());
    follow(&mut sampler, &mut out, |sampler| {
        status = child.try_wait()?;
        if status.is_none() {
            threads.attach_new(sampler, &objects, &opts.operands)?;
        }
        Ok(status.is_none())
    })?;
    report_lost(&sampler);
    // After --limit: detach and let the command finish untraced.
    drop(sampler);
    if status.is_none() && !INTERRUPTED.load(Ordering::Relaxed) {
        status = Some(child.wait()?);
    }
    Ok(status.map_or(130, |s| s.shell_code()))
}

/// Prints hits until the target is gone (then everything left in the
/// rings), Ctrl-C, or the limit.
fn follow(
    sampler: &mut Sampler,
    out: &mut Output,
    mut running: impl FnMut(&mut Sampler) -> Result<bool, Error>,
) -> Result<(), Error> {
    while !INTERRUPTED.load(Ordering::Relaxed) && !out.done() {
        if !running(sampler)? {
            sampler.drain(|hit| out.hit(&hit));
            break;
        }
        sampler.poll(Duration::from_millis(50), |hit| out.hit(&hit))?;
        out.flush();
    }
    if INTERRUPTED.load(Ordering::Relaxed) {
        sampler.drain(|hit| out.hit(&hit));
    }
    out.flush();
    Ok(())
}

fn report_lost(sampler: &Sampler) {
    let lost = sampler.lost();
    if lost > 0 {
        eprintln!(
            "usdt: {lost} samples were lost because the ring buffer ({} KiB per CPU) was full",
            sampler.ring_bytes() / 1024
        );
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
}

impl Output {
    fn new(opts: &Opts, sigs: Signatures) -> Output {
        Output {
            out: BufWriter::with_capacity(1 << 16, std::io::stdout()),
            json: opts.json,
            limit: opts.limit,
            printed: 0,
            broken: false,
            start_ns: None,
            line: Vec::with_capacity(256),
            sigs,
        }
    }

    fn done(&self) -> bool {
        self.broken || self.limit.is_some_and(|l| self.printed >= l)
    }

    fn hit(&mut self, hit: &Hit) {
        if self.done() {
            return;
        }
        let result = if self.json {
            self.json_line(hit)
        } else {
            self.text_line(hit)
        };
        self.printed += 1;
        if result.is_err() {
            self.broken = true;
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
        line.extend_from_slice(hit.provider.as_bytes());
        line.push(b':');
        line.extend_from_slice(hit.name.as_bytes());
        if let Some(typed) = typed::text(&self.sigs, hit) {
            if !typed.is_empty() {
                line.push(b' ');
                line.extend_from_slice(typed.as_bytes());
            }
            line.push(b'\n');
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
        self.out.write_all(&self.line)
    }

    fn json_line(&mut self, hit: &Hit) -> std::io::Result<()> {
        let args = typed::json(&self.sigs, hit)
            .unwrap_or_else(|| hit.args.iter().map(json_value).collect());
        let line = serde_json::json!({
            "time_ns": hit.time_ns,
            "pid": hit.pid,
            "tid": hit.tid,
            "probe": hit.probe(),
            "args": args,
        });
        writeln!(self.out, "{line}")
    }

    fn flush(&mut self) {
        if self.out.flush().is_err() {
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
