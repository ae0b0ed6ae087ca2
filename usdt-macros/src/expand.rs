//! Code generation for `#[usdt::provider]`.

use crate::ast::{Args, Name, Probe, Provider};
use crate::signature::{Kind, RecordArg, Signature};
use crate::site::{self, Site};
use crate::types::{self, ArgType};
use crate::valid::{self, Errors};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Visibility;

pub fn provider(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args).unwrap_or_else(|e| {
        errors.push(e);
        Args::default()
    });
    let provider = match Provider::parse(&args, input) {
        Ok(provider) => provider,
        Err(e) => {
            errors.push(e);
            return errors_tokens(errors);
        }
    };
    let types = valid::check(&provider, &mut errors);
    match errors.into_result() {
        Ok(()) => {
            let types: Vec<Vec<ArgType>> = types.into_iter().flatten().collect();
            module(&provider, &types)
        }
        Err(e) => {
            let skeleton = crate::fallback::module(&provider);
            let e = e.to_compile_error();
            quote!(#skeleton #e)
        }
    }
}

fn errors_tokens(errors: Errors) -> TokenStream {
    match errors.into_result() {
        Ok(()) => TokenStream::new(),
        Err(e) => e.to_compile_error(),
    }
}

/// The name of the crate being compiled, as cargo passes it to rustc.
fn crate_name() -> String {
    std::env::var("CARGO_CRATE_NAME").unwrap_or_else(|_| "crate".to_owned())
}

fn module(provider: &Provider, types: &[Vec<ArgType>]) -> TokenStream {
    let Provider {
        attrs, vis, ident, ..
    } = provider;
    let krate = crate_name();
    let probes = provider
        .probes
        .iter()
        .zip(types)
        .map(|(probe, types)| probe_items(provider, probe, types, &krate));
    let checks = declared_types(provider);
    quote! {
        #(#attrs)*
        #vis mod #ident {
            // The declarations' types are written in the provider module: a
            // type of the enclosing module is named as it is there.
            #[allow(unused_imports)]
            use super::*;
            #checks
            #(#probes)*
        }
    }
}

/// Each user type (not one the macro knows) must implement
/// `usdt::ProbeArg`: checked where the probe declares it, so that a missing
/// impl is one error spanning the type, naming the trait. (The types the
/// macro knows are not resolved: `&CStr` needs no `use` in scope.)
fn declared_types(provider: &Provider) -> TokenStream {
    let checks = provider
        .probes
        .iter()
        .flat_map(|p| &p.args)
        .filter(|a| types::is_user_type(&a.ty))
        .map(|a| {
            let ty = &a.ty;
            quote::quote_spanned! {syn::spanned::Spanned::span(ty)=>
                const _: fn() = __usdt_probe_arg::<#ty>;
            }
        })
        .collect::<Vec<_>>();
    let check_fn = if checks.is_empty() {
        TokenStream::new()
    } else {
        quote! {
            #[allow(dead_code)]
            const fn __usdt_probe_arg<T: ::usdt::__private::ProbeArg>() {}
        }
    };
    quote! {
        #check_fn
        #(#checks)*
    }
}

/// The call site's view of one probe's arguments.
struct Binding<'a> {
    /// `__usdt_aN`: the argument as the caller passed it, typed.
    local: syn::Ident,
    /// What the site receives: the local itself, a reference's address, a
    /// staged string's address, or a byte slice's address and length.
    regs: Vec<syn::Ident>,
    ty: &'a ArgType,
}

fn probe_items(provider: &Provider, probe: &Probe, types: &[ArgType], krate: &str) -> TokenStream {
    let name = &probe.item.sig.ident;
    let symbol = site::semaphore_symbol(krate, &provider.name.value, &probe.name.value);
    let semaphore = site::semaphore_def(&symbol);
    let enabled_name = format_ident!("{}_enabled", probe.name.value, span = name.span());
    let enabled_vis = match &probe.item.vis {
        Visibility::Public(_) => quote!(pub),
        _ => quote!(pub(crate)),
    };
    let enabled = site::semaphore_fn(&symbol, &enabled_name, enabled_vis);
    let note_name = probe.note_name();
    let record = record(probe, types);
    let site_fn = site::site_fn(&Site {
        provider: &provider.name.value,
        name: &note_name,
        semaphore: Some(&symbol),
        nargs: types.iter().map(ArgType::operands).sum(),
        signature: Some(&record),
    });
    let on_fn = site::semaphore_fn(&symbol, &format_ident!("__usdt_on"), quote!());
    let bindings: Vec<Binding> = types
        .iter()
        .enumerate()
        .map(|(i, ty)| Binding {
            local: format_ident!("__usdt_a{i}"),
            regs: match ty {
                ArgType::Value { .. } => vec![format_ident!("__usdt_a{i}")],
                ArgType::Ref { .. } | ArgType::Str { .. } => vec![format_ident!("__usdt_r{i}")],
                ArgType::Bytes { .. } => {
                    vec![format_ident!("__usdt_r{i}"), format_ident!("__usdt_n{i}")]
                }
            },
            ty,
        })
        .collect();
    let eager = eager_arm(&bindings, &site_fn, &on_fn);
    let lazy = lazy_arms(&bindings, &site_fn, &on_fn);
    let usage = usage_error(provider, probe);
    let docs = probe.item.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let signature = signature(probe);
    let macro_doc = format!(
        " Fires the probe `{}:{}`{signature}: eager `{}!(args...)`, or lazy `{}!(|| (args...))` (the closure runs only while a tracer is attached).",
        provider.name.value, note_name, probe.name.value, probe.name.value
    );
    let enabled_doc = format!(
        " Whether a tracer is attached to `{}:{}` now (its semaphore is non-zero).",
        provider.name.value, note_name
    );
    quote! {
        #semaphore

        #(#docs)*
        #[doc = ""]
        #[doc = #macro_doc]
        #[allow(unused_macros)]
        macro_rules! #name {
            #lazy
            #eager
            ($($__usdt_other:tt)*) => { ::core::compile_error!(#usage) };
        }
        #[allow(unused_imports)]
        pub(crate) use #name;

        #[doc = #enabled_doc]
        #enabled
    }
}

/// The signature record of a probe: each argument's name, type as written,
/// and kind (the site operand's `ProbeArg::KIND` for values).
fn record(probe: &Probe, types: &[ArgType]) -> Signature {
    let mut operand = 0;
    let args = probe
        .args
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (arg, ty))| {
            let kind = match ty {
                ArgType::Value { .. } => Kind::Operand(operand),
                ArgType::Ref { .. } => Kind::Fixed("POINTER"),
                ArgType::Str { .. } => Kind::Fixed("STR"),
                ArgType::Bytes { .. } => Kind::Fixed("BYTES"),
            };
            operand += ty.operands();
            RecordArg {
                name: arg
                    .ident
                    .as_ref()
                    .map_or(format!("arg{i}"), |id| Name::from_ident(id).value),
                ty: types::type_text(&arg.ty),
                kind,
            }
        })
        .collect();
    Signature { args }
}

/// `(id: u64, path: &str)`, for messages and docs.
fn signature(probe: &Probe) -> String {
    let args: Vec<String> = probe
        .args
        .iter()
        .map(|a| {
            let name = a.ident.as_ref().map_or("_".to_owned(), ToString::to_string);
            let ty = types::type_text(&a.ty);
            format!("{name}: {ty}")
        })
        .collect();
    format!("({})", args.join(", "))
}

fn usage_error(provider: &Provider, probe: &Probe) -> String {
    let n = probe.args.len();
    let names: Vec<String> = probe
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.ident
                .as_ref()
                .map_or(format!("arg{i}"), ToString::to_string)
        })
        .collect();
    let list = names.join(", ");
    let tuple = if n == 1 {
        list.clone()
    } else {
        format!("({list})")
    };
    format!(
        "`{}::{}!` takes {n} argument{} {}: write `{}!({list})`, or `{}!(|| {tuple})` to compute them only while traced",
        provider.ident,
        probe.name.value,
        if n == 1 { "" } else { "s" },
        signature(probe),
        probe.name.value,
        probe.name.value,
    )
}

/// `let`s that turn the typed arguments into what the site takes: a
/// reference's address, and a string's staged copy (only when `on`, else a
/// null pointer).
fn conversions(bindings: &[Binding], on: &TokenStream) -> TokenStream {
    let lets = bindings.iter().map(|b| {
        let Binding { local, regs, ty } = b;
        let reg = &regs[0];
        match ty {
            ArgType::Value { .. } => TokenStream::new(),
            ArgType::Bytes { .. } => {
                let len = &regs[1];
                quote! {
                    let #reg: &[::core::primitive::u8] = &#local;
                    let (#reg, #len) = (#reg.as_ptr(), #reg.len());
                }
            }
            ArgType::Ref { .. } => quote! {
                let #reg = ::core::ptr::from_ref(#local);
            },
            ArgType::Str { .. } => {
                let buf = format_ident!("{}_buf", reg);
                quote! {
                    let mut #buf = ::usdt::__private::StrBuf::new();
                    let #reg: u64 = if #on {
                        ::usdt::__private::StrArg::stage(&#local, &mut #buf)
                    } else {
                        0
                    };
                }
            }
        }
    });
    quote!(#(#lets)*)
}

/// `$a0`, `$a1`, ...: the eager arm's metavariables.
fn metavar(i: usize) -> syn::Ident {
    format_ident!("a{i}")
}

fn eager_arm(bindings: &[Binding], site_fn: &TokenStream, on_fn: &TokenStream) -> TokenStream {
    let vars: Vec<_> = (0..bindings.len()).map(metavar).collect();
    let lets = bindings.iter().zip(&vars).map(|(b, var)| {
        let (local, binding) = (&b.local, b.ty.binding());
        quote!(let #local: #binding = $#var;)
    });
    let regs = bindings.iter().flat_map(|b| &b.regs);
    // Only a probe with strings reads its semaphore: every other eager site is
    // the nops alone, without a branch.
    let on = quote!(__usdt_on);
    let conversions = conversions(bindings, &on);
    let prepare = if bindings.iter().any(|b| b.ty.is_str()) {
        quote! {
            #on_fn
            let #on = __usdt_on();
        }
    } else {
        TokenStream::new()
    };
    quote! {
        (#($#vars:expr),* $(,)?) => {{
            #(#lets)*
            #site_fn
            #prepare
            #conversions
            __usdt_site(#(#regs),*);
        }};
    }
}

fn lazy_arms(bindings: &[Binding], site_fn: &TokenStream, on_fn: &TokenStream) -> TokenStream {
    let locals: Vec<_> = bindings.iter().map(|b| &b.local).collect();
    let tys: Vec<_> = bindings.iter().map(|b| b.ty.binding()).collect();
    // The closure's return type is written out, so that a wrong tuple is an
    // error at the caller's expression, and literals take the probe's types.
    let (pattern, ret) = match (locals.as_slice(), tys.as_slice()) {
        ([one], [ty]) => (quote!(#one), quote!(#ty)),
        _ => (quote!((#(#locals),*)), quote!((#(#tys),*))),
    };
    let conversions = conversions(bindings, &quote!(true));
    let regs: Vec<_> = bindings.iter().flat_map(|b| &b.regs).collect();
    let body = |closure: TokenStream| {
        quote! {{
            #on_fn
            if __usdt_on() {
                // The closure is kept (not inlined as a block) so that
                // `return` and `?` in it mean what they mean in a closure.
                #[allow(clippy::redundant_closure_call)]
                let #pattern = (#closure)();
                #conversions
                #site_fn
                __usdt_site(#(#regs),*);
            }
        }}
    };
    let plain = body(quote!(|| -> #ret { $($__usdt_body)+ }));
    let moving = body(quote!(move || -> #ret { $($__usdt_body)+ }));
    quote! {
        (|| $($__usdt_body:tt)+) => { #plain };
        (move || $($__usdt_body:tt)+) => { #moving };
    }
}
