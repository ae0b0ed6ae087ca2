//! What a probe's arguments are called, what their types are, and where
//! that was learnt: the one place a tracer asks.
//!
//! Three sources, in this order:
//! 1. the signature records `#[usdt::provider]` probes write beside their
//!    notes (`.usdt.signatures`, [`read_signatures`](crate::read_signatures)),
//!    used when their operands fit the note's;
//! 2. DTrace provider files a user gives ([`Declarations::add_file`]);
//! 3. the built-in catalog of the provider files of widely shipped
//!    programs ([`Declarations::catalog`]).
//!
//! A declaration (2, 3) describes a site of the same provider and probe
//! name (a `__` in either matching a `-` in the other, as DTrace shows
//! `query__start` as `query-start`) with as many operands as it has
//! arguments. Each answer says where it came from ([`SignatureSource`]).

mod catalog;
mod dfile;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use catalog::CATALOG;
pub use dfile::{parse_provider_file, ParseError};

use crate::elf::note::Site;
use crate::elf::signature::{read_file_signatures, Kind, Param, Signature};
use crate::sample::value::Hit;
use crate::Error;

/// Where a probe's argument names and types come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SignatureSource {
    /// The signature record the binary carries (`.usdt.signatures`).
    Record,
    /// A provider file given by the user.
    File(PathBuf),
    /// The built-in catalog's provider file of this name (`python`).
    Catalog(&'static str),
}

impl fmt::Display for SignatureSource {
    /// `record`, `types: FILE`, `catalog: python`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureSource::Record => f.write_str("record"),
            SignatureSource::File(path) => write!(f, "types: {}", path.display()),
            SignatureSource::Catalog(name) => write!(f, "catalog: {name}"),
        }
    }
}

/// A probe name as declarations and notes are matched: `__` as `-`.
fn probe_key(name: &str) -> String {
    name.replace("__", "-")
}

/// Probes declared by provider files, by provider, name and argument
/// count: one file may declare the same probe as another with other
/// arguments (two versions of a program), and the declaration added last
/// wins for the same count.
#[derive(Clone, Debug, Default)]
pub struct Declarations {
    by_probe: HashMap<(String, String, usize), (Signature, SignatureSource)>,
}

impl Declarations {
    /// None.
    pub fn new() -> Declarations {
        Declarations::default()
    }

    /// The built-in catalog ([`CATALOG`]): the provider files of CPython,
    /// PostgreSQL, libstdc++, Ruby and HotSpot, as this crate writes them.
    pub fn catalog() -> &'static Declarations {
        static CATALOG_DECLARATIONS: std::sync::OnceLock<Declarations> = std::sync::OnceLock::new();
        CATALOG_DECLARATIONS.get_or_init(|| {
            let mut d = Declarations::new();
            for (name, text) in CATALOG {
                // Each file is checked by this crate's tests.
                if let Ok(sigs) = parse_provider_file(text) {
                    d.add(sigs, &SignatureSource::Catalog(name));
                }
            }
            d
        })
    }

    /// Adds declarations from `source`; each replaces one of the same
    /// provider, name and argument count.
    pub fn add(&mut self, sigs: impl IntoIterator<Item = Signature>, source: &SignatureSource) {
        for sig in sigs {
            let key = (sig.provider.clone(), probe_key(&sig.name), sig.params.len());
            self.by_probe.insert(key, (sig, source.clone()));
        }
    }

    /// Adds what the provider file at `path` declares. A file that cannot
    /// be read, is not UTF-8 or is malformed is an error with its line
    /// and column ([`Error::ProviderFile`]).
    pub fn add_file(&mut self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        let bad = |e: ParseError| Error::ProviderFile {
            path: path.into(),
            line: e.line,
            column: e.column,
            message: e.message,
        };
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let (line, column) = dfile::position(&bytes, e.valid_up_to());
            bad(ParseError {
                line,
                column,
                message: "the file is not UTF-8 text".into(),
            })
        })?;
        let sigs = parse_provider_file(text).map_err(bad)?;
        self.add(sigs, &SignatureSource::File(path.into()));
        Ok(())
    }

    /// Adds `other`'s declarations over these.
    pub fn extend(&mut self, other: &Declarations) {
        for (key, value) in &other.by_probe {
            self.by_probe.insert(key.clone(), value.clone());
        }
    }

    /// The declaration of `provider:name` with `args` arguments.
    pub fn get(
        &self,
        provider: &str,
        name: &str,
        args: usize,
    ) -> Option<(&Signature, &SignatureSource)> {
        self.by_probe
            .get(&(provider.to_owned(), probe_key(name), args))
            .map(|(sig, source)| (sig, source))
    }

    /// How many probes are declared.
    pub fn len(&self) -> usize {
        self.by_probe.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_probe.is_empty()
    }
}

/// An argument of a probe, found by the name a user wrote
/// ([`Signatures::arg_named`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedArg<'a> {
    /// Its note operand (the first, for a byte slice's address).
    pub operand: usize,
    /// Its parameter in the probe's signature, if the probe has one.
    pub param: Option<&'a Param>,
}

impl NamedArg<'_> {
    /// The parameter's kind, if recorded or declared.
    pub fn kind(&self) -> Option<Kind> {
        self.param.map(|p| p.kind)
    }
}

/// The names and types of the probes of a set of files: their signature
/// records, by `provider:name`, over [`Declarations`]. What `usdt list`,
/// `usdt trace` and the aggregations look probes up in.
#[derive(Clone, Debug, Default)]
pub struct Signatures {
    by_probe: HashMap<(String, String), Option<Signature>>,
    declared: Arc<Declarations>,
}

impl Signatures {
    /// An empty set: every probe shows as `arg0..argN`.
    pub fn new() -> Signatures {
        Signatures::default()
    }

    /// No records yet, over `declared`.
    pub fn with_declarations(declared: Arc<Declarations>) -> Signatures {
        Signatures {
            by_probe: HashMap::new(),
            declared,
        }
    }

    /// Adds records. Two records of one probe that differ (two crates
    /// declaring `provider:name` differently) cancel out: that probe then
    /// shows as `arg0..argN`, or as declared.
    pub fn extend(&mut self, records: impl IntoIterator<Item = Signature>) {
        for mut sig in records {
            sig.location = 0;
            let key = (sig.provider.clone(), sig.name.clone());
            match self.by_probe.get(&key) {
                None => {
                    self.by_probe.insert(key, Some(sig));
                }
                Some(Some(known)) if *known != sig => {
                    self.by_probe.insert(key, None);
                }
                Some(_) => {}
            }
        }
    }

    /// Adds the records of the ELF file at `path`; a file without them, or
    /// unreadable, adds none.
    pub fn add_file(&mut self, path: impl AsRef<Path>) {
        if let Ok(records) = read_file_signatures(path) {
            self.extend(records);
        }
    }

    /// The record of `provider:name`, when there is exactly one (records
    /// only: declarations are looked up by argument count too, [`find`](Self::find)).
    pub fn get(&self, provider: &str, name: &str) -> Option<&Signature> {
        self.by_probe
            .get(&(provider.to_owned(), name.to_owned()))
            .and_then(Option::as_ref)
    }

    /// The signature of probe `provider:name` with `operands` note
    /// operands, and where it comes from: its record when the record takes
    /// as many operands, else its declaration with as many arguments.
    pub fn find(
        &self,
        provider: &str,
        name: &str,
        operands: usize,
    ) -> Option<(&Signature, &SignatureSource)> {
        const RECORD: &SignatureSource = &SignatureSource::Record;
        match self.get(provider, name) {
            Some(sig) if sig.operands() == operands => Some((sig, RECORD)),
            _ => self.declared.get(provider, name, operands),
        }
    }

    /// The signature that describes `site`, if any.
    pub fn of_site(&self, site: &Site) -> Option<&Signature> {
        self.source_of_site(site).map(|(sig, _)| sig)
    }

    /// The signature that describes `site`, and where it comes from.
    pub fn source_of_site(&self, site: &Site) -> Option<(&Signature, &SignatureSource)> {
        self.find(&site.provider, &site.name, site.args.len())
    }

    /// The signature that describes `hit`'s values, if any.
    pub fn of_hit(&self, hit: &Hit) -> Option<&Signature> {
        self.find(&hit.provider, &hit.name, hit.args.len())
            .map(|(sig, _)| sig)
    }

    /// The note operand of `site` that `name` names, as a user writes it:
    /// a parameter of the probe's signature, or `argN` (an operand
    /// index); with the parameter's signature (its kind and type as
    /// written), when there is one. `None` when the probe has no such
    /// argument ([`Signatures::arg_names`] says what it has).
    pub fn arg_named(&self, site: &Site, name: &str) -> Option<NamedArg<'_>> {
        let sig = self.of_site(site);
        let at = sig.map(Signature::operand_indices).unwrap_or_default();
        if let Some(sig) = sig {
            if let Some(i) = sig.params.iter().position(|p| p.name == name) {
                return Some(NamedArg {
                    operand: at[i],
                    param: Some(&sig.params[i]),
                });
            }
        }
        let n = name.strip_prefix("arg")?.parse::<usize>().ok()?;
        if n >= site.args.len() {
            return None;
        }
        let param = sig.and_then(|sig| {
            let p = at.iter().position(|i| *i == n)?;
            sig.params.get(p)
        });
        Some(NamedArg { operand: n, param })
    }

    /// What the arguments of `site` are called, for a message about a name
    /// it does not have: `id, path or arg0 to arg1`, `arg0 to arg2`, or
    /// `nothing: it has no arguments`.
    pub fn arg_names(&self, site: &Site) -> String {
        let last = site.args.len().saturating_sub(1);
        match self.of_site(site) {
            Some(sig) => {
                let names: Vec<&str> = sig.params.iter().map(|p| p.name.as_str()).collect();
                format!("{} or arg0 to arg{last}", names.join(", "))
            }
            None if site.args.is_empty() => "nothing: it has no arguments".into(),
            None => format!("arg0 to arg{last}"),
        }
    }

    /// Whether there are no records and no declarations.
    pub fn is_empty(&self) -> bool {
        self.by_probe.is_empty() && self.declared.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(provider: &str, name: &str, params: &[(&str, Kind)]) -> Signature {
        Signature {
            provider: provider.into(),
            name: name.into(),
            location: 0,
            params: params
                .iter()
                .map(|(n, k)| Param {
                    name: (*n).into(),
                    ty: "t".into(),
                    kind: *k,
                })
                .collect(),
        }
    }

    #[test]
    fn records_then_files_then_the_catalog() {
        let mut declared = Declarations::catalog().clone();
        let file = SignatureSource::File("mine.d".into());
        declared.add(
            [sig(
                "python",
                "gc__start",
                &[("generation", Kind::Signed(4))],
            )],
            &file,
        );
        let mut sigs = Signatures::with_declarations(Arc::new(declared));
        // The catalog, matched by argument count.
        let (entry, source) = sigs.find("python", "function__entry", 3).unwrap();
        assert_eq!(*source, SignatureSource::Catalog("python"));
        assert_eq!(
            entry.display(),
            "python:function__entry(filename: char *, funcname: char *, lineno: int)"
        );
        assert!(sigs.find("python", "function__entry", 4).is_none());
        // A file over the catalog; `__` matches `-`.
        assert_eq!(sigs.find("python", "gc-start", 1).unwrap().1, &file);
        // A record over both, when its operands fit.
        sigs.extend([sig("python", "gc__start", &[("g", Kind::Bytes)])]);
        assert_eq!(sigs.find("python", "gc__start", 1).unwrap().1, &file);
        assert_eq!(
            sigs.find("python", "gc__start", 2).unwrap().1,
            &SignatureSource::Record
        );
        assert_eq!(file.to_string(), "types: mine.d");
        assert!(!sigs.is_empty() && Signatures::new().is_empty());
    }

    #[test]
    fn a_malformed_file_is_an_error_with_its_position() {
        let dir = std::env::temp_dir().join(format!("usdt-types-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.d");
        std::fs::write(&path, "provider p {\n  probe a(int;\n};\n").unwrap();
        let e = Declarations::new().add_file(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2:14: expected `,` or `)` after an argument, found `;`",
                path.display()
            )
        );
        std::fs::write(&path, b"provider p {\n  probe \xff").unwrap();
        let e = Declarations::new().add_file(&path).unwrap_err();
        assert!(
            e.to_string().ends_with(":2:9: the file is not UTF-8 text"),
            "{e}"
        );
        std::fs::write(&path, "provider p { probe a(const char *q); };").unwrap();
        let mut d = Declarations::new();
        d.add_file(&path).unwrap();
        assert_eq!(d.get("p", "a", 1).unwrap().0.params[0].kind, Kind::CStr);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
