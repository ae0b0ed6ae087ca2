//! The procedural macros of `usdt`: `#[usdt::provider]`, `usdt::probe!` and
//! `#[derive(usdt::ProbeArg)]`.
//!
//! Use them through the facade, the package `usdt-probes` (its library is
//! named `usdt`), which re-exports them and holds the runtime items their
//! expansions name: `::usdt::__private`, or `PATH::__private` with
//! `crate = "PATH"` for a program that renames the dependency; `probe!`
//! passes its own `$crate`.
//!
//! One stage per file: `ast` parses, `valid` checks, `types` maps argument
//! types to register operands, `site` writes the probe site and its note,
//! `signature` writes the record of argument names and types beside the
//! note, `expand` generates the provider module, `adhoc` the ad-hoc probe,
//! `derive` implements `ProbeArg` for one-field structs, and `fallback` the
//! skeleton emitted beside errors.

// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod adhoc;
mod ast;
mod derive;
mod expand;
mod fallback;
mod signature;
mod site;
mod types;
mod valid;

use proc_macro::TokenStream;

/// Declares a provider: a module of probe declarations.
///
/// See the `usdt` crate's documentation.
#[proc_macro_attribute]
pub fn provider(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::provider(args.into(), input.into()).into()
}

/// `#[derive(ProbeArg)]`: a struct with one field passes to probes as that
/// field. `#[usdt(crate = "PATH")]` names the facade for a renamed
/// dependency.
///
/// See the `usdt` crate's documentation.
#[proc_macro_derive(ProbeArg, attributes(usdt))]
pub fn derive_probe_arg(input: TokenStream) -> TokenStream {
    derive::probe_arg(input.into()).into()
}

/// Fires an ad-hoc probe: what the facade's `usdt::probe!(provider, name,
/// args...)` expands to, `adhoc_probe!($crate; provider, name, args...)`.
///
/// See the `usdt` crate's documentation.
#[doc(hidden)]
#[proc_macro]
pub fn adhoc_probe(input: TokenStream) -> TokenStream {
    adhoc::probe(input.into()).into()
}

/// `site_layout!(PATH)`: the `SiteLayout` (named by `PATH`) of the sites this
/// build emits, chosen by the same `#[cfg]`s as the sites: the facade's
/// `SITE_LAYOUT`.
#[doc(hidden)]
#[proc_macro]
pub fn site_layout(input: TokenStream) -> TokenStream {
    site::site_layout(&input.into()).into()
}
