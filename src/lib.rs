//! USDT probes for Rust whose sites are `nop; nop5`.
//!
//! See the README for the API; this file is being written.
#![deny(unsafe_op_in_unsafe_fn)]

pub use usdt_macros::{probe, provider};

#[doc(hidden)]
pub mod __private {
    pub use usdt_runtime::{ProbeArg, StrArg, StrBuf};
}
