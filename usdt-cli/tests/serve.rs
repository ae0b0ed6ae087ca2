//! `usdt serve` scraped by a real Prometheus (Debian's `prometheus`,
//! installed on first use, started here on 127.0.0.1), queried through its
//! HTTP API: hit totals equal the hits the traced programs made (one
//! started before `serve`, two after), the latency histogram's count equals
//! their START/END pairs and its sum their own measured durations. SIGTERM
//! detaches: semaphores back to 0, the probe sites' bytes as in the file.
//! Needs root and BPF uprobe_multi links (Linux 6.6+, x86-64).

use usdt_test_support::cli::example;
use usdt_test_support::{ready, wait_for, ROOT};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use usdt_test_support::Need;

const PROMETHEUS: Need = Need::package(
    usdt_provision::PROMETHEUS,
    "tests/serve.rs scrapes `usdt serve` with a real Prometheus",
);

/// A port free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The body of `GET path` on 127.0.0.1:port, if it answered 200.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then_some(())?;
    head.split_whitespace()
        .nth(1)
        .filter(|c| *c == "200")
        .map(|_| body.to_string())
}

/// `query` percent-encoded for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus of its own: a scrape config for `target`, every second.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let port = free_port();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: usdt\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        let p = Prometheus { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(port, "/-/ready").is_none() {
            assert!(Instant::now() < deadline, "Prometheus is not ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// The single value of an instant query, if it has one.
    fn value(&self, query: &str) -> Option<f64> {
        let body = get(self.port, &format!("/api/v1/query?query={}", encode(query)))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        let [one] = &result[..] else {
            return None;
        };
        one["value"][1].as_str()?.parse().ok()
    }

    /// Waits (up to 60 s: scrapes every second) for `query` to be
    /// `expected`, and returns its last value.
    fn wait_for(&self, query: &str, expected: f64) -> Option<f64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.value(query);
            if v == Some(expected) || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed and reaped when dropped, so that a failing test
/// leaves nothing behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A run of the latency example: `ready PID`, then its requests.
struct Program {
    child: Reaped,
    pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Program {
    /// Starts `program N --wait`: it fires once told to.
    fn start(program: &Path, n: u64) -> Program {
        let mut child = Command::new(program)
            .args([&n.to_string(), "--wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
        Program {
            child: Reaped(child),
            pid,
            stdin,
            stdout,
        }
    }

    /// Lets it fire and returns its pairs, their measured sum in ns, and
    /// how many it measured below 2^22 ns.
    fn run(mut self) -> (u64, u64, u64) {
        writeln!(self.stdin, "go").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(self.child.0.wait().unwrap().success());
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "pairs", "{line}");
        let n = |i: usize| words[i].parse().unwrap();
        (n(1), n(3), n(5))
    }
}

/// The latency example copied for this test alone (`--all` covers every
/// process of the file: no other test's process may run it).
fn private_copy(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("latency");
    std::fs::copy(example("latency"), &copy).unwrap();
    copy
}

/// The semaphore value of every probe of `program` in process `pid`, and
/// whether each site's bytes in the process are those of the file (no
/// breakpoint left).
fn semaphores_and_sites(pid: u32, program: &Path) -> (Vec<u16>, bool) {
    let objects = usdt_trace::read_process(pid).unwrap();
    let object = objects
        .iter()
        .find(|o| o.path == program)
        .expect("the program is mapped");
    let sites = object.probes.as_ref().unwrap().sites.clone();
    let semaphores = sites
        .iter()
        .filter_map(|s| s.semaphore)
        .map(|a| usdt_trace::read_semaphore(pid, a.wrapping_add(object.bias)).unwrap())
        .collect();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let clean = sites.iter().all(|s| {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; s.bytes.len()];
        mem.read_exact_at(&mut bytes, s.location.wrapping_add(object.bias))
            .unwrap();
        bytes == s.bytes
    });
    (semaphores, clean)
}

#[test]
fn prometheus_scrapes_the_exact_totals_of_every_process() {
    if !ready(&[ROOT, PROMETHEUS]) {
        return;
    }
    let program = private_copy("totals");
    let dir = program.parent().unwrap().to_path_buf();
    let port = free_port();
    let prometheus = Prometheus::start(&dir, port);
    // One process before serve attaches: --all covers it too.
    let early = Program::start(&program, 8);
    let mut serve = Reaped(
        Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--all"])
            .arg(&program)
            .args(["lat:*", "--latency", "lat:start,lat:done,id"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(serve.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let sites = usdt_trace::read_file(&program).unwrap();
    let lat = sites.iter().filter(|s| s.provider == "lat").count();
    assert!(
        line.starts_with(&format!("usdt: serving {lat} sites of every process of ")),
        "{line}"
    );
    let (mut pairs, mut sum_ns, mut own_below) = early.run();
    for n in [13, 6] {
        let (p, s, b) = Program::start(&program, n).run();
        pairs += p;
        sum_ns += s;
        own_below += b;
    }
    assert_eq!(pairs, 27);
    let binary = program.to_str().unwrap();
    for probe in ["start", "done", "route"] {
        let q = format!(
            "usdt_probe_hits_total{{binary=\"{binary}\",provider=\"lat\",probe=\"{probe}\"}}"
        );
        assert_eq!(prometheus.wait_for(&q, 27.0), Some(27.0), "{q}");
    }
    let labels = format!("binary=\"{binary}\",start=\"lat:start\",end=\"lat:done\"");
    let count = format!("usdt_latency_seconds_count{{{labels}}}");
    assert_eq!(prometheus.wait_for(&count, 27.0), Some(27.0));
    let sum = prometheus
        .value(&format!("usdt_latency_seconds_sum{{{labels}}}"))
        .unwrap();
    let own = sum_ns as f64 / 1e9;
    eprintln!("Prometheus: 27 pairs, sum {sum:.6} s; the programs measured {own:.6} s");
    assert!(
        (sum - own).abs() / own < 0.05,
        "Prometheus {sum} s, programs {own} s"
    );
    // The requests that wait 1 ms (the even ids: 4 + 7 + 3 of 27) are below 4.2 ms as far as the
    // machine's load lets them: as many as the programs measured, but for
    // one at the edge.
    let below = prometheus
        .value(&format!(
            "usdt_latency_seconds_bucket{{{labels},le=\"0.004194304\"}}"
        ))
        .unwrap();
    assert!(below <= 14.0, "{below} of 27 below 4.2 ms");
    assert!(
        (below - own_below as f64).abs() <= 1.0,
        "Prometheus {below} below 4.2 ms, the programs {own_below}"
    );
    let inf = prometheus
        .value(&format!(
            "usdt_latency_seconds_bucket{{{labels},le=\"+Inf\"}}"
        ))
        .unwrap();
    assert_eq!(inf, 27.0);

    // A process waiting while serve is attached: its semaphores are raised;
    // after SIGTERM they are 0 and no breakpoint is left in it.
    let waiting = Program::start(&program, 1);
    wait_for("the semaphores to rise", || {
        semaphores_and_sites(waiting.pid, &program)
            .0
            .iter()
            .all(|v| *v > 0)
    });
    // SAFETY: kill with a valid pid and signal has no memory effects.
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) };
    let status = serve.0.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let (semaphores, clean) = semaphores_and_sites(waiting.pid, &program);
    assert!(semaphores.iter().all(|v| *v == 0), "{semaphores:?}");
    assert!(clean, "a probe site still differs from the file");
    assert_eq!(waiting.run().0, 1);
}

/// `--latency START,END,KEY,BY` with `--top 2`: two values of `path` get
/// series of their own, the others are summed in `value="other"`; and
/// `--if` counts only the hits it passes. On a program written outside
/// the project (`tests/outside/requests.rs`), copied for this test alone.
#[test]
fn prometheus_scrapes_a_series_per_value_and_the_filtered_hits() {
    if !ready(&[ROOT, PROMETHEUS]) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-{}", std::process::id()))
        .join("by");
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("requests");
    std::fs::copy(usdt_test_support::cli::outside("requests"), &program).unwrap();
    let port = free_port();
    let prometheus = Prometheus::start(&dir, port);
    let mut serve = Reaped(
        Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--all"])
            .arg(&program)
            .args([
                "http:request_done",
                "--if",
                "status >= 500",
                "--top",
                "2",
                "--latency",
                "http:request_start,http:request_done,id,path",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(serve.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.starts_with("usdt: serving "), "{line}");
    // 4 rounds of the 4 paths, status 200; then 400 requests, some 500 or
    // more.
    let mut waiting = Command::new(&program)
        .args(["latency", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(waiting.wait().unwrap().success());
    let out = Command::new(&program)
        .args(["count", "400"])
        .output()
        .unwrap();
    let failed = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(3)
                .is_some_and(|s| s.parse::<u16>().unwrap() >= 500)
        })
        .count() as f64;
    assert!(failed > 0.0);
    let binary = program.to_str().unwrap();
    let hits = format!(
        "usdt_probe_hits_total{{binary=\"{binary}\",provider=\"http\",probe=\"request_done\"}}"
    );
    assert_eq!(prometheus.wait_for(&hits, failed), Some(failed), "{hits}");
    // 16 pairs of 4 paths, then 400 more of 5 paths: 2 series and other.
    let labels = format!(
        "binary=\"{binary}\",start=\"http:request_start\",end=\"http:request_done\",by=\"path\""
    );
    let all = format!("sum(usdt_latency_seconds_count{{{labels}}})");
    assert_eq!(prometheus.wait_for(&all, 416.0), Some(416.0), "{all}");
    let series = format!("count(usdt_latency_seconds_count{{{labels}}})");
    assert_eq!(prometheus.value(&series), Some(3.0), "{series}");
    let other = format!("usdt_latency_seconds_count{{{labels},value=\"other\"}}");
    let chosen = format!("sum(usdt_latency_seconds_count{{{labels},value!=\"other\"}})");
    let (other, chosen) = (prometheus.value(&other), prometheus.value(&chosen));
    assert_eq!(other.zip(chosen).map(|(o, c)| o + c), Some(416.0));
    // Each path's series counts its pairs: 4 of the latency rounds, and its
    // share of the 400.
    let per_path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(' ').nth(2).map(String::from))
        .fold(std::collections::BTreeMap::new(), |mut m, p| {
            *m.entry(p).or_insert(0.0) += 1.0;
            m
        });
    let mut seen = 0;
    for (path, n) in &per_path {
        let q = format!("usdt_latency_seconds_count{{{labels},value=\"{path}\"}}");
        if let Some(v) = prometheus.value(&q) {
            let rounds = if path.as_str() == "/static/logo.png" {
                0.0
            } else {
                4.0
            };
            assert_eq!(v, n + rounds, "{q}");
            seen += 1;
        }
    }
    assert_eq!(seen, 2);
    // SAFETY: kill with a valid pid and signal has no memory effects.
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) };
    assert_eq!(serve.0.wait().unwrap().code(), Some(128 + libc::SIGTERM));
}

#[test]
fn a_bad_address_or_a_port_in_use_is_one_line_and_exit_2() {
    if !ready(&[ROOT]) {
        return;
    }
    let program = example("latency");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for (listen, says) in [
        (format!("127.0.0.1:{port}"), "Address already in use"),
        ("nowhere".to_string(), "invalid socket address"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(["serve", "--listen", &listen, "--all"])
            .arg(&program)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{listen}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("usdt: cannot serve on {listen}: ")) && err.contains(says),
            "{err}"
        );
    }
}
