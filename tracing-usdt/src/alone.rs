//! Whether the layer is the only one over a bare `Registry`, the one case in
//! which it may filter spans and events for the whole subscriber.
//!
//! A layer's `register_callsite` and `enabled` answer for every layer of a
//! `Layered` stack: a layer that said "disabled" while idle would hide events
//! from a `fmt` layer stacked with it. So the layer filters only when it knows
//! it is alone, and learns that from how `tracing-subscriber` builds a stack
//! (`Layer::with_subscriber`, 0.3):
//!
//! 1. `on_layer(&mut inner)`: the inner subscriber's type is `Registry`;
//! 2. `Layered::new` asks the new layer whether it holds a per-layer filter,
//!    with a `downcast_raw` call (the first one this layer sees);
//! 3. a layer stacked on top later asks the stack the same through
//!    `Layered::downcast_raw`, which reaches this layer (a second call).
//!
//! Any other shape (another layer under this one, a `Filtered` or `Vec`
//! wrapper, a second `downcast_raw`) leaves or puts the layer in a state
//! where it never filters. Tests hold each shape to this.

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Not yet added to a subscriber, or added to something else than a bare
/// `Registry`: never filter.
const NEW: u8 = 0;
/// `on_layer` saw a bare `Registry`.
const ON_REGISTRY: u8 = 1;
/// `Layered::new` has asked: alone over the `Registry` so far.
const ALONE: u8 = 2;
/// Something else asked or was stacked: never filter again.
const NOT_ALONE: u8 = 3;

#[derive(Debug, Default)]
pub(crate) struct Alone(AtomicU8);

impl Alone {
    /// `on_layer`: whether the subscriber under the layer is a bare `Registry`.
    pub(crate) fn on_layer(&self, over_registry: bool) {
        let next = if over_registry {
            ON_REGISTRY
        } else {
            NOT_ALONE
        };
        let _ = self.0.compare_exchange(NEW, next, Relaxed, Relaxed);
    }

    /// A `downcast_raw` call for a type other than the layer's own and the
    /// `Registry`.
    pub(crate) fn on_downcast(&self) {
        let _ = self.0.fetch_update(Relaxed, Relaxed, |s| match s {
            ON_REGISTRY => Some(ALONE),
            ALONE => Some(NOT_ALONE),
            _ => None,
        });
    }

    /// Whether the layer may filter for the whole subscriber.
    #[inline(always)]
    pub(crate) fn get(&self) -> bool {
        self.0.load(Relaxed) == ALONE
    }
}
