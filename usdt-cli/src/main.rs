//! `usdt`: list the USDT probes of a binary or process, count their hits,
//! trace them with their arguments, write a bpftrace program that prints
//! them, and say what the kernel can do for them.
//!
//! Linux only, as its library `usdt-trace` is: on another target the build
//! stops at one error that says so.

// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::ExitCode;

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
mod bpftrace;
mod closest;
mod count_by;
mod count_cmd;
mod count_engine;
mod error;
mod features;
mod filters;
mod histograms;
mod latency;
mod latency_by;
mod list;
mod output;
mod pictures;
mod serve;
mod stacks;
mod target;
mod trace_cmd;
mod typed;

use args::{Cli, Command};
use error::CliError;
use output::{interrupted, BROKEN_PIPE};

use usdt_trace::escape;

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

fn run(command: Command) -> Result<i32, CliError> {
    typed::declare(command.types())?;
    match command {
        Command::Features(args) => features::features(args),
        Command::List(args) => list::list(args),
        Command::Count(mut args) => match args.by.take() {
            Some(by) if by == "stack" => trace_cmd::count_stacks(args),
            Some(by) => count_by::count_by(args, by),
            None => count_cmd::count(args),
        },
        Command::Latency(args) => latency::latency(args),
        Command::Hist(args) => latency::hist(args),
        Command::Serve(args) => serve::serve(args),
        Command::Trace(args) => trace_cmd::trace(args),
        Command::Bpftrace(args) => bpftrace::bpftrace(args),
    }
}
