//! The load and fork checks: BPF programs that verify every hit's
//! arguments in the kernel (`on_load_tick`, `on_fork_tick` in usdt.bpf.c)
//! and count hits per thread, so none is lost to a full buffer.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use libbpf_rs::{MapCore, MapFlags};

use crate::skel::UsdtSkel;
use crate::Result;

const BAD_CHECK: u32 = 8;
const BAD_ORDER: u32 = 9;
const BAD_THREAD: u32 = 10;
const ARG_ERRORS: u32 = 11;

struct Program {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Program {
    fn start(bin: &Path, arg: &str) -> Result<Program> {
        let mut child = Command::new(bin)
            .arg(arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        Ok(Program { child, lines })
    }

    fn line(&mut self) -> Result<String> {
        Ok(self.lines.next().ok_or("the program ended early")??)
    }

    fn ask(&mut self, command: &str) -> Result<String> {
        writeln!(self.child.stdin.as_mut().ok_or("no stdin")?, "{command}")?;
        self.line()
    }
}

fn stat(skel: &UsdtSkel<'_>, key: u32) -> Result<u64> {
    let value = skel
        .maps
        .stats
        .lookup(&key.to_ne_bytes(), MapFlags::ANY)?
        .ok_or("no such stat")?;
    Ok(u64::from_ne_bytes(value[..8].try_into()?))
}

fn hits(skel: &UsdtSkel<'_>) -> Result<Vec<u64>> {
    (0..8).map(|t| stat(skel, t)).collect()
}

/// No hit had a wrong argument, an unknown thread or an iteration out of
/// order, and libbpf read every argument.
fn check_violations(skel: &UsdtSkel<'_>) -> Result<()> {
    for (key, what) in [
        (BAD_CHECK, "wrong checksum"),
        (BAD_ORDER, "iteration out of order"),
        (BAD_THREAD, "unknown thread"),
        (ARG_ERRORS, "bpf_usdt_arg failed"),
    ] {
        let n = stat(skel, key)?;
        if n != 0 {
            return Err(format!("{n} hits with {what}").into());
        }
    }
    Ok(())
}

fn per_thread_runs(line: &str) -> Result<Vec<u64>> {
    let per = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("per="))
        .ok_or_else(|| format!("no per= in {line:?}"))?;
    Ok(per
        .split(',')
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()?)
}

/// `load BINARY`: 8 threads, 50 attach/detach windows through libbpf.
pub fn load(skel: &UsdtSkel<'_>, bin: &Path) -> Result<()> {
    let mut load = Program::start(bin, "8")?;
    println!("program {}", load.line()?);
    let pid = load.child.id() as i32;
    let (mut total_hits, mut total_runs) = (0, 0);
    for w in 0..50u64 {
        let runs_before = per_thread_runs(&load.ask("runs")?)?;
        let hits_before = hits(skel)?;
        let link = skel
            .progs
            .on_load_tick
            .attach_usdt(pid, bin, "load", "tick")?;
        std::thread::sleep(Duration::from_millis(10 + w % 5 * 5));
        drop(link);
        // Detached: no program runs any more, every hit is counted.
        let hits_after = hits(skel)?;
        let runs_after = per_thread_runs(&load.ask("runs")?)?;
        for t in 0..8 {
            let hits = hits_after[t] - hits_before[t];
            let runs = runs_after[t] - runs_before[t];
            if hits > runs + 1 {
                return Err(
                    format!("window {w}, thread {t}: {hits} hits, {runs} closure runs").into(),
                );
            }
            total_hits += hits;
            total_runs += runs;
        }
    }
    check_violations(skel)?;
    println!(
        "load windows=50 hits={total_hits} runs={total_runs} threads_hit={}",
        hits(skel)?.iter().filter(|&&h| h > 0).count()
    );
    writeln!(load.child.stdin.as_mut().ok_or("no stdin")?, "stop")?;
    for _ in 0..9 {
        println!("program {}", load.line()?);
    }
    println!("program {}", load.ask("burst 10000")?);
    drop(load.child.stdin.take());
    println!("exit {}", load.child.wait()?);
    Ok(())
}

/// `fork BINARY`: the fork example, traced through libbpf (which attaches
/// at Location + 1 on this kernel).
pub fn fork(skel: &UsdtSkel<'_>, bin: &Path) -> Result<()> {
    let mut fork = Program::start(bin, "100000")?;
    println!("program {}", fork.line()?);
    let pid = fork.child.id() as i32;
    let link = skel
        .progs
        .on_fork_tick
        .attach_usdt(pid, bin, "fork", "tick")?;
    let mut line = fork.ask("")?;
    loop {
        println!("program {line}");
        if line.starts_with("parent ") {
            break;
        }
        line = fork.line()?;
    }
    drop(link);
    check_violations(skel)?;
    let who: Vec<u64> = (0..3).map(|w| stat(skel, w)).collect::<Result<_>>()?;
    println!(
        "fork hits before={} parent={} child={}",
        who[0], who[1], who[2]
    );
    if !line.contains("fork-failed") {
        println!("program {}", fork.ask("")?);
    }
    drop(fork.child.stdin.take());
    println!("exit {}", fork.child.wait()?);
    Ok(())
}
