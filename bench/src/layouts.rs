//! The site layouts side by side in one binary: what a `nop; nop5` site and
//! a `nop; nop5; nop10` site cost untraced, in the bench's loop and in a
//! request loop with four probes per request and real work between them.
//!
//! A build's probes all have one layout (a cargo feature of the facade), so
//! the loops here place each site with `asm!` exactly as the macros do:
//! the same bytes (usdt-runtime's [`NOP`], [`NOP5`], [`NOP10`]), two
//! arguments in registers, no `nostack`. Only the note is left out, which
//! is never executed. The request loop also runs with this build's own
//! provider probes, and with no probe at all.
//!
//! Each loop is timed in many short runs of about 2 ms (the rows take
//! turns, a run of each per round; a row keeps its least time per
//! iteration: a short run is often one the machine's other work did not
//! interrupt), and its instructions per iteration are counted under
//! callgrind, as the idle section counts.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

#[cfg(target_arch = "x86_64")]
use usdt_trace::{NOP, NOP10, NOP5};

/// A loop: its name for `--callgrind-child`, what it is, and the loop.
type Named = (&'static str, &'static str, fn(u64));

/// The loops.
pub const LOOPS: [Named; 8] = [
    ("layout-bare", "idle loop, no site", crate::loops::bare),
    ("layout-nop5", "idle loop, nop;nop5", idle_nop5),
    (
        "layout-nop5-nop10",
        "idle loop, nop;nop5;nop10",
        idle_nop5_nop10,
    ),
    (
        "layout-usdt",
        "idle loop, this build's probe",
        crate::loops::hit,
    ),
    ("requests-none", "requests, no probe", requests_none),
    ("requests-nop5", "requests, 4 nop;nop5", requests_nop5),
    (
        "requests-nop5-nop10",
        "requests, 4 nop;nop5;nop10",
        requests_nop5_nop10,
    ),
    (
        "requests-usdt",
        "requests, 4 of this build's probes",
        requests_usdt,
    ),
];

/// The loop for a name, for `--callgrind-child`.
pub fn by_name(name: &str) -> Option<fn(u64)> {
    LOOPS.iter().find(|l| l.0 == name).map(|l| l.2)
}

/// A `nop; nop5` site with two register arguments, as the macros emit it.
#[cfg(target_arch = "x86_64")]
macro_rules! nop5_site {
    ($a:expr, $b:expr) => {
        // SAFETY: a 1-byte and a 5-byte nop; the operands are only named.
        unsafe {
            std::arch::asm!(
                ".byte {n}, {p0}, {p1}, {p2}, {p3}, {p4} /* {a} {b} */",
                n = const NOP[0],
                p0 = const NOP5[0], p1 = const NOP5[1], p2 = const NOP5[2],
                p3 = const NOP5[3], p4 = const NOP5[4],
                a = in(reg) $a,
                b = in(reg) $b,
            )
        }
    };
}

/// A `nop; nop5; nop10` site with two register arguments, as the macros
/// emit it with the `nop5-nop10` feature.
#[cfg(target_arch = "x86_64")]
macro_rules! nop5_nop10_site {
    ($a:expr, $b:expr) => {
        // SAFETY: a 1-byte, a 5-byte and a 10-byte nop; the operands are
        // only named.
        unsafe {
            std::arch::asm!(
                ".byte {n}, {p0}, {p1}, {p2}, {p3}, {p4}",
                ".byte {t0}, {t1}, {t2}, {t3}, {t4}, {t5}, {t6}, {t7}, {t8}, {t9} /* {a} {b} */",
                n = const NOP[0],
                p0 = const NOP5[0], p1 = const NOP5[1], p2 = const NOP5[2],
                p3 = const NOP5[3], p4 = const NOP5[4],
                t0 = const NOP10[0], t1 = const NOP10[1], t2 = const NOP10[2],
                t3 = const NOP10[3], t4 = const NOP10[4], t5 = const NOP10[5],
                t6 = const NOP10[6], t7 = const NOP10[7], t8 = const NOP10[8],
                t9 = const NOP10[9],
                a = in(reg) $a,
                b = in(reg) $b,
            )
        }
    };
}

/// Where no site is: the arguments are only named, as `loops::bare` does.
macro_rules! no_site {
    ($a:expr, $b:expr) => {
        // SAFETY: an empty template: it only names two registers.
        unsafe {
            std::arch::asm!("/* {0} {1} */", in(reg) $a, in(reg) $b, options(nomem, preserves_flags))
        }
    };
}

/// This build's provider probes, in the request loop.
#[usdt::provider]
mod work {
    fn start(id: u64, kind: u64) {}
    fn parsed(id: u64, item: u64) {}
    fn found(id: u64, value: u64) {}
    fn done(id: u64, sum: u64) {}
}

macro_rules! usdt_start {
    ($a:expr, $b:expr) => {
        work::start!($a, $b)
    };
}
macro_rules! usdt_parsed {
    ($a:expr, $b:expr) => {
        work::parsed!($a, $b)
    };
}
macro_rules! usdt_found {
    ($a:expr, $b:expr) => {
        work::found!($a, $b)
    };
}
macro_rules! usdt_done {
    ($a:expr, $b:expr) => {
        work::done!($a, $b)
    };
}

/// The routes a request is looked up in.
fn routes() -> HashMap<u64, u64> {
    (0..1024u64)
        .map(|i| (i, i.wrapping_mul(2_654_435_761)))
        .collect()
}

/// `n` requests with a site of each kind before each step: its line is
/// formatted, parsed back, looked up, and answered with a checksum.
macro_rules! request_loop {
    ($name:ident, $start:ident, $parsed:ident, $found:ident, $done:ident) => {
        #[inline(never)]
        fn $name(n: u64) {
            let routes = routes();
            let mut line = [0u8; 64];
            let mut total = 0u64;
            for id in 0..n {
                let kind = id % 8;
                $start!(id, kind);
                let len = {
                    let mut w = &mut line[..];
                    let _ = write!(w, "GET /items/{} HTTP/1.1", id % 1500);
                    64 - w.len()
                };
                let text = std::str::from_utf8(&line[..len]).unwrap_or("");
                let item: u64 = text
                    .split(' ')
                    .nth(1)
                    .and_then(|p| p.strip_prefix("/items/"))
                    .and_then(|i| i.parse().ok())
                    .unwrap_or(0);
                $parsed!(id, item);
                let value = routes.get(&item).copied().unwrap_or(404);
                $found!(id, value);
                let mut answer = [0u8; 32];
                let alen = {
                    let mut w = &mut answer[..];
                    let _ = write!(w, "200 {value}");
                    32 - w.len()
                };
                let sum = answer[..alen]
                    .iter()
                    .fold(0u64, |s, b| s.wrapping_mul(31).wrapping_add(u64::from(*b)));
                total = total.wrapping_add(sum);
                $done!(id, sum);
            }
            std::hint::black_box(total);
        }
    };
}

request_loop!(requests_none, no_site, no_site, no_site, no_site);
request_loop!(
    requests_usdt,
    usdt_start,
    usdt_parsed,
    usdt_found,
    usdt_done
);
#[cfg(target_arch = "x86_64")]
request_loop!(requests_nop5, nop5_site, nop5_site, nop5_site, nop5_site);
#[cfg(target_arch = "x86_64")]
request_loop!(
    requests_nop5_nop10,
    nop5_nop10_site,
    nop5_nop10_site,
    nop5_nop10_site,
    nop5_nop10_site
);
#[cfg(not(target_arch = "x86_64"))]
request_loop!(requests_nop5, no_site, no_site, no_site, no_site);
#[cfg(not(target_arch = "x86_64"))]
request_loop!(requests_nop5_nop10, no_site, no_site, no_site, no_site);

/// The bench's loop with a `nop; nop5` site.
#[inline(never)]
fn idle_nop5(n: u64) {
    for i in 0..n {
        #[cfg(target_arch = "x86_64")]
        nop5_site!(i, n);
        #[cfg(not(target_arch = "x86_64"))]
        no_site!(i, n);
    }
}

/// The bench's loop with a `nop; nop5; nop10` site.
#[inline(never)]
fn idle_nop5_nop10(n: u64) {
    for i in 0..n {
        #[cfg(target_arch = "x86_64")]
        nop5_nop10_site!(i, n);
        #[cfg(not(target_arch = "x86_64"))]
        no_site!(i, n);
    }
}

/// One loop's results.
#[derive(Clone, Debug)]
pub struct LayoutRow {
    pub name: &'static str,
    pub what: &'static str,
    /// Least nanoseconds per iteration over the rounds.
    pub ns: f64,
    /// Instructions per iteration (callgrind), or why not counted.
    pub instructions: Result<f64, String>,
}

/// The section's results: the rows, and the layout of this build's probes.
#[derive(Debug)]
pub struct Layouts {
    pub rows: Vec<LayoutRow>,
    pub build: &'static str,
}

/// Runs the section: `quick` runs 50 rounds, else 500; counts
/// instructions when `valgrind` is there (`exe` is this executable).
pub fn run(quick: bool, exe: &std::path::Path, valgrind: bool) -> Layouts {
    let rounds = if quick { 50 } else { 500 };
    let run_time = Duration::from_millis(2);
    // Iterations per run, from a first run of each loop.
    let sizes: Vec<u64> = LOOPS
        .iter()
        .map(|(_, _, f)| {
            let mut n = 1024u64;
            loop {
                let t = Instant::now();
                f(std::hint::black_box(n));
                if t.elapsed() >= run_time || n >= 1 << 40 {
                    return n;
                }
                n *= 2;
            }
        })
        .collect();
    let mut best = vec![f64::MAX; LOOPS.len()];
    for _ in 0..rounds {
        for ((_, _, f), (n, least)) in LOOPS.iter().zip(sizes.iter().zip(&mut best)) {
            let t = Instant::now();
            f(std::hint::black_box(*n));
            *least = least.min(t.elapsed().as_nanos() as f64 / *n as f64);
        }
    }
    let rows = LOOPS
        .iter()
        .zip(best)
        .map(|((name, what, _), ns)| LayoutRow {
            name,
            what,
            ns,
            instructions: if valgrind {
                crate::callgrind::per_iteration(exe, name)
            } else {
                Err("valgrind is not installed".into())
            },
        })
        .collect();
    Layouts {
        rows,
        build: usdt::SITE_LAYOUT.name(),
    }
}

/// The section as a table: each site loop against the loop without a site
/// of its kind.
pub fn table(l: &Layouts) -> String {
    let mut s = format!(
        "\nSite layouts in one binary: untraced cost per iteration (this build's probes: {})\n",
        l.build
    );
    s += &format!(
        "{:<36}{:>14}{:>12}{:>10}{:>12}\n",
        "loop", "instructions", "+ over base", "ns", "+ over base"
    );
    let base_of = |name: &str| if name.starts_with("requests") { 4 } else { 0 };
    for (i, r) in l.rows.iter().enumerate() {
        let base = &l.rows[base_of(r.name)];
        let (ins, ins_plus) = match (&r.instructions, &base.instructions) {
            (Ok(v), Ok(b)) if i != base_of(r.name) => (format!("{v:.2}"), format!("{:+.2}", v - b)),
            (Ok(v), _) => (format!("{v:.2}"), "-".into()),
            (Err(_), _) => ("-".into(), "-".into()),
        };
        let ns_plus = if i == base_of(r.name) {
            "-".into()
        } else {
            format!("{:+.3}", r.ns - base.ns)
        };
        s += &format!(
            "{:<36}{:>14}{:>12}{:>10.3}{:>12}\n",
            r.what, ins, ins_plus, r.ns, ns_plus
        );
    }
    if let Some(Err(why)) = l.rows.first().map(|r| &r.instructions) {
        s += &format!("instructions not counted: {why}\n");
    }
    s
}
