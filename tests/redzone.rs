//! The red-zone test: with a uprobe at Location + 1 the kernel optimizes the
//! nop5 into a `call` to its trampoline, which writes below the stack pointer.
//! A leaf function with many live values must compute exactly what it
//! computes untraced.

mod common;

use common::Shape;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use usdt_trace::{AttachPoint, Target, Tracer};

const HITS: u64 = 200_000;

fn run(shape: Shape, trace: bool) -> (String, u64) {
    let bin = common::example("redzone", shape);
    let mut child = Command::new(&bin)
        .arg(HITS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start redzone");
    let mut tracer = Tracer::new(AttachPoint::Next);
    if trace {
        let sites = usdt_trace::read_file(&bin).expect("read notes");
        let site: Vec<_> = sites
            .iter()
            .filter(|s| s.probe() == "redzone:site")
            .collect();
        assert!(
            !site.is_empty(),
            "no redzone:site note in {}",
            bin.display()
        );
        tracer
            .attach(&bin, site, Target::Pid(child.id()))
            .expect("attach at Location + 1");
    }
    writeln!(child.stdin.take().unwrap()).unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let hits = tracer.probe_counts().unwrap().values().sum();
    (line.trim().to_owned(), hits)
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn check(shape: Shape) {
    common::tracing_env();
    let (untraced, _) = run(shape, false);
    assert_eq!(field(&untraced, "result"), field(&untraced, "reference"));
    assert_eq!(field(&untraced, "trampoline"), "false", "{untraced}");
    let (traced, hits) = run(shape, true);
    assert_eq!(hits, HITS, "every iteration hits the probe: {traced}");
    assert_eq!(
        field(&traced, "trampoline"),
        "true",
        "the kernel did not optimize the nop5 site ({shape:?}): {traced}"
    );
    assert_eq!(
        field(&traced, "result"),
        field(&untraced, "result"),
        "the optimized uprobe changed what the program computed ({shape:?})"
    );
}

#[test]
fn red_zone_survives_optimized_uprobe_debug() {
    check(Shape::Debug);
}

#[test]
fn red_zone_survives_optimized_uprobe_release() {
    check(Shape::Release);
}

#[test]
fn red_zone_survives_optimized_uprobe_fat_lto() {
    check(Shape::O3Fat);
}
