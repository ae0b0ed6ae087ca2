//! A `cdylib` with probes (`tests/cdylib/lib.rs`), loaded with `dlopen` by a
//! C program (`tests/cdylib/main.c`) and by a Rust program
//! (`tests/cdylib/dlopen.rs`): its probes are listed from the running
//! process (`usdt_trace::read_process`), pass the note checks, and are
//! counted exactly, the lazy probe included (the kernel raises its
//! semaphore in the library's mapping).

use usdt_test_support::cdylib::{built, LIB};
use usdt_test_support::notes::{check_notes, Expected, DEFAULT_LAYOUT};
use usdt_test_support::{ready, tracing_env, CC, ROOT};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use usdt_trace::{AttachPoint, PerfCounter, Target};

const FIRES: u64 = 10;

fn expected() -> Expected {
    [
        ("cdylib:eager", (vec![8], 0, true)),
        ("cdylib:lazy", (vec![8, 8], 0, true)),
    ]
    .into_iter()
    .collect()
}

#[test]
fn cdylib_notes() {
    let lib = &built().lib;
    let probes = check_notes(lib, &expected(), DEFAULT_LAYOUT, LIB);
    assert_eq!(probes.elf_type, 3, "a shared object");
}

/// Runs `loader LIB N`: once it has loaded the library, lists the probes
/// of the running process, attaches to the library's, lets it fire and
/// checks the counts.
fn check(loader: &Path) {
    tracing_env();
    let built = built();
    let mut child = Command::new(loader)
        .arg(&built.lib)
        .arg(FIRES.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", loader.display()));
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "loaded");

    // The library is among the process's objects, loaded at a non-zero bias,
    // with both probes.
    let objects = usdt_trace::read_process(pid).expect("read the process");
    let object = objects
        .iter()
        .find(|o| o.path.ends_with(LIB))
        .unwrap_or_else(|| panic!("{LIB} not mapped: {objects:?}"));
    assert_ne!(object.bias, 0, "{LIB} load bias");
    let probes = object.probes.as_ref().expect("the library's notes");
    let mut names: Vec<String> = probes.sites.iter().map(|s| s.probe()).collect();
    names.dedup();
    assert_eq!(names, ["cdylib:eager", "cdylib:lazy"], "listed from {pid}");
    // The loader itself has no probes (the C one has no notes at all).
    let exe = objects
        .iter()
        .find(|o| o.path == loader)
        .expect("the loader is mapped");
    assert!(exe.probes.as_ref().map_or(true, |p| p.sites.is_empty()));

    let mut tracer = PerfCounter::new(AttachPoint::Auto);
    tracer
        .attach(&object.open_path, &probes.sites, Target::Pid(pid))
        .expect("attach to the library's probes");
    // The kernel raised the lazy probe's semaphore in the running process:
    // at least once per attached site. (Once per mapping of the site's page:
    // LLD's shared objects start their text segment on the file page where
    // the read-only segment ends, so ld.so maps that page twice, and the
    // kernel installs the uprobe, and counts, in both mappings.)
    let lazy: Vec<_> = probes.sites.iter().filter(|s| s.name == "lazy").collect();
    let sema = lazy[0].semaphore.expect("lazy has a semaphore") + object.bias;
    let raised = usdt_trace::read_semaphore(pid, sema).expect("read the semaphore");
    assert!(
        usize::from(raised) >= lazy.len(),
        "the lazy semaphore is {raised} with {} sites attached",
        lazy.len()
    );

    writeln!(child.stdin.take().unwrap()).unwrap();
    assert_eq!(
        lines.next().unwrap().unwrap(),
        format!("fired {FIRES} runs={FIRES}"),
        "the lazy closure runs on every call while traced"
    );
    assert!(child.wait().unwrap().success());
    let want: BTreeMap<String, u64> = [
        ("cdylib:eager".to_owned(), FIRES),
        ("cdylib:lazy".to_owned(), FIRES),
    ]
    .into_iter()
    .collect();
    assert_eq!(tracer.probe_counts().unwrap(), want, "{}", loader.display());
}

#[test]
fn cdylib_traced_in_a_c_program() {
    if !ready(&[ROOT, CC]) {
        return;
    }
    check(&built().c);
}

#[test]
fn cdylib_traced_in_a_rust_program() {
    if !ready(&[ROOT]) {
        return;
    }
    check(&built().rust);
}
