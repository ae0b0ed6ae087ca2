//! The runtime of `usdt`: what a program with probes links.
//!
//! Applications depend on the facade, `usdt-probes` (library `usdt`), never
//! on this crate directly. It stays small on purpose, because every traced
//! program carries it: the conversions from Rust values to probe-argument
//! registers, the staging buffer for string arguments, and the fork guard
//! ([`forkguard`]).
#![no_std]
#![warn(missing_docs)]
// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

extern crate alloc;

mod arg;
mod features;
pub mod forkguard;
pub mod kind;
pub use features::*;
pub mod signature;
pub mod site;
mod strbuf;

pub use arg::ProbeArg;
pub use site::{page_size, MAX_ARGS};
pub use strbuf::{StrArg, StrBuf, STR_MAX};
