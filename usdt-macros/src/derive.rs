//! `#[derive(usdt::ProbeArg)]`: a struct with one field passes as that field.
//! `#[usdt(crate = "PATH")]` on the struct names the facade, for a program
//! that renames the dependency.

use crate::ast;
use crate::valid::Errors;
use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields};

pub fn probe_arg(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(|input| expand(&input)) {
        Ok(tokens) => tokens,
        Err(e) => e.to_compile_error(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let shape =
        "#[derive(usdt::ProbeArg)] belongs on a struct with one field: `struct ConnId(u64);`";
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(&input.ident, shape));
    };
    let (field, access) = match &data.fields {
        Fields::Unnamed(f) if f.unnamed.len() == 1 => (&f.unnamed[0], quote!(0)),
        Fields::Named(f) if f.named.len() == 1 => {
            let ident = f.named[0].ident.as_ref();
            (&f.named[0], quote!(#ident))
        }
        _ => return Err(syn::Error::new_spanned(&data.fields, shape)),
    };
    let krate = ast::facade(crate_option(input)?.as_ref());
    let ty = &field.ty;
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let arg = quote!(#krate::__private::ProbeArg);
    // The field's type carries its own span: a field that is no probe
    // argument is an error there, naming the trait.
    let field_bound = quote::quote_spanned! {syn::spanned::Spanned::span(ty)=>
        #ty: #arg
    };
    let where_clause = match where_clause {
        Some(w) => quote!(#w, #field_bound),
        None => quote!(where #field_bound),
    };
    Ok(quote! {
        impl #impl_generics #arg for #name #ty_generics #where_clause {
            const SIZE: ::core::primitive::i8 = <#ty as #arg>::SIZE;
            const KIND: ::core::primitive::u8 = <#ty as #arg>::KIND;
            #[inline(always)]
            fn value(&self) -> ::core::primitive::u64 {
                <#ty as #arg>::value(&self.#access)
            }
        }
    })
}

/// `#[usdt(crate = "PATH")]`, the derive's only option, written at most once.
fn crate_option(input: &DeriveInput) -> syn::Result<Option<syn::Path>> {
    let mut krate = None;
    let mut errors = Errors::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("usdt")) {
        let parsed = attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident("crate") {
                return Err(meta.error(
                    "unknown option of #[derive(usdt::ProbeArg)]: the only option is `#[usdt(crate = \"...\")]`",
                ));
            }
            if krate.is_some() {
                return Err(meta.error("duplicate `crate`: write `crate = \"...\"` once"));
            }
            krate = Some(ast::crate_path(&meta)?);
            Ok(())
        });
        if let Err(e) = parsed {
            errors.push(e);
        }
    }
    errors.into_result().map(|()| krate)
}

#[cfg(test)]
mod tests {
    use crate::expand::tests::{errors, facade_paths};
    use quote::quote;

    #[test]
    fn the_derive_names_the_facade_usdt_by_default() {
        let out = super::probe_arg(quote!(
            struct ConnId(u64);
        ));
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        assert!(paths.len() >= 4, "{paths:?}");
        assert!(paths.iter().all(|p| p == "::usdt"), "{paths:?}");
    }

    #[test]
    fn the_derive_takes_crate() {
        let out = super::probe_arg(quote!(
            #[usdt(crate = "my_usdt")]
            struct ConnId {
                id: u64,
            }
        ));
        assert_eq!(errors(&out), Vec::<String>::new());
        let paths = facade_paths(&out);
        assert!(paths.len() >= 4, "{paths:?}");
        assert!(paths.iter().all(|p| p == "my_usdt"), "{paths:?}");
    }

    #[test]
    fn a_bad_derive_option_is_an_error() {
        for (attrs, message) in [
            (quote!(#[usdt(krate = "x")]), "the only option is"),
            (
                quote!(#[usdt(crate = "a")] #[usdt(crate = "b")]),
                "duplicate `crate`",
            ),
            (quote!(#[usdt(crate = "a b")]), "is not a path"),
        ] {
            let out = super::probe_arg(quote!(#attrs struct ConnId(u64);));
            let errors = errors(&out);
            assert!(
                errors.len() == 1 && errors[0].contains(message),
                "{errors:?}"
            );
        }
    }
}
