//! A tiny ELF file builder for tests and the fuzz target: one `PT_LOAD`
//! covering the file, 16 bytes of "code" at 0x80, `.stapsdt.base` at a chosen
//! address and the given bytes as `.note.stapsdt`.

/// `EM_X86_64`.
pub const X86_64: u16 = 62;
/// `EM_AARCH64`.
pub const AARCH64: u16 = 183;

/// Builds the file; `code` is cut or padded to 16 bytes.
pub fn elf_with_notes(machine: u16, base: u64, code: &[u8], notes: &[u8]) -> Vec<u8> {
    const CODE: usize = 0x80;
    const NOTES: usize = 0x100;
    let shstrtab = b"\0.note.stapsdt\0.stapsdt.base\0.shstrtab\0";
    let strtab_at = NOTES + notes.len();
    let shdrs_at = (strtab_at + shstrtab.len() + 7) & !7;
    let len = shdrs_at + 4 * 64;
    let mut f = vec![0u8; len];
    let put =
        |f: &mut Vec<u8>, at: usize, bytes: &[u8]| f[at..at + bytes.len()].copy_from_slice(bytes);
    // ELF header: 64-bit, little-endian, ET_DYN.
    put(&mut f, 0, &[0x7f, b'E', b'L', b'F', 2, 1, 1]);
    put(&mut f, 16, &3u16.to_le_bytes());
    put(&mut f, 18, &machine.to_le_bytes());
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
    put(&mut f, CODE, &code[..code.len().min(16)]);
    put(&mut f, NOTES, notes);
    put(&mut f, strtab_at, shstrtab);
    // Section headers: null, .note.stapsdt, .stapsdt.base, .shstrtab.
    let shdr =
        |f: &mut Vec<u8>, i: usize, name: u32, kind: u32, addr: u64, off: usize, size: usize| {
            let at = shdrs_at + i * 64;
            put(f, at, &name.to_le_bytes());
            put(f, at + 4, &kind.to_le_bytes());
            put(f, at + 16, &addr.to_le_bytes());
            put(f, at + 24, &(off as u64).to_le_bytes());
            put(f, at + 32, &(size as u64).to_le_bytes());
            put(f, at + 48, &4u64.to_le_bytes()); // sh_addralign
        };
    shdr(&mut f, 1, 1, 7, 0, NOTES, notes.len()); // SHT_NOTE
    shdr(&mut f, 2, 15, 1, base, CODE, 1); // SHT_PROGBITS
    shdr(&mut f, 3, 29, 3, 0, strtab_at, shstrtab.len()); // SHT_STRTAB
    f
}

/// One stapsdt note, padded to 4 bytes.
pub fn note(
    location: u64,
    base: u64,
    semaphore: u64,
    provider: &str,
    name: &str,
    args: &str,
) -> Vec<u8> {
    let mut desc = [location, base, semaphore].map(u64::to_le_bytes).concat();
    for s in [provider, name, args] {
        desc.extend(s.as_bytes());
        desc.push(0);
    }
    let mut note = [8u32, desc.len() as u32, 3].map(u32::to_le_bytes).concat();
    note.extend(b"stapsdt\0");
    note.extend(desc);
    note.resize(note.len().next_multiple_of(4), 0);
    note
}
