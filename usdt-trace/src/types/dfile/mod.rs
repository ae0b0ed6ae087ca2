//! DTrace provider files (`provider NAME { probe NAME(TYPE [name], ...); };`),
//! the language DTrace, SystemTap's `dtrace -G` and oxidecomputer/usdt
//! read, and in which programs publish their probes' types (CPython's
//! `Include/pydtrace.d`, PostgreSQL's `src/backend/utils/probes.d`).
//!
//! Read here: providers and probes, C types (qualifiers dropped), names
//! defined by `#define NAME TYPE` and `typedef TYPE NAME;`, argument names
//! when the file gives them. Skipped: comments, every other preprocessor
//! line (`#pragma D attributes`, `#include`, `#if`: both branches are
//! read), `translator` blocks, structure definitions and `inline`
//! constants. Anything else is an error with its line and column.

mod ctype;
mod lex;
mod parse;

use std::fmt;

use crate::elf::signature::{Param, Signature};

/// Where and why a provider file cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based.
    pub line: u32,
    /// 1-based, in characters.
    pub column: u32,
    /// What is wrong, lowercase (`expected `;` after the probe's `)`, found `}``).
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// One `provider` block.
#[derive(Clone, Debug)]
struct ProviderDecl {
    name: String,
    probes: Vec<ProbeDecl>,
}

/// One `probe` line: the name, each parameter's name (when given) and type.
#[derive(Clone, Debug)]
struct ProbeDecl {
    name: String,
    line: u32,
    column: u32,
    params: Vec<(Option<String>, ctype::CType)>,
}

/// The probes a provider file declares, as signatures (argument names
/// `arg0`.. where the file gives none; Location 0).
pub fn parse_provider_file(text: &str) -> Result<Vec<Signature>, ParseError> {
    let providers = parse::Parser::new(lex::tokens(text)?).file()?;
    let mut out: Vec<Signature> = vec![];
    let mut seen = std::collections::HashMap::new();
    for provider in providers {
        for probe in provider.probes {
            let key = (provider.name.clone(), probe.name.clone());
            if let Some(first) = seen.insert(key, probe.line) {
                return Err(ParseError {
                    line: probe.line,
                    column: probe.column,
                    message: format!(
                        "probe {}:{} is declared twice (first on line {first})",
                        provider.name, probe.name
                    ),
                });
            }
            let params = probe
                .params
                .iter()
                .enumerate()
                .map(|(i, (name, ty))| Param {
                    name: name.clone().unwrap_or_else(|| format!("arg{i}")),
                    ty: ty.text.clone(),
                    kind: ty.kind(),
                })
                .collect();
            out.push(Signature {
                provider: provider.name.clone(),
                name: probe.name,
                location: 0,
                params,
            });
        }
    }
    Ok(out)
}

/// The line and column of byte `at` of `bytes` (for text that is not
/// UTF-8 past there).
pub(crate) fn position(bytes: &[u8], at: usize) -> (u32, u32) {
    let before = String::from_utf8_lossy(&bytes[..at.min(bytes.len())]);
    let line = before.matches('\n').count() as u32 + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::signature::Kind;

    fn shown(text: &str) -> Vec<String> {
        parse_provider_file(text)
            .unwrap()
            .iter()
            .map(Signature::display)
            .collect()
    }

    fn error(text: &str) -> String {
        parse_provider_file(text).unwrap_err().to_string()
    }

    /// The shape of PostgreSQL's file: a comment block, `#define`d type
    /// names, tabs, probes without argument names.
    #[test]
    fn a_file_like_postgresqls() {
        let text = "/* ----------\n *\tDTrace probes\n * ----------\n */\n\
            #define LocalTransactionId unsigned int\n#define LWLockMode int\n#define bool char\n\n\
            provider postgresql {\n\n\tprobe transaction__start(LocalTransactionId);\n\
            \tprobe lwlock__acquire(const char *, LWLockMode);\n\
            \tprobe sort__done(bool, long);\n\tprobe query__plan__start();\n\
            \tprobe buffer__read__start(ForkNumber, BlockNumber, Oid);\n};\n";
        let sigs = parse_provider_file(text).unwrap();
        assert_eq!(
            sigs.iter().map(Signature::display).collect::<Vec<_>>(),
            [
                "postgresql:transaction__start(arg0: LocalTransactionId)",
                "postgresql:lwlock__acquire(arg0: char *, arg1: LWLockMode)",
                "postgresql:sort__done(arg0: bool, arg1: long)",
                "postgresql:query__plan__start()",
                "postgresql:buffer__read__start(arg0: ForkNumber, arg1: BlockNumber, arg2: Oid)",
            ]
        );
        let kinds = |i: usize| sigs[i].params.iter().map(|p| p.kind).collect::<Vec<_>>();
        assert_eq!(kinds(0), [Kind::Unsigned(4)]);
        assert_eq!(kinds(1), [Kind::CStr, Kind::Signed(4)]);
        assert_eq!(kinds(2), [Kind::Signed(1), Kind::Signed(8)]);
        assert_eq!(kinds(4)[0], Kind::Custom(usdt_runtime::kind::CUSTOM));
    }

    /// CPython's: pragmas after the provider; Ruby's: directives and
    /// comments inside it, named arguments.
    #[test]
    fn pragmas_directives_and_names() {
        let text =
            "provider python {\n    probe function__entry(const char *, const char *, int);\n\
            #if DETAILS\n  /* c */ probe insn(const char *insn);\n#endif\n};\n\n\
            #pragma D attributes Evolving/Evolving/Common provider python provider\n";
        assert_eq!(
            shown(text),
            [
                "python:function__entry(arg0: char *, arg1: char *, arg2: int)",
                "python:insn(insn: char *)"
            ]
        );
        let named = "provider p { probe q(const char * const query, unsigned long long n, void *, uint64_t u, struct s **ss, string t); };";
        assert_eq!(
            shown(named),
            ["p:q(query: char *, n: unsigned long long, arg2: void *, u: uint64_t, ss: struct s **, t: string)"]
        );
        let sig = &parse_provider_file(named).unwrap()[0];
        let kinds: Vec<Kind> = sig.params.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::CStr,
                Kind::Unsigned(8),
                Kind::Pointer,
                Kind::Unsigned(8),
                Kind::Pointer,
                Kind::CStr
            ]
        );
    }

    #[test]
    fn skipped_declarations() {
        let text = "typedef struct conn { int fd; } conn_t;\ntypedef unsigned short port_t;\n\
            struct info { char *name; };\ninline int LIMIT = 5;\n\
            translator conninfo_t < conn_t *c > {\n  fd = c->fd;\n  name = \"x;\";\n};\n\
            #define F(x) ((x) + 1)\n#define N 4\n\
            provider net { probe open(conn_t *c, port_t p) : (conninfo_t *i, int p); probe close(void); };";
        let sigs = parse_provider_file(text).unwrap();
        assert_eq!(sigs[0].display(), "net:open(c: conn_t *, p: port_t)");
        assert_eq!(sigs[0].params[1].kind, Kind::Unsigned(2));
        assert_eq!(sigs[1].display(), "net:close()");
    }

    #[test]
    fn malformed_files_say_where() {
        assert_eq!(
            error("provider p {\n  probe a(int)\n};"),
            "3:1: expected `;` after the probe's `)`, found `}`"
        );
        assert_eq!(
            error("provider p {\n  probe a(int x y);\n};"),
            "2:17: expected `,` or `)` after an argument, found `y`"
        );
        assert_eq!(
            error("provider p {\n  probe a(int, );\n};"),
            "2:16: expected a type, found `)`"
        );
        assert_eq!(
            error("provider p { probe a(int); }"),
            "1:29: expected `;` after the provider's `}`, found the end of the file"
        );
        assert_eq!(
            error("provider p { probe a(int); "),
            "1:28: expected `probe` or `}`, found the end of the file"
        );
        assert_eq!(
            error("probe a(int);"),
            "1:1: expected `provider`, found `probe`"
        );
        assert_eq!(
            error("provider p { probe a(short char); };"),
            "1:22: `short char` is not a C type"
        );
        assert_eq!(
            error("provider p { probe a(void, int); };"),
            "1:22: an argument cannot be `void` (a probe without arguments is `()` or `(void)`)"
        );
        assert_eq!(
            error("provider p { probe a(char name[4]); };"),
            "1:31: an array cannot be a probe argument (pass a pointer)"
        );
        assert_eq!(
            error("provider p { probe a(int int); };"),
            "1:22: `int int` is not a C type"
        );
        assert_eq!(
            error("provider p { probe a(char *struct); };"),
            "1:28: `struct` cannot name an argument"
        );
        assert_eq!(
            error("provider p {\n probe a();\n probe a(int);\n};"),
            "3:8: probe p:a is declared twice (first on line 2)"
        );
        assert_eq!(
            error("translator x < y *z > { a = 1;"),
            "1:23: this `{` is never closed"
        );
        assert_eq!(
            error("provider p { probe a(int); };\n/* x"),
            "2:1: this comment is never closed"
        );
    }

    #[test]
    fn positions_of_bytes() {
        assert_eq!(position(b"ab\ncd\xff", 5), (2, 3));
        assert_eq!(position(b"\xff", 0), (1, 1));
    }
}
