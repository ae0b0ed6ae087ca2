//! Untraced behaviour, no root needed: alone over the `Registry` the layer
//! drops every span and event and formats nothing; stacked with other layers
//! it hides nothing from them.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tracing::{Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use usdt_test_support::run_ok;
use usdt_test_support::tracing_demo::{demo, limited};

/// Callsite interest is global: one subscriber shape at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A field value that counts its `Display` calls.
struct Counted<'a>(&'a AtomicUsize);

impl fmt::Display for Counted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fetch_add(1, Relaxed);
        f.write_str("counted")
    }
}

/// A layer that counts the spans and events it is given.
#[derive(Clone, Default)]
struct Count {
    spans: Arc<AtomicUsize>,
    events: Arc<AtomicUsize>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Count {
    fn on_new_span(&self, _: &tracing::span::Attributes<'_>, _: &tracing::Id, _: Context<'_, S>) {
        self.spans.fetch_add(1, Relaxed);
    }
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        self.events.fetch_add(1, Relaxed);
    }
}

/// One span and one event at each level, with a counted field; returns how
/// often the field was formatted.
fn emit() -> usize {
    let displayed = AtomicUsize::new(0);
    let span = tracing::trace_span!("s", f = %Counted(&displayed));
    let _entered = span.enter();
    tracing::error!(f = %Counted(&displayed), "e");
    tracing::warn!(f = %Counted(&displayed), "w");
    tracing::info!(f = %Counted(&displayed), "i");
    tracing::debug!(f = %Counted(&displayed), "d");
    tracing::trace!(f = %Counted(&displayed), "t");
    displayed.load(Relaxed)
}

#[test]
fn alone_and_idle_it_drops_everything_and_formats_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let subscriber = tracing_subscriber::registry().with(tracing_usdt::layer());
    tracing::subscriber::with_default(subscriber, || {
        assert!(
            !tracing::enabled!(Level::ERROR),
            "an idle lone layer enables events"
        );
        assert!(tracing::info_span!("s").is_disabled());
        assert_eq!(emit(), 0);
    });
}

/// Runs `emit` under `subscriber`; `count`, a layer in it, must have seen
/// every span and event, and the fields must have been formatted `formatted`
/// times (by the other layers: never by ours).
fn check<S>(shape: &str, subscriber: S, count: &Count, formatted: usize)
where
    S: Subscriber + Send + Sync,
{
    let displayed = tracing::subscriber::with_default(subscriber, || {
        assert!(tracing::enabled!(Level::TRACE), "{shape}: TRACE disabled");
        emit()
    });
    assert_eq!(displayed, formatted, "{shape}: fields formatted");
    assert_eq!(count.spans.load(Relaxed), 1, "{shape}: spans seen");
    assert_eq!(count.events.load(Relaxed), 5, "{shape}: events seen");
}

#[test]
fn layers_stacked_on_it_see_everything() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let usdt = tracing_usdt::layer;
    let registry = tracing_subscriber::registry;

    let count = Count::default();
    let s = registry().with(usdt()).with(count.clone());
    check("usdt, then count", s, &count, 0);

    let count = Count::default();
    let s = registry().with(count.clone()).with(usdt());
    check("count, then usdt", s, &count, 0);

    let count = Count::default();
    let s = registry()
        .with(usdt().with_filter(LevelFilter::TRACE))
        .with(count.clone());
    check("usdt with a per-layer filter, then count", s, &count, 0);

    let count = Count::default();
    let s = registry().with(vec![usdt().boxed(), count.clone().boxed()]);
    check("a Vec of usdt and count", s, &count, 0);

    let count = Count::default();
    let s = registry().with(usdt().and_then(count.clone()));
    check("usdt and_then count", s, &count, 0);

    let count = Count::default();
    let s = registry().with(count.clone().and_then(usdt()));
    check("count and_then usdt", s, &count, 0);

    let count = Count::default();
    let s = registry().with(Some(usdt())).with(count.clone());
    check("Some(usdt), then count", s, &count, 0);

    let count = Count::default();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
    let s = registry().with(usdt()).with(fmt).with(count.clone());
    check("usdt, then fmt to a sink, then count", s, &count, 6);
}

#[test]
fn the_example_formats_nothing_untraced() {
    let out = run_ok(limited(demo()).arg("5"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "displayed 0\n");
}
