//! What `usdt count` counts and `usdt trace` samples with: one BPF
//! uprobe_multi link per file (every thread of a process, or every process
//! running a file), or, where the kernel lacks those links or when asked,
//! perf events per site.

use std::collections::BTreeMap;
use std::path::PathBuf;

use usdt_trace::bpf::{uprobe_multi_support, ProbeCounter, UprobeMulti};
use usdt_trace::{AttachPoint, PerfCounter, Site, Target};

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
        match s {
            "auto" => Ok(Engine::Auto),
            "bpf" => Ok(Engine::Bpf),
            "perf" => Ok(Engine::Perf),
            _ => Err(CliError::BadEngine { value: s.into() }),
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

    /// Whether to sample with BPF (`usdt trace`, which traces one process);
    /// says in one line why not when falling back.
    pub(crate) fn samples_with_bpf(self) -> bool {
        self.picks_bpf(
            |support| *support == UprobeMulti::Process && cfg!(target_arch = "x86_64"),
            "sampling with one perf event per site and thread (threads are found as they appear)",
        )
    }

    /// Whether to count with BPF for `target`; says in one line why not
    /// when falling back.
    fn uses_bpf(self, target: Target) -> bool {
        let who = match target {
            Target::Pid(_) => "the main thread only",
            Target::AllProcesses => "one event per CPU",
        };
        self.picks_bpf(
            |support| match target {
                Target::Pid(_) => *support == UprobeMulti::Process,
                Target::AllProcesses => {
                    matches!(support, UprobeMulti::Process | UprobeMulti::ThreadOnly)
                }
            },
            &format!("counting with one perf event per site ({who})"),
        )
    }

    /// BPF for `bpf`, perf for `perf`; for `auto`, BPF where this kernel's
    /// uprobe_multi support `fits`, else perf, saying so in one line ending
    /// in `fallback`.
    fn picks_bpf(self, fits: impl FnOnce(&UprobeMulti) -> bool, fallback: &str) -> bool {
        match self {
            Engine::Bpf => true,
            Engine::Perf => false,
            Engine::Auto => {
                let support = uprobe_multi_support();
                let fits = fits(&support);
                // Unknown (such as without privilege, where perf fails too
                // and says why): no notice.
                if !fits && !matches!(support, UprobeMulti::Unknown(_)) {
                    eprintln!("usdt: BPF uprobe_multi links: {support}; {fallback}");
                }
                fits
            }
        }
    }
}

/// The counts of either engine.
pub(crate) enum Counter {
    /// One uprobe_multi link per file.
    Bpf(ProbeCounter),
    /// One perf event per site.
    Perf(PerfCounter),
}

impl Counter {
    /// Attaches the given sites of each file at `point`, counting `target`;
    /// `None` when `interrupted` says a signal came meanwhile (what was
    /// attached is detached again). Every site starts counting at the same
    /// moment: one link per file, or perf counters created disabled and
    /// enabled together once all are attached.
    pub(crate) fn attach(
        engine: Engine,
        files: &[(PathBuf, Vec<&Site>)],
        point: AttachPoint,
        target: Target,
        interrupted: &dyn Fn() -> Option<i32>,
    ) -> Result<Option<Counter>, CliError> {
        if interrupted().is_some() {
            return Ok(None);
        }
        if engine.uses_bpf(target) {
            let counter = ProbeCounter::attach(files, point, target)?;
            return Ok(interrupted().is_none().then_some(Counter::Bpf(counter)));
        }
        let mut tracer = PerfCounter::new(point).enable_later(true);
        for (path, sites) in files {
            for site in sites {
                if interrupted().is_some() {
                    return Ok(None);
                }
                tracer.attach(path, [*site], target)?;
            }
        }
        if interrupted().is_some() {
            return Ok(None);
        }
        tracer.enable()?;
        Ok(Some(Counter::Perf(tracer)))
    }

    /// Hits per probe (`provider:name`).
    pub(crate) fn probe_counts(&self) -> Result<BTreeMap<String, u64>, CliError> {
        match self {
            Counter::Bpf(c) => Ok(c.probe_counts()?),
            Counter::Perf(t) => Ok(t.probe_counts()?),
        }
    }
}
