//! Commands without probes of their own, traced as any other command: a
//! shell-script wrapper around an example, a two-level shim (a script that
//! executes a script that executes the program), `env VAR=1 PROG`,
//! `nice PROG` and `sh -c 'PROG ...'` (which forks PROG). Each is started
//! paused; the program's probes are attached at its exec, and the first
//! line says so. Counts and values are exact, on both engines.
//! Needs root (CI runs as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use usdt_test_support::cli::{example, parse_counts};
use usdt_test_support::process::output_within;
use usdt_test_support::{ready, ROOT};
use usdt_trace::{ExitStatus, Recorder};

const USDT: &str = env!("CARGO_BIN_EXE_usdt");
const ENGINES: [&str; 2] = ["bpf", "perf"];

/// The example that fires `traced:eager(i, -i)` EAGER times,
/// `traced:lazy(i)` LAZY times and `traced:adhoc(i)` ADHOC times.
fn traced() -> String {
    example("traced").to_str().unwrap().to_string()
}

/// An executable `#!/bin/sh` script at `path` that runs `body`.
fn script(path: &Path, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

/// The scripts, written once per test process: `wrap.sh` executes the
/// example with its arguments, `shim.sh` executes `wrap.sh`, `true.sh`
/// executes `/bin/true`.
fn scripts() -> &'static (String, String, String) {
    static WRITTEN: OnceLock<(String, String, String)> = OnceLock::new();
    WRITTEN.get_or_init(|| {
        let dir: PathBuf =
            usdt_test_support::target_tmp().join(format!("launchers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wrap = script(&dir.join("wrap.sh"), &format!("exec {} \"$@\"", traced()));
        let shim = script(&dir.join("shim.sh"), &format!("exec {wrap} \"$@\""));
        let truth = script(&dir.join("true.sh"), "exec /bin/true");
        (wrap, shim, truth)
    })
}

/// Each launcher of the example, with the example's arguments `args`
/// (`EAGER LAZY ADHOC`): its name and its command line.
fn launchers(args: &str) -> Vec<(&'static str, Vec<String>)> {
    let (wrap, shim, _) = scripts();
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let with = |head: &[&str]| {
        let mut v: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        v.push(traced());
        v.extend(words(args));
        v
    };
    let mut wrapped = vec![wrap.clone()];
    wrapped.extend(words(args));
    let mut shimmed = vec![shim.clone()];
    shimmed.extend(words(args));
    vec![
        ("a script", wrapped),
        ("a script that executes a script", shimmed),
        ("env", with(&["env", "USDT_LAUNCHED=1"])),
        ("nice", with(&["nice"])),
        (
            "sh -c",
            vec!["sh".into(), "-c".into(), format!("{} {args}", traced())],
        ),
    ]
}

fn usdt(args: &[String]) -> Output {
    output_within(Command::new(USDT).args(args), 600)
}

fn args(head: &[&str], command: &[String]) -> Vec<String> {
    let mut v: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    v.push("--".into());
    v.extend(command.iter().cloned());
    v
}

/// The line that says the example was attached at its exec.
fn attached_line(doing: &str, n: usize) -> String {
    format!(
        "usdt: the process executed a program that maps {}: {doing} {n} sites",
        traced()
    )
}

/// `usdt COMMAND --engine ENGINE GLOB -- LAUNCHER... EXAMPLE-ARGS` on both
/// engines and through every launcher: each ends with 0, and its first
/// line says the example was attached (`doing` its `n` sites); `check`
/// gets its stdout and what to say when it fails.
fn through_every_launcher(
    (command, glob): (&str, &str),
    example_args: &str,
    (doing, n): (&str, usize),
    check: impl Fn(&str, &str),
) {
    for engine in ENGINES {
        for (name, launcher) in launchers(example_args) {
            let out = usdt(&args(&[command, "--engine", engine, glob], &launcher));
            let (text, err) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            let what = format!("{engine}, {name}: {text}\n{err}");
            assert_eq!(out.status.code(), Some(0), "{what}");
            check(&text, &what);
            assert_eq!(
                err.lines().next(),
                Some(attached_line(doing, n).as_str()),
                "{what}"
            );
        }
    }
}

#[test]
fn count_is_exact_through_every_launcher() {
    if !ready(&[ROOT]) {
        return;
    }
    through_every_launcher(
        ("count", "traced:*"),
        "5 3 2",
        ("counting its", 3),
        |text, what| {
            let want = [("traced:adhoc", 2), ("traced:eager", 5), ("traced:lazy", 3)];
            assert_eq!(
                parse_counts(text),
                want.map(|(p, n)| (p.to_string(), n)).into(),
                "{what}"
            );
            // The lazy probe's closure ran: its semaphore was up.
            assert!(text.contains("evaluated 3"), "{what}");
        },
    );
}

#[test]
fn trace_prints_exact_values_through_every_launcher() {
    if !ready(&[ROOT]) {
        return;
    }
    through_every_launcher(
        ("trace", "traced:eager"),
        "3 0 0",
        ("tracing its", 1),
        |text, what| {
            let hits: Vec<&str> = text
                .lines()
                .filter_map(|l| l.split_once(" traced:eager ").map(|(_, args)| args))
                .collect();
            assert_eq!(hits, ["i=0 neg=0", "i=1 neg=-1", "i=2 neg=-2"], "{what}");
        },
    );
}

#[test]
fn aggregations_and_the_exit_status_pass_through_a_launcher() {
    if !ready(&[ROOT]) {
        return;
    }
    let (wrap, _, _) = scripts();
    // count --by, in the kernel: one hit per value of i.
    let out = usdt(&args(
        &["count", "--by", "i", "traced:eager"],
        &[wrap.clone(), "4".into(), "0".into(), "0".into()],
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains("traced:eager by i: 4 hits, 4 values"),
        "{text}"
    );
    // The launcher's own status: sh runs the example, then exits 7.
    let command = format!("{} 1 0 0; exit 7", traced());
    let out = usdt(&args(
        &["count", "traced:eager"],
        &["sh".into(), "-c".into(), command],
    ));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(
        parse_counts(&String::from_utf8_lossy(&out.stdout)),
        [("traced:eager".to_string(), 1)].into()
    );
}

#[test]
fn a_launcher_that_executes_no_probe_says_so_at_its_end() {
    if !ready(&[ROOT]) {
        return;
    }
    let (_, _, truth) = scripts();
    let error = |out: &Output| {
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        err.trim().strip_prefix("usdt: ").unwrap().to_string()
    };
    assert_eq!(
        error(&usdt(&args(&["count", "x:y"], std::slice::from_ref(truth)))),
        format!(
            "{truth} is not an ELF file, and no program it executed has a probe that matches x:y"
        )
    );
    assert_eq!(
        error(&usdt(&args(&["trace"], std::slice::from_ref(truth)))),
        format!("{truth} is not an ELF file, and no program it executed has probes")
    );
    let command = ["/bin/sh".to_string(), "-c".into(), "/bin/true".into()];
    assert_eq!(
        error(&usdt(&args(&["count"], &command))),
        "/bin/sh has no probes, and no program it executed has probes"
    );
    // A program that executes nothing: what it was told before it ran.
    assert_eq!(
        error(&usdt(&args(&["count"], &["/bin/true".to_string()]))),
        "/bin/true has no probes"
    );
}

#[test]
fn recorder_records_through_a_script() {
    if !ready(&[ROOT]) {
        return;
    }
    let (_, shim, _) = scripts();
    let run = Recorder::new(shim)
        .args(["2", "0", "1"])
        .probes("traced:*")
        .run()
        .unwrap();
    assert_eq!(run.status, ExitStatus::Code(0));
    run.assert_fired("traced:eager", &[0u64.into(), 0i32.into()]);
    run.assert_fired("traced:eager", &[1u64.into(), (-1i32).into()]);
    assert_eq!(run.of("traced:eager").count(), 2);
    assert_eq!(run.of("traced:adhoc").count(), 1);
}
