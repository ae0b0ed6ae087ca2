//! A note whose addresses point where no `sys/sdt.h` site can be must never
//! let the tracer change the program (issue 23, item 1): a C program written
//! here, with three probes, is copied and its notes patched
//!
//! - `rel:bad`'s Location to a string in `.rodata`: `count` refuses that
//!   probe in one line (file, probe, address, reason), counts the others
//!   exactly (`hist` aggregates them the same way), and the program
//!   prints its string intact; with
//!   `--force-sites` it attaches, and the kernel's breakpoint lands in the
//!   string;
//! - `rel:guarded`'s semaphore to a function's code: refused, and the code
//!   the program reads back is the file's;
//!
//! and `usdt list` marks both. Needs root, a C compiler and `<sys/sdt.h>`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::{elf, Endianness};
use usdt_test_support::{ready, run_ok, CC, ROOT, SDT};

const USDT: &str = env!("CARGO_BIN_EXE_usdt");

/// Hits per probe.
const N: u64 = 3;

/// The program: `PROG N` fires `rel:good`, `rel:bad` and `rel:guarded` N
/// times each, then prints `message` and N, and the first two bytes of
/// `marker`'s code.
const SOURCE: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

unsigned short rel_good_semaphore __attribute__((section(".probes")));
unsigned short rel_bad_semaphore __attribute__((section(".probes")));
unsigned short rel_guarded_semaphore __attribute__((section(".probes")));

const char message[] = "fired ok";

__attribute__((noinline)) int marker(int x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 0; i < n; i++) {
        DTRACE_PROBE1(rel, good, i);
        DTRACE_PROBE1(rel, bad, i);
        DTRACE_PROBE1(rel, guarded, i);
    }
    const char *volatile m = message;
    const unsigned char *volatile code = (const unsigned char *)marker;
    printf("%s %d\n", m, n);
    printf("marker %02x %02x\n", code[0], code[1]);
    return marker(0) == 1 ? 0 : 3;
}
"#;

/// Builds the program once per test process.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("sites-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let source = dir.join("rel.c");
            std::fs::write(&source, SOURCE).unwrap();
            let exe = dir.join("rel");
            run_ok(
                Command::new("cc")
                    .args(["-O1", "-o"])
                    .arg(&exe)
                    .arg(&source),
            );
            exe
        })
        .clone()
}

/// What the patched copy needs to know of the file: each note's
/// descriptor's file offset by probe name, and the link-time addresses of
/// the symbols `message` and `marker`.
struct Layout {
    notes: Vec<(String, usize)>,
    message: u64,
    marker: u64,
    /// `marker`'s first two bytes in the file.
    marker_bytes: [u8; 2],
}

fn layout(bytes: &[u8]) -> Layout {
    let header = elf::FileHeader64::<Endianness>::parse(bytes).unwrap();
    let endian = header.endian().unwrap();
    let sections = header.sections(endian, bytes).unwrap();
    let mut notes = vec![];
    for section in sections.iter() {
        if sections.section_name(endian, section).unwrap() != b".note.stapsdt" {
            continue;
        }
        let mut iter = section.notes(endian, bytes).unwrap().unwrap();
        while let Some(note) = iter.next().unwrap() {
            let desc = note.desc();
            let at = desc.as_ptr() as usize - bytes.as_ptr() as usize;
            let mut strings = desc[24..].split(|b| *b == 0);
            let provider = String::from_utf8_lossy(strings.next().unwrap()).into_owned();
            let name = String::from_utf8_lossy(strings.next().unwrap()).into_owned();
            notes.push((format!("{provider}:{name}"), at));
        }
    }
    let symbols = sections.symbols(endian, bytes, elf::SHT_SYMTAB).unwrap();
    let symbol = |wanted: &[u8]| {
        symbols
            .iter()
            .find(|s| symbols.symbol_name(endian, s).ok() == Some(wanted))
            .map(|s| s.st_value(endian))
            .unwrap_or_else(|| panic!("no symbol {}", String::from_utf8_lossy(wanted)))
    };
    let marker = symbol(b"marker");
    let text = header
        .program_headers(endian, bytes)
        .unwrap()
        .iter()
        .find(|p| {
            use object::read::elf::ProgramHeader;
            let (v, size) = (p.p_vaddr(endian), p.p_filesz(endian));
            p.p_type(endian) == elf::PT_LOAD && marker >= v && marker - v < size
        })
        .map(|p| {
            use object::read::elf::ProgramHeader;
            (marker - p.p_vaddr(endian) + p.p_offset(endian)) as usize
        })
        .unwrap();
    Layout {
        notes,
        message: symbol(b"message"),
        marker,
        marker_bytes: [bytes[text], bytes[text + 1]],
    }
}

/// A copy of the program named `name` with word `field` (0: Location, 2:
/// Semaphore) of `probe`'s note set to `value`.
fn patched(name: &str, probe: &str, field: usize, value: u64) -> (PathBuf, Layout) {
    let exe = program();
    let mut bytes = std::fs::read(&exe).unwrap();
    let layout = layout(&bytes);
    let (_, desc) = layout
        .notes
        .iter()
        .find(|(p, _)| p == probe)
        .unwrap_or_else(|| panic!("no note for {probe}"));
    let at = desc + 8 * field;
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    let copy = exe.with_file_name(name);
    std::fs::write(&copy, &bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    (copy, layout)
}

fn usdt(args: &[&str], exe: &Path) -> Output {
    Command::new(USDT)
        .args(args)
        .arg("--")
        .arg(exe)
        .arg(N.to_string())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stderr lines that name `probe`.
fn lines_of(out: &Output, probe: &str) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| l.contains(probe))
        .map(str::to_string)
        .collect()
}

fn needs() -> bool {
    ready(&[ROOT, CC, SDT])
}

#[test]
fn a_location_in_rodata_is_refused_and_the_others_are_counted() {
    if !needs() {
        return;
    }
    let exe = program();
    let message = layout(&std::fs::read(&exe).unwrap()).message;
    let (copy, _) = patched("rel-rodata", "rel:bad", 0, message);
    for engine in ["bpf", "perf"] {
        let out = usdt(&["count", "--engine", engine, "rel:*"], &copy);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{engine}: {stdout}{stderr}");
        let refused = lines_of(&out, "rel:bad");
        assert_eq!(
            refused,
            [format!(
                "usdt: {}: probe rel:bad at {message:#x} refused: Location in non-executable segment; not attached (--force-sites attaches it)",
                copy.display()
            )],
            "{engine}: {stderr}"
        );
        assert!(
            stdout.contains(&format!("fired ok {N}\n")),
            "{engine}: {stdout}"
        );
        assert!(
            stdout.contains(&format!("rel:good {N}\n")),
            "{engine}: {stdout}"
        );
        assert!(
            stdout.contains(&format!("rel:guarded {N}\n")),
            "{engine}: {stdout}"
        );
        assert!(!stdout.contains("rel:bad"), "{engine}: {stdout}");
    }
    // The in-kernel aggregations take the same path.
    let out = usdt(&["hist", "--json", "rel:*", "arg0"], &copy);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(lines_of(&out, "rel:bad").len(), 1, "{stderr}");
    assert!(stdout.contains(&format!("fired ok {N}\n")), "{stdout}");
    assert!(stdout.contains(&format!("\"count\":{}", 2 * N)), "{stdout}");
    // Forced: attached, and the kernel's breakpoint byte lands in the string.
    let out = usdt(&["count", "--force-sites", "rel:*"], &copy);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let forced = lines_of(&out, "rel:bad");
    assert_eq!(forced.len(), 1, "{stderr}");
    assert!(
        forced[0].ends_with("attached all the same (--force-sites)"),
        "{stderr}"
    );
    assert!(stdout.contains(&format!("rel:good {N}\n")), "{stdout}");
    assert!(stdout.contains("rel:bad 0\n"), "{stdout}");
    assert!(
        out.stdout.windows(8).any(|w| w == b"\xccired ok"),
        "the breakpoint is in the string: {stdout}"
    );
}

#[test]
fn a_semaphore_in_code_is_refused_and_the_code_is_left_alone() {
    if !needs() {
        return;
    }
    let exe = program();
    let marker = layout(&std::fs::read(&exe).unwrap()).marker;
    let (copy, layout) = patched("rel-code", "rel:guarded", 2, marker);
    let out = usdt(&["count", "rel:*"], &copy);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let refused = lines_of(&out, "rel:guarded");
    assert_eq!(refused.len(), 1, "{stderr}");
    assert!(
        refused[0].contains(&format!(
            "refused: semaphore {marker:#x} in executable segment; not attached"
        )),
        "{stderr}"
    );
    let [a, b] = layout.marker_bytes;
    assert!(
        stdout.contains(&format!("marker {a:02x} {b:02x}\n")),
        "the code is the file's: {stdout}"
    );
    assert!(stdout.contains(&format!("rel:good {N}\n")), "{stdout}");
    assert!(stdout.contains(&format!("rel:bad {N}\n")), "{stdout}");
    // Only the refused probe asked for: nothing to attach, said so.
    let out = usdt(&["count", "rel:guarded"], &copy);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("was refused (1 sites); --force-sites attaches them"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn list_marks_refused_probes() {
    if !needs() {
        return;
    }
    let exe = program();
    let message = layout(&std::fs::read(&exe).unwrap()).message;
    let marker = layout(&std::fs::read(&exe).unwrap()).marker;
    let (rodata, _) = patched("rel-list-rodata", "rel:bad", 0, message);
    let (code, _) = patched("rel-list-code", "rel:guarded", 2, marker);
    let list = |exe: &Path, sites: bool| {
        let mut cmd = Command::new(USDT);
        cmd.arg("list");
        if sites {
            cmd.arg("--sites");
        }
        text(&run_ok(cmd.arg(exe)).stdout)
    };
    let row = |table: &str, probe: &str| {
        table
            .lines()
            .find(|l| l.starts_with(probe))
            .unwrap_or_else(|| panic!("no row for {probe}: {table}"))
            .to_string()
    };
    let table = list(&rodata, false);
    let bad = row(&table, "rel:bad");
    assert!(bad.contains(" refused "), "{table}");
    assert!(
        bad.ends_with("(refused: Location in non-executable segment)"),
        "{table}"
    );
    assert!(!row(&table, "rel:good").contains("refused"), "{table}");
    let table = list(&code, false);
    assert!(
        row(&table, "rel:guarded").ends_with(&format!(
            "(refused: semaphore {marker:#x} in executable segment)"
        )),
        "{table}"
    );
    let sites = list(&rodata, true);
    assert!(
        sites.contains(&format!("  site {message:#x} offset"))
            && sites.contains(" refused: Location in non-executable segment\n"),
        "{sites}"
    );
}
