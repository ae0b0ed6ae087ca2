//! A library with probes of every kind, as a user writes it: provider probes
//! (eager, lazy, strings, bytes, a derived argument type), an ad-hoc probe,
//! and tracing-usdt's layer. `tests/platforms.rs` checks it for every target
//! and runs it where it can.

use std::time::Duration;

#[derive(usdt::ProbeArg)]
pub struct Conn(pub u32);

#[usdt::provider]
mod app {
    fn request(id: u64, path: &str, body: &[u8]) {}
    fn done(id: u64, status: u16, elapsed: Duration) {}
    fn accept(conn: Conn) {}
}

/// What firing every probe once did.
pub struct Fired {
    /// How often an eager probe's argument expression ran: once per firing.
    pub evaluated: u32,
    /// How often the lazy probe's closure ran: only while traced.
    pub lazy: u32,
    /// Whether any probe reported a tracer attached.
    pub enabled: bool,
}

/// Fires every probe once.
pub fn fire(id: u64) -> Fired {
    let (mut evaluated, mut lazy) = (0, 0);
    app::request!(
        {
            evaluated += 1;
            id
        },
        "/index.html",
        b"body"
    );
    app::done!(|| {
        lazy += 1;
        (id, 200, Duration::from_millis(3))
    });
    app::accept!(Conn(7));
    usdt::probe!(app, tick, id, -1i32, 1.5f64, 'x', true);
    Fired {
        evaluated,
        lazy,
        enabled: app::request_enabled() || app::done_enabled() || app::accept_enabled(),
    }
}

/// tracing-usdt's layer, for a program that installs it.
pub fn layer() -> tracing_usdt::UsdtLayer {
    tracing_usdt::layer()
}
