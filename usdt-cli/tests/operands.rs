//! Probe arguments in the operand forms real compilers and hand-written
//! notes use (tests/c/operands.c, asmops.c, absolute.c, sites810.c): `usdt list` reads
//! every file, `usdt trace` prints the values the programs passed, equal to
//! gdb's `$_probe_argN` wherever gdb reads them, an argument no reader can
//! read says why, and one odd operand hides none of a file's sites.
//! Tracing needs root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use usdt_provision::{Need, CLANG, GDB};
use usdt_test_support::c::C_DIR;
use usdt_test_support::{ready, ROOT, SDT};

const GDB_NEED: Need = Need::package(GDB, "its $_probe_argN values are compared with usdt's");
const TRACEFS_NEED: Need = Need::tracefs(
    "the kernel reads red-zone operands (gcc -O0, clang -O2) at the hit through tracefs uprobe events",
);
const CLANG_NEED: Need = Need::package(CLANG, "clang -O2 writes operand forms gcc does not");

/// Compiles `tests/c/SOURCE` with `compiler` and `flags` into `NAME` (once
/// per test process).
fn build(name: &str, source: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    let dir = Path::new(C_DIR);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp
        .join(format!("operands-{}", std::process::id()))
        .join(name);
    if out.exists() {
        return out;
    }
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let status = Command::new(compiler)
        .args(["-g", "-o"])
        .arg(&out)
        .arg(dir.join(source))
        .args(flags)
        .status()
        .expect("the compiler runs");
    assert!(status.success(), "{compiler} {flags:?} failed on {source}");
    out
}

/// Runs `program ARGS` under `timeout`: no test waits forever on a child.
fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
    run_for(60, program, args)
}

fn run_for(seconds: u32, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", &seconds.to_string()])
        .arg(program)
        .args(args)
        .output()
        .expect("timeout runs")
}

fn usdt(args: &[&str]) -> Output {
    run(env!("CARGO_BIN_EXE_usdt"), args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `usdt list`'s argument strings, by probe.
fn listed(exe: &Path) -> BTreeMap<String, String> {
    let out = usdt(&["list", exe.to_str().unwrap()]);
    assert!(out.status.success(), "usdt list: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    // The arguments start at the column of the header's ARGUMENTS.
    let column = lines.next().unwrap().find("ARGUMENTS").unwrap();
    lines
        .map(|l| {
            let probe = l.split(' ').next().unwrap().to_string();
            (probe, l.get(column..).unwrap_or("").trim().to_string())
        })
        .collect()
}

/// `usdt trace -- EXE`: what follows each probe's name, by probe (each
/// probe fires once).
fn traced(exe: &Path, options: &[&str]) -> BTreeMap<String, String> {
    let mut args = vec!["trace"];
    args.extend(options);
    args.extend(["--", exe.to_str().unwrap()]);
    let out = usdt(&args);
    assert!(out.status.success(), "usdt trace: {}", text(&out.stderr));
    let mut hits = BTreeMap::new();
    for line in text(&out.stdout).lines() {
        // TIME PID/TID PROBE ARGS...
        let mut words = line.splitn(4, ' ');
        let probe = words.nth(2).unwrap().to_string();
        let rest = words.next().unwrap_or("").to_string();
        assert!(hits.insert(probe, rest).is_none(), "twice: {line}");
    }
    hits
}

/// gdb's `$_probe_argN` at each probe, as `argN=V` words (`argN=?` where
/// gdb cannot read it), by probe; `None` for a probe whose argument string
/// gdb cannot parse at all.
fn gdb_values(exe: &Path, probes: &[&str]) -> BTreeMap<String, Option<Vec<String>>> {
    let script = r#"
import gdb, os
gdb.execute("set pagination off")
names = {}
def on_stop(ev):
    if not isinstance(ev, gdb.BreakpointEvent):
        return
    name = names.get(ev.breakpoints[0].number)
    try:
        argc = int(gdb.parse_and_eval("$_probe_argc"))
    except gdb.error:
        print("PROBE %s ?" % name)
        return
    words = []
    for i in range(argc):
        try:
            words.append("arg%d=%d" % (i, int(gdb.parse_and_eval("$_probe_arg%d" % i))))
        except gdb.error:
            words.append("arg%d=?" % i)
    print("PROBE %s %s" % (name, " ".join(words)))
gdb.events.stop.connect(on_stop)
for p in os.environ["USDT_PROBES"].split():
    names[gdb.Breakpoint("-probe-stap " + p).number] = p
gdb.execute("run")
while gdb.selected_inferior().pid:
    gdb.execute("continue")
"#;
    let path = exe.with_extension("gdb.py");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "60", "gdb", "-q", "-batch", "-x"])
        .arg(&path)
        .arg(exe)
        .env("USDT_PROBES", probes.join(" "))
        .output()
        .unwrap();
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("PROBE "))
        .map(|l| {
            let mut words = l.split(' ');
            let probe = words.next().unwrap().to_string();
            let words: Vec<String> = words.filter(|w| !w.is_empty()).map(String::from).collect();
            (probe, (words != ["?"]).then_some(words))
        })
        .collect()
}

/// Every value gdb reads equals usdt's; returns how many were compared.
fn compare_with_gdb(exe: &Path, usdt: &BTreeMap<String, String>) -> usize {
    let probes: Vec<&str> = usdt.keys().map(String::as_str).collect();
    let gdb = gdb_values(exe, &probes);
    assert_eq!(
        gdb.len(),
        probes.len(),
        "gdb stopped at every probe: {gdb:?}"
    );
    let mut compared = 0;
    for (probe, words) in &gdb {
        let Some(words) = words else { continue };
        let ours: Vec<&str> = usdt[probe].split(" arg").collect();
        for (i, word) in words.iter().enumerate() {
            if word.ends_with("=?") {
                continue;
            }
            let ours = ours[i].trim_start_matches("arg");
            assert_eq!(
                ours,
                word.trim_start_matches("arg"),
                "{probe} arg{i} in {}",
                exe.display()
            );
            compared += 1;
        }
    }
    compared
}

const WIDE_BYTES: &str = "arg0=hex:18171615141312110807060504030201 \
     arg1=hex:01000000000000000200000000000000 \
     arg2=hex:030000000000000004000000000000000500000000000000";

#[test]
fn every_form_gcc_and_clang_write_is_read_and_traced() {
    if !ready(&[ROOT, SDT, TRACEFS_NEED]) {
        return;
    }
    let mut builds = vec![
        (
            "gcc -O0",
            build("ops-gcc-O0", "operands.c", "gcc", &["-O0", "-DWIDE"]),
        ),
        // gcc -O2 warns of "unsupported size for integer register" and
        // names one register for a 16-byte value.
        (
            "gcc -O2",
            build("ops-gcc-O2", "operands.c", "gcc", &["-O2", "-DWIDE"]),
        ),
    ];
    if usdt_provision::ready_part("clang -O2", &[CLANG_NEED]) {
        let exe = build("ops-clang-O2", "operands.c", "clang-14", &["-O2", "-DWIDE"]);
        builds.push(("clang -O2", exe));
    }
    let gdb = usdt_provision::ready_part("the comparison with gdb", &[GDB_NEED]);
    for (compiler, exe) in &builds {
        let list = listed(exe);
        eprintln!("{compiler} wrote: {list:#?}");
        assert_eq!(list.len(), 7, "{compiler}: {list:?}");
        let forms: &[(&str, &str)] = match *compiler {
            "gcc -O0" => &[
                ("ops:floats", "4f@-4(%rbp) 8f@-16(%rbp)"),
                ("ops:wide", "-16@-16(%rbp)"),
            ],
            "gcc -O2" => &[
                ("ops:floats", "4f@%edx 8f@%rax"),
                ("ops:constfloat", "8f@.LC0(%rip)"),
                ("ops:globals", "-8@g_long(%rip) -4@s_int(%rip)"),
                ("ops:indexed", "-8@(%rdi,%rsi,8)"),
                ("ops:wide", "-16@%rsi"),
            ],
            _ => &[
                ("ops:constfloat", "8f@.LCPI"),
                ("ops:wide", "-16@-32(%rsp) 16@"),
            ],
        };
        for (probe, form) in forms {
            assert!(
                list[*probe].contains(form),
                "{compiler} {probe}: {}",
                list[*probe]
            );
        }
        let hits = traced(exe, &[]);
        let want = |probe: &str| hits[probe].as_str();
        assert_eq!(
            want("ops:scalars"),
            "arg0=-5 arg1=-300 arg2=-70000 arg3=-5000000000 arg4=18446744073709551615"
        );
        assert_eq!(want("ops:floats"), "arg0=1.5 arg1=-3.25", "{compiler}");
        assert_eq!(want("ops:globals"), "arg0=-1234567 arg1=77", "{compiler}");
        assert_eq!(want("ops:indexed"), "arg0=13", "{compiler}");
        assert_eq!(want("ops:none"), "", "{compiler}");
        match *compiler {
            "gcc -O0" => {
                assert_eq!(want("ops:constfloat"), "arg0=2.5 arg1=0.75");
                assert_eq!(want("ops:wide"), WIDE_BYTES);
            }
            "gcc -O2" => {
                assert_eq!(
                    want("ops:constfloat"),
                    "arg0=? (`.LC0` is a local label, which the assembler leaves out of the symbol tables) \
                     arg1=? (`.LC1` is a local label, which the assembler leaves out of the symbol tables)"
                );
                assert_eq!(
                    want("ops:wide"),
                    "arg0=? (a 16-byte value does not fit in register %rsi) \
                     arg1=? (a 16-byte value does not fit in register %rax) \
                     arg2=hex:030000000000000004000000000000000500000000000000"
                );
            }
            _ => {
                assert!(
                    want("ops:constfloat").starts_with("arg0=? (`.LCPI"),
                    "{hits:?}"
                );
                assert_eq!(want("ops:wide"), WIDE_BYTES);
            }
        }
        if gdb {
            let n = compare_with_gdb(exe, &hits);
            eprintln!("{compiler}: {n} values equal to gdb's");
            assert!(n >= 6, "{compiler}: gdb read only {n} values");
        }
    }
}

/// What asmops passes, probe by probe.
const ASMOPS: [(&str, &str); 7] = [
    ("asm:sib", "arg0=300 arg1=-400 arg2=-200 arg3=-22"),
    ("asm:expr", "arg0=-200 arg1=-400 arg2=100"),
    // Bare operands are 8 unsigned bytes.
    (
        "asm:bare",
        "arg0=18446744073586094827 arg1=300 arg2=18446744073709551607",
    ),
    (
        "asm:symbols",
        "arg0=100 arg1=-200 arg2=-22 arg3=33 arg4=100",
    ),
    (
        "asm:xmm",
        "arg0=-42 arg1=? (xmm registers are not sampled) arg2=-42",
    ),
    ("asm:nop5", "arg0=-7"),
    ("asm:classic", ""),
];

#[test]
fn hand_written_operands_and_a_malformed_note() {
    if !ready(&[SDT]) {
        return;
    }
    let exe = build("asmops", "asmops.c", "gcc", &["-O2"]);
    let out = usdt(&["list", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "usdt: {}: stapsdt note 6 is malformed and skipped: its provider or probe name is empty\n",
            exe.display()
        )
    );
    let list = text(&out.stdout);
    assert_eq!(list.lines().count(), 1 + ASMOPS.len(), "{list}");
    let nop5 = list.lines().find(|l| l.starts_with("asm:nop5 ")).unwrap();
    assert!(nop5.contains(" nop5 "), "{nop5}");
    if !usdt_provision::ready_part("tracing", &[ROOT]) {
        return;
    }
    // The BPF engine, perf with fetch events, perf with stack copies.
    let engines: [&[&str]; 3] = [&[], &["--engine", "perf"], &["--no-kernel-fetch"]];
    for options in engines {
        let hits = traced(&exe, options);
        let want: BTreeMap<String, String> = ASMOPS
            .iter()
            .map(|(p, a)| (p.to_string(), a.to_string()))
            .collect();
        assert_eq!(hits, want, "usdt trace {options:?}");
    }
    if usdt_provision::ready_part("the comparison with gdb", &[GDB_NEED]) {
        let hits = traced(&exe, &[]);
        let n = compare_with_gdb(&exe, &hits);
        eprintln!("asmops: {n} values equal to gdb's");
        assert!(n >= 4, "gdb read only {n} values");
    }
    // Stripped, the symbols are gone: those arguments say so, the others stay.
    let stripped = exe.with_extension("stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success());
    let hits = traced(&stripped, &[]);
    let gone = "? (symbol `asm_table` is not in the file's symbol tables (stripped?))";
    let words = "? (symbol `asm_words` is not in the file's symbol tables (stripped?))";
    assert_eq!(
        hits["asm:symbols"],
        format!("arg0={gone} arg1={gone} arg2={words} arg3={words} arg4={gone}")
    );
    assert_eq!(hits["asm:sib"], ASMOPS[0].1);
}

/// What absolute.c passes.
const ABSOLUTE: &str =
    "arg0=1 arg1=2 arg2=3 arg3=4 arg4=5 arg5=6 arg6=7 arg7=8 arg8=9 arg9=-30 arg10=-3 arg11=-3";

#[test]
fn symbols_plus_registers_from_position_dependent_code() {
    if !ready(&[SDT]) {
        return;
    }
    let exe = build(
        "absolute",
        "absolute.c",
        "gcc",
        &["-O2", "-fno-pie", "-no-pie"],
    );
    let list = listed(&exe);
    let args = &list["abs:elements"];
    // gcc 12 writes `longs(,%rax,8) shorts(%rax,%rax) pairs+4(,%rax,8)`.
    let absolute = args
        .split(' ')
        .filter(|a| {
            let operand = a.split_once('@').map_or(*a, |(_, o)| o);
            operand.starts_with(|c: char| c.is_ascii_alphabetic())
                && operand.contains('(')
                && !operand.ends_with("(%rip)")
        })
        .count();
    assert!(absolute > 0, "no symbol plus registers in {args}");
    if !usdt_provision::ready_part("tracing", &[ROOT]) {
        return;
    }
    let engines: [&[&str]; 3] = [&[], &["--engine", "perf"], &["--no-kernel-fetch"]];
    for options in engines {
        let hits = traced(&exe, options);
        assert_eq!(hits["abs:elements"], ABSOLUTE, "usdt trace {options:?}");
    }
    if usdt_provision::ready_part("the comparison with gdb", &[GDB_NEED]) {
        // gdb 13 parses none of this note's arguments (`v+64(%rip)` stops
        // it), so it may have nothing to compare: it still stops there.
        let hits = traced(&exe, &[]);
        let n = compare_with_gdb(&exe, &hits);
        eprintln!("absolute: {n} values equal to gdb's");
    }
}

#[test]
fn one_odd_operand_hides_none_of_810_sites() {
    if !ready(&[SDT]) {
        return;
    }
    let exe = build("sites810", "sites810.c", "gcc", &["-O2"]);
    let out = usdt(&["list", "--sites", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sites = text(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("site "))
        .count();
    assert_eq!(sites, 810);
    if usdt_provision::ready_part("gdb's count", &[GDB_NEED]) {
        let out = run(
            "gdb",
            &["-q", "-batch", "-ex", "info probes", exe.to_str().unwrap()],
        );
        let gdb = text(&out.stdout)
            .lines()
            .filter(|l| l.contains(" many "))
            .count();
        assert_eq!(gdb, 810);
    }
    if !usdt_provision::ready_part("counting", &[ROOT]) {
        return;
    }
    // Closing 810 uprobe events takes minutes here (each close waits for
    // an RCU grace period): usdt prints the counts long before it exits.
    let args = ["count", "--", exe.to_str().unwrap()];
    let out = run_for(600, env!("CARGO_BIN_EXE_usdt"), &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "many:hit 809\nmany:odd 1\n");
    let hits = traced(&exe, &["many:odd"]);
    assert_eq!(
        hits["many:odd"],
        "arg0=810 arg1=? (xmm registers are not sampled) arg2=810"
    );
}

#[test]
fn a_library_that_cannot_be_read_is_named_not_skipped_in_silence() {
    if !ready(&[ROOT, SDT]) {
        return;
    }
    let c = Path::new(C_DIR);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("badlib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcdemolib.so");
    let exe = dir.join("cdemo");
    let cc = |args: &[&std::ffi::OsStr]| {
        assert!(Command::new("cc").args(args).status().unwrap().success());
    };
    cc(&[
        "-O2".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        lib.as_ref(),
        c.join("cdemolib.c").as_ref(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        "-O2".as_ref(),
        "-o".as_ref(),
        exe.as_ref(),
        c.join("cdemo.c").as_ref(),
        c.join("cdemo_guarded.c").as_ref(),
        lib.as_ref(),
        rpath.as_ref(),
    ]);
    // The section headers point past the end: the loader does not need
    // them, the note reader does.
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&lib, bytes).unwrap();
    let out = usdt(&["count", "--", exe.to_str().unwrap(), "2", "0", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "evaluated 0\ncdemo:guarded 0\ncdemo:plain 2\n"
    );
    let err = text(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("libcdemolib.so"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.ends_with("; its probes are not attached"), "{line}");
}
