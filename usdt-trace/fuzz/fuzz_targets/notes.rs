//! The note reader on arbitrary bytes: as a whole file, and as the contents of
//! `.note.stapsdt` inside a small valid ELF file (so that the fuzzer reaches
//! the note and argument parsers instead of stopping at the ELF header).
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_test_support::elf;
use usdt_trace::{read_probes, read_sites, Operand};

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
    if let Ok(probes) = read_probes(&elf) {
        for site in probes.sites {
            assert!(site.bytes.len() <= usdt_trace::SITE_BYTES);
            assert!(site.location_offset.is_none_or(|o| o < elf.len() as u64));
            // A symbol is resolved or says why it cannot be.
            for arg in &site.args {
                assert!(!matches!(
                    arg.operand,
                    Operand::Symbol { addr: None, .. } | Operand::SymbolIndexed { addr: None, .. }
                ));
            }
        }
        for skipped in probes.skipped {
            assert!(!skipped.reason.is_empty());
        }
    }
});
