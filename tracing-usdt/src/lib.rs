//! A [`tracing_subscriber::Layer`] that turns every `tracing` span and event
//! into a USDT probe of the provider `tracing`, free while nobody traces.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//!
//! tracing_subscriber::registry().with(tracing_usdt::layer()).init();
//! let span = tracing::info_span!("request", id = 7);
//! let _entered = span.enter();
//! tracing::info!(bytes = 42, path = "/a b", "done");
//! ```
//!
//! bpftrace, gdb, perf and `usdt` (this workspace's command) see these probes
//! in the program's `.note.stapsdt` section (`usdt list` prints their
//! signatures):
//!
//! | probe | arguments |
//! |---|---|
//! | `tracing:event` | `level: u8, span: u64, target: &str, message: &str, fields: &str` |
//! | `tracing:span_new` | `id: u64, parent: u64, name: &str, fields: &str` |
//! | `tracing:span_record` | `id: u64, name: &str, fields: &str` |
//! | `tracing:span_enter` | `id: u64, name: &str` |
//! | `tracing:span_exit` | `id: u64, name: &str` |
//! | `tracing:span_close` | `id: u64` |
//!
//! - `level`: 1 ERROR, 2 WARN, 3 INFO, 4 DEBUG, 5 TRACE.
//! - `span`: the id of the event's span (its explicit parent, or the current
//!   span), 0 for none; `parent`: 0 for a root span. Ids are `tracing`'s span
//!   ids (`Id::into_u64`); the `Registry` reuses the id of a closed span.
//! - `message`: the event's `message` field (the format string's text).
//! - `fields`: the other fields in the order they were written, as logfmt:
//!   `bytes=42 ok=true path="/a b"`. A value that is empty or holds a space,
//!   a control character, `"` or `=` is quoted, with `"` and `\` escaped (and
//!   newline, tab and carriage return as `\n`, `\t`, `\r`).
//! - `span_record`: the fields a `Span::record` call added, as logfmt; they
//!   are not repeated in any later probe.
//!
//! Strings are cut to [`usdt::STR_MAX`] (255) bytes at a character boundary,
//! as every `&str` probe argument is.
//!
//! # Cost while nobody traces
//!
//! Each callback first reads its probe's semaphore; while it is 0 nothing is
//! formatted, nothing is allocated, and no field's `Debug` or `Display` runs.
//! Formatting goes into buffers on the stack.
//!
//! When this layer is the only one over a bare `Registry` (as above), it also
//! tells `tracing` to ask it about every span and event (`Interest::sometimes`)
//! and answers from the semaphores, so an untraced `info!` is dropped before
//! `tracing` builds the event: about the cost of the semaphore checks
//! (callgrind counts are in the package README). Spans are kept while a
//! tracer is attached to any of the provider's probes, so a span created while
//! nothing traced stays unseen (its events carry `span` 0).
//!
//! With any other layer in the same subscriber (`fmt`, `EnvFilter`, ...) this
//! layer never filters: the others see exactly what they would see without it,
//! and this layer's callbacks return after the semaphore check.
#![warn(missing_docs)]
// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod alone;
mod logfmt;

use core::any::TypeId;
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layered};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Registry;

use alone::Alone;
use logfmt::{Buf, Logfmt};

#[usdt::provider(name = "tracing")]
mod probes {
    /// An event: its level (1 ERROR .. 5 TRACE), span (0 for none), target,
    /// message, and other fields as logfmt.
    pub fn event(level: u8, span: u64, target: &str, message: &str, fields: &str) {}
    /// A new span: its id, its parent's id (0 for a root span), name, and
    /// fields as logfmt.
    pub fn span_new(id: u64, parent: u64, name: &str, fields: &str) {}
    /// Fields recorded into a span after its creation (`Span::record`).
    pub fn span_record(id: u64, name: &str, fields: &str) {}
    /// A span was entered.
    pub fn span_enter(id: u64, name: &str) {}
    /// A span was exited.
    pub fn span_exit(id: u64, name: &str) {}
    /// A span was closed: its last handle was dropped.
    pub fn span_close(id: u64) {}
}

/// The layer: see the [crate documentation](crate).
pub fn layer() -> UsdtLayer {
    UsdtLayer::default()
}

/// A [`tracing_subscriber::Layer`] firing the `tracing` provider's probes;
/// made by [`layer()`].
#[derive(Debug, Default)]
pub struct UsdtLayer {
    alone: Alone,
}

/// Probe argument `level`: 1 ERROR, 2 WARN, 3 INFO, 4 DEBUG, 5 TRACE.
fn level_number(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

/// Whether a tracer is attached to any probe that reports spans; the event
/// probe counts, as it reports the current span.
fn any_span_probe_enabled() -> bool {
    probes::span_new_enabled()
        | probes::span_enter_enabled()
        | probes::span_exit_enabled()
        | probes::span_close_enabled()
        | probes::span_record_enabled()
        | probes::event_enabled()
}

impl UsdtLayer {
    /// The name of span `id`, or `""` when the registry has forgotten it.
    fn name<S>(id: &Id, ctx: &Context<'_, S>) -> &'static str
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        ctx.metadata(id).map_or("", |m| m.name())
    }
}

impl<S> tracing_subscriber::Layer<S> for UsdtLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_layer(&mut self, _subscriber: &mut S) {
        self.alone
            .on_layer(TypeId::of::<S>() == TypeId::of::<Registry>());
    }

    fn on_register_dispatch(&self, dispatch: &Dispatch) {
        let directly_over_registry = dispatch
            .downcast_ref::<Layered<UsdtLayer, Registry>>()
            .and_then(|l| l.downcast_ref::<UsdtLayer>())
            .is_some_and(|l| core::ptr::eq(l, self));
        self.alone.on_register_dispatch(directly_over_registry);
    }

    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        if self.alone.get() {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        if !self.alone.get() {
            return true;
        }
        if metadata.is_event() {
            probes::event_enabled()
        } else {
            any_span_probe_enabled()
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !probes::span_new_enabled() {
            return;
        }
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map_or(0, |p| p.id().into_u64());
        let mut fields = Buf::new();
        attrs.record(&mut Logfmt::new(&mut fields, None));
        let name = attrs.metadata().name();
        probes::span_new!(id.into_u64(), parent, name, fields.as_str());
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !probes::span_record_enabled() {
            return;
        }
        let mut fields = Buf::new();
        values.record(&mut Logfmt::new(&mut fields, None));
        probes::span_record!(id.into_u64(), Self::name(id, &ctx), fields.as_str());
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if !probes::event_enabled() {
            return;
        }
        let span = if event.is_contextual() {
            ctx.current_span().id().map_or(0, Id::into_u64)
        } else {
            event.parent().map_or(0, Id::into_u64)
        };
        let (mut message, mut fields) = (Buf::new(), Buf::new());
        event.record(&mut Logfmt::new(&mut fields, Some(&mut message)));
        let meta = event.metadata();
        probes::event!(
            level_number(meta.level()),
            span,
            meta.target(),
            message.as_str(),
            fields.as_str()
        );
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if probes::span_enter_enabled() {
            probes::span_enter!(id.into_u64(), Self::name(id, &ctx));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if probes::span_exit_enabled() {
            probes::span_exit!(id.into_u64(), Self::name(id, &ctx));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        probes::span_close!(|| id.into_u64());
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // `tracing-subscriber` asks this way whether the layer, or the stack
        // it is in, has per-layer filters, or is an `Option::None`: see
        // `alone`.
        if id != TypeId::of::<Registry>() {
            self.alone.on_downcast();
        }
        None
    }
}
