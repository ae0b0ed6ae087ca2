//! Probes that describe themselves: the signature records of
//! `examples/signatures.rs` (every argument kind) read back exactly, shown
//! by `usdt list`, printed by `usdt trace` (text and `--json`) with names
//! and typed values, and by the bpftrace program `usdt bpftrace` writes;
//! gdb finds the dashed probe and reads the byte slice's two operands.

use std::process::{Command, Output};

use usdt_test_support::cli::example;
use usdt_test_support::process::output_within;
use usdt_test_support::{ready, BPFTRACE, ROOT, TRACEFS};
use usdt_trace::{read_file_probes, read_file_signatures, Kind, Signatures};

const GDB: usdt_provision::Need =
    usdt_provision::Need::package(usdt_provision::GDB, "the test stops at a probe with it");

/// Each probe's `usdt list` name: the source's parameters as written.
const SIGNATURES: [&str; 9] = [
    "kinds:ints(a: u8, b: i8, c: u16, d: i16, e: u32, f: i32, g: u64, h: i64, i: usize, j: isize)",
    "kinds:misc(flag: bool, letter: char, half: f32, third: f64)",
    "kinds:text(id: u64, path: &str, owned: String, c: &CStr, cs: CString)",
    "kinds:pointers(raw: *const u8, reference: &u32)",
    "kinds:bytes(data: &[u8], owned: Vec<u8>)",
    "kinds:times(rtt: Duration, long: std::time::Duration)",
    "kinds:user(conn: ConnId, port: Port)",
    "kinds:order-placed(id: u64, item: &str)",
    "kinds:empty()",
];

/// What `usdt trace` prints after the time and pid/tid, in firing order;
/// `REF` is the address the program prints.
fn trace_lines(reference: &str) -> Vec<String> {
    let owned = vec!["ab"; 64].join(" ");
    [
        "kinds:ints a=255 b=-1 c=65535 d=-2 e=4000000000 f=-3 g=18446744073709551615 h=-9223372036854775808 i=9 j=-9".to_string(),
        "kinds:misc flag=true letter='é' half=1.5 third=-2".to_string(),
        r#"kinds:text id=1 path="/index.html" owned="a \"quoted\"\n" c="c-string" cs="owned""#.to_string(),
        format!("kinds:pointers raw=0x1234 reference={reference}"),
        format!("kinds:bytes data=[01 02 ff] owned=[{owned} ...]"),
        "kinds:times rtt=1500000ns long=18446744073709551615ns".to_string(),
        "kinds:user conn=42 port=443".to_string(),
        r#"kinds:order-placed id=5 item="book""#.to_string(),
        "kinds:empty".to_string(),
    ]
    .into()
}

fn usdt(args: &[&str]) -> Output {
    let out = output_within(Command::new(env!("CARGO_BIN_EXE_usdt")).args(args), 600);
    assert!(out.status.success(), "usdt {args:?}: {out:?}");
    out
}

fn text(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `timeout` around a command: a tracer that hangs fails the test.
fn timeout(secs: u32) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", &secs.to_string()]);
    c
}

/// The program's own line, `reference 0x...`, and the other lines.
fn split_program(out: &str) -> (String, Vec<String>) {
    let (program, rest): (Vec<&str>, Vec<&str>) =
        out.lines().partition(|l| l.starts_with("reference "));
    assert_eq!(program.len(), 1, "{out}");
    let reference = program[0]["reference ".len()..].to_string();
    (reference, rest.into_iter().map(String::from).collect())
}

#[test]
fn the_records_hold_every_name_type_and_kind() {
    let exe = example("signatures");
    let records = read_file_signatures(&exe).unwrap();
    let mut shown: Vec<String> = records.iter().map(|r| r.display()).collect();
    shown.sort();
    let mut want: Vec<String> = SIGNATURES.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(shown, want);
    let kinds = |probe: &str| -> Vec<Kind> {
        let r = records.iter().find(|r| r.name == probe).unwrap();
        r.params.iter().map(|p| p.kind).collect()
    };
    use Kind::*;
    assert_eq!(
        kinds("ints"),
        [
            Unsigned(1),
            Signed(1),
            Unsigned(2),
            Signed(2),
            Unsigned(4),
            Signed(4),
            Unsigned(8),
            Signed(8),
            Unsigned(8),
            Signed(8)
        ]
    );
    assert_eq!(kinds("misc"), [Bool, Char, F32, F64]);
    assert_eq!(kinds("text"), [Unsigned(8), Str, Str, CStr, CStr]);
    assert_eq!(kinds("pointers"), [Pointer, Pointer]);
    assert_eq!(kinds("bytes"), [Bytes, Bytes]);
    assert_eq!(kinds("times"), [Duration, Duration]);
    // The derive passes the field's kind; the hand-written impl names its own.
    assert_eq!(kinds("user"), [Unsigned(8), Unsigned(2)]);
    // Every record fits its note: a byte slice is two operands.
    let probes = read_file_probes(&exe).unwrap();
    let mut sigs = Signatures::new();
    sigs.extend(records);
    for site in &probes.sites {
        let sig = sigs
            .of_site(site)
            .unwrap_or_else(|| panic!("{}", site.probe()));
        assert_eq!(sig.operands(), site.args.len(), "{}", site.probe());
    }
    let bytes = probes.sites.iter().find(|s| s.name == "bytes").unwrap();
    assert_eq!(bytes.args.len(), 4);
}

#[test]
fn list_shows_each_probe_with_its_parameters_as_written() {
    let exe = example("signatures");
    let out = text(&usdt(&["list", exe.to_str().unwrap()]));
    let mut listed: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split_once("  ").unwrap().0)
        .collect();
    listed.sort();
    let mut want = SIGNATURES.to_vec();
    want.sort();
    assert_eq!(listed, want, "{out}");
}

#[test]
fn trace_prints_names_and_typed_values() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = example("signatures");
    // The BPF engine and perf with fetch events read memory at the hit;
    // perf with stack copies after it.
    for extra in [
        &[][..],
        &["--engine", "perf"][..],
        &["--no-kernel-fetch"][..],
    ] {
        let out = timeout(120)
            .arg(env!("CARGO_BIN_EXE_usdt"))
            .arg("trace")
            .args(extra)
            .args(["--", exe.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let (reference, hits) = split_program(&text(&out));
        // `TIME PID/TID LINE`.
        let lines: Vec<String> = hits
            .iter()
            .map(|l| l.splitn(3, ' ').nth(2).unwrap().trim_end().to_string())
            .collect();
        let want = trace_lines(&reference);
        if extra != ["--no-kernel-fetch"] {
            assert_eq!(lines, want, "{extra:?}");
            continue;
        }
        // Without kernel fetch, memory is read from the process after the hit:
        // the owned CString and Vec are freed by then, and on a busy machine
        // the program (which lingers 0.3 s) may be gone before its read-only
        // data is read: then the value says so, with its address.
        assert_eq!(lines.len(), want.len(), "{lines:?}");
        let read_or_gone = |got: &str, prefix: &str, value: &str| {
            let rest = got.strip_prefix(prefix).unwrap_or_else(|| panic!("{got}"));
            assert!(
                rest.starts_with(value) || rest.starts_with("<unreadable 0x"),
                "{got}"
            );
        };
        for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
            match i {
                2 => {
                    let c = want.find(" c=").unwrap() + " c=".len();
                    read_or_gone(got, &want[..c], "\"c-string\" cs=");
                }
                4 => read_or_gone(got, "kinds:bytes data=", "[01 02 ff] owned="),
                _ => assert_eq!(got, want, "--no-kernel-fetch"),
            }
        }
    }
    // --raw: the notes' integers, as for a probe without a record.
    let out = text(&usdt(&[
        "trace",
        "--raw",
        "kinds:misc",
        "--",
        exe.to_str().unwrap(),
    ]));
    let (_, hits) = split_program(&out);
    assert!(
        hits[0].ends_with(" kinds:misc arg0=1 arg1=233 arg2=1069547520 arg3=13835058055282163712"),
        "{out}"
    );
}

/// `--json` keys a typed probe's arguments by name, in the order of the
/// probe's parameters (`misc(flag, letter, half, third)`, not alphabetical),
/// and each hit's own keys in the order the README gives: checked on the
/// raw lines, not on parsed maps, which forget the order.
#[test]
fn trace_json_keys_arguments_by_name_in_parameter_order() {
    if !ready(&[ROOT]) {
        return;
    }
    let exe = example("signatures");
    let out = timeout(120)
        .arg(env!("CARGO_BIN_EXE_usdt"))
        .args(["trace", "--json", "--", exe.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (reference, hits) = split_program(&text(&out));
    for line in &hits {
        let at = |key: &str| line.find(&format!("\"{key}\":")).unwrap_or(usize::MAX);
        let order = ["time_ns", "pid", "tid", "probe", "args"].map(at);
        assert!(line.starts_with("{\"time_ns\":"), "{line}");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{line}");
        let _: serde_json::Value = serde_json::from_str(line).unwrap();
    }
    // The text of `args` after `"probe":"PROBE",`: the last key.
    let args = |probe: &str| -> String {
        let tag = format!(",\"probe\":\"{probe}\",\"args\":");
        let line = hits.iter().find(|l| l.contains(&tag));
        let line = line.unwrap_or_else(|| panic!("no {probe} in {hits:#?}"));
        let (_, args) = line.split_once(&tag).unwrap();
        args.strip_suffix('}').unwrap().to_string()
    };
    assert_eq!(
        args("kinds:ints"),
        r#"{"a":255,"b":-1,"c":65535,"d":-2,"e":4000000000,"f":-3,"g":18446744073709551615,"h":-9223372036854775808,"i":9,"j":-9}"#
    );
    assert_eq!(
        args("kinds:misc"),
        r#"{"flag":true,"letter":"é","half":1.5,"third":-2.0}"#
    );
    assert_eq!(
        args("kinds:text"),
        r#"{"id":1,"path":"/index.html","owned":"a \"quoted\"\n","c":"c-string","cs":"owned"}"#
    );
    assert_eq!(
        args("kinds:pointers"),
        format!(r#"{{"raw":"0x1234","reference":"{reference}"}}"#)
    );
    assert_eq!(
        args("kinds:bytes"),
        format!(r#"{{"data":"0102ff","owned":"{}"}}"#, "ab".repeat(64))
    );
    assert_eq!(
        args("kinds:times"),
        r#"{"rtt":1500000,"long":18446744073709551615}"#
    );
    assert_eq!(args("kinds:user"), r#"{"conn":42,"port":443}"#);
    assert_eq!(args("kinds:order-placed"), r#"{"id":5,"item":"book"}"#);
    assert_eq!(args("kinds:empty"), "{}");
}

/// `bpftrace -e "$(usdt bpftrace BIN)" -c BIN` prints `usdt trace`'s lines
/// for every argument bpftrace can express, and what the program's
/// comments say for the others.
#[test]
fn the_bpftrace_program_prints_what_usdt_trace_prints() {
    if !ready(&[ROOT, TRACEFS, BPFTRACE]) {
        return;
    }
    let exe = example("signatures");
    let e = exe.to_str().unwrap();
    let program = text(&usdt(&["bpftrace", e]));
    for comment in [
        "// kinds:order-placed(id: u64, item: &str)",
        "// g: left out (bpftrace reads only arg0..arg5)",
        "// half: bpftrace has no floats: printed as its IEEE-754 bits",
    ] {
        assert!(program.contains(comment), "{program}");
    }
    let out = timeout(180)
        .args(["bpftrace", "-e", &program, "-c", e])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (reference, hits) = split_program(&text(&out));
    let hits: Vec<&str> = hits
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with("kinds:"))
        .collect();
    let owned = vec!["ab"; 64].join(" ");
    let want = [
        "kinds:ints a=255 b=-1 c=65535 d=-2 e=4000000000 f=-3".to_string(),
        "kinds:misc flag=true letter='\\u{e9}' half=0x3fc00000 third=0xc000000000000000"
            .to_string(),
        // The owned string has a newline, printed as it is.
        "kinds:text id=1 path=\"/index.html\" owned=\"a \"quoted\"".to_string(),
        format!("kinds:pointers raw=0x1234 reference={reference}"),
        format!("kinds:bytes data=[01 02 ff] owned=[{owned} ...]"),
        "kinds:times rtt=1500000ns long=18446744073709551615ns".to_string(),
        "kinds:user conn=42 port=443".to_string(),
        "kinds:order-placed id=5 item=\"book\"".to_string(),
        "kinds:empty".to_string(),
    ];
    assert_eq!(hits, want, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        text(&out).contains("\n\" c=\"c-string\" cs=\"owned\"\n"),
        "{}",
        text(&out)
    );
    // Each line is usdt trace's line, or its first arguments (the rest
    // are left out), except where a comment says otherwise.
    let traced = trace_lines(&reference);
    for (i, line) in hits.iter().enumerate() {
        if !matches!(i, 1 | 2) {
            assert!(traced[i].starts_with(line), "{line} / {}", traced[i]);
        }
    }
}

/// gdb finds the dashed probe by its note name and reads the byte slice's
/// address and length, and the string.
#[test]
fn gdb_reads_the_dashed_probe_and_the_byte_slice() {
    if !ready(&[ROOT, GDB]) {
        return;
    }
    let exe = example("signatures");
    let out = timeout(120)
        .args(["gdb", "-nx", "-batch"])
        .args(["-ex", "break -probe-stap kinds:order-placed"])
        .args(["-ex", "break -probe-stap kinds:bytes"])
        .args(["-ex", "run"])
        // The program is Rust: C casts need C.
        .args(["-ex", "set language c"])
        .args(["-ex", "print $_probe_argc"])
        .args(["-ex", "print/x *(unsigned char *)$_probe_arg0@$_probe_arg1"])
        .args(["-ex", "print $_probe_arg3"])
        .args(["-ex", "continue"])
        .args(["-ex", "print $_probe_arg0"])
        .args(["-ex", "print (char *)$_probe_arg1"])
        .args(["-ex", "kill"])
        .arg("--args")
        .arg(&exe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let prints: Vec<&str> = text.lines().filter(|l| l.starts_with('$')).collect();
    let context = format!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(prints.len(), 5, "{context}");
    assert_eq!(
        prints[..4],
        ["$1 = 4", "$2 = {0x1, 0x2, 0xff}", "$3 = 70", "$4 = 5"],
        "{context}"
    );
    assert!(prints[4].contains(" \"book"), "{context}");
}
