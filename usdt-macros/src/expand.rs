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
    let krate = &provider.krate;
    let check_fn = if checks.is_empty() {
        TokenStream::new()
    } else {
        quote! {
            #[allow(dead_code)]
            const fn __usdt_probe_arg<T: #krate::__private::ProbeArg>() {}
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
        krate: &provider.krate,
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
    let krate = &provider.krate;
    let eager = eager_arm(krate, &bindings, &site_fn, &on_fn);
    let lazy = lazy_arms(krate, &bindings, &site_fn, &on_fn);
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
fn conversions(krate: &TokenStream, bindings: &[Binding], on: &TokenStream) -> TokenStream {
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
                    let mut #buf = #krate::__private::StrBuf::new();
                    let #reg: u64 = if #on {
                        #krate::__private::StrArg::stage(&#local, &mut #buf)
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

fn eager_arm(
    krate: &TokenStream,
    bindings: &[Binding],
    site_fn: &TokenStream,
    on_fn: &TokenStream,
) -> TokenStream {
    let vars: Vec<_> = (0..bindings.len()).map(metavar).collect();
    let lets = bindings.iter().zip(&vars).map(|(b, var)| {
        let (local, binding) = (&b.local, b.ty.binding());
        quote!(let #local: #binding = $#var;)
    });
    let regs = bindings.iter().flat_map(|b| &b.regs);
    // Only a probe with strings reads its semaphore: every other eager site is
    // the nops alone, without a branch.
    let on = quote!(__usdt_on);
    let conversions = conversions(krate, bindings, &on);
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

fn lazy_arms(
    krate: &TokenStream,
    bindings: &[Binding],
    site_fn: &TokenStream,
    on_fn: &TokenStream,
) -> TokenStream {
    let locals: Vec<_> = bindings.iter().map(|b| &b.local).collect();
    let tys: Vec<_> = bindings.iter().map(|b| b.ty.binding()).collect();
    // The closure's return type is written out, so that a wrong tuple is an
    // error at the caller's expression, and literals take the probe's types.
    let (pattern, ret) = match (locals.as_slice(), tys.as_slice()) {
        ([one], [ty]) => (quote!(#one), quote!(#ty)),
        _ => (quote!((#(#locals),*)), quote!((#(#tys),*))),
    };
    let conversions = conversions(krate, bindings, &quote!(true));
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

#[cfg(test)]
pub(crate) mod tests {
    use proc_macro2::{TokenStream, TokenTree};
    use quote::quote;

    /// The facade paths in an expansion: the path before each `__private`
    /// (`::usdt`, `my_usdt`), one entry per use.
    pub fn facade_paths(expansion: &TokenStream) -> Vec<String> {
        let mut flat = Vec::new();
        flatten(expansion.clone(), &mut flat);
        let mut paths = Vec::new();
        for (i, tt) in flat.iter().enumerate() {
            if !matches!(tt, Some(TokenTree::Ident(id)) if id == "__private") {
                continue;
            }
            // Back over `segment ::` pairs, and a leading `::`.
            let mut segments = Vec::new();
            let mut j = i;
            while j >= 2 && is_colon(&flat[j - 1]) && is_colon(&flat[j - 2]) {
                j -= 2;
                match j.checked_sub(1).map(|k| &flat[k]) {
                    Some(Some(TokenTree::Ident(id))) if !KEYWORDS.contains(&&*id.to_string()) => {
                        segments.push(id.to_string());
                        j -= 1;
                    }
                    _ => {
                        segments.push(String::new());
                        break;
                    }
                }
            }
            segments.reverse();
            paths.push(segments.join("::"));
        }
        paths
    }

    /// The keywords that may stand before a path with a leading `::` in
    /// the expansions (`as ::usdt::..`), never a segment of one.
    const KEYWORDS: &[&str] = &[
        "as", "const", "dyn", "for", "impl", "in", "let", "mut", "pub", "return", "type", "use",
        "where",
    ];

    /// Every token in order, `None` at each group's edges.
    fn flatten(tokens: TokenStream, out: &mut Vec<Option<TokenTree>>) {
        for tt in tokens {
            if let TokenTree::Group(g) = tt {
                out.push(None);
                flatten(g.stream(), out);
                out.push(None);
            } else {
                out.push(Some(tt));
            }
        }
    }

    fn is_colon(tt: &Option<TokenTree>) -> bool {
        matches!(tt, Some(TokenTree::Punct(p)) if p.as_char() == ':')
    }

    fn provider(args: TokenStream) -> TokenStream {
        super::provider(
            args,
            quote! {
                mod http {
                    fn request_start(id: u64, path: &str, body: &[u8], conn: ConnId) {}
                    fn who(name: String, raw: Vec<u8>, c: std::ffi::CString) {}
                }
            },
        )
    }

    /// The messages of the `compile_error!`s at the top level of an
    /// expansion: the macro's errors (not the ones a generated macro
    /// keeps for a wrong call).
    pub fn errors(expansion: &TokenStream) -> Vec<String> {
        let top: Vec<TokenTree> = expansion.clone().into_iter().collect();
        top.windows(3)
            .filter_map(|w| match w {
                [TokenTree::Ident(id), TokenTree::Punct(bang), TokenTree::Group(args)]
                    if id == "compile_error" && bang.as_char() == '!' =>
                {
                    Some(args.stream().to_string())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_provider_names_the_facade_usdt_by_default() {
        let out = provider(quote!());
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        // ProbeArg bounds, string staging, the alloc types, kind constants.
        assert!(paths.len() > 10, "{paths:?}");
        assert!(paths.iter().all(|p| p == "::usdt"), "{paths:?}");
    }

    #[test]
    fn a_provider_with_crate_names_the_facade_by_that_path_only() {
        let out = provider(quote!(name = "web", crate = "my_usdt"));
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        assert!(paths.len() > 10, "{paths:?}");
        assert!(paths.iter().all(|p| p == "my_usdt"), "{paths:?}");
        let text = out.to_string();
        assert!(
            !text.contains(":: usdt ::"),
            "`::usdt::` left in the expansion"
        );
        // The option changes no note: the provider's name is the one given.
        assert!(
            text.contains(r#"".asciz \"web\"""#),
            "no note of provider `web`"
        );
    }

    #[test]
    fn crate_takes_any_path() {
        let out = provider(quote!(crate = "::deps::usdt2"));
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        assert!(paths.len() > 10, "{paths:?}");
        assert!(paths.iter().all(|p| p == "::deps::usdt2"), "{paths:?}");
    }

    #[test]
    fn a_bad_crate_option_is_an_error_beside_the_skeleton() {
        for (args, message) in [
            (quote!(crate = 5), "expected string literal"),
            (quote!(crate = "not a path"), "is not a path"),
            (quote!(crate = "a", crate = "b"), "duplicate `crate`"),
        ] {
            let out = provider(args);
            let errors = errors(&out);
            assert!(
                errors.len() == 1 && errors[0].contains(message),
                "{errors:?}"
            );
            // The skeleton: the probe macros exist and accept anything.
            assert!(
                out.to_string().contains("macro_rules ! request_start"),
                "no skeleton beside {errors:?}"
            );
        }
    }
}
