//! `usdt trace` and the sampling API: every argument type decoded exactly,
//! and exactly as bpftrace reads it in the same run; twelve arguments; C
//! probes with memory and immediate operands; a million hits with no silent
//! loss; JSON; errors. Needs root (CI runs as root) and bpftrace.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};

use usdt_test_support::c::build_c;
use usdt_test_support::cli::example;
use usdt_test_support::{ready, BPFTRACE, ROOT, SDT, TRACEFS};
use usdt_trace::{Recorder, Value};

fn usdt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(args)
        .output()
        .unwrap()
}

/// The one-line error of a failed run.
fn error(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure: {out:?}");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    err.trim().strip_prefix("usdt: ").unwrap().to_string()
}

fn s(text: &str) -> Value {
    Value::from(text)
}

fn v(n: impl Into<Value>) -> Value {
    n.into()
}

/// What `argtypes once` passes, probe by probe, hit by hit (the pointers
/// are the addresses the program printed).
fn expected(pointers: [u64; 3]) -> Vec<(&'static str, Vec<Value>)> {
    let long = "x".repeat(255); // the staged copy of 300 bytes stops at 255
    vec![
        (
            "unsigned",
            vec![
                v(u8::MAX),
                v(u16::MAX),
                v(u32::MAX),
                v(u64::MAX),
                v(usize::MAX),
            ],
        ),
        (
            "unsigned",
            vec![v(0u8), v(0u16), v(0u32), v(0u64), v(0usize)],
        ),
        (
            "signed",
            vec![
                v(i8::MIN),
                v(i16::MIN),
                v(i32::MIN),
                v(i64::MIN),
                v(isize::MIN),
            ],
        ),
        (
            "signed",
            vec![
                v(i8::MAX),
                v(i16::MAX),
                v(i32::MAX),
                v(i64::MAX),
                v(-1isize),
            ],
        ),
        (
            "other",
            vec![
                v(true),
                v(false),
                v('é'),
                v(1.5f32.to_bits()),
                v((-2.0f64).to_bits()),
            ],
        ),
        (
            "strings",
            vec![
                s("hello"),
                s("tab\there \"quoted\""),
                s("c string"),
                s("owned c string"),
            ],
        ),
        ("strings", vec![s(&long), s(""), s(""), s("")]),
        ("pointers", pointers.map(v).to_vec()),
        (
            "twelve",
            vec![
                v(u64::MAX),
                v(i64::MIN),
                v(u32::MAX),
                v(i32::MIN),
                v(u16::MAX),
                v(i16::MIN),
                v(u8::MAX),
                v(i8::MIN),
                v(true),
                v('z'),
                v(usize::MAX),
                v(isize::MIN),
            ],
        ),
    ]
}

/// `usdt trace`'s line after the time and pid/tid: `argtypes:NAME arg0=V ...`
/// (nothing after the name for a probe without arguments).
fn usdt_line(name: &str, args: &[Value]) -> String {
    let args: String = args
        .iter()
        .enumerate()
        .map(|(i, v)| format!(" arg{i}={v}"))
        .collect();
    format!("argtypes:{name}{args}")
}

/// What the bpftrace script below prints for the same hit: `NAME V ...`,
/// the first six arguments, strings as their first 63 bytes in quotes.
fn bpftrace_line(name: &str, args: &[Value]) -> String {
    let words: Vec<String> = args
        .iter()
        .take(6)
        .map(|v| match v {
            Value::Str { bytes, .. } => {
                format!(
                    "'{}'",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(63)])
                )
            }
            v => v.to_string(),
        })
        .collect();
    format!("{name} {}", words.join(" "))
}

/// A bpftrace script printing each probe's first six arguments with `%ld`
/// for signed and `%lu` for unsigned ones, `str()` for strings.
fn bpftrace_script(bin: &str) -> String {
    let probes: [(&str, &str); 7] = [
        ("unsigned", "uuuuu"),
        ("signed", "sssss"),
        ("other", "uuuuu"),
        ("strings", "SSSS"),
        ("pointers", "uuu"),
        ("twelve", "ususus"),
        ("done", ""),
    ];
    let mut script = String::from("BEGIN { printf(\"ready\\n\"); }\n");
    for (name, kinds) in probes {
        if kinds.is_empty() {
            script.push_str(&format!("usdt:{bin}:argtypes:{name} {{ exit(); }}\n"));
            continue;
        }
        let formats: Vec<&str> = kinds
            .chars()
            .map(|k| match k {
                's' => "%ld",
                'S' => "'%s'",
                _ => "%lu",
            })
            .collect();
        let args: Vec<String> = kinds
            .chars()
            .enumerate()
            .map(|(i, k)| match k {
                'S' => format!("str(arg{i})"),
                _ => format!("arg{i}"),
            })
            .collect();
        script.push_str(&format!(
            "usdt:{bin}:argtypes:{name} {{ printf(\"{name} {}\\n\", {}); }}\n",
            formats.join(" "),
            args.join(", ")
        ));
    }
    script
}

fn read_line(r: &mut impl BufRead) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

/// bpftrace and `usdt trace` attach to the same process and see the same
/// hits: usdt prints exactly the values the program passed, and exactly
/// what bpftrace prints for every argument bpftrace reads (arg0..arg5).
#[test]
fn trace_decodes_every_argument_type_as_bpftrace_does_in_the_same_run() {
    if !ready(&[ROOT, TRACEFS, BPFTRACE]) {
        return;
    }
    let bin = example("argtypes");
    let b = bin.to_str().unwrap();
    let mut child = Command::new(&bin)
        .arg("phases")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let mut program = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut program), "waiting\n");

    let mut bpftrace = Command::new("bpftrace")
        .args(["-p", &pid, "-e", &bpftrace_script(b)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("bpftrace runs (apt-get install bpftrace)");
    let mut bpf_out = BufReader::new(bpftrace.stdout.take().unwrap());
    loop {
        let line = read_line(&mut bpf_out);
        assert!(!line.is_empty(), "bpftrace ended before attaching");
        if line == "ready\n" {
            break;
        }
    }
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(["trace", "--raw", "--limit", "10", "-p", &pid])
        .args((0..4).flat_map(|i| ["--str".to_string(), format!("argtypes:strings:{i}")]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = read_line(&mut BufReader::new(usdt.stderr.take().unwrap()));
    assert!(started.starts_with("usdt: tracing "), "{started}");

    // Both are attached: let the program fire, then wait for both tracers.
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    let pointers = read_line(&mut program);
    let pointers: Vec<u64> = pointers
        .trim()
        .strip_prefix("pointers ")
        .unwrap()
        .split(' ')
        .map(|p| p.parse().unwrap())
        .collect();
    let mut bpf_text = String::new();
    bpf_out.read_to_string(&mut bpf_text).unwrap();
    bpftrace.wait().unwrap();
    let usdt_out = usdt.wait_with_output().unwrap();
    assert!(usdt_out.status.success(), "{usdt_out:?}");
    drop(stdin);
    assert!(child.wait().unwrap().success());

    let want = expected(pointers.try_into().unwrap());
    let usdt_text = String::from_utf8(usdt_out.stdout).unwrap();
    let got: Vec<&str> = usdt_text
        .lines()
        .map(|l| l.splitn(3, ' ').nth(2).unwrap())
        .collect();
    let mut want_usdt: Vec<String> = want.iter().map(|(n, a)| usdt_line(n, a)).collect();
    want_usdt.push("argtypes:done".into());
    assert_eq!(got, want_usdt, "usdt trace printed:\n{usdt_text}");
    // Every line names the traced process and thread.
    assert!(usdt_text
        .lines()
        .all(|l| l.split(' ').nth(1) == Some(&format!("{pid}/{pid}"))));

    let bpf_got: Vec<&str> = bpf_text.lines().filter(|l| !l.is_empty()).collect();
    let want_bpf: Vec<String> = want.iter().map(|(n, a)| bpftrace_line(n, a)).collect();
    assert_eq!(bpf_got, want_bpf, "bpftrace printed:\n{bpf_text}");
}

/// The library API: record a command and assert what fired, all twelve
/// arguments of the twelve-argument probe included.
#[test]
fn recorder_asserts_every_probe_with_its_arguments() {
    if !ready(&[ROOT]) {
        return;
    }
    // Without kernel fetch: strings from the stack copy, read after the fact.
    let run = Recorder::new(example("argtypes"))
        .kernel_fetch(false)
        .args(["once"])
        .probes("argtypes:*")
        .string_arg("argtypes:strings", 0)
        .string_arg("argtypes:strings", 1)
        .run()
        .unwrap();
    assert_eq!(run.lost, 0);
    assert_eq!(run.status, usdt_trace::ExitStatus::Code(0));
    let want = expected([0; 3]);
    for (name, args) in &want {
        let probe = format!("argtypes:{name}");
        match *name {
            // The C strings are read after the fact from a process that has
            // exited (only the staged &str and String copies are exact):
            // compare the first two arguments.
            "strings" => assert!(
                run.of(&probe).any(|h| h.args[..2] == args[..2]),
                "{:?}",
                run.args_of(&probe)
            ),
            "pointers" => assert!(run
                .of(&probe)
                .all(|h| h.args.iter().all(|a| a.int().is_some_and(|p| p > 0)))),
            _ => run.assert_fired(&probe, args),
        }
    }
    let twelve = run.args_of("argtypes:twelve");
    assert_eq!(twelve.len(), 1);
    assert_eq!(twelve[0].len(), 12);
    assert_eq!(run.hits.len(), want.len());
    // Hits come in the order they fired.
    let names: Vec<&str> = run.hits.iter().map(|h| &*h.name).collect();
    let want_names: Vec<&str> = want.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want_names);
}

/// GCC puts the arguments of a leaf function's probe in the red zone
/// (`-8@-8(%rsp)`) and constants as immediates (`-4@$5`); a struct in the
/// caller's frame is read through a pointer (`-8@(%rdi)`), inside the stack
/// copy the sample carries.
#[test]
fn c_probes_with_memory_and_immediate_operands() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    // The kernel reads the red zone at the hit (the BPF program, or a fetch
    // event with perf), or usdt reads it from the process while leaf waits.
    c_memory_operands(&[]);
    c_memory_operands(&["--engine", "perf"]);
    c_memory_operands(&["--no-kernel-fetch"]);
}

fn c_memory_operands(options: &[&str]) {
    let exe = build_c("memargs", &["memargs.c"], &[]);
    let list = String::from_utf8(usdt(&["list", exe.to_str().unwrap()]).stdout).unwrap();
    let leaf = list.lines().find(|l| l.starts_with("cmem:leaf ")).unwrap();
    assert!(
        leaf.ends_with("-8@-8(%rsp) -4@-12(%rsp) -2@-14(%rsp) -4@$5 -4@$-7"),
        "{leaf}"
    );
    let framed = list
        .lines()
        .find(|l| l.starts_with("cmem:framed "))
        .unwrap();
    assert!(
        framed.ends_with("-8@(%rdi) -4@8(%rdi) -2@12(%rdi) -1@14(%rdi)"),
        "{framed}"
    );
    let n = 3i64;
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .arg("trace")
        .args(options)
        .args(["cmem:*", "--", exe.to_str().unwrap(), &n.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(usdt.stdout.take().unwrap());
    for i in 0..n {
        let line = read_line(&mut out);
        let mut words = line.split(' ');
        let pid: i32 = words
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let rest: Vec<&str> = words.collect();
        let x = i64::MIN + i;
        let want = format!(
            "cmem:leaf arg0={x} arg1={} arg2={} arg3=5 arg4=-7\n",
            i32::MAX as i64 - i,
            (x.wrapping_neg()) as i16
        );
        assert_eq!(rest.join(" "), want);
        // Let leaf return (its red zone was read).
        assert!(pid > 0, "never kill(0): that is our process group");
        // SAFETY: signalling the traced program, a child of our child, by
        // a positive pid.
        unsafe { libc::kill(pid, libc::SIGUSR1) };
        let line = read_line(&mut out);
        let rest = line.splitn(3, ' ').nth(2).unwrap();
        assert_eq!(
            rest,
            format!(
                "cmem:framed arg0={} arg1={} arg2={} arg3={}\n",
                i64::MAX - i,
                i32::MIN as i64 + i,
                i16::MIN as i64 + i,
                i8::MIN as i64 + i
            )
        );
    }
    assert_eq!(read_line(&mut out), "");
    assert!(usdt.wait().unwrap().success());
}

/// A million hits: exactly a million lines, in order, or the count of lost
/// samples on stderr; never a silent shortfall.
#[test]
fn a_million_hits_are_all_printed_or_counted_as_lost() {
    if !ready(&[ROOT]) {
        return;
    }
    const HITS: u64 = 1_000_000;
    let exe = example("argtypes");
    let out = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(["trace", "--raw", "argtypes:hot", "--"])
        .arg(&exe)
        .args(["hot", &HITS.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let stderr = String::from_utf8(out.stderr).unwrap();
    let mut lines = 0u64;
    let mut last: Option<u64> = None;
    for line in out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).unwrap();
        let (_, args) = line.split_once(" argtypes:hot arg0=").unwrap();
        let (i, neg) = args.split_once(" arg1=").unwrap();
        let i: u64 = i.parse().unwrap();
        assert_eq!(neg.parse::<i64>().unwrap(), -(i as i64), "{line}");
        assert!(last.is_none_or(|l| l < i), "out of order: {line}");
        last = Some(i);
        lines += 1;
    }
    let lost: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("usdt: ")?.split_once(" samples were lost"))
        .map_or(0, |(n, _)| n.parse().unwrap());
    eprintln!("{lines} lines, {lost} lost");
    assert_eq!(lines + lost, HITS, "stderr: {stderr}");
}

/// `--json`: one object per hit, 64-bit values exact; `--limit`; the
/// command's own output passes through and its exit status is usdt's.
#[test]
fn json_lines_limit_and_the_commands_output() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = example("argtypes");
    let out = usdt(&[
        "trace",
        "--raw",
        "--json",
        "--limit",
        "3",
        "argtypes:*",
        "--",
        exe.to_str().unwrap(),
        "once",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (program, hits): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with("pointers "));
    assert_eq!(program.len(), 1, "{text}");
    assert_eq!(hits.len(), 3, "{text}");
    let first: serde_json::Value = serde_json::from_str(hits[0]).unwrap();
    assert_eq!(first["probe"], "argtypes:unsigned");
    assert_eq!(first["args"][3].as_u64(), Some(u64::MAX));
    assert_eq!(first["args"][0].as_u64(), Some(255));
    let third: serde_json::Value = serde_json::from_str(hits[2]).unwrap();
    assert_eq!(third["args"][3].as_i64(), Some(i64::MIN));
    assert!(third["time_ns"].as_u64().unwrap() > 0 && third["tid"] == third["pid"]);

    let status = usdt(&["trace", "--", "/bin/sh", "-c", "exit 3"]);
    assert!(error(&status).ends_with("has no probes"));
    let c = build_c("memargs", &["memargs.c"], &[]);
    let out = usdt(&["trace", "cmem:framed", "--", c.to_str().unwrap(), "0"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
}

#[test]
fn trace_errors_are_one_plain_sentence() {
    let exe = example("argtypes");
    let e = exe.to_str().unwrap();
    assert_eq!(
        error(&usdt(&["trace", "--", "/no/such/file"])),
        "/no/such/file does not exist"
    );
    assert_eq!(
        error(&usdt(&["trace", "--str", "argtypes:strings", "--", e])),
        "--str takes PROBE-GLOB:N, such as 'http:request_start:1', not \"argtypes:strings\""
    );
    assert_eq!(
        error(&usdt(&["trace", "--str", "argtypes:strings:4", "--", e])),
        "--str argtypes:strings:4 names argument 4, but argtypes:strings has 4 arguments (counted from 0)"
    );
    assert_eq!(
        error(&usdt(&[
            "trace",
            "argtypes:hot",
            "--str",
            "argtypes:strings:0",
            "--",
            e
        ])),
        "--str argtypes:strings:0 matches no traced probe"
    );
    assert_eq!(
        error(&usdt(&["trace", "--limit", "0", "--", e])),
        "the limit is a positive number of hits, not \"0\""
    );
    let e2 = error(&usdt(&["trace", "argtypes:hto", "--", e]));
    assert!(
        e2.starts_with("no probe of ")
            && e2.contains("matches argtypes:hto; the closest are argtypes:hot"),
        "{e2}"
    );
    // A process that has exited.
    let mut child = Command::new(&exe)
        .arg("once")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    child.wait().unwrap();
    assert_eq!(
        error(&usdt(&["trace", "-p", &pid])),
        format!("process {pid} does not exist or has exited")
    );
}

/// `-p` traces every thread the process has (a uprobe perf event samples
/// only the thread it was opened for).
#[test]
fn trace_a_process_with_threads() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = build_c("threads", &["threads.c"], &["-pthread"]);
    let mut child = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut program = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut program), format!("ready {pid}\n"));
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(["trace", "--limit", "12", "thr:hit", "-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = read_line(&mut BufReader::new(usdt.stderr.take().unwrap()));
    assert!(
        started.ends_with("(4 threads); Ctrl-C stops\n"),
        "{started}"
    );
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    assert_eq!(read_line(&mut program), "done\n");
    let out = usdt.wait_with_output().unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Per thread: its id and the hits in order; the main thread fires 0.
    let mut by_thread: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[2], "thr:hit", "{line}");
        by_thread
            .entry(words[1].to_string())
            .or_default()
            .push(words[3..].join(" "));
    }
    assert_eq!(by_thread.len(), 4, "{text}");
    for (thread, hits) in &by_thread {
        let id = &hits[0]["arg0=".len()..hits[0].find(' ').unwrap()];
        let want: Vec<String> = (0..3).map(|i| format!("arg0={id} arg1={i}")).collect();
        assert_eq!(hits, &want, "{thread}");
        assert_eq!(thread == &format!("{pid}/{pid}"), id == "0", "{text}");
    }
}

/// A traced command may start threads and processes: `usdt trace` and
/// `usdt count` do not inherit their uprobe events into new tasks (the
/// kernel then failed the program's pthread_create and fork with EFAULT).
#[test]
fn a_traced_command_starts_threads_and_processes() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = build_c("spawn", &["spawn.c"], &["-pthread"]);
    let e = exe.to_str().unwrap();
    for command in ["trace", "count"] {
        let out = usdt(&[command, "spawn:hit", "--", e]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        // The program's lines, with usdt's between them.
        let own: Vec<&str> = text.lines().filter(|l| l.contains(": ")).collect();
        assert_eq!(own, ["pthread_create: ok", "fork: ok"], "{command}: {text}");
        match command {
            // The BPF sampler sees every thread from its first hit: the
            // thread's hit and the main thread's, not the forked child's
            // (another process).
            "trace" => {
                let hits: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.split_once(" spawn:hit ").map(|(_, a)| a))
                    .collect();
                assert_eq!(hits, ["arg0=1", "arg0=0"], "{text}");
            }
            _ => assert!(text.lines().any(|l| l == "spawn:hit 2"), "{text}"),
        }
    }
}
