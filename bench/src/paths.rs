//! The loop of the answers section's rows per value: requests with a path,
//! `paths:start(id, path)` then `paths:done(id)` (two hits per
//! iteration, eight paths in turn), for `latency` and `latency --by path`
//! beside bpftrace's `@lat[str(arg1)]` script. A loop of its own, timed
//! idle as well: a `&str` argument costs the program a copy while it is
//! traced, and the other rows' loop passes integers only.

#[usdt::provider]
mod paths {
    /// A request for `path` starts.
    fn start(id: u64, path: &str) {}
    /// It is done.
    fn done(id: u64) {}
}

/// The paths, in turn.
pub(crate) const PATHS: [&str; 8] = [
    "/api/users",
    "/api/orders",
    "/api/cart",
    "/static/app.js",
    "/static/logo.png",
    "/login",
    "/search",
    "/health",
];

/// `n` requests: two hits each.
#[inline(never)]
pub(crate) fn requests(n: u64) {
    for id in 0..n {
        let path = PATHS[(id % PATHS.len() as u64) as usize];
        paths::start!(id, path);
        paths::done!(id);
    }
}

/// bpftrace's script for a latency per path of `exe`'s requests, keyed
/// by thread as `usdt latency` keys them by default.
pub(crate) fn bpftrace_script(exe: &str) -> String {
    format!(
        "usdt:{exe}:paths:start {{ @start[tid] = nsecs; @path[tid] = str(arg1); }}\n\
         usdt:{exe}:paths:done /@start[tid]/ {{ @lat[@path[tid]] = hist(nsecs - @start[tid]); \
         delete(@start[tid]); delete(@path[tid]); }}"
    )
}
