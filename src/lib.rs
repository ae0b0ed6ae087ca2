//! USDT probes for Rust: static tracepoints that bpftrace, gdb, perf, libbpf
//! and this project's `usdt` command attach to, as they attach to probes
//! written with C's `sys/sdt.h`. Untraced, a probe costs its three nops;
//! traced on Linux 6.18 or later, a uprobe on the long nop that kernel
//! optimizes (its `nop5`, or from 7.2.6 and 7.3 its `nop10`) takes the
//! kernel's optimized path.
//!
//! The package is `usdt-probes`; its library is named `usdt`:
//!
//! ```toml
//! [dependencies]
//! usdt-probes = "0.1"
//! ```
//!
//! Declare a provider, a module of probe declarations, and fire its probes
//! with the macros it generates:
//!
//! ```
//! #[usdt::provider]                  // the provider's name is the module's
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
//! if http::request_done_enabled() {          // is a tracer attached now?
//!     // preparation that does not fit in a closure
//! }
//! usdt::probe!(http, tick, id, -1i32);      // ad-hoc: no declaration, no semaphore
//!
//! // Nothing traces a doctest:
//! assert!(!http::request_done_enabled());
//! assert!(!closure_ran);
//! ```
//!
//! Then, as root: `bpftrace -e 'usdt:./prog:http:request_start { printf("%d
//! %s\n", arg0, str(arg1)); }' -c ./prog`, or, with this project's command,
//! `usdt trace -- ./prog`, which prints each hit by name:
//! `http:request_start id=1 path="/index.html"`.
//!
//! # Where to read on
//!
//! - [`provider`]: declaring probes, the macros and functions it generates,
//!   the argument types, probe names, and a renamed dependency.
//! - [`trait@ProbeArg`] and [`derive@ProbeArg`]: your own argument types.
//! - [`probe!`]: ad-hoc probes.
//! - [`SITE_LAYOUT`], [`KernelFeatures`]: the probe site and what the
//!   running kernel optimizes, for tracers.
//! - The repository's guides: `docs/api.md` (the API by example),
//!   `docs/tracing.md` (bpftrace, gdb, perf and `usdt`), `docs/site.md` (the
//!   probe site, kernel generations, fork and the red zone).
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
/// at most 12 arguments. A mistake is a compile error at the offending token
/// that says what to write instead.
///
/// # Lazy probes
///
/// A closure returns the probe's arguments as a tuple, or a bare value for a
/// one-argument probe; the probe's types are written out for it, so literals
/// take them. A string the closure builds is returned owned: declare that
/// argument `String`.
///
/// ```
/// #[usdt::provider]
/// mod cache {
///     fn lookup(key: u64, keys: String) {}
///     fn evicted(key: u64) {}
/// }
///
/// let keys = [3u64, 5, 8];
/// let mut built = 0;
/// cache::lookup!(|| {
///     built += 1; // only while traced
///     (5, format!("{keys:?}"))
/// });
/// cache::evicted!(move || keys[0]);
/// assert_eq!(built, 0);
/// ```
///
/// # Argument types
///
/// Each argument is passed in a register that the note names at the value's
/// width and sign (`1@%dil`, `-4@%edx`, `8@%rax`):
///
/// | Rust type | in the note |
/// |---|---|
/// | `u8`, `u16`, `u32`, `u64`, `usize` | `1@`, `2@`, `4@`, `8@`, `8@` |
/// | `i8`, `i16`, `i32`, `i64`, `isize` | `-1@`, `-2@`, `-4@`, `-8@`, `-8@` |
/// | `core::ffi::c_int` and the other C integer aliases | as their integer type |
/// | `bool` | `1@`, 0 or 1 |
/// | `char` | `4@`, its code point |
/// | `f32`, `f64` | `4@`, `8@`: the IEEE-754 bits as an unsigned integer (`f32::to_bits`) |
/// | `*const T`, `*mut T`, `&T`, `&mut T` | `8@`, the address |
/// | `&CStr`, `CString` | `8@`, the address of the NUL-terminated bytes |
/// | `&str`, `String` | `8@`, the address of a NUL-terminated copy |
/// | `&[u8]`, `Vec<u8>` | two operands: `8@` the address, `8@` the length |
/// | `Duration` | `8@`, nanoseconds, saturating at `u64::MAX` |
/// | a type implementing [`trait@ProbeArg`] (`#[derive(usdt::ProbeArg)]`) | as its field |
///
/// A string argument is copied onto the stack, with a terminating NUL, only
/// while a tracer is attached to the probe (its semaphore is non-zero); an
/// idle probe copies nothing. The copy holds at most [`STR_MAX`] bytes. A
/// tracer that does not raise the semaphore sees a null pointer.
///
/// # Names, signatures and semaphores
///
/// A probe function named with `__` has `-` there in its note name, as DTrace
/// names probes: `fn order__placed` is the probe `order-placed`, fired as
/// `order__placed!(..)`.
///
/// Every site also records the probe's argument names, types as written and
/// [`kind`]s in `.usdt.signatures`, a section that is not loaded and that
/// other tools ignore: `usdt list` shows `http:request_start(id: u64, path:
/// &str)` and `usdt trace` prints `http:request_start id=1
/// path="/index.html"`.
///
/// Each probe has one 2-byte semaphore in the writable `.probes` section,
/// shared by all its sites. The kernel increments it while a uprobe created
/// with `ref_ctr_offset` is attached (bpftrace, libbpf and `usdt` do so; gdb
/// increments it itself); `name_enabled()` reads it.
///
/// # Where the macros can be used
///
/// The generated macros are usable anywhere in the defining crate, through
/// the provider module's path (`crate::http::request_start!`). They are not
/// exported to other crates: a library declares its provider and fires its
/// probes in its own functions, and every program that uses the library
/// carries them.
///
/// # A renamed dependency
///
/// The code a provider and the derive generate names this crate `::usdt`. A
/// program that gives the dependency another name
/// (`my_usdt = { package = "usdt-probes", version = "0.1" }`) says which, with
/// `crate = "..."` as serde's attributes take it; `probe!` needs nothing:
///
/// ```
/// # extern crate usdt as my_usdt;
/// #[my_usdt::provider(crate = "my_usdt")]
/// mod http {
///     fn accept(conn: ConnId, peer: &str) {}
/// }
///
/// #[derive(my_usdt::ProbeArg)]
/// #[usdt(crate = "my_usdt")] // the derive's option, whatever the dependency's name
/// struct ConnId(u64);
///
/// fn main() {
///     http::accept!(ConnId(7), "10.0.0.1:443");
///     my_usdt::probe!(http, tick, 1u64);
/// }
/// ```
pub use usdt_macros::provider;

/// Fires an ad-hoc probe: `usdt::probe!(provider, name, args...)`.
///
/// No declaration and no semaphore: the site is its nops and the note.
/// Arguments are integers, `bool`, `char`, floats, raw pointers, `&CStr` and
/// `CString`, evaluated once. Strings need a provider probe (which copies
/// them while traced), and a reference is passed as a raw pointer
/// (`core::ptr::from_ref(&x)`), so that `&String` never passes the address
/// of a `String`'s header by mistake.
///
/// ```
/// let bytes = [1u8, 2, 3];
/// usdt::probe!(cache, miss, 42u64, -1i32, bytes.as_ptr(), bytes.len());
///
/// let conn = 7u64;
/// usdt::probe!(net, close, core::ptr::from_ref(&conn), c"peer reset", true);
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

/// What the running kernel can do for probes, detected once per process.
///
/// ```
/// let features = usdt::KernelFeatures::detect(); // once per process, then cached
/// match features.optimized_offset(usdt::SITE_LAYOUT) {
///     Some(offset) => println!("this kernel optimizes a uprobe at Location + {offset}"),
///     None => println!("a uprobe on these sites is emulated at the nop"),
/// }
/// ```
pub use usdt_runtime::KernelFeatures;

/// A probe site's layout; [`SITE_LAYOUT`] is this build's.
///
/// ```
/// use usdt::SiteLayout;
///
/// assert_eq!(SiteLayout::NopNop5.to_string(), "nop;nop5");
/// assert_eq!(SiteLayout::NopNop5.long_nop_at(SiteLayout::NopNop5), Some(1));
/// assert_eq!(SiteLayout::NopNop5Nop10.long_nop_at(SiteLayout::NopNop10), Some(6));
/// assert!(!SiteLayout::Nop.has_long_nop());
/// ```
pub use usdt_runtime::SiteLayout;

/// Which kernel generation this is, as the uprobe syscall tells it.
///
/// ```
/// use usdt::UprobeSyscall;
///
/// let generation = match usdt::KernelFeatures::detect().uprobe_syscall {
///     UprobeSyscall::Absent => "before 6.18: nothing is optimized",
///     UprobeSyscall::OptimizesNop5 => "6.18 to 7.2: nop5 is optimized",
///     UprobeSyscall::OptimizesNop10 => "7.3 and 7.2.6+: nop10 is optimized",
///     UprobeSyscall::Unknown(_) => "unknown",
/// };
/// println!("{generation}");
/// ```
pub use usdt_runtime::UprobeSyscall;

/// At most 255 bytes of a string argument reach a tracer; a NUL inside the
/// string also ends it for every reader.
///
/// ```
/// #[usdt::provider]
/// mod log {
///     fn line(text: &str) {}
/// }
///
/// let long = "x".repeat(4 * usdt::STR_MAX);
/// log::line!(&long); // a tracer reads the first 255 bytes
/// assert_eq!(usdt::STR_MAX, 255);
/// ```
pub use usdt_runtime::STR_MAX;

/// How tracers show each argument: the codes of signature records.
///
/// ```
/// use usdt::kind;
///
/// assert_eq!(kind::int(-4), kind::SIGNED | 4); // an i32
/// assert_eq!(kind::int(8), kind::UNSIGNED | 8); // a u64
/// assert_eq!(kind::operands(kind::BYTES), 2); // address and length
/// ```
pub use usdt_runtime::kind;

/// Your own argument types: derive the trait for a struct with one field
/// ([`derive@ProbeArg`]), or write it by hand for another conversion:
///
/// ```
/// /// A temperature in tenths of a degree, passed as a signed 2-byte integer.
/// struct Celsius(f32);
///
/// impl usdt::ProbeArg for Celsius {
///     const SIZE: i8 = -2; // bytes, negative when signed
///     const KIND: u8 = usdt::kind::SIGNED | 2; // how tracers show it
///     fn value(&self) -> u64 {
///         (self.0 * 10.0) as i16 as i64 as u64 // sign-extended to 64 bits
///     }
/// }
///
/// #[usdt::provider]
/// mod sensor {
///     fn reading(id: u8, temperature: Celsius) {}
/// }
///
/// fn main() {
///     sensor::reading!(1, Celsius(-4.5)); // a tracer reads -45
///     usdt::probe!(sensor, raw, Celsius(21.0));
/// }
/// ```
pub use usdt_runtime::ProbeArg;

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
/// | x86-64 (Linux and other ELF systems) | [`SiteLayout::NopNop5Nop10`]; [`SiteLayout::NopNop5`] with the `nop5` feature alone; [`SiteLayout::NopNop10`] with `nop10` alone | `90 0f 1f 44 00 00 66 2e 0f 1f 84 00 00 00 00 00`; `90 0f 1f 44 00 00`; `90 66 2e 0f 1f 84 00 00 00 00 00` |
/// | aarch64 (ELF) | [`SiteLayout::Nop`] | `1f 20 03 d5` |
/// | riscv64 (ELF) | [`SiteLayout::Nop`] | `13 00 00 00` |
/// | anything else: Windows, macOS, wasm, 32-bit targets | [`SiteLayout::NoSite`] | no site and no note |
///
/// Each call site of a probe emits its layout's bytes (written byte by byte
/// on x86-64) and one `NT_STAPSDT` note whose Location points at the first
/// `nop`. Every tracer may attach there: every kernel emulates a uprobe on a
/// `nop`. On x86-64, Linux 6.18 to 7.2 optimize a uprobe on the `nop5`
/// (Location + 1), the 7.3 series one on the `nop10` (Location + 6, or + 1
/// in a `nop10` build), into a `call` that
/// enters the kernel by `syscall` instead of a trap
/// ([`KernelFeatures::optimized_offset`]). The site never lets the compiler
/// keep data in the red zone below the stack pointer, where that `call`
/// writes.
///
/// Where there is no site, a probe evaluates its eager arguments and
/// nothing else, a lazy probe's closure never runs, and every
/// `NAME_enabled()` is `false`.
///
/// ```
/// println!("this build's probe sites are {}", usdt::SITE_LAYOUT);
/// if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
///     assert!(usdt::SITE_LAYOUT.has_long_nop());
/// }
/// ```
pub const SITE_LAYOUT: SiteLayout = usdt_macros::site_layout!(::usdt_runtime::SiteLayout);

// The README's and the API guide's examples are doc tests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

#[cfg(doctest)]
#[doc = include_str!("../docs/api.md")]
struct ApiGuideExamples;

#[doc(hidden)]
pub mod __private {
    extern crate alloc;
    pub use alloc::ffi::CString;
    pub use alloc::string::String;
    pub use alloc::vec::Vec;
    pub use usdt_macros::adhoc_probe;
    pub use usdt_runtime::{kind, ProbeArg, StrArg, StrBuf};
}
