//! Reading `NT_STAPSDT` notes from an ELF file.
//!
//! Each note in `.note.stapsdt` describes one probe site:
//!
//! ```text
//! desc: Location (8 bytes) | Base (8) | Semaphore (8) | provider\0 | name\0 | args\0
//! ```
//!
//! Location and Semaphore are link-time addresses. When the file was prelinked
//! or otherwise moved, `.stapsdt.base`'s address differs from the Base the note
//! recorded, and both shift by the difference, as every sys/sdt.h consumer does.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::read::ReadCache;
use object::{Endianness, ReadRef};

use crate::elf::arg::{parse_args, Arg, Machine, Operand};
pub use crate::elf::sites::{layout_of, Segment};
use crate::elf::sites::{SiteCheck, SiteRefusal};
use crate::{Error, SiteLayout};

type Header = elf::FileHeader64<Endianness>;

/// `n_type` of a stapsdt note.
pub const NT_STAPSDT: u32 = 3;

/// The longest provider or probe name accepted.
pub const MAX_NAME: usize = 255;

/// How many bytes at Location [`Site::bytes`] holds at most: the longest
/// site (usdt-runtime's `site` module defines the bytes of each layout).
pub use usdt_runtime::site::SITE_BYTES;

/// One probe site: one `NT_STAPSDT` note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The provider (`http` in `http:request_start`).
    pub provider: String,
    /// The probe name.
    pub name: String,
    /// The virtual address of the site, after the Base adjustment.
    pub location: u64,
    /// The file offset of Location, `None` when no loaded segment with file
    /// bytes contains it.
    pub location_offset: Option<u64>,
    /// The Base field as written in the note.
    pub note_base: u64,
    /// The address of the file's `.stapsdt.base` section, if it has one.
    pub stapsdt_base: Option<u64>,
    /// The semaphore's virtual address after the Base adjustment, `None` when
    /// the note says 0 (no semaphore).
    pub semaphore: Option<u64>,
    /// The semaphore's file offset (what the kernel's `ref_ctr_offset` takes).
    pub semaphore_offset: Option<u64>,
    /// The raw argument string.
    pub args_text: String,
    /// The parsed arguments.
    pub args: Vec<Arg>,
    /// The instruction set of the file the note is in: its registers name
    /// the arguments' registers.
    pub machine: Machine,
    /// The instructions at Location.
    pub layout: SiteLayout,
    /// Up to [`SITE_BYTES`] bytes of the file at Location (empty if unreadable).
    pub bytes: Vec<u8>,
    /// Whether Location and the semaphore lie where a `sys/sdt.h` site's
    /// can ([`SiteCheck::of`]); a refused site is attached by no engine
    /// unless [forced](Site::force).
    pub check: SiteCheck,
}

impl Site {
    /// `provider:name`.
    pub fn probe(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }

    /// A site `p:n` of `layout` at 0x1000, without arguments, in a file
    /// of the machine the tests run on, for unit tests.
    #[cfg(test)]
    pub(crate) fn at_0x1000(layout: SiteLayout) -> Site {
        Site {
            provider: "p".into(),
            name: "n".into(),
            location: 0x1000,
            location_offset: Some(0x1000),
            note_base: 0,
            stapsdt_base: None,
            semaphore: None,
            semaphore_offset: None,
            args_text: String::new(),
            args: vec![],
            machine: Machine::host().unwrap_or(Machine::X86_64),
            layout,
            bytes: vec![],
            check: Default::default(),
        }
    }

    /// A site `p:n` at 0 with the arguments `args` of `machine`, for unit
    /// tests.
    #[cfg(test)]
    pub(crate) fn with_args(args: &str, machine: Machine) -> Site {
        Site {
            location: 0,
            location_offset: Some(0),
            args_text: args.into(),
            args: crate::parse_args(args, machine).unwrap(),
            machine,
            ..Site::at_0x1000(SiteLayout::Nop)
        }
    }

    /// Why the site is not attached, unless it was forced.
    pub fn refused(&self) -> Option<&SiteRefusal> {
        match &self.check {
            SiteCheck::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// Attaches the site even though its check refused it: the kernel then
    /// writes its breakpoint at Location, and adds to the semaphore,
    /// wherever they are.
    pub fn force(&mut self) {
        if let SiteCheck::Refused(r) = &self.check {
            self.check = SiteCheck::Forced(r.clone());
        }
    }
}

/// What the probe reader learned from one ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfProbes {
    /// The instruction set.
    pub machine: Machine,
    /// `e_type` (`ET_EXEC` = 2, `ET_DYN` = 3).
    pub elf_type: u16,
    /// The `PT_LOAD` segments.
    pub segments: Vec<Segment>,
    /// The probe sites, in note order.
    pub sites: Vec<Site>,
    /// The notes skipped because they are malformed as a whole (the other
    /// notes are read all the same).
    pub skipped: Vec<SkippedNote>,
}

/// A stapsdt note malformed as a whole, which the reader skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedNote {
    /// Its position among the file's stapsdt notes, from 0.
    pub index: usize,
    /// `provider:name`, when the note got that far.
    pub probe: Option<String>,
    /// What is wrong with it.
    pub reason: String,
}

/// `stapsdt note 3 (p:n) is malformed and skipped: REASON`.
impl fmt::Display for SkippedNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stapsdt note {}", self.index)?;
        if let Some(probe) = &self.probe {
            write!(f, " ({probe})")?;
        }
        write!(f, " is malformed and skipped: {}", self.reason)
    }
}

impl ElfProbes {
    /// The file offset of a link-time address, if a loaded segment has file
    /// bytes there.
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.segments.iter().find_map(|s| {
            let delta = addr.checked_sub(s.vaddr)?;
            (delta < s.filesz)
                .then(|| s.offset.checked_add(delta))
                .flatten()
        })
    }
}

/// Reads every probe site of an ELF file held in memory.
///
/// A file without `.note.stapsdt` has no sites (an empty vector, not an error).
pub fn read_sites(elf_bytes: &[u8]) -> Result<Vec<Site>, Error> {
    read_probes(elf_bytes).map(|p| p.sites)
}

/// Reads every probe site of the ELF file at `path`.
pub fn read_file(path: impl AsRef<Path>) -> Result<Vec<Site>, Error> {
    read_file_probes(path).map(|p| p.sites)
}

/// The most bytes one read of an ELF file may ask for (a section, the
/// program or section headers), and [`MAX_READ`] times 4 for all of them.
pub const MAX_READ: u64 = 64 << 20;

/// Like [`read_file`], with the file's machine and segments.
///
/// Only a regular file is opened (never a device, FIFO or socket), and only
/// one that starts with the ELF magic is read further, and then only the
/// parts needed (headers, section names, the notes, a few bytes per site),
/// each at most [`MAX_READ`] bytes: never the whole file.
///
/// An error names the file: [`Error::Io`], or [`Error::File`] around what
/// is wrong with its contents.
pub fn read_file_probes(path: impl AsRef<Path>) -> Result<ElfProbes, Error> {
    let path = path.as_ref();
    Bounded::open(path)
        .and_then(|file| read_probes_from(&file))
        .map_err(|e| match e {
            Error::Io { .. } | Error::File { .. } => e,
            e => Error::File {
                path: path.into(),
                source: Box::new(e),
            },
        })
}

impl Bounded {
    /// Opens a regular file that starts with the ELF magic, for reads on
    /// demand within [`MAX_READ`] (see [`read_file_probes`]).
    pub(crate) fn open(path: &Path) -> Result<Bounded, Error> {
        let io = |source| Error::Io {
            path: path.into(),
            source,
        };
        let not_regular = || Error::Io {
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        };
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(not_regular());
        }
        // O_NONBLOCK: should it have become a FIFO since, opening must not wait.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(not_regular());
        }
        let mut magic = [0u8; 4];
        if file.read_exact(&mut magic).is_err() || magic != elf::ELFMAG {
            return Err(Error::NotElf);
        }
        Ok(Bounded {
            cache: ReadCache::new(file),
            budget: Cell::new(4 * MAX_READ),
        })
    }
}

/// A file read on demand, each read at most [`MAX_READ`] bytes and all of
/// them within a budget.
pub(crate) struct Bounded {
    cache: ReadCache<File>,
    budget: Cell<u64>,
}

impl<'a> ReadRef<'a> for &'a Bounded {
    fn len(self) -> Result<u64, ()> {
        (&self.cache).len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        let left = self.budget.get();
        if size > MAX_READ || size > left {
            return Err(());
        }
        self.budget.set(left - size);
        (&self.cache).read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        // object reads at most 4 KiB looking for the delimiter.
        (&self.cache).read_bytes_at_until(range, delimiter)
    }
}

/// Like [`read_sites`], with the file's machine and segments.
pub fn read_probes(data: &[u8]) -> Result<ElfProbes, Error> {
    read_probes_from(data)
}

fn read_probes_from<'d, R: ReadRef<'d>>(data: R) -> Result<ElfProbes, Error> {
    let header = parse_header(data)?;
    let endian = header.endian()?;
    let machine = match header.e_machine(endian) {
        elf::EM_X86_64 => Machine::X86_64,
        elf::EM_AARCH64 => Machine::Aarch64,
        elf::EM_RISCV => Machine::Riscv64,
        other => return Err(Error::Unsupported(format!("ELF files for machine {other}"))),
    };
    let segments = header
        .program_headers(endian, data)?
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| Segment {
            vaddr: p.p_vaddr(endian),
            offset: p.p_offset(endian),
            filesz: p.p_filesz(endian),
            memsz: p.p_memsz(endian),
            flags: p.p_flags(endian),
        })
        .collect();
    let mut probes = ElfProbes {
        machine,
        elf_type: header.e_type(endian),
        segments,
        sites: vec![],
        skipped: vec![],
    };
    let sections = header.sections(endian, data)?;
    let stapsdt_base = sections
        .section_by_name(endian, b".stapsdt.base")
        .map(|(_, s)| s.sh_addr(endian));
    let mut index = 0;
    for section in sections.iter() {
        if sections.section_name(endian, section) != Ok(b".note.stapsdt") {
            continue;
        }
        let Some(mut notes) = section.notes(endian, data)? else {
            continue;
        };
        loop {
            let note = match notes.next() {
                Ok(Some(note)) => note,
                Ok(None) => break,
                // The notes after a malformed header cannot be found.
                Err(e) => {
                    probes.skipped.push(SkippedNote {
                        index,
                        probe: None,
                        reason: format!("{e} (the rest of its section is not read)"),
                    });
                    break;
                }
            };
            if note.name() == b"stapsdt" && note.n_type(endian) == NT_STAPSDT {
                match parse_desc(note.desc(), endian, machine) {
                    Ok(raw) => {
                        let site = raw.into_site(&probes, stapsdt_base, data);
                        probes.sites.push(site);
                    }
                    Err((probe, reason)) => probes.skipped.push(SkippedNote {
                        index,
                        probe,
                        reason,
                    }),
                }
            }
            index += 1;
        }
    }
    resolve_symbols(&mut probes.sites, &sections, endian, data);
    Ok(probes)
}

/// Gives each `sym(%rip)` and `sym(%reg,...)` operand its symbol's address
/// from the file's `.symtab` and `.dynsym`; one whose symbol is missing (a
/// local label the assembler left out, a stripped file) or defined more than
/// once becomes unreadable, with the reason.
fn resolve_symbols<'d, R: ReadRef<'d>>(
    sites: &mut [Site],
    sections: &SectionTable<'d, Header, R>,
    endian: Endianness,
    data: R,
) {
    let wanted: BTreeSet<String> = sites
        .iter()
        .flat_map(|s| &s.args)
        .filter_map(|a| match &a.operand {
            Operand::Symbol {
                name, addr: None, ..
            }
            | Operand::SymbolIndexed {
                name, addr: None, ..
            } => Some(name.clone()),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return;
    }
    let mut found: HashMap<&str, BTreeSet<u64>> = HashMap::new();
    for kind in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        let Ok(table) = sections.symbols(endian, data, kind) else {
            continue;
        };
        for sym in table.iter() {
            if sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let Ok(name) = table.symbol_name(endian, sym) else {
                continue;
            };
            if let Some(name) = std::str::from_utf8(name).ok().and_then(|n| wanted.get(n)) {
                found
                    .entry(name.as_str())
                    .or_default()
                    .insert(sym.st_value(endian));
            }
        }
    }
    for arg in sites.iter_mut().flat_map(|s| &mut s.args) {
        let (Operand::Symbol { name, offset, addr }
        | Operand::SymbolIndexed {
            name, offset, addr, ..
        }) = &mut arg.operand
        else {
            continue;
        };
        let reason = match found.get(name.as_str()) {
            Some(values) if values.len() == 1 => {
                *addr = values.first().map(|v| v.wrapping_add(*offset as u64));
                continue;
            }
            Some(values) => format!(
                "symbol `{name}` has {} different addresses in the file's symbol tables",
                values.len()
            ),
            None if name.starts_with(".L") => format!(
                "`{name}` is a local label, which the assembler leaves out of the symbol tables"
            ),
            None => format!("symbol `{name}` is not in the file's symbol tables (stripped?)"),
        };
        arg.operand = Operand::Unreadable {
            text: arg.to_string(),
            reason,
        };
    }
}

/// Checks the identification bytes first, for precise errors.
pub(crate) fn parse_header<'d, R: ReadRef<'d>>(data: R) -> Result<&'d Header, Error> {
    let data_ident = data.read_bytes_at(0, 16).map_err(|_| Error::NotElf)?;
    if data_ident[..4] != elf::ELFMAG {
        return Err(Error::NotElf);
    }
    let data_ident: &[u8] = data_ident;
    if data_ident[4] != elf::ELFCLASS64 {
        return Err(Error::Unsupported("32-bit ELF files".into()));
    }
    if data_ident[5] != elf::ELFDATA2LSB {
        return Err(Error::Unsupported("big-endian ELF files".into()));
    }
    Ok(Header::parse(data)?)
}

/// A note's fields before addresses are resolved.
struct RawSite {
    location: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
    args_text: String,
    args: Vec<Arg>,
}

/// Parses a note's descriptor; on error, the probe's name when it got that
/// far, and what is wrong.
fn parse_desc(
    desc: &[u8],
    endian: Endianness,
    machine: Machine,
) -> Result<RawSite, (Option<String>, String)> {
    use object::Endian;
    let bad = |s: &str| (None, s.to_string());
    if desc.len() < 24 {
        return Err(bad(
            "its descriptor is shorter than the three 8-byte addresses",
        ));
    }
    let word = |i: usize| {
        let mut b = [0; 8];
        b.copy_from_slice(&desc[i * 8..i * 8 + 8]);
        endian.read_u64_bytes(b)
    };
    let mut strings = desc[24..].split(|b| *b == 0);
    let mut next = |what: &str, max: usize| -> Result<String, (Option<String>, String)> {
        let s = strings.next().unwrap_or_default();
        if s.len() > max {
            return Err((None, format!("its {what} is longer than {max} bytes")));
        }
        String::from_utf8(s.to_vec()).map_err(|_| (None, format!("its {what} is not UTF-8")))
    };
    let provider = next("provider", MAX_NAME)?;
    let name = next("probe name", MAX_NAME)?;
    let probe = Some(format!("{provider}:{name}"));
    let args_text = next("argument string", crate::elf::arg::MAX_ARGS_TEXT)
        .map_err(|(_, reason)| (probe.clone(), reason))?;
    // Three strings need three NULs; `split` yields a final piece after the last one.
    if desc[24..].iter().filter(|b| **b == 0).count() < 3 {
        return Err(bad(
            "its provider, name and arguments are not three NUL-terminated strings",
        ));
    }
    if provider.is_empty() || name.is_empty() {
        return Err(bad("its provider or probe name is empty"));
    }
    let args = parse_args(&args_text, machine).map_err(|e| (probe, e.to_string()))?;
    Ok(RawSite {
        location: word(0),
        base: word(1),
        semaphore: word(2),
        provider,
        name,
        args_text,
        args,
    })
}

impl RawSite {
    fn into_site<'d, R: ReadRef<'d>>(
        self,
        probes: &ElfProbes,
        stapsdt_base: Option<u64>,
        data: R,
    ) -> Site {
        // sys/sdt.h: shift by (.stapsdt.base address - Base) when they differ.
        let shift = stapsdt_base.map_or(0, |b| b.wrapping_sub(self.base));
        let location = self.location.wrapping_add(shift);
        let semaphore = (self.semaphore != 0).then(|| self.semaphore.wrapping_add(shift));
        let location_offset = probes.file_offset(location);
        let bytes =
            location_offset.map_or_else(Vec::new, |off| site_bytes(probes, location, off, data));
        let check = SiteCheck::of(
            probes.machine,
            &probes.segments,
            location,
            &bytes,
            semaphore,
        );
        Site {
            provider: self.provider,
            name: self.name,
            location,
            location_offset,
            note_base: self.base,
            stapsdt_base,
            semaphore,
            semaphore_offset: semaphore.and_then(|s| probes.file_offset(s)),
            args_text: self.args_text,
            args: self.args,
            machine: probes.machine,
            layout: layout_of(&bytes, probes.machine),
            bytes,
            check,
        }
    }
}

/// Up to [`SITE_BYTES`] bytes at `offset`, within the segment's file bytes.
fn site_bytes<'d, R: ReadRef<'d>>(
    probes: &ElfProbes,
    location: u64,
    offset: u64,
    data: R,
) -> Vec<u8> {
    let in_segment = probes.segments.iter().find_map(|s| {
        let delta = location.checked_sub(s.vaddr)?;
        (delta < s.filesz).then(|| s.filesz - delta)
    });
    let file_len = data.len().unwrap_or(0);
    let len = in_segment
        .unwrap_or(0)
        .min(SITE_BYTES as u64)
        .min(file_len.saturating_sub(offset));
    data.read_bytes_at(offset, len)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}
