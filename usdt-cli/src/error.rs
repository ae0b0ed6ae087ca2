//! What only the command knows can go wrong: its own conditions (no probes,
//! no match, a bad `--str`), a failed write of its output, and the library's
//! errors as they are.

use std::fmt;
use std::io;

/// An error of the `usdt` command.
#[derive(Debug)]
pub(crate) enum CliError {
    /// The library failed.
    Trace(usdt_trace::Error),
    /// Writing the output failed (a closed pipe ends quietly).
    Output(io::Error),
    /// A file or process with no probes (`what` names it, escaped).
    NoProbes { what: String },
    /// A process that maps no file with probes.
    NoProcessProbes { pid: u32 },
    /// No probe matches the globs; the closest names (escaped).
    NoMatch {
        what: String,
        globs: String,
        closest: Vec<String>,
    },
    /// Every site the globs match was refused by its check (each said in
    /// a line of its own before).
    AllRefused { what: String, refused: usize },
    /// A file that is not ELF (`name` escaped).
    NotElf { name: String },
    /// A command without probes of its own (a script when `script`) that
    /// executed no program with a probe the globs match (`what` escaped;
    /// `globs` empty for every probe).
    NoneExecuted {
        what: String,
        globs: String,
        script: bool,
    },
    /// A file whose probes could not be read (`name` escaped).
    Read {
        name: String,
        source: usdt_trace::Error,
    },
    /// `--str GLOB:N` whose glob matches no traced probe.
    StrMatchesNothing { glob: String, n: usize },
    /// `--str GLOB:N` past the arguments of the probes it matches.
    StrPastArgs {
        glob: String,
        n: usize,
        probe: String,
        args: usize,
    },
    /// `--by`, `--key` or `hist`'s ARG that a probe does not have; `takes`
    /// says what it has.
    NoSuchArg {
        probe: String,
        arg: String,
        takes: String,
    },
    /// An ARG that names different operands in two matched probes.
    ArgDiffers {
        arg: String,
        first: (usize, String),
        other: (usize, String),
    },
    /// An ARG of a kind the aggregation `by` cannot use.
    ArgKind {
        arg: String,
        probe: String,
        by: ArgUse,
    },
    /// No site to read ARG at.
    NoSite { arg: String },
    /// A latency probe that is not one `provider:name` (escaped).
    NotAProbe { name: String },
    /// `usdt serve` could not wait for a scrape.
    Scrape(io::Error),
    /// `usdt serve` could not write the exposition.
    Exposition,
    /// An SVG picture could not be drawn or written.
    Picture(String),
    /// `count --svg` without `--by stack`.
    SvgNeedsStack { by: String },
}

/// What an aggregated argument is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ArgUse {
    /// `count --by`: integers and strings.
    CountBy,
    /// `latency --key`: integers.
    Key,
    /// `hist`: integers.
    Hist,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Trace(e) => e.fmt(f),
            CliError::Output(e) => write!(f, "writing the output: {e}"),
            CliError::NoProbes { what } => write!(f, "{what} has no probes"),
            CliError::NoProcessProbes { pid } => {
                write!(f, "process {pid} maps no file with probes")
            }
            CliError::NoMatch {
                what,
                globs,
                closest,
            } => write!(
                f,
                "no probe of {what} matches {globs}; the closest are {}",
                closest.join(", ")
            ),
            CliError::AllRefused { what, refused } => write!(
                f,
                "every site of {what} that matches was refused ({refused} sites); --force-sites attaches them"
            ),
            CliError::NotElf { name } => write!(f, "{name} is not an ELF file"),
            CliError::NoneExecuted {
                what,
                globs,
                script,
            } => {
                match script {
                    true => write!(f, "{what} is not an ELF file, and no program it executed")?,
                    false => write!(f, "{what} has no probes, and no program it executed")?,
                }
                match globs.is_empty() {
                    true => f.write_str(" has probes"),
                    false => write!(f, " has a probe that matches {globs}"),
                }
            }
            CliError::Read { name, source } => write!(f, "{name}: {source}"),
            CliError::StrMatchesNothing { glob, n } => {
                write!(f, "--str {glob}:{n} matches no traced probe")
            }
            CliError::StrPastArgs {
                glob,
                n,
                probe,
                args,
            } => write!(
                f,
                "--str {glob}:{n} names argument {n}, but {probe} has {args} arguments (counted from 0)"
            ),
            CliError::NoSuchArg { probe, arg, takes } => {
                write!(f, "{probe} has no argument {arg}; it takes {takes}")
            }
            CliError::ArgDiffers { arg, first, other } => write!(
                f,
                "{arg} is arg{} of {} but arg{} of {}: aggregate one probe at a time",
                first.0, first.1, other.0, other.1
            ),
            CliError::ArgKind { arg, probe, by } => match by {
                ArgUse::CountBy => write!(
                    f,
                    "{arg} of {probe} is a byte slice or a float; --by counts integers and strings"
                ),
                ArgUse::Key => write!(
                    f,
                    "--key {arg}: {probe} is not an integer (a latency pairs by an integer or the thread)"
                ),
                ArgUse::Hist => write!(
                    f,
                    "{arg} of {probe} is not an integer; `usdt count --by {arg}` counts its values"
                ),
            },
            CliError::NoSite { arg } => write!(f, "no site to read {arg} at"),
            CliError::NotAProbe { name } => {
                write!(f, "\"{name}\" is not a probe: write provider:name")
            }
            CliError::Scrape(e) => write!(f, "waiting for a scrape: {e}"),
            CliError::Exposition => f.write_str("the metrics could not be written"),
            CliError::Picture(why) => write!(f, "drawing the picture: {why}"),
            CliError::SvgNeedsStack { by } => write!(
                f,
                "count --svg draws the flame graph of --by stack, not of --by {by} (latency and hist take --svg too)"
            ),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Trace(e) | CliError::Read { source: e, .. } => Some(e),
            CliError::Output(e) | CliError::Scrape(e) => Some(e),
            _ => None,
        }
    }
}

impl From<usdt_trace::Error> for CliError {
    fn from(e: usdt_trace::Error) -> CliError {
        CliError::Trace(e)
    }
}

impl From<usdt_trace::bpf::BpfError> for CliError {
    fn from(e: usdt_trace::bpf::BpfError) -> CliError {
        CliError::Trace(e.into())
    }
}

impl CliError {
    /// The library's error, if it is one (for the library's run, which
    /// looks in it for a process gone because of a signal).
    pub(crate) fn library(&self) -> Option<&usdt_trace::Error> {
        match self {
            CliError::Trace(e) => Some(e),
            _ => None,
        }
    }

    /// Whether stdout was closed under us (then exit as SIGPIPE would).
    pub(crate) fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}
