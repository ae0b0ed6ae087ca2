//! The pictures of the `usdt` command and of its benchmark, as SVG text:
//!
//! - [`BarChart`]: horizontal bars with a label each, on a linear or log
//!   scale, with an optional spread (error bar), a note beside each bar
//!   and a legend: the benchmark's rows, and every histogram.
//! - [`Histogram`]: log2 buckets (`usdt latency`, `usdt hist`, the
//!   benchmark's latency picture) as a [`BarChart`], one bar per bucket from
//!   the first to the last non-empty one.
//! - [`flame_graph`]: folded stacks (`root;...;leaf COUNT`, what `usdt
//!   count --by stack` prints) as a flame graph, drawn by
//!   [inferno](https://docs.rs/inferno).
//!
//! ```
//! use usdt_charts::{Bucket, Histogram};
//!
//! let h = Histogram {
//!     caption: "usdt hist http:request_done nanos".into(),
//!     x_desc: "values per log2 bucket".into(),
//!     buckets: vec![Bucket { low: 1024, high: 2048, count: 3 }, Bucket { low: 4096, high: 8192, count: 1 }],
//! };
//! let svg = h.chart(&|low, high| format!("[{low}, {high})")).svg()?;
//! assert!(svg.contains("[2048, 4096)")); // the empty bucket between them
//! # Ok::<(), usdt_charts::Error>(())
//! ```

#![warn(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod bars;
mod flame;
mod histogram;

pub use bars::{Bar, BarChart, Color, Scale};
pub use flame::flame_graph;
pub use histogram::{Bucket, Histogram};

/// A picture that could not be drawn: what the drawing library said.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}
