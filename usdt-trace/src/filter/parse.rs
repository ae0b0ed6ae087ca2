//! The grammar of a filter, by recursive descent over its tokens:
//!
//! ```text
//! or         = and { ("or" | "||") and }
//! and        = unary { ("and" | "&&") unary }
//! unary      = ("not" | "!") unary | "(" or ")" | comparison
//! comparison = argument OP constant | constant OP argument
//! argument   = NAME | "str" "(" NAME ")"
//! constant   = INTEGER | "STRING" | "true" | "false"
//! OP         = "==" | "!=" | "<" | "<=" | ">" | ">=" | "^="
//! ```
//!
//! `and` binds tighter than `or`; each node keeps the columns its errors
//! name.

use super::lex::{tokens, Op, Tok, Token};
use super::FilterError;

/// A parsed filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare(Compare),
}

/// `argument OP constant`, turned around when written the other way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Compare {
    pub(crate) arg: ArgRef,
    pub(crate) op: Op,
    pub(crate) op_column: usize,
    pub(crate) value: Constant,
    pub(crate) value_column: usize,
}

/// An argument by name: a parameter or `argN`; with `str(...)`, the
/// address of a NUL-terminated string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ArgRef {
    pub(crate) name: String,
    pub(crate) column: usize,
    pub(crate) string: bool,
}

/// What an argument is compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Constant {
    /// An integer (`true` is 1, `false` 0).
    Int(i128),
    /// A string's bytes.
    Str(Vec<u8>),
}

/// Parses `text`.
pub(crate) fn parse(text: &str) -> Result<Expr, FilterError> {
    let mut p = Parser {
        tokens: tokens(text)?,
        at: 0,
    };
    if p.peek().tok == Tok::End {
        return Err(FilterError::at(
            1,
            "the filter is empty: write a comparison such as `status >= 500`",
        ));
    }
    let expr = p.or()?;
    let next = p.peek();
    match next.tok {
        Tok::End => Ok(expr),
        Tok::Close => Err(FilterError::at(next.column, "`)` closes no `(`")),
        _ => Err(FilterError::at(
            next.column,
            format!(
                "expected `and`, `or` or the end, found {}",
                next.tok.describe()
            ),
        )),
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

/// One side of a comparison.
enum Side {
    Arg(ArgRef),
    Constant(Constant, usize),
}

impl Parser {
    fn peek(&self) -> &Token {
        // The last token is `End`, never passed.
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.tok != Tok::End {
            self.at += 1;
        }
        t
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.and()?;
        while self.peek().tok == Tok::Or {
            self.bump();
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.unary()?;
        while self.peek().tok == Tok::And {
            self.bump();
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        match self.peek().tok {
            Tok::Not => {
                self.bump();
                Ok(Expr::Not(Box::new(self.unary()?)))
            }
            Tok::Open => {
                let open = self.bump();
                let inner = self.or()?;
                let close = self.bump();
                match close.tok {
                    Tok::Close => Ok(inner),
                    Tok::End => Err(FilterError::at(
                        open.column,
                        "this `(` is not closed with `)`",
                    )),
                    other => Err(FilterError::at(
                        close.column,
                        format!("expected `and`, `or` or `)`, found {}", other.describe()),
                    )),
                }
            }
            _ => self.comparison(),
        }
    }

    fn comparison(&mut self) -> Result<Expr, FilterError> {
        let left = self.side(None)?;
        let op = self.bump();
        let Tok::Cmp(cmp) = op.tok else {
            let after = match &left {
                Side::Arg(a) => format!("`{}`", a.name),
                Side::Constant(..) => "a constant".into(),
            };
            return Err(FilterError::at(
                op.column,
                format!(
                    "expected a comparison (==, !=, <, <=, >, >=, ^=) after {after}, found {}",
                    op.tok.describe()
                ),
            ));
        };
        let right = self.side(Some(cmp))?;
        let compare = |arg, op, op_column, value, value_column| {
            Expr::Compare(Compare {
                arg,
                op,
                op_column,
                value,
                value_column,
            })
        };
        match (left, right) {
            (Side::Arg(arg), Side::Constant(value, at)) => {
                Ok(compare(arg, cmp, op.column, value, at))
            }
            (Side::Constant(value, at), Side::Arg(arg)) if cmp != Op::Prefix => {
                Ok(compare(arg, cmp.swapped(), op.column, value, at))
            }
            (Side::Constant(..), Side::Arg(arg)) => Err(FilterError::at(
                arg.column,
                "`^=` takes the argument on its left: `path ^= \"/api/\"`",
            )),
            (Side::Arg(_), Side::Arg(arg)) => Err(FilterError::at(
                arg.column,
                "a filter compares an argument with a constant, not with another argument",
            )),
            (Side::Constant(_, at), Side::Constant(..)) => Err(FilterError::at(
                at,
                "a filter compares an argument with a constant, not two constants",
            )),
        }
    }

    /// One side of a comparison; `after` is the operator before it, if
    /// any (for the error).
    fn side(&mut self, after: Option<Op>) -> Result<Side, FilterError> {
        let t = self.bump();
        match t.tok {
            Tok::Int(n) => Ok(Side::Constant(Constant::Int(n), t.column)),
            Tok::Str(s) => Ok(Side::Constant(Constant::Str(s), t.column)),
            Tok::Name(name) if name == "true" || name == "false" => Ok(Side::Constant(
                Constant::Int(i128::from(name == "true")),
                t.column,
            )),
            Tok::Name(name) if name == "str" && self.peek().tok == Tok::Open => {
                self.bump();
                let inner = self.bump();
                let close = self.bump();
                match (inner.tok, close.tok) {
                    (Tok::Name(name), Tok::Close) => Ok(Side::Arg(ArgRef {
                        name,
                        column: inner.column,
                        string: true,
                    })),
                    _ => Err(FilterError::at(
                        t.column,
                        "str() takes one argument's name: `str(arg1) == \"GET\"`",
                    )),
                }
            }
            Tok::Name(name) => Ok(Side::Arg(ArgRef {
                name,
                column: t.column,
                string: false,
            })),
            other => {
                let expected = match after {
                    Some(op) => format!(
                        "expected a number or a \"string\" after `{}`",
                        op.text()
                    ),
                    None => "expected a comparison such as `status >= 500`".into(),
                };
                Err(FilterError::at(
                    t.column,
                    format!("{expected}, found {}", other.describe()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(name: &str, op: Op, value: Constant) -> Expr {
        Expr::Compare(Compare {
            arg: ArgRef {
                name: name.into(),
                column: 0,
                string: false,
            },
            op,
            op_column: 0,
            value,
            value_column: 0,
        })
    }

    /// The tree without its columns.
    fn shape(e: Expr) -> Expr {
        match e {
            Expr::And(a, b) => Expr::And(Box::new(shape(*a)), Box::new(shape(*b))),
            Expr::Or(a, b) => Expr::Or(Box::new(shape(*a)), Box::new(shape(*b))),
            Expr::Not(a) => Expr::Not(Box::new(shape(*a))),
            Expr::Compare(c) => {
                let mut e = cmp(&c.arg.name, c.op, c.value);
                if let Expr::Compare(d) = &mut e {
                    d.arg.string = c.arg.string;
                }
                e
            }
        }
    }

    #[test]
    fn and_binds_tighter_than_or_and_constants_may_come_first() {
        let a = || cmp("a", Op::Eq, Constant::Int(1));
        let b = || cmp("b", Op::Gt, Constant::Int(2));
        let c = || cmp("c", Op::Prefix, Constant::Str(b"x".to_vec()));
        let or = |x, y| Expr::Or(Box::new(x), Box::new(y));
        let and = |x, y| Expr::And(Box::new(x), Box::new(y));
        assert_eq!(
            shape(parse(r#"a == 1 or 2 < b and c ^= "x""#).unwrap()),
            or(a(), and(b(), c()))
        );
        assert_eq!(
            shape(parse(r#"(a == 1 || b > 2) && !c ^= "x""#).unwrap()),
            and(or(a(), b()), Expr::Not(Box::new(c())))
        );
        assert_eq!(
            shape(parse("not not a == true").unwrap()),
            Expr::Not(Box::new(Expr::Not(Box::new(a()))))
        );
        let Expr::Compare(s) = parse(r#"str(arg1) != "GET""#).unwrap() else {
            panic!()
        };
        assert!(s.arg.string && s.arg.name == "arg1" && s.arg.column == 5);
    }

    #[test]
    fn mistakes_name_their_column() {
        let e = |text: &str| {
            let e = parse(text).unwrap_err();
            format!("{}: {}", e.column, e.message)
        };
        assert_eq!(
            e("status >= "),
            "11: expected a number or a \"string\" after `>=`, found the end"
        );
        assert_eq!(
            e("status 500"),
            "8: expected a comparison (==, !=, <, <=, >, >=, ^=) after `status`, found `500`"
        );
        assert_eq!(e("(a == 1"), "1: this `(` is not closed with `)`");
        assert_eq!(e("a == 1)"), "7: `)` closes no `(`");
        assert_eq!(e("a == 1 b == 2"), "8: expected `and`, `or` or the end, found `b`");
        assert_eq!(
            e("a == b"),
            "6: a filter compares an argument with a constant, not with another argument"
        );
        assert_eq!(
            e("1 == 2"),
            "1: a filter compares an argument with a constant, not two constants"
        );
        assert_eq!(
            e("and a == 1"),
            "1: expected a comparison such as `status >= 500`, found `and`"
        );
        assert_eq!(
            e("   "),
            "1: the filter is empty: write a comparison such as `status >= 500`"
        );
        assert_eq!(
            e("str(1) == \"a\""),
            "1: str() takes one argument's name: `str(arg1) == \"GET\"`"
        );
        assert!(e("\"/a\" ^= path").starts_with("9: "));
    }
}
