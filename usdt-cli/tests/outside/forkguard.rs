//! A forking program written as a user would, outside the workspace: its own
//! package that depends on the facade (`usdt-probes`, library `usdt`) by path
//! and fires one ad-hoc probe (`usdt::probe!`, no provider), for
//! `tests/forkguard.rs`.
//!
//! `forkguard MODE N`, where each process runs a loop of N iterations that
//! fires `forkguard:tick` and keeps many values live across the site, and
//! checks its result against the same loop without the probe:
//!
//! - `simple`: the parent runs the loop, forks; parent and child each run it
//!   again.
//! - `threads`: 4 threads each run the loop, then all fork at once (a
//!   barrier); each child runs it again.
//! - `nested`: the parent runs the loop and forks; the child runs it and
//!   forks again; the grandchild runs it.
//!
//! Lines: `trampoline=BOOL` (the parent's maps have `[uprobes-trampoline]`
//! after its first loop), one `child exit=C` or `child signal=S` per child
//! the parent waited for (a child exits 0 when its own result, and its
//! child's, were right), and `parent ok=BOOL`. Exits 0 when everything was
//! right.

use std::sync::Barrier;

/// Runs the loop `n` times as `who`, with the probe when `PROBE`.
#[inline(never)]
fn mix<const PROBE: bool>(who: u64, n: u64) -> u64 {
    let seed = std::hint::black_box(0x0123_4567_89ab_cdef ^ who);
    let (mut a, mut b, mut c, mut d) = (seed, seed ^ 0x9e37_79b9, seed.rotate_left(13), !seed);
    let (mut e, mut f, mut g, mut h) = (a ^ 1, b ^ 2, c ^ 3, d ^ 4);
    let mut i = 0;
    while i < n {
        a = a.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(b);
        b ^= a >> 17;
        c = c.rotate_left(7) ^ b;
        d = d.wrapping_add(c ^ i);
        e = e.wrapping_mul(d | 1);
        f ^= e.rotate_right(11);
        g = g.wrapping_add(f);
        h ^= g.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if PROBE {
            usdt::probe!(forkguard, tick, who, i);
        }
        a = a.wrapping_add(h);
        b = b.wrapping_sub(g);
        c ^= f;
        d = d.rotate_left((e & 63) as u32);
        i += 1;
    }
    a ^ b ^ c ^ d ^ e ^ f ^ g ^ h
}

/// Whether `n` traced iterations as `who` compute what untraced ones do.
fn right(who: u64, n: u64) -> bool {
    mix::<true>(who, n) == mix::<false>(who, n)
}

fn trampoline() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .contains("[uprobes-trampoline]")
}

/// Forks; the child runs `child` and leaves with its exit code. Returns the
/// child's pid.
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only computes, forks and waits (no locks another
    // thread may hold), then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for `pid`: `exit=C` or `signal=S`.
fn wait(pid: libc::pid_t) -> String {
    let mut status = 0;
    // SAFETY: our child, a valid out pointer.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR)
        );
    }
    if libc::WIFSIGNALED(status) {
        format!("signal={}", libc::WTERMSIG(status))
    } else {
        format!("exit={}", libc::WEXITSTATUS(status))
    }
}

/// A child's exit code: 0 when its result was right.
fn code(ok: bool) -> i32 {
    if ok {
        0
    } else {
        1
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("simple", String::as_str);
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut ok = true;
    let children: Vec<String> = match mode {
        "simple" => {
            ok &= right(0, n);
            println!("trampoline={}", trampoline());
            let pid = fork(|| code(right(2, n)));
            ok &= right(1, n);
            vec![wait(pid)]
        }
        "threads" => {
            let barrier = Barrier::new(4);
            let results: Vec<(bool, String)> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..4u64)
                    .map(|t| {
                        let barrier = &barrier;
                        s.spawn(move || {
                            let ok = right(10 + t, n);
                            barrier.wait();
                            let pid = fork(|| code(right(20 + t, n)));
                            (ok, wait(pid))
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            println!("trampoline={}", trampoline());
            ok &= results.iter().all(|(ok, _)| *ok);
            results.into_iter().map(|(_, status)| status).collect()
        }
        "nested" => {
            ok &= right(0, n);
            println!("trampoline={}", trampoline());
            let pid = fork(|| {
                let mine = right(2, n);
                let grandchild = fork(|| code(right(3, n)));
                match (mine, wait(grandchild).as_str()) {
                    (true, "exit=0") => 0,
                    (false, _) => 1,
                    (true, _) => 2,
                }
            });
            vec![wait(pid)]
        }
        other => {
            eprintln!("forkguard: unknown mode {other:?} (simple, threads, nested)");
            std::process::exit(2);
        }
    };
    for status in &children {
        println!("child {status}");
    }
    println!("parent ok={ok}");
    let all = ok && children.iter().all(|s| s == "exit=0");
    std::process::exit(code(all));
}
