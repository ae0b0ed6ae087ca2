//! Stacks without frame pointers: `usdt count --by stack` and `usdt trace
//! --stack` on a release build of `examples/stacks.rs` (no frame pointers),
//! whose probe `app:respond` is reached through three call paths a known
//! number of times each; against bpftrace's `ustack`, which walks frame
//! pointers. Needs root (and bpftrace, installed on first use).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use object::{Object, ObjectSection, ObjectSymbol};
use usdt_test_support::cli::stdout;
use usdt_test_support::process::{reader, wait_deadline};
use usdt_test_support::shapes::{self, Shape};
use usdt_test_support::{ready, BPFTRACE, ROOT, TRACEFS};

/// How many times each path fires: `serve_static`, `serve_api` (through
/// `authorize`), `run_job`.
const COUNTS: [u64; 3] = [11, 23, 37];

/// The leaf end of each path's folded stack, root first.
const PATHS: [&str; 3] = [
    "stacks::main;stacks::serve_static;stacks::respond",
    "stacks::main;stacks::serve_api;stacks::authorize;stacks::respond",
    "stacks::main;stacks::run_job;stacks::respond",
];

/// The example, built in release.
fn program() -> PathBuf {
    shapes::example("stacks", Shape::Release)
}

fn counts() -> Vec<String> {
    COUNTS.iter().map(u64::to_string).collect()
}

/// The example started with `--wait`: it fires when told to, and exits
/// once its standard input closes.
struct Waiting {
    child: Child,
    pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Waiting {
    fn start(program: &Path) -> Waiting {
        let mut child = Command::new(program)
            .arg("--wait")
            .args(counts())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let pid = line(&mut stdout)
            .strip_prefix("ready ")
            .expect("ready PID")
            .parse()
            .unwrap();
        Waiting {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Lets it fire, waits for its `fired ...` line, then lets it exit.
    fn fire_and_finish(mut self) {
        writeln!(self.stdin, "go").unwrap();
        let fired = line(&mut self.stdout);
        let [a, b, c] = COUNTS;
        assert!(fired.starts_with(&format!("fired {a} {b} {c} ")), "{fired}");
        drop(self.stdin);
        assert!(wait_deadline(&mut self.child, 30).success());
    }
}

fn line(from: &mut impl BufRead) -> String {
    let mut line = String::new();
    from.read_line(&mut line).unwrap();
    line.trim_end().to_string()
}

/// `usdt ARGS -p PID` of the waiting example, which fires once usdt says
/// it is attached, and exits after: usdt's output.
fn usdt_on_waiting(args: &[&str]) -> Output {
    let waiting = Waiting::start(&program());
    let pid = waiting.pid.to_string();
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(args)
        .args(["-p", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = reader(usdt.stdout.take().unwrap());
    let mut stderr = BufReader::new(usdt.stderr.take().unwrap());
    // `usdt: tracing 1 sites of process PID ...` once every site is.
    let mut said = vec![];
    loop {
        let l = line(&mut stderr);
        assert!(!l.is_empty(), "usdt ended before attaching: {said:?}");
        said.push(l.clone());
        if l.starts_with("usdt: tracing") || l.starts_with("usdt: counting") {
            break;
        }
    }
    let err = reader(stderr.into_inner());
    waiting.fire_and_finish();
    let status = wait_deadline(&mut usdt, 60);
    said.push(err.join().unwrap());
    Output {
        status,
        stdout: out.join().unwrap().into_bytes(),
        stderr: said.join("\n").into_bytes(),
    }
}

/// `(stack, count)` per folded line.
fn folded(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l}"));
            (
                stack.to_string(),
                n.parse().unwrap_or_else(|_| panic!("{l}")),
            )
        })
        .collect()
}

/// The release build has no frame pointers: none of the path functions
/// starts with `push %rbp; mov %rsp,%rbp`.
#[test]
fn the_release_example_has_no_frame_pointers() {
    let data = std::fs::read(program()).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let code = text.data().unwrap();
    // Their legacy-mangled names: `_ZN6stacks7respond17h<hash>E`.
    let functions = [
        "respond",
        "serve_static",
        "serve_api",
        "authorize",
        "run_job",
    ];
    let mangled: Vec<String> = functions
        .iter()
        .map(|f| format!("_ZN6stacks{}{f}17h", f.len()))
        .collect();
    let mut seen = 0;
    for sym in file.symbols() {
        let name = sym.name().unwrap();
        if !mangled.iter().any(|m| name.starts_with(m.as_str())) {
            continue;
        }
        seen += 1;
        let at = (sym.address() - text.address()) as usize;
        assert_ne!(
            &code[at..at + 4],
            [0x55, 0x48, 0x89, 0xe5],
            "{name} sets up a frame pointer"
        );
    }
    assert_eq!(
        seen,
        functions.len(),
        "the path functions are in the symbol table"
    );
}

#[test]
fn count_by_stack_gives_each_path_its_own_stack_and_count() {
    if !ready(&[ROOT, TRACEFS]) {
        return;
    }
    for engine in ["bpf", "perf"] {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stacks-{engine}"));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("flame.svg");
        let out = usdt_on_waiting(&[
            "count",
            "--by",
            "stack",
            "app:respond",
            "--engine",
            engine,
            "--svg",
            svg.to_str().unwrap(),
        ]);
        let lines = folded(&stdout(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(lines.len(), 3, "{engine}: {lines:#?}\n{err}");
        for (path, count) in PATHS.iter().zip(COUNTS) {
            let (stack, n) = lines
                .iter()
                .find(|(s, _)| s.ends_with(path))
                .unwrap_or_else(|| panic!("{engine}: no stack ends in {path}: {lines:#?}"));
            assert_eq!(*n, count, "{engine}: {stack}");
            // Unwound to the program's entry: through the standard
            // library and libc, to `_start`.
            assert!(stack.starts_with("_start;"), "{engine}: {stack}");
            assert!(stack.contains(";main;"), "{engine}: {stack}");
        }
        // The same callers of `main` for the three.
        let roots: Vec<&str> = lines
            .iter()
            .map(|(s, _)| s.split(";stacks::main;").next().unwrap())
            .collect();
        assert!(roots.iter().all(|r| *r == roots[0]), "{engine}: {roots:?}");
        let total: u64 = COUNTS.iter().sum();
        assert!(
            err.contains(&format!("usdt: {total} hits in 3 stacks")),
            "{err}"
        );
        flame_graph_has_the_paths(&svg);
    }
}

/// The flame graph: valid XML, one titled frame per function with its
/// hits.
fn flame_graph_has_the_paths(svg: &Path) {
    let text = std::fs::read_to_string(svg).unwrap();
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&text, options).unwrap();
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    let total: u64 = COUNTS.iter().sum();
    let [a, b, c] = COUNTS;
    for want in [
        format!("stacks::main ({total} hits"),
        format!("stacks::serve_static ({a} hits"),
        format!("stacks::authorize ({b} hits"),
        format!("stacks::run_job ({c} hits"),
        format!("_start ({total} hits"),
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(&want)),
            "no {want} in {titles:#?}"
        );
    }
    let heading: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        heading.contains("hits of app:respond in process "),
        "{heading}"
    );
}

#[test]
fn trace_stack_shows_each_hit_s_call_path() {
    if !ready(&[ROOT, TRACEFS]) {
        return;
    }
    for engine in ["bpf", "perf"] {
        let out = usdt_on_waiting(&["trace", "--stack", "app:respond", "--engine", engine]);
        let text = stdout(&out);
        // A hit's line, then its frames indented, innermost first.
        let mut hits = vec![];
        for line in text.lines() {
            match line.strip_prefix("    ") {
                Some(frame) => hits
                    .last_mut()
                    .map(|(_, frames): &mut (String, Vec<String>)| frames.push(frame.into()))
                    .unwrap_or_else(|| panic!("a frame before any hit: {text}")),
                None => hits.push((line.to_string(), vec![])),
            }
        }
        assert_eq!(hits.len() as u64, COUNTS.iter().sum::<u64>(), "{text}");
        let path_of = |frames: &[String]| -> Vec<String> {
            frames
                .iter()
                .take_while(|f| !f.starts_with("std::"))
                .map(|f| f.split(' ').next().unwrap().to_string())
                .collect()
        };
        for (kind, (path, count)) in (1..).zip(PATHS.iter().zip(COUNTS)) {
            let want: Vec<String> = path.rsplit(';').map(String::from).collect();
            let of_kind: Vec<&(String, Vec<String>)> = hits
                .iter()
                .filter(|(line, _)| line.ends_with(&format!(" app:respond kind={kind}")))
                .collect();
            assert_eq!(of_kind.len() as u64, count, "{engine}: kind {kind}: {text}");
            for (line, frames) in of_kind {
                assert_eq!(
                    path_of(frames),
                    want,
                    "{engine}: {line}\n{frames:#?}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_eq!(frames.last().map(String::as_str), Some("_start"), "{line}");
            }
        }
    }
    // In JSON: the frames as objects.
    let out = usdt_on_waiting(&["trace", "--stack", "--json", "--limit", "1", "app:respond"]);
    let text = stdout(&out);
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let frames = v["stack"].as_array().unwrap();
    assert_eq!(
        frames[0]["function"],
        "stacks::respond",
        "{v} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(frames[1]["function"], "stacks::serve_static", "{v}");
    assert!(
        frames[0]["object"].as_str().unwrap().ends_with("/stacks"),
        "{v}"
    );
    assert!(frames[0]["addr"].as_u64().unwrap() > 0, "{v}");
}

/// bpftrace's `ustack` walks frame pointers: on this build it cannot tell
/// the three paths apart, which is why `usdt` unwinds with the DWARF CFI.
#[test]
fn frame_pointer_walking_cannot_tell_the_paths_apart() {
    if !ready(&[ROOT, BPFTRACE]) {
        return;
    }
    let program = program();
    let script = format!(
        "usdt:{}:app:respond {{ @[ustack] = count(); }}",
        program.display()
    );
    let command = format!("{} {}", program.display(), counts().join(" "));
    let out = Command::new("bpftrace")
        .args(["-e", &script, "-c", &command])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // `@[\n    frame\n    ...\n]: N` per stack.
    let stacks: Vec<(String, u64)> = text
        .split("@[")
        .skip(1)
        .filter_map(|s| {
            let (frames, n) = s.split_once("]: ")?;
            Some((frames.to_string(), n.lines().next()?.trim().parse().ok()?))
        })
        .collect();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert_eq!(total, COUNTS.iter().sum::<u64>(), "{text}");
    let separated = ["serve_static", "authorize", "run_job"]
        .iter()
        .zip(COUNTS)
        .all(|(f, count)| stacks.iter().any(|(s, n)| s.contains(f) && *n == count));
    assert!(
        !separated,
        "frame pointers told the paths apart on a build without them: {text}"
    );
}

/// `--svg` on `count` draws stacks only; said before anything attaches.
#[test]
fn count_svg_is_for_stacks_only() {
    let out = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args([
            "count",
            "--by",
            "arg0",
            "--svg",
            "x.svg",
            "app:respond",
            "-p",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "usdt: count --svg draws the flame graph of --by stack, not of --by arg0 (latency and hist take --svg too)\n"
    );
}
