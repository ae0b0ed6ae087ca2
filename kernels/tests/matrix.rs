//! The kernel matrix, every generation (5.10 to 7.3 and the machine's own),
//! booted in qemu: each keeps the contracts, and the old (6.1: no uprobe
//! syscall, no BPF uprobe_multi) and the new (7.3: nop10 optimized, fork
//! fixed) report what their generation does. This is the matrix `.ci/run`
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
    let of = |prefix: &str| {
        rows.iter()
            .find(|r| r["kernel"].as_str().is_some_and(|k| k.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no {prefix} row:\n{stderr}"))
    };
    let (old, new) = (of("6.1."), of("7.3"));
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
}
