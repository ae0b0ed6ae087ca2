//! What a provider with errors expands to beside its `compile_error!`s: the
//! module with every probe's macro and `_enabled` function, accepting anything,
//! so that call sites do not add a second wave of errors.

use crate::ast::Provider;
use quote::{format_ident, quote};
use std::collections::HashSet;

pub fn module(provider: &Provider) -> proc_macro2::TokenStream {
    let Provider {
        attrs, vis, ident, ..
    } = provider;
    let mut seen = HashSet::new();
    let probes = provider
        .probes
        .iter()
        .filter(|p| seen.insert(p.name.value.clone()))
        .map(|probe| {
            let name = &probe.item.sig.ident;
            let enabled = format_ident!("{}_enabled", probe.name.value, span = name.span());
            quote! {
                #[allow(unused_macros)]
                macro_rules! #name {
                    ($($__usdt_any:tt)*) => {};
                }
                #[allow(unused_imports)]
                pub(crate) use #name;
                #[allow(dead_code)]
                pub(crate) fn #enabled() -> bool {
                    false
                }
            }
        });
    quote! {
        #(#attrs)*
        #vis mod #ident {
            #(#probes)*
        }
    }
}
