//! One traced process as the unwinder sees it: the ELF files it maps (from
//! `/proc/PID/maps`), each with its address range and load bias, handed to
//! an unwinder of its own (of the machine's: [`Unwinder`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use framehop::{FrameAddress, Module};

use super::object::ObjectFile;
use super::unwinder::{Start, Unwinder};
use crate::arch::Machine;
use crate::process::{object_path, read_maps, segments_bias, Mapping};

/// A file as the stacks module keeps it: its path as mapped, and its
/// tables (`None`: not an ELF file it can read).
#[derive(Debug)]
pub(crate) struct Known {
    pub(crate) name: Arc<str>,
    pub(crate) object: Option<ObjectFile>,
}

/// Every file read so far, by inode and path (a file replaced at its path
/// is another file).
pub(crate) type Files = HashMap<(u64, String), Known>;

/// One file mapped by a process: where, and how far from its link-time
/// addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Loaded {
    pub(crate) range: Range<u64>,
    pub(crate) bias: u64,
    /// The key of its [`Known`] file.
    pub(crate) file: (u64, String),
}

/// A process's mapped files and its unwinder.
pub(crate) struct Process {
    pid: u32,
    unwinder: Unwinder,
    /// By start address.
    loaded: BTreeMap<u64, Loaded>,
    /// `/proc/PID/maps` as last read, to skip an unchanged one.
    maps: Vec<Mapping>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("machine", &self.unwinder.machine())
            .field("loaded", &self.loaded)
            .finish()
    }
}

/// One frame the unwinder found: its address, and whether it is a return
/// address (looked up one byte before it, inside the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) addr: u64,
    pub(crate) lookup: u64,
}

impl Process {
    /// Process `pid`, whose stacks `unwinder` unwinds.
    pub(crate) fn new(pid: u32, unwinder: Unwinder) -> Process {
        Process {
            pid,
            unwinder,
            loaded: BTreeMap::new(),
            maps: vec![],
        }
    }

    /// The machine whose stacks its unwinder unwinds.
    pub(crate) fn machine(&self) -> Machine {
        self.unwinder.machine()
    }

    /// Reads `/proc/PID/maps` again and follows what changed: files mapped
    /// since (read into `files` the first time any process maps them) and
    /// files unmapped. False when the process is gone.
    pub(crate) fn refresh(&mut self, files: &mut Files) -> bool {
        // A zombie's maps are empty: it is gone, its maps as last read
        // are kept for the hits still to be read.
        let maps = match read_maps(self.pid) {
            Ok(maps) if !maps.is_empty() => maps,
            _ => return false,
        };
        if maps == self.maps {
            return true;
        }
        // One object per file and contiguous run of its mappings.
        let mut objects: BTreeMap<u64, Vec<&Mapping>> = BTreeMap::new();
        let mut last: Option<(u64, &str, u64)> = None;
        for m in &maps {
            let first = match last {
                Some((inode, path, first)) if inode == m.inode && path == m.path => first,
                _ => m.start,
            };
            objects.entry(first).or_default().push(m);
            last = Some((m.inode, &m.path, first));
        }
        let mut now = BTreeMap::new();
        for (start, mappings) in objects {
            let m = mappings[0];
            let key = (m.inode, m.path.clone());
            let known = files.entry(key.clone()).or_insert_with(|| Known {
                name: Arc::from(m.shown().as_str()),
                object: ObjectFile::read(&object_path(self.pid, m), self.machine()),
            });
            let Some(object) = &known.object else {
                continue;
            };
            let Some(bias) = segments_bias(&object.segments, &mappings) else {
                continue;
            };
            let end = mappings.iter().map(|m| m.end).max().unwrap_or(m.end);
            let loaded = Loaded {
                range: start..end,
                bias,
                file: key,
            };
            if self.loaded.get(&start) != Some(&loaded) {
                self.unwinder.remove_module(start);
                self.unwinder.add_module(Module::new(
                    known.name.to_string(),
                    start..end,
                    bias,
                    object.unwind.clone(),
                ));
            }
            now.insert(start, loaded);
        }
        for start in self.loaded.keys().filter(|s| !now.contains_key(s)) {
            self.unwinder.remove_module(*start);
        }
        self.loaded = now;
        self.maps = maps;
        true
    }

    /// The file mapped at `addr`.
    pub(crate) fn loaded_at(&self, addr: u64) -> Option<&Loaded> {
        let (_, l) = self.loaded.range(..=addr).next_back()?;
        l.range.contains(&addr).then_some(l)
    }

    /// Unwinds from the registers at a hit and the copy of the stack from
    /// `start.sp` up: the frames, innermost first, and whether the
    /// unwinder reached the outermost one.
    pub(crate) fn unwind(&mut self, start: Start, stack: &[u8]) -> (Vec<Found>, bool) {
        let mut read = |addr: u64| -> Result<u64, ()> {
            let at = usize::try_from(addr.checked_sub(start.sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let Process {
            unwinder, loaded, ..
        } = self;
        let known = |addr: u64| {
            let found = loaded.range(..=addr).next_back();
            found.is_some_and(|(_, l)| l.range.contains(&addr))
        };
        let mut found = vec![];
        let complete = unwinder.unwind(start, &mut read, |f| {
            let frame = Found {
                addr: f.address(),
                lookup: match f {
                    FrameAddress::InstructionPointer(a) => a,
                    FrameAddress::ReturnAddress(_) => f.address_for_lookup(),
                },
            };
            found.push(frame);
            // Past a file not known (mapped since the last look, by a
            // process gone since), framehop would guess by the frame
            // pointer: stop at the frame. A loop in a corrupt stack ends
            // at the most frames.
            known(frame.lookup) && found.len() < super::MAX_FRAMES
        });
        (found, complete)
    }

    /// Whether every frame is in a mapped file.
    pub(crate) fn all_known(&self, found: &[Found]) -> bool {
        found.iter().all(|f| self.loaded_at(f.lookup).is_some())
    }
}
