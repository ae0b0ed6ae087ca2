//! Flame graphs of folded stacks, drawn by inferno.

use crate::Error;

/// The flame graph of `folded` lines (`root;...;leaf COUNT`), titled
/// `title`, as SVG text: a frame's width is its share of the hits, colours
/// come from the function names (the same name, the same colour), and the
/// picture is the same for the same input. Its script lets a browser zoom
/// into a frame and search.
pub fn flame_graph<'a>(
    title: &str,
    folded: impl IntoIterator<Item = &'a str>,
) -> Result<String, Error> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.into();
    options.count_name = "hits".into();
    options.hash = true;
    options.deterministic = true;
    let mut out = vec![];
    inferno::flamegraph::from_lines(&mut options, folded, &mut out)
        .map_err(|e| Error(format!("drawing the flame graph: {e}")))?;
    String::from_utf8(out).map_err(|e| Error(format!("the flame graph: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_is_a_titled_box() {
        let svg = flame_graph(
            "hits of app:respond",
            [
                "main;serve;respond 3",
                "main;job;respond 1",
                "main;a<b>&c 2",
            ],
        )
        .unwrap();
        // inferno's SVG declares its doctype.
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = roxmltree::Document::parse_with_options(&svg, options).unwrap();
        // Each frame's <title>: `NAME (N hits, P%)`.
        let titles: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text().map(str::to_string))
            .collect();
        for want in [
            "main (6 hits, 100.00%)",
            "serve (3 hits, 50.00%)",
            "job (1 hits, 16.67%)",
            "respond (3 hits, 50.00%)",
            "a<b>&c (2 hits, 33.33%)",
        ] {
            assert!(
                titles.iter().any(|t| t == want),
                "no {want:?} in {titles:?}"
            );
        }
        let text: String = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect();
        assert!(text.contains("hits of app:respond"), "{text}");
        assert_eq!(
            svg,
            flame_graph(
                "hits of app:respond",
                [
                    "main;serve;respond 3",
                    "main;job;respond 1",
                    "main;a<b>&c 2"
                ]
            )
            .unwrap()
        );
        // Nothing folded: inferno refuses, in words.
        assert!(flame_graph("t", []).is_err());
    }
}
