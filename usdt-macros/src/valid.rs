//! Semantic checks of a parsed provider. Every problem is collected, so that
//! one compile reports all of them, each spanning the offending syntax.

use crate::ast::{Name, Probe, Provider};
use crate::types::{self, ArgType};
use proc_macro2::TokenStream;
use quote::ToTokens;
use std::collections::HashMap;
use syn::{FnArg, Pat, ReturnType};

/// The most arguments a probe takes: what `sys/sdt.h` and its consumers support,
/// and about all the general registers x86-64 has to hold them.
pub use usdt_runtime::MAX_ARGS;

/// Accumulates errors.
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// An error spanning all of `tokens` (from their first to their last token).
    pub fn error(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub fn into_result(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// A name consumers can read: an ASCII identifier (provider and probe names
/// end up in symbol names, in notes and in tracer syntax such as `usdt:BIN:p:n`).
pub fn check_name(name: &Name, what: &str, errors: &mut Errors) {
    let v = &name.value;
    let plain = v
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        errors.push(syn::Error::new(
            name.span,
            format!(
                "{what} name `{v}` is not a plain identifier: use ASCII letters, digits and `_`, not starting with a digit (e.g. `{}`)",
                suggest(v)
            ),
        ));
    }
}

fn suggest(v: &str) -> String {
    let mut s: String = v
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        s.insert(0, '_');
    }
    s
}

/// Checks the whole provider; returns the argument types of each valid probe,
/// in the order of `provider.probes` (`None` for a probe with errors).
pub fn check(provider: &Provider, errors: &mut Errors) -> Vec<Option<Vec<ArgType>>> {
    check_name(&provider.name, "provider", errors);
    for item in &provider.others {
        errors.error(
            item,
            "only probe declarations belong in a #[usdt::provider] module: `fn name(arg: u64) {}`; move other items out of it",
        );
    }
    let mut seen: HashMap<&str, ()> = HashMap::new();
    let mut result = Vec::new();
    for probe in &provider.probes {
        let mut local = Errors::default();
        if seen.insert(&probe.name.value, ()).is_some() {
            local.error(
                &probe.item.sig.ident,
                format!(
                    "duplicate probe `{}` in provider `{}`: each probe name appears once",
                    probe.name.value, provider.name.value
                ),
            );
        }
        let types = check_probe(probe, &provider.krate, &mut local);
        let failed = local.0.is_some();
        if let Some(e) = local.0 {
            errors.push(e);
        }
        result.push(if failed { None } else { Some(types) });
    }
    result
}

fn check_probe(probe: &Probe, krate: &TokenStream, errors: &mut Errors) -> Vec<ArgType> {
    check_name(&probe.name, "probe", errors);
    let dashed = probe.note_name();
    if dashed.starts_with('-') || dashed.ends_with('-') {
        errors.push(syn::Error::new(
            probe.name.span,
            format!(
                "probe name `{}` would be `{dashed}` in the note: `__` stands for `-` between two words (`order__placed` is `order-placed`), not at either end",
                probe.name.value
            ),
        ));
    }
    let sig = &probe.item.sig;
    if let Some(t) = &sig.constness {
        errors.error(t, "a probe is not `const`: write `fn name(...) {}`");
    }
    if let Some(t) = &sig.asyncness {
        errors.error(t, "a probe is not `async`: write `fn name(...) {}`");
    }
    if let Some(t) = &sig.unsafety {
        errors.error(t, "a probe is not `unsafe`: write `fn name(...) {}`");
    }
    if let Some(abi) = &sig.abi {
        errors.error(abi, "a probe has no ABI: remove the `extern`");
    }
    let generic = "a probe cannot be generic: give each argument a concrete type";
    if !sig.generics.params.is_empty() {
        errors.error(&sig.generics, generic);
    }
    if let Some(clause) = &sig.generics.where_clause {
        errors.error(clause, generic);
    }
    if let Some(v) = &sig.variadic {
        errors.error(v, "a probe is not variadic: declare each argument");
    }
    if let ReturnType::Type(..) = &sig.output {
        errors.error(
            &sig.output,
            "a probe returns nothing: remove the return type",
        );
    }
    if !probe.item.block.stmts.is_empty() {
        errors.error(
            &probe.item.block,
            "a probe has no body: write `{}` (the site is generated)",
        );
    }
    for attr in &probe.item.attrs {
        if !attr.path().is_ident("doc") {
            errors.error(attr, "only doc comments are allowed on a probe declaration");
        }
    }
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => errors.error(
                r,
                "a probe has no `self`: declare its arguments as `name: Type`",
            ),
            FnArg::Typed(pat) => match &*pat.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {}
                Pat::Wild(_) => {}
                other => errors.error(
                    other,
                    format!(
                        "a probe argument is `name: Type`, not the pattern `{}`",
                        other.to_token_stream()
                    ),
                ),
            },
        }
    }
    if probe.args.len() > MAX_ARGS {
        let extra = &probe.args[MAX_ARGS];
        errors.push(syn::Error::new_spanned(
            &extra.tokens,
            format!(
                "a probe takes at most {MAX_ARGS} arguments; `{}` has {}: pack the rest into fewer arguments or split the probe",
                probe.name.value,
                probe.args.len()
            ),
        ));
    }
    let mut types = Vec::new();
    for arg in &probe.args {
        match types::classify(&arg.ty, krate) {
            Ok(t) => types.push(t),
            Err(e) => errors.push(e),
        }
    }
    let operands: usize = types.iter().map(ArgType::operands).sum();
    if probe.args.len() <= MAX_ARGS && operands > MAX_ARGS {
        errors.push(syn::Error::new_spanned(
            &probe.item.sig.inputs,
            format!(
                "a probe takes at most {MAX_ARGS} note operands; `{}` needs {operands} (a byte slice takes two: address and length): pack the rest into fewer arguments or split the probe",
                probe.name.value
            ),
        ));
    }
    types
}
