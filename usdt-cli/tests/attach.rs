//! Attaching with the library: exact counts at every attach point, the
//! optimized path's trampoline, semaphores and lazy closures. Needs root (CI
//! runs as root).

use std::collections::BTreeMap;
use std::path::Path;

use usdt_test_support::c::cdemo;
use usdt_test_support::cli::{example, raises_per_uprobe, Serve};
use usdt_test_support::notes::DEFAULT_LAYOUT;
use usdt_test_support::{ready, wait_for, ROOT, SDT};
use usdt_trace::{
    auto_delta_here, fork_test, read_file_fork_guard, read_file_probes, read_process,
    read_semaphore, tracer_features, AttachCause, AttachPoint, Error, OptimizedFork, PerfCounter,
    Site, SiteLayout, Target,
};

/// The load bias of `path` in process `pid`.
fn bias(pid: u32, path: &Path) -> u64 {
    let objects = read_process(pid).unwrap();
    let canonical = std::fs::canonicalize(path).unwrap();
    objects
        .iter()
        .find(|o| o.path == canonical)
        .expect("the program is mapped")
        .bias
}

fn counts(tracer: &PerfCounter) -> BTreeMap<String, u64> {
    tracer.probe_counts().unwrap()
}

/// Runs `traced serve` attached at `point` and checks counts, the lazy
/// closure, the semaphore and the trampoline.
fn rust_probes_at(point: AttachPoint) -> bool {
    let exe = example("traced");
    let sites = read_file_probes(&exe).unwrap().sites;
    assert!(sites.iter().all(|s| s.layout == DEFAULT_LAYOUT));
    // The kernel optimizes only a nop5 within one page: where the linker put
    // a site decides (4 offsets in a page), and a site across a page is
    // emulated, counted just as exactly. The trampoline needs one that is not.
    let page = usdt_trace::page_size();
    let within_page = |s: &Site| (s.location + 1) / page == (s.location + 5) / page;
    assert!(
        sites.iter().any(within_page),
        "every site's nop5 crosses a page: {sites:#?}"
    );
    let mut serve = Serve::start(&exe);
    let bias = bias(serve.pid, &exe);
    let lazy = sites.iter().find(|s| s.name == "lazy").unwrap();
    let semaphore = lazy.semaphore.unwrap() + bias;
    assert_eq!(read_semaphore(serve.pid, semaphore).unwrap(), 0);
    assert_eq!(serve.fire("2 3 4"), 0, "no closure runs before attaching");

    let mut tracer = PerfCounter::new(point);
    tracer.attach(&exe, &sites, Target::Pid(serve.pid)).unwrap();
    // The kernel counts one per attached uprobe and mapping of its page:
    // one per site of the probe (an optimizer may emit the lazy probe's
    // site more than once), twice for a site in a page mapped twice.
    assert_eq!(
        read_semaphore(serve.pid, semaphore).unwrap(),
        raises(&tracer, serve.pid, &exe, "lazy")
    );
    let plus_one = match point {
        AttachPoint::Auto => {
            let guarded = read_file_fork_guard(&exe).unwrap();
            usdt_trace::auto_delta_here(DEFAULT_LAYOUT, &tracer_features(), guarded) == 1
        }
        AttachPoint::Nop => false,
        AttachPoint::Next => true,
    };
    let expected_offset = lazy.location_offset.unwrap() + u64::from(plus_one);
    assert!(tracer.sites().iter().any(|s| s.offset == expected_offset));
    assert_eq!(serve.fire("5 7 9"), 7);
    assert_eq!(serve.fire("0 100 0"), 107);
    let c = counts(&tracer);
    assert_eq!(
        (c["traced:eager"], c["traced:lazy"], c["traced:adhoc"]),
        (5, 107, 9),
        "{point:?}"
    );
    let trampoline = serve.has_trampoline();
    // The same answer from the sites' bytes: a long nop rewritten into the
    // kernel's call into that trampoline (usdt_trace::site_rewrite).
    let optimized = sites.iter().filter(|s| within_page(s)).any(|s| {
        usdt_trace::site_rewrite(serve.pid, s.location + bias + 1, SiteLayout::NopNop5)
            .is_ok_and(|r| r.optimized)
    });
    assert_eq!(optimized, trampoline, "{point:?}");

    drop(tracer);
    assert_eq!(
        read_semaphore(serve.pid, semaphore).unwrap(),
        0,
        "detach restores the semaphore"
    );
    assert_eq!(serve.fire("5 7 9"), 107, "no closure runs after detach");
    assert!(serve.finish().success());
    trampoline
}

#[test]
fn rust_probes_auto_counts_exactly_and_is_fork_safe_here() {
    if !ready(&[ROOT]) {
        return;
    }
    // On this kernel (ENXIO) the sites' nop5 is optimized at Location + 1,
    // and the fork self-test finds that a forked child dies there; but a
    // Rust program carries the fork guard, which keeps the child alive, so
    // Auto attaches at Location + 1 (the trampoline appears), unless the
    // speed self-test found the trap faster on this host (then the nop).
    assert_eq!(fork_test().verdict, OptimizedFork::ChildDies);
    let next = auto_delta_here(DEFAULT_LAYOUT, &tracer_features(), true) == 1;
    assert_eq!(rust_probes_at(AttachPoint::Auto), next);
}

#[test]
fn rust_probes_next_counts_exactly_through_the_trampoline() {
    if !ready(&[ROOT]) {
        return;
    }
    assert!(
        rust_probes_at(AttachPoint::Next),
        "Next gives a [uprobes-trampoline] mapping"
    );
}

#[test]
fn rust_probes_nop_counts_exactly_without_trampoline() {
    if !ready(&[ROOT]) {
        return;
    }
    assert!(
        !rust_probes_at(AttachPoint::Nop),
        "Nop leaves no [uprobes-trampoline] mapping"
    );
}

#[test]
fn c_probes_count_exactly_with_their_semaphore() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    let objects = {
        let serve = Serve::start(&exe);
        let o = read_process(serve.pid).unwrap();
        serve.finish();
        o
    };
    let lib = objects
        .iter()
        .find(|o| o.path.ends_with("libcdemolib.so"))
        .expect("the library is mapped");
    assert_ne!(lib.bias, 0);
    let lib_sites = lib.probes.as_ref().unwrap().sites.clone();
    let sites = read_file_probes(&exe).unwrap().sites;
    for point in [AttachPoint::Auto, AttachPoint::Nop] {
        let mut serve = Serve::start(&exe);
        let guarded = sites.iter().find(|s| s.name == "guarded").unwrap();
        let semaphore = guarded.semaphore.unwrap() + bias(serve.pid, &exe);
        let mut tracer = PerfCounter::new(point);
        tracer.attach(&exe, &sites, Target::Pid(serve.pid)).unwrap();
        tracer
            .attach(&lib.path, &lib_sites, Target::Pid(serve.pid))
            .unwrap();
        assert_eq!(read_semaphore(serve.pid, semaphore).unwrap(), 1);
        assert_eq!(serve.fire("5 3 2"), 3);
        let c = counts(&tracer);
        assert_eq!(
            (c["cdemo:plain"], c["cdemo:guarded"], c["cdemolib:call"]),
            (5, 3, 2)
        );
        // sys/sdt.h sites are one nop: Auto attaches there, so nothing is optimized.
        assert!(tracer
            .sites()
            .iter()
            .all(|s| Some(s.offset) == s.site.location_offset));
        assert!(!serve.has_trampoline());
        drop(tracer);
        // The kernel lowers the semaphore as it unregisters the uprobes,
        // which may finish a little after the descriptors are closed.
        wait_for("the semaphore to drop to 0", || {
            read_semaphore(serve.pid, semaphore).unwrap() == 0
        });
        assert_eq!(serve.fire("5 3 2"), 3);
        serve.finish();
    }
}

#[test]
fn next_is_refused_on_a_single_nop_site() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    let sites: Vec<Site> = read_file_probes(&exe).unwrap().sites;
    let serve = Serve::start(&exe);
    let mut tracer = PerfCounter::new(AttachPoint::Next);
    let e = tracer
        .attach(&exe, &sites, Target::Pid(serve.pid))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Attach(a) if matches!(a.cause, AttachCause::NoLongNop { .. })
            && a.path == exe),
        "{e}"
    );
    assert!(e.to_string().contains("no long nop"), "{e}");
    assert!(tracer.sites().is_empty());
    serve.finish();
}

#[test]
fn every_process_of_a_binary() {
    if !ready(&[ROOT]) {
        return;
    }
    // A copy of its own: other tests run `traced` at the same time.
    let exe =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("traced-all-{}", std::process::id()));
    std::fs::copy(example("traced"), &exe).unwrap();
    let sites = read_file_probes(&exe).unwrap().sites;
    let mut tracer = PerfCounter::new(AttachPoint::Auto);
    tracer.attach(&exe, &sites, Target::AllProcesses).unwrap();
    let mut a = Serve::start(&exe);
    let mut b = Serve::start(&exe);
    assert_eq!(a.fire("1 2 3"), 2);
    assert_eq!(b.fire("10 20 30"), 20);
    let c = counts(&tracer);
    assert_eq!(
        (c["traced:eager"], c["traced:lazy"], c["traced:adhoc"]),
        (11, 22, 33)
    );
    drop(tracer);
    assert_eq!(a.fire("1 2 3"), 2);
    a.finish();
    b.finish();
    std::fs::remove_file(exe).unwrap();
}

#[test]
fn a_process_that_exited_is_an_error() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let exe = cdemo();
    let serve = Serve::start(&exe);
    let pid = serve.pid;
    serve.finish();
    let sites = read_file_probes(&exe).unwrap().sites;
    let mut tracer = PerfCounter::new(AttachPoint::Auto);
    let e = tracer.attach(&exe, &sites, Target::Pid(pid)).unwrap_err();
    assert_eq!(e.no_process(), Some(pid));
    assert!(
        e.to_string().starts_with(&format!(
            "process {pid} does not exist or has exited (attaching "
        )),
        "{e}"
    );
    assert!(matches!(read_process(pid), Err(Error::NoProcess(p)) if p == pid));
}

/// How much the uprobes `tracer` attached to probe `name` raise its
/// semaphore in process `pid`: one per uprobe and mapping of its page.
fn raises(tracer: &PerfCounter, pid: u32, exe: &Path, name: &str) -> u16 {
    tracer
        .sites()
        .iter()
        .filter(|s| s.site.name == name)
        .map(|s| raises_per_uprobe(pid, exe, s.offset))
        .sum()
}

#[test]
fn semaphores_are_left_as_found() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = example("traced");
    let sites = read_file_probes(&exe).unwrap().sites;
    let mut serve = Serve::start(&exe);
    let lazy = sites.iter().find(|s| s.name == "lazy").unwrap();
    let semaphore = lazy.semaphore.unwrap() + bias(serve.pid, &exe);
    let pid = serve.pid;
    let sem = || read_semaphore(pid, semaphore).unwrap();
    let mut first = PerfCounter::new(AttachPoint::Nop);
    first.attach(&exe, &sites, Target::Pid(serve.pid)).unwrap();
    let per_tracer = raises(&first, pid, &exe, "lazy");
    assert!(per_tracer > 0);
    let mut second = PerfCounter::new(AttachPoint::Next);
    second.attach(&exe, &sites, Target::Pid(serve.pid)).unwrap();
    let second_raises = raises(&second, pid, &exe, "lazy");
    assert_eq!(
        sem(),
        per_tracer + second_raises,
        "one count per attached uprobe"
    );
    assert_eq!(serve.fire("1 3 1"), 3);
    assert_eq!(first.probe_counts().unwrap()["traced:lazy"], 3);
    assert_eq!(second.probe_counts().unwrap()["traced:lazy"], 3);
    drop(second);
    assert_eq!(sem(), per_tracer);
    first.detach();
    assert_eq!(sem(), 0);
    serve.finish();
}
