//! The documentation holds together: the README is a front page (at most 200
//! lines, its first `sh` block the two commands `.ci/run` runs), every
//! relative link of the README, `docs/` and the bench's page leads to a file
//! of the repository and every `#anchor` to a heading there (GitHub's rules),
//! and every public item of the facade has a doc test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use usdt_test_support::{root, run_ok};

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The pages whose links must hold: the README, every page in `docs/`, and
/// the bench's page.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("bench/README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m && trimmed.trim_end() == m => fence = None,
            (None, None) => lines.push((i + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` without its code spans (a link written in backticks is an
/// example, not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The link targets of a page: `[text](target)`, `![alt](target)` and
/// reference definitions `[name]: target`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let lines = prose(text);
    // A link's text may wrap onto the next line, but its target does not.
    for (n, line) in &lines {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((*n, target.to_string()));
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if let Some(close) = trimmed.strip_prefix('[').and_then(|r| r.find("]:")) {
            let target = trimmed[close + 3..].split_whitespace().next().unwrap_or("");
            found.push((*n, target.to_string()));
        }
    }
    found
}

/// A heading's anchor as GitHub makes it: lower case, every character but
/// letters, digits, `_`, `-` and spaces dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    // Links in a heading keep their text only.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings; a repeated heading gets `-1`,
/// `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Why `target`, linked from `page`, does not resolve, if it does not.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None; // the web: not this test's to reach
    }
    if target.is_empty() {
        return Some("an empty link".into());
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    if file.starts_with('/') {
        return Some(
            "an absolute path: crates.io and GitHub resolve links relative to the page".into(),
        );
    }
    let linked = if file.is_empty() {
        page.to_path_buf()
    } else {
        normalize(&page.parent().unwrap().join(file))
    };
    if !linked.starts_with(root()) {
        return Some(format!("{} is outside the repository", linked.display()));
    }
    if !linked.exists() {
        return Some(format!("no file {}", linked.display()));
    }
    let anchor = anchor?;
    if linked.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "#{anchor} in {}, which is no Markdown page",
            linked.display()
        ));
    }
    let known = anchors(&read(&linked));
    (!known.contains(anchor)).then(|| {
        format!(
            "no heading #{anchor} in {} (its anchors: {})",
            linked.display(),
            known.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

#[test]
fn the_readme_is_a_front_page_with_the_two_commands_first() {
    let text = read(&root().join("README.md"));
    let lines = text.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: at most 200, the rest goes to docs/"
    );
    // As .ci/run reads them: the first ```sh block, comments and blank
    // lines left out.
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "```sh")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(block.len(), 2, "README.md's first sh block holds {block:?}");
    assert!(
        block[0].starts_with("cargo run --release -p usdt-bench"),
        "line 1 must be the benchmark: {}",
        block[0]
    );
    assert!(
        block[1].starts_with("cargo test --workspace"),
        "line 2 must be the tests: {}",
        block[1]
    );
}

#[test]
fn every_relative_link_leads_to_a_file_or_heading_of_the_repository() {
    let mut errors = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (line, target) in links(&read(&page)) {
            checked += 1;
            if let Some(why) = broken(&page, &target) {
                errors.push(format!("{}:{line}: ({target}): {why}", page.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the link reader broken?"
    );
    assert!(errors.is_empty(), "broken links:\n{}", errors.join("\n"));
}

#[test]
fn the_slugs_follow_githubs_rules() {
    let page = "# The `usdt` command\n## libbpf on 6.18 to 7.2\n```sh\n# not a heading\n```\n\
                ## Fork and the fork guard\n## Notes\n## Notes\n### [docs/site.md](docs/site.md): the site\n";
    let expected = [
        "the-usdt-command",
        "libbpf-on-618-to-72",
        "fork-and-the-fork-guard",
        "notes",
        "notes-1",
        "docssitemd-the-site",
    ];
    assert_eq!(
        anchors(page),
        expected.iter().map(|s| s.to_string()).collect()
    );
    let links = links("see [a](x.md#b) and `[c](d)`\n```\n[e](f)\n```\n[g]: h.md\n");
    assert_eq!(links, [(1, "x.md#b".to_string()), (5, "h.md".to_string())]);
}

/// The facade's public items, as rustdoc lists them: (kind, name).
fn public_items(target: &Path) -> Vec<(String, String)> {
    run_ok(
        Command::new(env!("CARGO"))
            .current_dir(root())
            .args([
                "doc",
                "--quiet",
                "--no-deps",
                "-p",
                "usdt-probes",
                "--target-dir",
            ])
            .arg(target)
            .env_remove("RUSTDOCFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    );
    // `window.SIDEBAR_ITEMS = {"attr":["provider"],"constant":["SITE_LAYOUT"],...};`
    let js = read(&target.join("doc/usdt/sidebar-items.js"));
    let body = &js[js.find('{').unwrap() + 1..js.rfind('}').unwrap()];
    let mut items = Vec::new();
    for group in body.split(']').filter(|g| g.contains('[')) {
        let (kind, names) = group.split_once('[').unwrap();
        let kind =
            kind.trim_matches(|c: char| c == ',' || c == ':' || c == '"' || c.is_whitespace());
        for name in names.split(',').map(|n| n.trim().trim_matches('"')) {
            if !name.is_empty() {
                items.push((kind.to_string(), name.to_string()));
            }
        }
    }
    items
}

#[test]
fn every_public_item_of_the_facade_has_a_doc_test() {
    // The examples' target directory (usdt_test_support::shapes): its
    // dependencies are built already when the other tests ran.
    let target = root().join("target/shapes/default");
    let items = public_items(&target);
    assert!(
        items
            .iter()
            .any(|(kind, name)| kind == "attr" && name == "provider"),
        "the listing of public items is not what this test reads: {items:?}"
    );
    let out = run_ok(
        Command::new(env!("CARGO"))
            .current_dir(root())
            .args([
                "test",
                "--quiet",
                "--doc",
                "-p",
                "usdt-probes",
                "--target-dir",
            ])
            .arg(&target)
            .args(["--", "--list"])
            .env_remove("RUSTDOCFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    );
    // `src/lib.rs - KernelFeatures (line 220): test`
    let mut tests: BTreeMap<String, usize> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((_, rest)) = line.split_once(" - ") {
            if let Some((name, _)) = rest.split_once(" (line ") {
                *tests.entry(name.to_string()).or_default() += 1;
            }
        }
    }
    // An item's tests are named by the item; two items of one name (the
    // trait and the derive `ProbeArg`) need a test each.
    let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, name) in &items {
        *wanted.entry(name).or_default() += 1;
    }
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(name, n)| tests.get(**name).copied().unwrap_or(0) < **n)
        .map(|(name, n)| format!("{name} (wants {n})"))
        .collect();
    assert!(
        missing.is_empty(),
        "public items of usdt-probes without a doc test: {missing:?}\nitems: {items:?}\ndoc tests: {tests:?}"
    );
}
