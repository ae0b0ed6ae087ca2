//! Parsing: the attribute's arguments and the provider module, into an
//! internal representation that keeps the syntax nodes for spans.

use proc_macro2::{Span, TokenStream};
use syn::{Attribute, FnArg, Ident, Item, ItemFn, LitStr, Pat, Type, Visibility};

/// A provider or probe name, with the span of the syntax it came from.
pub struct Name {
    pub value: String,
    pub span: Span,
}

impl Name {
    pub fn from_ident(ident: &Ident) -> Self {
        let text = ident.to_string();
        let value = text.strip_prefix("r#").unwrap_or(&text).to_owned();
        Name {
            value,
            span: ident.span(),
        }
    }
}

/// `#[usdt::provider(name = "...", crate = "...")]`.
#[derive(Default)]
pub struct Args {
    pub name: Option<LitStr>,
    /// The path of the facade crate, where the program names it otherwise
    /// than `usdt` (a renamed dependency).
    pub krate: Option<syn::Path>,
}

impl Args {
    pub fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let mut args = Args::default();
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("name") {
                if args.name.is_some() {
                    return Err(meta.error("duplicate `name`: write `name = \"...\"` once"));
                }
                args.name = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("crate") {
                if args.krate.is_some() {
                    return Err(meta.error("duplicate `crate`: write `crate = \"...\"` once"));
                }
                args.krate = Some(crate_path(&meta)?);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown provider option: the options are `name = \"...\"` and `crate = \"...\"`",
                ))
            }
        });
        syn::parse::Parser::parse2(parser, tokens)?;
        Ok(args)
    }
}

/// `crate = "path"`: the path by which the program names the facade crate
/// (`my_usdt` after `my_usdt = { package = "usdt-probes", .. }` in
/// Cargo.toml), as serde's `#[serde(crate = "...")]` takes it. Its tokens
/// carry the string's span, so an unresolved path is an error there.
pub fn crate_path(meta: &syn::meta::ParseNestedMeta) -> syn::Result<syn::Path> {
    let lit: LitStr = meta.value()?.parse()?;
    lit.parse::<syn::Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate = {:?}` is not a path: write the name the program gives the usdt-probes dependency, e.g. `crate = \"my_usdt\"`",
                lit.value()
            ),
        )
    })
}

/// The facade's path in generated code: `crate = "..."` if given, else
/// `::usdt`, the facade's library name.
pub fn facade(krate: Option<&syn::Path>) -> TokenStream {
    match krate {
        Some(path) => quote::ToTokens::to_token_stream(path),
        None => quote::quote!(::usdt),
    }
}

/// The provider module.
pub struct Provider {
    /// The facade crate's path, for the generated code (`::usdt`).
    pub krate: TokenStream,
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub ident: Ident,
    pub name: Name,
    pub probes: Vec<Probe>,
    /// Items of the module that are not probe declarations (each an error).
    pub others: Vec<Item>,
}

/// One probe declaration: `fn name(arg: Type, ...) {}`.
pub struct Probe {
    pub item: ItemFn,
    pub name: Name,
    pub args: Vec<ArgDecl>,
}

/// One declared argument.
pub struct ArgDecl {
    /// The argument's name, when its pattern is a plain identifier.
    pub ident: Option<Ident>,
    pub ty: Type,
    /// The whole `name: Type`, for error spans.
    pub tokens: TokenStream,
}

impl Provider {
    /// Parses the module; the only error here is input that is not an inline
    /// module at all (everything else is collected by `valid`).
    pub fn parse(args: &Args, input: TokenStream) -> syn::Result<Self> {
        let module =
            match syn::parse2::<Item>(input)? {
                Item::Mod(module) => module,
                other => return Err(syn::Error::new_spanned(
                    other,
                    "#[usdt::provider] belongs on a module: `mod name { fn probe(arg: u64) {} }`",
                )),
            };
        let Some((_, items)) = module.content.clone() else {
            return Err(syn::Error::new_spanned(
                module,
                "a provider module needs its probes inline: write `mod name { fn probe(arg: u64) {} }`",
            ));
        };
        let name = match &args.name {
            Some(lit) => Name {
                value: lit.value(),
                span: lit.span(),
            },
            None => Name::from_ident(&module.ident),
        };
        let mut probes = Vec::new();
        let mut others = Vec::new();
        for item in items {
            match item {
                Item::Fn(item) => probes.push(Probe::new(item)),
                other => others.push(other),
            }
        }
        Ok(Provider {
            krate: facade(args.krate.as_ref()),
            attrs: module.attrs,
            vis: module.vis,
            ident: module.ident,
            name,
            probes,
            others,
        })
    }
}

impl Probe {
    /// The name in the note: `__` in the function's name becomes `-`, as
    /// DTrace writes probe names (`fn order__placed` is `order-placed`).
    pub fn note_name(&self) -> String {
        self.name.value.replace("__", "-")
    }

    fn new(item: ItemFn) -> Self {
        let name = Name::from_ident(&item.sig.ident);
        let args = item
            .sig
            .inputs
            .iter()
            .filter_map(|input| match input {
                FnArg::Typed(pat) => Some(ArgDecl {
                    ident: match &*pat.pat {
                        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                            Some(p.ident.clone())
                        }
                        _ => None,
                    },
                    ty: (*pat.ty).clone(),
                    tokens: quote::ToTokens::to_token_stream(pat),
                }),
                FnArg::Receiver(_) => None,
            })
            .collect();
        Probe { item, name, args }
    }
}
