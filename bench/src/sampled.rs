//! The rows of the answers section that send every hit to the tracer:
//! `trace` (usdt-trace's sampler: a record per hit with the registers and
//! what the arguments read) and `trace --stack` (the same with a copy of
//! the stack, unwound and symbolized by the tracer), attached to this
//! process with the engine `usdt trace` picks (BPF where the kernel has
//! uprobe_multi links), and with perf events (`--engine perf`).
//!
//! A row's cost per hit is the traced loop's, as for the other rows. The
//! ring holds every hit of a run, and is drained between runs, untimed:
//! the tracer's work never competes with the loop, and no hit is lost to
//! a full ring (the row checks that every hit was read). How long the
//! drain took per hit is the tracer's own cost: decoding, and for
//! `trace --stack` unwinding and symbolizing.

use std::path::Path;
use std::time::{Duration, Instant};

use usdt_trace::{AttachPoint, EngineChoice, Sampler, Site, Target};

/// Iterations per run: 4,000 hits, which the ring holds with their stack
/// copies.
const N: u64 = 2_000;

/// Ring pages: 64 MiB, for the hits of a run (and its warm-up) at about
/// 8.4 KiB each with a stack copy.
const RING_PAGES: usize = 16 << 10;

/// The rows, in order: each engine's `trace` and `trace --stack`.
pub const ROWS: [&str; 4] = [
    "trace",
    "trace --stack",
    "trace --engine perf",
    "trace --stack --engine perf",
];

/// The pairs of rows whose ratio is `trace --stack` over `trace`.
pub const PAIRS: [(&str, &str); 2] = [
    ("trace --stack", "trace"),
    ("trace --stack --engine perf", "trace --engine perf"),
];

/// What a row measured: the traced loop's time per iteration, and the
/// tracer's time per hit.
pub struct Sampled {
    pub ns_per_iteration: f64,
    pub tracer: Duration,
}

/// Measures `row` ([`ROWS`]): attaches a sampler to the `answers` sites
/// of this process's executable `exe`, has `time` time the loop `N` times
/// a run (it calls its argument after each run, untimed: the drain), and
/// checks that every one of `hits` hits was read, with a stack for
/// `trace --stack`.
pub fn measure(
    row: &str,
    exe: &Path,
    sites: &[Site],
    hits: impl Fn(u64) -> u64,
    time: impl FnOnce(u64, &mut dyn FnMut()) -> f64,
) -> Result<Sampled, String> {
    let stacks = row.contains("--stack");
    let engine = match row.ends_with("--engine perf") {
        true => EngineChoice::Perf,
        false => EngineChoice::Auto,
    };
    let machines: Vec<_> = sites.iter().map(|s| s.machine).collect();
    let mut sampler = Sampler::new(AttachPoint::Auto)
        .engine(engine.for_sampling(&machines))
        .stacks(stacks)
        .ring_pages(RING_PAGES);
    sampler
        .attach(exe, sites, Target::Pid(std::process::id()))
        .map_err(|e| e.to_string())?;
    let (mut read, mut stackless) = (0u64, 0u64);
    let mut drained = Duration::ZERO;
    let ns_per_iteration = time(N, &mut || {
        let t = Instant::now();
        sampler.drain(|hit| {
            read += 1;
            let empty = hit.stack.as_ref().is_none_or(|s| s.frames.is_empty());
            stackless += u64::from(stacks && empty);
        });
        drained += t.elapsed();
    });
    let lost = sampler.lost();
    drop(sampler);
    let want = hits(N);
    if read != want || lost > 0 || stackless > 0 {
        return Err(format!(
            "{read} of {want} hits were read ({lost} lost, {stackless} without a stack)"
        ));
    }
    Ok(Sampled {
        ns_per_iteration,
        tracer: drained / read.max(1) as u32,
    })
}
