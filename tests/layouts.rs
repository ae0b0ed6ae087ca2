//! The default `nop; nop5; nop10` site (`examples/layouts.rs`) against real
//! uprobes on this kernel (Linux 6.18, `syscall(336)` says ENXIO: it
//! optimizes the nop5 and refuses a uprobe on the nop10), and the
//! recognition of an optimized site (`usdt_trace::site_rewrite`) on a site
//! the kernel rewrites while the test watches.
//!
//! | attach at | `nop5` build (`nop; nop5`) | default build (`nop; nop5; nop10`) |
//! |---|---|---|
//! | Location (the nop) | exact, site untouched | exact, site untouched |
//! | Location + 1 (the nop5) | exact, rewritten to `call` into `[uprobes-trampoline]` | the same |
//! | Location + 6 (the nop10) | - | refused by this kernel (ENOTSUPP) |

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use usdt_provision::Need;
use usdt_trace::{
    attach_delta, read_file, read_maps, site_rewrite, AttachCause, AttachPoint, Error,
    KernelFeatures, LongNop, PerfCounter, Site, SiteLayout, Target, UprobeSyscall,
};

const ROOT: Need = Need::root("it attaches uprobes (perf_event_open on the uprobe PMU)");
const N: u64 = 1000;

/// Builds `examples/layouts.rs` with `feature` (or none) once per test
/// process, in a target directory of its own.
fn build(feature: Option<&str>) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root
        .join("target")
        .join("shapes")
        .join(feature.unwrap_or("default"));
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--release", "--example", "layouts"])
        .arg("--target-dir")
        .arg(&dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR");
    if let Some(f) = feature {
        cmd.args(["--features", f]);
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "building examples/layouts.rs ({feature:?}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("release/examples/layouts")
}

fn tick_sites(exe: &Path) -> Vec<Site> {
    let sites: Vec<Site> = read_file(exe)
        .unwrap()
        .into_iter()
        .filter(|s| s.probe() == "lay:tick")
        .collect();
    assert!(!sites.is_empty(), "no lay:tick in {}", exe.display());
    sites
}

/// The example, started with `wait`, paused before its loop.
struct Paused {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    pid: u32,
}

impl Paused {
    fn start(exe: &Path) -> Paused {
        let mut child = Command::new(exe)
            .args([&N.to_string(), "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready "), "{line:?}");
        let pid = child.id();
        Paused { child, out, pid }
    }

    /// Lets it run its loop; the line it prints then.
    fn fire(&mut self) -> String {
        self.child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line
    }

    fn finish(mut self) {
        self.child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

/// Where file offset `offset` of `exe` is mapped executable in `pid` (a
/// linker may map the same file page read-only too).
fn runtime_address(pid: u32, exe: &Path, offset: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(exe).unwrap().ino();
    read_maps(pid)
        .unwrap()
        .iter()
        .find(|m| {
            m.inode == inode
                && m.perms.contains('x')
                && m.offset <= offset
                && offset - m.offset < m.end - m.start
        })
        .map(|m| m.start + (offset - m.offset))
        .expect("the site is mapped")
}

/// Counts `N` hits of the example at `point`; with the site of `kind` at
/// `delta` past Location read back while still attached.
fn count_at(exe: &Path, point: AttachPoint, look: (u64, SiteLayout)) -> (u64, LongNop, bool) {
    let sites = tick_sites(exe);
    let mut paused = Paused::start(exe);
    let mut tracer = PerfCounter::new(point);
    tracer.attach(exe, &sites, Target::Pid(paused.pid)).unwrap();
    let line = paused.fire();
    let want: u64 = (0..N).sum();
    assert!(line.starts_with(&format!("sum {want} ")), "{line:?}");
    let location = runtime_address(paused.pid, exe, sites[0].location_offset.unwrap());
    let seen = site_rewrite(paused.pid, location + look.0, look.1).unwrap();
    let hits = tracer.probe_counts().unwrap()["lay:tick"];
    drop(tracer);
    paused.finish();
    (hits, seen.long_nop, seen.optimized)
}

/// This kernel: ENXIO (the nop5 is optimized, the nop10 refused).
fn enxio_kernel() -> bool {
    if !usdt_provision::ready(&[ROOT]) {
        return false;
    }
    let f = KernelFeatures::detect();
    assert_eq!(f.uprobe_syscall, UprobeSyscall::OptimizesNop5, "{f:?}");
    true
}

#[test]
fn the_two_nop_site_is_read_with_its_nop_first() {
    let exe = build(None);
    let out = Command::new(&exe).arg("3").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "sum 3 layout nop;nop5;nop10\n"
    );
    for site in tick_sites(&exe) {
        assert_eq!(site.layout, SiteLayout::NopNop5Nop10);
        // The note's Location is the nop; the nop5 and the nop10 follow.
        assert_eq!(
            &site.bytes[..16],
            SiteLayout::NopNop5Nop10.x86_64_bytes().unwrap()
        );
        assert!(site.args_text.starts_with("8@%"), "{}", site.args_text);
    }
}

#[test]
fn each_offset_of_the_two_nop_site_on_this_kernel() {
    if !enxio_kernel() {
        return;
    }
    let exe = build(None);
    let features = KernelFeatures::detect();
    let site = &tick_sites(&exe)[0];
    // `--attach next` takes the long nop this kernel optimizes: the nop5.
    assert_eq!(attach_delta(site, AttachPoint::Next, &features).unwrap(), 1);
    // At the nop: exact, and the long nops stay as they are.
    let (hits, nop5, optimized) = count_at(&exe, AttachPoint::Nop, (1, SiteLayout::NopNop5));
    assert_eq!((hits, nop5, optimized), (N, LongNop::Intact, false));
    // At the nop5: exact, and the kernel rewrote it into a call into the
    // trampoline; the nop10 after it is untouched.
    let (hits, nop5, optimized) = count_at(&exe, AttachPoint::Next, (1, SiteLayout::NopNop5));
    assert_eq!(hits, N);
    assert!(matches!(nop5, LongNop::Call { .. }), "{nop5:?}");
    assert!(optimized, "the call lands in [uprobes-trampoline]");
    let (hits, nop10, _) = count_at(&exe, AttachPoint::Next, (6, SiteLayout::NopNop10));
    assert_eq!((hits, nop10), (N, LongNop::Intact));
    // At the nop10: this kernel refuses a uprobe there.
    let mut at_nop10 = site.clone();
    at_nop10.location_offset = site.location_offset.map(|o| o + 5);
    at_nop10.layout = SiteLayout::NopNop5;
    let mut tracer = PerfCounter::new(AttachPoint::Next);
    let paused = Paused::start(&exe);
    let refused = tracer.attach(&exe, [&at_nop10], Target::Pid(paused.pid));
    assert!(
        matches!(&refused, Err(Error::Attach(e)) if matches!(e.cause, AttachCause::InstructionRefused)),
        "{refused:?}"
    );
    drop(tracer);
    paused.finish_after_fire();
}

impl Paused {
    fn finish_after_fire(mut self) {
        let line = self.fire();
        assert!(line.starts_with("sum "), "{line:?}");
        self.finish();
    }
}

/// The recognition on a `nop5` build: a site optimized live reads as a
/// call into the trampoline; attached at the nop it reads as the nop5.
#[test]
fn an_optimized_nop5_site_is_recognised_live() {
    if !enxio_kernel() {
        return;
    }
    let exe = build(Some("nop5"));
    assert_eq!(tick_sites(&exe)[0].layout, SiteLayout::NopNop5);
    let (hits, nop5, optimized) = count_at(&exe, AttachPoint::Next, (1, SiteLayout::NopNop5));
    assert_eq!(hits, N);
    assert!(
        matches!(nop5, LongNop::Call { .. }) && optimized,
        "{nop5:?}"
    );
    // The same bytes read as the nop10 form are no optimized nop10.
    let (_, as_nop10, optimized) = count_at(&exe, AttachPoint::Next, (1, SiteLayout::NopNop10));
    assert!(!optimized, "{as_nop10:?}");
    let (hits, nop5, optimized) = count_at(&exe, AttachPoint::Nop, (1, SiteLayout::NopNop5));
    assert_eq!((hits, nop5, optimized), (N, LongNop::Intact, false));
}

#[test]
fn bpftrace_and_gdb_read_the_two_nop_site() {
    let bpftrace = Need::package(
        usdt_provision::BPFTRACE,
        "the test traces the nop;nop5;nop10 example with it",
    );
    let gdb = Need::package(usdt_provision::GDB, "the test stops at the probe with it");
    let tracefs = Need::tracefs("bpftrace creates uprobe events in it");
    if !usdt_provision::ready(&[ROOT, tracefs, bpftrace, gdb]) {
        return;
    }
    let exe = build(None);
    let exe_s = exe.to_str().unwrap();
    let out = Command::new("bpftrace")
        .args([
            "-e",
            &format!("usdt:{exe_s}:lay:tick {{ @n = count(); @s = sum(arg0); }}"),
            "-c",
            &format!("{exe_s} 50"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("@n: 50"), "{text}");
    assert!(
        text.contains(&format!("@s: {}", (0..50u64).sum::<u64>())),
        "{text}"
    );
    let out = Command::new("gdb")
        .args([
            "-batch",
            "-ex",
            "info probes stap lay",
            "-ex",
            "break -probe-stap lay:tick",
            "-ex",
            "run",
            "-ex",
            "continue",
            "-ex",
            "print $_probe_arg0",
            "--args",
            exe_s,
            "3",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tick"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("$1 = 1")),
        "gdb reads the second hit's argument: {text}"
    );
}
