//! The probes of a running process: every ELF object it maps (the executable
//! and its shared libraries), with the address each was loaded at.
//!
//! A file the process maps may have been deleted or replaced since (its
//! maps line ends in ` (deleted)`, the usual state right after an upgrade):
//! it is then read, and attached, through `/proc/PID/map_files/START-END`,
//! which leads to the very inode mapped (the kernel places a uprobe on the
//! inode, whatever path reached it).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::elf::note::{read_file_probes, ElfProbes};
use crate::elf::sites::Segment;
use crate::Error;

/// One line of `/proc/PID/maps` backed by a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp` flags as the kernel prints them.
    pub perms: String,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The inode of the file.
    pub inode: u64,
    /// The file's path, as the process sees it (without the kernel's
    /// ` (deleted)` suffix).
    pub path: String,
    /// The file was deleted or replaced since it was mapped: its path no
    /// longer leads to it.
    pub deleted: bool,
}

impl Mapping {
    /// The path as `/proc/PID/maps` shows it, ` (deleted)` included.
    pub fn shown(&self) -> String {
        match self.deleted {
            true => format!("{} (deleted)", self.path),
            false => self.path.clone(),
        }
    }
}

/// An ELF object mapped by a process.
#[derive(Debug)]
pub struct MappedObject {
    /// The path in `/proc/PID/maps` (ending in ` (deleted)` for a file
    /// deleted or replaced since).
    pub path: PathBuf,
    /// The same file reached through `/proc/PID/root`, valid from this
    /// process's mount namespace too, or through `/proc/PID/map_files` when
    /// its path no longer leads to it ([`object_path`]): read and attach
    /// through it.
    pub open_path: PathBuf,
    /// The load bias: a link-time address plus `bias` is the address in the
    /// process (0 for a non-PIE executable).
    pub bias: u64,
    /// The object's probes, or why they could not be read.
    pub probes: Result<ElfProbes, Error>,
}

/// Reads `/proc/PID/maps`, keeping the file-backed lines.
pub fn read_maps(pid: u32) -> Result<Vec<Mapping>, Error> {
    let path = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&path).map_err(|e| proc_error(pid, path, e))?;
    Ok(text.lines().filter_map(parse_maps_line).collect())
}

/// Whether the process exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

fn proc_error(pid: u32, path: String, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound => Error::NoProcess(pid),
        io::ErrorKind::PermissionDenied => Error::ProcessNotPermitted { pid },
        _ => Error::Io {
            path: path.into(),
            source: e,
        },
    }
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let path = fields.next()?.trim_start();
    if inode == 0 || !path.starts_with('/') {
        return None;
    }
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: perms.into(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode,
        path: path.into(),
        deleted,
    })
}

/// The path to read and attach the file of mapping `m` of process `pid`
/// through: `/proc/PID/root/PATH` while that is still the inode mapped,
/// else (the file was deleted, or replaced by a new file at the same
/// path) `/proc/PID/map_files/START-END`, the mapped inode itself.
pub fn object_path(pid: u32, m: &Mapping) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let live = PathBuf::from(format!("/proc/{pid}/root{}", m.path));
    if !m.deleted && std::fs::metadata(&live).is_ok_and(|f| f.ino() == m.inode) {
        return live;
    }
    PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
}

/// Reads every ELF object the process maps, with its probes and load bias.
/// Files that are not ELF (fonts, locale archives) or not regular files
/// (devices such as `/dev/zero`) are left out, unread.
pub fn read_process(pid: u32) -> Result<Vec<MappedObject>, Error> {
    let maps = read_maps(pid)?;
    // One object per inode: a file replaced by a new one at its path is
    // two objects.
    let mut by_file: BTreeMap<(u64, &str), Vec<&Mapping>> = BTreeMap::new();
    for m in &maps {
        by_file.entry((m.inode, &m.path)).or_default().push(m);
    }
    let mut objects = vec![];
    for mappings in by_file.into_values() {
        let path = mappings[0].shown();
        let open_path = object_path(pid, mappings[0]);
        // Only regular ELF files, and only the parts needed: a process may
        // map /dev/zero or a huge data file.
        let probes = match read_file_probes(&open_path) {
            Err(Error::Io { source, .. }) if !process_alive(pid) => {
                return Err(proc_error(pid, path, source))
            }
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::InvalidInput => {
                continue; // not a regular file
            }
            other => other,
        };
        if probes.as_ref().is_err_and(Error::is_not_elf) {
            continue;
        }
        let bias = probes
            .as_ref()
            .ok()
            .and_then(|p| load_bias(p, &mappings))
            .unwrap_or(0);
        objects.push(MappedObject {
            path: path.into(),
            open_path,
            bias,
            probes,
        });
    }
    objects.sort_by_key(|o| o.bias);
    Ok(objects)
}

/// The difference between where the object is mapped and its link-time
/// addresses, from the first mapping that a `PT_LOAD` segment covers.
pub fn load_bias(probes: &ElfProbes, mappings: &[&Mapping]) -> Option<u64> {
    segments_bias(&probes.segments, mappings)
}

/// [`load_bias`] from the file's `PT_LOAD` segments.
pub(crate) fn segments_bias(segments: &[Segment], mappings: &[&Mapping]) -> Option<u64> {
    let page = usdt_runtime::page_size();
    mappings.iter().find_map(|m| {
        let seg = segments.iter().find(|s| {
            let first = s.offset & !(page - 1);
            first <= m.offset && m.offset < s.offset.saturating_add(s.filesz.max(1))
        })?;
        // start - offset is where file offset 0 would be; a segment's
        // addresses sit (vaddr - offset) above file offsets.
        Some(
            m.start
                .wrapping_sub(m.offset)
                .wrapping_sub(seg.vaddr.wrapping_sub(seg.offset)),
        )
    })
}

/// The shared libraries the program process `pid` runs will load, as a
/// command's are found ([`shared_libraries`](crate::shared_libraries)):
/// each as a path through `/proc/PID/root` (an `$ORIGIN` one is already)
/// and as shown.
pub(crate) fn exec_libraries(pid: u32) -> Vec<(PathBuf, String)> {
    let Ok(exe) = process_exe(pid) else {
        return vec![];
    };
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    crate::ldso::shared_libraries(&exe)
        .into_iter()
        .map(|lib| {
            let shown = lib.to_string_lossy().into_owned();
            match lib.starts_with("/proc") {
                true => (lib, shown),
                false => (root.join(lib.strip_prefix("/").unwrap_or(&lib)), shown),
            }
        })
        .collect()
}

/// The thread ids of a process (`/proc/PID/task`), in ascending order.
pub fn process_threads(pid: u32) -> Result<Vec<u32>, Error> {
    let path = format!("/proc/{pid}/task");
    let dir = std::fs::read_dir(&path).map_err(|e| proc_error(pid, path, e))?;
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The process a thread belongs to (`Tgid` in `/proc/TID/status`).
pub(crate) fn thread_group(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Tgid:"))?;
    line.trim().parse().ok()
}

/// Reads a 2-byte semaphore at `addr` in the process's memory.
pub fn read_semaphore(pid: u32, addr: u64) -> Result<u16, Error> {
    use std::os::unix::fs::FileExt;
    let path = format!("/proc/{pid}/mem");
    let file = std::fs::File::open(&path).map_err(|e| proc_error(pid, path.clone(), e))?;
    let mut buf = [0u8; 2];
    file.read_exact_at(&mut buf, addr)
        .map_err(|e| proc_error(pid, path, e))?;
    Ok(u16::from_ne_bytes(buf))
}

/// The path a process runs (`/proc/PID/exe`), through `/proc/PID/root`.
pub fn process_exe(pid: u32) -> Result<PathBuf, Error> {
    let link = format!("/proc/{pid}/exe");
    let target = std::fs::read_link(&link).map_err(|e| proc_error(pid, link, e))?;
    Ok(Path::new(&format!("/proc/{pid}/root")).join(target.strip_prefix("/").unwrap_or(&target)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::note::Segment;

    #[test]
    fn maps_lines() {
        let m = parse_maps_line(
            "7f1c2a400000-7f1c2a428000 r--p 00001000 fe:01 1311   /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x7f1c2a400000, 0x7f1c2a428000, 0x1000, 1311)
        );
        assert_eq!(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0   [stack]").is_none());
        let gone = parse_maps_line("1000-2000 r-xp 00000000 fe:01 9 /tmp/x (deleted)").unwrap();
        assert_eq!((gone.path.as_str(), gone.deleted), ("/tmp/x", true));
        assert_eq!(gone.shown(), "/tmp/x (deleted)");
        assert_eq!(
            object_path(1, &gone),
            Path::new("/proc/1/map_files/1000-2000")
        );
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn bias_of_a_pie() {
        let probes = ElfProbes {
            machine: crate::Machine::X86_64,
            elf_type: 3,
            segments: vec![
                Segment {
                    vaddr: 0,
                    offset: 0,
                    filesz: 0x600,
                    memsz: 0x600,
                    flags: 4,
                },
                Segment {
                    vaddr: 0x1000,
                    offset: 0x1000,
                    filesz: 0x200,
                    memsz: 0x200,
                    flags: 5,
                },
                Segment {
                    vaddr: 0x3df0,
                    offset: 0x2df0,
                    filesz: 0x220,
                    memsz: 0x228,
                    flags: 6,
                },
            ],
            sites: vec![],
            skipped: vec![],
        };
        let text = parse_maps_line("55d0001000-55d0002000 r-xp 00001000 fe:01 9 /x").unwrap();
        assert_eq!(load_bias(&probes, &[&text]), Some(0x55d0000000));
        let data = parse_maps_line("55d0003000-55d0004000 rw-p 00002000 fe:01 9 /x").unwrap();
        assert_eq!(load_bias(&probes, &[&data]), Some(0x55d0000000));
    }
}
