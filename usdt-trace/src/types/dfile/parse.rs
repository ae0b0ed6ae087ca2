//! The grammar of a provider file, over [`lex`](super::lex)'s tokens:
//!
//! ```text
//! file       := item*
//! item       := provider | directive | typedef | skipped | ";"
//! provider   := "provider" NAME "{" (probe | directive)* "}" ";"
//! probe      := "probe" NAME "(" params ")" [":" "(" params ")"] ";"
//! params     := "" | "void" | param ("," param)*
//! param      := type [NAME]
//! type       := qualifier* base qualifier* ("*" qualifier*)*
//! base       := int-word+ | "struct"|"union"|"enum" NAME | NAME
//! directive  := "#define" NAME type-tokens   (an alias; any other line skipped)
//! typedef    := "typedef" type NAME ";"      (an alias)
//! skipped    := ("translator" | "inline" | "struct" | "union" | "enum") ... ";"
//! ```
//!
//! A probe's second list (`: (translated types)`) is what DTrace shows
//! after translating; the note holds the first list's values, so the
//! second is read and left aside.

use std::collections::HashMap;

use super::ctype::{CType, INT_WORDS};
use super::lex::{Tok, Token};
use super::{ParseError, ProbeDecl, ProviderDecl};

/// Words that qualify a type and change nothing shown.
const QUALIFIERS: &[&str] = &["const", "volatile", "restrict", "__restrict", "userland"];

/// Words that cannot name an argument.
const RESERVED: &[&str] = &[
    "provider",
    "probe",
    "translator",
    "typedef",
    "inline",
    "struct",
    "union",
    "enum",
    "void",
    "float",
    "double",
    "unsigned",
    "signed",
    "short",
    "long",
    "int",
    "char",
    "const",
    "volatile",
];

pub(super) struct Parser {
    toks: Vec<Token>,
    at: usize,
    /// Names defined by `#define NAME TYPE` and `typedef TYPE NAME;`.
    aliases: HashMap<String, CType>,
}

type Parsed<T> = Result<T, ParseError>;

impl Parser {
    pub(super) fn new(toks: Vec<Token>) -> Parser {
        Parser {
            toks,
            at: 0,
            aliases: HashMap::new(),
        }
    }

    fn peek(&self) -> &Token {
        // `tokens` always ends with Eof, which is never consumed.
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        &self.toks[(self.at + ahead).min(self.toks.len() - 1)].tok
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.tok != Tok::Eof {
            self.at += 1;
        }
        t
    }

    fn error_at(token: &Token, message: impl Into<String>) -> ParseError {
        ParseError {
            line: token.line,
            column: token.column,
            message: message.into(),
        }
    }

    /// "expected WHAT, found TOKEN" at the next token.
    fn expected(&self, what: &str) -> ParseError {
        let t = self.peek();
        Parser::error_at(t, format!("expected {what}, found {}", t.tok.describe()))
    }

    fn is_ident(&self, word: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s == word)
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek().tok == Tok::Punct(c)
    }

    fn punct(&mut self, c: char, what: &str) -> Parsed<Token> {
        if self.is_punct(c) {
            Ok(self.bump())
        } else {
            Err(self.expected(what))
        }
    }

    fn name(&mut self, what: &str) -> Parsed<(String, Token)> {
        match &self.peek().tok {
            Tok::Ident(s) => {
                let s = s.clone();
                Ok((s, self.bump()))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Every provider of the file.
    pub(super) fn file(&mut self) -> Parsed<Vec<ProviderDecl>> {
        let mut out = vec![];
        loop {
            let token = self.peek().clone();
            match &token.tok {
                Tok::Eof => return Ok(out),
                Tok::Hash => self.directive()?,
                Tok::Punct(';') => {
                    self.bump();
                }
                Tok::Ident(w) if w == "provider" => out.push(self.provider()?),
                Tok::Ident(w) if w == "typedef" => self.typedef()?,
                Tok::Ident(w)
                    if ["translator", "inline", "struct", "union", "enum"]
                        .contains(&w.as_str()) =>
                {
                    self.skip_declaration()?
                }
                _ => return Err(self.expected("`provider`")),
            }
        }
    }

    fn provider(&mut self) -> Parsed<ProviderDecl> {
        self.bump();
        let (name, _) = self.name("a provider name after `provider`")?;
        self.punct('{', "`{` after the provider name")?;
        let mut probes = vec![];
        loop {
            match &self.peek().tok {
                Tok::Hash => self.directive()?,
                Tok::Punct('}') => break,
                Tok::Ident(w) if w == "probe" => probes.push(self.probe()?),
                _ => return Err(self.expected("`probe` or `}`")),
            }
        }
        self.bump();
        self.punct(';', "`;` after the provider's `}`")?;
        Ok(ProviderDecl { name, probes })
    }

    fn probe(&mut self) -> Parsed<ProbeDecl> {
        self.bump();
        let (name, token) = self.name("a probe name after `probe`")?;
        self.punct('(', "`(` after the probe name")?;
        let params = self.params()?;
        if self.is_punct(':') {
            // The translated types: shown by DTrace, not in the note.
            self.bump();
            self.punct('(', "`(` after `:`")?;
            self.params()?;
        }
        self.punct(';', "`;` after the probe's `)`")?;
        Ok(ProbeDecl {
            name,
            line: token.line,
            column: token.column,
            params,
        })
    }

    /// The parameters up to and with the `)`.
    fn params(&mut self) -> Parsed<Vec<(Option<String>, CType)>> {
        if self.is_punct(')') {
            self.bump();
            return Ok(vec![]);
        }
        if self.is_ident("void") && self.peek_at(1) == &Tok::Punct(')') {
            self.bump();
            self.bump();
            return Ok(vec![]);
        }
        let mut out = vec![];
        loop {
            let start = self.peek().clone();
            let ty = self.ctype()?;
            if ty.is_void() {
                return Err(Parser::error_at(
                    &start,
                    "an argument cannot be `void` (a probe without arguments is `()` or `(void)`)",
                ));
            }
            let name = match &self.peek().tok {
                Tok::Ident(_) => {
                    let (name, token) = self.name("")?;
                    if RESERVED.contains(&name.as_str()) || QUALIFIERS.contains(&name.as_str()) {
                        return Err(Parser::error_at(
                            &token,
                            format!("`{name}` cannot name an argument"),
                        ));
                    }
                    Some(name)
                }
                _ => None,
            };
            if self.is_punct('[') {
                return Err(Parser::error_at(
                    self.peek(),
                    "an array cannot be a probe argument (pass a pointer)",
                ));
            }
            out.push((name, ty));
            if self.is_punct(',') {
                self.bump();
                continue;
            }
            self.punct(')', "`,` or `)` after an argument")?;
            return Ok(out);
        }
    }

    /// A type: qualifiers, a base, pointers.
    fn ctype(&mut self) -> Parsed<CType> {
        self.qualifiers();
        let start = self.peek().clone();
        let mut ty = match &start.tok {
            Tok::Ident(w) if INT_WORDS.contains(&w.as_str()) => {
                let mut words = vec![];
                while let Tok::Ident(w) = &self.peek().tok {
                    if INT_WORDS.contains(&w.as_str()) {
                        words.push(w.clone());
                        self.bump();
                    } else if QUALIFIERS.contains(&w.as_str()) {
                        self.bump();
                    } else {
                        break;
                    }
                }
                if self.is_ident("double") {
                    return Err(Parser::error_at(
                        &start,
                        "`long double` is not a probe argument type",
                    ));
                }
                CType::from_int_words(&words).ok_or_else(|| {
                    Parser::error_at(&start, format!("`{}` is not a C type", words.join(" ")))
                })?
            }
            Tok::Ident(w) if ["struct", "union", "enum"].contains(&w.as_str()) => {
                let tag = w.clone();
                self.bump();
                let (name, _) = self.name(&format!("a name after `{tag}`"))?;
                CType::tagged(&tag, &name)
            }
            Tok::Ident(w)
                if !RESERVED.contains(&w.as_str())
                    || w == "void"
                    || w == "float"
                    || w == "double" =>
            {
                let name = w.clone();
                self.bump();
                CType::named(&name, self.aliases.get(&name))
            }
            _ => return Err(self.expected("a type")),
        };
        self.qualifiers();
        while self.is_punct('*') {
            self.bump();
            ty = ty.pointer();
            self.qualifiers();
        }
        Ok(ty)
    }

    fn qualifiers(&mut self) {
        while matches!(&self.peek().tok, Tok::Ident(w) if QUALIFIERS.contains(&w.as_str())) {
            self.bump();
        }
    }

    /// A preprocessor line: `#define NAME TYPE` defines an alias (a
    /// `#define` of anything but a type, a macro with parameters, and
    /// every other directive are skipped: `#pragma D attributes`,
    /// `#include`, `#if`).
    fn directive(&mut self) -> Parsed<()> {
        self.bump();
        let start = self.at;
        while !matches!(self.peek().tok, Tok::EndDirective | Tok::Eof) {
            self.bump();
        }
        let end = self.at;
        self.bump();
        let line: Vec<Token> = self.toks[start..end].to_vec();
        let [Token {
            tok: Tok::Ident(define),
            ..
        }, name_token, body @ ..] = line.as_slice()
        else {
            return Ok(());
        };
        let Tok::Ident(name) = &name_token.tok else {
            return Ok(());
        };
        if define != "define" || body.is_empty() {
            return Ok(());
        }
        // `#define F(x) ...` has its `(` right after the name.
        if body[0].tok == Tok::Punct('(') && body[0].column == name_token.column + name.len() as u32
        {
            return Ok(());
        }
        let mut sub = Parser::new(body.to_vec());
        sub.toks.push(Token {
            tok: Tok::Eof,
            ..body[body.len() - 1].clone()
        });
        sub.aliases = std::mem::take(&mut self.aliases);
        let ty = sub.ctype();
        let whole = sub.peek().tok == Tok::Eof;
        self.aliases = sub.aliases;
        if let (Ok(ty), true) = (ty, whole) {
            self.aliases.insert(name.clone(), ty);
        }
        Ok(())
    }

    /// `typedef TYPE NAME;`.
    fn typedef(&mut self) -> Parsed<()> {
        self.bump();
        if matches!(&self.peek().tok, Tok::Ident(w) if ["struct", "union", "enum"].contains(&w.as_str()))
            && matches!(self.peek_at(2), Tok::Punct('{'))
            || matches!(self.peek_at(1), Tok::Punct('{'))
        {
            // A definition of a structure: not a probe argument's business.
            return self.skip_declaration();
        }
        let ty = self.ctype()?;
        let (name, _) = self.name("the new type's name")?;
        self.punct(';', "`;` after the typedef")?;
        self.aliases.insert(name, ty);
        Ok(())
    }

    /// Everything up to the `;` outside braces, parentheses and brackets
    /// (a translator, a structure, an inline constant).
    fn skip_declaration(&mut self) -> Parsed<()> {
        let start = self.peek().clone();
        let mut open: Vec<(char, Token)> = vec![];
        loop {
            let t = self.bump();
            match t.tok {
                Tok::Punct(c @ ('{' | '(' | '[')) => open.push((c, t)),
                Tok::Punct(c @ ('}' | ')' | ']')) => {
                    let want = match c {
                        '}' => '{',
                        ')' => '(',
                        _ => '[',
                    };
                    match open.pop() {
                        Some((o, _)) if o == want => {}
                        _ => return Err(Parser::error_at(&t, format!("unmatched `{c}`"))),
                    }
                }
                Tok::Punct(';') if open.is_empty() => return Ok(()),
                Tok::Eof => {
                    return Err(match open.last() {
                        Some((c, t)) => Parser::error_at(t, format!("this `{c}` is never closed")),
                        None => Parser::error_at(&start, "this declaration has no `;`"),
                    })
                }
                _ => {}
            }
        }
    }
}
