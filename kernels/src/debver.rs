//! Debian version ordering (Debian Policy 5.6.12), to pick the newest kernel
//! of a generation among the packages the lists offer.

use std::cmp::Ordering;

/// Compares two Debian versions: `[epoch:]upstream[-revision]`.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (ea, ra) = split_epoch(a);
    let (eb, rb) = split_epoch(b);
    ea.cmp(&eb).then_with(|| {
        let (ua, da) = ra.rsplit_once('-').unwrap_or((ra, ""));
        let (ub, db) = rb.rsplit_once('-').unwrap_or((rb, ""));
        part(ua, ub).then_with(|| part(da, db))
    })
}

fn split_epoch(v: &str) -> (u64, &str) {
    match v.split_once(':') {
        Some((e, rest)) => (e.parse().unwrap_or(0), rest),
        None => (0, v),
    }
}

/// Alternating non-digit and digit runs; `~` sorts before everything, even
/// the end of the string.
fn part(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    while !a.is_empty() || !b.is_empty() {
        let (na, ra) = split_run(a, |c| !c.is_ascii_digit());
        let (nb, rb) = split_run(b, |c| !c.is_ascii_digit());
        let o = letters(na, nb);
        if o != Ordering::Equal {
            return o;
        }
        let (da, ra) = split_run(ra, |c| c.is_ascii_digit());
        let (db, rb) = split_run(rb, |c| c.is_ascii_digit());
        let o = number(da).cmp(&number(db));
        if o != Ordering::Equal {
            return o;
        }
        (a, b) = (ra, rb);
    }
    Ordering::Equal
}

fn split_run(s: &[u8], keep: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| keep(**c)).count();
    s.split_at(n)
}

fn number(digits: &[u8]) -> u128 {
    digits.iter().fold(0u128, |n, d| {
        n.saturating_mul(10).saturating_add(u128::from(d - b'0'))
    })
}

fn weight(c: Option<&u8>) -> i32 {
    match c {
        Some(b'~') => -1,
        None => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(*c),
        Some(c) => i32::from(*c) + 256,
    }
}

fn letters(a: &[u8], b: &[u8]) -> Ordering {
    for i in 0..a.len().max(b.len()) {
        let o = weight(a.get(i)).cmp(&weight(b.get(i)));
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_as_dpkg_does() {
        assert_eq!(
            compare("7.3.4-1~bpo13+1", "7.3~rc7-1~exp1"),
            Ordering::Greater
        );
        assert_eq!(compare("6.1.180-1~deb11u1", "6.1.176-1"), Ordering::Greater);
        assert_eq!(
            compare("6.19.14-1~bpo13+1", "6.19.8-1~bpo13+1"),
            Ordering::Greater
        );
        assert_eq!(compare("1.0~rc1", "1.0"), Ordering::Less);
        assert_eq!(compare("1:0.1", "2.0"), Ordering::Greater);
        assert_eq!(compare("1.0-1", "1.0-1"), Ordering::Equal);
        assert_eq!(compare("1.0a", "1.0+"), Ordering::Less);
    }
}
