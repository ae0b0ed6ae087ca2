//! The tokens of a DTrace provider file: identifiers, numbers, string and
//! character literals and punctuation, each with its line and column;
//! comments and whitespace dropped; a preprocessor line (`#` first on its
//! line, `\` continuing it) marked by [`Tok::Hash`] before its tokens and
//! [`Tok::EndDirective`] after them.

use super::ParseError;

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// A name or keyword.
    Ident(String),
    /// A number, as written (`1`, `0x10`, `2UL`).
    Number(String),
    /// A string or character literal (its text is never needed).
    Literal,
    /// One punctuation character.
    Punct(char),
    /// `#` that starts a preprocessor line.
    Hash,
    /// The end of a preprocessor line.
    EndDirective,
    /// The end of the file.
    Eof,
}

impl Tok {
    /// How an error message quotes it.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::Number(s) => format!("`{s}`"),
            Tok::Literal => "a literal".into(),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Hash => "`#`".into(),
            Tok::EndDirective => "the end of the line".into(),
            Tok::Eof => "the end of the file".into(),
        }
    }
}

/// A token and where it starts (1-based line and column, in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) line: u32,
    pub(super) column: u32,
}

/// The whole file as tokens, ending with [`Tok::Eof`].
pub(super) fn tokens(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        at: 0,
        line: 1,
        column: 1,
        in_directive: false,
        line_start: true,
    };
    let mut out = vec![];
    loop {
        let token = lexer.next()?;
        let end = token.tok == Tok::Eof;
        out.push(token);
        if end {
            return Ok(out);
        }
    }
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: u32,
    column: u32,
    /// Inside a preprocessor line: its end is a token.
    in_directive: bool,
    /// Nothing but whitespace since the last newline.
    line_start: bool,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
            self.line_start = true;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn error(&self, line: u32, column: u32, message: impl Into<String>) -> ParseError {
        ParseError {
            line,
            column,
            message: message.into(),
        }
    }

    /// Skips whitespace and comments; stops before a newline that ends a
    /// preprocessor line.
    fn skip_blank(&mut self) -> Result<(), ParseError> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some('\n'), _) if self.in_directive => return Ok(()),
                (Some('\\'), Some('\n')) if self.in_directive => {
                    self.bump();
                    self.bump();
                }
                (Some(c), _) if c.is_whitespace() => {
                    self.bump();
                }
                (Some('/'), Some('*')) => self.block_comment()?,
                (Some('/'), Some('/')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn block_comment(&mut self) -> Result<(), ParseError> {
        let (line, column) = (self.line, self.column);
        self.bump();
        self.bump();
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some('*'), Some('/')) => {
                    self.bump();
                    self.bump();
                    // A comment is not what makes a line start.
                    return Ok(());
                }
                (Some(_), _) => {
                    self.bump();
                }
                (None, _) => return Err(self.error(line, column, "this comment is never closed")),
            }
        }
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        self.skip_blank()?;
        let (line, column) = (self.line, self.column);
        let token = |tok| Token { tok, line, column };
        let Some(c) = self.peek(0) else {
            if self.in_directive {
                self.in_directive = false;
                return Ok(token(Tok::EndDirective));
            }
            return Ok(token(Tok::Eof));
        };
        let first_on_line = self.line_start;
        self.line_start = false;
        if c == '\n' {
            // Only a preprocessor line stops before its newline.
            self.bump();
            self.in_directive = false;
            return Ok(token(Tok::EndDirective));
        }
        if c == '#' && first_on_line && !self.in_directive {
            self.bump();
            self.in_directive = true;
            return Ok(token(Tok::Hash));
        }
        if c.is_ascii_alphabetic() || c == '_' {
            return Ok(token(Tok::Ident(
                self.take_while(|c| c.is_ascii_alphanumeric() || c == '_'),
            )));
        }
        if c.is_ascii_digit() {
            return Ok(token(Tok::Number(
                self.take_while(|c| c.is_ascii_alphanumeric() || c == '.'),
            )));
        }
        if c == '"' || c == '\'' {
            self.literal(c, line, column)?;
            return Ok(token(Tok::Literal));
        }
        if c.is_ascii_punctuation() {
            self.bump();
            return Ok(token(Tok::Punct(c)));
        }
        Err(self.error(line, column, format!("unexpected character {c:?}")))
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek(0).filter(|c| keep(*c)) {
            s.push(c);
            self.bump();
        }
        s
    }

    /// A string or character literal, escapes included.
    fn literal(&mut self, quote: char, line: u32, column: u32) -> Result<(), ParseError> {
        self.bump();
        loop {
            match self.bump() {
                Some('\\') => {
                    self.bump();
                }
                Some(c) if c == quote => return Ok(()),
                Some('\n') | None => {
                    return Err(self.error(line, column, "this literal is never closed"))
                }
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Tok> {
        tokens(text).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn comments_and_directives() {
        let text = "/* a\n b */ provider p { // x\n#define A \\\n unsigned int\n};";
        let toks = tokens(text).unwrap();
        let id = |s: &str| Tok::Ident(s.into());
        assert_eq!(
            toks.iter().map(|t| t.tok.clone()).collect::<Vec<_>>(),
            vec![
                id("provider"),
                id("p"),
                Tok::Punct('{'),
                Tok::Hash,
                id("define"),
                id("A"),
                id("unsigned"),
                id("int"),
                Tok::EndDirective,
                Tok::Punct('}'),
                Tok::Punct(';'),
                Tok::Eof
            ]
        );
        assert_eq!((toks[0].line, toks[0].column), (2, 7));
        assert_eq!((toks[6].line, toks[6].column), (4, 2));
        // `#` not first on its line is punctuation.
        assert_eq!(kinds("a # b")[1], Tok::Punct('#'));
        // A directive on the last line ends with the file.
        assert_eq!(kinds("#pragma D")[3..], [Tok::EndDirective, Tok::Eof]);
    }

    #[test]
    fn errors_have_positions() {
        let e = tokens("provider p {\n  /* open").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        let e = tokens("probe x(\"abc\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 9));
        let e = tokens("a\n  é").unwrap_err();
        assert_eq!(
            (e.line, e.column, e.message.as_str()),
            (2, 3, "unexpected character 'é'")
        );
    }
}
