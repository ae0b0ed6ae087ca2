//! The `usdt` command: `list` against `readelf -n`, `count` with exact
//! numbers, and its errors. Needs root for attaching (CI runs as root).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use usdt_test_support::c::{build_cross, cdemo, cdemolib, nop10, CROSS_CCS};
use usdt_test_support::cli::{example, parse_counts, Serve};
use usdt_test_support::notes::DEFAULT_LAYOUT;
use usdt_test_support::process::output_within;
use usdt_test_support::readelf::readelf_notes;
use usdt_test_support::{ready, wait_for, ROOT, SDT, SETPRIV};
use usdt_trace::{
    auto_delta_here, read_file_probes, read_process, read_semaphore, tracer_features, OptimizedFork,
};

fn usdt(args: &[&str]) -> Output {
    output_within(Command::new(env!("CARGO_BIN_EXE_usdt")).args(args), 600)
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The one-line error of a failed run.
fn error(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure, got {}",
        stdout(out)
    );
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    err.trim().strip_prefix("usdt: ").unwrap().to_string()
}

/// Checks `usdt list --sites` against `readelf -n`, note by note and field
/// by field (sites are compared as sets: the listing groups them by probe).
fn list_agrees_with_readelf(path: &Path) {
    let out = usdt(&["list", "--sites", path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let notes = readelf_notes(path);
    assert!(!notes.is_empty());
    // Site rows: `  site LOC offset OFF base BASE semaphore SEM layout L args A`.
    let mut listed = vec![];
    let mut probe = String::new();
    let mut probe_rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        if let Some(site) = line.strip_prefix("  site ") {
            let f: Vec<&str> = site.splitn(11, ' ').collect();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            assert_eq!(
                (f[1], f[3], f[5], f[7], f[9]),
                ("offset", "base", "semaphore", "layout", "args")
            );
            let (provider, name) = probe.split_once(':').unwrap();
            let args = f.get(10).copied().unwrap_or("").to_string();
            listed.push((
                provider.to_string(),
                name.to_string(),
                hex(f[0]),
                hex(f[4]),
                hex(f[6]),
                args,
            ));
        } else {
            // PROBE is `provider:name`, or `provider:name(id: u64, ..)` for a
            // probe with a signature record: columns are two spaces apart.
            let (first, rest) = line.split_once("  ").unwrap();
            let name = first.split_once('(').map_or(first, |(n, _)| n);
            let mut cols = vec![name.to_string()];
            cols.extend(rest.split_whitespace().map(String::from));
            probe = cols[0].clone();
            probe_rows.insert(probe.clone(), cols);
        }
    }
    let mut expected: Vec<_> = notes
        .iter()
        .map(|n| {
            (
                n.provider.clone(),
                n.name.clone(),
                n.location,
                n.base,
                n.semaphore,
                n.args.clone(),
            )
        })
        .collect();
    expected.sort();
    listed.sort();
    assert_eq!(listed, expected, "{}", path.display());
    // Probe rows: PROBE SITES LAYOUT SEMAPHORE ATTACH ARGUMENTS...
    for (probe, cols) in &probe_rows {
        let of_probe: Vec<_> = notes
            .iter()
            .filter(|n| format!("{}:{}", n.provider, n.name) == *probe)
            .collect();
        assert_eq!(cols[1], of_probe.len().to_string());
        let semaphore = match of_probe[0].semaphore {
            0 => "-".to_string(),
            s => format!("{s:#x}"),
        };
        assert_eq!(cols[3], semaphore);
        // ATTACH is a word and maybe a parenthesized reason of one or more
        // words (`+1 (optimized)`, `nop (fork-safe)`, `nop (faster here)`);
        // the arguments follow it.
        let args_at = if cols.get(5).is_some_and(|c| c.starts_with('(')) {
            5 + cols[5..].iter().position(|c| c.ends_with(')')).unwrap() + 1
        } else {
            5
        };
        assert_eq!(cols[args_at..].join(" "), of_probe[0].args);
    }
}

#[test]
fn list_agrees_with_readelf_on_c_probes() {
    if !ready(&[SDT]) {
        return;
    }
    list_agrees_with_readelf(&cdemo());
    list_agrees_with_readelf(&cdemolib());
}

/// aarch64 and riscv64 programs (`tests/c/cross.c`, cross-built with gcc
/// and clang): `usdt list` agrees with `readelf -n` there too, and names
/// their sites what they are, a `nop`, attached at the nop, where every
/// kernel traps.
#[test]
fn list_agrees_with_readelf_on_cross_built_c_probes() {
    for cc in &CROSS_CCS {
        if !ready(cc.needs) {
            return;
        }
        for flags in [&["-O0"][..], &["-O2"]] {
            let name = format!("list-{}{}", cc.name, flags.concat());
            let path = build_cross(cc, &name, "cross.c", flags);
            list_agrees_with_readelf(&path);
            let text = stdout(&usdt(&["list", path.to_str().unwrap()]));
            let machine = if cc.name.starts_with("riscv64") {
                "riscv64"
            } else {
                "aarch64"
            };
            for row in text.lines().skip(1) {
                let cols: Vec<&str> = row.split_whitespace().collect();
                assert_eq!((cols[2], cols[4]), ("nop", "nop"), "{}: {row}", cc.name);
                assert!(row.contains(&format!(" nop ({machine}: traps) ")), "{row}");
            }
        }
    }
}

#[test]
fn list_agrees_with_readelf_on_rust_probes() {
    let exe = example("traced");
    list_agrees_with_readelf(&exe);
    let text = stdout(&usdt(&["list", exe.to_str().unwrap()]));
    // Rust sites are nop;nop5;nop10; this kernel optimizes their nop5, and
    // a child forked after an optimized hit would die here (the fork
    // self-test), but the program carries the fork guard, so Auto takes the
    // long nop where the speed self-test favours the optimized path, and
    // stays at the nop where the trap measured faster.
    let eager = text
        .lines()
        .find(|l| l.starts_with("traced:eager("))
        .unwrap();
    let features = tracer_features();
    let delta = auto_delta_here(DEFAULT_LAYOUT, &features, true);
    let words = if !features.optimizes(DEFAULT_LAYOUT) {
        "nop".to_string()
    } else if delta != 0 {
        if features.optimized_fork == OptimizedFork::ChildSurvives {
            format!("+{delta} (optimized)")
        } else {
            format!("+{delta} (guarded)")
        }
    } else {
        "nop (faster here)".to_string()
    };
    assert!(
        eager.contains(&format!(" {} ", DEFAULT_LAYOUT.name())) && eager.contains(&words),
        "{eager}"
    );
}

#[test]
fn list_a_process_with_its_libraries() {
    if !ready(&[SDT]) {
        return;
    }
    let exe = cdemo();
    let mut serve = Serve::start(&exe);
    let out = usdt(&["list", "-p", &serve.pid.to_string()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    let objects = read_process(serve.pid).unwrap();
    let lib = objects
        .iter()
        .find(|o| o.path.ends_with("libcdemolib.so"))
        .unwrap();
    assert!(
        text.contains(&format!(
            "{} (load bias {:#x})",
            lib.path.display(),
            lib.bias
        )),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("cdemolib:call ")),
        "{text}"
    );
    // The semaphore's run-time address and its current value.
    let guarded = read_file_probes(&exe)
        .unwrap()
        .sites
        .into_iter()
        .find(|s| s.name == "guarded")
        .unwrap();
    let main = objects
        .iter()
        .find(|o| o.path == std::fs::canonicalize(&exe).unwrap())
        .unwrap();
    let sem = guarded.semaphore.unwrap() + main.bias;
    assert!(text.contains(&format!("{sem:#x}=0")), "{text}");
    assert_eq!(serve.fire("0 0 0"), 0);
    serve.finish();
}

fn count_command(attach: &str, program: &Path, args: &[&str]) -> (BTreeMap<String, u64>, String) {
    let mut argv = vec!["count", "--attach", attach, "--", program.to_str().unwrap()];
    argv.extend(args);
    let out = usdt(&argv);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    (parse_counts(&text), text)
}

#[test]
fn count_rust_probes_exactly_at_every_attach_point() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = example("traced");
    for attach in ["auto", "nop", "next"] {
        let (counts, text) = count_command(attach, &exe, &["5", "7", "9"]);
        let expected: BTreeMap<String, u64> =
            [("traced:adhoc", 9), ("traced:eager", 5), ("traced:lazy", 7)]
                .map(|(p, n)| (p.into(), n))
                .into();
        assert_eq!(counts, expected, "--attach {attach}");
        // The program's own output passes through, and the lazy closure ran
        // once per counted hit.
        assert!(text.starts_with("evaluated 7\n"), "{text}");
    }
}

#[test]
fn count_c_probes_and_refuse_next() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    for attach in ["auto", "nop"] {
        let (counts, text) = count_command(attach, &exe, &["5", "3", "2"]);
        assert_eq!(counts["cdemo:plain"], 5);
        assert_eq!(counts["cdemo:guarded"], 3);
        assert_eq!(
            counts["cdemolib:call"], 2,
            "the library's probe is counted too"
        );
        assert!(text.starts_with("evaluated 3\n"));
    }
    let out = usdt(&[
        "count",
        "--attach",
        "next",
        "cdemo:*",
        "--",
        exe.to_str().unwrap(),
        "1",
        "1",
        "1",
    ]);
    assert!(error(&out).contains("cannot be attached at Location + 1"));
}

#[test]
fn a_nop10_site_is_listed_counted_at_its_nop_and_refused_at_next() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = nop10();
    list_agrees_with_readelf(&exe);
    let text = stdout(&usdt(&["list", exe.to_str().unwrap()]));
    let tick = text.lines().find(|l| l.starts_with("n10:tick ")).unwrap();
    // This kernel optimizes nop5, not nop10: Auto stays on the nop.
    assert!(
        tick.contains("nop;nop10") && tick.contains(" nop "),
        "{tick}"
    );
    for attach in ["auto", "nop"] {
        let (counts, _) = count_command(attach, &exe, &["6"]);
        assert_eq!(
            (counts["n10:tick"], counts["n10:classic"]),
            (6, 6),
            "{attach}"
        );
    }
    let e = error(&usdt(&[
        "count",
        "--attach",
        "next",
        "n10:tick",
        "--",
        exe.to_str().unwrap(),
        "1",
    ]));
    assert!(
        e.ends_with("this kernel refuses uprobes on nop10 (only the 7.3 series accepts them)"),
        "{e}"
    );
}

#[test]
fn count_globs_select_probes() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = example("traced");
    let out = usdt(&[
        "count",
        "traced:*ger",
        "*:adhoc",
        "--",
        exe.to_str().unwrap(),
        "1",
        "2",
        "3",
    ]);
    let counts = parse_counts(&stdout(&out));
    assert_eq!(
        counts.keys().collect::<Vec<_>>(),
        ["traced:adhoc", "traced:eager"]
    );
    assert_eq!((counts["traced:adhoc"], counts["traced:eager"]), (3, 1));
}

#[test]
fn count_a_process_until_it_exits() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    let mut serve = Serve::start(&exe);
    let pid = serve.pid;
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args(["count", "-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_counting(&mut usdt, pid, &exe);
    assert_eq!(serve.fire("5 3 2"), 3);
    assert_eq!(serve.fire("1 0 0"), 3);
    serve.finish();
    // The process exited: usdt prints its counts and exits by itself.
    let out = usdt.wait_with_output().unwrap();
    assert!(out.status.success());
    let counts = parse_counts(&stdout(&out));
    assert_eq!(
        (
            counts["cdemo:plain"],
            counts["cdemo:guarded"],
            counts["cdemolib:call"]
        ),
        (6, 3, 2)
    );
}

#[test]
fn count_a_process_every_interval_until_ctrl_c() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    let mut serve = Serve::start(&exe);
    let pid = serve.pid;
    let mut usdt = Command::new(env!("CARGO_BIN_EXE_usdt"))
        .args([
            "count",
            "--interval",
            "0.1",
            "cdemo:gu*",
            "-p",
            &pid.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_counting(&mut usdt, pid, &exe);
    assert_eq!(serve.fire("0 4 0"), 4);
    std::thread::sleep(std::time::Duration::from_millis(350));
    let usdt_pid = libc::pid_t::try_from(usdt.id()).unwrap();
    assert!(usdt_pid > 0, "never kill(0): that is our process group");
    // SAFETY: signalling the child we started, by a positive pid.
    unsafe { libc::kill(usdt_pid, libc::SIGINT) };
    let out = usdt.wait_with_output().unwrap();
    // Ctrl-C prints the counts and exits 128 + SIGINT.
    assert_eq!(out.status.code(), Some(130));
    let text = stdout(&out);
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert!(blocks.len() >= 3, "printed every 0.1 s: {text:?}");
    assert_eq!(blocks.last().unwrap().trim(), "cdemo:guarded 4", "{text:?}");
    // Detached on exit: the semaphore is back to 0 and the closure idle.
    wait_for_semaphore(pid, &exe, 0);
    assert_eq!(serve.fire("0 4 0"), 4);
    serve.finish();
}

/// Waits for `usdt count -p` to say it is counting; the semaphore is raised.
fn wait_until_counting(usdt: &mut std::process::Child, pid: u32, exe: &Path) {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(usdt.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("usdt: counting ") && line.contains(&format!("of process {pid};")),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    wait_for_semaphore(pid, exe, 1);
}

fn wait_for_semaphore(pid: u32, exe: &Path, value: u16) {
    let objects = read_process(pid).unwrap();
    let main = objects
        .iter()
        .find(|o| o.path == std::fs::canonicalize(exe).unwrap())
        .unwrap();
    let sites = &main.probes.as_ref().unwrap().sites;
    let sem = sites.iter().find_map(|s| s.semaphore).unwrap() + main.bias;
    wait_for("the semaphore", || {
        read_semaphore(pid, sem).unwrap() == value
    });
}

#[test]
fn features_in_words() {
    if !ready(&[ROOT]) {
        return;
    }
    let text = stdout(&usdt(&["features"]));
    assert!(
        text.starts_with("machine: x86-64; its probe sites: nop;nop5;nop10 "),
        "{text}"
    );
    assert!(
        text.contains("uprobe syscall: present, optimizes uprobes on nop5"),
        "{text}"
    );
    assert!(
        text.contains("semaphores: maintained by the kernel"),
        "{text}"
    );
    assert!(text.contains("uprobe PMU: type "), "{text}");
}

#[test]
fn errors_are_one_plain_sentence() {
    assert_eq!(
        error(&usdt(&["list", "/no/such/file"])),
        "/no/such/file does not exist"
    );
    assert_eq!(
        error(&usdt(&["count", "--", "/no/such/file"])),
        "/no/such/file does not exist"
    );
    let me = std::env::current_exe().unwrap();
    let me = me.to_str().unwrap();
    assert_eq!(error(&usdt(&["list", me])), format!("{me} has no probes"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../usdt-trace/tests/c/cdemo.c");
    assert_eq!(
        error(&usdt(&["list", script])),
        format!("{script} is not an ELF file")
    );
    // A command without probes runs (it might execute a program that has
    // them): said at its end.
    assert_eq!(
        error(&usdt(&["count", "--", "/bin/true"])),
        "/bin/true has no probes"
    );
    let exe = example("traced");
    let e = error(&usdt(&[
        "count",
        "traced:eagre",
        "--",
        exe.to_str().unwrap(),
    ]));
    assert!(
        e.starts_with("no probe of ")
            && e.ends_with(
                "matches traced:eagre; the closest are traced:eager, traced:lazy, traced:adhoc"
            ),
        "{e}"
    );
    // A pid that is not running.
    let serve = Serve::start(&exe);
    let pid = serve.pid;
    serve.finish();
    let msg = format!("process {pid} does not exist or has exited");
    assert_eq!(error(&usdt(&["count", "-p", &pid.to_string()])), msg);
    assert_eq!(error(&usdt(&["list", "-p", &pid.to_string()])), msg);
    assert!(error(&usdt(&["count", "--attach", "middle", "--", "x"])).contains("auto, nop or next"));
}

#[test]
fn not_permitted_says_which_privilege() {
    if !ready(&[ROOT, SETPRIV]) {
        return;
    }
    // Run as `nobody`, from a copy it may execute.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = |from: &Path, name: &str| {
        let to = dir.join(name);
        std::fs::copy(from, &to).unwrap();
        to
    };
    let usdt = copy(Path::new(env!("CARGO_BIN_EXE_usdt")), "usdt");
    let traced = copy(&example("traced"), "traced");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&usdt)
        .args(["count", "--"])
        .arg(&traced)
        .output()
        .expect("setpriv (util-linux) runs");
    let e = error(&out);
    assert!(
        e.starts_with(
            "attaching uprobes is not permitted: run as root, or with CAP_PERFMON and CAP_SYS_ADMIN (attaching traced:"
        ) && e.contains(" in ")
            && e.ends_with("/traced)"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
