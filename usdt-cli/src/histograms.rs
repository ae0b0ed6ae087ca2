//! How a log2 histogram prints: as bpftrace prints `hist()`, with powers
//! of two in its suffixes, and its buckets in JSON; for `latency`,
//! `latency --by` and `hist`.

use std::io::Write;

use usdt_trace::Histogram;

use crate::error::CliError;

/// The non-empty buckets as `{"low<unit>","high<unit>","count"}`.
pub(crate) fn json_buckets(h: &Histogram, unit: &str) -> serde_json::Value {
    h.buckets
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| {
            let (low, high) = Histogram::bounds(b);
            let mut m = serde_json::Map::new();
            m.insert(format!("low{unit}"), low.into());
            m.insert(format!("high{unit}"), high.into());
            m.insert("count".into(), (*n).into());
            serde_json::Value::Object(m)
        })
        .collect()
}

/// `1K`, `4M`: a power of two with bpftrace's suffixes.
pub(crate) fn power(v: u64) -> String {
    for (shift, suffix) in [
        (60, "E"),
        (50, "P"),
        (40, "T"),
        (30, "G"),
        (20, "M"),
        (10, "K"),
    ] {
        if v >= 1 << shift && v % (1 << shift) == 0 {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// The buckets from the first to the last non-empty one, as bpftrace
/// prints `hist()`: `[4M, 8M)   50 |@@@@@   |`.
pub(crate) fn write_histogram(out: &mut dyn Write, h: &Histogram) -> Result<(), CliError> {
    let first = h.buckets.iter().position(|n| *n > 0);
    let last = h.buckets.iter().rposition(|n| *n > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return writeln!(out, "(no values)").map_err(CliError::Output);
    };
    let top = h.buckets[first..=last].iter().copied().max().unwrap_or(1);
    for b in first..=last {
        let (low, high) = Histogram::bounds(b);
        let range = match b {
            0 | 1 => format!("[{low}]"),
            64 => format!("[{}, ...)", power(low)),
            _ => format!("[{}, {})", power(low), power(high)),
        };
        let n = h.buckets[b];
        let bar = (n as u128 * 52).div_ceil(top as u128) as usize;
        writeln!(out, "{range:<20}{n:>8} |{:<52}|", "@".repeat(bar)).map_err(CliError::Output)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_print_as_bpftrace_does() {
        let mut h = Histogram {
            buckets: vec![0; Histogram::BUCKETS],
            ..Histogram::default()
        };
        h.buckets[21] = 4;
        h.buckets[23] = 2;
        let mut out = vec![];
        write_histogram(&mut out, &h).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("[1M, 2M)                   4 |@@@@"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("[2M, 4M)                   0 |  "),
            "{text}"
        );
        assert!(
            lines[2].starts_with("[4M, 8M)                   2 |@@@"),
            "{text}"
        );
        assert_eq!(power(1 << 10), "1K");
        assert_eq!(power(3), "3");
    }
}
