//! The note reader on arbitrary bytes: as a whole file, and as the contents of
//! `.note.stapsdt` inside a small valid ELF file (so that the fuzzer reaches
//! the note and argument parsers instead of stopping at the ELF header).
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::read_sites;

fuzz_target!(|data: &[u8]| {
    let _ = read_sites(data);
    if data.len() < 24 {
        return;
    }
    let (base, rest) = data.split_at(8);
    let (code, notes) = rest.split_at(16);
    let elf = elf_with_notes(u64::from_le_bytes(base.try_into().unwrap()), code, notes);
    if let Ok(sites) = read_sites(&elf) {
        for site in sites {
            assert!(site.bytes.len() <= 11);
            assert!(site.location_offset.is_none_or(|o| o < elf.len() as u64));
        }
    }
});

/// An x86-64 ELF file with one `PT_LOAD` covering the file, 16 bytes of
/// "code" at 0x80, a `.stapsdt.base` at `base`, and `notes` as `.note.stapsdt`.
fn elf_with_notes(base: u64, code: &[u8], notes: &[u8]) -> Vec<u8> {
    const NOTES: usize = 0x100;
    let shstrtab = b"\0.note.stapsdt\0.stapsdt.base\0.shstrtab\0";
    let strtab_at = NOTES + notes.len();
    let shdrs_at = (strtab_at + shstrtab.len() + 7) & !7;
    let len = shdrs_at + 4 * 64;
    let mut f = vec![0u8; len];
    let put =
        |f: &mut Vec<u8>, at: usize, bytes: &[u8]| f[at..at + bytes.len()].copy_from_slice(bytes);
    // ELF header: 64-bit, little-endian, ET_DYN, EM_X86_64.
    put(&mut f, 0, &[0x7f, b'E', b'L', b'F', 2, 1, 1]);
    put(&mut f, 16, &3u16.to_le_bytes());
    put(&mut f, 18, &62u16.to_le_bytes());
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
    put(&mut f, 40, &(shdrs_at as u64).to_le_bytes()); // e_shoff
    put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut f, 54, &56u16.to_le_bytes()); // e_phentsize
    put(&mut f, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut f, 60, &4u16.to_le_bytes()); // e_shnum
    put(&mut f, 62, &3u16.to_le_bytes()); // e_shstrndx
                                          // PT_LOAD, R+X, offset 0 at address 0, the whole file.
    put(&mut f, 64, &1u32.to_le_bytes());
    put(&mut f, 68, &5u32.to_le_bytes());
    put(&mut f, 64 + 32, &(len as u64).to_le_bytes()); // p_filesz
    put(&mut f, 64 + 40, &(len as u64).to_le_bytes()); // p_memsz
    put(&mut f, 0x80, code);
    put(&mut f, NOTES, notes);
    put(&mut f, strtab_at, shstrtab);
    // Section headers: null, .note.stapsdt, .stapsdt.base, .shstrtab.
    let shdr = |f: &mut Vec<u8>,
                i: usize,
                name: u32,
                kind: u32,
                addr: u64,
                off: usize,
                size: usize,
                align: u64| {
        let at = shdrs_at + i * 64;
        put(f, at, &name.to_le_bytes());
        put(f, at + 4, &kind.to_le_bytes());
        put(f, at + 16, &addr.to_le_bytes());
        put(f, at + 24, &(off as u64).to_le_bytes());
        put(f, at + 32, &(size as u64).to_le_bytes());
        put(f, at + 48, &align.to_le_bytes());
    };
    shdr(&mut f, 1, 1, 7, 0, NOTES, notes.len(), 4); // SHT_NOTE
    shdr(&mut f, 2, 15, 1, base, 0x80, 1, 1); // SHT_PROGBITS
    shdr(&mut f, 3, 29, 3, 0, strtab_at, shstrtab.len(), 1); // SHT_STRTAB
    f
}
