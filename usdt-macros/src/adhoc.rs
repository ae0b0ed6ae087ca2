//! `usdt::probe!(provider, name, args...)`: a probe without a declaration and
//! without a semaphore, for integer and pointer arguments.

use crate::ast::Name;
use crate::site::{self, Site};
use crate::valid::{self, Errors, MAX_ARGS};
use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

struct Input {
    provider: Ident,
    name: Ident,
    args: Punctuated<Expr, Token![,]>,
}

impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let usage = "write `usdt::probe!(provider, name, args...)`, with plain identifiers for the provider and the probe";
        let provider = Ident::parse(input).map_err(|e| syn::Error::new(e.span(), usage))?;
        <Token![,]>::parse(input).map_err(|e| syn::Error::new(e.span(), usage))?;
        let name = Ident::parse(input).map_err(|e| syn::Error::new(e.span(), usage))?;
        let args = if input.is_empty() {
            Punctuated::new()
        } else {
            <Token![,]>::parse(input)?;
            Punctuated::parse_terminated(input)?
        };
        Ok(Input {
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
