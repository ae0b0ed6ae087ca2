//! Whether the layer is the only one over a bare `Registry`, the one case in
//! which it may filter spans and events for the whole subscriber.
//!
//! A layer's `register_callsite` and `enabled` answer for every layer of a
//! `Layered` stack: a layer that said "disabled" while idle would hide events
//! from a `fmt` layer stacked with it. So the layer filters only when it knows
//! it is alone, and learns that from how `tracing-subscriber` 0.3 builds and
//! registers a stack:
//!
//! 1. `Layer::with_subscriber` calls `on_layer(&mut inner)`: the inner
//!    subscriber's type must be `Registry`;
//! 2. `Layered::new` then asks the new layer whether it holds a per-layer
//!    filter, by a `downcast_raw` call: the first one the layer sees;
//! 3. a layer stacked on top later (`.with(fmt)`) first asks the stack the
//!    same, through `Layered::downcast_raw`, which reaches this layer: any
//!    further `downcast_raw` (but for the layer's own type or `Registry`)
//!    means the layer may not be alone;
//! 4. `Dispatch::new` calls `on_register_dispatch`, before it asks any
//!    callsite's interest: the dispatch must hold a `Layered<UsdtLayer,
//!    Registry>` whose layer is this one (so `Filtered`, `Vec`, `Option` and
//!    `and_then` shapes, which pass steps 1 to 3 differently, never filter).
//!
//! Any other course leaves the layer in a state where it never filters, which
//! costs time, never events. `tests/idle.rs` holds each shape to this.

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Not yet added to a subscriber.
const NEW: u8 = 0;
/// Step 1: `on_layer` saw a bare `Registry`.
const ON_REGISTRY: u8 = 1;
/// Step 2: `Layered::new` has asked, nothing since.
const BUILT: u8 = 2;
/// Step 4: registered in a dispatch as `Layered<UsdtLayer, Registry>`: filter.
const ALONE: u8 = 3;
/// Anything else: never filter again.
const NOT_ALONE: u8 = 4;

#[derive(Debug, Default)]
pub(crate) struct Alone(AtomicU8);

impl Alone {
    fn step(&self, f: impl Fn(u8) -> u8) {
        let _ = self.0.fetch_update(Relaxed, Relaxed, |s| Some(f(s)));
    }

    /// Step 1: whether the subscriber under the layer is a bare `Registry`.
    pub(crate) fn on_layer(&self, over_registry: bool) {
        self.step(|s| match s {
            NEW if over_registry => ON_REGISTRY,
            _ => NOT_ALONE,
        });
    }

    /// Steps 2 and 3: a `downcast_raw` call for a type other than the layer's
    /// own and `Registry`.
    pub(crate) fn on_downcast(&self) {
        self.step(|s| match s {
            ON_REGISTRY => BUILT,
            NEW => NEW,
            _ => NOT_ALONE,
        });
    }

    /// Step 4: whether the dispatch holds this layer as `Layered<UsdtLayer,
    /// Registry>`.
    pub(crate) fn on_register_dispatch(&self, directly_over_registry: bool) {
        self.step(|s| match s {
            BUILT if directly_over_registry => ALONE,
            _ => NOT_ALONE,
        });
    }

    /// Whether the layer may filter for the whole subscriber.
    #[inline(always)]
    pub(crate) fn get(&self) -> bool {
        self.0.load(Relaxed) == ALONE
    }
}
