//! Fetch events: uprobe events defined through tracefs (`uprobe_events`)
//! with fetch arguments, so that the kernel fetches memory operands and
//! strings at the moment of the hit ([`Sampler::kernel_fetch`]): values in
//! the red zone or in memory freed right after the probe are exact. A
//! sample carries them in its `PERF_SAMPLE_RAW` record.
//!
//! [`Sampler::kernel_fetch`]: crate::Sampler::kernel_fetch
//!
//! ```text
//! p:usdt_PID/eN PATH:0xOFFSET(0xREFCTR) a0=%di:u64 a1=-8(%sp):s64 s2=+0(%si):string
//! ```
//!
//! A symbol's operand (`sym(%rip)`) is fetched as `@+FILE_OFFSET`, which the
//! kernel turns into an address with the uprobe's own mapping; an indexed
//! operand (`(%rdx,%rax,8)`) cannot be written, and such a site is sampled
//! instead.
//!
//! The event is removed again when its [`FetchEvent`] is dropped (after the
//! perf events using it are closed); events left behind by a `usdt` that was
//! killed are removed by the next one.
//!
//! Each process's events form one group, `usdt_PID_RANDOM`, owned by a lock
//! file `/run/usdt/events/GROUP.lock` that the process holds locked
//! (`flock`) while it has events; it unlinks the file, still holding the
//! lock, when its last event is removed. A group is stale only when its lock
//! file exists and nobody holds it: never judged by whether a pid is
//! visible, which inside a PID namespace says nothing about another
//! tracer's events.
//!
//! A path tracefs cannot take as written (whitespace, non-UTF-8) is given
//! as `/proc/self/fd/N` of the file opened for the moment: the kernel
//! resolves it to the file itself.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where the lock files of event groups are.
pub(crate) const LOCK_DIR: &str = "/run/usdt/events";

use crate::arch::Arch;
use crate::elf::arg::{Arg, Operand};

/// Where an argument's fetched value is in the raw record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// Offset in the raw data.
    pub(crate) offset: usize,
    /// Size in bytes (4 for a string's `__data_loc`).
    pub(crate) size: usize,
}

/// A fetch event (a uprobe event with fetch arguments), removed on drop.
#[derive(Debug)]
pub(crate) struct FetchEvent {
    /// Declared first, dropped last: the group stays locked until the
    /// event is removed (by `Drop`).
    _owned: Owned,
    root: PathBuf,
    group: String,
    name: String,
    /// The tracepoint id for `perf_event_open`.
    pub(crate) id: u64,
    /// Per argument: its value (`None` for an immediate).
    pub(crate) values: Vec<Option<Field>>,
    /// Per argument: its string's `__data_loc`, when read as a string.
    pub(crate) strings: Vec<Option<Field>>,
    /// Per argument: the bytes it points at, when read as a byte slice.
    pub(crate) bytes: Vec<Option<Field>>,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The tracefs directory with `uprobe_events`, if any.
fn root() -> Option<PathBuf> {
    crate::caps::tracefs_root()
}

/// The fetch argument for an operand's value, without a type: `Some(None)`
/// for a constant or unreadable one, `None` when tracefs cannot express it.
/// `attach` is the uprobe's link-time address and file offset; `arch`
/// names the registers.
fn fetch(arch: &Arch, operand: &Operand, attach: (u64, u64)) -> Option<Option<String>> {
    Some(Some(match operand {
        Operand::Register(r) => format!("%{}", arch.tracefs(r.reg)?),
        Operand::Memory { base, disp } => format!("{disp:+}(%{})", arch.tracefs(base.reg)?),
        Operand::Symbol { addr: Some(a), .. } => {
            // The kernel adds the uprobe's address minus its file offset.
            let offset = match a.checked_sub(attach.0) {
                Some(after) => attach.1.checked_add(after)?,
                None => attach.1.checked_sub(attach.0 - a)?,
            };
            format!("@+{offset:#x}")
        }
        Operand::Symbol { addr: None, .. }
        | Operand::Indexed { .. }
        | Operand::SymbolIndexed { .. } => return None,
        Operand::Immediate(_) | Operand::Unreadable { .. } => return Some(None),
    }))
}

/// The fetch arguments: `aI=` for each value (registers whole, memory at
/// its size, 16 and 24 bytes as `u8` arrays), `sI=+0(...):string` for each
/// string, `bI=+0(...):x8[64]` for each byte slice (the kernel reads each
/// byte on its own: those it cannot read are 0).
fn definition(
    arch: &Arch,
    args: &[Arg],
    strings: &[bool],
    bytes: &[bool],
    attach: (u64, u64),
) -> Option<Vec<String>> {
    let mut out = vec![];
    for (i, arg) in args.iter().enumerate() {
        let is_bytes = bytes.get(i).copied().unwrap_or(false);
        let Some(f) = fetch(arch, &arg.operand, attach)? else {
            if strings.get(i).copied().unwrap_or(false) || is_bytes {
                return None; // a string at a constant address: not worth it
            }
            continue;
        };
        let ty = match (&arg.operand, arg.size) {
            (Operand::Register(_), _) => "u64".into(),
            (_, size @ 16..) => format!("u8[{size}]"),
            (_, size) => format!("u{}", u32::from(size) * 8),
        };
        out.push(format!("a{i}={f}:{ty}"));
        if strings.get(i).copied().unwrap_or(false) {
            out.push(format!("s{i}=+0({f}):string"));
        }
        if is_bytes {
            out.push(format!(
                "b{i}=+0({f}):x8[{}]",
                crate::sample::value::BYTES_FETCH
            ));
        }
    }
    Some(out)
}

impl FetchEvent {
    /// Defines a uprobe event at `offset` of `path` (link-time address
    /// `addr`) reading `args` (registers named by `arch`, and the strings
    /// marked in `strings`), with
    /// the semaphore at `ref_ctr`. `None` when tracefs is missing or refuses
    /// (the caller samples registers instead).
    pub(crate) fn create(
        arch: &Arch,
        path: &Path,
        (addr, offset): (u64, u64),
        ref_ctr: Option<u64>,
        args: &[Arg],
        strings: &[bool],
        bytes: &[bool],
    ) -> Option<FetchEvent> {
        let root = root()?;
        remove_stale(&root);
        let fetches = definition(arch, args, strings, bytes, (addr, offset))?;
        let group = group().to_string();
        // Locked from before the event exists until after it is removed.
        let owned = Owned::take();
        let name = format!("e{}", NEXT.fetch_add(1, Ordering::Relaxed));
        // Held open until the definition is written.
        let (path, _file) = tracefs_path(path)?;
        let place = match ref_ctr {
            Some(r) => format!("{path}:{offset:#x}({r:#x})"),
            None => format!("{path}:{offset:#x}"),
        };
        let line = format!("p:{group}/{name} {place} {}\n", fetches.join(" "));
        append(&root, &line).ok()?;
        let mut event = FetchEvent {
            _owned: owned,
            root,
            group,
            name,
            id: 0,
            values: vec![None; args.len()],
            strings: vec![None; args.len()],
            bytes: vec![None; args.len()],
        };
        event.read_format()?;
        Some(event)
    }

    fn dir(&self) -> PathBuf {
        self.root.join("events").join(&self.group).join(&self.name)
    }

    /// Reads the id and the fields' offsets.
    fn read_format(&mut self) -> Option<()> {
        let id = std::fs::read_to_string(self.dir().join("id")).ok()?;
        self.id = id.trim().parse().ok()?;
        let format = std::fs::read_to_string(self.dir().join("format")).ok()?;
        for line in format.lines() {
            let Some((name, field)) = parse_field(line) else {
                continue;
            };
            let (kind, index) = name.split_at(1);
            let Ok(i) = index.parse::<usize>() else {
                continue;
            };
            match kind {
                "a" => *self.values.get_mut(i)? = Some(field),
                "s" => *self.strings.get_mut(i)? = Some(field),
                "b" => *self.bytes.get_mut(i)? = Some(field),
                _ => {}
            }
        }
        Some(())
    }
}

/// `\tfield:u64 a0;\toffset:16;\tsize:8;\tsigned:0;` -> (`a0`, field).
fn parse_field(line: &str) -> Option<(&str, Field)> {
    let mut parts = line.trim().split(';').map(str::trim);
    let decl = parts.next()?.strip_prefix("field:")?;
    // An array field: `field:u8 a0[16];`, `field:u8 b3[64];`.
    let name = decl.rsplit(' ').next()?.split('[').next()?;
    let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
    let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
    Some((name, Field { offset, size }))
}

/// The path as tracefs takes it (no whitespace, UTF-8), with the file
/// opened for `/proc/self/fd/N` when the path itself will not do.
fn tracefs_path(path: &Path) -> Option<(String, Option<std::fs::File>)> {
    match path.to_str() {
        Some(p) if !p.contains(|c: char| c.is_whitespace() || c.is_control()) => {
            Some((p.to_string(), None))
        }
        _ => {
            let file = std::fs::File::open(path).ok()?;
            Some((format!("/proc/self/fd/{}", file.as_raw_fd()), Some(file)))
        }
    }
}

/// This process's event group, `usdt_PID_RANDOM` (its lock file is held
/// while an [`Owned`] lives).
fn group() -> &'static str {
    static GROUP: OnceLock<String> = OnceLock::new();
    GROUP.get_or_init(|| format!("usdt_{}_{:016x}", std::process::id(), random()))
}

/// The group's lock: its descriptor and how many events hold it.
static OWNER: Mutex<(Option<OwnedFd>, usize)> = Mutex::new((None, 0));

/// A hold on this process's group lock file: the first creates and locks
/// it, the last unlinks it (still locked, so that nobody takes the group
/// for stale in between) and closes it.
#[derive(Debug)]
struct Owned(());

impl Owned {
    /// Without the right to create the lock file, the events are made all
    /// the same (and never judged stale by another `usdt`).
    fn take() -> Owned {
        let mut owner = OWNER.lock().unwrap_or_else(|e| e.into_inner());
        if owner.0.is_none() {
            owner.0 = lock_file(group());
        }
        owner.1 += 1;
        Owned(())
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let mut owner = OWNER.lock().unwrap_or_else(|e| e.into_inner());
        owner.1 = owner.1.saturating_sub(1);
        if owner.1 == 0 {
            if let Some(fd) = owner.0.take() {
                let _ = std::fs::remove_file(lock_path(group()));
                drop(fd);
            }
        }
    }
}

fn lock_path(group: &str) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("{group}.lock"))
}

/// 64 random bits (`getrandom`), or the time if that fails.
fn random() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(buf);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

/// Creates and locks `LOCK_DIR/GROUP.lock` (`None` without the right to).
fn lock_file(group: &str) -> Option<OwnedFd> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(LOCK_DIR)
        .ok()?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path(group))
        .ok()?;
    // SAFETY: flock on an open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return None;
    }
    Some(file.into())
}

/// Locks the lock file of `group` if nobody holds it: the group is stale.
/// The lock is released when the returned file is dropped. A file its
/// owner unlinked (or replaced) between our open and our lock is not stale.
fn take_stale(group: &str) -> Option<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let path = lock_path(group);
    let file = std::fs::OpenOptions::new().write(true).open(&path).ok()?;
    // SAFETY: flock on an open descriptor.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    let (held, named) = (file.metadata().ok()?, std::fs::metadata(&path).ok()?);
    let same = (held.dev(), held.ino()) == (named.dev(), named.ino());
    (locked && same).then_some(file)
}

/// Removes the tracefs uprobe events that `usdt` processes killed before
/// they could remove them left behind (their lock file in
/// `/run/usdt/events` exists and nobody holds it), once per process, where
/// tracefs is mounted. Every tracer calls it, whether or not it defines
/// events of its own, so that any `usdt` run cleans up after a killed one.
pub fn remove_stale_events() {
    if let Some(root) = root() {
        remove_stale(&root);
    }
}

/// Removes the events of `usdt` processes that ended without removing
/// theirs (killed), and their lock files, once per process: only groups
/// whose lock file exists and is not held. Their perf events were closed
/// when their process ended, so removing them is safe.
fn remove_stale(root: &Path) {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let own = group();
        let events = std::fs::read_to_string(root.join("uprobe_events")).unwrap_or_default();
        let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for line in events.lines() {
            // `p:usdt_PID_RANDOM/eN /path:0x...`
            let Some(event) = line.split(' ').next().and_then(|e| e.strip_prefix("p:")) else {
                continue;
            };
            if let Some((group, _)) = event
                .split_once('/')
                .filter(|(g, _)| g.starts_with("usdt_"))
            {
                groups.entry(group.into()).or_default().push(event.into());
            }
        }
        // Lock files without events (their process removed its events).
        if let Ok(dir) = std::fs::read_dir(LOCK_DIR) {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(group) = name.strip_suffix(".lock") {
                    groups.entry(group.into()).or_default();
                }
            }
        }
        for (group, events) in groups {
            if group == own {
                continue;
            }
            let Some(_lock) = take_stale(&group) else {
                continue; // held (a live tracer), or no lock file: not ours to judge
            };
            for event in events {
                let _ = append(root, &format!("-:{event}\n"));
            }
            let _ = std::fs::remove_file(lock_path(&group));
        }
    });
}

fn append(root: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("uprobe_events"))?;
    file.write_all(line.as_bytes())
}

impl Drop for FetchEvent {
    fn drop(&mut self) {
        let line = format!("-:{}/{}\n", self.group, self.name);
        // The kernel may still hold the event for a moment after its perf
        // events are closed (EBUSY).
        for _ in 0..100 {
            if append(&self.root, &line).is_ok() || !self.dir().exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// A string from its `__data_loc` (offset in the low 16 bits, length with
/// the NUL in the high 16); `None` when the kernel could not read it.
pub(crate) fn data_loc_string(raw: &[u8], field: Field) -> Option<&[u8]> {
    let loc = u32::from_ne_bytes(raw.get(field.offset..field.offset + 4)?.try_into().ok()?);
    let (offset, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
    if len == 0 {
        return None;
    }
    let bytes = raw.get(offset..offset + len)?;
    Some(bytes.strip_suffix(&[0]).unwrap_or(bytes))
}

/// The fields of a fetch event's raw record, per argument.
#[derive(Clone, Debug)]
pub(crate) struct FetchPlan {
    pub(crate) values: Vec<Option<Field>>,
    pub(crate) strings: Vec<Option<Field>>,
    pub(crate) bytes: Vec<Option<Field>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_args, Machine};

    const X86: Machine = Machine::X86_64;

    #[test]
    fn definitions() {
        let args = parse_args("-8@-8(%rsp) 8@%rdi 4@$5 -2@%r8w", X86).unwrap();
        let def = definition(X86.arch(), &args, &[false, true, false, false], &[], (0, 0)).unwrap();
        assert_eq!(
            def,
            [
                "a0=-8(%sp):u64",
                "a1=%di:u64",
                "s1=+0(%di):string",
                "a3=%r8:u64"
            ]
        );
        let args = parse_args("8@$4096", X86).unwrap();
        assert!(definition(X86.arch(), &args, &[true], &[], (0, 0)).is_none());
        let mut args = parse_args("8f@sym(%rip) 16@-32(%rsp) 8@%xmm0 4@s(%rip)", X86).unwrap();
        if let Operand::Symbol { addr, .. } = &mut args[0].operand {
            *addr = Some(0x4010);
        }
        // The uprobe is at 0x1130, file offset 0x130.
        let def = definition(X86.arch(), &args[..3], &[false; 3], &[], (0x1130, 0x130)).unwrap();
        assert_eq!(def, ["a0=@+0x3010:u64", "a1=-32(%sp):u8[16]"]);
        assert!(definition(X86.arch(), &args, &[false; 4], &[], (0x1130, 0x130)).is_none());
        let sib = parse_args("8@(%rdx,%rax,8)", X86).unwrap();
        assert!(definition(X86.arch(), &sib, &[false], &[], (0, 0)).is_none());
    }

    #[test]
    fn fields_and_strings() {
        let (name, f) =
            parse_field("\tfield:__data_loc char[] s1;\toffset:24;\tsize:4;\tsigned:1;").unwrap();
        assert_eq!(
            (name, f),
            (
                "s1",
                Field {
                    offset: 24,
                    size: 4
                }
            )
        );
        let mut raw = vec![0u8; 32];
        raw[24..28].copy_from_slice(&((3u32 << 16) | 28).to_ne_bytes());
        raw[28..31].copy_from_slice(b"hi\0");
        assert_eq!(data_loc_string(&raw, f), Some(&b"hi"[..]));
        raw[24..28].copy_from_slice(&28u32.to_ne_bytes());
        assert_eq!(data_loc_string(&raw, f), None);
    }
}
