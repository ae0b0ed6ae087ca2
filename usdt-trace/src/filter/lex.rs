//! The tokens of a filter: names, integers, strings in double quotes,
//! comparisons, `and`/`or`/`not` (and `&&`, `||`, `!`) and parentheses,
//! each with the column it starts at; whitespace dropped.

use super::FilterError;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `^=`: the string starts with.
    Prefix,
}

impl Op {
    /// As written.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Prefix => "^=",
        }
    }

    /// The operator with its operands swapped (`3 < x` is `x > 3`).
    pub(super) fn swapped(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }
}

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    /// A name (an argument, `str`, `true`, `false`).
    Name(String),
    /// An integer, its sign included.
    Int(i128),
    /// A string's bytes, its escapes resolved.
    Str(Vec<u8>),
    /// A comparison.
    Cmp(Op),
    /// `and`, `&&`.
    And,
    /// `or`, `||`.
    Or,
    /// `not`, `!`.
    Not,
    /// `(`
    Open,
    /// `)`
    Close,
    /// The end of the expression.
    End,
}

impl Tok {
    /// How an error message quotes it.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Name(s) => format!("`{s}`"),
            Tok::Int(n) => format!("`{n}`"),
            Tok::Str(b) => format!("{:?}", String::from_utf8_lossy(b)),
            Tok::Cmp(op) => format!("`{}`", op.text()),
            Tok::And => "`and`".into(),
            Tok::Or => "`or`".into(),
            Tok::Not => "`not`".into(),
            Tok::Open => "`(`".into(),
            Tok::Close => "`)`".into(),
            Tok::End => "the end".into(),
        }
    }
}

/// A token and the column it starts at (1-based, in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) column: usize,
}

/// The longest string a filter compares with, in bytes: the kernel reads
/// two more (the NUL, and one to tell a longer string), and `trace` reads
/// at most [`STRING_MAX`](crate::STRING_MAX) of an argument.
pub(crate) const STRING_MAX: usize = 254;

/// The expression as tokens, ending with [`Tok::End`].
pub(super) fn tokens(text: &str) -> Result<Vec<Token>, FilterError> {
    let chars: Vec<char> = text.chars().collect();
    let mut lexer = Lexer { chars, at: 0 };
    let mut out = vec![];
    loop {
        let token = lexer.next()?;
        let end = token.tok == Tok::End;
        out.push(token);
        if end {
            return Ok(out);
        }
    }
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// The next token; `at` past it.
    fn next(&mut self) -> Result<Token, FilterError> {
        while self.peek(0).is_some_and(char::is_whitespace) {
            self.at += 1;
        }
        let column = self.at + 1;
        let token = |tok| Ok(Token { tok, column });
        let Some(c) = self.peek(0) else {
            return token(Tok::End);
        };
        let two = |second| self.peek(1) == Some(second);
        let (tok, len) = match c {
            '(' => (Tok::Open, 1),
            ')' => (Tok::Close, 1),
            '=' if two('=') => (Tok::Cmp(Op::Eq), 2),
            '!' if two('=') => (Tok::Cmp(Op::Ne), 2),
            '<' if two('=') => (Tok::Cmp(Op::Le), 2),
            '>' if two('=') => (Tok::Cmp(Op::Ge), 2),
            '^' if two('=') => (Tok::Cmp(Op::Prefix), 2),
            '<' => (Tok::Cmp(Op::Lt), 1),
            '>' => (Tok::Cmp(Op::Gt), 1),
            '!' => (Tok::Not, 1),
            '&' if two('&') => (Tok::And, 2),
            '|' if two('|') => (Tok::Or, 2),
            '=' => {
                return Err(FilterError::at(
                    column,
                    "`=` alone assigns; compare with `==`",
                ))
            }
            '"' => return self.string(column).map(|tok| Token { tok, column }),
            '-' | '0'..='9' => return self.int(column).map(|tok| Token { tok, column }),
            c if c.is_alphabetic() || c == '_' => {
                let name = self.word();
                let tok = match name.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    _ => Tok::Name(name),
                };
                return token(tok);
            }
            c => {
                return Err(FilterError::at(
                    column,
                    format!("`{c}` is not part of a filter (names, numbers, \"strings\", comparisons, and, or, not, parentheses)"),
                ))
            }
        };
        self.at += len;
        token(tok)
    }

    /// Letters, digits and `_` from here.
    fn word(&mut self) -> String {
        let start = self.at;
        while self
            .peek(0)
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    /// An integer: decimal, `0x` hex or `0b` binary, `_` between digits,
    /// an optional `-`; from -2^63 to 2^64 - 1.
    fn int(&mut self, column: usize) -> Result<Tok, FilterError> {
        let negative = self.peek(0) == Some('-');
        if negative {
            self.at += 1;
            if !self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                return Err(FilterError::at(column, "`-` is followed by a number here"));
            }
        }
        let word = self.word();
        let digits = word.replace('_', "");
        let (radix, digits) = match digits.get(..2) {
            Some("0x" | "0X") => (16, &digits[2..]),
            Some("0b" | "0B") => (2, &digits[2..]),
            _ => (10, digits.as_str()),
        };
        let value = u64::from_str_radix(digits, radix).map_err(|_| {
            FilterError::at(
                column,
                format!("`{word}` is not a number that fits in 64 bits"),
            )
        })?;
        let value = i128::from(value);
        if negative {
            if value > 1 << 63 {
                return Err(FilterError::at(
                    column,
                    format!("`-{word}` is below the smallest 64-bit integer"),
                ));
            }
            return Ok(Tok::Int(-value));
        }
        Ok(Tok::Int(value))
    }

    /// A string in double quotes, with the escapes `\"`, `\\`, `\n`, `\t`,
    /// `\r`, `\0` and `\xNN`.
    fn string(&mut self, column: usize) -> Result<Tok, FilterError> {
        self.at += 1;
        let mut bytes = vec![];
        loop {
            let escape_at = self.at + 1;
            let Some(c) = self.peek(0) else {
                return Err(FilterError::at(
                    column,
                    "the string is not closed with `\"`",
                ));
            };
            self.at += 1;
            match c {
                '"' => break,
                '\\' => {
                    let escaped = self.peek(0);
                    self.at += 1;
                    let byte = match escaped {
                        Some('"') => b'"',
                        Some('\\') => b'\\',
                        Some('n') => b'\n',
                        Some('t') => b'\t',
                        Some('r') => b'\r',
                        Some('0') => 0,
                        Some('x') => {
                            let hex: String = (0..2).filter_map(|i| self.peek(i)).collect();
                            self.at += 2;
                            u8::from_str_radix(&hex, 16)
                                .ok()
                                .filter(|_| hex.len() == 2)
                                .ok_or_else(|| {
                                    FilterError::at(escape_at, "`\\x` takes two hex digits")
                                })?
                        }
                        other => {
                            let shown = other.map_or(String::new(), String::from);
                            return Err(FilterError::at(
                                escape_at,
                                format!("`\\{shown}` is not an escape (\\\" \\\\ \\n \\t \\r \\0 \\xNN)"),
                            ));
                        }
                    };
                    if byte == 0 {
                        return Err(FilterError::at(
                            escape_at,
                            "a string argument ends at its first NUL: `\\0` cannot be compared",
                        ));
                    }
                    bytes.push(byte);
                }
                c => {
                    let mut buf = [0u8; 4];
                    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        if bytes.len() > STRING_MAX {
            return Err(FilterError::at(
                column,
                format!(
                    "the string is {} bytes long; a filter compares at most {STRING_MAX}",
                    bytes.len()
                ),
            ));
        }
        Ok(Tok::Str(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<Tok> {
        tokens(text).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn every_token_with_its_column() {
        let t = tokens(r#"status >= 500 && !(path ^= "/a\"b\x41")"#).unwrap();
        let cols: Vec<usize> = t.iter().map(|t| t.column).collect();
        assert_eq!(cols, [1, 8, 11, 15, 18, 19, 20, 25, 28, 39, 40]);
        assert_eq!(t[7].tok, Tok::Cmp(Op::Prefix));
        assert_eq!(t[8].tok, Tok::Str(b"/a\"bA".to_vec()));
        assert_eq!(
            toks("a<1 or b!=-0x10 and not c<=0b11"),
            [
                Tok::Name("a".into()),
                Tok::Cmp(Op::Lt),
                Tok::Int(1),
                Tok::Or,
                Tok::Name("b".into()),
                Tok::Cmp(Op::Ne),
                Tok::Int(-16),
                Tok::And,
                Tok::Not,
                Tok::Name("c".into()),
                Tok::Cmp(Op::Le),
                Tok::Int(3),
                Tok::End
            ]
        );
        assert_eq!(toks("18446744073709551615")[0], Tok::Int(u64::MAX.into()));
        assert_eq!(toks("-9223372036854775808")[0], Tok::Int(i64::MIN.into()));
        assert_eq!(toks("1_000")[0], Tok::Int(1000));
        assert_eq!(toks(r#""é""#)[0], Tok::Str("é".as_bytes().to_vec()));
    }

    #[test]
    fn mistakes_say_where() {
        let e = |text: &str| {
            let e = tokens(text).unwrap_err();
            (e.column, e.message)
        };
        assert_eq!(e("a = 1"), (3, "`=` alone assigns; compare with `==`".into()));
        assert_eq!(e("p == \"abc").0, 6);
        assert_eq!(e("p == \"a\\qb\"").0, 8);
        assert_eq!(
            e("a == 18446744073709551616"),
            (
                6,
                "`18446744073709551616` is not a number that fits in 64 bits".into()
            )
        );
        assert_eq!(e("a == -9223372036854775809").0, 6);
        assert_eq!(e("a == 12ab").0, 6);
        assert_eq!(e("a == 1; b").0, 7);
        assert!(e(&format!("p == \"{}\"", "x".repeat(255))).1.contains("255 bytes"));
        assert!(tokens(&format!("p == \"{}\"", "x".repeat(254))).is_ok());
        assert_eq!(e("p == \"a\\0\"").0, 8);
    }
}
