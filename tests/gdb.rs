//! gdb lists the probes (`info probes`) and reads all twelve arguments of a
//! probe through `$_probe_arg0`..`$_probe_arg11`.

use usdt_test_support::shapes::{example, Shape};
use usdt_test_support::{ready, run_ok, GDB};

use std::process::Command;

fn gdb(shape: Shape) {
    if !ready(&[GDB]) {
        return;
    }
    let bin = example("types", shape);
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx"])
        .args(["-ex", "info probes stap"])
        .args(["-ex", "break -probe-stap types:twelve"])
        .args(["-ex", "run"])
        .args(["-ex", "print $_probe_argc"]);
    for i in 0..12 {
        cmd.args(["-ex", &format!("print $_probe_arg{i}")]);
    }
    cmd.args(["-ex", "kill", "--args"]).arg(&bin).arg("once");
    let out = run_ok(&mut cmd);
    let out = String::from_utf8_lossy(&out.stdout);

    // info probes: every probe, with its semaphore for provider probes.
    for probe in [
        "unsigned", "signed", "other", "strings", "pointers", "twelve", "lazy", "generic",
        "inlined", "done",
    ] {
        let row = out
            .lines()
            .find(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() >= 4 && cols[0] == "stap" && cols[1] == "types" && cols[2] == probe
            })
            .unwrap_or_else(|| panic!("{shape:?}: info probes lacks types:{probe}:\n{out}"));
        assert!(row.contains(&*bin.to_string_lossy()), "{row}");
    }

    let values: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix('$'))
        .map(|l| l.split_once(" = ").expect("gdb value").1)
        .collect();
    let want = [
        "12".to_owned(),
        u64::MAX.to_string(),
        i64::MIN.to_string(),
        u32::MAX.to_string(),
        "-5".to_owned(),
        "60000".to_owned(),
        "-300".to_owned(),
        "200".to_owned(),
        "-100".to_owned(),
        "1".to_owned(),
        ('z' as u32).to_string(),
        "12345".to_owned(),
        "-12345".to_owned(),
    ];
    assert_eq!(values, want, "{shape:?}: gdb printed:\n{out}");
}

#[test]
fn gdb_reads_twelve_arguments_debug() {
    gdb(Shape::Debug);
}

#[test]
fn gdb_reads_twelve_arguments_release() {
    gdb(Shape::Release);
}

#[test]
fn gdb_reads_twelve_arguments_fat_lto() {
    gdb(Shape::O3Fat);
}
