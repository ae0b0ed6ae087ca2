//! Stacks without frame pointers: the user stack of each hit, unwound in
//! this process from a copy of the registers and of the stack taken at the
//! hit, with the DWARF call frame information (`.eh_frame`, which Rust and
//! C programs carry even when built without frame pointers and stripped) of
//! each file the process maps, then symbolized.
//!
//! - Unwinding: [framehop](https://docs.rs/framehop), given each mapped
//!   file's `.eh_frame`/`.eh_frame_hdr`/`.debug_frame`, its address range
//!   and load bias (`/proc/PID/maps`), the registers at the hit that the
//!   machine's table names for it (instruction, stack and frame pointers,
//!   and aarch64's link register), and the stack copy. Where a file has no
//!   unwind information framehop falls back on the frame pointer.
//! - Symbols: [addr2line](https://docs.rs/addr2line) on the file's DWARF
//!   (or its separate debug file, `/usr/lib/debug/.build-id/..`), which
//!   also gives the calls inlined at an address and `file:line`; else the
//!   ELF symbol table. Names are demangled (Rust without the hash, C++).
//!   What an address is, is looked up once per file.
//! - A process's maps are read at its first hit, again when a frame falls
//!   outside every file known, and at every poll for a process attached by
//!   pid: a library mapped and unmapped between two looks, in a process
//!   that exited before the next, leaves its frames as bare addresses.
//!
//! Unwound on x86-64 and aarch64, framehop's two unwinders, the one of the
//! machine this program runs on (chosen in `unwinder.rs`): elsewhere
//! (riscv64) asking for stacks is an error that says so ([`supported`]).
//! The stack copy bounds the depth: a stack deeper than it ends early
//! ([`Stack::complete`] is false).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::arch::Machine;
use crate::raw::Regs;

mod object;
mod process;
mod unwinder;

use process::{Files, Process};
use unwinder::{Start, Unwinder};

/// Whether this machine's stacks can be unwound: x86-64's and aarch64's;
/// on another an error that says so.
pub(crate) fn supported() -> Result<(), crate::Error> {
    supported_on(Machine::host())
}

/// Whether the stacks of `host` (`None`: a machine with no table) can be
/// unwound.
fn supported_on(host: Option<Machine>) -> Result<(), crate::Error> {
    if host.and_then(Unwinder::of).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = unwinder::MACHINES.iter().map(|m| m.name()).collect();
    Err(crate::Error::Unsupported(format!(
        "stacks are unwound on {} only, not on this {} machine",
        names.join(" and "),
        host.map_or(std::env::consts::ARCH, |m| m.name())
    )))
}

/// The most frames one stack keeps.
pub(crate) const MAX_FRAMES: usize = 512;

/// The most processes whose maps are kept; past it, those gone are
/// forgotten.
const MAX_PROCESSES: usize = 4096;

/// One frame of a [`Stack`]: a code address in the process and, where the
/// file's symbols tell, the function (demangled) and its source line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The address in the process: the instruction pointer at the hit
    /// (the probe's site) for the innermost frame, a return address for the
    /// others.
    pub addr: u64,
    /// The function, demangled (Rust paths without their hash, C++ names),
    /// from DWARF, else from the symbol table.
    pub function: Option<Arc<str>>,
    /// The source file, from DWARF.
    pub file: Option<Arc<str>>,
    /// The source line, from DWARF.
    pub line: Option<u32>,
    /// The file mapped at the address, as `/proc/PID/maps` names it.
    pub object: Option<Arc<str>>,
    /// A call the compiler inlined into the next frame (the same address).
    pub inlined: bool,
}

impl Frame {
    /// The function's name, or for a frame without one the file's name in
    /// brackets (`[libc.so.6]`), or `[unknown]`: what a flame graph shows.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match (&self.function, &self.object) {
            (Some(f), _) => f.as_ref().into(),
            (None, Some(o)) => format!("[{}]", o.rsplit('/').next().unwrap_or(o)).into(),
            (None, None) => "[unknown]".into(),
        }
    }
}

/// `function (file:line)`, `function` without a line, and for a frame
/// without a function `0xADDR (in FILE)`; ` [inlined]` after an inlined
/// call.
impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.function, &self.object) {
            (Some(name), _) => f.write_str(name)?,
            (None, Some(object)) => write!(f, "{:#x} (in {object})", self.addr)?,
            (None, None) => write!(f, "{:#x}", self.addr)?,
        }
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, " ({file}:{line})")?,
            (Some(file), None) => write!(f, " ({file})")?,
            _ => {}
        }
        if self.inlined {
            f.write_str(" [inlined]")?;
        }
        Ok(())
    }
}

/// A hit's user stack: the probe's function first, then its callers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stack {
    /// Innermost first; an inlined call comes before the function it was
    /// inlined into.
    pub frames: Vec<Frame>,
    /// Whether the unwinding reached the outermost frame (`_start`, or the
    /// start of a thread); false when the stack copy ended first or a
    /// frame could not be unwound.
    pub complete: bool,
}

/// The unwinder and symbolizer of a sampler: the files read and the
/// processes seen.
#[derive(Debug, Default)]
pub(crate) struct Stacks {
    files: Files,
    processes: HashMap<u32, Process>,
    /// Processes attached by pid: their maps are read at every round.
    watched: HashSet<u32>,
    /// Processes whose maps were read this round.
    fresh: HashSet<u32>,
}

impl Stacks {
    /// Follows the maps of process `pid` from now on (read now, and at
    /// every round).
    pub(crate) fn watch(&mut self, pid: u32) {
        self.watched.insert(pid);
        self.look(pid);
    }

    /// A new round of hits: the maps of the watched processes are read
    /// again, and any process's may be read once more.
    pub(crate) fn new_round(&mut self) {
        self.fresh.clear();
        let watched: Vec<u32> = self.watched.iter().copied().collect();
        for pid in watched {
            if !self.look(pid) {
                self.watched.remove(&pid);
            }
        }
    }

    /// Reads the maps of `pid` (once per round); false when it is gone.
    fn look(&mut self, pid: u32) -> bool {
        if self.fresh.contains(&pid) {
            return true;
        }
        if self.processes.len() >= MAX_PROCESSES && !self.processes.contains_key(&pid) {
            self.processes
                .retain(|p, _| crate::process::process_alive(*p));
        }
        let Stacks {
            files, processes, ..
        } = self;
        let process = match processes.entry(pid) {
            std::collections::hash_map::Entry::Occupied(p) => p.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let Some(unwinder) = Unwinder::host() else {
                    return false;
                };
                v.insert(Process::new(pid, unwinder))
            }
        };
        let alive = process.refresh(files);

        self.fresh.insert(pid);
        alive
    }

    /// The stack of a hit in process `pid`, from its registers and the
    /// copy of its stack; `None` without the registers.
    pub(crate) fn stack(&mut self, pid: u32, regs: &Regs, copy: &[u8]) -> Option<Stack> {
        if !self.processes.contains_key(&pid) {
            self.look(pid);
        }
        let process = self.processes.get_mut(&pid)?;
        let start = Start::of(process.machine(), regs)?;
        let (mut found, mut complete) = process.unwind(start, copy);
        if !process.all_known(&found) && !self.fresh.contains(&pid) {
            // A file mapped since the last look.
            self.look(pid);
            let process = self.processes.get_mut(&pid)?;
            (found, complete) = process.unwind(start, copy);
        }
        let process = self.processes.get(&pid)?;
        let mut frames = vec![];
        for f in &found {
            let Some(loaded) = process.loaded_at(f.lookup) else {
                frames.push(Frame::bare(f.addr, None));
                continue;
            };
            let Some(known) = self.files.get_mut(&loaded.file) else {
                frames.push(Frame::bare(f.addr, None));
                continue;
            };
            let name = known.name.clone();
            let symbols = match &mut known.object {
                Some(o) => o.symbolize(f.lookup.wrapping_sub(loaded.bias)),
                None => Arc::from([]),
            };
            if symbols.is_empty() {
                frames.push(Frame::bare(f.addr, Some(name.clone())));
            }
            let last = symbols.len().saturating_sub(1);
            frames.extend(symbols.iter().enumerate().map(|(i, s)| Frame {
                addr: f.addr,
                function: s.function.clone(),
                file: s.file.clone(),
                line: s.line,
                object: Some(name.clone()),
                inlined: i < last,
            }));
        }
        Some(Stack { frames, complete })
    }
}

impl Frame {
    /// A frame known only by its address (and file).
    fn bare(addr: u64, object: Option<Arc<str>>) -> Frame {
        Frame {
            addr,
            function: None,
            file: None,
            line: None,
            object,
            inlined: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Reg64;

    fn frame(function: Option<&str>, object: Option<&str>) -> Frame {
        Frame {
            function: function.map(Arc::from),
            object: object.map(Arc::from),
            ..Frame::bare(0x1234, None)
        }
    }

    /// This thread's registers and 64 KiB of its stack, taken here, as a
    /// sample would carry them.
    #[inline(never)]
    fn sample_here() -> (Regs, Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; touches no memory.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
            );
        }
        let mut copy = vec![0u8; 64 << 10];
        let n = crate::sys::process::read_process_memory(std::process::id(), sp, &mut copy);
        copy.truncate(n);
        let mut regs = Regs::default();
        for (reg, v) in [(Reg64::Rip, ip), (Reg64::Rsp, sp), (Reg64::Rbp, bp)] {
            regs.push(reg, v);
        }
        (regs, copy)
    }

    #[inline(never)]
    fn level_two() -> (Regs, Vec<u8>) {
        std::hint::black_box(sample_here())
    }

    #[inline(never)]
    fn level_one() -> (Regs, Vec<u8>) {
        std::hint::black_box(level_two())
    }

    #[test]
    fn a_stack_copy_unwinds_to_its_callers_by_name() {
        let (regs, copy) = level_one();
        let mut stacks = Stacks::default();
        let stack = stacks.stack(std::process::id(), &regs, &copy).unwrap();
        let names: Vec<String> = stack.frames.iter().map(|f| f.name().into_owned()).collect();
        let at = |suffix: &str| {
            names
                .iter()
                .position(|n| n.ends_with(suffix))
                .unwrap_or_else(|| panic!("no {suffix} in {names:#?}"))
        };
        let here = at("stack::tests::sample_here");
        assert_eq!(here, 0, "{names:#?}");
        assert!(here < at("stack::tests::level_two"));
        assert!(at("stack::tests::level_two") < at("stack::tests::level_one"));
        assert!(
            at("stack::tests::level_one")
                < at("stack::tests::a_stack_copy_unwinds_to_its_callers_by_name")
        );
        let first = &stack.frames[0];
        assert!(first.file.as_deref().unwrap().ends_with("stack/mod.rs"));
        assert!(first.object.is_some());
        // Without the registers, no stack.
        assert_eq!(
            stacks.stack(std::process::id(), &Regs::default(), &copy),
            None
        );
    }

    /// x86-64's and aarch64's stacks are unwound; riscv64's are refused
    /// in one sentence.
    #[test]
    fn stacks_are_refused_where_framehop_has_no_unwinder() {
        assert!(supported_on(Some(Machine::X86_64)).is_ok());
        assert!(supported_on(Some(Machine::Aarch64)).is_ok());
        let refused = |host| supported_on(host).unwrap_err().to_string();
        assert_eq!(
            refused(Some(Machine::Riscv64)),
            "stacks are unwound on x86-64 and aarch64 only, not on this riscv64 machine"
        );
        assert!(refused(None).starts_with("stacks are unwound on x86-64 and aarch64 only, "));
        assert_eq!(supported().is_ok(), Machine::host() != Some(Machine::Riscv64));
    }

    #[test]
    fn frames_print_what_is_known() {
        let mut f = frame(Some("a::b"), Some("/bin/x"));
        assert_eq!(f.to_string(), "a::b");
        f.file = Some("src/a.rs".into());
        f.line = Some(7);
        f.inlined = true;
        assert_eq!(f.to_string(), "a::b (src/a.rs:7) [inlined]");
        assert_eq!(f.name(), "a::b");
        let lib = frame(None, Some("/usr/lib/libc.so.6"));
        assert_eq!(lib.to_string(), "0x1234 (in /usr/lib/libc.so.6)");
        assert_eq!(lib.name(), "[libc.so.6]");
        assert_eq!(frame(None, None).name(), "[unknown]");
    }
}
