//! A program instrumented only with `tracing` macros, its only layer
//! `tracing_usdt::layer()`: `tracing_demo [N]` handles N requests (default 3),
//! each a `request` span holding a `query` span, with events in both, and
//! prints how often a field's `Display` ran (0 while nothing traces).
//!
//! Trace it (as root) with, for example:
//!
//! ```sh
//! bpftrace -e 'usdt:./target/debug/examples/tracing_demo:tracing:event
//!     { printf("%d %s | %s\n", arg0, str(arg3), str(arg4)); }' -c './target/debug/examples/tracing_demo 3'
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tracing_subscriber::prelude::*;

/// How many times a `Counted` was formatted.
static DISPLAYED: AtomicU64 = AtomicU64::new(0);

/// A field value that counts its `Display` calls.
struct Counted(u64);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        DISPLAYED.fetch_add(1, Relaxed);
        write!(f, "n{}", self.0)
    }
}

fn request(i: u64) {
    let span = tracing::info_span!("request", id = i, status = tracing::field::Empty);
    let _entered = span.enter();
    {
        let _query = tracing::debug_span!("query", table = "users").entered();
        tracing::debug!(rows = 3, "query done");
    }
    span.record("status", 200);
    tracing::info!(
        bytes = 42,
        ok = true,
        path = "/a b",
        note = %Counted(i),
        "request {i} done"
    );
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    tracing_subscriber::registry()
        .with(tracing_usdt::layer())
        .init();
    for i in 0..n {
        request(i);
    }
    tracing::warn!(quote = "say \"hi\"", eq = "a=b", "finished");
    println!("displayed {}", DISPLAYED.load(Relaxed));
}
