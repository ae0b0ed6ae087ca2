//! The user's engine choice for `usdt count` and `usdt trace`: `--engine`
//! or an environment variable, passed to the library, which picks (see
//! [`usdt_trace::EngineChoice`]); here only the one-line notice when `auto`
//! falls back on perf.

use usdt_trace::{EngineChoice, Machine, Picked, Target};

use crate::error::CliError;

/// The environment variable that chooses `count`'s engine when `--engine`
/// is not given.
pub(crate) const ENGINE_ENV: &str = "USDT_COUNT_ENGINE";
/// The same for `trace`.
pub(crate) const TRACE_ENGINE_ENV: &str = "USDT_TRACE_ENGINE";

/// Which engine counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Engine {
    /// BPF where the kernel has uprobe_multi links, else perf (with a
    /// notice)
    #[default]
    Auto,
    /// BPF uprobe_multi links, or an error
    Bpf,
    /// Perf events per site (per CPU for every process): count sees only the
    /// thread whose id is the process id, trace each thread once found
    Perf,
}

impl std::str::FromStr for Engine {
    type Err = CliError;
    fn from_str(s: &str) -> Result<Engine, CliError> {
        match s.parse::<EngineChoice>()? {
            EngineChoice::Auto => Ok(Engine::Auto),
            EngineChoice::Bpf => Ok(Engine::Bpf),
            EngineChoice::Perf => Ok(Engine::Perf),
        }
    }
}

impl From<Engine> for EngineChoice {
    fn from(e: Engine) -> EngineChoice {
        match e {
            Engine::Auto => EngineChoice::Auto,
            Engine::Bpf => EngineChoice::Bpf,
            Engine::Perf => EngineChoice::Perf,
        }
    }
}

impl Engine {
    /// `--engine` if given, else the environment variable `env`, else auto.
    pub(crate) fn chosen(option: Option<Engine>, env: &str) -> Result<Engine, CliError> {
        match (option, std::env::var(env)) {
            (Some(e), _) => Ok(e),
            (None, Ok(v)) if !v.is_empty() => v.parse(),
            _ => Ok(Engine::Auto),
        }
    }

    /// The engine that samples files of `machines` (`usdt trace`, which
    /// traces one process); says in one line why not BPF when falling back.
    pub(crate) fn for_sampling(self, machines: &[Machine]) -> Picked {
        noticed(
            EngineChoice::from(self).for_sampling(machines),
            "sampling with one perf event per site and thread (threads are found as they appear)",
        )
    }

    /// The engine that counts `target`; says in one line why not BPF when
    /// falling back.
    pub(crate) fn for_counting(self, target: Target) -> Picked {
        let who = match target {
            Target::Pid(_) => "the main thread only",
            Target::AllProcesses => "one event per CPU",
        };
        noticed(
            EngineChoice::from(self).for_counting(target),
            &format!("counting with one perf event per site ({who})"),
        )
    }
}

/// `picked`, after saying why `auto` did not pick BPF, if it did not.
fn noticed(picked: Picked, fallback: &str) -> Picked {
    if let Some(support) = &picked.fallback {
        eprintln!("usdt: BPF uprobe_multi links: {support}; {fallback}");
    }
    picked
}
