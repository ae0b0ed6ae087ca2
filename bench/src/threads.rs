//! Two threads on one probe: `bench:hit` at its long nop, hit by one
//! worker thread and then by two at once, per engine (the empty program
//! through each link, the perf counter, the BPF counter), beside the same
//! loops with nothing attached and calling `getpgid`. Each engine keeps
//! its counts apart per thread or per CPU, so that two threads on two
//! CPUs run about twice the hits of one: the ratio shows a shared cache
//! line, a lock, or a machine without two free CPUs (the unattached rows).
//!
//! The workers start before anything is attached (a perf counter counts
//! the threads a process has when it attaches). A batch of a row times `n`
//! iterations per thread (about 2 ms on one thread) from the first
//! thread's start to the last one's end; its rate is all threads'
//! iterations over that time. The rows take turns, once per round, each
//! running batches of 1 thread and of 2 in alternation, and a row keeps
//! its best batch of each: a batch the machine's other work did not
//! interrupt, on a busy machine too. Each round of an attached row checks
//! that the counter counted every hit of both threads.

use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use usdt_trace::bpf::{MultiCounter, MultiSite};
use usdt_trace::floor::{EmptyProgram, LinkKind};
use usdt_trace::{AttachPoint, KernelFeatures, PerfCounter, Site, Target};

use crate::loops;

/// A job: the loop, its iterations, and the barrier every worker of the
/// run waits at before it starts.
type Job = (fn(u64), u64, Arc<Barrier>);

/// A worker: where its jobs go, and where it says when each started and
/// ended.
type Worker = (Sender<Job>, Receiver<(Instant, Instant)>);

/// Worker threads that run a loop when told, and say when they started
/// and ended.
struct Pool {
    workers: Vec<Worker>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let workers = (0..threads)
            .map(|_| {
                let (jobs, job) = channel::<Job>();
                let (done, spans) = channel();
                std::thread::spawn(move || {
                    for (f, n, barrier) in job {
                        barrier.wait();
                        let start = Instant::now();
                        f(std::hint::black_box(n));
                        if done.send((start, Instant::now())).is_err() {
                            break;
                        }
                    }
                });
                (jobs, spans)
            })
            .collect();
        Pool { workers }
    }

    /// Runs `f(n)` on `threads` workers at once; the rate in M/s of all of
    /// them, and how long the run took.
    fn run(&self, threads: usize, f: fn(u64), n: u64) -> Result<(f64, Duration), String> {
        let barrier = Arc::new(Barrier::new(threads));
        for (jobs, _) in &self.workers[..threads] {
            jobs.send((f, n, barrier.clone()))
                .map_err(|_| "a worker thread ended")?;
        }
        let spans = self.workers[..threads]
            .iter()
            .map(|(_, spans)| spans.recv().map_err(|_| "a worker thread ended"))
            .collect::<Result<Vec<_>, _>>()?;
        let start = spans.iter().map(|s| s.0).min().ok_or("no workers")?;
        let end = spans.iter().map(|s| s.1).max().ok_or("no workers")?;
        let time = end - start;
        Ok(((threads as u64 * n) as f64 / time.as_secs_f64() / 1e6, time))
    }
}

/// What a row attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Nothing: the loop alone.
    Idle,
    /// Nothing: the `getpgid` loop.
    Syscall,
    /// The empty program, linked this way.
    Floor(LinkKind),
    /// usdt-trace's `PerfCounter`: a perf event per site.
    PerfCounter,
    /// usdt-trace's `bpf::MultiCounter`: a per-CPU array, one uprobe_multi
    /// link.
    BpfCounter,
}

impl Engine {
    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Idle => "usdt-idle",
            Engine::Syscall => "syscall-count",
            Engine::Floor(_) => "empty program",
            Engine::PerfCounter => "perf counter",
            Engine::BpfCounter => "bpf counter",
        }
    }

    /// How its uprobes are linked.
    pub fn link(self) -> &'static str {
        match self {
            Engine::Idle | Engine::Syscall => "-",
            Engine::Floor(kind) => kind.name(),
            Engine::PerfCounter => LinkKind::PerfEvent.name(),
            Engine::BpfCounter => LinkKind::UprobeMulti.name(),
        }
    }

    fn loop_fn(self) -> fn(u64) {
        match self {
            Engine::Syscall => loops::syscall,
            _ => loops::hit,
        }
    }
}

const ROWS: [Engine; 6] = [
    Engine::Idle,
    Engine::Syscall,
    Engine::Floor(LinkKind::PerfEvent),
    Engine::PerfCounter,
    Engine::Floor(LinkKind::UprobeMulti),
    Engine::BpfCounter,
];

/// Attached for a round; dropping it detaches.
enum Attached {
    None,
    Floor(EmptyProgram),
    Perf(PerfCounter),
    Bpf(MultiCounter),
}

impl Attached {
    fn new(engine: Engine, exe: &Path, sites: &[Site]) -> Result<Attached, String> {
        let me = Target::Pid(std::process::id());
        let e = |e: usdt_trace::Error| e.to_string();
        Ok(match engine {
            Engine::Idle | Engine::Syscall => Attached::None,
            Engine::Floor(kind) => Attached::Floor(
                EmptyProgram::attach(exe, sites, AttachPoint::Next, kind, me).map_err(e)?,
            ),
            Engine::PerfCounter => {
                let mut c = PerfCounter::new(AttachPoint::Next);
                c.attach(exe, sites, me).map_err(e)?;
                Attached::Perf(c)
            }
            Engine::BpfCounter => {
                let features = KernelFeatures::detect();
                let multi = sites
                    .iter()
                    .map(|s| MultiSite::at(s, AttachPoint::Next, &features, exe, 0, me))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                let mut c = MultiCounter::new(1).map_err(|x| e(x.into()))?;
                c.attach(exe, &multi, me).map_err(|x| e(x.into()))?;
                Attached::Bpf(c)
            }
        })
    }

    /// Detaches.
    fn detach(self) {
        match self {
            Attached::None => {}
            Attached::Floor(p) => p.detach(),
            Attached::Perf(c) => c.detach(),
            Attached::Bpf(c) => c.detach(),
        }
    }

    /// The hits counted, for the counters.
    fn count(&self) -> Result<Option<u64>, String> {
        match self {
            Attached::None | Attached::Floor(_) => Ok(None),
            Attached::Perf(c) => Ok(Some(
                c.probe_counts().map_err(|e| e.to_string())?.values().sum(),
            )),
            Attached::Bpf(c) => c.count(0).map(Some).map_err(|e| e.to_string()),
        }
    }
}

/// One row's result.
#[derive(Clone, Debug)]
pub struct ThreadsRow {
    pub engine: Engine,
    /// M/s with one thread, and with two.
    pub one: f64,
    pub two: f64,
    /// The hits a counter missed in its worst round, and of how many.
    pub missed: Option<(u64, u64)>,
}

/// The section's results.
#[derive(Debug)]
pub struct Threads {
    pub rows: Vec<ThreadsRow>,
    pub skipped: Vec<(&'static str, String)>,
    /// Online CPUs.
    pub cpus: usize,
}

/// Runs the section (`quick`: 3 rounds of 20 batches of each kind, else 5
/// of 100);
/// `attach` says whether uprobes can be attached here.
pub fn run(quick: bool, attach: bool) -> Result<Threads, String> {
    let exe = std::fs::canonicalize("/proc/self/exe").map_err(|e| e.to_string())?;
    let sites: Vec<Site> = usdt_trace::read_file(&exe)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| (s.provider.as_str(), s.name.as_str()) == loops::HIT)
        .collect();
    let (rounds, batches) = if quick { (3, 20) } else { (5, 100) };
    // A one-thread batch's length: short enough that many batches of two
    // threads find both CPUs free at once on a busy machine.
    let run_time = Duration::from_millis(2);
    let pool = Pool::new(2);
    let rows: Vec<Engine> = ROWS
        .into_iter()
        .filter(|e| attach || matches!(e, Engine::Idle | Engine::Syscall))
        .collect();
    // Per row: iterations per thread, best rates, the worst miss, or why not.
    type State = (Option<u64>, f64, f64, Option<(u64, u64)>);
    let mut states: Vec<Result<State, String>> =
        rows.iter().map(|_| Ok((None, 0.0, 0.0, None))).collect();
    for _ in 0..rounds {
        for (engine, state) in rows.iter().zip(&mut states) {
            let Ok(s) = state else {
                continue;
            };
            let f = engine.loop_fn();
            let result = (|| {
                let attached = Attached::new(*engine, &exe, &sites)?;
                // Both threads hit the site first (the first hit optimizes it).
                pool.run(2, f, 1024)?;
                let mut ran = 2 * 1024;
                let n = match s.0 {
                    Some(n) => n,
                    None => {
                        let mut n = 1024;
                        loop {
                            let (_, t) = pool.run(1, f, n)?;
                            ran += n;
                            if t >= run_time || n >= 1 << 40 {
                                break n;
                            }
                            n *= 2;
                        }
                    }
                };
                let (mut one, mut two) = (0f64, 0f64);
                for _ in 0..batches {
                    one = one.max(pool.run(1, f, n)?.0);
                    two = two.max(pool.run(2, f, n)?.0);
                }
                ran += 3 * n * batches;
                let missed = attached.count()?.map(|c| (ran.saturating_sub(c), ran));
                attached.detach();
                Ok::<_, String>((n, one, two, missed))
            })();
            match result {
                Ok((n, one, two, missed)) => {
                    s.0 = Some(n);
                    s.1 = s.1.max(one);
                    s.2 = s.2.max(two);
                    if missed.is_some_and(|m| s.3.is_none_or(|w| m.0 > w.0)) {
                        s.3 = missed;
                    }
                }
                Err(why) => *state = Err(why),
            }
        }
    }
    let mut out = Threads {
        rows: vec![],
        skipped: vec![],
        cpus: usdt_trace::online_cpus().len(),
    };
    for (engine, state) in rows.into_iter().zip(states) {
        match state {
            Ok((_, one, two, missed)) => out.rows.push(ThreadsRow {
                engine,
                one,
                two,
                missed,
            }),
            Err(why) => out.skipped.push((engine.name(), why)),
        }
    }
    Ok(out)
}

/// The section as a table.
pub fn table(t: &Threads) -> String {
    let mut s = format!(
        "\nTwo threads on one probe: bench:hit at the long nop, 1 and 2 threads of this process ({} CPUs)\n",
        t.cpus
    );
    s += &format!(
        "{:<16}{:<14}{:>14}{:>14}{:>8}\n",
        "row", "link", "1 thread", "2 threads", "2/1"
    );
    for r in &t.rows {
        s += &format!(
            "{:<16}{:<14}{:>10.3} M/s{:>10.3} M/s{:>7.2}x",
            r.engine.name(),
            r.engine.link(),
            r.one,
            r.two,
            r.two / r.one
        );
        match r.missed {
            Some((0, _)) | None => {}
            Some((missed, of)) => s += &format!("  counted {} of {of} hits", of - missed),
        }
        s += "\n";
    }
    for (name, why) in &t.skipped {
        s += &format!("{name:<16} not measured: {why}\n");
    }
    s
}
