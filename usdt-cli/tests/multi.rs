//! Counting with one BPF uprobe_multi link per file: every thread of a
//! process, every process running a file, ten thousand sites, semaphores, and
//! the message without privilege. Needs root and Linux 6.6 or later (CI runs
//! as root on 6.18).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use usdt_test_support::c::build_c;
use usdt_test_support::cli::parse_counts;
use usdt_test_support::{ready, ROOT, SDT, SETPRIV};
use usdt_trace::bpf::{uprobe_multi_support, BpfError, MultiCounter, MultiSite, UprobeMulti};
use usdt_trace::{read_file, AttachPoint, KernelFeatures, PerfCounter, Site, Target};

/// `tests/c/multi.c` built as `name` (tests that count every process of a
/// file each get their own copy, so that no other test's process is
/// counted).
fn multi(name: &str) -> PathBuf {
    build_c(name, &["multi.c", "multi_guarded.c"], &["-lpthread"])
}

/// A running `multi` (under `timeout`, so that a hung test cannot leave it
/// behind), driven one command line at a time.
struct Multi {
    child: Child,
    pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Multi {
    fn start(exe: &Path) -> Multi {
        let mut child = Command::new("timeout")
            .args(["-s", "KILL", "120"])
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
        Multi {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Sends one command and returns its answer.
    fn run(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// Ends its input and waits for it to exit.
    fn finish(self) {
        let Multi {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
}

/// Every site of `exe` as placed by `AttachPoint::Auto`, with its slot: the
/// index of its probe in the returned names.
fn sites_by_probe(exe: &Path, sites: &[Site], target: Target) -> (Vec<MultiSite>, Vec<String>) {
    let features = KernelFeatures::detect();
    let mut names: Vec<String> = sites.iter().map(Site::probe).collect();
    names.sort();
    names.dedup();
    let multi = sites
        .iter()
        .map(|s| {
            let slot = names.binary_search(&s.probe()).unwrap() as u32;
            MultiSite::at(s, AttachPoint::Auto, &features, exe, slot, target).unwrap()
        })
        .collect();
    (multi, names)
}

fn counts_by_name(counter: &MultiCounter, names: &[String]) -> BTreeMap<String, u64> {
    let counts = counter.counts().unwrap();
    names.iter().cloned().zip(counts).collect()
}

fn counter_for(exe: &Path, target: Target) -> (MultiCounter, Vec<String>) {
    let sites = read_file(exe).unwrap();
    let (multi, names) = sites_by_probe(exe, &sites, target);
    let mut counter = MultiCounter::new(names.len() as u32).unwrap();
    counter.attach(exe, &multi, target).unwrap();
    (counter, names)
}

#[test]
fn this_kernel_has_uprobe_multi_with_a_process_filter() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    assert_eq!(uprobe_multi_support(), UprobeMulti::Process);
}

#[test]
fn a_pid_filter_counts_every_thread_of_its_process_only() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let mut traced = Multi::start(&exe);
    let mut other = Multi::start(&exe);
    let (counter, names) = counter_for(&exe, Target::Pid(traced.pid));
    // Threads started after attaching are counted; another process running
    // the same file at the same time is not.
    assert_eq!(other.run("threads 2 500"), "done");
    assert_eq!(traced.run("threads 8 1000"), "done");
    assert_eq!(other.run("threads 1 77"), "done");
    let counts = counts_by_name(&counter, &names);
    assert_eq!(counts["multi:hit"], 8000, "{counts:?}");
    assert_eq!(counts["multi:guarded"], 0);
    drop(counter);
    traced.finish();
    other.finish();
}

#[test]
fn pid_0_counts_every_process_of_the_file_and_forked_children() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi_all");
    let mut a = Multi::start(&exe);
    let mut b = Multi::start(&exe);
    let (counter, names) = counter_for(&exe, Target::AllProcesses);
    assert_eq!(a.run("threads 2 100"), "done");
    assert_eq!(b.run("threads 3 100"), "done");
    // A forked child of b (b has not hit the site since the fork, see the
    // docs/site.md on forks and the optimized path).
    assert_eq!(b.run("fork 50"), "done");
    // A process started after attaching.
    let mut c = Multi::start(&exe);
    assert_eq!(c.run("threads 1 7"), "done");
    let counts = counts_by_name(&counter, &names);
    assert_eq!(counts["multi:hit"], 200 + 300 + 50 + 7, "{counts:?}");
    drop(counter);
    for m in [a, b, c] {
        m.finish();
    }
}

#[test]
fn semaphores_are_up_while_attached_and_back_to_0_after_drop() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let mut m = Multi::start(&exe);
    assert_eq!(m.run("sem"), "sem 0");
    assert_eq!(m.run("guarded 5"), "guarded 0");
    let (counter, names) = counter_for(&exe, Target::Pid(m.pid));
    assert_eq!(m.run("sem"), "sem 1");
    assert_eq!(m.run("guarded 5"), "guarded 5");
    assert_eq!(counts_by_name(&counter, &names)["multi:guarded"], 5);
    let slot = names.iter().position(|n| n == "multi:guarded").unwrap();
    assert_eq!(counter.count(slot as u32).unwrap(), 5);
    drop(counter);
    assert_eq!(m.run("sem"), "sem 0");
    assert_eq!(m.run("guarded 5"), "guarded 0");
    m.finish();
}

/// C source with `n` distinct probes `many:pI`; one `fire` hits probe I
/// (I mod 3) + 1 times.
fn many_sites_source(n: usize) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <sys/sdt.h>\n#include <unistd.h>\n\
         static void fire(void) {\n    for (volatile int r = 0; r < 3; r++) {\n",
    );
    for i in 0..n {
        c += &format!("        if (r <= {}) STAP_PROBE(many, p{i});\n", i % 3);
    }
    c += "    }\n}\n\
          int main(void) {\n    char line[16];\n    printf(\"ready %d\\n\", (int)getpid());\n    fflush(stdout);\n\
          \x20   while (fgets(line, sizeof line, stdin)) {\n        fire();\n        printf(\"done\\n\");\n        fflush(stdout);\n    }\n    return 0;\n}\n";
    c
}

/// Builds the program of [`many_sites_source`] (at -O0, so that the
/// compiler keeps one site per probe).
fn many_sites(n: usize) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("multi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join(format!("many{n}.c"));
    let exe = dir.join(format!("many{n}"));
    std::fs::write(&source, many_sites_source(n)).unwrap();
    let status = Command::new("cc")
        .args(["-O0", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .expect("cc runs (apt install gcc systemtap-sdt-dev)");
    assert!(status.success());
    exe
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Attaches the first `n` sites of `exe` to process `m`, fires once, checks
/// every count and returns (attach, detach) in milliseconds.
fn count_sites_exactly(exe: &Path, sites: &[Site], m: &mut Multi) -> (f64, f64) {
    let (multi, names) = sites_by_probe(exe, sites, Target::Pid(m.pid));
    let fds = open_fds();
    let start = Instant::now();
    let mut counter = MultiCounter::new(names.len() as u32).unwrap();
    counter.attach(exe, &multi, Target::Pid(m.pid)).unwrap();
    let attach = start.elapsed().as_secs_f64() * 1e3;
    let held = open_fds() - fds;
    assert_eq!(m.run("fire"), "done");
    let read = Instant::now();
    let counts = counts_by_name(&counter, &names);
    let read = read.elapsed().as_secs_f64() * 1e3;
    for (name, n) in &counts {
        let i: u64 = name.strip_prefix("many:p").unwrap().parse().unwrap();
        assert_eq!(*n, i % 3 + 1, "{name}");
    }
    let start = Instant::now();
    drop(counter);
    let detach = start.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "{} sites: attach {attach:.1} ms, read {read:.1} ms, detach {detach:.1} ms, {held} descriptors held",
        sites.len()
    );
    // The map, the program and the link (other tests open and close
    // descriptors meanwhile, so only roughly).
    assert!(held < 20, "{held} descriptors");
    (attach, detach)
}

#[test]
fn ten_thousand_sites_through_one_link_counted_exactly() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = many_sites(10_000);
    let sites = read_file(&exe).unwrap();
    assert_eq!(sites.len(), 10_000);
    let mut m = Multi::start(&exe);
    count_sites_exactly(&exe, &sites[..1000], &mut m);
    let (attach, detach) = count_sites_exactly(&exe, &sites, &mut m);
    assert!(attach < 10_000.0 && detach < 10_000.0);
    // Nothing counts after detach: attach one site again and fire.
    let (multi, _) = sites_by_probe(&exe, &sites[..1], Target::Pid(m.pid));
    let mut counter = MultiCounter::new(1).unwrap();
    counter.attach(&exe, &multi, Target::Pid(m.pid)).unwrap();
    assert_eq!(m.run("fire"), "done");
    assert_eq!(counter.counts().unwrap(), vec![1]);
    drop(counter);
    m.finish();
}

#[test]
fn a_missing_process_or_file_is_a_plain_error() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let sites = read_file(&exe).unwrap();
    let (multi, names) = sites_by_probe(&exe, &sites, Target::Pid(0x3fff_fff0));
    let mut counter = MultiCounter::new(names.len() as u32).unwrap();
    let err = counter
        .attach(&exe, &multi, Target::Pid(0x3fff_fff0))
        .unwrap_err();
    assert!(matches!(err, BpfError::NoProcess(_)), "{err}");
    let err = counter
        .attach("/nonexistent/multi", &multi, Target::AllProcesses)
        .unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/multi does not exist");
    let bad = [MultiSite {
        slot: 99,
        ..multi[0]
    }];
    let err = counter
        .attach(&exe, &bad, Target::AllProcesses)
        .unwrap_err();
    assert!(
        matches!(err, BpfError::SlotOutOfRange { slot: 99, slots } if slots == names.len() as u32),
        "{err}"
    );
    assert!(err.to_string().contains("slot 99 is past"), "{err}");
    let err = counter.count(99).unwrap_err();
    assert!(
        matches!(err, BpfError::SlotOutOfRange { slot: 99, .. }),
        "{err}"
    );
    let err = counter
        .attach("/a\0b", &multi, Target::AllProcesses)
        .unwrap_err();
    assert!(matches!(err, BpfError::NulInPath { .. }), "{err}");
    assert_eq!(counter.links().count(), 0);
}

/// Runs in a copy of this test binary as user nobody (see below); does
/// nothing in the ordinary run.
#[test]
fn eperm_child() {
    if std::env::var_os("USDT_MULTI_EPERM_CHILD").is_none() {
        return;
    }
    let err = MultiCounter::new(1).unwrap_err();
    println!("error: {err}");
    println!("support: {}", uprobe_multi_support());
}

#[test]
fn without_privilege_the_message_says_what_is_needed() {
    if !ready(&[ROOT, SDT, SETPRIV]) {
        return;
    }
    // A copy any user can run.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("eperm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("multi-test");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let open = |p: &Path, mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    open(&copy, 0o755);
    let mut dirs = vec![];
    let mut d = dir.as_path();
    while let Some(parent) = d.parent() {
        dirs.push(d.to_path_buf());
        d = parent;
    }
    for d in &dirs {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d).unwrap().permissions().mode();
        if mode & 0o011 != 0o011 {
            open(d, mode | 0o011);
        }
    }
    let out = Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "60",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(&copy)
        .args(["--exact", "eperm_child", "--nocapture", "--test-threads=1"])
        .env("USDT_MULTI_EPERM_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(
            "error: BPF is not permitted: run as root, or with CAP_BPF and CAP_PERFMON\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("support: unknown: BPF is not permitted"),
        "{text}"
    );
}

// `usdt count` on the BPF engine, and the perf engine forced.

/// `usdt count ARGS` under `timeout`, with `input` as the command's stdin.
fn usdt_count(args: &[&str], env: &[(&str, &str)], input: &str) -> (String, String) {
    let mut child = Command::new("timeout")
        .args(["-s", "KILL", "120"])
        .arg(env!("CARGO_BIN_EXE_usdt"))
        .arg("count")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// `usdt count ARGS` running beside the test: waits for its "counting"
/// line; `stop` interrupts it and returns its counts.
/// `usdt COMMAND ARGS` under `timeout`, started once its first line
/// says it is at work (`usdt: counting`, `usdt: tracing`).
struct Running(Child);

impl Running {
    /// Starts `usdt COMMAND ARGS`; returns it and its first line.
    fn start(command: &str, args: &[&str]) -> (Running, String) {
        let mut child = Command::new("timeout")
            .args(["-s", "KILL", "120"])
            .arg(env!("CARGO_BIN_EXE_usdt"))
            .arg(command)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let at_work = format!("usdt: {}ing ", command.trim_end_matches('e'));
        assert!(line.starts_with(&at_work), "{line}");
        (Running(child), line)
    }

    /// Stops it with SIGINT after the rings' next read (every 50 ms);
    /// returns what it printed.
    fn stop(self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        // `timeout` passes SIGINT on to usdt.
        let status = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let out = self.0.wait_with_output().unwrap();
        // What it found, then the conventional status of a SIGINT.
        assert_eq!(out.status.code(), Some(130), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn count_command_counts_every_thread() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let (out, _) = usdt_count(&["--", exe.to_str().unwrap()], &[], "threads 8 1000\n");
    let counts = parse_counts(&out);
    assert_eq!(counts["multi:hit"], 8000, "{out}");
}

#[test]
fn count_pid_counts_threads_started_after_attaching() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let mut m = Multi::start(&exe);
    let (counting, _) = Running::start("count", &["-p", &m.pid.to_string()]);
    assert_eq!(m.run("threads 8 1000"), "done");
    let counts = parse_counts(&counting.stop());
    assert_eq!(counts["multi:hit"], 8000, "{counts:?}");
    m.finish();
}

#[test]
fn count_all_sums_every_process_and_a_forked_child() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi_cli_all");
    let mut a = Multi::start(&exe);
    let mut b = Multi::start(&exe);
    let (counting, _) = Running::start("count", &["--all", exe.to_str().unwrap(), "multi:hit"]);
    assert_eq!(a.run("threads 2 100"), "done");
    assert_eq!(b.run("threads 1 30"), "done");
    assert_eq!(b.run("fork 7"), "done");
    let counts = parse_counts(&counting.stop());
    assert_eq!(counts["multi:hit"], 237, "{counts:?}");
    a.finish();
    b.finish();
}

#[test]
fn the_perf_counter_counts_every_thread_the_process_has_when_it_attaches() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let mut m = Multi::start(&exe);
    assert_eq!(m.run("pool 3"), "pooled");
    let sites = read_file(&exe).unwrap();
    let hit: Vec<&Site> = sites.iter().filter(|s| s.name == "hit").collect();
    let mut counter = PerfCounter::new(AttachPoint::Auto);
    counter.attach(&exe, hit, Target::Pid(m.pid)).unwrap();
    // Only the pool's threads fire, none of them the process's first.
    assert_eq!(m.run("pool-run 1000"), "done");
    assert_eq!(counter.probe_counts().unwrap()["multi:hit"], 3000);
    // A thread started after attaching has no event of its own.
    assert_eq!(m.run("threads 1 10"), "done");
    assert_eq!(counter.probe_counts().unwrap()["multi:hit"], 3000);
    drop(counter);
    m.finish();
}

#[test]
fn the_forced_perf_engine_counts_the_same_on_the_main_thread() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi");
    let exe = exe.to_str().unwrap();
    let input = "guarded 25\n";
    let (bpf, _) = usdt_count(&["--engine", "bpf", "--", exe], &[], input);
    let (perf, _) = usdt_count(&["--", exe], &[("USDT_COUNT_ENGINE", "perf")], input);
    let (bpf, perf) = (parse_counts(&bpf), parse_counts(&perf));
    assert_eq!(bpf["multi:guarded"], 25, "{bpf:?}");
    assert_eq!(bpf, perf);
}

// `usdt trace` on the BPF engine: every thread from its first hit.

/// The `multi:hit` lines of `usdt trace` output, per thread id: each
/// thread's `arg1` values in order, checked to be `0..n` with one `arg0`.
fn hits_per_thread(out: &str, pid: u32) -> BTreeMap<u32, usize> {
    let mut seq: BTreeMap<u32, (String, Vec<u64>)> = BTreeMap::new();
    for line in out.lines().filter(|l| l.contains(" multi:hit ")) {
        let words: Vec<&str> = line.split(' ').collect();
        let (p, tid) = words[1].split_once('/').unwrap();
        assert_eq!(p, pid.to_string(), "{line}");
        let tid: u32 = tid.parse().unwrap();
        let id = words[3].to_string();
        let i: u64 = words[4].strip_prefix("arg1=").unwrap().parse().unwrap();
        let entry = seq.entry(tid).or_insert_with(|| (id.clone(), vec![]));
        assert_eq!(entry.0, id, "one thread, one arg0: {line}");
        entry.1.push(i);
    }
    seq.into_iter()
        .map(|(tid, (id, hits))| {
            let want: Vec<u64> = (0..hits.len() as u64).collect();
            assert_eq!(
                hits, want,
                "thread {tid} ({id}): every hit from its first, in order"
            );
            (tid, hits.len())
        })
        .collect()
}

#[test]
fn trace_command_sees_every_thread_from_its_first_hit() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi_trace_cmd");
    let mut child = Command::new("timeout")
        .args(["-s", "KILL", "120"])
        .arg(env!("CARGO_BIN_EXE_usdt"))
        .args(["trace", "--engine", "bpf", "multi:hit", "--"])
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"threads 8 1000\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    let pid: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("ready "))
        .unwrap()
        .parse()
        .unwrap();
    let per_thread = hits_per_thread(&text, pid);
    assert_eq!(per_thread.len(), 8, "{per_thread:?}");
    assert!(per_thread.values().all(|n| *n == 1000), "{per_thread:?}");
    assert!(!err.contains("lost"), "{err}");
}

#[test]
fn trace_pid_sees_threads_started_after_attaching_from_their_first_hit() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = multi("multi_trace_pid");
    let mut m = Multi::start(&exe);
    let pid = m.pid.to_string();
    let (tracer, _) = Running::start("trace", &["--engine", "bpf", "multi:hit", "-p", &pid]);
    assert_eq!(m.run("threads 8 1000"), "done");
    assert_eq!(m.run("fork 5"), "done");
    let text = tracer.stop();
    // Eight threads, 1000 hits each from their first; the forked child is
    // another process, not traced.
    let per_thread = hits_per_thread(&text, m.pid);
    assert_eq!(per_thread.len(), 8, "{per_thread:?}");
    assert!(per_thread.values().all(|n| *n == 1000), "{per_thread:?}");
    m.finish();
}

/// `usdt trace --all` prints the hits of every process that runs the
/// binary, those started before it and a child forked later, with either
/// engine: exactly the hits fired, per process.
#[test]
fn trace_all_prints_every_process_s_hits_with_both_engines() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    for engine in ["bpf", "perf"] {
        let exe = multi(&format!("multi_trace_all_{engine}"));
        let mut a = Multi::start(&exe);
        let mut b = Multi::start(&exe);
        let all = [
            "--engine",
            engine,
            "--all",
            exe.to_str().unwrap(),
            "multi:hit",
        ];
        let (tracer, line) = Running::start("trace", &all);
        assert!(line.contains("every process"), "{engine}: {line}");
        assert_eq!(a.run("threads 2 100"), "done");
        assert_eq!(b.run("threads 1 30"), "done");
        assert_eq!(b.run("fork 7"), "done");
        let text = tracer.stop();
        let mut per_process: BTreeMap<u32, usize> = BTreeMap::new();
        for line in text.lines().filter(|l| l.contains(" multi:hit ")) {
            let pid = line.split(' ').nth(1).and_then(|w| w.split_once('/'));
            *per_process
                .entry(pid.unwrap().0.parse().unwrap())
                .or_default() += 1;
        }
        assert_eq!(per_process.remove(&a.pid), Some(200), "{engine}: {text}");
        assert_eq!(per_process.remove(&b.pid), Some(30), "{engine}: {text}");
        // The forked child: another process of the binary.
        assert_eq!(
            per_process.into_values().collect::<Vec<_>>(),
            [7],
            "{engine}: {text}"
        );
        a.finish();
        b.finish();
    }
}
