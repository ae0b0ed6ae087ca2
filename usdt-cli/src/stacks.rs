//! How stacks print: below a `trace --stack` line (one indented frame a
//! line, innermost first), in its JSON, and as `count --by stack`'s folded
//! stacks (`root;...;leaf COUNT`, the input of flame graphs) and flame
//! graph.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use usdt_trace::{escape, Stack};

use crate::error::CliError;

/// The frames of `stack` below a hit's line: `    FRAME\n` each, names
/// escaped, and `    ...` when the unwinding stopped before the
/// outermost frame.
pub(crate) fn push_stack(line: &mut Vec<u8>, stack: &Stack) {
    for frame in &stack.frames {
        line.extend_from_slice(b"    ");
        line.extend_from_slice(escape(&frame.to_string()).as_bytes());
        line.push(b'\n');
    }
    if !stack.complete {
        line.extend_from_slice(b"    ...\n");
    }
}

/// The frames as JSON objects, innermost first: addr, function, file,
/// line, object, inlined.
pub(crate) fn json_stack(stack: &Stack) -> serde_json::Value {
    stack
        .frames
        .iter()
        .map(|f| {
            serde_json::json!({
                "addr": f.addr,
                "function": f.function.as_deref(),
                "file": f.file.as_deref(),
                "line": f.line,
                "object": f.object.as_deref(),
                "inlined": f.inlined,
            })
        })
        .collect()
}

/// The root of a stack whose unwinding stopped early: its frames are the
/// innermost ones only.
pub(crate) const INCOMPLETE: &str = "[incomplete]";

/// A stack as one folded line's frames: root first, `;` between function
/// names (a `;` in a name becomes `:`, and control characters are
/// escaped), `[incomplete]` first when the unwinding stopped early.
pub(crate) fn folded(stack: &Stack) -> String {
    let mut names: Vec<String> = stack
        .frames
        .iter()
        .rev()
        .map(|f| escape(&f.name().replace(';', ":")).into_owned())
        .collect();
    if !stack.complete {
        names.insert(0, INCOMPLETE.into());
    }
    names.join(";")
}

/// Hits per stack, as folded stacks.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    counts: HashMap<String, u64>,
    /// Hits that came without a stack.
    pub(crate) without: u64,
}

impl Folded {
    pub(crate) fn add(&mut self, stack: Option<&Stack>) {
        match stack {
            Some(stack) => *self.counts.entry(folded(stack)).or_insert(0) += 1,
            None => self.without += 1,
        }
    }

    /// `(stack, hits)`, the most hit first, then by stack.
    pub(crate) fn lines(&self) -> Vec<(&str, u64)> {
        let mut lines: Vec<(&str, u64)> =
            self.counts.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        lines
    }

    /// Every hit counted.
    pub(crate) fn hits(&self) -> u64 {
        self.counts.values().sum::<u64>() + self.without
    }

    /// `STACK COUNT` per stack on `out`.
    pub(crate) fn write(&self, out: &mut dyn Write) -> Result<(), CliError> {
        for (stack, n) in self.lines() {
            writeln!(out, "{stack} {n}").map_err(CliError::Output)?;
        }
        Ok(())
    }

    /// The flame graph of the stacks, titled `title`, written to `path`.
    pub(crate) fn write_svg(&self, title: &str, path: &Path) -> Result<(), CliError> {
        let lines: Vec<String> = self
            .lines()
            .into_iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        crate::pictures::flame_graph(path, title, lines.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_trace::Frame;

    fn frame(name: &str) -> Frame {
        Frame {
            addr: 1,
            function: Some(name.into()),
            file: None,
            line: None,
            object: None,
            inlined: false,
        }
    }

    #[test]
    fn stacks_fold_root_first_and_count() {
        let leaf_first = Stack {
            frames: vec![frame("leaf"), frame("mid;dle"), frame("main")],
            complete: true,
        };
        assert_eq!(folded(&leaf_first), "main;mid:dle;leaf");
        let cut = Stack {
            complete: false,
            ..leaf_first.clone()
        };
        assert_eq!(folded(&cut), "[incomplete];main;mid:dle;leaf");
        let mut f = Folded::default();
        f.add(Some(&leaf_first));
        f.add(Some(&cut));
        f.add(Some(&leaf_first));
        f.add(None);
        let mut out = vec![];
        f.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main;mid:dle;leaf 2\n[incomplete];main;mid:dle;leaf 1\n"
        );
        assert_eq!((f.hits(), f.without), (4, 1));
        let mut line = vec![];
        push_stack(&mut line, &cut);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "    leaf\n    mid;dle\n    main\n    ...\n"
        );
    }
}
