//! The many-sites section: a generated C program with N probe sites, attached
//! by three engines side by side: usdt-trace's BPF uprobe_multi link (one
//! descriptor per file), one perf event per site (usdt-trace's `PerfCounter`), and
//! bpftrace (`usdt:BIN:*:*`, counting). For each: attach time, detach time,
//! the descriptors the tracer holds, and the hit rate of one hot site with
//! only it attached versus every site attached.
//!
//! The per-site engines cost seconds per hundred sites (each event is one
//! syscall to create and one kernel teardown to close), so they are measured
//! at the sizes in [`sizes`] and the table says which size each ran at,
//! rather than extrapolating to 10,000.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{self, Lines};
use usdt_provision::{Need, BPFTRACE, GCC, SDT};
use usdt_trace::bpf::{MultiCounter, MultiSite};
use usdt_trace::{AttachPoint, KernelFeatures, PerfCounter, Site, Target};

/// One engine at one size.
#[derive(Clone, Debug)]
pub struct ManyRow {
    /// `bpf-link`, `perf-per-site` or `bpftrace`.
    pub engine: &'static str,
    /// Sites attached.
    pub sites: usize,
    /// From the first syscall to every site armed.
    pub attach: Duration,
    /// From the request to detach to every site gone.
    pub detach: Duration,
    /// Descriptors the tracer held while attached.
    pub fds: usize,
    /// Hot-site hits per second (millions) with only the hot site attached.
    pub rate_one: f64,
    /// The same with every site attached.
    pub rate_all: f64,
}

/// The sizes each engine runs at: (engine, sizes).
pub fn sizes(quick: bool) -> [(&'static str, Vec<usize>); 3] {
    if quick {
        [
            ("bpf-link", vec![1_000]),
            ("perf-per-site", vec![20]),
            ("bpftrace", vec![20]),
        ]
    } else {
        [
            ("bpf-link", vec![1_000, 10_000]),
            ("perf-per-site", vec![100]),
            ("bpftrace", vec![100]),
        ]
    }
}

/// Hot-loop iterations per rate measurement.
const HOT: u64 = 200_000;

/// The rows measured, and the runs that failed with the reason.
pub type Outcome = (Vec<ManyRow>, Vec<(String, String)>);

/// Runs the section; `Err` says why it could not run at all, and rows that
/// failed are left out with the reason in the second list.
pub fn run(quick: bool) -> Result<Outcome, String> {
    if !usdt_provision::is_root() {
        return Err("attaching uprobes needs root".into());
    }
    usdt_provision::ensure(&[
        Need::package(GCC, "the bench compiles its many-sites program"),
        Need::package(
            SDT,
            "the many-sites program's probes are <sys/sdt.h> probes",
        ),
        Need::package(
            BPFTRACE,
            "the many-sites section compares bpftrace's attach",
        ),
    ])
    .map_err(|e| e.to_string())?;
    let mut rows = vec![];
    let mut failed = vec![];
    for (engine, ns) in sizes(quick) {
        for n in ns {
            let result = program(n).and_then(|exe| match engine {
                "bpf-link" => bpf_link(&exe, n),
                "perf-per-site" => perf_per_site(&exe, n),
                _ => bpftrace(&exe, n),
            });
            match result {
                Ok(row) => rows.push(row),
                Err(e) => failed.push((format!("{engine} x {n}"), e)),
            }
        }
    }
    Ok((rows, failed))
}

/// The generated program with `n` sites: `many:hot` in a loop of its own and
/// `n - 1` more sites in one function. On stdin, `hot N` runs the hot loop N
/// times and answers the nanoseconds it took; `all` fires every other site
/// once and answers `ok`.
fn program(n: usize) -> Result<PathBuf, String> {
    let dir = crate::peers::beside_bench("bench-many");
    let exe = dir.join(format!("many-{n}"));
    if exe.exists() {
        return Ok(exe);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut src = String::from(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n\
         #include <unistd.h>\n#include <sys/sdt.h>\n\
         static __attribute__((noinline)) void all(long v) {\n",
    );
    for i in 1..n {
        src += &format!("\tSTAP_PROBE1(many, p{i}, v);\n");
    }
    src += "}\n\
        static __attribute__((noinline)) void hot(long n) {\n\
        \tfor (long i = 0; i < n; i++)\n\t\tSTAP_PROBE1(many, hot, i);\n}\n\
        int main(void) {\n\
        \tchar line[64];\n\
        \tprintf(\"ready %d\\n\", (int)getpid());\n\tfflush(stdout);\n\
        \twhile (fgets(line, sizeof line, stdin)) {\n\
        \t\tif (!strncmp(line, \"hot \", 4)) {\n\
        \t\t\tstruct timespec a, b;\n\
        \t\t\tclock_gettime(CLOCK_MONOTONIC, &a);\n\
        \t\t\thot(atol(line + 4));\n\
        \t\t\tclock_gettime(CLOCK_MONOTONIC, &b);\n\
        \t\t\tprintf(\"%lld\\n\", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));\n\
        \t\t} else if (!strncmp(line, \"all\", 3)) {\n\
        \t\t\tall(1);\n\t\t\tprintf(\"ok\\n\");\n\
        \t\t}\n\t\tfflush(stdout);\n\t}\n\treturn 0;\n}\n";
    let c = dir.join(format!("many-{n}.c"));
    std::fs::write(&c, src).map_err(|e| format!("{}: {e}", c.display()))?;
    let partial = dir.join(format!("many-{n}.{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&partial)
        .arg(&c)
        .output()
        .map_err(|e| format!("could not run cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc {}: {}",
            c.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(&partial, &exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    Ok(exe)
}

/// A running instance of the program.
struct Instance {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines,
    pid: u32,
}

impl Instance {
    fn start(exe: &Path) -> Result<Instance, String> {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = Lines::of(child.stdout.take().expect("piped"), "the program");
        let mut i = Instance {
            child,
            stdin,
            stdout,
            pid: 0,
        };
        let line = i.line()?;
        i.pid = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| format!("the program said {line:?}"))?;
        Ok(i)
    }

    fn line(&mut self) -> Result<String, String> {
        self.stdout.next(child::LINE)
    }

    fn ask(&mut self, what: &str) -> Result<String, String> {
        writeln!(self.stdin, "{what}").map_err(|e| e.to_string())?;
        self.line()
    }

    /// Runs the hot loop; million hits per second.
    fn hot_rate(&mut self) -> Result<f64, String> {
        // One warm-up batch: the first hit of a nop5 site optimizes it.
        self.ask("hot 1000")?;
        let ns: f64 = self
            .ask(&format!("hot {HOT}"))?
            .trim()
            .parse()
            .map_err(|e| format!("hot: {e}"))?;
        Ok(HOT as f64 / ns * 1e3)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        child::kill(&mut self.child);
    }
}

/// The program's sites, the hot one first.
fn sites(exe: &Path) -> Result<Vec<Site>, String> {
    let mut sites = usdt_trace::read_file(exe).map_err(|e| e.to_string())?;
    sites.sort_by_key(|s| s.name != "hot");
    if sites.first().is_none_or(|s| s.name != "hot") {
        return Err(format!("{} has no many:hot", exe.display()));
    }
    Ok(sites)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Where every engine's uprobes go: the sites are `<sys/sdt.h>` probes (one
/// `nop`), and bpftrace attaches there too, so all three engines hit the same
/// instruction (the optimized nop5 path is the main table's
/// `usdt-nop5-bpf` row).
fn point() -> AttachPoint {
    AttachPoint::Nop
}

/// What the two engines of this process share: attach the hot site alone
/// and run it, then attach all `n` sites (timed, with the descriptors that
/// adds), run the hot site, fire every other site once, `check` the counts,
/// and detach (timed). `attach(sites, pid)` attaches the first `sites` sites.
fn measure<C>(
    engine: &'static str,
    exe: &Path,
    n: usize,
    attach: impl Fn(usize, u32) -> Result<C, String>,
    check: impl Fn(&C) -> Result<(), String>,
) -> Result<ManyRow, String> {
    let mut p = Instance::start(exe)?;
    let one = attach(1, p.pid)?;
    let rate_one = p.hot_rate()?;
    drop(one);

    let before = open_fds(std::process::id());
    let start = Instant::now();
    let all = attach(n, p.pid)?;
    let attach = start.elapsed();
    let fds = open_fds(std::process::id()) - before;
    let rate_all = p.hot_rate()?;
    p.ask("all")?;
    check(&all)?;
    let start = Instant::now();
    drop(all);
    let detach = start.elapsed();
    Ok(ManyRow {
        engine,
        sites: n,
        attach,
        detach,
        fds,
        rate_one,
        rate_all,
    })
}

fn bpf_link(exe: &Path, n: usize) -> Result<ManyRow, String> {
    let sites = sites(exe)?;
    let features = KernelFeatures::detect();
    // Placed for one process: its pid comes later, and only the kind of
    // target matters to where a uprobe goes.
    let one = Target::Pid(0);
    let multi = sites
        .iter()
        .enumerate()
        .map(|(slot, s)| MultiSite::at(s, point(), &features, exe, slot as u32, one))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let attach = |k: usize, pid: u32| {
        let mut counter = MultiCounter::new(k as u32).map_err(|e| e.to_string())?;
        counter
            .attach(exe, &multi[..k], Target::Pid(pid))
            .map_err(|e| e.to_string())?;
        Ok(counter)
    };
    let check = |all: &MultiCounter| {
        let counts = all.counts().map_err(|e| e.to_string())?;
        let want_hot = 1000 + HOT;
        if counts[0] != want_hot || counts[1..n].iter().any(|&c| c != 1) {
            return Err(format!(
                "counts wrong: hot {} (want {want_hot}), {} other sites not hit once",
                counts[0],
                counts[1..n].iter().filter(|&&c| c != 1).count()
            ));
        }
        Ok(())
    };
    measure("bpf-link", exe, n, attach, check)
}

fn perf_per_site(exe: &Path, n: usize) -> Result<ManyRow, String> {
    let sites = sites(exe)?;
    let attach = |k: usize, pid: u32| {
        let mut counter = PerfCounter::new(point());
        counter
            .attach(exe, &sites[..k], Target::Pid(pid))
            .map_err(|e| e.to_string())?;
        Ok(counter)
    };
    let check = |all: &PerfCounter| {
        let counts = all.probe_counts().map_err(|e| e.to_string())?;
        let total: u64 = counts.values().sum();
        let want = 1000 + HOT + (n as u64 - 1);
        if total != want {
            return Err(format!("{total} hits counted, want {want}"));
        }
        Ok(())
    };
    measure("perf-per-site", exe, n, attach, check)
}

/// A bpftrace counting `probes` of the program; `BEGIN` runs once every
/// probe is attached.
struct Bpftrace {
    child: Child,
    out: Lines,
    /// How many sites it attached to.
    sites: usize,
}

impl Bpftrace {
    fn start(exe: &Path, pid: u32, probes: &str, sites: usize) -> Result<Bpftrace, String> {
        let script = format!(
            "BEGIN {{ printf(\"attached\\n\"); }} usdt:{}:{probes} {{ @hits = count(); }}",
            exe.display()
        );
        let mut child = Command::new("bpftrace")
            .args(["-p", &pid.to_string(), "-e", &script])
            .env("BPFTRACE_MAX_PROBES", "100000")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("bpftrace: {e}"))?;
        let out = Lines::of(child.stdout.take().expect("piped"), "bpftrace");
        let b = Bpftrace { child, out, sites };
        b.out.until(child::LINE, |l| l.trim() == "attached")?;
        Ok(b)
    }

    /// Ends it with SIGINT (it prints its map and detaches); the hits.
    fn stop(mut self) -> Result<u64, String> {
        child::stop(
            &mut self.child,
            libc::SIGINT,
            child::detach_time(self.sites),
        );
        let text = self.out.rest(Duration::from_secs(10));
        text.lines()
            .find_map(|l| l.strip_prefix("@hits: "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("bpftrace printed {text:?}"))
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        child::kill(&mut self.child);
    }
}

fn bpftrace(exe: &Path, n: usize) -> Result<ManyRow, String> {
    let mut p = Instance::start(exe)?;
    let one = Bpftrace::start(exe, p.pid, "many:hot", 1)?;
    let rate_one = p.hot_rate()?;
    one.stop()?;

    let start = Instant::now();
    let all = Bpftrace::start(exe, p.pid, "*:*", n)?;
    let attach = start.elapsed();
    let fds = open_fds(all.child.id());
    let rate_all = p.hot_rate()?;
    p.ask("all")?;
    let start = Instant::now();
    let hits = all.stop()?;
    let detach = start.elapsed();
    let want = 1000 + HOT + (n as u64 - 1);
    if hits != want {
        return Err(format!("bpftrace counted {hits} hits, want {want}"));
    }
    Ok(ManyRow {
        engine: "bpftrace",
        sites: n,
        attach,
        detach,
        fds,
        rate_one,
        rate_all,
    })
}

/// The section as text.
pub fn table(rows: &[ManyRow], failed: &[(String, String)]) -> String {
    let mut s = String::from(
        "# many sites: a generated C program with N <sys/sdt.h> sites, attached at their nop by each engine\n",
    );
    s += &format!(
        "{:<14} {:>7} {:>12} {:>12} {:>6} {:>14} {:>14}\n",
        "engine", "sites", "attach", "detach", "fds", "hot, 1 site", "hot, all"
    );
    for r in rows {
        s += &format!(
            "{:<14} {:>7} {:>10.1}ms {:>10.1}ms {:>6} {:>10.3}M/s {:>10.3}M/s\n",
            r.engine,
            r.sites,
            r.attach.as_secs_f64() * 1e3,
            r.detach.as_secs_f64() * 1e3,
            r.fds,
            r.rate_one,
            r.rate_all
        );
    }
    for (what, why) in failed {
        s += &format!("# {what} failed: {why}\n");
    }
    s
}

/// The section as JSON.
pub fn json(rows: &[ManyRow]) -> serde_json::Value {
    serde_json::Value::Array(
        rows.iter()
            .map(|r| {
                serde_json::json!({
                    "engine": r.engine,
                    "sites": r.sites,
                    "attach_ms": r.attach.as_secs_f64() * 1e3,
                    "detach_ms": r.detach.as_secs_f64() * 1e3,
                    "fds": r.fds,
                    "hot_mops_one_site": r.rate_one,
                    "hot_mops_all_sites": r.rate_all,
                })
            })
            .collect(),
    )
}
