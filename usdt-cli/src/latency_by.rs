//! `usdt latency --by ARG`: a histogram per value of a start argument, kept
//! in the kernel; the values printed first (by pairs or by p99), each with
//! its histogram and quantiles, and the rest summed as "other"; in JSON,
//! one object per value. `usdt serve` exports the same split as series.

use std::io::Write;

use serde_json::json;
use usdt_trace::{escape, escape_name, Aggregation, CountedValue, Histogram};

use crate::answers::human_ns;
use crate::args::Sort;
use crate::error::CliError;
use crate::histograms::{json_buckets, write_histogram};

/// What the kernel kept per value: each value's histogram, and how many
/// pairs had a value the full map could not take.
pub(crate) struct PerValue {
    values: Vec<(CountedValue, Histogram)>,
    not_kept: u64,
}

/// The values shown, and the rest as one histogram.
pub(crate) struct Shown {
    pub(crate) values: Vec<(CountedValue, Histogram)>,
    pub(crate) other: Histogram,
    /// How many values `other` sums (the pairs of values not kept aside).
    pub(crate) others: usize,
    /// Pairs whose value the map could not take (in `other`).
    pub(crate) not_kept: u64,
}

/// What a latency is, for the lines that name it.
pub(crate) struct Head<'a> {
    pub(crate) start: &'a str,
    pub(crate) end: &'a str,
    pub(crate) key: &'a str,
    pub(crate) by: &'a str,
}

impl PerValue {
    /// Reads `agg`'s values (before its total, which then holds them all).
    pub(crate) fn read(agg: &Aggregation) -> Result<PerValue, CliError> {
        Ok(PerValue {
            values: agg.histograms_by()?,
            not_kept: agg.values_not_kept()?,
        })
    }

    /// The first `top` values in `sort`'s order, and the rest of `total`
    /// (the other values, and the pairs whose value was not kept) as
    /// "other".
    pub(crate) fn split(mut self, total: &Histogram, top: usize, sort: Sort) -> Shown {
        if sort == Sort::P99 {
            self.values.sort_by(|a, b| {
                let p99 = |h: &Histogram| h.quantile(0.99);
                p99(&b.1).cmp(&p99(&a.1)).then(b.1.count.cmp(&a.1.count))
            });
        }
        let unkept = rest(total, self.values.iter().map(|(_, h)| h));
        let rest_values = self.values.split_off(top.min(self.values.len()));
        let mut other = unkept;
        for (_, h) in &rest_values {
            other.add(h);
        }
        Shown {
            values: self.values,
            other,
            others: rest_values.len(),
            not_kept: self.not_kept,
        }
    }
}

/// What is in `total` and in none of `kept`: their buckets, count and sum
/// taken away; its maximum at most `total`'s, and below the upper bound of
/// its last bucket.
pub(crate) fn rest<'a>(total: &Histogram, kept: impl Iterator<Item = &'a Histogram>) -> Histogram {
    let mut out = total.clone();
    out.buckets.resize(Histogram::BUCKETS, 0);
    out.unmatched = 0;
    out.lost = 0;
    out.negative = 0;
    out.unreadable = 0;
    for h in kept {
        for (o, n) in out.buckets.iter_mut().zip(&h.buckets) {
            *o = o.saturating_sub(*n);
        }
        out.count = out.count.saturating_sub(h.count);
        out.sum = out.sum.saturating_sub(h.sum);
    }
    out.max = match out.buckets.iter().rposition(|n| *n > 0) {
        Some(b) if out.count > 0 => total.max.min(Histogram::bounds(b).1.saturating_sub(1)),
        _ => 0,
    };
    out
}

/// `count 11  p50 1.06ms  p90 1.1ms  p99 1.12ms  max 1.12ms`.
fn summary(h: &Histogram) -> String {
    format!(
        "count {}  p50 {}  p90 {}  p99 {}  max {}",
        h.count,
        human_ns(h.quantile(0.5)),
        human_ns(h.quantile(0.9)),
        human_ns(h.quantile(0.99)),
        human_ns(h.max)
    )
}

/// The values, each with its histogram, then "other": below the heading
/// `START -> END by KEY, per BY, nanoseconds:`.
pub(crate) fn write_text(
    out: &mut dyn Write,
    head: &Head<'_>,
    shown: &Shown,
) -> Result<(), CliError> {
    let w = |e| CliError::Output(e);
    writeln!(
        out,
        "{} -> {} by {}, per {}, nanoseconds:",
        escape_name(head.start),
        escape_name(head.end),
        escape_name(head.key),
        escape_name(head.by)
    )
    .map_err(w)?;
    for (value, h) in &shown.values {
        writeln!(
            out,
            "\n{} {}: {}",
            escape_name(head.by),
            escape(&value.to_string()),
            summary(h)
        )
        .map_err(w)?;
        write_histogram(out, h)?;
    }
    if shown.others > 0 || shown.other.count > 0 {
        writeln!(
            out,
            "\nother ({} values): {}",
            shown.others,
            summary(&shown.other)
        )
        .map_err(w)?;
        write_histogram(out, &shown.other)?;
    }
    if shown.not_kept > 0 {
        writeln!(
            out,
            "\n{} pairs of values past the first {} are in other only",
            shown.not_kept,
            Aggregation::BY_VALUES
        )
        .map_err(w)?;
    }
    Ok(())
}

/// One JSON object per value shown, then one for "other" (`"value":
/// null`).
pub(crate) fn write_json(
    out: &mut dyn Write,
    head: &Head<'_>,
    shown: &Shown,
) -> Result<(), CliError> {
    let object = |value: serde_json::Value, h: &Histogram| {
        json!({
            "start": head.start,
            "end": head.end,
            "key": head.key,
            "by": head.by,
            "value": value,
            "count": h.count,
            "sum_ns": h.sum,
            "buckets": json_buckets(h, "_ns"),
            "p50_ns": h.quantile(0.5),
            "p90_ns": h.quantile(0.9),
            "p99_ns": h.quantile(0.99),
            "max_ns": h.max,
        })
    };
    for (value, h) in &shown.values {
        writeln!(out, "{}", object(json_value(value), h)).map_err(CliError::Output)?;
    }
    let mut other = object(serde_json::Value::Null, &shown.other);
    other["other_values"] = shown.others.into();
    other["values_not_kept"] = shown.not_kept.into();
    writeln!(out, "{other}").map_err(CliError::Output)
}

/// A value as JSON: a number, or a string (invalid UTF-8 replaced).
pub(crate) fn json_value(value: &CountedValue) -> serde_json::Value {
    match value {
        CountedValue::Unsigned(n) => (*n).into(),
        CountedValue::Signed(n) => (*n).into(),
        CountedValue::Str(s) => String::from_utf8_lossy(s).into_owned().into(),
    }
}

/// A value as a Prometheus label: the string (invalid UTF-8 replaced), or
/// the number in decimal.
pub(crate) fn label(value: &CountedValue) -> String {
    match value {
        CountedValue::Str(s) => String::from_utf8_lossy(s).into_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: &[(usize, u64)], max: u64) -> Histogram {
        let mut h = Histogram {
            buckets: vec![0; Histogram::BUCKETS],
            max,
            ..Histogram::default()
        };
        for (b, n) in buckets {
            h.buckets[*b] = *n;
            h.count += n;
            h.sum += n * Histogram::bounds(*b).0;
        }
        h
    }

    #[test]
    fn the_rest_is_other() {
        let a = hist(&[(21, 5)], 2_000_000);
        let b = hist(&[(23, 3)], 8_100_000);
        let c = hist(&[(11, 2)], 1_500);
        let mut total = hist(&[(21, 5), (23, 3), (11, 2), (25, 1)], 30_000_000);
        total.unmatched = 4;
        let values = PerValue {
            values: vec![
                (CountedValue::Str(b"/a".to_vec()), a),
                (CountedValue::Str(b"/b".to_vec()), b),
                (CountedValue::Str(b"/c".to_vec()), c),
            ],
            not_kept: 1,
        };
        let shown = values.split(&total, 1, Sort::P99);
        // The longest p99 first: /b.
        assert_eq!(shown.values[0].0, CountedValue::Str(b"/b".to_vec()));
        assert_eq!(shown.others, 2);
        // /a, /c and the pair not kept (bucket 25).
        assert_eq!(shown.other.count, 8);
        assert_eq!(shown.other.buckets[25], 1);
        assert_eq!(shown.other.buckets[21], 5);
        assert_eq!(shown.other.max, 30_000_000);
        assert_eq!(shown.other.unmatched, 0);
        let mut text = vec![];
        let head = Head {
            start: "a:s",
            end: "a:e",
            key: "id",
            by: "path",
        };
        write_text(&mut text, &head, &shown).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with(
                "a:s -> a:e by id, per path, nanoseconds:\n\npath \"/b\": count 3  p50 "
            ),
            "{text}"
        );
        assert!(text.contains("\nother (2 values): count 8  p50 "), "{text}");
        assert!(
            text.contains("1 pairs of values past the first 1024 are in other only"),
            "{text}"
        );
        let mut lines = vec![];
        write_json(&mut lines, &head, &shown).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(lines)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["value"], "/b");
        assert_eq!(lines[0]["count"], 3);
        assert_eq!(lines[1]["value"], serde_json::Value::Null);
        assert_eq!(lines[1]["other_values"], 2);
    }
}
