//! `usdt features`: what this kernel and machine can do, and where Auto
//! attaches each site layout, as text or as one JSON object (the library's
//! [`usdt_trace::FeatureReport`], serialized).

use crate::args::FeaturesArgs;
use crate::error::CliError;
use crate::output::out;

use usdt_trace::{
    auto_delta_here, caps, fork_safe, optimizable_on, site_words, tracer_features, Machine,
    OptimizedFork, SiteLayout, UprobeSyscall, FORK_TEST_CACHE, SPEED_TEST_CACHE,
};

pub(crate) fn features(args: FeaturesArgs) -> Result<i32, CliError> {
    let caps = caps();
    if args.json {
        let report =
            serde_json::to_string(&caps.report()).map_err(|e| CliError::Output(e.into()))?;
        out!("{report}");
        return Ok(0);
    }
    let f = caps.features;
    let host = Machine::host();
    match host {
        Some(m) => out!("machine: {m}; its probe sites: {}", site_words(m)),
        None => out!("machine: {} (no probe sites)", std::env::consts::ARCH),
    }
    let syscall = match f.uprobe_syscall {
        UprobeSyscall::Absent => {
            "absent (uprobes are never optimized; kernels before 6.18)".to_string()
        }
        UprobeSyscall::OptimizesNop5 => {
            "present, optimizes uprobes on nop5 (ENXIO: Linux 6.18 to 7.2)".into()
        }
        UprobeSyscall::OptimizesNop10 => {
            "present, optimizes uprobes on nop10 (EPROTO: the 7.3 series)".into()
        }
        UprobeSyscall::Unknown(e) => {
            format!(
                "unknown (syscall 336 failed with {})",
                std::io::Error::from_raw_os_error(e)
            )
        }
    };
    out!("uprobe syscall: {syscall}");
    out!("BPF uprobe_multi links: {}", caps.uprobe_multi);
    match f.optimized_layout() {
        Some(layout) => out!("optimized site layout: {layout} (a uprobe at its long nop)"),
        None => out!("optimized site layout: none"),
    }
    let test = caps.fork;
    let verdict = match test.verdict {
        OptimizedFork::ChildSurvives => "the child survives",
        OptimizedFork::ChildDies => "the child dies",
        OptimizedFork::Untested => "untested (assumed to die)",
    };
    let source = match (test.cached, test.took) {
        (true, _) => format!("; cached for this boot in {FORK_TEST_CACHE}"),
        (false, Some(t)) => format!("; self-test took {} ms", t.as_millis()),
        (false, None) => String::new(),
    };
    out!(
        "fork after an optimized hit: {verdict} ({}{source})",
        test.why
    );
    if caps.guard_decides() {
        out!(
            "fork after an optimized hit, in a program with usdt's fork guard: fork-safe (guarded by the program: its forked child maps a page of ret where the trampoline was)"
        );
    }
    match caps.speed {
        Ok(s) => {
            let source = match (s.cached, s.took) {
                (true, _) => format!("cached for this boot in {SPEED_TEST_CACHE}"),
                (false, Some(t)) => format!("self-test took {} ms", t.as_millis()),
                (false, None) => String::new(),
            };
            let faster = if s.optimized_faster() {
                "the optimized path is faster"
            } else {
                "the trap is as fast or faster"
            };
            out!(
                "speed on this machine: trap (nop) {:.3} M/s, optimized ({}) {:.3} M/s: {faster} ({source})",
                s.trap,
                s.layout,
                s.optimized
            );
        }
        Err(why) => out!("speed on this machine: not measured ({why})"),
    }
    // Another machine's sites have no long nop: the nop, whatever the layout.
    let layouts = match host.is_some_and(optimizable_on) {
        true => &LAYOUTS[..],
        false => &LAYOUTS[3..],
    };
    for &layout in layouts {
        out!(
            "auto attach on a {layout} site: {}",
            auto_attach_words(layout, false)
        );
    }
    for layout in layouts.iter().copied().filter(|l| l.has_long_nop()) {
        out!(
            "auto attach on a {layout} site of a program with a fork guard: {}",
            auto_attach_words(layout, true)
        );
    }
    match f.uprobe_pmu_type {
        Some(t) => out!("uprobe PMU: type {t}"),
        None => out!("uprobe PMU: absent (perf_event_open cannot attach uprobes)"),
    }
    match (f.kernel_semaphores, f.ref_ctr_offset_shift) {
        (true, Some(s)) => {
            out!("semaphores: maintained by the kernel (ref_ctr_offset in config bits {s}-63)")
        }
        (true, None) => out!("semaphores: maintained by the kernel (ref_ctr_offset)"),
        (false, _) => out!("semaphores: not maintained by the kernel (no ref_ctr_offset)"),
    }
    Ok(0)
}

/// The layouts `usdt features` reports on (x86-64's, then every
/// machine's `nop`, last).
const LAYOUTS: [SiteLayout; 4] = [
    SiteLayout::NopNop5,
    SiteLayout::NopNop10,
    SiteLayout::NopNop5Nop10,
    SiteLayout::Nop,
];

/// Where `Auto` attaches on this kernel, in words (for listings), for a
/// program with a fork guard or without: "guarded" where the long nop is
/// taken only because the program carries the guard.
pub(crate) fn auto_attach_words(layout: SiteLayout, guarded: bool) -> &'static str {
    let features = tracer_features();
    let by_guard = guarded && !fork_safe(features.optimized_fork, false);
    match auto_delta_here(layout, &features, guarded) {
        1 if layout == SiteLayout::NopNop5Nop10 && by_guard => "+1 (nop5, guarded)",
        1 if layout == SiteLayout::NopNop5Nop10 => "+1 (nop5, optimized)",
        6 if by_guard => "+6 (nop10, guarded)",
        6 => "+6 (nop10, optimized)",
        0 if !features.optimizes(layout) => "nop",
        0 if !fork_safe(features.optimized_fork, guarded) => "nop (fork-safe)",
        0 => "nop (faster here)",
        _ if by_guard => "+1 (guarded)",
        _ => "+1 (optimized)",
    }
}
