//! Kernel feature detection on the project's CI machine (Linux 6.18, x86-64).

use usdt_trace::{
    auto_delta, caps, fork_test, speed_test, tracer_features, KernelFeatures, OptimizedFork,
    SiteLayout, Speed, UprobeSyscall, SPEED_TEST_CACHE,
};

#[test]
fn this_kernel_optimizes_nop5_and_maintains_semaphores() {
    if !usdt_provision::ready(&[usdt_provision::Need::root(
        "it attaches uprobes (perf_event_open on the uprobe PMU)",
    )]) {
        return;
    }
    let f = KernelFeatures::detect();
    assert_eq!(f.uprobe_syscall, UprobeSyscall::OptimizesNop5, "{f:?}");
    assert_eq!(f.optimized_layout(), Some(SiteLayout::NopNop5));
    assert!(f.kernel_semaphores, "{f:?}");
    assert_eq!(f.ref_ctr_offset_shift, Some(32));
    let pmu = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type").unwrap();
    assert_eq!(f.uprobe_pmu_type, Some(pmu.trim().parse().unwrap()));
    assert!(f.optimizes(SiteLayout::NopNop5));
    assert!(!f.optimizes(SiteLayout::NopNop10));
    assert!(!f.optimizes(SiteLayout::Nop));
    // The runtime never runs the fork self-test: without it, the nop.
    assert_eq!(f.optimized_fork, OptimizedFork::Untested);
    assert!(!f.attach_after_nop(SiteLayout::NopNop5));
}

/// Measured on Linux 6.18.44: a child forked after an optimized hit dies at
/// its own first hit, so `Auto` attaches at the nop. If this fails because
/// the child survives, the kernel learned to handle fork: update docs/site.md.
#[test]
fn the_fork_self_test_finds_that_the_child_dies_here() {
    let test = fork_test();
    assert_eq!(test.layout, Some(SiteLayout::NopNop5), "{test:?}");
    assert_eq!(test.verdict, OptimizedFork::ChildDies, "{test:?}");
    assert!(test.why.contains("SIGSEGV"), "{test:?}");
    let f = tracer_features();
    assert_eq!(f.optimized_fork, OptimizedFork::ChildDies);
    assert!(!f.attach_after_nop(SiteLayout::NopNop5));
    assert!(f.optimizes(SiteLayout::NopNop5));
}

/// The speed self-test times both paths with real uprobes: positive rates,
/// the layout this kernel optimizes, kept for the boot in its cache file;
/// and `Auto` follows it: never +1 here for an unguarded program (the fork
/// self-test finds that the child dies), and for a guarded one exactly when
/// the optimized path measured faster.
#[test]
fn the_speed_test_times_both_paths_and_auto_follows_it() {
    if !usdt_provision::ready(&[usdt_provision::Need::root(
        "it attaches uprobes (perf_event_open on the uprobe PMU)",
    )]) {
        return;
    }
    let test = match speed_test() {
        Ok(t) => t,
        Err(why) => panic!("no speed test: {why}"),
    };
    assert_eq!(test.layout, SiteLayout::NopNop5);
    assert!(test.trap > 0.0 && test.optimized > 0.0, "{test:?}");
    // A uprobe hit costs a kernel entry: far below the bare loop's rate.
    assert!(test.trap < 100.0 && test.optimized < 100.0, "{test:?}");
    if let Some(took) = test.took {
        assert!(took.as_secs_f64() < 5.0, "{took:?}");
    }
    let cached = std::fs::read_to_string(SPEED_TEST_CACHE).unwrap();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let line = cached
        .lines()
        .find(|l| l.contains(release.trim()) && l.contains(" nop;nop5 "))
        .unwrap_or_else(|| panic!("no line for this kernel in {cached:?}"));
    let rates: Vec<f64> = line
        .split(' ')
        .skip(3)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(rates.len(), 2, "{line}");
    assert!((rates[0] - test.trap).abs() < 1e-3, "{line} {test:?}");
    assert!((rates[1] - test.optimized).abs() < 1e-3, "{line} {test:?}");

    let caps = caps();
    assert_eq!(caps.fork.verdict, OptimizedFork::ChildDies);
    let plain = caps.auto_inputs(false);
    assert_eq!(
        plain.speed,
        if test.optimized_faster() {
            Speed::OptimizedFaster
        } else {
            Speed::TrapFaster
        }
    );
    for layout in [
        SiteLayout::NopNop5,
        SiteLayout::NopNop10,
        SiteLayout::NopNop5Nop10,
    ] {
        assert_eq!(auto_delta(layout, &plain), 0, "{layout}");
    }
    let guarded = caps.auto_inputs(true);
    let want = u64::from(test.optimized_faster());
    assert_eq!(auto_delta(SiteLayout::NopNop5, &guarded), want);
    assert_eq!(auto_delta(SiteLayout::NopNop5Nop10, &guarded), want);
    assert_eq!(auto_delta(SiteLayout::NopNop10, &guarded), 0);
}

/// The capabilities agree with the kernel asked directly.
#[test]
fn the_capabilities_agree_with_the_kernel() {
    // SAFETY: syscall 336 takes no arguments and only fails outside a
    // uprobe trampoline; errno is read right after.
    let errno = unsafe {
        libc::syscall(336);
        *libc::__errno_location()
    };
    let caps = caps();
    let want = match errno {
        libc::ENOSYS => UprobeSyscall::Absent,
        libc::ENXIO => UprobeSyscall::OptimizesNop5,
        libc::EPROTO => UprobeSyscall::OptimizesNop10,
        e => UprobeSyscall::Unknown(e),
    };
    assert_eq!(caps.features.uprobe_syscall, want);
    assert_eq!(caps.features.optimized_fork, caps.fork.verdict);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(caps.kernel, release.trim());
    assert_eq!(caps.machine, std::env::consts::ARCH);
    assert_eq!(
        caps.tracefs.is_some(),
        std::path::Path::new("/sys/kernel/tracing/uprobe_events").exists()
            || std::path::Path::new("/sys/kernel/debug/tracing/uprobe_events").exists()
    );
}
