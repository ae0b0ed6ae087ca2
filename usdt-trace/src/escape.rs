//! Escaping names and strings that come from a traced binary or process
//! for text output: a note may hold any bytes, and a provider name with an
//! escape sequence or a newline must not retitle the terminal or forge a
//! line of output. JSON output needs none of this (serde_json escapes).

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with control characters (C0, DEL and C1) and backslashes written
/// as `\x1b`-style escapes (`\\` for a backslash); spaces are kept.
///
/// ```
/// use usdt_trace::escape;
/// assert_eq!(escape("plain text"), "plain text");
/// assert_eq!(escape("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
/// assert_eq!(escape("a\nb"), "a\\x0ab");
/// ```
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_if(text, |c| c.is_control() || c == '\\')
}

/// Like [`escape`], and spaces too: for names printed as one word among
/// others (`provider:name count`), so that a name cannot look like two
/// columns.
///
/// ```
/// use usdt_trace::escape_name;
/// assert_eq!(escape_name("request_start"), "request_start");
/// assert_eq!(escape_name("ok:normal 999999\n"), "ok:normal\\x20999999\\x0a");
/// ```
pub fn escape_name(name: &str) -> Cow<'_, str> {
    escape_if(name, |c| c.is_control() || c.is_whitespace() || c == '\\')
}

fn escape_if(text: &str, special: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&special) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if special(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if special(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_backslashes() {
        assert_eq!(escape("\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape("a\\b"), "a\\\\b");
        assert_eq!(escape("\u{9b}x\u{7f}"), "\\x9bx\\x7f");
        assert_eq!(escape("\u{2028}"), "\u{2028}");
        assert_eq!(escape_name("\u{2028}"), "\\u{2028}");
        assert_eq!(escape_name("a\tb"), "a\\x09b");
        assert!(matches!(escape_name("plain"), Cow::Borrowed(_)));
    }
}
