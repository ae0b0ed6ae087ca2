//! bpftrace (Debian's 0.17) attaches to the `types` example and reads back
//! every argument type, extremes included; lazy closures run only while
//! traced, and `*_enabled()` follows attachment.

use usdt_test_support::shapes::{example, Shape};
use usdt_test_support::{ready, run_ok, tracing_env, Need, BPFTRACE, ROOT, TRACEFS};

use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};

/// What every test here needs.
const NEEDS: [Need; 3] = [ROOT, TRACEFS, BPFTRACE];

fn script(bin: &Path) -> String {
    let b = bin.display();
    format!(
        r#"
usdt:{b}:types:unsigned {{ printf("unsigned %lu %lu %lu %lu %lu\n", arg0, arg1, arg2, arg3, arg4); }}
usdt:{b}:types:signed {{ printf("signed %ld %ld %ld %ld %ld\n", arg0, arg1, arg2, arg3, arg4); }}
usdt:{b}:types:other {{ printf("other %lu %lu %lu %lu %lu\n", arg0, arg1, arg2, arg3, arg4); }}
usdt:{b}:types:strings {{ printf("strings '%s' '%s' '%s' '%s'\n", str(arg0), str(arg1), str(arg2), str(arg3)); }}
usdt:{b}:types:pointers {{ printf("pointers %lu %lu %lu\n", arg0, arg1, arg2); }}
usdt:{b}:types:generic {{ printf("generic %lu\n", arg0); }}
usdt:{b}:types:inlined {{ printf("inlined %lu\n", arg0); }}
usdt:{b}:types:lazy {{ @lazy = count(); @lazy_text[str(arg1)] = count(); }}
usdt:{b}:types:done {{ exit(); }}
BEGIN {{ printf("ready\n"); }}
"#
    )
}

fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    lines.next().expect("the example ended early").unwrap()
}

fn check(shape: Shape) {
    if !ready(&NEEDS) {
        return;
    }
    tracing_env();
    let bin = example("types", shape);
    let mut child = Command::new(&bin)
        .arg("phases")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut lines), "untraced runs=0 enabled=false");

    let mut tracer = Command::new("bpftrace")
        .arg("-p")
        .arg(child.id().to_string())
        .arg("-e")
        .arg(script(&bin))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bpftrace (apt-get install bpftrace)");
    // BEGIN runs once every probe is attached: then let the example go on.
    let mut traced = BufReader::new(tracer.stdout.take().unwrap());
    let mut out = String::new();
    loop {
        let mut line = String::new();
        if traced.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            let mut err = String::new();
            tracer
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("bpftrace ended before attaching: {out}\n{err}");
        }
        if line == "ready\n" {
            break;
        }
        out.push_str(&line);
    }
    writeln!(child.stdin.take().unwrap()).unwrap();
    traced.read_to_string(&mut out).unwrap();
    assert!(tracer.wait().unwrap().success(), "bpftrace failed: {out}");
    let pointers = next_line(&mut lines);
    assert_eq!(next_line(&mut lines), "traced runs=50 enabled=true");
    assert_eq!(next_line(&mut lines), "detached runs=0 enabled=false");
    assert!(child.wait().unwrap().success());

    let got: Vec<&str> = out
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("Attaching"))
        .collect();
    // bpftrace 0.17 reads at most 64 bytes (with the NUL) by default.
    let long = "x".repeat(63);
    let want = vec![
        format!(
            "unsigned {} 60000 {} {} {}",
            u8::MAX,
            u32::MAX,
            u64::MAX,
            usize::MAX
        ),
        "unsigned 0 0 0 0 0".to_owned(),
        format!(
            "signed -1 {} {} {} {}",
            i16::MIN,
            i32::MIN,
            i64::MIN,
            isize::MIN
        ),
        format!(
            "signed {} {} {} {} -2",
            i8::MAX,
            i16::MAX,
            i32::MAX,
            i64::MAX
        ),
        format!(
            "other 1 0 {} {} {}",
            'é' as u32,
            1.5f32.to_bits(),
            (-2.0f64).to_bits()
        ),
        "strings 'hello' 'owned string' 'c string' 'owned c string'".to_owned(),
        format!("strings '{long}' '' '' ''"),
        pointers,
        "generic 1".to_owned(),
        "generic 2".to_owned(),
        "generic 3".to_owned(),
        "inlined 1".to_owned(),
        "inlined 2".to_owned(),
        "inlined 3".to_owned(),
        "inlined 4".to_owned(),
        "inlined 5".to_owned(),
        "@lazy: 50".to_owned(),
        "@lazy_text[lazy]: 50".to_owned(),
    ];
    assert_eq!(got, want, "{shape:?}: bpftrace printed:\n{out}");
}

#[test]
fn bpftrace_reads_every_argument_debug() {
    check(Shape::Debug);
}

#[test]
fn bpftrace_reads_every_argument_release() {
    check(Shape::Release);
}

#[test]
fn bpftrace_counts_the_demo() {
    if !ready(&NEEDS) {
        return;
    }
    tracing_env();
    let bin = example("demo", Shape::Release);
    let b = bin.display();
    let out = run_ok(
        Command::new("bpftrace")
            .arg("-e")
            .arg(format!(
                "usdt:{b}:http:request_start {{ @start[str(arg1)] = count(); }} \
                 usdt:{b}:http:request_done {{ @done = count(); @status[arg1] = count(); }} \
                 usdt:{b}:http:tick {{ @tick[(int32)arg1] = count(); }}"
            ))
            .arg("-c")
            .arg(format!("{b} 7")),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains("fired 7 requests; 7 were traced at request_done"),
        "{out}"
    );
    for id in 0..7 {
        assert!(out.contains(&format!("@start[/item/{id}]: 1")), "{out}");
    }
    assert!(out.contains("@done: 7"), "{out}");
    assert!(out.contains("@status[200]: 7"), "{out}");
    assert!(out.contains("@tick[-1]: 7"), "{out}");
}
