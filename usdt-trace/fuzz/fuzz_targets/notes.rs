//! The note reader on arbitrary bytes: as a whole file, and as the contents of
//! `.note.stapsdt` inside a small valid ELF file (so that the fuzzer reaches
//! the note and argument parsers instead of stopping at the ELF header).
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::read_sites;

#[path = "../../tests/common/elf.rs"]
mod elf;

fuzz_target!(|data: &[u8]| {
    let _ = read_sites(data);
    if data.len() < 24 {
        return;
    }
    let (base, rest) = data.split_at(8);
    let (code, notes) = rest.split_at(16);
    let machine = if base[0] & 1 == 0 {
        elf::X86_64
    } else {
        elf::AARCH64
    };
    let elf = elf::elf_with_notes(
        machine,
        u64::from_le_bytes(base.try_into().unwrap()),
        code,
        notes,
    );
    if let Ok(sites) = read_sites(&elf) {
        for site in sites {
            assert!(site.bytes.len() <= 11);
            assert!(site.location_offset.is_none_or(|o| o < elf.len() as u64));
        }
    }
});
