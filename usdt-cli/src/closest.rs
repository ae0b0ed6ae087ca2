//! The closest probe names for a pattern that matches nothing.

/// Up to `n` of `names` closest to `pattern` by edit distance (the pattern's
/// `*` and `?` ignored), closest first.
pub(crate) fn closest<'a>(
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
