//! One mapped ELF file as the unwinder and the symbolizer read it: its
//! unwind sections (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) for
//! framehop, its symbol table, and its DWARF (or its separate debug file's,
//! found by build id under `/usr/lib/debug/.build-id/`) for addr2line. Read
//! once, whole, and shared by every process that maps it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use framehop::ExplicitModuleSectionInfo;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::arch::Machine;
use crate::elf::sites::Segment;

/// The biggest file read for its unwind tables and symbols (a bigger one
/// unwinds by frame pointers, and its frames show as addresses).
pub(crate) const MAX_FILE: u64 = 1 << 30;

/// DWARF sections, shared by the context that reads them.
type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// What a code address is in the source: a function, and where in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Symbol {
    /// Demangled.
    pub(crate) function: Option<Arc<str>>,
    pub(crate) file: Option<Arc<str>>,
    pub(crate) line: Option<u32>,
}

/// A function in the symbol table (`.symtab`, else `.dynsym`).
#[derive(Debug)]
struct FunctionSymbol {
    start: u64,
    /// 0: not known.
    size: u64,
    name: Arc<str>,
}

/// One ELF file's unwind sections and symbols.
pub(crate) struct ObjectFile {
    /// Its `PT_LOAD` segments, to find its load bias in a process.
    pub(crate) segments: Vec<Segment>,
    /// The unwind sections, handed to framehop for each process.
    pub(crate) unwind: ExplicitModuleSectionInfo<Arc<[u8]>>,
    /// Function symbols by address (demangled when looked up).
    symbols: Vec<FunctionSymbol>,
    dwarf: Option<addr2line::Context<Reader>>,
    /// What each looked-up address is: innermost (inlined) call first.
    looked_up: HashMap<u64, Arc<[Symbol]>>,
}

impl std::fmt::Debug for ObjectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectFile")
            .field("segments", &self.segments)
            .field("symbols", &self.symbols.len())
            .field("dwarf", &self.dwarf.is_some())
            .finish()
    }
}

impl ObjectFile {
    /// Reads the ELF file at `path`: `None` for a file that is not an
    /// ELF file of `machine` (a font, a locale archive), cannot be read,
    /// or is bigger than [`MAX_FILE`].
    pub(crate) fn read(path: &Path, machine: Machine) -> Option<ObjectFile> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() || meta.len() > MAX_FILE {
            return None;
        }
        let data = std::fs::read(path).ok()?;
        ObjectFile::parse(&data, machine)
    }

    /// An ELF file of `machine` held in memory.
    pub(crate) fn parse(data: &[u8], machine: Machine) -> Option<ObjectFile> {
        let file = object::File::parse(data).ok()?;
        if file.format() != object::BinaryFormat::Elf
            || file.architecture() != machine.arch().object
        {
            return None;
        }
        let segments = file
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    offset,
                    filesz,
                    memsz: s.size(),
                    flags: 0,
                }
            })
            .collect();
        let mut symbols: Vec<FunctionSymbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                Some(FunctionSymbol {
                    start: s.address(),
                    size: s.size(),
                    name: Arc::from(s.name().ok().filter(|n| !n.is_empty())?),
                })
            })
            .collect();
        symbols.sort_by_key(|s| (s.start, std::cmp::Reverse(s.size)));
        symbols.dedup_by_key(|s| s.start);
        let dwarf = dwarf_of(&file).or_else(|| {
            let debug = separate_debug_file(&file)?;
            let data = std::fs::read(debug).ok()?;
            dwarf_of(&object::File::parse(&*data).ok()?)
        });
        Some(ObjectFile {
            segments,
            unwind: unwind_sections(&file),
            symbols,
            dwarf,
            looked_up: HashMap::new(),
        })
    }

    /// What the link-time address `svma` is, innermost inlined call first
    /// (empty when nothing is known of it).
    pub(crate) fn symbolize(&mut self, svma: u64) -> Arc<[Symbol]> {
        if let Some(found) = self.looked_up.get(&svma) {
            return found.clone();
        }
        let found: Arc<[Symbol]> = self.look_up(svma).into();
        self.looked_up.insert(svma, found.clone());
        found
    }

    fn look_up(&self, svma: u64) -> Vec<Symbol> {
        let mut out = vec![];
        if let Some(dwarf) = &self.dwarf {
            if let Ok(mut frames) = dwarf.find_frames(svma).skip_all_loads() {
                while let Ok(Some(frame)) = frames.next() {
                    let function = frame.function.as_ref().and_then(|f| {
                        let name = f.raw_name().ok()?;
                        Some(Arc::from(
                            addr2line::demangle_auto(name, f.language).as_ref(),
                        ))
                    });
                    let (file, line) = match frame.location {
                        Some(l) => (l.file.map(Arc::from), l.line),
                        None => (None, None),
                    };
                    out.push(Symbol {
                        function,
                        file,
                        line,
                    });
                }
            }
        }
        // The outermost function from the symbol table when DWARF has none.
        let table = || self.table_name(svma);
        match out.last_mut() {
            Some(last) if last.function.is_none() => last.function = table(),
            Some(_) => {}
            None => {
                if let Some(function) = table() {
                    out.push(Symbol {
                        function: Some(function),
                        ..Symbol::default()
                    });
                }
            }
        }
        out
    }

    /// The demangled name of the function symbol that covers `svma` (the
    /// one at or before it, where its size is not known): none for an
    /// address past the function before it, which a stripped file's
    /// `.dynsym` (exported functions only) leaves for its static ones.
    fn table_name(&self, svma: u64) -> Option<Arc<str>> {
        let at = self.symbols.partition_point(|s| s.start <= svma);
        let s = self.symbols.get(at.checked_sub(1)?)?;
        if s.size > 0 && svma - s.start >= s.size {
            return None;
        }
        Some(Arc::from(
            addr2line::demangle_auto(s.name.as_ref().into(), None).as_ref(),
        ))
    }
}

/// The sections framehop reads, copied out of the file.
fn unwind_sections(file: &object::File<'_>) -> ExplicitModuleSectionInfo<Arc<[u8]>> {
    let range = |name: &str| {
        let s = file.section_by_name(name)?;
        Some(s.address()..s.address() + s.size())
    };
    let data = |name: &str| -> Option<Arc<[u8]>> {
        let s = file.section_by_name(name)?;
        Some(Arc::from(s.uncompressed_data().ok()?.as_ref()))
    };
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: data(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: data(".debug_frame"),
        ..ExplicitModuleSectionInfo::default()
    }
}

/// The DWARF of `file`, if it has any.
fn dwarf_of(file: &object::File<'_>) -> Option<addr2line::Context<Reader>> {
    file.section_by_name(".debug_info")?;
    let endian = match file.is_little_endian() {
        true => gimli::RunTimeEndian::Little,
        false => gimli::RunTimeEndian::Big,
    };
    let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok());
        let bytes: Arc<[u8]> = match &data {
            Some(d) => Arc::from(d.as_ref()),
            None => Arc::from(&[][..]),
        };
        Ok(Reader::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

/// `/usr/lib/debug/.build-id/XX/REST.debug`, where distributions install
/// a stripped file's debug information, when it exists.
fn separate_debug_file(file: &object::File<'_>) -> Option<std::path::PathBuf> {
    let id = file.build_id().ok()??;
    let (first, rest) = id.split_first()?;
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path =
        std::path::PathBuf::from(format!("/usr/lib/debug/.build-id/{first:02x}/{hex}.debug"));
    path.is_file().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_symbolizes_its_own_functions() {
        let exe = std::env::current_exe().unwrap();
        let mut o = ObjectFile::read(&exe, Machine::host().unwrap()).unwrap();
        assert!(o.unwind.eh_frame.is_some(), "no .eh_frame in {exe:?}");
        assert!(o.unwind.text_svma.is_some());
        let here = this_test_binary_symbolizes_its_own_functions as fn() as usize as u64;
        // The test binary is position-independent: its link-time address is
        // the runtime one minus the bias, which the symbol table gives.
        let bias = here - o.symbols_named("this_test_binary_symbolizes_its_own_functions");
        let found = o.symbolize(here - bias + 1);
        let outer = found.last().unwrap();
        assert_eq!(
            outer.function.as_deref(),
            Some("usdt_trace::stack::object::tests::this_test_binary_symbolizes_its_own_functions")
        );
        assert!(
            outer.file.as_deref().unwrap().ends_with("object.rs"),
            "{outer:?}"
        );
        assert!(outer.line.is_some());
        // Not ELF, or nothing: none.
        assert!(ObjectFile::parse(b"not elf", Machine::X86_64).is_none());
        // Another machine's file: none.
        let data = std::fs::read(&exe).unwrap();
        for machine in [Machine::X86_64, Machine::Aarch64, Machine::Riscv64] {
            let read = ObjectFile::parse(&data, machine).is_some();
            assert_eq!(read, Some(machine) == Machine::host(), "{machine}");
        }
    }

    #[test]
    fn a_symbol_covers_its_size_only() {
        let symbol = |start, size, name: &str| FunctionSymbol {
            start,
            size,
            name: name.into(),
        };
        let mut o = ObjectFile {
            segments: vec![],
            unwind: ExplicitModuleSectionInfo::default(),
            symbols: vec![
                symbol(0x1000, 0x10, "_ZN4demo5first17h0123456789abcdefE"),
                symbol(0x2000, 0, "_ZN3foo3barEv"),
            ],
            dwarf: None,
            looked_up: HashMap::new(),
        };
        let name =
            |o: &mut ObjectFile, at| o.symbolize(at).first().and_then(|s| s.function.clone());
        assert_eq!(name(&mut o, 0x1000).as_deref(), Some("demo::first"));
        assert_eq!(name(&mut o, 0x100f).as_deref(), Some("demo::first"));
        // Past its size: a static function .dynsym does not name.
        assert_eq!(name(&mut o, 0x1010), None);
        assert_eq!(name(&mut o, 0xfff), None);
        // A size not known covers up to the next symbol; C++ demangled.
        assert_eq!(name(&mut o, 0x2345).as_deref(), Some("foo::bar()"));
    }

    impl ObjectFile {
        /// The address of the symbol whose demangled name ends in `suffix`.
        fn symbols_named(&self, suffix: &str) -> u64 {
            self.symbols
                .iter()
                .find(|s| addr2line::demangle_auto(s.name.as_ref().into(), None).ends_with(suffix))
                .map(|s| s.start)
                .unwrap()
        }
    }
}
