//! The fork self-test: does a child forked from a process whose site the
//! kernel optimized survive its own first hit of that site?
//!
//! On Linux 6.18 it does not: the kernel rewrites the long nop into a `call`
//! to `[uprobes-trampoline]`, and a child forked after that keeps the `call`
//! but not the trampoline (docs/site.md, "Fork and the fork guard"). Only a live test tells, so a
//! tracer runs one before it lets [`AttachPoint::Auto`](crate::AttachPoint)
//! take Location + 1:
//!
//! 1. fork a scratch child of the tracer, paused on a pipe;
//! 2. attach a counting uprobe for that child at Location + 1 of a site of
//!    the optimized layout in the tracer's own text (below);
//! 3. the child hits the site until the kernel has rewritten it (a `call`),
//!    forks, and the grandchild hits it once;
//! 4. the child reports how its child ended in its exit code.
//!
//! It costs a fork, a uprobe and a few milliseconds, so the verdict is kept
//! in [`FORK_TEST_CACHE`] keyed by boot id, kernel release and site layout
//! (the self-tests' one cache, `cache.rs`): a tracer pays it once per boot
//! (when it may write there, as root; otherwise once per process).

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::scratch::{file_offset, wait_with_timeout};
use crate::sys::perf::{open_uprobe, Uprobe};
use crate::sys::process::{self, Forked};
use crate::{KernelFeatures, OptimizedFork, SiteLayout};

/// Where verdicts are kept across processes, one line per boot, kernel and
/// layout.
pub const FORK_TEST_CACHE: &str = "/run/usdt/fork-test";

const CACHE: Cache = Cache::new(FORK_TEST_CACHE);

/// The verdict of the fork self-test, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkTest {
    /// The layout tested (the one this kernel optimizes), if any.
    pub layout: Option<SiteLayout>,
    /// What the test found.
    pub verdict: OptimizedFork,
    /// Why, in words.
    pub why: String,
    /// Whether the verdict came from [`FORK_TEST_CACHE`] rather than a run now.
    pub cached: bool,
    /// How long the live test took (when it ran in this process).
    pub took: Option<Duration>,
}

// Probe sites in this crate's own text, one per layout, each a function:
// `call` it and it runs the nops and returns. 16-byte alignment keeps the
// long nop inside one page (the kernel optimizes only such a one). No
// stack use, so the trampoline's pushes below `rsp` overwrite nothing.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
std::arch::global_asm!(
    ".pushsection .text.usdt_fork_selftest, \"ax\", @progbits",
    ".globl usdt_trace_fork_selftest_nop5",
    ".hidden usdt_trace_fork_selftest_nop5",
    ".p2align 4",
    "usdt_trace_fork_selftest_nop5:",
    // nop; nop5, the bytes spelled out (the assembler may shorten nopl).
    ".byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "ret",
    ".globl usdt_trace_fork_selftest_nop10",
    ".hidden usdt_trace_fork_selftest_nop10",
    ".p2align 4",
    "usdt_trace_fork_selftest_nop10:",
    // nop; nop10.
    ".byte 0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00",
    "ret",
    ".popsection",
);

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
extern "C" {
    fn usdt_trace_fork_selftest_nop5();
    fn usdt_trace_fork_selftest_nop10();
}

/// The kernel's features with the fork verdict filled in: what a tracer
/// attaching with [`AttachPoint::Auto`](crate::AttachPoint) uses. Runs the
/// self-test only where it matters (this kernel optimizes a layout), once
/// per process, and reads or writes [`FORK_TEST_CACHE`].
pub fn tracer_features() -> KernelFeatures {
    KernelFeatures {
        optimized_fork: fork_test().verdict,
        ..super::kernel_features()
    }
}

/// The fork self-test's result for this kernel, computed once per process
/// (from [`FORK_TEST_CACHE`] when it holds this boot's verdict).
pub fn fork_test() -> &'static ForkTest {
    static ONCE: OnceLock<ForkTest> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Some(layout) = super::kernel_features().optimized_layout() else {
            return ForkTest {
                layout: None,
                verdict: OptimizedFork::Untested,
                why: "this kernel optimizes no site layout, so there is nothing to test".into(),
                cached: false,
                took: None,
            };
        };
        if let Some(found) = read_cache(layout) {
            return found;
        }
        let started = Instant::now();
        let (verdict, why) = run_live(layout);
        let test = ForkTest {
            layout: Some(layout),
            verdict,
            why,
            cached: false,
            took: Some(started.elapsed()),
        };
        if verdict != OptimizedFork::Untested {
            write_cache(layout, &test);
        }
        test
    })
}

/// This boot's verdict for `layout` from the cache, if it has one.
fn read_cache(layout: SiteLayout) -> Option<ForkTest> {
    let rest = CACHE.get(layout)?;
    let mut rest = rest.splitn(2, ' ');
    let verdict = match rest.next()? {
        "survives" => OptimizedFork::ChildSurvives,
        "dies" => OptimizedFork::ChildDies,
        _ => return None,
    };
    Some(ForkTest {
        layout: Some(layout),
        verdict,
        why: rest.next().unwrap_or("").to_string(),
        cached: true,
        took: None,
    })
}

/// Keeps the verdict for `layout` in the cache.
fn write_cache(layout: SiteLayout, test: &ForkTest) {
    let verdict = match test.verdict {
        OptimizedFork::ChildSurvives => "survives",
        _ => "dies",
    };
    CACHE.put(layout, &format!("{verdict} {}", test.why));
}

/// Exit codes of the scratch child.
const SURVIVED: i32 = 0;
const NO_GO: i32 = 2;
const NOT_OPTIMIZED: i32 = 3;
const FORK_FAILED: i32 = 4;
const WAIT_FAILED: i32 = 5;
const GRANDCHILD_FAILED: i32 = 6;
/// 16 + the signal that ended the grandchild.
const KILLED_BASE: i32 = 16;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn run_live(layout: SiteLayout) -> (OptimizedFork, String) {
    let site: unsafe extern "C" fn() = match layout {
        SiteLayout::NopNop5 => usdt_trace_fork_selftest_nop5,
        SiteLayout::NopNop10 => usdt_trace_fork_selftest_nop10,
        _ => return (OptimizedFork::Untested, "no site of this layout".into()),
    };
    let long_nop = site as usize as u64 + 1;
    match live(site, long_nop, layout) {
        Ok(code) => interpret(code, layout),
        Err(why) => (
            OptimizedFork::Untested,
            format!("the self-test could not run ({why}), so the child is assumed to die"),
        ),
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn run_live(_layout: SiteLayout) -> (OptimizedFork, String) {
    (
        OptimizedFork::Untested,
        "no self-test on this architecture".into(),
    )
}

fn interpret(code: i32, layout: SiteLayout) -> (OptimizedFork, String) {
    let what = format!("a child forked after the kernel optimized a {layout} site");
    match code {
        SURVIVED => (
            OptimizedFork::ChildSurvives,
            format!("{what} hit it and survived"),
        ),
        c if c > KILLED_BASE => {
            let sig = c - KILLED_BASE;
            (
                OptimizedFork::ChildDies,
                format!(
                    "{what} was killed by signal {sig} ({}) at its first hit",
                    signal_name(sig)
                ),
            )
        }
        NOT_OPTIMIZED => (
            OptimizedFork::Untested,
            format!("the kernel did not optimize the self-test's {layout} site"),
        ),
        c => (
            OptimizedFork::Untested,
            format!("the self-test ended unclear (scratch child exit {c})"),
        ),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGALRM => "SIGALRM: it hung",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// Forks the scratch child, attaches, lets it run; its exit code.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn live(site: unsafe extern "C" fn(), long_nop: u64, layout: SiteLayout) -> Result<i32, String> {
    let (path, offset) = file_offset(long_nop)?;
    let c_path = CString::new(path).map_err(|_| "a path with a NUL byte".to_string())?;
    let (go_read, go_write) = process::pipe().map_err(|e| format!("pipe: {}", e.io_error))?;
    // SAFETY: the child calls only async-signal-safe functions and the
    // site (see `scratch_child`), so forking a threaded process is fine.
    let pid = match unsafe { process::fork() } {
        Err(e) => return Err(format!("fork: {}", e.io_error)),
        Ok(Forked::Parent(pid)) => pid,
        Ok(Forked::Child) => {
            // SAFETY: in the freshly forked child.
            unsafe {
                scratch_child(
                    go_read.as_raw_fd(),
                    go_write.as_raw_fd(),
                    site,
                    long_nop,
                    layout,
                )
            }
        }
    };
    drop(go_read);
    let features = super::kernel_features();
    let uprobe = Uprobe {
        path: &c_path,
        offset,
        ref_ctr_offset: None,
    };
    let event = open_uprobe(&features, &uprobe, pid, -1, -1, |_| {});
    let code = match &event {
        Ok(_) => process::write(&go_write, b"g").unwrap_or(0),
        Err(_) => 0,
    };
    drop(go_write);
    let status = wait_with_timeout(pid, Duration::from_secs(10));
    // The child is gone: close the uprobe event now.
    drop(event.map_err(|e| format!("attaching a uprobe: {e}"))?);
    if code != 1 {
        return Err("the scratch child could not be started".into());
    }
    let status = status.ok_or("the scratch child did not end within 10 s")?;
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(format!(
            "the scratch child itself ended by signal {}",
            libc::WTERMSIG(status)
        ))
    }
}

/// The scratch child: wait for the go byte, hit the site until the kernel
/// has optimized it (its long nop rewritten into the kernel's `call` into
/// `[uprobes-trampoline]`: [`crate::rewrite`]), fork, let the
/// grandchild hit it once, and exit with how the grandchild ended.
///
/// # Safety
/// Only in a freshly forked child.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn scratch_child(
    go: i32,
    go_write: i32,
    site: unsafe extern "C" fn(),
    long_nop: u64,
    layout: SiteLayout,
) -> ! {
    // SAFETY: only async-signal-safe calls, the site (which touches no
    // memory) and a read of our own text.
    unsafe {
        libc::close(go_write); // so that the tracer's death is an EOF here
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::alarm(10);
        let mut byte = 0u8;
        if libc::read(go, (&mut byte as *mut u8).cast(), 1) != 1 {
            libc::_exit(NO_GO);
        }
        for _ in 0..8 {
            site();
        }
        if !crate::rewrite::optimized_here(long_nop, layout) {
            libc::_exit(NOT_OPTIMIZED);
        }
        // The fork system call itself (`sys::process::in_child`), not
        // libc's fork: a tracer that links usdt-runtime's fork guard (a test
        // binary with probes) would otherwise run the guard's handlers here
        // and keep the grandchild alive, and the verdict would be the
        // program's, not the kernel's.
        let pid = crate::sys::process::in_child::raw_fork();
        if pid < 0 {
            libc::_exit(FORK_FAILED);
        }
        if pid == 0 {
            // No core dump for the expected crash.
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
            libc::alarm(5);
            site();
            libc::_exit(SURVIVED);
        }
        let Some(status) = crate::sys::process::in_child::wait(pid) else {
            libc::_exit(WAIT_FAILED);
        };
        if libc::WIFSIGNALED(status) {
            libc::_exit(KILLED_BASE + libc::WTERMSIG(status));
        }
        libc::_exit(match libc::WEXITSTATUS(status) {
            0 => SURVIVED,
            _ => GRANDCHILD_FAILED,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sites above are spelled as `.byte` in `global_asm!` (which takes
    /// only literals): they hold exactly the bytes usdt-runtime defines.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn the_selftest_sites_hold_the_runtime_bytes() {
        for (f, layout) in [
            (
                usdt_trace_fork_selftest_nop5 as unsafe extern "C" fn(),
                SiteLayout::NopNop5,
            ),
            (usdt_trace_fork_selftest_nop10, SiteLayout::NopNop10),
        ] {
            let want = layout.x86_64_bytes().unwrap();
            // SAFETY: the function's code is mapped readable, and it is
            // longer than its site (the site, then `ret`).
            let got = unsafe { std::slice::from_raw_parts(f as *const u8, want.len()) };
            assert_eq!(got, want, "{layout}");
        }
    }

    #[test]
    fn exit_codes_in_words() {
        let (v, why) = interpret(KILLED_BASE + libc::SIGSEGV, SiteLayout::NopNop5);
        assert_eq!(v, OptimizedFork::ChildDies);
        assert!(why.contains("signal 11 (SIGSEGV)"), "{why}");
        assert_eq!(
            interpret(0, SiteLayout::NopNop5).0,
            OptimizedFork::ChildSurvives
        );
        assert_eq!(
            interpret(NOT_OPTIMIZED, SiteLayout::NopNop5).0,
            OptimizedFork::Untested
        );
        assert_eq!(
            interpret(WAIT_FAILED, SiteLayout::NopNop5).0,
            OptimizedFork::Untested
        );
    }
}
