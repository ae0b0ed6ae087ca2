//! The loops the bench times and counts: one function per row, all of the
//! same shape, `for i in 0..n { <one probe or call> }`, never inlined so that
//! every row runs the same code whatever the caller does.
//!
//! The probes take the loop counter and the bound, `(i, n)`, which already
//! live in registers, so an eager probe adds only its site.

use std::hint::black_box;

/// Our provider: `bench:hit` (eager), `bench:lazy` (semaphore-gated) and
/// `bench:text` (a `&str` argument).
#[usdt::provider]
mod bench {
    fn hit(a: u64, b: u64) {}
    fn lazy(a: u64, b: u64) {}
    fn text(s: &str) {}
}

/// The loop with no probe. The empty asm names the counter so that the loop
/// is not deleted; it costs no instruction.
#[inline(never)]
pub fn bare(n: u64) {
    for i in 0..n {
        // SAFETY: an empty template: it only names a register.
        unsafe { std::arch::asm!("/* {0} */", in(reg) i, options(nomem, preserves_flags)) };
    }
}

/// The loop calling `getpgid(0)`, upstream's `syscall-count`.
#[inline(never)]
pub fn syscall(n: u64) {
    for _ in 0..n {
        // SAFETY: getpgid has no memory arguments and cannot fail for pid 0.
        unsafe { libc::getpgid(0) };
    }
}

/// The loop with our eager probe: a `nop; nop5` site, `(i, n)` in registers.
#[inline(never)]
pub fn hit(n: u64) {
    for i in 0..n {
        bench::hit!(i, n);
    }
}

/// The loop with our lazy probe: the closure runs only while traced.
#[inline(never)]
pub fn lazy(n: u64) {
    for i in 0..n {
        bench::lazy!(|| (i, n));
    }
}

/// The loop with our `&str` probe: the string is copied only while traced.
#[inline(never)]
pub fn text(n: u64) {
    let s: &str = black_box("/bench/text");
    for _ in 0..n {
        bench::text!(s);
    }
}

/// The loop with crates.io `probe` 0.5 (cuviper): a `nop` site, no semaphore.
#[inline(never)]
pub fn probe_crate(n: u64) {
    for i in 0..n {
        probe::probe!(pbench, hit, i, n);
    }
}

/// The loop with a C `<sys/sdt.h>` probe (`cbench:hit`), bench/c/loop.c.
/// Runs only after [`crate::csdt::get`] succeeded (the row is skipped
/// otherwise).
#[inline(never)]
pub fn c_sdt(n: u64) {
    crate::csdt::get()
        .expect("the C loop is checked before its row runs")
        .run(n);
}

/// `tracing::info!` under a bare `Registry`, the reference for the next two.
#[inline(never)]
pub fn tracing_registry(n: u64) {
    tracing::subscriber::set_global_default(tracing_subscriber::registry())
        .expect("the first subscriber");
    tracing_info(n);
}

/// `tracing::info!` with tracing-usdt's layer alone, nothing attached: the
/// layer drops the event after its semaphore check.
#[inline(never)]
pub fn tracing_usdt_idle(n: u64) {
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(tracing_usdt::layer())
        .init();
    tracing_info(n);
}

/// A subscriber that wants to be asked about every callsite
/// (`Interest::sometimes`) and enables nothing: what an untraced event costs
/// in `tracing` itself, before any subscriber does any work.
struct NeverEnabled;

impl tracing::Subscriber for NeverEnabled {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// `tracing::info!` under [`NeverEnabled`]: `tracing`'s own dispatch, the
/// least an event costs with `Interest::sometimes`.
#[inline(never)]
pub fn tracing_floor(n: u64) {
    tracing::subscriber::set_global_default(NeverEnabled).expect("the first subscriber");
    tracing_info(n);
}

/// `tracing::info!` with the fmt layer, writing to a sink.
#[inline(never)]
pub fn tracing_fmt(n: u64) {
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
        .init();
    tracing_info(n);
}

/// The loop of the `tracing` rows: one event with one field.
#[inline(never)]
fn tracing_info(n: u64) {
    for i in 0..n {
        tracing::info!(i, "tick");
    }
}

/// The probes of this binary the attached rows use, as (provider, name).
pub const HIT: (&str, &str) = ("bench", "hit");
/// Our semaphore-gated probe.
pub const LAZY: (&str, &str) = ("bench", "lazy");
/// The `<sys/sdt.h>` probe.
pub const C_SDT: (&str, &str) = crate::csdt::PROBE;
/// The `probe` crate's probe.
pub const PROBE_CRATE: (&str, &str) = ("pbench", "hit");
/// oxidecomputer's probe, in the peers helper (bench/peers/bench.d).
pub const OXIDE: (&str, &str) = ("oxbench", "hit");

/// The loop for a name, for `--callgrind-child`.
pub fn by_name(name: &str) -> Option<fn(u64)> {
    Some(match name {
        "bare" => bare,
        "syscall" => syscall,
        "usdt" => hit,
        "usdt-lazy" => lazy,
        "usdt-str" => text,
        "c-sdt" => c_sdt,
        "probe-crate" => probe_crate,
        "tracing-registry" => tracing_registry,
        "tracing-usdt-idle" => tracing_usdt_idle,
        "tracing-floor" => tracing_floor,
        "tracing-fmt" => tracing_fmt,
        _ => return None,
    })
}
