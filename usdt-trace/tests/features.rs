//! Kernel feature detection on the project's CI machine (Linux 6.18, x86-64).

use usdt_trace::{
    fork_test, tracer_features, KernelFeatures, OptimizedFork, SiteLayout, UprobeSyscall,
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
/// the child survives, the kernel learned to handle fork: update the README.
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
