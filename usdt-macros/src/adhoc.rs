//! `usdt::probe!(provider, name, args...)`: a probe without a declaration and
//! without a semaphore, for integer and pointer arguments.
//!
//! The facade's `probe!` is a `macro_rules!` that calls this macro with its
//! own `$crate` first (`$crate; provider, name, args...`): `$crate` names the
//! facade however the program's Cargo.toml names the dependency.

use crate::ast::Name;
use crate::site::{self, Site};
use crate::valid::{self, Errors, MAX_ARGS};
use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

struct Input {
    /// The facade's path, as the facade's `probe!` passes it: `$crate`.
    krate: TokenStream,
    provider: Ident,
    name: Ident,
    args: Punctuated<Expr, Token![,]>,
}

impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let usage = "write `usdt::probe!(provider, name, args...)`, with plain identifiers for the provider and the probe";
        let krate = input.step(|cursor| {
            let mut path = TokenStream::new();
            let mut rest = *cursor;
            while let Some((tt, next)) = rest.token_tree() {
                if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ';') {
                    return Ok((path, rest));
                }
                path.extend([tt]);
                rest = next;
            }
            Err(cursor
                .error("expected the facade's path and `;` (call this macro as `usdt::probe!`)"))
        })?;
        <Token![;]>::parse(input)?;
        // What the program wrote: an error at its end spans all of it.
        let written: TokenStream = input.fork().parse()?;
        let usage_error = |e: syn::Error| {
            if input.is_empty() && !written.is_empty() {
                syn::Error::new_spanned(&written, usage)
            } else {
                syn::Error::new(e.span(), usage)
            }
        };
        let provider = Ident::parse(input).map_err(usage_error)?;
        <Token![,]>::parse(input).map_err(usage_error)?;
        let name = Ident::parse(input).map_err(usage_error)?;
        let args = if input.is_empty() {
            Punctuated::new()
        } else {
            <Token![,]>::parse(input)?;
            Punctuated::parse_terminated(input)?
        };
        Ok(Input {
            krate,
            provider,
            name,
            args,
        })
    }
}

pub fn probe(tokens: TokenStream) -> TokenStream {
    let input: Input = match syn::parse2(tokens) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = Errors::default();
    let provider = Name::from_ident(&input.provider);
    let name = Name::from_ident(&input.name);
    valid::check_name(&provider, "provider", &mut errors);
    valid::check_name(&name, "probe", &mut errors);
    if let Some(extra) = input.args.iter().nth(MAX_ARGS) {
        errors.error(
            extra,
            format!(
                "a probe takes at most {MAX_ARGS} arguments; this one has {}: pack the rest into fewer arguments or split the probe",
                input.args.len()
            ),
        );
    }
    if let Err(e) = errors.into_result() {
        return e.to_compile_error();
    }
    let site_fn = site::site_fn(&Site {
        krate: &input.krate,
        provider: &provider.value,
        name: &name.value,
        semaphore: None,
        nargs: input.args.len(),
        signature: None,
    });
    let args = input.args.iter();
    quote! {{
        #site_fn
        __usdt_site(#(#args),*);
    }}
}

#[cfg(test)]
mod tests {
    use crate::expand::tests::{errors, facade_paths};
    use quote::quote;

    /// The facade's `probe!` passes its `$crate` before `;`; the site names
    /// the facade by it.
    #[test]
    fn the_site_names_the_facade_by_the_path_passed() {
        let out = super::probe(quote!(renamed; http, tick, 1u64, -1i32));
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        // The site's bounds and operands, two arguments.
        assert!(paths.len() >= 6, "{paths:?}");
        assert!(paths.iter().all(|p| p == "renamed"), "{paths:?}");
    }
}
