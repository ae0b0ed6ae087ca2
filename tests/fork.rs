//! A traced process that forks (`examples/fork.rs`): the parent fires
//! `fork:tick` N times while a counting tracer is attached (at Location + 1
//! the kernel optimizes the site before the fork), forks, and parent and
//! child each fire it N more times, each checking its computation against
//! the same loop without the probe.
//!
//! What a tracer sees, measured on this kernel (Linux 6.18, x86-64):
//!
//! | tracer | attach | parent | child | hits counted |
//! |---|---|---|---|---|
//! | `Target::Pid(parent)` | nop (Location) | exact | exact, exit 0 | 2N: the parent's only |
//! | `Target::AllProcesses` | nop | exact | exact, exit 0 | 3N: the child's too |
//! | `Target::Pid(parent)` | Location + 1 (optimized) | exact | exact, exit 0 (the fork guard) | 2N |
//! | `Target::AllProcesses` | Location + 1 | exact | exact, exit 0 (the fork guard) | 2N: the child's sites return at once |
//! | either, `USDT_FORK_GUARD=0` | Location + 1 | exact | killed by SIGSEGV at its first hit | 2N |
//! | `Target::Pid(parent)`, inherit | either | exact | none: `fork()` fails with `EFAULT` | N |
//!
//! - The child's memory is a copy: its semaphore reads non-zero right after
//!   the fork, and it has the parent's patched text, but never a
//!   `[uprobes-trampoline]` mapping. At the nop the child inherits an `int3`
//!   that the kernel handles: with a per-process tracer no consumer wants
//!   the child, so at its first hit the kernel removes the breakpoint from
//!   the child and lowers the child's semaphore (the closure ran once, then
//!   `enabled` is false); with an every-process tracer it counts the child.
//! - At Location + 1, after the kernel optimized the site, the child inherits
//!   the `call` into the trampoline but not the trampoline: without help its
//!   first hit jumps to an unmapped page. This is the kernel's doing (6.18's
//!   uprobe optimization does not handle fork), and it hits every tracer that
//!   attaches at Location + 1 here, libbpf 1.7 included (it does so
//!   automatically). usdt-runtime's fork guard, which every program with
//!   `nop; nop5` sites links, maps a page of `ret` at the trampoline's
//!   address in the child, so the child's sites act as no-ops and it runs
//!   on: its hits reach no tracer, even one of every process. With the
//!   guard left out (`USDT_FORK_GUARD=0`) the child dies, as a C program's
//!   would. `AttachPoint::Auto` takes Location + 1 for a program that carries
//!   the guard's marker (the last test below), the nop for one without it.
//! - A perf uprobe event with `inherit` cannot be inherited by a process
//!   that is not the tracer's own child: the kernel re-reads the event's
//!   path (`config1`, a pointer into the tracer's memory) in the forking
//!   process, so its `fork()` fails with `EFAULT`. `PerfCounter::inherit` is for
//!   commands the tracer starts itself.
//!
//! After the tracer detaches, the parent's semaphore is 0 and its closure
//! idle in every case where it forked.

mod busy;

use busy::{field, number, Program};
use usdt_test_support::{ready, tracing_env, ROOT};
use usdt_trace::{
    auto_delta, caps, fork_test, read_file_fork_guard, read_semaphore, AttachPoint, KernelFeatures,
    OptimizedFork, PerfCounter, Target, UprobeSyscall,
};

const N: u64 = 100_000;

/// What the program printed, the hits counted and whether it exited 0.
struct Run {
    lines: Vec<String>,
    hits: u64,
    exit_ok: bool,
}

impl Run {
    fn line(&self, prefix: &str) -> &str {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:#?}", self.lines))
    }

    /// The parent's computations were exact and it ran the closure for
    /// every traced iteration.
    fn check_parent(&self) {
        for who in ["before", "parent"] {
            let line = self.line(who);
            assert_eq!(
                field(line, "result"),
                field(line, "reference"),
                "{who}: {line}"
            );
            assert_eq!(number(line, "runs"), N, "{who}: {line}");
        }
    }
}

/// Runs `fork N` (a copy of its own, so an every-process tracer sees no
/// other test's program) with a tracer attached at `point`.
fn run(target_all: bool, inherit: bool, point: AttachPoint) -> Run {
    run_guarded(target_all, inherit, point, true)
}

/// [`run`], with the fork guard left out (`USDT_FORK_GUARD=0`) unless `guard`.
fn run_guarded(target_all: bool, inherit: bool, point: AttachPoint, guard: bool) -> Run {
    tracing_env();
    let tag = format!(
        "{}-{inherit}-{point:?}-{guard}",
        if target_all { "all" } else { "pid" }
    );
    let bin = busy::private_copy(&busy::release_example("fork"), &tag);
    let sites = busy::sites(&bin, "fork:tick");
    let env: &[(&str, &str)] = if guard {
        &[]
    } else {
        &[("USDT_FORK_GUARD", "0")]
    };
    let mut fork = Program::start_env(&bin, &[&N.to_string()], env);
    assert_eq!(fork.line(), "ready");
    let pid = fork.pid();
    let semaphore = busy::semaphore_address(pid, &bin, &sites[0]);
    let target = if target_all {
        Target::AllProcesses
    } else {
        Target::Pid(pid)
    };
    let mut tracer = PerfCounter::new(point).inherit(inherit);
    tracer.attach(&bin, &sites, target).unwrap();
    assert_ne!(read_semaphore(pid, semaphore).unwrap(), 0);
    fork.send("");
    let mut lines: Vec<String> = vec![];
    while !lines.iter().any(|l| l.starts_with("parent ")) {
        lines.push(fork.line());
    }
    let hits = tracer.probe_counts().unwrap()["fork:tick"];
    drop(tracer);
    if !lines.iter().any(|l| l.starts_with("parent fork-failed")) {
        assert_eq!(read_semaphore(pid, semaphore).unwrap(), 0, "{lines:#?}");
        assert_eq!(fork.ask(""), "after runs=0 enabled=false", "{lines:#?}");
    }
    let exit_ok = fork.finish();
    let _ = std::fs::remove_file(&bin);
    Run {
        lines,
        hits,
        exit_ok,
    }
}

/// The child ran its loop exactly and exited 0; returns its closure runs.
fn check_child(run: &Run) -> String {
    assert!(
        run.line("parent").ends_with("child=exit=0"),
        "{:#?}",
        run.lines
    );
    let child = run.line("child");
    assert_eq!(field(child, "result"), field(child, "reference"), "{child}");
    assert_eq!(
        run.line("child-start"),
        "trampoline=false enabled=true",
        "the child starts with the parent's semaphore"
    );
    child.to_owned()
}

#[test]
fn fork_traced_at_the_nop_per_process_child_untraced_and_correct() {
    if !ready(&[ROOT]) {
        return;
    }
    let run = run(false, false, AttachPoint::Nop);
    run.check_parent();
    let child = check_child(&run);
    // The kernel drops the breakpoint and the semaphore from the child at
    // its first hit: the closure ran that once.
    assert_eq!(number(&child, "runs"), 1, "{child}");
    assert_eq!(field(&child, "enabled"), "false", "{child}");
    assert_eq!(run.hits, 2 * N, "the parent's hits, not the child's");
    assert!(run.exit_ok);
}

#[test]
fn fork_traced_at_the_nop_every_process_counts_the_child() {
    if !ready(&[ROOT]) {
        return;
    }
    let run = run(true, false, AttachPoint::Nop);
    run.check_parent();
    let child = check_child(&run);
    assert_eq!(number(&child, "runs"), N, "{child}");
    assert_eq!(field(&child, "enabled"), "true", "{child}");
    assert_eq!(run.hits, 3 * N, "parent and child");
    assert!(run.exit_ok);
}

/// At Location + 1 on a kernel that optimizes nop5 (this one), the child
/// inherits the optimized `call` but not the trampoline; the fork guard
/// maps a page of `ret` there, so the child runs exactly, its sites acting
/// as no-ops (the closure runs each time: the semaphore stays raised in
/// the child, and no hit of the child reaches the kernel).
fn check_optimized(run: &Run) {
    check_optimized_parent(run);
    let child = check_child(run);
    if KernelFeatures::detect().uprobe_syscall == UprobeSyscall::OptimizesNop5 {
        assert_eq!(number(&child, "runs"), N, "{child}");
        assert_eq!(field(&child, "enabled"), "true", "{child}");
    }
}

fn check_optimized_parent(run: &Run) {
    run.check_parent();
    assert_eq!(field(run.line("before"), "trampoline"), "true");
    assert_eq!(run.hits, 2 * N, "{:#?}", run.lines);
    assert!(run.exit_ok);
}

#[test]
fn fork_traced_at_location_plus_one_per_process() {
    if !ready(&[ROOT]) {
        return;
    }
    check_optimized(&run(false, false, AttachPoint::Next));
}

#[test]
fn fork_traced_at_location_plus_one_every_process() {
    if !ready(&[ROOT]) {
        return;
    }
    check_optimized(&run(true, false, AttachPoint::Next));
}

/// Without the fork guard the child inherits the optimized `call` and no
/// trampoline, and dies of SIGSEGV at its first hit (measured on 6.18).
#[test]
fn fork_traced_at_location_plus_one_without_the_guard_loses_the_child() {
    if !ready(&[ROOT]) {
        return;
    }
    let run = run_guarded(false, false, AttachPoint::Next, false);
    check_optimized_parent(&run);
    if KernelFeatures::detect().uprobe_syscall == UprobeSyscall::OptimizesNop5 {
        assert_eq!(
            run.line("child-start"),
            "trampoline=false enabled=true",
            "the child has no [uprobes-trampoline]"
        );
        assert!(
            run.line("parent").ends_with("child=signal=11"),
            "measured on Linux 6.18: the child dies of SIGSEGV at its first hit; if it \
             survives now, the kernel handles fork: update this test and docs/site.md\n{:#?}",
            run.lines
        );
    } else {
        check_child(&run);
    }
}

#[test]
fn fork_with_an_inheriting_tracer_fails_with_efault() {
    if !ready(&[ROOT]) {
        return;
    }
    for point in [AttachPoint::Nop, AttachPoint::Next] {
        let run = run(false, true, point);
        assert_eq!(
            run.line("parent"),
            "fork-failed errno=Bad address (os error 14)",
            "{point:?}: measured on Linux 6.18; if fork works now, update this test"
        );
        let before = run.line("before");
        assert_eq!(field(before, "result"), field(before, "reference"));
        assert_eq!(run.hits, N);
        assert!(!run.exit_ok, "the program exits 3 when fork fails");
    }
}

/// The default attach point is safe for programs that fork: where the fork
/// self-test finds that the child dies (this kernel), `Auto` takes
/// Location + 1 only for a program with the fork guard (this one), whose
/// child then runs on, and only where the speed self-test favours the
/// optimized path; otherwise the nop, where the child runs on untraced.
#[test]
fn fork_traced_with_the_default_attach_point_keeps_the_child_alive() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = busy::release_example("fork");
    let layout = busy::sites(&exe, "fork:tick")[0].layout;
    let guarded = read_file_fork_guard(&exe).unwrap();
    // The rule, from this machine's capabilities: the long nop iff the
    // kernel optimizes it, the child is safe (the kernel's verdict or the
    // guard) and the optimized path was not measured slower.
    let at_next = auto_delta(layout, &caps().auto_inputs(guarded)) != 0;
    let run = run(false, false, AttachPoint::Auto);
    run.check_parent();
    let child = check_child(&run);
    if at_next {
        if fork_test().verdict != OptimizedFork::ChildSurvives {
            assert!(
                guarded,
                "Auto takes +1 where the child dies only for a guarded program"
            );
            assert_eq!(number(&child, "runs"), N, "{child}");
        }
        assert_eq!(field(run.line("before"), "trampoline"), "true");
    } else if fork_test().verdict != OptimizedFork::ChildSurvives {
        assert_eq!(number(&child, "runs"), 1, "{child}");
        assert_eq!(field(run.line("before"), "trampoline"), "false");
    }
    assert_eq!(run.hits, 2 * N);
    assert!(run.exit_ok);
}
