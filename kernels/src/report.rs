//! The matrix's report: the contracts each kernel's row must keep, a text
//! table, and the JSON (one object per kernel).

use serde_json::Value;

use crate::{Arch, Layout};

/// The least ratio of the default attach's traced rate to C `sys/sdt.h`'s:
/// emulated CPUs (TCG) are noisier than real ones.
pub fn min_ratio(accel: &str) -> f64 {
    match accel {
        "tcg" => 0.9,
        _ => 0.95,
    }
}

/// The contracts a row breaks, each in words (none: it keeps them all).
pub fn broken(row: &Value) -> Vec<String> {
    let mut broken = Vec::new();
    if row["unavailable"].is_string() {
        return broken;
    }
    if let Some(why) = row["error"].as_str() {
        broken.push(format!("not checked: {why}"));
        return broken;
    }
    let kernel = row["kernel"].as_str().unwrap_or("?");
    let errno = row["uprobe_syscall"].as_str().unwrap_or("?");
    // Rows from before the matrix had arm64 are x86-64's.
    let arch = row["arch"]
        .as_str()
        .and_then(Arch::from_name)
        .unwrap_or(Arch::X86_64);
    match crate::expected_errno(arch, kernel) {
        Some(want) if want != errno => broken.push(format!(
            "syscall(336) gave {errno}, this generation's is {want}"
        )),
        None => broken.push(format!(
            "cannot tell the generation of release \"{kernel}\""
        )),
        _ => {}
    }
    if row["counts_exact"] != true {
        broken.push("a count or an argument value was wrong (counts_exact false)".into());
    }
    if row["fork_survives_default"] != true {
        broken.push("a forked child did not survive the default attach".into());
    }
    // A kernel that optimizes a long nop optimizes the default build's.
    let default = arch.layouts()[0].name;
    if matches!(errno, "ENXIO" | "EPROTO") && row["optimized"][default] == false {
        broken.push(format!(
            "the default build's long nop ({default}) was not optimized, on a kernel that optimizes one"
        ));
    }
    if !row["values_exact"].is_null() && row["values_exact"] != true {
        broken.push(format!(
            "a traced value, the semaphore after detaching, latency, hist or count --by was wrong (values_exact false: {})",
            failed_values(row)
        ));
    }
    // The stacks are checked where the values are (the guests of the
    // other architectures): unwound on aarch64, refused on riscv64.
    if !row["values_exact"].is_null() && row["stacks_exact"] != true {
        broken.push(match arch.unwinds_stacks() {
            true => format!(
                "usdt trace --stack or count --by stack did not unwind the stacks example's call paths (stacks_exact false: {})",
                failed_stacks(row)
            ),
            false => format!(
                "--stack was not refused with \"{}\" (stacks_exact false: {})",
                crate::stacks::refusal(arch),
                failed_stacks(row)
            ),
        });
    }
    if row["features_true"] != true {
        let wrong: Vec<&str> = row["features"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| **v != true)
            .map(|(k, _)| k.as_str())
            .collect();
        broken.push(format!(
            "usdt features said something untrue about the kernel ({})",
            wrong.join(", ")
        ));
    }
    let accel = row["accel"].as_str().unwrap_or("kvm");
    match row["ratio_default_vs_c"].as_f64() {
        Some(r) if r >= min_ratio(accel) => {}
        Some(r) => broken.push(format!(
            "the default attach ran at {r:.2}x C sys/sdt.h's rate (at least {} here)",
            min_ratio(accel)
        )),
        None => broken.push(format!(
            "the bench's default or C row did not run{}",
            bench_errors(row)
        )),
    }
    broken
}

/// The checks under `key` that were not exact, each as `describe` words
/// it from its tool, its engine and the check itself.
fn inexact(row: &Value, key: &str, describe: impl Fn(&str, &str, &Value) -> String) -> Vec<String> {
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or("?").to_string();
    row[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["exact"] != true)
        .map(|c| describe(&text(c, "tool"), &text(c, "engine"), c))
        .collect()
}

/// The values checks that failed: `usdt trace (perf, exit=0); usdt hist (bpf, ...)`.
fn failed_values(row: &Value) -> String {
    inexact(row, "values", |tool, engine, c| {
        format!("{tool} ({engine}, {})", c["status"].as_str().unwrap_or("?"))
    })
    .join("; ")
}

/// The stacks checks that failed: `usdt trace --stack (perf): why`.
fn failed_stacks(row: &Value) -> String {
    let failed = inexact(row, "stacks", |tool, engine, c| {
        format!("{tool} ({engine}): {}", c["why"].as_str().unwrap_or("?"))
    });
    match failed.is_empty() {
        true => "no check ran".into(),
        false => failed.join("; "),
    }
}

/// `: ROW: ERROR; ...` for the bench rows (of any layout) that failed, or
/// nothing.
fn bench_errors(row: &Value) -> String {
    let mut errors = Vec::new();
    for (layout, bench) in row["bench"].as_object().into_iter().flatten() {
        if let Some(e) = bench["error"].as_str() {
            errors.push(format!("{layout}: {e}"));
        }
        for r in bench["rows"].as_array().into_iter().flatten() {
            if let Some(e) = r["error"].as_str() {
                errors.push(format!(
                    "{layout} {}: {e}",
                    r["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    match errors.is_empty() {
        true => String::new(),
        false => format!(" ({})", errors.join("; ")),
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.3}"),
            _ => n.to_string(),
        },
        v => v.to_string(),
    }
}

/// A forked child's fate under an attach: `exit=0`, `signal=11`, or
/// `refused` where the attach itself failed.
fn child(fork: &Value) -> String {
    match (fork["child"].as_str(), fork["status"].as_str()) {
        (Some(c), _) => c.into(),
        (None, Some(s)) if s != "exit=0" => "refused".into(),
        _ => "-".into(),
    }
}

/// The table's columns given once per layout: the default attach, whether
/// the long nop (`--attach next`: Location + 1, or + 6 for the nop10 of
/// `nop; nop5; nop10` on the kernels that optimize nop10) got optimized, a
/// forked child's fate under `--attach next`, and the traced rate there
/// (M/s); the last three for the layouts with a long nop only.
const PER_LAYOUT: [(&str, bool, LayoutCell); 4] = [
    ("auto", false, |r, l| cell(&r["default_attach"][l])),
    ("opt", true, |r, l| cell(&r["optimized"][l])),
    ("next: child", true, |r, l| child(&r["fork"][l]["next"])),
    ("M/s next", true, |r, l| {
        cell(&r["rows"][format!("{l}-forced")])
    }),
];

/// The columns of one kind: every architecture's layouts (each once:
/// aarch64 and riscv64 share the `nop`), or those with a long nop.
fn layouts_of(long_nop_only: bool) -> Vec<&'static Layout> {
    let mut layouts: Vec<&Layout> = Vec::new();
    for l in Arch::ALL.iter().flat_map(|a| a.layouts()) {
        if !layouts.contains(&l) && (!long_nop_only || l.has_long_nop()) {
            layouts.push(l);
        }
    }
    layouts
}

/// A row's cell for one layout.
type LayoutCell = fn(&Value, &str) -> String;

/// One line per kernel, then each kernel's broken contracts and its log.
pub fn text(rows: &[Value]) -> String {
    let mut header: Vec<String> = ["kernel", "arch", "accel", "errno", "fork test"]
        .map(String::from)
        .into();
    for (what, long_nop, _) in PER_LAYOUT {
        header.extend(
            layouts_of(long_nop)
                .into_iter()
                .map(|l| format!("{what} {}", l.name)),
        );
    }
    header.extend(
        [
            "counts",
            "values",
            "stacks",
            "features",
            "fork ok",
            "default M/s",
            "C M/s",
            "ratio",
            "syscall",
        ]
        .map(String::from),
    );
    let mut table = vec![header.clone()];
    for r in rows {
        let mut line = vec![
            cell(&r["kernel"]),
            cell(&r["arch"]),
            cell(&r["accel"]),
            cell(&r["uprobe_syscall"]),
            cell(&r["fork_test"]),
        ];
        for (_, long_nop, of) in PER_LAYOUT {
            line.extend(layouts_of(long_nop).into_iter().map(|l| of(r, l.name)));
        }
        line.extend([
            cell(&r["counts_exact"]),
            cell(&r["values_exact"]),
            cell(&r["stacks_exact"]),
            cell(&r["features_true"]),
            cell(&r["fork_survives_default"]),
            cell(&r["rows"]["default"]),
            cell(&r["rows"]["c-sdt-nop"]),
            cell(&r["ratio_default_vs_c"]),
            cell(&r["rows"]["syscall"]),
        ]);
        table.push(line);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| table.iter().map(|row| row[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out += line.join("  ").trim_end();
        out += "\n";
    }
    for r in rows {
        out += &format!(
            "\n{} ({} {}, {}{}, {:.0} s):\n",
            cell(&r["kernel"]),
            cell(&r["package"]),
            cell(&r["version"]),
            cell(&r["accel"]),
            match (r["root"].as_str(), r["arch"].as_str()) {
                (Some("initramfs"), Some("x86_64") | None) => {
                    ", initramfs root (no modules package)"
                }
                (Some("initramfs"), _) => ", initramfs root (static builds, Debian's userland)",
                _ => "",
            },
            r["seconds"].as_f64().unwrap_or(0.0)
        );
        let broken = broken(r);
        if let Some(why) = r["unavailable"].as_str() {
            out += &format!("  UNAVAILABLE: {why}\n");
        } else if broken.is_empty() {
            out += "  contracts kept\n";
        }
        for b in broken {
            out += &format!("  BROKEN: {b}\n");
        }
        for l in r["log"].as_array().into_iter().flatten() {
            out += &format!("  {}\n", l.as_str().unwrap_or(""));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "kernel": "7.3.4+deb13-amd64", "accel": "tcg", "uprobe_syscall": "EPROTO",
            "counts_exact": true, "fork_survives_default": true, "ratio_default_vs_c": 0.93,
            "optimized": {"nop5": false, "nop10": true, "nop5_nop10": true},
            "features_true": true, "features": {"uprobe_syscall": true},
        })
    }

    #[test]
    fn a_good_row_keeps_every_contract() {
        assert_eq!(broken(&good()), Vec::<String>::new());
        assert!(text(&[good()]).contains("contracts kept"));
    }

    #[test]
    fn each_contract_can_break() {
        let mut r = good();
        r["uprobe_syscall"] = json!("ENXIO");
        assert!(broken(&r)[0].contains("this generation's is EPROTO"));
        let mut r = good();
        r["counts_exact"] = json!(false);
        assert_eq!(broken(&r).len(), 1);
        let mut r = good();
        r["fork_survives_default"] = json!(false);
        assert_eq!(broken(&r).len(), 1);
        let mut r = good();
        r["optimized"]["nop5_nop10"] = json!(false);
        assert!(broken(&r)[0].contains("default build's long nop"));
        let mut r = good();
        r["features_true"] = json!(false);
        r["features"]["uprobe_multi"] = json!(false);
        assert_eq!(
            broken(&r),
            ["usdt features said something untrue about the kernel (uprobe_multi)"]
        );
        let mut r = good();
        r["values_exact"] = json!(false);
        r["values"] =
            json!([{"tool": "usdt hist", "engine": "bpf", "status": "exit=1", "exact": false}]);
        assert!(broken(&r)[0].ends_with("(values_exact false: usdt hist (bpf, exit=1))"));
        // No uprobe syscall on arm64: ENOSYS is its errno, even on 7.3.
        let mut r = good();
        r["kernel"] = json!("7.3.4+deb13-arm64");
        r["arch"] = json!("aarch64");
        assert!(broken(&r)[0].contains("this generation's is ENOSYS"));
        r["uprobe_syscall"] = json!("ENOSYS");
        assert!(broken(&r).is_empty());
        assert!(text(&[r]).contains("7.3.4+deb13-arm64  aarch64"));
        // Nor on riscv64; its layout is aarch64's `nop`, one column of both.
        let mut r = good();
        r["kernel"] = json!("7.2.13+deb14-riscv64");
        r["arch"] = json!("riscv64");
        r["uprobe_syscall"] = json!("ENOSYS");
        r["default_attach"] = json!({"nop": "nop"});
        assert!(broken(&r).is_empty());
        let table = text(&[r]);
        assert_eq!(table.matches("auto nop ").count(), 1, "{table}");
        assert!(table.contains("7.2.13+deb14-riscv64  riscv64"));
        // Where the values are checked (the other architectures' guests),
        // the stacks are: unwound on aarch64, refused on riscv64.
        let mut r = good();
        r["kernel"] = json!("7.3.4+deb13-arm64");
        r["arch"] = json!("aarch64");
        r["uprobe_syscall"] = json!("ENOSYS");
        r["values_exact"] = json!(true);
        assert_eq!(
            broken(&r),
            ["usdt trace --stack or count --by stack did not unwind the stacks example's call paths (stacks_exact false: no check ran)"]
        );
        r["stacks"] = json!([
            {"tool": "usdt trace --stack", "engine": "bpf", "exact": false, "why": "3 hits, not 9"},
            {"tool": "usdt count --by stack", "engine": "bpf", "exact": true, "why": null},
        ]);
        r["stacks_exact"] = json!(false);
        assert!(broken(&r)[0]
            .ends_with("(stacks_exact false: usdt trace --stack (bpf): 3 hits, not 9)"));
        r["stacks_exact"] = json!(true);
        assert!(broken(&r).is_empty());
        assert!(text(&[r.clone()]).contains("values  stacks  features"));
        r["kernel"] = json!("7.2.13+deb14-riscv64");
        r["arch"] = json!("riscv64");
        r["stacks_exact"] = json!(false);
        assert!(broken(&r)[0].starts_with(
            "--stack was not refused with \"usdt: stacks are unwound on x86-64 and aarch64 only, not on this riscv64 machine\""
        ));
        let mut r = good();
        r["ratio_default_vs_c"] = json!(0.85);
        assert!(broken(&r)[0].contains("0.85x"));
        r["accel"] = json!("kvm");
        r["ratio_default_vs_c"] = json!(0.92);
        assert!(broken(&r)[0].contains("at least 0.95"));
        assert!(!broken(&json!({"error": "qemu cannot run here"})).is_empty());
        let mut r = good();
        r["ratio_default_vs_c"] = Value::Null;
        r["bench"] = json!({"nop5_nop10": {"rows": [
            {"name": "default", "error": null, "mops": 1.0},
            {"name": "c-sdt-nop", "error": "bench-c: Read-only file system", "mops": 0.0},
        ]}});
        assert_eq!(
            broken(&r),
            ["the bench's default or C row did not run (nop5_nop10 c-sdt-nop: bench-c: Read-only file system)"]
        );
        let gone = json!({"kernel": "6.19.14", "unavailable": "no modules"});
        assert!(broken(&gone).is_empty());
        assert!(text(&[gone]).contains("UNAVAILABLE: no modules"));
    }
}
