//! The kernel matrix, every generation (5.10 to 7.3 and the machine's own,
//! arm64's 6.1, 6.12 and 7.3 and riscv64's 6.12 and 7.2, emulated) booted
//! in qemu: each keeps the contracts, and the old (6.1: no uprobe syscall,
//! no BPF uprobe_multi) and the new (7.3: nop10 optimized, fork fixed)
//! report what their generation does; on arm64 and riscv64 every value,
//! latency and hist check ran (on the examples and on a program written
//! outside the project), and bpftrace and gdb read the same values; on
//! arm64 `usdt trace --stack` and `count --by stack` unwind the known call
//! paths of the stacks example with each engine, and riscv64 refuses them
//! in one sentence. This is the matrix `.ci/run`
//! runs: the JSON goes to `target/kernels.json` and the table to
//! `target/kernels.txt`. The kernels and the built programs are shared with
//! `cargo run -p usdt-kernels` (the cache and `target/kernels`).

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use usdt_provision::Need;

#[test]
fn every_kernel_generation_keeps_the_contracts() {
    if !usdt_provision::ready(&[Need::root(
        "the guests attach uprobes, and qemu's root is the machine's",
    )]) {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_usdt-kernels"))
        .arg("--json")
        .output()
        .expect("run usdt-kernels");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    std::fs::write(target.join("kernels.json"), &out.stdout).expect("write target/kernels.json");
    std::fs::write(target.join("kernels.txt"), stderr.as_bytes())
        .expect("write target/kernels.txt");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("usdt-kernels printed no JSON ({e}):\n{stderr}"));
    assert_eq!(rows.len(), usdt_kernels::GENERATIONS.len(), "{stderr}");
    for row in &rows {
        assert_eq!(
            usdt_kernels::report::broken(row),
            Vec::<String>::new(),
            "{}:\n{stderr}",
            row["kernel"]
        );
        assert!(row["unavailable"].is_null(), "{row}");
        assert!(row["kernel"].is_string(), "{row}");
    }
    assert!(out.status.success(), "{stderr}");
    let of = |arch: &str, prefix: &str| {
        rows.iter()
            .filter(|r| r["arch"] == arch)
            .find(|r| r["kernel"].as_str().is_some_and(|k| k.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no {arch} {prefix} row:\n{stderr}"))
    };
    let (old, new) = (of("x86_64", "6.1."), of("x86_64", "7.3"));
    assert_eq!(old["accel"], usdt_kernels::boot::accel().0.name());
    assert_eq!(old["uprobe_syscall"], "ENOSYS");
    assert_eq!(old["uprobe_multi"], false);
    for layout in ["nop5", "nop10", "nop5_nop10"] {
        assert_eq!(old["optimized"][layout], false, "{layout}: {old}");
    }
    assert_eq!(new["uprobe_syscall"], "EPROTO");
    assert_eq!(new["uprobe_multi"], true);
    assert_eq!(
        new["optimized"]["nop5"], false,
        "7.3 no longer optimizes nop5"
    );
    assert_eq!(new["optimized"]["nop10"], true, "7.3 optimizes nop10");
    // The default build's nop;nop5;nop10 site: its nop10 (at Location + 6)
    // is the one 7.3 takes, and the default attach takes it. (Every kernel
    // that optimizes a long nop optimizes the default build's: a contract
    // of `report::broken`.)
    assert_eq!(new["optimized"]["nop5_nop10"], true, "{new}");
    assert_eq!(new["default_attach"]["nop5_nop10"], "next", "{new}");
    // 7.3 copies the trampoline on fork: a child forked after an optimized
    // hit survives, and the red zone holds under the optimized site.
    assert_eq!(
        new["fork"]["nop10"]["next"]["child_survives"], true,
        "{new}"
    );
    assert_eq!(new["fork"]["nop10"]["next"]["trampoline"], true, "{new}");
    assert_eq!(new["red_zone"]["nop10"]["ok"], true, "{new}");

    // arm64 and riscv64, emulated: no uprobe syscall, the site's one nop
    // where the default attaches, BPF uprobe_multi links from 6.6; every
    // value check ran (on arm64's 6.1, latency, hist, count --by and serve
    // refuse for want of those links) and bpftrace and gdb read what usdt
    // reads.
    let emulated = [
        ("aarch64", "6.1.", false),
        ("aarch64", "6.12.", true),
        ("aarch64", "7.3", true),
        ("riscv64", "6.12.", true),
        ("riscv64", "7.2.", true),
    ];
    for arch in ["aarch64", "riscv64"] {
        let n = rows.iter().filter(|r| r["arch"] == arch).count();
        let want = emulated.iter().filter(|(a, _, _)| *a == arch).count();
        assert_eq!(n, want, "{arch}: {stderr}");
    }
    for (arch, prefix, multi) in emulated {
        let row = of(arch, prefix);
        assert_eq!(row["accel"], "tcg", "{row}");
        assert_eq!(row["root"], "initramfs", "{row}");
        assert_eq!(row["uprobe_syscall"], "ENOSYS", "{row}");
        assert_eq!(row["uprobe_multi"], multi, "{row}");
        assert_eq!(row["default_attach"]["nop"], "nop", "{row}");
        assert_eq!(row["optimized"]["nop"], false, "{row}");
        assert_eq!(
            row["fork"]["nop"]["default"]["child_survives"], true,
            "{row}"
        );
        assert_eq!(row["values_exact"], true, "{row}");
        let types: Vec<&Value> = row["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["example"] == "types")
            .collect();
        assert_eq!(types.len(), if multi { 2 } else { 1 }, "{row}");
        assert!(
            types.iter().all(|c| c["semaphore_released"] == true),
            "{row}"
        );
        // The program written outside the project: counted and traced with
        // each engine, and its orders paired by `usdt latency` (refused
        // without uprobe_multi links).
        let shop = row["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["example"] == "shop")
            .count();
        assert_eq!(shop, if multi { 5 } else { 3 }, "{row}");
        for consumer in ["bpftrace", "gdb"] {
            assert!(
                row["checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["tool"] == consumer && c["exact"] == true),
                "{consumer}: {row}"
            );
        }
        // Stacks (a contract of `report::broken`): each engine the kernel
        // has, and the default where BPF has no uprobe_multi links (it
        // falls back to perf); aarch64 unwinds the example's three paths,
        // riscv64 refuses.
        let stacks = row["stacks"].as_array().unwrap();
        let engines: Vec<&str> = stacks
            .iter()
            .filter(|c| c["tool"] == "usdt trace --stack")
            .filter_map(|c| c["engine"].as_str())
            .collect();
        let want = if multi {
            ["perf", "bpf"]
        } else {
            ["perf", "auto"]
        };
        assert_eq!(engines, want, "{row}");
        assert_eq!(stacks.len(), 4, "{row}");
        assert_eq!(row["stacks_exact"], true, "{row}");
        for c in stacks {
            let frames = c["frames"].as_array().map_or(0, Vec::len);
            assert_eq!(frames, if arch == "aarch64" { 3 } else { 0 }, "{c}");
        }
        assert!(row["ratio_default_vs_c"].as_f64().is_some(), "{row}");
    }
}
