//! Build shapes: the examples built with every listed value of opt-level,
//! `lto`, `codegen-units`, `panic`, debug info, relocation model and linker,
//! each value in at least one cell (not their product). In every cell:
//!
//! - every note of every example passes `check_notes` (all declared
//!   probes and no other: the probes in code the linker removed, in
//!   `examples/gc.rs`, have no note; Location in executable code on the site's
//!   bytes; Base equal to `.stapsdt.base`'s address; one 2-byte-aligned
//!   semaphore per provider probe; argument sizes, signs and registers);
//! - the ELF type (non-PIE or PIE) and debug info are what the cell asked for;
//! - usdt-trace's counting `PerfCounter` counts exactly the calls: every probe of
//!   `types` (each of the three sites of a generic function and the five
//!   copies of an `#[inline(always)]` helper hit once, the lazy probe's
//!   semaphore raised by the kernel), the demo's three probes, `gc:kept`;
//! - bpftrace attaches to every note of `gc` and counts its calls;
//! - the red-zone check (`tests/redzone.rs`) holds at Location + 1.

use usdt_test_support::cell::{
    Cell, CELL_BINS, O0, O1_THIN_GNU_LD, O2_NON_PIE, O3_FAT_ABORT, OS_THIN_NON_PIE_GNU_LD,
    OZ_FAT_GNU_LD,
};
use usdt_test_support::counting::{check_redzone, check_types, count_run};
use usdt_test_support::notes::{check_notes, expected, DEFAULT_LAYOUT};
use usdt_test_support::{ready_part, run_ok, tracing_env, BPFTRACE, ROOT, TRACEFS};

use std::collections::BTreeMap;
use std::process::Command;
use usdt_trace::AttachPoint;

fn check(cell: Cell) {
    let what = cell.describe();
    for bin in CELL_BINS {
        let path = cell.bin(bin);
        let what = format!("{bin} ({what})");
        let probes = check_notes(&path, &expected(bin), DEFAULT_LAYOUT, &what);
        // ET_EXEC for a non-PIE executable, ET_DYN for a PIE one.
        let want = if cell.non_pie { 2 } else { 3 };
        assert_eq!(probes.elf_type, want, "{what}: ELF type");
        let sections = run_ok(Command::new("readelf").arg("-SW").arg(&path));
        let has_debug = String::from_utf8_lossy(&sections.stdout).contains(" .debug_info ");
        assert_eq!(has_debug, cell.debug, "{what}: .debug_info");
    }

    if !ready_part("tracing", &[ROOT, TRACEFS, BPFTRACE]) {
        return;
    }
    check_types(&cell.bin("types"), AttachPoint::Auto, &what);

    let (out, counts) = count_run(&cell.bin("demo"), &["7"], AttachPoint::Nop);
    assert!(
        out.contains("fired 7 requests; 7 were traced at request_done"),
        "{what}: {out}"
    );
    let want: BTreeMap<String, u64> = ["http:request_start", "http:request_done", "http:tick"]
        .iter()
        .map(|p| (p.to_string(), 7))
        .collect();
    assert_eq!(counts, want, "{what}: demo hits");

    let gc = cell.bin("gc");
    let (out, counts) = count_run(&gc, &["5"], AttachPoint::Auto);
    assert_eq!(out, "kept 5\n", "{what}");
    assert_eq!(
        counts.into_iter().collect::<Vec<_>>(),
        [("gc:kept".to_owned(), 5)]
    );
    bpftrace_counts_gc(&gc, &what);

    check_redzone(&cell.bin("redzone"), &what);
}

/// bpftrace attaches to every probe of `gc` (a stale note would make it
/// fail or patch the wrong bytes) and counts `gc:kept`.
fn bpftrace_counts_gc(gc: &std::path::Path, what: &str) {
    tracing_env();
    let b = gc.display();
    let out = run_ok(
        Command::new("bpftrace")
            .arg("-e")
            .arg(format!("usdt:{b}:* {{ @[probe] = count(); }}"))
            .arg("-c")
            .arg(format!("{b} 4")),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    let hits: Vec<&str> = out.lines().filter(|l| l.starts_with("@[")).collect();
    assert_eq!(hits, [format!("@[usdt:{b}:gc:kept]: 4")], "{what}: {out}");
}

#[test]
fn shape_o0_debug_info_lld() {
    check(O0);
}

#[test]
fn shape_o1_thin_lto_gnu_ld() {
    check(O1_THIN_GNU_LD);
}

#[test]
fn shape_o2_one_codegen_unit_non_pie() {
    check(O2_NON_PIE);
}

#[test]
fn shape_o3_fat_lto_panic_abort() {
    check(O3_FAT_ABORT);
}

#[test]
fn shape_os_thin_lto_non_pie_gnu_ld() {
    check(OS_THIN_NON_PIE_GNU_LD);
}

#[test]
fn shape_oz_fat_lto_gnu_ld() {
    check(OZ_FAT_GNU_LD);
}
