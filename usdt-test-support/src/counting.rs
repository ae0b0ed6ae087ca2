//! Tracing the examples with usdt-trace's counting [`PerfCounter`] and checking
//! that every count equals the number of calls: shared by the build-shape
//! cells and the red-zone tests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use usdt_trace::{AttachPoint, PerfCounter, Target};

/// What `types phases` fires while traced, per probe.
pub const TYPES_COUNTS: [(&str, u64); 10] = [
    ("types:unsigned", 2),
    ("types:signed", 2),
    ("types:other", 1),
    ("types:strings", 2),
    ("types:pointers", 1),
    ("types:twelve", 1),
    ("types:lazy", 50),
    ("types:generic", 3),
    ("types:inlined", 5),
    ("types:done", 1),
];

/// Attaches to every site of `bin` in process `pid`.
fn attach_all(bin: &Path, pid: u32, point: AttachPoint) -> PerfCounter {
    let sites = usdt_trace::read_file(bin).expect("read notes");
    let mut tracer = PerfCounter::new(point);
    tracer
        .attach(bin, &sites, Target::Pid(pid))
        .unwrap_or_else(|e| panic!("attach to {}: {e}", bin.display()));
    tracer
}

/// Runs `types phases` with every site traced at `point`, and checks the
/// counts against what it fires ([`TYPES_COUNTS`]), that each site of the
/// generic function's three instances and of the inlined helper's five
/// copies was hit exactly once, and that the lazy closure ran only while
/// traced (the kernel raised the semaphore). Returns the counts.
pub fn check_types(bin: &Path, point: AttachPoint, what: &str) -> BTreeMap<String, u64> {
    crate::tracing_env();
    let mut child = Command::new(bin)
        .arg("phases")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start types");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().expect("types ended early").unwrap();
    assert_eq!(next(), "untraced runs=0 enabled=false", "{what}");
    let tracer = attach_all(bin, child.id(), point);
    writeln!(child.stdin.as_ref().unwrap()).unwrap();
    let traced = loop {
        let line = next();
        if line.starts_with("traced") {
            break line;
        }
    };
    assert_eq!(traced, "traced runs=50 enabled=true", "{what}");
    // types:done fires after that line: wait for it before reading counts.
    let start = Instant::now();
    let counts = loop {
        let counts = tracer.probe_counts().unwrap();
        if counts.get("types:done") == Some(&1) || start.elapsed() > Duration::from_secs(30) {
            break counts;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    for site in tracer.sites() {
        let probe = site.probe();
        if probe == "types:generic" || probe == "types:inlined" {
            assert_eq!(
                site.count().unwrap(),
                1,
                "{what}: the site of {probe} at {:#x}",
                site.site.location
            );
        }
    }
    drop(tracer);
    assert_eq!(next(), "detached runs=0 enabled=false", "{what}");
    assert!(child.wait().unwrap().success(), "{what}");
    let want: BTreeMap<String, u64> = TYPES_COUNTS
        .iter()
        .map(|(p, n)| (p.to_string(), *n))
        .collect();
    assert_eq!(counts, want, "{what}: hits per probe");
    counts
}

/// Starts `bin args` held at the shell's `read` (the pid stays the same
/// through `exec`), attaches to every site of `bin` at `point`, lets it run
/// to the end and returns its stdout and the hits per probe.
pub fn count_run(bin: &Path, args: &[&str], point: AttachPoint) -> (String, BTreeMap<String, u64>) {
    crate::tracing_env();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read _ && exec \"$0\" \"$@\"")
        .arg(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sh");
    let tracer = attach_all(bin, child.id(), point);
    writeln!(child.stdin.take().unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = tracer.probe_counts().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), counts)
}

/// How many iterations the red-zone check traces.
pub const REDZONE_HITS: u64 = 200_000;

/// Runs the `redzone` example at `bin` for [`REDZONE_HITS`] iterations,
/// traced at Location + 1 or not; returns its line and the hits.
pub fn redzone_run(bin: &Path, trace: bool) -> (String, u64) {
    let mut child = Command::new(bin)
        .arg(REDZONE_HITS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start redzone");
    let mut tracer = PerfCounter::new(AttachPoint::Next);
    if trace {
        let sites = usdt_trace::read_file(bin).expect("read notes");
        let site: Vec<_> = sites
            .iter()
            .filter(|s| s.probe() == "redzone:site")
            .collect();
        assert!(
            !site.is_empty(),
            "no redzone:site note in {}",
            bin.display()
        );
        tracer
            .attach(bin, site, Target::Pid(child.id()))
            .expect("attach at Location + 1");
    }
    writeln!(child.stdin.take().unwrap()).unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let hits = tracer.probe_counts().unwrap().values().sum();
    (line.trim().to_owned(), hits)
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// The red-zone check on the `redzone` example at `bin`: traced at
/// Location + 1, the kernel optimizes the site (a `[uprobes-trampoline]`
/// appears), every iteration is counted, and the result is what the
/// untraced run computes.
pub fn check_redzone(bin: &Path, what: &str) {
    crate::tracing_env();
    let (untraced, _) = redzone_run(bin, false);
    assert_eq!(field(&untraced, "result"), field(&untraced, "reference"));
    assert_eq!(field(&untraced, "trampoline"), "false", "{untraced}");
    let (traced, hits) = redzone_run(bin, true);
    assert_eq!(
        hits, REDZONE_HITS,
        "every iteration hits the probe: {traced}"
    );
    assert_eq!(
        field(&traced, "trampoline"),
        "true",
        "the kernel did not optimize the nop5 site ({what}): {traced}"
    );
    assert_eq!(
        field(&traced, "result"),
        field(&untraced, "result"),
        "the optimized uprobe changed what the program computed ({what})"
    );
}
