//! The note reader against `readelf -n` and against damaged files.

use usdt_test_support::c::cdemo;
use usdt_test_support::readelf::readelf_notes;
use usdt_test_support::{ready, SDT};

use usdt_trace::{
    read_file, read_probes, read_sites, Error, Operand, Reg, Reg64, RegWidth, SiteLayout,
};

fn cdemo_bytes() -> Vec<u8> {
    std::fs::read(cdemo()).unwrap()
}

#[test]
fn c_probes_agree_with_readelf() {
    if !ready(&[SDT]) {
        return;
    }
    let path = cdemo();
    let sites = read_file(&path).unwrap();
    let notes = readelf_notes(&path);
    assert_eq!(sites.len(), notes.len());
    assert!(sites.len() >= 2);
    for (site, note) in sites.iter().zip(&notes) {
        assert_eq!(site.provider, note.provider);
        assert_eq!(site.name, note.name);
        assert_eq!(site.note_base, note.base);
        // cc leaves .stapsdt.base where the note says: no shift.
        assert_eq!(site.stapsdt_base, Some(note.base));
        assert_eq!(site.location, note.location);
        assert_eq!(site.semaphore.unwrap_or(0), note.semaphore);
        assert_eq!(site.args_text, note.args);
        let args: Vec<String> = site.args.iter().map(ToString::to_string).collect();
        assert_eq!(args.join(" "), note.args);
        // sys/sdt.h sites are one nop.
        assert_eq!(site.layout, SiteLayout::Nop);
        assert_eq!(site.bytes.first(), Some(&0x90));
        assert_eq!(site.bytes.len(), usdt_trace::SITE_BYTES);
    }
    let plain = sites.iter().find(|s| s.name == "plain").unwrap();
    assert_eq!((plain.semaphore, plain.semaphore_offset), (None, None));
    assert_eq!(plain.args.len(), 3);
    assert_eq!((plain.args[0].size, plain.args[0].signed), (8, true));
    assert_eq!((plain.args[1].size, plain.args[1].signed), (4, true));
    assert_eq!((plain.args[2].size, plain.args[2].signed), (1, false));
    let guarded = sites.iter().find(|s| s.name == "guarded").unwrap();
    let sem = guarded.semaphore.unwrap();
    let sem_off = guarded.semaphore_offset.unwrap();
    // The semaphore's bytes in the file are the initial 0 of `.probes`.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[sem_off as usize..][..2], &[0, 0]);
    let page = usdt_trace::page_size();
    assert_eq!(sem_off % page, sem % page);
    let loc_off = guarded.location_offset.unwrap() as usize;
    assert_eq!(bytes[loc_off], 0x90);
}

#[test]
fn a_moved_base_shifts_location_and_semaphore() {
    if !ready(&[SDT]) {
        return;
    }
    let mut bytes = cdemo_bytes();
    let before = read_sites(&bytes).unwrap();
    let guarded = before.iter().find(|s| s.name == "guarded").unwrap();
    // Rewrite the note's Base to 0x10 below `.stapsdt.base`, as if the file had
    // been moved by 0x10 after linking.
    let pos = find_note_words(&bytes, guarded.location, guarded.note_base).expect("note found");
    let new_base = guarded.note_base - 0x10;
    bytes[pos + 8..pos + 16].copy_from_slice(&new_base.to_le_bytes());
    let after = read_sites(&bytes).unwrap();
    let moved = after.iter().find(|s| s.name == "guarded").unwrap();
    assert_eq!(moved.note_base, new_base);
    assert_eq!(moved.location, guarded.location + 0x10);
    assert_eq!(moved.semaphore, guarded.semaphore.map(|s| s + 0x10));
}

/// The position of the note descriptor starting with Location and Base.
fn find_note_words(bytes: &[u8], location: u64, base: u64) -> Option<usize> {
    let mut pattern = location.to_le_bytes().to_vec();
    pattern.extend(base.to_le_bytes());
    bytes.windows(16).position(|w| w == pattern)
}

#[test]
fn files_that_are_not_64_bit_little_endian_elf_are_errors() {
    if !ready(&[SDT]) {
        return;
    }
    assert!(matches!(read_sites(b""), Err(Error::NotElf)));
    assert!(matches!(
        read_sites(b"#!/bin/sh\necho hi\n"),
        Err(Error::NotElf)
    ));
    let mut bytes = cdemo_bytes();
    bytes[4] = 1; // ELFCLASS32
    let e = read_sites(&bytes).unwrap_err();
    assert_eq!(e.to_string(), "32-bit ELF files are not supported");
    bytes[4] = 2;
    bytes[5] = 2; // ELFDATA2MSB
    assert_eq!(
        read_sites(&bytes).unwrap_err().to_string(),
        "big-endian ELF files are not supported"
    );
    bytes[5] = 1;
    bytes[18] = 40; // EM_ARM
    assert!(matches!(read_sites(&bytes), Err(Error::Unsupported(_))));
}

#[test]
fn a_file_without_notes_has_no_sites() {
    if !ready(&[SDT]) {
        return;
    }
    let sites = read_file("/proc/self/exe").unwrap();
    assert!(sites.is_empty());
    assert!(matches!(read_file("/no/such/file"), Err(Error::Io { .. })));
    assert_eq!(
        read_file("/no/such/file").unwrap_err().to_string(),
        "/no/such/file does not exist"
    );
}

#[test]
fn an_unknown_register_costs_only_its_argument() {
    let mut bytes = cdemo_bytes();
    let all = read_sites(&bytes).unwrap().len();
    let pos = bytes.windows(8).position(|w| w == b"-8@%rax\0").unwrap();
    bytes[pos + 5] = b'q';
    let sites = read_sites(&bytes).unwrap();
    assert_eq!(sites.len(), all);
    let site = sites
        .iter()
        .find(|s| s.args_text.contains("-8@%rqx"))
        .unwrap();
    let arg = site.args.iter().find(|a| a.unreadable().is_some()).unwrap();
    assert_eq!(arg.to_string(), "-8@%rqx");
    assert_eq!(
        arg.unreadable(),
        Some("`%rqx` is not an x86-64 general register")
    );
}

#[test]
fn damaged_notes_are_skipped_never_panics() {
    if !ready(&[SDT]) {
        return;
    }
    let bytes = cdemo_bytes();
    let path = cdemo();
    let sites = read_file(path).unwrap();
    let pos = find_note_words(&bytes, sites[0].location, sites[0].note_base).unwrap();
    // The note header (namesz, descsz, type, "stapsdt\0") is 20 bytes before the descriptor.
    let header = pos - 20;
    let mut damaged = bytes.clone();
    // A note whose size runs past its section: it and the notes after it
    // cannot be found, and the reader says so.
    damaged[header + 4..header + 8].copy_from_slice(&0xffff_fff0u32.to_le_bytes()); // descsz
    let probes = read_probes(&damaged).unwrap();
    assert!(probes.sites.is_empty());
    assert_eq!(probes.skipped.len(), 1);
    assert_eq!(probes.skipped[0].index, 0);
    assert!(
        probes.skipped[0]
            .reason
            .ends_with("(the rest of its section is not read)"),
        "{}",
        probes.skipped[0]
    );
    let mut damaged = bytes.clone();
    damaged[header + 4..header + 8].copy_from_slice(&20u32.to_le_bytes());
    let probes = read_probes(&damaged).unwrap();
    let first = probes.skipped[0].to_string();
    assert!(
        first.starts_with("stapsdt note 0 is malformed and skipped"),
        "{first}"
    );
    // No NUL at all after the addresses: that note is skipped, the others read.
    let mut damaged = bytes.clone();
    let desc_len = u32::from_le_bytes(bytes[header + 4..header + 8].try_into().unwrap()) as usize;
    damaged[pos + 24..pos + desc_len].fill(b'a');
    let probes = read_probes(&damaged).unwrap();
    assert_eq!(probes.sites.len(), sites.len() - 1);
    assert_eq!(probes.skipped.len(), 1);
    assert_eq!(
        probes.skipped[0].to_string(),
        "stapsdt note 0 is malformed and skipped: its provider, name and arguments are not three NUL-terminated strings"
    );
    // Every single-byte change of the notes and every truncation is survived.
    for i in header..header + 0x94 {
        for value in [0, 0x7f, 0xff] {
            let mut damaged = bytes.clone();
            damaged[i] = value;
            let _ = read_sites(&damaged);
        }
    }
    for len in (0..bytes.len()).step_by(7) {
        let _ = read_sites(&bytes[..len]);
    }
}

#[test]
fn registers_name_the_full_register() {
    if !ready(&[SDT]) {
        return;
    }
    let sites = read_sites(&cdemo_bytes()).unwrap();
    let plain = sites.iter().find(|s| s.name == "plain").unwrap();
    let Operand::Register(reg) = plain.args[2].operand else {
        panic!("{:?}", plain.args[2])
    };
    assert_eq!(
        reg,
        Reg {
            reg: Reg64::Rax,
            width: RegWidth::Low8
        }
    );
    assert_eq!(reg.to_string(), "%al");
}

use usdt_test_support::elf::{elf_with_notes, note, AARCH64, X86_64};

/// `nop; nop5`, as usdt-runtime defines it.
fn nop_nop5() -> &'static [u8] {
    SiteLayout::NopNop5.x86_64_bytes().unwrap()
}

#[test]
fn layouts_from_the_bytes_at_location() {
    for (code, layout) in [
        (
            SiteLayout::NopNop5.x86_64_bytes().unwrap(),
            SiteLayout::NopNop5,
        ),
        (
            SiteLayout::NopNop10.x86_64_bytes().unwrap(),
            SiteLayout::NopNop10,
        ),
        (
            SiteLayout::NopNop5Nop10.x86_64_bytes().unwrap(),
            SiteLayout::NopNop5Nop10,
        ),
        (&[0x90, 0x0f, 0x1f, 0x40, 0x00][..], SiteLayout::Nop),
        (&[0xcc][..], SiteLayout::Other),
    ] {
        let notes = note(0x80, 0x80, 0, "p", "n", "8@%rax");
        let sites = read_sites(&elf_with_notes(X86_64, 0x80, code, &notes)).unwrap();
        assert_eq!(sites[0].layout, layout, "{code:x?}");
        assert_eq!(sites[0].bytes.len(), usdt_trace::SITE_BYTES);
        assert_eq!(&sites[0].bytes[..code.len()], code);
    }
}

#[test]
fn aarch64_notes() {
    let nop = 0xd503201fu32.to_le_bytes();
    let notes = note(
        0x80,
        0x80,
        0x90,
        "a64",
        "tick",
        "-4@w1 8@[sp, 16] 8@x0 4@[x2] 2@7",
    );
    let sites = read_sites(&elf_with_notes(AARCH64, 0x80, &nop, &notes)).unwrap();
    let site = &sites[0];
    assert_eq!(site.layout, SiteLayout::Nop);
    assert_eq!(
        (site.semaphore, site.semaphore_offset),
        (Some(0x90), Some(0x90))
    );
    let args: Vec<String> = site.args.iter().map(|a| a.operand.to_string()).collect();
    assert_eq!(args, ["w1", "[sp, 16]", "x0", "[x2]", "$7"]);
    // The same x86 bytes mean nothing on aarch64, and x86 registers are unknown.
    let sites = read_sites(&elf_with_notes(AARCH64, 0x80, nop_nop5(), &notes)).unwrap();
    assert_eq!(sites[0].layout, SiteLayout::Other);
    let x86 = note(0x80, 0x80, 0, "a64", "tick", "8@%rax");
    let sites = read_sites(&elf_with_notes(AARCH64, 0x80, &nop, &x86)).unwrap();
    assert_eq!(
        sites[0].args[0].unreadable(),
        Some("`%rax` is not an aarch64 register, memory operand or immediate")
    );
}

#[test]
fn base_adjustment_follows_the_section() {
    // Linked with Base 0x1000; .stapsdt.base now at 0x1080: everything moves by 0x80.
    let notes = [
        note(0, 0x1000, 0x10, "p", "a", ""),
        note(0x8, 0x1000, 0, "p", "b", ""),
    ]
    .concat();
    let sites = read_sites(&elf_with_notes(X86_64, 0x1080, nop_nop5(), &notes)).unwrap();
    assert_eq!(
        (sites[0].location, sites[0].note_base, sites[0].stapsdt_base),
        (0x80, 0x1000, Some(0x1080))
    );
    assert_eq!(
        (sites[0].location_offset, sites[0].layout),
        (Some(0x80), SiteLayout::NopNop5)
    );
    assert_eq!(
        (sites[0].semaphore, sites[0].semaphore_offset),
        (Some(0x90), Some(0x90))
    );
    assert_eq!((sites[1].location, sites[1].semaphore), (0x88, None));
    assert!(sites[1].args.is_empty());
    // A Location outside every segment has no file offset and no bytes.
    let far = note(0x10_0000, 0x1080, 0, "p", "far", "");
    let sites = read_sites(&elf_with_notes(X86_64, 0x1080, nop_nop5(), &far)).unwrap();
    assert_eq!(
        (sites[0].location_offset, sites[0].layout),
        (None, SiteLayout::Other)
    );
    assert!(sites[0].bytes.is_empty());
}

#[test]
fn notes_with_bad_names_are_skipped_and_named() {
    let long = "p".repeat(300);
    let good = note(0x80, 0x80, 0, "p", "good", "8@%rax");
    for bad in [
        note(0x80, 0x80, 0, &long, "n", ""),
        note(0x80, 0x80, 0, "p", "", ""),
        note(0x80, 0x80, 0, "", "n", ""),
    ] {
        let notes = [bad, good.clone()].concat();
        let probes = read_probes(&elf_with_notes(X86_64, 0x80, nop_nop5(), &notes)).unwrap();
        assert_eq!(probes.skipped.len(), 1);
        assert_eq!(probes.skipped[0].index, 0);
        assert_eq!(probes.sites.len(), 1);
        assert_eq!(probes.sites[0].name, "good");
    }
    // Notes of other owners and types are skipped, but still counted in indexes.
    let mut other = [8u32, 0, 1].map(u32::to_le_bytes).concat();
    other.extend(b"GNU\0\0\0\0\0");
    let notes = [other, note(0x80, 0x80, 0, "p", "", "")].concat();
    let probes = read_probes(&elf_with_notes(X86_64, 0x80, nop_nop5(), &notes)).unwrap();
    assert_eq!(
        probes.skipped[0].to_string(),
        "stapsdt note 1 is malformed and skipped: its provider or probe name is empty"
    );
    // Too many arguments: the note is skipped, naming its probe.
    let many = note(0x80, 0x80, 0, "p", "many", &"8@%rax ".repeat(40));
    let probes = read_probes(&elf_with_notes(X86_64, 0x80, nop_nop5(), &many)).unwrap();
    assert!(
        probes.skipped[0].to_string().starts_with(
            "stapsdt note 0 (p:many) is malformed and skipped: cannot parse probe arguments"
        ),
        "{}",
        probes.skipped[0]
    );
}
