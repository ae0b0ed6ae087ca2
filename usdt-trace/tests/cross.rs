//! The note reader on a C program written as programs outside the project
//! are (`tests/c/cross.c`, sys/sdt.h probes), cross-built for aarch64 with
//! gcc and clang and for riscv64 with gcc, at four optimization settings:
//! every note as `readelf -n` prints it, every argument's size and sign as
//! its C type says, every operand read and printed back as the compiler
//! wrote it (a relocation excepted, with the reason), every register of
//! the file's machine, and every site its machine's nop.

use usdt_test_support::c::{build_cross, CrossCc, CROSS_CCS};
use usdt_test_support::readelf::readelf_notes;
use usdt_test_support::ready;
use usdt_trace::{read_probes, Arg, Machine, Operand, SiteLayout};

/// The optimization settings each compiler builds with: gcc writes stack
/// slots at `-O0`, registers and memory through pointers at `-O2` and
/// `-Os`, and relocations for globals in a position-dependent executable.
const FLAGS: [&[&str]; 4] = [
    &["-O0"],
    &["-O2"],
    &["-Os"],
    &["-O2", "-fno-pie", "-no-pie"],
];

/// Each probe of `cross.c` and its arguments' sizes as its C types give
/// them (negative: signed; `f`: floating point; `c + 1` of an `int16_t` is
/// an `int`).
const PROBES: [(&str, &[&str]); 6] = [
    (
        "scalars",
        &["-1", "-2", "-4", "-8", "1", "2", "4", "8", "8"],
    ),
    ("memory", &["-4", "-8", "-8", "-2", "-8"]),
    ("constants", &["-4", "-4", "-4"]),
    ("floats", &["4f", "8f"]),
    (
        "twelve",
        &[
            "-8", "-4", "-2", "-1", "-8", "-4", "-4", "-4", "-8", "-4", "-4", "-4",
        ],
    ),
    ("guarded", &["-4"]),
];

/// The machine of `cc`'s files.
fn machine(cc: &CrossCc) -> Machine {
    match cc.machine {
        "AArch64" => Machine::Aarch64,
        "RISC-V" => Machine::Riscv64,
        other => panic!("no machine for {other}"),
    }
}

/// An argument as the note writes it: the reader prints an immediate in
/// x86's form (`$-42`), and these machines' notes write it bare.
fn as_written(arg: &Arg) -> String {
    match arg.operand {
        Operand::Immediate(n) => {
            let sign = if arg.signed { "-" } else { "" };
            format!("{sign}{}@{n}", arg.size)
        }
        _ => arg.to_string(),
    }
}

/// `-4`, `8`, `4f`: an argument's size spec.
fn size_spec(arg: &Arg) -> String {
    let sign = if arg.signed { "-" } else { "" };
    let float = if arg.float { "f" } else { "" };
    format!("{sign}{}{float}", arg.size)
}

#[test]
fn cross_built_notes_read_as_readelf_prints_them() {
    let mut relocations = 0;
    for cc in &CROSS_CCS {
        if !ready(cc.needs) {
            return;
        }
        let machine = machine(cc);
        for flags in FLAGS {
            let name = format!("cross-{}{}", cc.name, flags.concat());
            let path = build_cross(cc, &name, "cross.c", flags);
            let what = format!("{} {}", cc.name, flags.join(" "));
            let probes = read_probes(&std::fs::read(&path).unwrap()).unwrap();
            assert_eq!(probes.machine, machine, "{what}");
            assert!(probes.skipped.is_empty(), "{what}: {:?}", probes.skipped);
            let notes = readelf_notes(&path);
            assert_eq!(probes.sites.len(), notes.len(), "{what}");
            let mut names: Vec<&str> = probes.sites.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            let mut want: Vec<&str> = PROBES.iter().map(|(n, _)| *n).collect();
            want.sort_unstable();
            assert_eq!(names, want, "{what}");
            for (site, note) in probes.sites.iter().zip(&notes) {
                let what = format!("{what}: x:{}", site.name);
                assert_eq!(site.provider, note.provider, "{what}");
                assert_eq!(site.name, note.name, "{what}");
                assert_eq!(site.location, note.location, "{what}");
                assert_eq!(site.note_base, note.base, "{what}");
                assert_eq!(site.semaphore, Some(note.semaphore), "{what}");
                assert!(site.semaphore_offset.is_some(), "{what}");
                assert_eq!(site.args_text, note.args, "{what}");
                assert_eq!(site.machine, machine, "{what}");
                // sys/sdt.h's `nop` (riscv64's assembler makes it `c.nop`).
                assert_eq!(site.layout, SiteLayout::Nop, "{what}: {:x?}", site.bytes);
                assert!(site.refused().is_none(), "{what}: {:?}", site.check);

                let sizes: Vec<String> = site.args.iter().map(size_spec).collect();
                let want = PROBES.iter().find(|(n, _)| *n == site.name).unwrap().1;
                assert_eq!(sizes, want, "{what}: {}", note.args);
                let printed: Vec<String> = site.args.iter().map(as_written).collect();
                assert_eq!(printed.join(" "), note.args, "{what}");
                for arg in &site.args {
                    let reg = match &arg.operand {
                        Operand::Register(r) | Operand::Memory { base: r, .. } => r,
                        Operand::Immediate(_) => continue,
                        Operand::Unreadable { text, reason } => {
                            // gcc's low 12 bits of a global's address
                            // (`#:lo12:.LANCHOR1`, `%lo(g_long)`).
                            assert!(text.contains("lo12:") || text.contains("%lo("), "{text}");
                            assert!(
                                reason.ends_with("is a relocation this reader does not resolve"),
                                "{what}: {reason}"
                            );
                            relocations += 1;
                            continue;
                        }
                        other => panic!("{what}: {other:?}"),
                    };
                    assert_eq!(reg.machine(), Some(machine), "{what}: {arg}");
                }
            }
        }
    }
    // gcc writes them for aarch64 at -O2 and -Os, for riscv64 without PIE.
    assert!(relocations >= 3, "{relocations} relocations");
}
