//! PostgreSQL traced as a DBA would: Debian's `postgres` (its probes typed
//! by the built-in catalog), a cluster of the test's own under pgbench,
//! every backend a process forked by the postmaster, so `--all`.
//!
//! Each measured run has a control run: the same pgbench options with a
//! script that sends no statement, so that what connecting costs (each
//! new backend commits a transaction of its own at start) and anything
//! else the server does is counted there too, and the difference is the
//! script's alone.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use usdt_test_support::cli::parse_counts;
use usdt_test_support::postgres::{Cluster, IDLE_SCRIPT, TPCB_SCRIPT, TPCB_STATEMENTS};
use usdt_test_support::process::{exit_code, reader, signal, wait_deadline};
use usdt_test_support::{ready, POSTGRESQL, ROOT, SETPRIV, TRACEFS};

/// Transactions per client, clients.
const N: u64 = 40;
const C: u64 = 3;

fn needs() -> bool {
    ready(&[ROOT, TRACEFS, POSTGRESQL, SETPRIV])
}

/// A `usdt` command attached to every process of the cluster's postgres,
/// started and waited for (its "Ctrl-C" line).
struct Tracer {
    child: Child,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Tracer {
    fn start(cluster: &Cluster, args: &[&str]) -> Tracer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_usdt"))
            .args(args)
            .arg("--all")
            .arg(&cluster.postgres)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = reader(child.stdout.take().unwrap());
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        let mut said = String::new();
        while !first.contains("Ctrl-C") {
            first.clear();
            assert!(
                err.read_line(&mut first).unwrap() > 0,
                "usdt {args:?} ended before attaching: {said}"
            );
            said.push_str(&first);
        }
        let stderr = reader(err);
        Tracer {
            child,
            stdout,
            stderr,
        }
    }

    /// Ctrl-C, then what it printed (it exits as the signal ended it).
    fn finish(mut self) -> String {
        signal(self.child.id(), libc::SIGINT);
        let status = wait_deadline(&mut self.child, 60);
        let out = self.stdout.join().unwrap();
        let err = self.stderr.join().unwrap();
        assert_eq!(exit_code(status), 130, "usdt: {status}\n{out}\n{err}");
        out
    }
}

/// What `usdt ARGS --all postgres` prints while pgbench runs `script`
/// with `options`.
fn traced(cluster: &Cluster, args: &[&str], script: &str, options: &[&str]) -> String {
    let tracer = Tracer::start(cluster, args);
    let path = cluster.write("script.sql", script).unwrap();
    let mut pgbench = vec!["-n", "-f", path.to_str().unwrap()];
    pgbench.extend(options);
    cluster.pgbench(&pgbench).unwrap();
    tracer.finish()
}

/// The count of `probe` in `usdt count` output (absent: 0).
fn count_of(out: &str, probe: &str) -> u64 {
    parse_counts(out).get(probe).copied().unwrap_or(0)
}

/// Commits counted under the TPC-B-like script less those of the control
/// run: exactly one per transaction, with one backend per client and with
/// a new backend per transaction (`-C`).
#[test]
fn count_all_counts_each_commit() {
    if !needs() {
        return;
    }
    let cluster = Cluster::start("count", &["autovacuum=off"]).unwrap();
    let (n, c) = (N.to_string(), C.to_string());
    for connect in [None, Some("-C")] {
        let mut options = vec!["-t", n.as_str(), "-c", c.as_str()];
        options.extend(connect);
        let args = ["count", "postgresql:transaction__*"];
        let control = traced(&cluster, &args, IDLE_SCRIPT, &options);
        let run = traced(&cluster, &args, TPCB_SCRIPT, &options);
        let commits = count_of(&run, "postgresql:transaction__commit");
        let background = count_of(&control, "postgresql:transaction__commit");
        eprintln!("{connect:?}: {commits} commits, {background} in the control run");
        assert_eq!(
            commits - background,
            N * C,
            "{connect:?}: run\n{run}\ncontrol\n{control}"
        );
        assert_eq!(
            count_of(&run, "postgresql:transaction__start") - commits,
            count_of(&control, "postgresql:transaction__start") - background,
            "every transaction started is committed: {run}"
        );
        // Each new backend commits one transaction of its own at start:
        // one per client, or one per transaction with -C.
        let backends = if connect.is_some() { N * C } else { C };
        assert!(background >= backends, "{connect:?}: {control}");
    }
}

/// `latency query__start query__done`: one pair per statement pgbench
/// sent; `trace query__start`: the statements' text, by name.
#[test]
fn latency_pairs_each_query_and_trace_prints_them() {
    if !needs() {
        return;
    }
    let cluster = Cluster::start("queries", &["autovacuum=off"]).unwrap();
    let (n, c) = (N.to_string(), C.to_string());
    let options = ["-t", n.as_str(), "-c", c.as_str()];
    let args = [
        "latency",
        "postgresql:query__start",
        "postgresql:query__done",
        "--json",
    ];
    let pairs = |out: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        v["count"].as_u64().unwrap()
    };
    let control = traced(&cluster, &args, IDLE_SCRIPT, &options);
    let run = traced(&cluster, &args, TPCB_SCRIPT, &options);
    eprintln!(
        "{} pairs, {} in the control run",
        pairs(&run),
        pairs(&control)
    );
    assert_eq!(
        pairs(&run) - pairs(&control),
        N * C * TPCB_STATEMENTS,
        "{run}\n{control}"
    );

    let out = traced(
        &cluster,
        &["trace", "postgresql:query__start"],
        TPCB_SCRIPT,
        &options,
    );
    let queries: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            l.split_once(" postgresql:query__start query=\"")
                .map(|(_, q)| q)
        })
        .collect();
    let starting = |prefix: &str| queries.iter().filter(|q| q.starts_with(prefix)).count() as u64;
    for statement in [
        "BEGIN;\"",
        "UPDATE pgbench_accounts SET abalance = abalance + ",
        "SELECT abalance FROM pgbench_accounts WHERE aid = ",
        "UPDATE pgbench_tellers SET tbalance = tbalance + ",
        "UPDATE pgbench_branches SET bbalance = bbalance + ",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (",
        "END;\"",
    ] {
        assert_eq!(starting(statement), N * C, "{statement}: {out}");
    }
}
