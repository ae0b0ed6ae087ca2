//! What `usdt features` says, in one shape: from its `--json` object where
//! the command has one, else from its text. The one place that reads it.

/// The runtime's detection, as `usdt features` reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    /// The release it read (`6.1.0-57-arm64`).
    pub kernel: Option<String>,
    /// The machine it runs on (`x86_64`, `aarch64`).
    pub machine: Option<String>,
    /// `ENOSYS`, `ENXIO`, `EPROTO`, ...
    pub uprobe_syscall: Option<String>,
    pub uprobe_multi: Option<bool>,
    /// `safe`, `child dies`, `untested`.
    pub fork_test: Option<String>,
    /// Where `--attach auto` goes per layout: (`nop5`, `nop`|`next`).
    pub default_attach: Vec<(String, String)>,
    /// The speed self-test, M/s: (trap, optimized).
    pub speed_test: Option<(f64, f64)>,
}

impl Features {
    /// The default attach point for `layout`.
    pub fn attach(&self, layout: &str) -> Option<&str> {
        self.default_attach
            .iter()
            .find(|(l, _)| l == layout)
            .map(|(_, a)| a.as_str())
    }
}

/// Parses `usdt features --json` output.
pub fn from_json(text: &str) -> Option<Features> {
    let v: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let default_attach = v
        .get("default_attach")
        .and_then(|d| d.as_object())
        .map(|o| {
            o.iter()
                .filter_map(|(k, a)| Some((k.clone(), a.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let speed_test = v
        .get("speed_test")
        .and_then(|t| Some((t.get("trap")?.as_f64()?, t.get("optimized")?.as_f64()?)));
    Some(Features {
        kernel: s("kernel"),
        machine: s("machine"),
        uprobe_syscall: s("uprobe_syscall"),
        uprobe_multi: v.get("uprobe_multi").and_then(|b| b.as_bool()),
        fork_test: s("fork_test"),
        default_attach,
        speed_test,
    })
}

/// Parses the text of `usdt features`:
///
/// ```text
/// uprobe syscall: present, optimizes uprobes on nop5 (ENXIO: Linux 6.18 to 7.2)
/// BPF uprobe_multi links: yes (...)
/// fork after an optimized hit: the child dies (...)
/// auto attach on a nop;nop5 site: nop (fork-safe)
/// ```
pub fn from_text(text: &str) -> Features {
    let mut f = Features::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(": ") else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "uprobe syscall" => f.uprobe_syscall = errno_in(value),
            "BPF uprobe_multi links" => f.uprobe_multi = Some(value.starts_with("yes")),
            "fork after an optimized hit" => f.fork_test = Some(fork_verdict(value).into()),
            k => {
                if let Some(layout) = k
                    .strip_prefix("auto attach on a nop;")
                    .and_then(|l| l.strip_suffix(" site"))
                {
                    let point = value.split_whitespace().next().unwrap_or("");
                    f.default_attach
                        .push((layout.replace(';', "_"), point.into()));
                }
            }
        }
    }
    f
}

/// `absent` is ENOSYS; otherwise the `(EXXX` the line names.
fn errno_in(value: &str) -> Option<String> {
    if value.starts_with("absent") {
        return Some("ENOSYS".into());
    }
    let start = value.find("(E")? + 1;
    let name: String = value[start..]
        .chars()
        .take_while(|c| c.is_ascii_uppercase())
        .collect();
    (!name.is_empty()).then_some(name)
}

fn fork_verdict(value: &str) -> &'static str {
    if value.starts_with("untested") {
        "untested"
    } else if value.contains("dies") || value.contains("killed") {
        "child dies"
    } else {
        "safe"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_text_of_6_18() {
        let f = from_text(
            "uprobe syscall: present, optimizes uprobes on nop5 (ENXIO: Linux 6.18 to 7.2)
BPF uprobe_multi links: yes (one link for many sites; a pid filter covers every thread)
fork after an optimized hit: the child dies (a child forked after ... signal 11 (SIGSEGV))
auto attach on a nop;nop5 site: nop (fork-safe)
auto attach on a nop;nop10 site: nop
auto attach on a nop site: nop
",
        );
        assert_eq!(f.uprobe_syscall.as_deref(), Some("ENXIO"));
        assert_eq!(f.uprobe_multi, Some(true));
        assert_eq!(f.fork_test.as_deref(), Some("child dies"));
        assert_eq!(f.attach("nop5"), Some("nop"));
        assert_eq!(f.attach("nop10"), Some("nop"));
    }

    #[test]
    fn reads_the_text_of_old_and_new_kernels() {
        let old = from_text("uprobe syscall: absent\nBPF uprobe_multi links: no\n");
        assert_eq!(old.uprobe_syscall.as_deref(), Some("ENOSYS"));
        assert_eq!(old.uprobe_multi, Some(false));
        let new = from_text(
            "uprobe syscall: present, optimizes uprobes on nop10 (EPROTO)
fork after an optimized hit: untested (assumed to die) (the kernel did not optimize)
auto attach on a nop;nop10 site: next
",
        );
        assert_eq!(new.uprobe_syscall.as_deref(), Some("EPROTO"));
        assert_eq!(new.fork_test.as_deref(), Some("untested"));
        assert_eq!(new.attach("nop10"), Some("next"));
    }

    #[test]
    fn reads_the_json_object() {
        let f = from_json(
            r#"{"kernel":"7.3.4","uprobe_syscall":"EPROTO","optimizes":"nop10","uprobe_multi":true,
            "fork_test":"safe","speed_test":{"trap":0.05,"optimized":0.08},
            "default_attach":{"nop5":"nop","nop10":"next","nop5_nop10":"next"}}"#,
        )
        .unwrap();
        assert_eq!(f.uprobe_syscall.as_deref(), Some("EPROTO"));
        assert_eq!(f.fork_test.as_deref(), Some("safe"));
        assert_eq!(f.attach("nop10"), Some("next"));
        assert_eq!(f.speed_test, Some((0.05, 0.08)));
        assert_eq!(f.kernel.as_deref(), Some("7.3.4"));
        assert_eq!(f.machine, None);
        let arm = from_json(r#"{"kernel":"6.1.0-57-arm64","machine":"aarch64","uprobe_syscall":"ENOSYS","uprobe_multi":false}"#).unwrap();
        assert_eq!(arm.machine.as_deref(), Some("aarch64"));
        assert_eq!(arm.uprobe_multi, Some(false));
        assert!(from_json("uprobe syscall: absent").is_none());
    }
}
