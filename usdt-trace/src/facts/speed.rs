//! The speed self-test: on this machine, is a hit on an optimized site
//! (a uprobe at the long nop, rewritten by the kernel into a `call` to
//! `[uprobes-trampoline]`) faster than a hit on the nop (an `int3` trap)?
//!
//! Which is faster depends on the machine as well as the kernel: upstream
//! measured 2.3x for the optimized path on Intel, this project 2.1x on an
//! Intel virtual machine and 0.81x (slower) on an AMD one. So, like the fork
//! self-test:
//!
//! 1. fork a scratch child of the tracer, paused on a pipe;
//! 2. attach two counting uprobes for it in sites of this crate's own text:
//!    one at the nop of a `nop; nop5` site (the trap), one at the long nop
//!    of a site of the layout this kernel optimizes;
//! 3. the child hits the optimized site until the kernel rewrote it, then
//!    times the two sites in turns (2 x 15 ms each) and writes hits and
//!    nanoseconds back;
//! 4. the tracer checks that its counters saw exactly those hits.
//!
//! About 100 ms once per boot: the rates are kept in [`SPEED_TEST_CACHE`],
//! keyed as the fork verdict is (the self-tests' one cache, `cache.rs`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::scratch::{file_offset, wait_with_timeout};
use crate::sys::perf::{open_uprobe, Uprobe};
use crate::sys::process::{self, Forked};
use crate::SiteLayout;

/// Where measured rates are kept across processes, one line per boot,
/// kernel and layout: `BOOT RELEASE LAYOUT TRAP_M/S OPTIMIZED_M/S`.
pub const SPEED_TEST_CACHE: &str = "/run/usdt/speed-test";

const CACHE: Cache = Cache::new(SPEED_TEST_CACHE);

/// How long each of the two sites is timed per turn, and how many turns.
const TURN: Duration = Duration::from_millis(15);
const TURNS: usize = 2;
/// Hits on the optimized site before timing (the kernel rewrites it at the
/// first).
const WARM_HITS: u64 = 8;

/// The rates the speed self-test measured, in million hits per second.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeedTest {
    /// The layout whose long nop was timed.
    pub layout: SiteLayout,
    /// A uprobe at the nop (`int3`, emulated).
    pub trap: f64,
    /// A uprobe at the long nop, after the kernel optimized it.
    pub optimized: f64,
    /// Whether the rates came from [`SPEED_TEST_CACHE`].
    pub cached: bool,
    /// How long the live test took (when it ran in this process).
    pub took: Option<Duration>,
}

impl SpeedTest {
    /// Whether the optimized path measured faster than the trap.
    pub fn optimized_faster(&self) -> bool {
        self.optimized > self.trap
    }
}

// Sites of this crate's own text, each a function that runs its nops and
// returns; 16-byte alignment keeps each long nop within one page.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
std::arch::global_asm!(
    ".pushsection .text.usdt_speed_selftest, \"ax\", @progbits",
    ".globl usdt_trace_speed_trap",
    ".hidden usdt_trace_speed_trap",
    ".p2align 4",
    "usdt_trace_speed_trap:",
    // nop; nop5, the bytes spelled out: the trap is timed at the nop.
    ".byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "ret",
    ".globl usdt_trace_speed_nop5",
    ".hidden usdt_trace_speed_nop5",
    ".p2align 4",
    "usdt_trace_speed_nop5:",
    ".byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "ret",
    ".globl usdt_trace_speed_nop10",
    ".hidden usdt_trace_speed_nop10",
    ".p2align 4",
    "usdt_trace_speed_nop10:",
    ".byte 0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00",
    "ret",
    ".popsection",
);

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
extern "C" {
    fn usdt_trace_speed_trap();
    fn usdt_trace_speed_nop5();
    fn usdt_trace_speed_nop10();
}

/// The speed self-test for this kernel's optimized layout, computed once
/// per process (from [`SPEED_TEST_CACHE`] when it holds this boot's
/// rates): `Err` says why there are no rates (this kernel optimizes
/// nothing, or the test could not run).
pub fn speed_test() -> &'static Result<SpeedTest, String> {
    static ONCE: OnceLock<Result<SpeedTest, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let layout = super::kernel_features()
            .optimized_layout()
            .ok_or("this kernel optimizes no site layout")?;
        if let Some(found) = read_cache(layout) {
            return Ok(found);
        }
        let started = Instant::now();
        let (trap, optimized) = run_live(layout)?;
        let test = SpeedTest {
            layout,
            trap,
            optimized,
            cached: false,
            took: Some(started.elapsed()),
        };
        CACHE.put(layout, &format!("{trap:.4} {optimized:.4}"));
        Ok(test)
    })
}

/// This boot's rates for `layout` from the cache, if it has them.
fn read_cache(layout: SiteLayout) -> Option<SpeedTest> {
    let line = CACHE.get(layout)?;
    let mut words = line.split(' ');
    let rate = |w: Option<&str>| w?.parse::<f64>().ok().filter(|r| r.is_finite() && *r > 0.0);
    let (trap, optimized) = (rate(words.next())?, rate(words.next())?);
    Some(SpeedTest {
        layout,
        trap,
        optimized,
        cached: true,
        took: None,
    })
}

/// What the scratch child writes back: trap hits, trap ns, optimized
/// hits, optimized ns (optimized hits without the warm-up).
type Report = [u64; 4];

/// Exit codes of the scratch child.
const DONE: i32 = 0;
const NO_GO: i32 = 2;
const NOT_OPTIMIZED: i32 = 3;
const NO_REPORT: i32 = 4;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn run_live(layout: SiteLayout) -> Result<(f64, f64), String> {
    let site: unsafe extern "C" fn() = match layout {
        SiteLayout::NopNop5 => usdt_trace_speed_nop5,
        SiteLayout::NopNop10 => usdt_trace_speed_nop10,
        _ => return Err(format!("no {layout} site to time")),
    };
    let trap: unsafe extern "C" fn() = usdt_trace_speed_trap;
    let report = live(trap, site, layout).map_err(|why| format!("the speed test: {why}"))?;
    let rate = |hits: u64, ns: u64| hits as f64 * 1e3 / ns.max(1) as f64;
    Ok((rate(report[0], report[1]), rate(report[2], report[3])))
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn run_live(_layout: SiteLayout) -> Result<(f64, f64), String> {
    Err("no speed test on this architecture".into())
}

/// Two pipes: go (tracer to child) and the report (child to tracer).
fn pipes() -> Result<[OwnedFd; 4], String> {
    let pipe = || process::pipe().map_err(|e| format!("pipe: {}", e.io_error));
    let (go_read, go_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    Ok([go_read, go_write, report_read, report_write])
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn live(
    trap: unsafe extern "C" fn(),
    site: unsafe extern "C" fn(),
    layout: SiteLayout,
) -> Result<Report, String> {
    let (trap_addr, long_nop) = (trap as usize as u64, site as usize as u64 + 1);
    let (trap_path, trap_offset) = file_offset(trap_addr)?;
    let (path, offset) = file_offset(long_nop)?;
    let nul = |p: String| CString::new(p).map_err(|_| "a path with a NUL byte".to_string());
    let (trap_path, path) = (nul(trap_path)?, nul(path)?);
    let [go_read, go_write, report_read, report_write] = pipes()?;
    // SAFETY: the child calls only async-signal-safe functions and the
    // sites (see `scratch_child`), so forking a threaded process is fine.
    let pid = match unsafe { process::fork() } {
        Err(e) => return Err(format!("fork: {}", e.io_error)),
        Ok(Forked::Parent(pid)) => pid,
        Ok(Forked::Child) => {
            let fds = [
                go_read.as_raw_fd(),
                go_write.as_raw_fd(),
                report_write.as_raw_fd(),
            ];
            // SAFETY: in the freshly forked child.
            unsafe { scratch_child(fds, trap, site, long_nop, layout) }
        }
    };
    drop((go_read, report_write));
    let features = super::kernel_features();
    let open = |path, offset| {
        let uprobe = Uprobe {
            path,
            offset,
            ref_ctr_offset: None,
        };
        open_uprobe(&features, &uprobe, pid, -1, -1, |_| {})
    };
    let events = open(&trap_path, trap_offset).and_then(|t| Ok((t, open(&path, offset)?)));
    let wrote = match &events {
        Ok(_) => process::write(&go_write, b"g").unwrap_or(0),
        Err(_) => 0,
    };
    drop(go_write);
    let mut report: Report = [0; 4];
    let mut bytes = [0u8; 32];
    let got = read_all(&report_read, &mut bytes);
    let status = wait_with_timeout(pid, Duration::from_secs(10));
    let (trap_event, event) = events.map_err(|e| format!("attaching a uprobe: {e}"))?;
    if wrote != 1 {
        return Err("the scratch child could not be started".into());
    }
    let status = status.ok_or("the scratch child did not end within 10 s")?;
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, DONE) if got => {}
        (true, NOT_OPTIMIZED) => {
            return Err(format!(
                "the kernel did not optimize the test's {layout} site"
            ))
        }
        (true, code) => return Err(format!("the scratch child exited with {code}")),
        (false, _) => {
            return Err(format!(
                "the scratch child ended by signal {}",
                libc::WTERMSIG(status)
            ))
        }
    }
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        report[i] = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    }
    let counted = (count(&trap_event)?, count(&event)?);
    // Closing a uprobe event waits for the kernel (an RCU grace period
    // each, tens of milliseconds here): not on the caller's time. The
    // child is gone, so nothing is counted meanwhile.
    let _ = std::thread::Builder::new()
        .name("usdt-speedtest-close".into())
        .spawn(move || drop((trap_event, event)));
    if counted != (report[0], report[2] + WARM_HITS) {
        return Err(format!(
            "the uprobes counted {counted:?} hits where the child made {:?}",
            (report[0], report[2] + WARM_HITS)
        ));
    }
    if report[1] == 0 || report[3] == 0 || report[0] == 0 || report[2] == 0 {
        return Err("the scratch child timed nothing".into());
    }
    Ok(report)
}

/// Fills `buf` from `fd`; whether it was filled.
fn read_all(fd: &OwnedFd, buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        match process::read(fd, &mut buf[done..]) {
            Ok(0) => return false,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

fn count(fd: &OwnedFd) -> Result<u64, String> {
    crate::sys::perf::read_count(fd)
        .map_err(|e| format!("reading a uprobe's count: {}", e.io_error))
}

/// `CLOCK_MONOTONIC` in nanoseconds (async-signal-safe).
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Hits `site` in batches of 256 for at least `TURN`; (hits, ns).
///
/// # Safety
/// `site` is one of the sites above.
unsafe fn timed(site: unsafe extern "C" fn()) -> (u64, u64) {
    let start = now_ns();
    let mut hits = 0;
    loop {
        for _ in 0..256 {
            // SAFETY: the caller's contract: the site runs nops and returns.
            unsafe { site() };
        }
        hits += 256;
        let ns = now_ns().wrapping_sub(start);
        if ns >= TURN.as_nanos() as u64 {
            return (hits, ns);
        }
    }
}

/// The scratch child: wait for the go byte, hit the optimized site until
/// the kernel rewrote it, time both sites in turns, write the report.
///
/// # Safety
/// Only in a freshly forked child.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn scratch_child(
    [go, go_write, report]: [i32; 3],
    trap: unsafe extern "C" fn(),
    site: unsafe extern "C" fn(),
    long_nop: u64,
    layout: SiteLayout,
) -> ! {
    // SAFETY: only async-signal-safe calls, the sites (which touch no
    // memory) and reads of our own text and maps. Raw libc here, not
    // `sys::process`: in test builds every call through `sys::syscall`
    // first consults the fake's thread-local, which nothing vouches is
    // async-signal-safe in a forked child of a threaded process.
    unsafe {
        libc::close(go_write);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::alarm(10);
        let mut byte = 0u8;
        if libc::read(go, (&mut byte as *mut u8).cast(), 1) != 1 {
            libc::_exit(NO_GO);
        }
        for _ in 0..WARM_HITS {
            site();
        }
        if !crate::rewrite::optimized_here(long_nop, layout) {
            libc::_exit(NOT_OPTIMIZED);
        }
        let mut out: Report = [0; 4];
        for _ in 0..TURNS {
            let (h, ns) = timed(trap);
            out[0] += h;
            out[1] += ns;
            let (h, ns) = timed(site);
            out[2] += h;
            out[3] += ns;
        }
        let mut bytes = [0u8; 32];
        for (i, v) in out.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        if libc::write(report, bytes.as_ptr().cast(), bytes.len()) != bytes.len() as isize {
            libc::_exit(NO_REPORT);
        }
        libc::_exit(DONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faster_means_strictly_faster() {
        let t = |trap, optimized| SpeedTest {
            layout: SiteLayout::NopNop5,
            trap,
            optimized,
            cached: false,
            took: None,
        };
        assert!(t(1.0, 2.0).optimized_faster());
        assert!(!t(1.63, 1.32).optimized_faster());
        assert!(!t(1.0, 1.0).optimized_faster());
    }
}
