//! USDT probes for Rust whose sites are `nop; nop5`.
//!
//! The package is `usdt-probes`; its library is named `usdt`:
//!
//! ```toml
//! [dependencies]
//! usdt-probes = "0.1"
//! ```
//!
//! Declare a provider, a module of probe declarations, and fire its probes with
//! the macros it generates. Tracers (bpftrace, gdb, perf, libbpf, and this
//! workspace's `usdt` command) find them in the binary's `.note.stapsdt`
//! section, exactly as they find probes written with C's `sys/sdt.h`.
//!
//! ```
//! #[usdt::provider]                  // provider name = module name
//! mod http {
//!     /// A request arrived.
//!     fn request_start(id: u64, path: &str) {}
//!     fn request_done(id: u64, status: u16, nanos: u64) {}
//! }
//!
//! # fn t() -> u64 { 3 }
//! let (id, path, status) = (1u64, "/index.html", 200u16);
//! let mut closure_ran = false;
//! http::request_start!(id, path);            // eager: arguments evaluated once, like a call
//! http::request_done!(|| {                   // lazy: runs only while a tracer is attached
//!     closure_ran = true;
//!     (id, status, t())
//! });
//! usdt::probe!(http, tick, id, -1i32);      // ad-hoc: no declaration, no semaphore
//!
//! // Nothing traces a doctest:
//! assert!(!http::request_done_enabled());
//! assert!(!closure_ran);
//! ```
//!
//! # The probe site
//!
//! Each call site of a probe emits `90 0f 1f 44 00 00` (`nop; nop5`, written
//! byte by byte) and one `NT_STAPSDT` note whose Location points at the `90`.
//! Every tracer may attach there: every kernel emulates a uprobe on a one-byte
//! `nop`. On Linux 6.18 to 7.2 a uprobe at Location + 1, on the `nop5`, is
//! rewritten after its first hit into a `call` to the kernel's uprobe
//! trampoline, which enters the kernel by `syscall` instead of a trap. The
//! cargo feature `nop10` emits `nop; nop10` instead, the layout the kernel
//! series queued for 7.3 optimizes. [`KernelFeatures::detect`] tells a tracer
//! which of the two this kernel optimizes, and [`SITE_LAYOUT`] which one this
//! build emits. Other architectures (aarch64) get their `nop` and the same note;
//! targets without ELF notes get no site and probes cost nothing but their
//! arguments.
//!
//! The site never lets the compiler keep data in the red zone below the stack
//! pointer: the optimized path's `call` writes there.
//!
//! # Arguments
//!
//! A probe takes up to 12 arguments, each passed in a register that the note
//! names at the value's width and sign (`1@%dil`, `-4@%edx`, `8@%rax`):
//!
//! | Rust type | in the note |
//! |---|---|
//! | `u8`, `u16`, `u32`, `u64`, `usize` | `1@`, `2@`, `4@`, `8@`, `8@` |
//! | `i8`, `i16`, `i32`, `i64`, `isize` | `-1@`, `-2@`, `-4@`, `-8@`, `-8@` |
//! | `core::ffi::c_int` and the other C integer aliases | as their integer type |
//! | `bool` | `1@`, 0 or 1 |
//! | `char` | `4@`, its code point |
//! | `f32`, `f64` | `4@`, `8@`: the IEEE-754 bits as an unsigned integer (`f32::to_bits`) |
//! | `*const T`, `*mut T`, `&T`, `&mut T` | `8@`, the address |
//! | `&CStr`, `CString` | `8@`, the address of the NUL-terminated bytes |
//! | `&str`, `String` (provider probes only) | `8@`, the address of a NUL-terminated copy |
//! | `&[u8]`, `Vec<u8>` (provider probes only) | two operands: `8@` the address, `8@` the length |
//! | `Duration` | `8@`, nanoseconds, saturating at `u64::MAX` |
//! | a type implementing [`trait@ProbeArg`] (`#[derive(usdt::ProbeArg)]`) | as its field |
//!
//! A string argument is copied onto the stack, with a terminating NUL, only
//! while a tracer is attached to the probe (its semaphore is non-zero); an
//! idle probe copies nothing. The copy holds at most [`STR_MAX`] (255) bytes:
//! a longer string is cut at the last whole UTF-8 character within that bound,
//! and a NUL inside the string ends it for every reader. A tracer that does not
//! raise the semaphore sees a null pointer.
//!
//! Ad-hoc probes (`usdt::probe!`) take integers, `bool`, `char`, floats, raw
//! pointers, `&CStr` and `CString`; strings need a provider probe, and a
//! reference is passed as a raw pointer (`core::ptr::from_ref(&x)`), so that
//! `&String` never passes the address of a `String`'s header by mistake.
//!
//! # Signature records and dashed names
//!
//! Every provider probe site also writes a record of the probe's argument
//! names, types as written and [`kind`]s to `.usdt.signatures`: a section
//! that is not loaded, which other tools ignore, emitted from the site's
//! `asm!` block and linked to its code like the note (`SHF_LINK_ORDER`), so
//! that `--gc-sections` keeps and drops both together. The `usdt` command
//! (`usdt-trace`) reads it: `usdt list` shows
//! `http:request_start(id: u64, path: &str)` and `usdt trace` prints
//! `http:request_start id=1 path="/index.html"`. Ad-hoc probes have none.
//!
//! A probe function named with `__` has `-` there in its note name, as DTrace
//! names probes: `fn order__placed` is the probe `order-placed`, fired as
//! `order__placed!(..)`.
//!
//! # Semaphores
//!
//! Each provider probe has one 2-byte counter in the writable `.probes`
//! section, shared by all its sites. The kernel increments it while a uprobe
//! created with `ref_ctr_offset` is attached (bpftrace, libbpf and `usdt count`
//! do so; gdb increments it itself). `NAME_enabled()` reads it. The `.probes`
//! section starts on a page of its own, because the kernel finds a semaphore
//! by file offset in every writable mapping of the file, and a linker may map
//! the page where the RELRO segment ends and the data segment begins twice.
//!
//! # Where the macros can be used
//!
//! The macros a provider generates (`http::request_start!`) are usable anywhere
//! in the defining crate, through the provider module's path. They are not
//! exported to other crates: declare the provider in the crate that fires it.
//!
//! # A renamed dependency
//!
//! The code a provider and the derive generate names this crate `::usdt`. A
//! program that gives the dependency another name
//! (`my_usdt = { package = "usdt-probes", version = "0.1" }`) says which, with
//! `crate = "..."` as serde's attributes take it; `probe!` needs nothing:
//!
//! ```
//! # extern crate usdt as my_usdt;
//! #[my_usdt::provider(crate = "my_usdt")]
//! mod http {
//!     fn accept(conn: ConnId, peer: &str) {}
//! }
//!
//! #[derive(my_usdt::ProbeArg)]
//! #[usdt(crate = "my_usdt")] // the derive's option, whatever the dependency's name
//! struct ConnId(u64);
//!
//! fn main() {
//!     http::accept!(ConnId(7), "10.0.0.1:443");
//!     my_usdt::probe!(http, tick, 1u64);
//! }
//! ```
#![warn(missing_docs)]
// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

/// Declares a provider: a module whose functions declare probes.
///
/// ```
/// #[usdt::provider(name = "store")] // the provider's name in the notes; default: the module's
/// pub(crate) mod storage {
///     /// Documentation is kept on the generated macro.
///     pub fn read(key: &str, bytes: usize) {}
///     fn flush() {}
/// }
///
/// storage::read!("user:7", 4096);
/// storage::flush!();
/// assert!(!storage::read_enabled());
/// ```
///
/// For each `fn name(args) {}` the module gets:
/// - the macro `name!`: `name!(a, b)` fires the probe with arguments
///   evaluated once, traced or not; `name!(|| (a, b))` (or `move ||`) runs the
///   closure and fires the probe only while a tracer is attached; a probe with
///   one argument takes a closure returning a bare value;
/// - the function `name_enabled() -> bool`: whether a tracer is attached now;
/// - a semaphore, defined once per provider:name.
///
/// Probe declarations take no body, no generics, no `self`, no return type and
/// at most 12 arguments of the types in the [crate documentation](crate).
pub use usdt_macros::provider;

/// Fires an ad-hoc probe: `usdt::probe!(provider, name, args...)`.
///
/// No declaration and no semaphore: the site is the two nops and the note.
/// Arguments are integers, `bool`, `char`, floats, raw pointers, `&CStr` and
/// `CString`, evaluated once.
///
/// ```
/// let bytes = [1u8, 2, 3];
/// usdt::probe!(cache, miss, 42u64, -1i32, bytes.as_ptr(), bytes.len());
/// ```
///
/// The expansion names this crate by `$crate`, so it works however the
/// program names the dependency.
#[macro_export]
macro_rules! probe {
    ($($input:tt)*) => {
        $crate::__private::adhoc_probe!($crate; $($input)*)
    };
}

pub use usdt_runtime::{KernelFeatures, SiteLayout, UprobeSyscall, STR_MAX};

pub use usdt_runtime::{kind, ProbeArg};

/// `#[derive(usdt::ProbeArg)]`: a struct with one field passes to probes as
/// that field, with the field's size and [`kind`].
///
/// ```
/// #[derive(usdt::ProbeArg)]
/// struct ConnId(u64);
///
/// #[usdt::provider]
/// mod net {
///     fn accept(conn: ConnId, peer: &str) {}
/// }
///
/// fn main() {
///     net::accept!(ConnId(7), "10.0.0.1:443");
/// }
/// ```
///
/// A provider's declarations name types as the module around the provider
/// does (the provider module has `use super::*;`): a type declared inside a
/// function body is not visible to a provider declared there.
///
/// A tracer shows the field's value (`conn=7`), and `usdt list` the
/// declared type (`net:accept(conn: ConnId, peer: &str)`). A field whose type
/// is no probe argument is a compile error naming [`trait@ProbeArg`].
pub use usdt_macros::ProbeArg;

/// The site layout this build emits, chosen by the same `#[cfg]`s as the
/// sites themselves:
///
/// | target | `SITE_LAYOUT` | bytes at Location |
/// |---|---|---|
/// | x86-64 (Linux and other ELF systems) | [`SiteLayout::NopNop5`]; [`SiteLayout::NopNop10`] with the `nop10` feature; [`SiteLayout::NopNop5Nop10`] with `nop5-nop10` | `90 0f 1f 44 00 00`; `90 66 2e 0f 1f 84 00 00 00 00 00`; both long nops after the `90` |
/// | aarch64 (ELF) | [`SiteLayout::Nop`] | `1f 20 03 d5` |
/// | riscv64 (ELF) | [`SiteLayout::Nop`] | `13 00 00 00` |
/// | anything else: Windows, macOS, wasm, 32-bit targets | [`SiteLayout::NoSite`] | no site and no note |
///
/// Where there is no site, a probe evaluates its eager arguments and
/// nothing else, a lazy probe's closure never runs, and every
/// `NAME_enabled()` is `false`.
///
/// ```
/// let layout = usdt::SITE_LAYOUT;
/// if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
///     assert_eq!(layout.name(), "nop;nop5"); // without the `nop10` features
/// }
/// ```
pub const SITE_LAYOUT: SiteLayout = usdt_macros::site_layout!(::usdt_runtime::SiteLayout);

#[doc(hidden)]
pub mod __private {
    extern crate alloc;
    pub use alloc::ffi::CString;
    pub use alloc::string::String;
    pub use alloc::vec::Vec;
    pub use usdt_macros::adhoc_probe;
    pub use usdt_runtime::{kind, ProbeArg, StrArg, StrBuf};
}
