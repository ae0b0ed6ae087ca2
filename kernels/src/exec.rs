//! The guest's programs: what the guest command was given ([`Plan`]), and
//! how each check runs a program: with a timeout, its output kept
//! ([`run`], [`Outcome`]) or read as it comes ([`Running`]), one line of
//! the log per program (`logged`). The guest's checks and its values
//! checks both run their programs here.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::build::LayoutBins;

/// What the guest command was given.
#[derive(Clone, Debug)]
pub struct Plan {
    pub usdt: PathBuf,
    pub layouts: Vec<LayoutBins>,
    /// Iterations of each bench row.
    pub bench_iterations: u64,
    /// The longest any one program may run.
    pub timeout: Duration,
    /// Whether the examples `types`, `latency` and `stacks` are beside
    /// the default layout's, whose values and stacks the guest then
    /// checks (g.).
    pub values: bool,
    /// The consumers run beside `usdt` (`bpftrace`, `gdb`): those in the
    /// guest.
    pub consumers: Vec<String>,
}

/// How a program ended, and what it printed.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `exit=0`, `signal=11`, `timeout`, or `not run: ...`.
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.status == "exit=0"
    }
}

/// Runs `program args` with `input` on its stdin, for at most `timeout`.
pub fn run(program: &Path, args: &[&str], input: &str, timeout: Duration) -> Outcome {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                status: format!("not run: {}: {e}", program.display()),
                stdout: String::new(),
                stderr: String::new(),
            }
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break describe(s),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break "timeout".to_string();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break format!("not run: wait: {e}"),
        }
    };
    Outcome {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A program started with its stdin, stdout and stderr piped, whose output
/// lines are read as they come: for a check that talks to it while another
/// program runs.
pub struct Running {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: Receiver<String>,
    err: Receiver<String>,
    /// The lines read so far.
    stdout: String,
    stderr: String,
}

/// The lines of `pipe`, sent one by one until its end.
fn lines_of(pipe: Option<impl Read + Send + 'static>) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Some(pipe) = pipe else { return };
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl Running {
    /// Starts `program args`.
    pub fn start(program: &Path, args: &[&str]) -> Result<Running, String> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("not run: {}: {e}", program.display()))?;
        Ok(Running {
            stdin: child.stdin.take(),
            out: lines_of(child.stdout.take()),
            err: lines_of(child.stderr.take()),
            child,
            stdout: String::new(),
            stderr: String::new(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its next line on stdout, if one comes within `timeout`.
    pub fn line(&mut self, timeout: Duration) -> Option<String> {
        let line = self.out.recv_timeout(timeout).ok()?;
        self.stdout += &format!("{line}\n");
        Some(line)
    }

    /// Its lines on stderr up to the first that starts with `prefix`, if
    /// one comes within `timeout`.
    pub fn err_line_starting(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let start = Instant::now();
        loop {
            let left = timeout.checked_sub(start.elapsed())?;
            let line = self.err.recv_timeout(left).ok()?;
            self.stderr += &format!("{line}\n");
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
    }

    /// Writes `text` to its stdin.
    pub fn send(&mut self, text: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.write_all(text.as_bytes());
            let _ = stdin.flush();
        }
    }

    /// Closes its stdin, waits for its end for at most `timeout` (then
    /// kills it), and gives how it ended with every line it wrote.
    pub fn finish(mut self, timeout: Duration) -> Outcome {
        drop(self.stdin.take());
        let start = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break describe(s),
                Ok(None) if start.elapsed() > timeout => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break "timeout".to_string();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => break format!("not run: wait: {e}"),
            }
        };
        // What it wrote last, until its pipes close (or, were they held
        // open by a process it left behind, a quiet second).
        for (rx, text) in [(&self.out, &mut self.stdout), (&self.err, &mut self.stderr)] {
            while let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
                *text += &format!("{line}\n");
            }
        }
        Outcome {
            status,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

fn describe(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit={c}"),
        (None, Some(sig)) => format!("signal={sig}"),
        _ => format!("{s}"),
    }
}

/// `usdt ARGS -- PROGRAM PROGRAM_ARGS` with the plan's `usdt` and timeout,
/// logged with the program by its file name.
pub(crate) fn usdt_on(
    plan: &Plan,
    args: &[&str],
    program: &Path,
    program_args: &[&str],
    log: &mut Vec<String>,
) -> Outcome {
    let path = program.to_string_lossy();
    let mut all = args.to_vec();
    all.extend(["--", &path]);
    all.extend(program_args);
    let o = run(&plan.usdt, &all, "", plan.timeout);
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    let what = format!(
        "usdt {} -- {name} {}",
        args.join(" "),
        program_args.join(" ")
    );
    logged(log, what, &o);
    o
}

pub(crate) fn logged(log: &mut Vec<String>, what: String, o: &Outcome) {
    log.push(format!("{what}: {}", o.status));
    if !o.ok() {
        let tail: Vec<&str> = o.stderr.lines().rev().take(3).collect();
        for l in tail.into_iter().rev() {
            log.push(format!("  {l}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_runs_too_long_is_stopped() {
        let o = run(Path::new("sleep"), &["5"], "", Duration::from_millis(200));
        assert_eq!(o.status, "timeout");
        let o = run(
            Path::new("sh"),
            &["-c", "read x; echo got $x; exit 3"],
            "7\n",
            Duration::from_secs(5),
        );
        assert_eq!(
            (o.status.as_str(), o.stdout.as_str()),
            ("exit=3", "got 7\n")
        );
    }
}
