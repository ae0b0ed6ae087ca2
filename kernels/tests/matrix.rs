//! The kernel matrix on one old kernel (6.1: no uprobe syscall, no BPF
//! uprobe_multi) and one new (7.3: nop10 optimized, fork fixed), booted in
//! qemu: each keeps the contracts, and reports what its generation does.
//! The kernels and the built programs are shared with `cargo run -p
//! usdt-kernels` (the cache and `target/kernels`), so after the first run
//! this costs two boots.

use std::process::Command;

use serde_json::Value;
use usdt_provision::Need;

#[test]
fn an_old_and_a_new_kernel_keep_the_contracts() {
    if !usdt_provision::ready(&[Need::root(
        "the guests attach uprobes, and qemu's root is the machine's",
    )]) {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_usdt-kernels"))
        .args(["--json", "--kernel", "6.1", "--kernel", "7.3"])
        .output()
        .expect("run usdt-kernels");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("usdt-kernels printed no JSON ({e}):\n{stderr}"));
    assert_eq!(rows.len(), 2, "{stderr}");
    for row in &rows {
        assert_eq!(
            usdt_kernels::report::broken(row),
            Vec::<String>::new(),
            "{}:\n{stderr}",
            row["kernel"]
        );
        assert_eq!(row["accel"], usdt_kernels::boot::accel().0.name());
        assert!(row["version"].is_string(), "{row}");
    }
    let (old, new) = (&rows[0], &rows[1]);
    assert!(old["kernel"].as_str().unwrap().starts_with("6.1."), "{old}");
    assert_eq!(old["uprobe_syscall"], "ENOSYS");
    assert_eq!(old["uprobe_multi"], false);
    assert_eq!(old["optimized"]["nop5"], false);
    assert_eq!(old["optimized"]["nop10"], false);
    assert_eq!(old["optimized"]["nop5_nop10"], false);
    assert!(new["kernel"].as_str().unwrap().starts_with("7.3"), "{new}");
    assert_eq!(new["uprobe_syscall"], "EPROTO");
    assert_eq!(new["uprobe_multi"], true);
    assert_eq!(
        new["optimized"]["nop5"], false,
        "7.3 no longer optimizes nop5"
    );
    assert_eq!(new["optimized"]["nop10"], true, "7.3 optimizes nop10");
    // The two-nop site: its nop10 (at Location + 6) is the one 7.3 takes,
    // and the default takes it.
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
    assert!(out.status.success(), "{stderr}");
}
