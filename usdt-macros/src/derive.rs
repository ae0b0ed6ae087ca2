//! `#[derive(usdt::ProbeArg)]`: a struct with one field passes as that field.

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
    let ty = &field.ty;
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let arg = quote!(::usdt::__private::ProbeArg);
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
