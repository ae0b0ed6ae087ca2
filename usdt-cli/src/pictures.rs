//! The SVG pictures the commands write with `--svg`, drawn by usdt-charts
//! as the benchmark draws its own: `latency` and `hist` histograms (one
//! bar per log2 bucket) and `count --by stack`'s flame graph.

use std::path::Path;

use usdt_trace::{escape, Histogram};

use crate::error::CliError;

/// Draws `h` into `path`: one bar per bucket from the first non-empty one
/// to the last, each labelled by `label(low, high)`, under `caption`.
pub(crate) fn histogram(
    path: &Path,
    h: &Histogram,
    caption: String,
    x_desc: &str,
    label: &dyn Fn(u64, u64) -> String,
) -> Result<(), CliError> {
    let buckets = h
        .buckets
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| {
            let (low, high) = Histogram::bounds(b);
            usdt_charts::Bucket {
                low,
                high,
                count: *n,
            }
        })
        .collect();
    let chart = usdt_charts::Histogram {
        caption,
        x_desc: x_desc.into(),
        buckets,
    };
    let svg = chart.chart(label).svg().map_err(picture_error)?;
    write(path, &svg)
}

/// Draws the flame graph of `folded` lines (`root;...;leaf COUNT`) into
/// `path`, titled `title`.
pub(crate) fn flame_graph<'a>(
    path: &Path,
    title: &str,
    folded: impl IntoIterator<Item = &'a str>,
) -> Result<(), CliError> {
    let svg = usdt_charts::flame_graph(title, folded).map_err(picture_error)?;
    write(path, &svg)
}

fn picture_error(e: usdt_charts::Error) -> CliError {
    CliError::Picture(e.to_string())
}

fn write(path: &Path, svg: &str) -> Result<(), CliError> {
    std::fs::write(path, svg)
        .map_err(|e| CliError::Picture(format!("{}: {e}", escape(&path.to_string_lossy()))))
}
