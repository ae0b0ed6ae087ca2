//! Argument types: which declared types a probe accepts, and how each is bound
//! at the call site and turned into a register operand.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{PathArguments, Type, TypePath};

/// How one declared argument is passed.
pub enum ArgType {
    /// A value that goes into a register as it is (`ProbeArg`). `binding` is the
    /// type of the call site's `let`, which checks the argument's type there;
    /// pointer and reference pointees are inferred (`*const _`), since a type
    /// named in the provider module need not be in scope at the call site.
    Value { binding: TokenStream },
    /// A reference (`&T`, `&mut T`): its address is passed, as a raw pointer.
    Ref { binding: TokenStream },
    /// `&str` or `String` (`StrArg`): copied, NUL-terminated, while traced.
    Str { binding: TokenStream },
    /// `&[u8]` or `Vec<u8>`: two operands, the address and the length.
    Bytes { binding: TokenStream },
}

impl ArgType {
    /// Strings need work before the site: a semaphore check and a copy.
    pub fn is_str(&self) -> bool {
        matches!(self, ArgType::Str { .. })
    }

    pub fn binding(&self) -> &TokenStream {
        match self {
            ArgType::Value { binding }
            | ArgType::Ref { binding }
            | ArgType::Str { binding }
            | ArgType::Bytes { binding } => binding,
        }
    }

    /// How many note operands the argument takes.
    pub fn operands(&self) -> usize {
        match self {
            ArgType::Bytes { .. } => 2,
            _ => 1,
        }
    }
}

const SUPPORTED: &str = "a probe argument is an integer type, `bool`, `char`, `f32`, `f64`, \
     a raw pointer, a reference to a sized value, `&str`, `String`, `&CStr`, `CString`, \
     `&[u8]`, `Vec<u8>`, `Duration`, or a type that implements `usdt::ProbeArg`";

const PRIMITIVES: &[&str] = &[
    "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize", "bool", "char", "f32",
    "f64",
];

/// Primitive types that no probe operand holds.
const NOT_ARGS: &[&str] = &["str", "u128", "i128", "f16", "f128"];

const FFI_INTEGERS: &[&str] = &[
    "c_char",
    "c_schar",
    "c_uchar",
    "c_short",
    "c_ushort",
    "c_int",
    "c_uint",
    "c_long",
    "c_ulong",
    "c_longlong",
    "c_ulonglong",
];

/// Maps a declared type to how it is passed, or an error spanning the type.
/// `krate` is the facade's path (`::usdt`), which names the `alloc` types.
pub fn classify(ty: &Type, krate: &TokenStream) -> syn::Result<ArgType> {
    match ty {
        Type::Paren(inner) => classify(&inner.elem, krate),
        Type::Group(inner) => classify(&inner.elem, krate),
        Type::Path(path) => classify_path(path, krate),
        Type::Ptr(ptr) => {
            let pointee = nameable(&ptr.elem).unwrap_or_else(|| quote!(_));
            let binding = match ptr.mutability {
                Some(_) => quote!(*mut #pointee),
                None => quote!(*const #pointee),
            };
            Ok(ArgType::Value { binding })
        }
        Type::Reference(reference) => classify_reference(reference),
        _ => Err(unsupported(ty)),
    }
}

fn classify_reference(reference: &syn::TypeReference) -> syn::Result<ArgType> {
    let elem = strip(&reference.elem);
    if let Type::Path(path) = elem {
        match last_ident(path).as_deref() {
            Some("str") if path.path.segments.len() == 1 && reference.mutability.is_none() => {
                return Ok(ArgType::Str {
                    binding: quote!(&::core::primitive::str),
                });
            }
            Some("CStr") if reference.mutability.is_none() => {
                return Ok(ArgType::Value {
                    binding: quote!(&::core::ffi::CStr),
                });
            }
            Some("str" | "CStr") => return Err(unsupported(&Type::Reference(reference.clone()))),
            _ => {}
        }
    }
    if reference.mutability.is_none() && is_byte_slice(elem) {
        return Ok(ArgType::Bytes {
            binding: quote!(&[::core::primitive::u8]),
        });
    }
    match elem {
        Type::Slice(_) | Type::TraitObject(_) | Type::ImplTrait(_) => {
            Err(unsupported(&Type::Reference(reference.clone())))
        }
        _ => {
            let pointee = nameable(elem).unwrap_or_else(|| quote!(_));
            let binding = match reference.mutability {
                Some(_) => quote!(&mut #pointee),
                None => quote!(&#pointee),
            };
            Ok(ArgType::Ref { binding })
        }
    }
}

fn classify_path(path: &TypePath, krate: &TokenStream) -> syn::Result<ArgType> {
    let err = || unsupported(&Type::Path(path.clone()));
    if path.qself.is_some() {
        return Err(err());
    }
    if is_byte_vec(path) {
        return Ok(ArgType::Bytes {
            binding: quote!(#krate::__private::Vec<::core::primitive::u8>),
        });
    }
    let Some(last) = last_ident(path) else {
        return Err(err());
    };
    let single = path.path.segments.len() == 1 && path.path.leading_colon.is_none();
    if single && PRIMITIVES.contains(&last.as_str()) {
        let ident = syn::Ident::new(&last, path.span());
        return Ok(ArgType::Value {
            binding: quote!(::core::primitive::#ident),
        });
    }
    if FFI_INTEGERS.contains(&last.as_str()) {
        let ident = syn::Ident::new(&last, path.span());
        return Ok(ArgType::Value {
            binding: quote!(::core::ffi::#ident),
        });
    }
    match last.as_str() {
        "String" => Ok(ArgType::Str {
            binding: quote!(#krate::__private::String),
        }),
        "CString" => Ok(ArgType::Value {
            binding: quote!(#krate::__private::CString),
        }),
        "Duration" => Ok(ArgType::Value {
            binding: quote!(::core::time::Duration),
        }),
        _ if single && NOT_ARGS.contains(&last.as_str()) => Err(err()),
        // Any other named type passes through `usdt::ProbeArg` (a derive or a
        // hand-written impl; the provider checks the impl where the type is
        // declared). The call site names it only when its path resolves
        // anywhere in the crate (`crate::..`, `::..`); otherwise inference
        // takes the caller's type and the trait bound checks it.
        _ => Ok(ArgType::Value {
            binding: match path.path.segments.first() {
                Some(first) if path.path.leading_colon.is_some() || first.ident == "crate" => {
                    quote!(#path)
                }
                _ => quote!(_),
            },
        }),
    }
}

/// Whether `ty` is a user type checked through `usdt::ProbeArg` (not one of
/// the types the macro knows).
pub fn is_user_type(ty: &Type) -> bool {
    let Type::Path(path) = strip(ty) else {
        return false;
    };
    let Some(last) = last_ident(path) else {
        return false;
    };
    let known = PRIMITIVES.contains(&last.as_str())
        || NOT_ARGS.contains(&last.as_str())
        || FFI_INTEGERS.contains(&last.as_str())
        || matches!(last.as_str(), "String" | "CString" | "Duration");
    !known && path.qself.is_none()
}

/// `[u8]`.
fn is_byte_slice(ty: &Type) -> bool {
    matches!(strip(ty), Type::Slice(s) if is_u8(&s.elem))
}

/// `Vec<u8>` (also spelled with a path, `std::vec::Vec<u8>`).
fn is_byte_vec(path: &TypePath) -> bool {
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return false;
    };
    let earlier_plain = path
        .path
        .segments
        .iter()
        .rev()
        .skip(1)
        .all(|s| s.arguments.is_none());
    last.ident == "Vec"
        && earlier_plain
        && args.args.len() == 1
        && matches!(&args.args[0], syn::GenericArgument::Type(t) if is_u8(t))
}

fn is_u8(ty: &Type) -> bool {
    matches!(strip(ty), Type::Path(p) if p.qself.is_none() && p.path.is_ident("u8"))
}

/// The type as written in the source, with the spacing Rust code uses
/// (`&str`, `Vec<u8>`, `*const u8`, `std::time::Duration`): what the
/// signature record and `usdt list` show.
pub fn type_text(ty: &Type) -> String {
    let mut s = quote!(#ty).to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        ("[ ", "["),
        (" ]", "]"),
        ("( ", "("),
        (" )", ")"),
        (" ;", ";"),
        ("& ", "&"),
        ("* const", "*const"),
        ("* mut", "*mut"),
    ] {
        s = s.replace(from, to);
    }
    s
}

/// The pointee of a pointer or reference, spelled so that it resolves at any
/// call site: primitives, `core::ffi` integers, and pointers, references and
/// arrays of those. Other types are left to inference (`*const _`), since
/// their names need not be in scope where the probe fires.
fn nameable(ty: &Type) -> Option<TokenStream> {
    match strip(ty) {
        Type::Path(path) if path.qself.is_none() => {
            let last = last_ident(path)?;
            let ident = syn::Ident::new(&last, path.span());
            let single = path.path.segments.len() == 1 && path.path.leading_colon.is_none();
            if single && PRIMITIVES.contains(&last.as_str()) {
                Some(quote!(::core::primitive::#ident))
            } else if FFI_INTEGERS.contains(&last.as_str()) {
                Some(quote!(::core::ffi::#ident))
            } else {
                None
            }
        }
        Type::Ptr(ptr) => {
            let inner = nameable(&ptr.elem)?;
            Some(match ptr.mutability {
                Some(_) => quote!(*mut #inner),
                None => quote!(*const #inner),
            })
        }
        Type::Reference(r) => {
            let inner = nameable(&r.elem)?;
            Some(match r.mutability {
                Some(_) => quote!(&mut #inner),
                None => quote!(&#inner),
            })
        }
        Type::Array(array) => {
            let inner = nameable(&array.elem)?;
            let len = &array.len;
            Some(quote!([#inner; #len]))
        }
        _ => None,
    }
}

/// The last segment's name, when no segment has generic arguments.
fn last_ident(path: &TypePath) -> Option<String> {
    let generic = path
        .path
        .segments
        .iter()
        .any(|s| !matches!(s.arguments, PathArguments::None));
    if generic {
        return None;
    }
    path.path.segments.last().map(|s| s.ident.to_string())
}

fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => strip(&inner.elem),
        Type::Group(inner) => strip(&inner.elem),
        _ => ty,
    }
}

fn unsupported(ty: &Type) -> syn::Error {
    let text = type_text(ty);
    let hint = match ty {
        Type::Reference(r) if matches!(strip(&r.elem), Type::Slice(_)) => {
            "; pass other slices as a pointer and a length (`*const T`, `usize`)"
        }
        Type::Tuple(t) if t.elems.is_empty() => "; a probe without this argument needs no `()`",
        _ => "",
    };
    syn::Error::new_spanned(
        ty,
        format!("unsupported probe argument type `{text}`: {SUPPORTED}{hint}"),
    )
}
