//! Kernel feature detection on the project's CI machine (Linux 6.18, x86-64).

use usdt_trace::{KernelFeatures, SiteLayout, UprobeSyscall};

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
    assert!(f.attach_after_nop(SiteLayout::NopNop5));
    assert!(!f.attach_after_nop(SiteLayout::NopNop10));
    assert!(!f.attach_after_nop(SiteLayout::Nop));
}
