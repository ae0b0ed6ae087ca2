//! The C types of probe arguments, and how a value of each is shown: a
//! `char *` as the string it points to, an integer as the note's operand
//! reads it (its size and sign come from the note, not from the type),
//! any other pointer as an address.

use crate::elf::signature::Kind;

/// A C type as a provider file writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CType {
    /// How it is shown: qualifiers dropped, one space between words, ` *`
    /// per pointer (`char *`, `unsigned int`, `LWLockMode`, `void **`).
    pub(super) text: String,
    /// What it is below its pointers.
    pub(super) base: Base,
    /// How many `*`.
    pub(super) pointers: u8,
}

/// A type below its pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Base {
    /// `void`.
    Void,
    /// `char` without `signed` or `unsigned`, or D's `string` (a `char *`
    /// already).
    Char,
    /// An integer: its size and sign (a `char` with `signed` or
    /// `unsigned` too).
    Int { size: u8, signed: bool },
    /// `bool`, `_Bool`.
    Bool,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A name defined by `#define` or `typedef`: what it stands for.
    Alias(Box<CType>),
    /// A name this file does not define (a typedef of the program's own,
    /// `struct x`, `enum x`): an integer as the note sizes it, an address
    /// when it is a pointer.
    Opaque,
}

/// The integer and character words of C, in any order.
pub(super) const INT_WORDS: &[&str] = &["unsigned", "signed", "short", "long", "int", "char"];

/// The types that are not words of C: the fixed-width and system
/// typedefs a provider file may use without defining them, and D's own
/// (`uchar_t`, `string`).
const KNOWN_NAMES: &[(&str, Base)] = &[
    ("int8_t", int(1, true)),
    ("int16_t", int(2, true)),
    ("int32_t", int(4, true)),
    ("int64_t", int(8, true)),
    ("uint8_t", int(1, false)),
    ("uint16_t", int(2, false)),
    ("uint32_t", int(4, false)),
    ("uint64_t", int(8, false)),
    ("intptr_t", int(8, true)),
    ("uintptr_t", int(8, false)),
    ("size_t", int(8, false)),
    ("ssize_t", int(8, true)),
    ("off_t", int(8, true)),
    ("off64_t", int(8, true)),
    ("pid_t", int(4, true)),
    ("uid_t", int(4, false)),
    ("gid_t", int(4, false)),
    ("uchar_t", int(1, false)),
    ("ushort_t", int(2, false)),
    ("uint_t", int(4, false)),
    ("ulong_t", int(8, false)),
    ("longlong_t", int(8, true)),
    ("u_longlong_t", int(8, false)),
    ("bool", Base::Bool),
    ("_Bool", Base::Bool),
    ("float", Base::F32),
    ("double", Base::F64),
    ("void", Base::Void),
];

const fn int(size: u8, signed: bool) -> Base {
    Base::Int { size, signed }
}

impl CType {
    /// A type of C's integer words (`unsigned long`, `char`), or `None`
    /// for a combination C refuses (`short char`, `long long long`).
    pub(super) fn from_int_words(words: &[String]) -> Option<CType> {
        let count = |w: &str| words.iter().filter(|x| *x == w).count();
        let (unsigned, signed) = (count("unsigned"), count("signed"));
        let (short, long, ints, char) =
            (count("short"), count("long"), count("int"), count("char"));
        if unsigned + signed > 1 || short > 1 || long > 2 || ints > 1 || char > 1 {
            return None;
        }
        if (short > 0 && long > 0) || (char > 0 && short + long + ints > 0) {
            return None;
        }
        let base = match (char, short, long) {
            (1, _, _) if unsigned + signed == 0 => Base::Char,
            (1, _, _) => int(1, signed > 0),
            (_, 1, _) => int(2, unsigned == 0),
            (_, _, 0) => int(4, unsigned == 0),
            _ => int(8, unsigned == 0),
        };
        Some(CType::plain(words.join(" "), base))
    }

    /// A type of one name: a C or D word, a name the file defined
    /// (`aliases`), or one it did not (opaque).
    pub(super) fn named(name: &str, alias: Option<&CType>) -> CType {
        if let Some(alias) = alias {
            return CType::plain(name.into(), Base::Alias(Box::new(alias.clone())));
        }
        if name == "string" {
            return CType {
                text: "string".into(),
                base: Base::Char,
                pointers: 1,
            };
        }
        let base = KNOWN_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Base::Opaque, |(_, b)| b.clone());
        CType::plain(name.into(), base)
    }

    /// `struct x`, `union x`, `enum x`.
    pub(super) fn tagged(tag: &str, name: &str) -> CType {
        let base = if tag == "enum" {
            int(4, true)
        } else {
            Base::Opaque
        };
        CType::plain(format!("{tag} {name}"), base)
    }

    fn plain(text: String, base: Base) -> CType {
        CType {
            text,
            base,
            pointers: 0,
        }
    }

    /// This type with one more `*`.
    pub(super) fn pointer(mut self) -> CType {
        self.pointers = self.pointers.saturating_add(1);
        if self.pointers == 1 {
            self.text.push_str(" *");
        } else {
            self.text.push('*');
        }
        self
    }

    /// Through its aliases: what it is below all pointers, and how many
    /// there are in all.
    fn resolved(&self) -> (&Base, u8) {
        match &self.base {
            Base::Alias(inner) => {
                let (base, n) = inner.resolved();
                (base, n.saturating_add(self.pointers))
            }
            base => (base, self.pointers),
        }
    }

    /// Whether it is `void` (an argument cannot be).
    pub(super) fn is_void(&self) -> bool {
        matches!(self.resolved(), (Base::Void, 0))
    }

    /// How a value of this type is shown: `char *` (a `char` pointer of
    /// any qualifiers) is a string read at the hit, another pointer an
    /// address, a number as the note's operand reads it.
    pub(super) fn kind(&self) -> Kind {
        match self.resolved() {
            (Base::Char, 1) => Kind::CStr,
            (_, 1..) => Kind::Pointer,
            (Base::Char, 0) => Kind::Signed(1),
            (Base::Int { size, signed: true }, 0) => Kind::Signed(*size),
            (
                Base::Int {
                    size,
                    signed: false,
                },
                0,
            ) => Kind::Unsigned(*size),
            (Base::Bool, 0) => Kind::Bool,
            (Base::F32, 0) => Kind::F32,
            (Base::F64, 0) => Kind::F64,
            (Base::Void | Base::Opaque | Base::Alias(_), 0) => {
                Kind::Custom(usdt_runtime::kind::CUSTOM)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Option<CType> {
        let w: Vec<String> = s.split(' ').map(String::from).collect();
        CType::from_int_words(&w)
    }

    #[test]
    fn integer_words() {
        assert_eq!(words("unsigned int").unwrap().kind(), Kind::Unsigned(4));
        assert_eq!(words("long unsigned").unwrap().kind(), Kind::Unsigned(8));
        assert_eq!(words("long long").unwrap().kind(), Kind::Signed(8));
        assert_eq!(words("short").unwrap().kind(), Kind::Signed(2));
        assert_eq!(words("unsigned char").unwrap().kind(), Kind::Unsigned(1));
        assert_eq!(words("char").unwrap().kind(), Kind::Signed(1));
        assert_eq!(words("unsigned").unwrap().text, "unsigned");
        for bad in [
            "short char",
            "long long long",
            "signed unsigned",
            "short long",
            "int int",
        ] {
            assert!(words(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn pointers_and_names() {
        let s = words("char").unwrap().pointer();
        assert_eq!((s.text.as_str(), s.kind()), ("char *", Kind::CStr));
        let pp = s.pointer();
        assert_eq!((pp.text.as_str(), pp.kind()), ("char **", Kind::Pointer));
        assert_eq!(
            words("unsigned char").unwrap().pointer().kind(),
            Kind::Pointer
        );
        assert_eq!(CType::named("uint64_t", None).kind(), Kind::Unsigned(8));
        assert_eq!(CType::named("string", None).kind(), Kind::CStr);
        assert_eq!(CType::named("void", None).pointer().kind(), Kind::Pointer);
        assert!(CType::named("void", None).is_void());
        let opaque = CType::named("BlockNumber", None);
        assert_eq!(opaque.kind(), Kind::Custom(usdt_runtime::kind::CUSTOM));
        assert_eq!(opaque.pointer().kind(), Kind::Pointer);
        // An alias keeps its name, and is what it stands for.
        let text = CType::named("text", Some(&words("char").unwrap().pointer()));
        assert_eq!((text.text.as_str(), text.kind()), ("text", Kind::CStr));
        let oid = CType::named("Oid", Some(&words("unsigned int").unwrap()));
        assert_eq!((oid.text.as_str(), oid.kind()), ("Oid", Kind::Unsigned(4)));
        assert_eq!(CType::tagged("struct", "x").pointer().text, "struct x *");
    }
}
