//! USDT probes for Rust whose sites are `nop; nop5`.
#![deny(unsafe_op_in_unsafe_fn)]

pub use usdt_macros::{probe, provider};

#[doc(hidden)]
pub mod __private {
    extern crate alloc;
    pub use alloc::ffi::CString;
    pub use alloc::string::String;
    pub use usdt_runtime::{ProbeArg, StrArg, StrBuf};
}
