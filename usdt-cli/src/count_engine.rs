//! The user's engine choice for `usdt count` and `usdt trace`: `--engine`
//! (the library's [`EngineChoice`], a clap `ValueEnum` through
//! usdt-trace's `clap` feature) or an environment variable, passed to the
//! library, which picks; here only the one-line notice when `auto` falls
//! back on perf.

use usdt_trace::{EngineChoice, Machine, Picked, Target};

use crate::error::CliError;

/// The environment variable that chooses `count`'s engine when `--engine`
/// is not given.
pub(crate) const ENGINE_ENV: &str = "USDT_COUNT_ENGINE";
/// The same for `trace`.
pub(crate) const TRACE_ENGINE_ENV: &str = "USDT_TRACE_ENGINE";

/// `--engine` if given, else the environment variable `env`, else auto.
pub(crate) fn chosen(option: Option<EngineChoice>, env: &str) -> Result<EngineChoice, CliError> {
    match (option, std::env::var(env)) {
        (Some(e), _) => Ok(e),
        (None, Ok(v)) if !v.is_empty() => Ok(v.parse()?),
        _ => Ok(EngineChoice::Auto),
    }
}

/// The engine that samples files of `machines` (`usdt trace`, which
/// traces one process); says in one line why not BPF when falling back.
pub(crate) fn for_sampling(engine: EngineChoice, machines: &[Machine]) -> Picked {
    noticed(
        engine.for_sampling(machines),
        "sampling with one perf event per site and thread (threads are found as they appear)",
    )
}

/// The engine that counts `target`; says in one line why not BPF when
/// falling back.
pub(crate) fn for_counting(engine: EngineChoice, target: Target) -> Picked {
    let who = match target {
        Target::Pid(_) => "the main thread only",
        Target::AllProcesses => "one event per CPU",
    };
    noticed(
        engine.for_counting(target),
        &format!("counting with one perf event per site ({who})"),
    )
}

/// `picked`, after saying why `auto` did not pick BPF, if it did not.
fn noticed(picked: Picked, fallback: &str) -> Picked {
    if let Some(support) = &picked.fallback {
        eprintln!("usdt: BPF uprobe_multi links: {support}; {fallback}");
    }
    picked
}
