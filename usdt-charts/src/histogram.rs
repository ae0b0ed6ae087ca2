//! Log2 histograms as bar charts: one bar per bucket, top to bottom from
//! the first non-empty bucket to the last, empty ones between included.

use crate::{Bar, BarChart, Color, Scale};

/// One bucket: the values `low..high` and how many fell there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The smallest value.
    pub low: u64,
    /// One past the largest (`u64::MAX` for the last bucket, included).
    pub high: u64,
    /// Values in it.
    pub count: u64,
}

/// A histogram of log2 buckets (0, 1, 2-3, 4-7, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// The line above it (what was measured, count and quantiles).
    pub caption: String,
    /// What the bars count.
    pub x_desc: String,
    /// The non-empty buckets (empty ones may be given too), in order.
    pub buckets: Vec<Bucket>,
}

impl Histogram {
    /// Every bucket from the first non-empty one to the last, the empty
    /// ones between included.
    pub fn rows(&self) -> Vec<Bucket> {
        let full: Vec<&Bucket> = self.buckets.iter().filter(|b| b.count > 0).collect();
        let (Some(first), Some(last)) = (full.first(), full.last()) else {
            return vec![];
        };
        let mut rows = vec![];
        let mut low = first.low;
        loop {
            let high = match low {
                0 => 1,
                l if l >= 1 << 63 => u64::MAX,
                l => l * 2,
            };
            let count = full.iter().filter(|b| b.low == low).map(|b| b.count).sum();
            rows.push(Bucket { low, high, count });
            if low >= last.low || high == u64::MAX {
                break;
            }
            low = high;
        }
        rows
    }

    /// The bar chart, each bucket labelled by `label(low, high)` and noted
    /// with its count; "(no values)" when it has none.
    pub fn chart(&self, label: &dyn Fn(u64, u64) -> String) -> BarChart {
        let bars = self
            .rows()
            .into_iter()
            .map(|b| Bar {
                label: label(b.low, b.high),
                value: b.count as f64,
                spread: None,
                color: Color::BLUE,
                note: b.count.to_string(),
            })
            .collect::<Vec<_>>();
        let caption = match bars.is_empty() {
            true => format!("{} (no values)", self.caption),
            false => self.caption.clone(),
        };
        BarChart {
            caption,
            x_desc: self.x_desc.clone(),
            scale: Scale::Linear,
            label_width: 150,
            bars,
            legend: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bars::tests::texts;

    fn bucket(low: u64, count: u64) -> Bucket {
        Bucket {
            low,
            high: if low == 0 { 1 } else { low * 2 },
            count,
        }
    }

    #[test]
    fn rows_run_from_the_first_to_the_last_bucket() {
        let h = Histogram {
            caption: "c".into(),
            x_desc: "x".into(),
            buckets: vec![bucket(0, 2), bucket(4, 1), bucket(16, 5)],
        };
        let rows: Vec<(u64, u64)> = h.rows().iter().map(|b| (b.low, b.count)).collect();
        assert_eq!(rows, [(0, 2), (1, 0), (2, 0), (4, 1), (8, 0), (16, 5)]);
        let top = Histogram {
            buckets: vec![
                bucket(1 << 62, 1),
                Bucket {
                    low: 1 << 63,
                    high: u64::MAX,
                    count: 1,
                },
            ],
            ..h.clone()
        };
        assert_eq!(top.rows().len(), 2);
        assert_eq!(top.rows()[1].high, u64::MAX);
        let none = Histogram {
            buckets: vec![],
            ..h.clone()
        };
        assert!(none.rows().is_empty());
        let svg = none.chart(&|l, h| format!("{l}-{h}")).svg().unwrap();
        assert!(texts(&svg).contains(&"c (no values)".to_string()));
    }

    #[test]
    fn each_bucket_is_a_labelled_bar_with_its_count() {
        let h = Histogram {
            caption: "lat:start -> lat:done".into(),
            x_desc: "pairs per log2 bucket".into(),
            buckets: vec![bucket(1024, 7), bucket(4096, 3)],
        };
        let svg = h.chart(&|l, h| format!("[{l}, {h})")).svg().unwrap();
        let texts = texts(&svg);
        for want in [
            "lat:start -> lat:done",
            "pairs per log2 bucket",
            "[1024, 2048)",
            "[2048, 4096)",
            "[4096, 8192)",
            "7",
            "0",
            "3",
        ] {
            assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
        }
    }
}
