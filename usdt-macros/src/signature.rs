//! The signature record: each provider probe's argument names, types and
//! kinds, written beside every note of the probe, from the same asm block,
//! in the format of usdt-runtime's `signature` module (its one home, which
//! the readers use too).

use proc_macro2::TokenStream;
use quote::quote;
use usdt_runtime::signature::{SECTION, VERSION};

/// One probe's signature.
pub struct Signature {
    pub args: Vec<RecordArg>,
}

/// One declared argument.
pub struct RecordArg {
    pub name: String,
    /// The type as written in the source.
    pub ty: String,
    pub kind: Kind,
}

/// Where an argument's kind code comes from.
pub enum Kind {
    /// `<A as ProbeArg>::KIND` of the site's operand with this index: a value
    /// whose type the macro may not know (a user type).
    Operand(usize),
    /// A constant of `usdt::kind` (`STR`, `BYTES`, `POINTER`).
    Fixed(&'static str),
}

/// The asm operands that give each argument's kind code (`k0`, `k1`, ...),
/// for the template's `.byte {kN}`. `tys` are the site function's operand
/// type parameters.
pub fn kind_operands(sig: &Signature, tys: &[syn::Ident], krate: &TokenStream) -> Vec<TokenStream> {
    sig.args
        .iter()
        .enumerate()
        .map(|(i, arg)| {
            let k = quote::format_ident!("k{i}");
            match &arg.kind {
                Kind::Operand(j) => {
                    let t = &tys[*j];
                    quote!(#k = const <#t as #krate::__private::ProbeArg>::KIND)
                }
                Kind::Fixed(name) => {
                    let c = syn::Ident::new(name, proc_macro2::Span::call_site());
                    quote!(#k = const #krate::__private::kind::#c)
                }
            }
        })
        .collect()
}

/// The record's lines, appended to a site's template after its note.
/// `section_ty` is the prefix of section types (`@` on x86-64, `%` on
/// aarch64). The link-order label is the one the note just defined:
/// `.L__usdt_site_N`, N being `.L__usdt_sites`.
pub fn template(provider: &str, name: &str, sig: &Signature, section_ty: &str) -> Vec<String> {
    let mut l = vec![
        ".macro __usdt_signature_start __usdt_n".to_owned(),
        format!(".pushsection {SECTION}, \"o\", {section_ty}progbits, .L__usdt_site_\\__usdt_n"),
        ".endm".to_owned(),
        ".altmacro".to_owned(),
        "__usdt_signature_start %(.L__usdt_sites)".to_owned(),
        ".noaltmacro".to_owned(),
        ".purgem __usdt_signature_start".to_owned(),
        // Version, declared arguments, flags, length of the rest.
        format!(".byte {VERSION}, {}", sig.args.len()),
        ".2byte 0".to_owned(),
        ".4byte 996f - 995f".to_owned(),
        // Location: the same site as the note's.
        "995: .8byte 990b".to_owned(),
        format!(".asciz \"{}\"", escape(provider)),
        format!(".asciz \"{}\"", escape(name)),
    ];
    for (i, arg) in sig.args.iter().enumerate() {
        l.push(format!(".byte {{k{i}}}"));
        l.push(format!(".asciz \"{}\"", escape(&arg.name)));
        l.push(format!(".asciz \"{}\"", escape(&arg.ty)));
    }
    l.extend(["996:".to_owned(), ".popsection".to_owned()]);
    l
}

/// Text inside an assembler string in an `asm!` template: `"` and `\`
/// escaped for the assembler, braces doubled for the template.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '{' => out.push_str("{{"),
            '}' => out.push_str("}}"),
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(escape("&'a str"), "&'a str");
        assert_eq!(escape("a\"b\\{}"), "a\\\"b\\\\{{}}");
        assert_eq!(escape("é"), "\\303\\251");
    }
}
