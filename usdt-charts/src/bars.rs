//! Horizontal bars, one row per bar with its label on the left, in the
//! benchmark's style: 960 pixels wide, 34 per row, sans-serif text, the
//! value (and a note) beside each bar.

use std::path::Path;

use plotters::prelude::*;
// The trait that gives plotters' colours `filled` and `mix`; this
// module's own `Color` is the public one.
use plotters::style::Color as _;

use crate::Error;

/// A bar's colour (red, green, blue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Color(pub u8, pub u8, pub u8);

impl Color {
    /// Rows measured with nothing attached.
    pub const GREY: Color = Color(150, 150, 150);
    /// Our probes, and histograms.
    pub const BLUE: Color = Color(31, 119, 180);
    /// Peers.
    pub const ORANGE: Color = Color(255, 127, 14);

    fn rgb(self) -> RGBColor {
        RGBColor(self.0, self.1, self.2)
    }
}

/// How the values are laid out along the axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// From 0 to a quarter past the largest value.
    Linear,
    /// Powers of ten around the smallest and largest values.
    Log,
}

/// One bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Its label, left of it.
    pub label: String,
    /// Its length.
    pub value: f64,
    /// An error bar of this much either side of the value.
    pub spread: Option<f64>,
    /// Its colour.
    pub color: Color,
    /// The text right of it.
    pub note: String,
}

/// Horizontal bars, top to bottom.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    /// The line above the chart.
    pub caption: String,
    /// What the axis below it measures.
    pub x_desc: String,
    /// How the values are laid out.
    pub scale: Scale,
    /// The width of the labels' column, in pixels.
    pub label_width: u32,
    /// The bars, top first.
    pub bars: Vec<Bar>,
    /// A legend (text and colour per entry), lower right; none when empty.
    pub legend: Vec<(String, Color)>,
}

impl BarChart {
    /// The picture as SVG text.
    pub fn svg(&self) -> Result<String, Error> {
        let mut out = String::new();
        self.draw(&mut out)
            .map_err(|e| Error(format!("drawing {}: {e}", self.caption)))?;
        Ok(out)
    }

    /// Writes the picture to `path`.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let svg = self.svg()?;
        std::fs::write(path, svg).map_err(|e| Error(format!("{}: {e}", path.display())))
    }

    /// The extent of the axis: where bars start and where it ends.
    fn range(&self) -> (f64, f64) {
        let top = |spread: bool| {
            self.bars
                .iter()
                .map(|b| b.value + if spread { b.spread.unwrap_or(0.0) } else { 0.0 })
                .fold(0.0, f64::max)
        };
        match self.scale {
            Scale::Linear => (0.0, top(true).max(1.0) * 1.25),
            Scale::Log => {
                let max = top(true).max(1.0);
                let min = self.bars.iter().map(|b| b.value).fold(max, f64::min);
                let lo = 10f64.powf((min / 2.0).log10().floor());
                let hi = 10f64.powf((max * 1.5).log10().ceil());
                (lo, hi)
            }
        }
    }

    /// Where a bar's note starts, right of the bar or its error bar.
    fn note_at(&self, end: f64, hi: f64) -> f64 {
        match self.scale {
            Scale::Linear => end + hi / 1.25 * 0.01,
            Scale::Log => end * 1.1,
        }
    }

    fn draw(&self, out: &mut String) -> Result<(), String> {
        let n = self.bars.len();
        let root = SVGBackend::with_string(out, (960, 140 + 34 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (lo, hi) = self.range();
        let label = |y: &f64| {
            let i = n as f64 - 0.5 - y;
            if (i - i.round()).abs() < 1e-6 && i >= 0.0 {
                self.bars
                    .get(i.round() as usize)
                    .map_or(String::new(), |b| b.label.clone())
            } else {
                String::new()
            }
        };
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&self.caption, ("sans-serif", 15))
            .margin(12)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(self.label_width);
        let rows = 0f64..n.max(1) as f64;
        match self.scale {
            Scale::Linear => {
                let mut chart = builder.build_cartesian_2d(lo..hi, rows).map_err(err)?;
                chart
                    .configure_mesh()
                    .disable_y_mesh()
                    .y_labels(2 * n + 1)
                    .y_label_formatter(&label)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .x_desc(&self.x_desc)
                    .draw()
                    .map_err(err)?;
                self.draw_bars(&mut chart, lo, hi)?;
            }
            Scale::Log => {
                let mut chart = builder
                    .build_cartesian_2d((lo..hi).log_scale(), rows)
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .disable_y_mesh()
                    .y_labels(2 * n + 1)
                    .y_label_formatter(&label)
                    .x_label_formatter(&|x| format!("{x}"))
                    .x_desc(&self.x_desc)
                    .draw()
                    .map_err(err)?;
                self.draw_bars(&mut chart, lo, hi)?;
            }
        }
        root.present().map_err(err)?;
        Ok(())
    }

    /// The legend, the bars, their error bars and notes.
    fn draw_bars<'a, X>(
        &self,
        chart: &mut ChartContext<
            'a,
            SVGBackend<'a>,
            Cartesian2d<X, plotters::coord::types::RangedCoordf64>,
        >,
        lo: f64,
        hi: f64,
    ) -> Result<(), String>
    where
        X: Ranged<ValueType = f64>,
    {
        let n = self.bars.len();
        for (text, color) in &self.legend {
            let color = color.rgb();
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(err)?
                .label(text)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        if !self.legend.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK.mix(0.3))
                .draw()
                .map_err(err)?;
        }
        for (i, b) in self.bars.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(lo, y + 0.15), (b.value.max(lo), y + 0.85)],
                    b.color.rgb().filled(),
                )))
                .map_err(err)?;
            let mut end = b.value.max(lo);
            if let Some(spread) = b.spread {
                let (from, to) = ((b.value - spread).max(lo), b.value + spread);
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(from, y + 0.5), (to, y + 0.5)],
                        BLACK,
                    )))
                    .map_err(err)?;
                end = to;
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    b.note.clone(),
                    (self.note_at(end, hi), y + 0.68),
                    ("sans-serif", 13),
                )))
                .map_err(err)?;
        }
        Ok(())
    }
}

/// A drawing error in words.
fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn chart(scale: Scale) -> BarChart {
        BarChart {
            caption: "rows & <things>".into(),
            x_desc: "M/s".into(),
            scale,
            label_width: 130,
            bars: vec![
                Bar {
                    label: "first".into(),
                    value: 10.0,
                    spread: Some(1.0),
                    color: Color::BLUE,
                    note: "10.000 M/s".into(),
                },
                Bar {
                    label: "second".into(),
                    value: 0.5,
                    spread: None,
                    color: Color::GREY,
                    note: "0.500 M/s".into(),
                },
            ],
            legend: vec![("attached".into(), Color::BLUE)],
        }
    }

    /// Every text element of `svg`, which must be well-formed XML.
    pub(crate) fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).unwrap();
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect()
    }

    #[test]
    fn bars_are_labelled_with_notes_and_legend_on_both_scales() {
        for scale in [Scale::Linear, Scale::Log] {
            let svg = chart(scale).svg().unwrap();
            let texts = texts(&svg);
            for want in [
                "rows & <things>",
                "first",
                "second",
                "10.000 M/s",
                "0.500 M/s",
                "attached",
                "M/s",
            ] {
                assert!(
                    texts.iter().any(|t| t == want),
                    "{scale:?}: no {want:?} in {texts:?}"
                );
            }
            // Two bars in their colours.
            assert!(svg.contains("#1F77B4"), "{scale:?}");
            assert!(svg.contains("#969696"), "{scale:?}");
        }
    }
}
