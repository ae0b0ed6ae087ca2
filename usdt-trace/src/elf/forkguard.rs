//! The fork guard's marker: a note in `.note.usdt` (owner `usdt`, type
//! [`NT_USDT_FORK_GUARD`]) that every program linked with usdt-runtime's fork
//! guard carries (see `usdt_runtime::forkguard`). C `sys/sdt.h` programs and
//! builds from before the guard have none.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use object::read::elf::{FileHeader, SectionHeader};
use object::ReadRef;

use crate::elf::note::{parse_header, Bounded};
use crate::Error;

pub use usdt_runtime::forkguard::NT_USDT_FORK_GUARD;

/// The section that holds the marker.
pub const FORK_GUARD_SECTION: &str = ".note.usdt";

/// Whether the ELF file in `data` carries the fork guard's marker.
pub fn read_fork_guard<'d, R: ReadRef<'d>>(data: R) -> Result<bool, Error> {
    let header = parse_header(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    for section in sections.iter() {
        if sections.section_name(endian, section) != Ok(FORK_GUARD_SECTION.as_bytes()) {
            continue;
        }
        let Some(mut notes) = section.notes(endian, data)? else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            let owner = usdt_runtime::forkguard::NOTE_NAME.as_bytes();
            if note.name() == owner
                && note.n_type(endian) == NT_USDT_FORK_GUARD
                && note.desc().len() >= 4
            {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether the ELF file at `path` carries the fork guard's marker (read
/// within the same bounds as [`read_file_probes`](crate::read_file_probes)).
pub fn read_file_fork_guard(path: impl AsRef<Path>) -> Result<bool, Error> {
    read_fork_guard(&Bounded::open(path.as_ref())?)
}

/// [`read_file_fork_guard`], remembered per path for as long as the file
/// keeps its device, inode, size and modification time; `false` when it
/// cannot be read.
pub(crate) fn fork_guarded(path: &Path) -> bool {
    type Key = (u64, u64, u64, i64, i64);
    static SEEN: Mutex<Option<HashMap<PathBuf, (Key, bool)>>> = Mutex::new(None);
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let key = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
    );
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    if let Some((k, guarded)) = seen.get(path) {
        if *k == key {
            return *guarded;
        }
    }
    let guarded = read_file_fork_guard(path).unwrap_or(false);
    seen.insert(path.into(), (key, guarded));
    guarded
}
