//! A traced process that forks, for `tests/fork.rs`.
//!
//! `fork N` prints `ready` and waits for a line on stdin (time for a tracer
//! to attach). Then the parent runs a loop of N iterations that fires the
//! lazy probe `fork:tick` (so a uprobe at Location + 1 is optimized before
//! the fork), forks, and parent and child each run the loop N more times.
//! The loop keeps many values live across the site (as in
//! `examples/redzone.rs`), and each run is checked against the same loop
//! without the probe. Lines:
//!
//! - `before runs=R result=X reference=Y trampoline=BOOL`: the parent, before
//!   forking (`trampoline`: its maps have `[uprobes-trampoline]`).
//! - `child-start trampoline=BOOL enabled=BOOL`: the child, right after the
//!   fork (`enabled`: the probe's semaphore, which the child's memory
//!   copied).
//! - `child runs=R result=X reference=Y trampoline=BOOL enabled=BOOL`: the
//!   child, after its loop (if it survived it).
//! - `parent fork-failed errno=E`: `fork()` failed; the program exits 3.
//! - `parent runs=R result=X reference=Y trampoline=BOOL enabled=BOOL
//!   child=STATUS`: the parent, after its loop and the child's exit
//!   (`exit=0`, or `signal=N`).
//!
//! Then the parent waits for another line (the tracer detaches), runs the
//! loop N more times and prints `after runs=R enabled=BOOL`.

use std::io::{BufRead, Write};

#[usdt::provider]
mod fork {
    /// One iteration: `who` is 0 in the parent before the fork, 1 in the
    /// parent after it, 2 in the child; `check` is `who * 2^32 + i`.
    fn tick(who: u64, i: u64, check: u64) {}
}

/// Runs the loop `n` times; returns the result and the closure's runs.
#[inline(never)]
fn mix<const PROBE: bool>(who: u64, n: u64) -> (u64, u64) {
    let seed = std::hint::black_box(0x0123_4567_89ab_cdef ^ who);
    let (mut a, mut b, mut c, mut d) = (seed, seed ^ 0x9e37_79b9, seed.rotate_left(13), !seed);
    let (mut e, mut f, mut g, mut h) = (a ^ 1, b ^ 2, c ^ 3, d ^ 4);
    let mut lanes = [seed; 8];
    let mut runs = 0;
    let mut i = 0;
    while i < n {
        lanes[(a & 7) as usize] ^= b;
        a = a.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(b);
        b ^= a >> 17;
        c = c.rotate_left(7) ^ b;
        d = d.wrapping_add(c ^ i);
        e = e.wrapping_mul(d | 1);
        f ^= e.rotate_right(11);
        g = g.wrapping_add(f);
        h ^= g.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if PROBE {
            fork::tick!(|| {
                runs += 1;
                (who, i, who << 32 | i)
            });
        }
        a = a.wrapping_add(h);
        b = b.wrapping_sub(g);
        c ^= f;
        d = d.rotate_left((e & 63) as u32);
        h = h.wrapping_add(lanes[(g & 7) as usize]);
        i += 1;
    }
    let result = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ lanes.iter().fold(0, |x, l| x ^ l);
    (result, runs)
}

/// `runs=R result=X reference=Y` for `n` traced iterations as `who`.
fn checked(who: u64, n: u64) -> String {
    let (result, runs) = mix::<true>(who, n);
    let (reference, _) = mix::<false>(who, n);
    format!("runs={runs} result={result} reference={reference}")
}

fn trampoline() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .contains("[uprobes-trampoline]")
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn wait_line() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    say("ready");
    wait_line();
    let before = checked(0, n);
    say(&format!("before {before} trampoline={}", trampoline()));
    // SAFETY: this program is single-threaded, so the child may do anything
    // the parent could; it leaves with _exit after flushing what it wrote.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        say(&format!(
            "parent fork-failed errno={}",
            std::io::Error::last_os_error()
        ));
        std::process::exit(3);
    }
    if pid == 0 {
        say(&format!(
            "child-start trampoline={} enabled={}",
            trampoline(),
            fork::tick_enabled()
        ));
        let line = checked(2, n);
        say(&format!(
            "child {line} trampoline={} enabled={}",
            trampoline(),
            fork::tick_enabled()
        ));
        // SAFETY: _exit ends the child without running the parent's
        // atexit handlers or destructors twice.
        unsafe { libc::_exit(0) };
    }
    let line = checked(1, n);
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    let child = if libc::WIFEXITED(status) {
        format!("exit={}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal={}", libc::WTERMSIG(status))
    } else {
        format!("status={status}")
    };
    say(&format!(
        "parent {line} trampoline={} enabled={} child={child}",
        trampoline(),
        fork::tick_enabled()
    ));
    wait_line();
    let (_, runs) = mix::<true>(1, n);
    say(&format!(
        "after runs={runs} enabled={}",
        fork::tick_enabled()
    ));
}
