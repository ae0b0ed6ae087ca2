//! Shell-style patterns for `provider:name` (`*` any run, `?` one character),
//! and the closest names for a pattern that matches nothing.

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

/// Up to `n` of `names` closest to `pattern` by edit distance (the pattern's
/// `*` and `?` ignored), closest first.
pub fn closest<'a>(
    pattern: &str,
    names: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<&'a str> {
    let bare: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect();
    let mut scored: Vec<(usize, &str)> =
        names.into_iter().map(|s| (distance(&bare, s), s)).collect();
    scored.sort();
    scored.dedup_by_key(|(_, s)| *s);
    scored.into_iter().take(n).map(|(_, s)| s).collect()
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cost = usize::from(ca != b[j]);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
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

    #[test]
    fn closest_names() {
        let names = ["http:request_start", "http:request_done", "db:query"];
        assert_eq!(
            closest("http:request_stat", names, 1),
            vec!["http:request_start"]
        );
        assert_eq!(closest("db:qery*", names, 2)[0], "db:query");
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
