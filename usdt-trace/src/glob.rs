//! Shell-style patterns for `provider:name` (`*` any run, `?` one character).

/// Whether `text` matches `pattern`, where `*` matches any run of characters
/// and `?` exactly one.
///
/// ```
/// use usdt_trace::glob_match;
/// assert!(glob_match("http:*", "http:request_start"));
/// assert!(glob_match("*:request_?tart", "http:request_start"));
/// assert!(!glob_match("http:*", "db:query"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Greedy matching with backtracking to the last `*`: linear in practice.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Whether the probe `provider:name` is one of those `globs` ask for: it
/// matches one of them, or there are none (every probe).
///
/// ```
/// use usdt_trace::globs_match;
/// assert!(globs_match(&[], "db:query"));
/// assert!(globs_match(&["http:*".into(), "db:*".into()], "db:query"));
/// assert!(!globs_match(&["http:*".into()], "db:query"));
/// ```
pub fn globs_match(globs: &[String], probe: &str) -> bool {
    globs.is_empty() || globs.iter().any(|g| glob_match(g, probe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("**:x", "p:x"));
        assert!(!glob_match("?", ""));
        assert!(glob_match("cdemo:plain", "cdemo:plain"));
        assert!(!glob_match("cdemo:plai", "cdemo:plain"));
    }
}
