//! The shared libraries a program will load, found as the dynamic loader
//! (glibc's `ld.so`) finds them: from each object's dynamic section
//! (`DT_NEEDED`, `DT_RPATH`, `DT_RUNPATH`), `LD_LIBRARY_PATH`,
//! `/etc/ld.so.cache` and the default directories. Nothing is executed
//! (`ldd` may run the program it is asked about), and every file is read
//! within bounds.
//!
//! The search for a name without `/` (glibc `elf/dl-load.c`,
//! `_dl_map_object`), for the object that needs it:
//! 1. `DT_RPATH` of that object, then of the objects that loaded it up to
//!    the program, when that object has no `DT_RUNPATH`;
//! 2. `LD_LIBRARY_PATH` (the command inherits our environment);
//! 3. `DT_RUNPATH` of that object;
//! 4. `/etc/ld.so.cache`;
//! 5. the default directories.
//!
//! `$ORIGIN` (and `${ORIGIN}`) in a path list is the directory of the object
//! that holds it; a directory naming `$LIB` or `$PLATFORM` is skipped. A
//! candidate is taken only if it is an ELF file for the program's machine
//! and class, as the loader does. A name already loaded (by its file name
//! or `DT_SONAME`, the program's interpreter included) is not loaded again.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::ReadRef;

use crate::elf::note::{parse_header, Bounded};
use crate::Error;

/// The loader's cache.
pub(crate) const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// The most libraries followed (a program with more is cut there).
const MAX_LIBRARIES: usize = 4096;

/// What the loader reads from one object.
#[derive(Debug, Default)]
pub(crate) struct Dynamic {
    /// `e_machine`.
    pub(crate) machine: u16,
    /// `PT_INTERP`: the program's interpreter.
    pub(crate) interpreter: Option<PathBuf>,
    /// `DT_NEEDED`, in order.
    pub(crate) needed: Vec<Vec<u8>>,
    /// `DT_RPATH`.
    pub(crate) rpath: Option<Vec<u8>>,
    /// `DT_RUNPATH`.
    pub(crate) runpath: Option<Vec<u8>>,
    /// `DT_SONAME`.
    pub(crate) soname: Option<Vec<u8>>,
}

/// Reads the dynamic section (from the `PT_DYNAMIC` segment) of a 64-bit
/// little-endian ELF file. A file without one (static) has no needs.
pub(crate) fn read_dynamic(path: &Path) -> Result<Dynamic, Error> {
    let file = Bounded::open(path)?;
    dynamic_of(&file)
}

fn dynamic_of<'d, R: ReadRef<'d>>(data: R) -> Result<Dynamic, Error> {
    let header = parse_header(data)?;
    let endian = header.endian()?;
    let mut out = Dynamic {
        machine: header.e_machine(endian),
        ..Dynamic::default()
    };
    let segments = header.program_headers(endian, data)?;
    let mut dynamic = None;
    for segment in segments {
        if let Some(interp) = segment.interpreter(endian, data)? {
            out.interpreter = Some(PathBuf::from(OsStr::from_bytes(interp)));
        }
        if let Some(d) = segment.dynamic(endian, data)? {
            dynamic = Some(d);
        }
    }
    let Some(dynamic) = dynamic else {
        return Ok(out);
    };
    // (tag, value) up to DT_NULL.
    let entries: Vec<(u32, u64)> = dynamic
        .iter()
        .map(|d| (d.tag32(endian), d.d_val(endian)))
        .take_while(|(tag, _)| *tag != Some(elf::DT_NULL))
        .filter_map(|(tag, v)| Some((tag?, v)))
        .collect();
    // The string table is at DT_STRTAB (an address) for DT_STRSZ bytes:
    // its file offset through the segment that maps it.
    let value = |tag: u32| entries.iter().find(|(t, _)| *t == tag).map(|(_, v)| *v);
    let (Some(strtab), Some(strsz)) = (value(elf::DT_STRTAB), value(elf::DT_STRSZ)) else {
        return Ok(out);
    };
    let offset = segments
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .find_map(|p| {
            let vaddr = p.p_vaddr(endian);
            let filesz = p.p_filesz(endian);
            let start = strtab.checked_sub(vaddr)?;
            let offset = p.p_offset(endian);
            (start < filesz && strsz <= filesz - start).then_some(offset + start)
        })
        .ok_or_else(|| Error::Elf("DT_STRTAB is outside the loaded segments".into()))?;
    let strings = data
        .read_bytes_at(offset, strsz)
        .map_err(|()| Error::Elf("cannot read the dynamic string table".into()))?;
    let string = |at: u64| -> Result<Vec<u8>, Error> {
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| strings.get(at..))
            .ok_or_else(|| Error::Elf("a dynamic string is outside DT_STRTAB".into()))?;
        let end = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| Error::Elf("a dynamic string has no end".into()))?;
        Ok(rest[..end].to_vec())
    };
    for (tag, v) in entries {
        match tag {
            elf::DT_NEEDED => out.needed.push(string(v)?),
            elf::DT_RPATH => out.rpath = Some(string(v)?),
            elf::DT_RUNPATH => out.runpath = Some(string(v)?),
            elf::DT_SONAME => out.soname = Some(string(v)?),
            _ => {}
        }
    }
    Ok(out)
}

/// One object being loaded: its path and what its dynamic section says.
struct Loaded {
    path: PathBuf,
    dynamic: Dynamic,
    /// The object that needed it (an index into the loaded objects), for
    /// the `DT_RPATH` chain.
    parent: Option<usize>,
}

/// The shared libraries the dynamic loader would load for `program`, in
/// the order it loads them (breadth first), each by the path it finds (the
/// interpreter by its `PT_INTERP` path); empty for a static program.
/// Libraries that cannot be found are left out, as are those opened later
/// with `dlopen`.
pub fn shared_libraries(program: &Path) -> Vec<PathBuf> {
    let Ok(dynamic) = read_dynamic(program) else {
        return vec![];
    };
    let cache = LdSoCache::read(Path::new(LD_SO_CACHE)).unwrap_or_default();
    let env = std::env::var_os("LD_LIBRARY_PATH");
    let search = Search {
        machine: dynamic.machine,
        cache: &cache,
        ld_library_path: env.as_deref().map(OsStr::as_bytes),
    };
    search.libraries(program, dynamic)
}

/// What the search for every object of one program shares.
struct Search<'a> {
    machine: u16,
    cache: &'a LdSoCache,
    ld_library_path: Option<&'a [u8]>,
}

impl Search<'_> {
    fn libraries(&self, program: &Path, dynamic: Dynamic) -> Vec<PathBuf> {
        // Names already loaded: file names and sonames.
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        let mut paths: HashSet<PathBuf> = HashSet::new();
        let mut out = vec![];
        let mut objects = vec![Loaded {
            path: program.into(),
            dynamic,
            parent: None,
        }];
        // The interpreter is mapped before anything is loaded: a library
        // that needs it (libc) gets it by name.
        if let Some(interp) = objects[0].dynamic.interpreter.clone() {
            if let Ok(dynamic) = read_dynamic(&interp) {
                remember(&mut names, &interp, &dynamic);
                paths.insert(interp.clone());
                objects.push(Loaded {
                    path: interp,
                    dynamic,
                    parent: None,
                });
            }
        }
        let mut queue: VecDeque<usize> = [0].into();
        while let Some(at) = queue.pop_front() {
            for needed in objects[at].dynamic.needed.clone() {
                if objects.len() >= MAX_LIBRARIES {
                    return out;
                }
                if names.contains(&needed) {
                    continue;
                }
                let Some((path, dynamic)) = self.find(&objects, at, &needed) else {
                    continue;
                };
                names.insert(needed);
                remember(&mut names, &path, &dynamic);
                if !paths.insert(path.clone()) {
                    continue;
                }
                out.push(path.clone());
                objects.push(Loaded {
                    path,
                    dynamic,
                    parent: Some(at),
                });
                queue.push_back(objects.len() - 1);
            }
        }
        // The interpreter, where ldd lists it: after the libraries that
        // need it.
        if objects.len() > 1 && objects[1].parent.is_none() {
            let interp = &objects[1].path;
            if !out.contains(interp) {
                out.push(interp.clone());
            }
        }
        out
    }

    /// Where `name`, needed by `objects[at]`, is found, with its dynamic
    /// section.
    fn find(&self, objects: &[Loaded], at: usize, name: &[u8]) -> Option<(PathBuf, Dynamic)> {
        if name.contains(&b'/') {
            let path = PathBuf::from(OsStr::from_bytes(name));
            return self.accept(&path).map(|d| (path, d));
        }
        let mut dirs: Vec<PathBuf> = vec![];
        let object = &objects[at];
        if object.dynamic.runpath.is_none() {
            // DT_RPATH of the object and of those that loaded it.
            let mut chain = Some(at);
            while let Some(i) = chain {
                let o = &objects[i];
                if let Some(rpath) = &o.dynamic.rpath {
                    dirs.extend(path_list(rpath, &o.path));
                }
                chain = o.parent;
            }
        }
        if let Some(list) = self.ld_library_path {
            dirs.extend(path_list(list, &object.path));
        }
        if let Some(runpath) = &object.dynamic.runpath {
            dirs.extend(path_list(runpath, &object.path));
        }
        let in_dirs = |dirs: &[PathBuf]| {
            dirs.iter().find_map(|dir| {
                let path = dir.join(OsStr::from_bytes(name));
                self.accept(&path).map(|d| (path, d))
            })
        };
        if let Some(found) = in_dirs(&dirs) {
            return Some(found);
        }
        for path in self.cache.lookup(name) {
            if let Some(d) = self.accept(&path) {
                return Some((path, d));
            }
        }
        in_dirs(&default_dirs(self.machine))
    }

    /// The dynamic section of `path` if it is an ELF file the loader would
    /// take for this program.
    fn accept(&self, path: &Path) -> Option<Dynamic> {
        read_dynamic(path)
            .ok()
            .filter(|d| d.machine == self.machine)
    }
}

/// Records the names a loaded object answers to.
fn remember(names: &mut HashSet<Vec<u8>>, path: &Path, dynamic: &Dynamic) {
    if let Some(file) = path.file_name() {
        names.insert(file.as_bytes().to_vec());
    }
    if let Some(soname) = &dynamic.soname {
        names.insert(soname.clone());
    }
}

/// A `:`-separated list of directories (`;` too, as glibc accepts), with
/// `$ORIGIN` replaced by the directory of `object`. Empty entries are the
/// current directory, as for the loader; entries with `$LIB` or `$PLATFORM`
/// are skipped.
fn path_list(list: &[u8], object: &Path) -> Vec<PathBuf> {
    let origin = object
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("/"));
    let origin = std::fs::canonicalize(origin).unwrap_or_else(|_| origin.into());
    list.split(|b| *b == b':' || *b == b';')
        .filter_map(|dir| {
            let dir = replace(dir, b"${ORIGIN}", origin.as_os_str().as_bytes());
            let dir = replace(&dir, b"$ORIGIN", origin.as_os_str().as_bytes());
            if dir.contains(&b'$') {
                return None;
            }
            Some(if dir.is_empty() {
                PathBuf::from(".")
            } else {
                PathBuf::from(OsStr::from_bytes(&dir))
            })
        })
        .collect()
}

/// `text` with every `from` replaced by `to`.
fn replace(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The loader's default directories for a machine (Debian's multiarch
/// directories first, then the classic ones).
fn default_dirs(machine: u16) -> Vec<PathBuf> {
    let (triplet, lib64) = match machine {
        elf::EM_X86_64 => ("x86_64-linux-gnu", true),
        elf::EM_AARCH64 => ("aarch64-linux-gnu", true),
        elf::EM_RISCV => ("riscv64-linux-gnu", false),
        _ => ("", false),
    };
    let mut dirs = vec![];
    if !triplet.is_empty() {
        dirs.push(format!("/lib/{triplet}"));
        dirs.push(format!("/usr/lib/{triplet}"));
    }
    if lib64 {
        dirs.push("/lib64".into());
        dirs.push("/usr/lib64".into());
    }
    dirs.push("/lib".into());
    dirs.push("/usr/lib".into());
    dirs.into_iter().map(PathBuf::from).collect()
}

/// `/etc/ld.so.cache` in glibc's format (`glibc-ld.so.cache1.1`, alone or
/// after the old `ld.so-1.7.0` part): each library name with its path, in
/// the order ldconfig wrote them (the loader takes the first that fits).
#[derive(Debug, Default)]
pub(crate) struct LdSoCache {
    entries: Vec<CacheEntry>,
}

/// One entry: a library name, its path, ldconfig's flags and the hwcaps
/// subdirectory it is for (0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheEntry {
    pub(crate) name: Vec<u8>,
    pub(crate) path: PathBuf,
    pub(crate) flags: i32,
    pub(crate) hwcap: u64,
}

/// The most bytes of the cache read (glibc's own is a few hundred KiB).
const MAX_CACHE: u64 = 16 << 20;
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
/// `struct cache_file_new` without its entries.
const NEW_HEADER: usize = 48;
/// `struct file_entry_new`.
const NEW_ENTRY: usize = 24;
/// `struct file_entry` (old format).
const OLD_ENTRY: usize = 12;

impl LdSoCache {
    /// Reads the cache at `path` (at most [`MAX_CACHE`] bytes).
    pub(crate) fn read(path: &Path) -> Result<LdSoCache, Error> {
        use std::io::Read;
        let io = |source| Error::Io {
            path: path.into(),
            source,
        };
        let mut data = vec![];
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_CACHE)
            .read_to_end(&mut data)
            .map_err(io)?;
        LdSoCache::parse(&data)
    }

    /// Parses a cache: malformed input is an error, never a panic.
    pub(crate) fn parse(data: &[u8]) -> Result<LdSoCache, Error> {
        let bad = |what: &str| Error::Elf(format!("{LD_SO_CACHE}: {what}"));
        let mut at = 0;
        if data.starts_with(OLD_MAGIC) {
            // The old part: magic, nlibs, entries; the new one follows,
            // aligned to 8.
            let nlibs = u32_at(data, OLD_MAGIC.len()).ok_or_else(|| bad("truncated"))?;
            let end = (nlibs as usize)
                .checked_mul(OLD_ENTRY)
                .and_then(|n| n.checked_add(OLD_MAGIC.len() + 4))
                .ok_or_else(|| bad("too many entries"))?;
            at = end.next_multiple_of(8);
            if !data.get(at..).is_some_and(|d| d.starts_with(NEW_MAGIC)) {
                return Err(bad("only the old format (ld.so-1.7.0), which is not read"));
            }
        }
        let new = data.get(at..).ok_or_else(|| bad("truncated"))?;
        if !new.starts_with(NEW_MAGIC) {
            return Err(bad("not a glibc-ld.so.cache1.1 file"));
        }
        // Only little-endian caches are read (the flags byte says 2 or 0
        // for unknown, which is the host's order).
        if !matches!(new.get(28), Some(0 | 2)) {
            return Err(bad("not a little-endian cache"));
        }
        let nlibs = u32_at(new, 20).ok_or_else(|| bad("truncated"))? as usize;
        let table = nlibs
            .checked_mul(NEW_ENTRY)
            .and_then(|n| n.checked_add(NEW_HEADER))
            .filter(|end| *end <= new.len())
            .ok_or_else(|| bad("more entries than the file holds"))?;
        let string = |offset: u32| -> Result<&[u8], Error> {
            // Offsets count from the new header.
            let rest = new
                .get(offset as usize..)
                .filter(|_| offset as usize >= table)
                .ok_or_else(|| bad("a string is outside the file"))?;
            let end = rest
                .iter()
                .take(4096)
                .position(|b| *b == 0)
                .ok_or_else(|| bad("a string has no end"))?;
            Ok(&rest[..end])
        };
        let mut entries = Vec::with_capacity(nlibs);
        for i in 0..nlibs {
            let e = NEW_HEADER + i * NEW_ENTRY;
            let field = |o| u32_at(new, e + o).ok_or_else(|| bad("truncated"));
            let flags = field(0)? as i32;
            let name = string(field(4)?)?.to_vec();
            let path = PathBuf::from(OsStr::from_bytes(string(field(8)?)?));
            let hwcap = u64::from(field(16)?) | u64::from(field(20)?) << 32;
            entries.push(CacheEntry {
                name,
                path,
                flags,
                hwcap,
            });
        }
        Ok(LdSoCache { entries })
    }

    /// The paths the cache gives for `name`, in its order, those for no
    /// hwcaps subdirectory first (the caller checks each is for its
    /// machine).
    pub(crate) fn lookup(&self, name: &[u8]) -> Vec<PathBuf> {
        let matching = || self.entries.iter().filter(|e| e.name == name);
        let plain = matching().filter(|e| e.hwcap == 0);
        let hwcaps = matching().filter(|e| e.hwcap != 0);
        plain.chain(hwcaps).map(|e| e.path.clone()).collect()
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache in the new format with the given (flags, name, path).
    fn cache(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut strings = vec![];
        let table = NEW_HEADER + entries.len() * NEW_ENTRY;
        let mut rows = vec![];
        for (flags, name, path) in entries {
            let key = table + strings.len();
            strings.extend(name.as_bytes());
            strings.push(0);
            let value = table + strings.len();
            strings.extend(path.as_bytes());
            strings.push(0);
            rows.extend(flags.to_le_bytes());
            rows.extend((key as u32).to_le_bytes());
            rows.extend((value as u32).to_le_bytes());
            rows.extend([0u8; 12]);
        }
        let mut out = NEW_MAGIC.to_vec();
        out.extend((entries.len() as u32).to_le_bytes());
        out.extend((strings.len() as u32).to_le_bytes());
        out.extend([2, 0, 0, 0]);
        out.extend([0u8; 16]);
        assert_eq!(out.len(), NEW_HEADER);
        out.extend(rows);
        out.extend(strings);
        out
    }

    #[test]
    fn parses_the_new_format() {
        let data = cache(&[
            (0x303, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
            (0x303, "libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6"),
        ]);
        let c = LdSoCache::parse(&data).unwrap();
        assert_eq!(c.entries.len(), 2);
        assert_eq!(
            c.lookup(b"libm.so.6"),
            [PathBuf::from("/lib/x86_64-linux-gnu/libm.so.6")]
        );
        assert!(c.lookup(b"libz.so.1").is_empty());
    }

    #[test]
    fn malformed_caches_are_errors() {
        let data = cache(&[(0x303, "libc.so.6", "/lib/libc.so.6")]);
        for len in 0..data.len() {
            // Every truncation: an error or (cut inside the last string's
            // end) an error, never a panic.
            let _ = LdSoCache::parse(&data[..len]);
        }
        assert!(LdSoCache::parse(&data[..data.len() - 1]).is_err());
        let mut huge = data.clone();
        huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(LdSoCache::parse(&huge).is_err());
        let mut outside = data.clone();
        outside[NEW_HEADER + 4..NEW_HEADER + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(LdSoCache::parse(&outside).is_err());
        assert!(LdSoCache::parse(b"ld.so-1.7.0\x01\0\0\0").is_err());
    }

    #[test]
    fn origin_and_lists() {
        let dirs = path_list(
            b"$ORIGIN/../lib:/opt/x:${ORIGIN}:$LIB/y:",
            Path::new("/usr/bin/ls"),
        );
        assert_eq!(
            dirs,
            [
                PathBuf::from("/usr/bin/../lib"),
                "/opt/x".into(),
                "/usr/bin".into(),
                ".".into()
            ]
        );
    }

    /// `ldconfig -p` and this reader agree on every library of the system
    /// cache (the machine's own entries).
    #[test]
    fn agrees_with_ldconfig() {
        let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() else {
            return;
        };
        let Ok(c) = LdSoCache::read(Path::new(LD_SO_CACHE)) else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        // `\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6`
        let listed: Vec<(String, String)> = text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let (name, rest) = l.trim().split_once(" (")?;
                let (_, path) = rest.split_once(") => ")?;
                Some((name.to_string(), path.to_string()))
            })
            .collect();
        assert_eq!(listed.len(), c.entries.len(), "{text}");
        for ((name, path), e) in listed.iter().zip(&c.entries) {
            assert_eq!(name.as_bytes(), e.name);
            assert_eq!(Path::new(path), e.path);
        }
        for lib in ["libc.so.6", "libm.so.6", "libgcc_s.so.1"] {
            let from_ldconfig = listed.iter().find(|(n, _)| n == lib).map(|(_, p)| p);
            let ours = c.lookup(lib.as_bytes());
            assert_eq!(
                from_ldconfig.map(PathBuf::from),
                ours.first().cloned(),
                "{lib}"
            );
        }
    }
}
