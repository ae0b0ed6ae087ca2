//! What the kernel wrote over a long nop: the one place that recognises an
//! optimized (or once optimized) site, for the self-tests, the tests and the
//! bench.
//!
//! ```text
//! nop5  (Linux 6.18 - 7.2):  e8 rel32                         call trampoline
//! nop10 (the 7.3 series):    48 8d 64 24 80  e8 rel32         lea -0x80(%rsp),%rsp; call trampoline
//! a uprobe (not yet hit):    cc ...                           int3
//! after the uprobe is gone:  eb rel8 ...                      jmp over the rest of the long nop
//! nop10 after the uprobe is   66 2e 0f 1f 84  e8 rel32         the nop10 again: opcode put back,
//!   gone (7.3):                                                the call's bytes its SIB and disp32
//! ```
//!
//! The kernel optimizes on a hit, not at attach, and only a long nop within
//! one page. The `call` must land in the process's `[uprobes-trampoline]`
//! mapping: bytes that merely look like a `call` are not an optimized site.

use crate::{Error, SiteLayout};

/// `lea -0x80(%rsp),%rsp`: the nop10 form steps over the red zone first.
pub const LEA_RSP_MINUS_128: [u8; 5] = [0x48, 0x8d, 0x64, 0x24, 0x80];
/// x86 `call rel32`.
pub const CALL_REL32: u8 = 0xe8;
/// x86 `jmp rel8`.
pub const JMP_REL8: u8 = 0xeb;
/// x86 `int3`, the uprobe's breakpoint.
pub const INT3: u8 = 0xcc;

/// What a long nop holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongNop {
    /// The nop as emitted: never optimized (or restored).
    Intact,
    /// An `int3`: a uprobe is in place, not (yet) optimized.
    Breakpoint,
    /// The kernel's optimized form: a `call` to `target` (for a nop10, after
    /// `lea -0x80(%rsp),%rsp`).
    Call {
        /// Where the `call` goes.
        target: u64,
    },
    /// A `jmp rel8` to the end of the long nop: the mark an optimized site
    /// keeps after its uprobe is removed.
    Skipped,
    /// A nop10 whose first five bytes (`66 2e 0f 1f 84`, over the `lea`)
    /// the kernel put back when the uprobe went, leaving the `call`'s five
    /// bytes as the nop's SIB byte and 32-bit displacement: the same
    /// 10-byte nop, once optimized (measured on 7.3.4).
    Restored,
    /// Anything else.
    Other,
}

impl LongNop {
    /// Whether the kernel has rewritten the long nop (a `call`, or the
    /// `jmp` it leaves when the uprobe goes).
    pub fn rewritten(self) -> bool {
        matches!(
            self,
            LongNop::Call { .. } | LongNop::Skipped | LongNop::Restored
        )
    }

    /// Whether the long nop executes as emitted: intact, or a nop10 put
    /// back with other operand bytes.
    pub fn executes_as_emitted(self) -> bool {
        matches!(self, LongNop::Intact | LongNop::Restored)
    }
}

/// Whether `bytes`, read at a site's Location, execute as the site of
/// `layout` as emitted: each byte as emitted, but where a nop10 is
/// [`LongNop::Restored`]. False for a layout without x86-64 bytes.
///
/// ```
/// use usdt_trace::{site_executes_as_emitted, SiteLayout};
/// let emitted = [0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0];
/// assert!(site_executes_as_emitted(&emitted, SiteLayout::NopNop10));
/// let put_back = [0x90, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0xe8, 0x15, 0xd7, 0xf6, 0xff];
/// assert!(site_executes_as_emitted(&put_back, SiteLayout::NopNop10));
/// let optimized = [0x90, 0x48, 0x8d, 0x64, 0x24, 0x80, 0xe8, 0x15, 0xd7, 0xf6, 0xff];
/// assert!(!site_executes_as_emitted(&optimized, SiteLayout::NopNop10));
/// ```
pub fn site_executes_as_emitted(bytes: &[u8], layout: SiteLayout) -> bool {
    let Some(emitted) = layout.x86_64_bytes() else {
        return false;
    };
    let Some(bytes) = bytes.get(..emitted.len()) else {
        return false;
    };
    // Where the site's nop10 starts, if it has one (after `nop` or after
    // `nop; nop5`).
    let nop10 = match layout {
        SiteLayout::NopNop10 => Some(1),
        SiteLayout::NopNop5Nop10 => Some(1 + usdt_runtime::site::NOP5.len()),
        _ => None,
    };
    match nop10 {
        Some(at) => {
            bytes[..at] == emitted[..at]
                && long_nop_state(&bytes[at..], SiteLayout::NopNop10, 0).executes_as_emitted()
        }
        None => bytes == emitted,
    }
}

/// Classifies `bytes`, read at address `addr`, as a long nop of `kind`
/// ([`SiteLayout::NopNop5`] for a nop5, [`SiteLayout::NopNop10`] for a
/// nop10). Too few bytes, or another kind, give [`LongNop::Other`].
///
/// ```
/// use usdt_trace::{long_nop_state, LongNop, SiteLayout};
/// let call = [0xe8, 0xfb, 0x0f, 0x00, 0x00];
/// assert_eq!(long_nop_state(&call, SiteLayout::NopNop5, 0x1000), LongNop::Call { target: 0x2000 });
/// let lea_call = [0x48, 0x8d, 0x64, 0x24, 0x80, 0xe8, 0xf6, 0x0f, 0x00, 0x00];
/// assert_eq!(long_nop_state(&lea_call, SiteLayout::NopNop10, 0x1000), LongNop::Call { target: 0x2000 });
/// // The nop5 form is no nop10 form.
/// assert_eq!(long_nop_state(&lea_call, SiteLayout::NopNop5, 0x1000), LongNop::Other);
/// ```
pub fn long_nop_state(bytes: &[u8], kind: SiteLayout, addr: u64) -> LongNop {
    let (original, call_at): (&[u8], usize) = match kind {
        SiteLayout::NopNop5 => (&usdt_runtime::site::NOP5, 0),
        SiteLayout::NopNop10 => (&usdt_runtime::site::NOP10, LEA_RSP_MINUS_128.len()),
        _ => return LongNop::Other,
    };
    let len = original.len();
    let Some(bytes) = bytes.get(..len) else {
        return LongNop::Other;
    };
    if bytes == original {
        return LongNop::Intact;
    }
    match bytes[0] {
        INT3 => return LongNop::Breakpoint,
        JMP_REL8 if usize::from(bytes[1]) == len - 2 => return LongNop::Skipped,
        _ => {}
    }
    if call_at > 0 && bytes[..call_at] == original[..call_at] {
        return LongNop::Restored;
    }
    if bytes[..call_at] != LEA_RSP_MINUS_128[..call_at] || bytes[call_at] != CALL_REL32 {
        return LongNop::Other;
    }
    let rel = &bytes[call_at + 1..call_at + 5];
    let rel = i32::from_le_bytes([rel[0], rel[1], rel[2], rel[3]]);
    LongNop::Call {
        target: addr
            .wrapping_add(len as u64)
            .wrapping_add(rel as i64 as u64),
    }
}

/// The `[uprobes-trampoline]` mappings in the text of a `/proc/PID/maps`.
pub fn trampoline_ranges(maps: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter(|l| l.ends_with("[uprobes-trampoline]"))
        .filter_map(|l| {
            let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect()
}

/// How a site of process `pid` stands now: its long nop of `kind` at
/// `addr` (Location + 1, or + 6 for the nop10 of `nop; nop5; nop10`),
/// and whether a `call` there lands in the process's
/// `[uprobes-trampoline]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRewrite {
    /// What the long nop holds.
    pub long_nop: LongNop,
    /// Whether the process has a `[uprobes-trampoline]` mapping.
    pub trampoline_mapped: bool,
    /// Whether the long nop is a `call` into that mapping: the site is
    /// optimized.
    pub optimized: bool,
}

/// Reads the long nop of `kind` at `addr` in process `pid` (from
/// `/proc/PID/mem`, as root or the process's owner) and its maps.
pub fn site_rewrite(pid: u32, addr: u64, kind: SiteLayout) -> Result<SiteRewrite, Error> {
    use std::os::unix::fs::FileExt;
    let io = |path: String| {
        move |source| Error::Io {
            path: path.into(),
            source,
        }
    };
    let maps_path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&maps_path).map_err(io(maps_path))?;
    let mut bytes = [0u8; 10];
    let mem_path = format!("/proc/{pid}/mem");
    std::fs::File::open(&mem_path)
        .and_then(|f| f.read_exact_at(&mut bytes, addr))
        .map_err(io(mem_path))?;
    let ranges = trampoline_ranges(&maps);
    let long_nop = long_nop_state(&bytes, kind, addr);
    let optimized = match long_nop {
        LongNop::Call { target } => ranges.iter().any(|(lo, hi)| (*lo..*hi).contains(&target)),
        _ => false,
    };
    Ok(SiteRewrite {
        long_nop,
        trampoline_mapped: !ranges.is_empty(),
        optimized,
    })
}

/// In this process, without allocating (so that a freshly forked child of
/// a threaded process may call it): whether the long nop of `kind` at
/// `addr` is a `call` into this process's `[uprobes-trampoline]`.
///
/// # Safety
/// `addr` must point at a mapped, readable long nop of `kind` in this
/// process's code.
#[cfg(target_os = "linux")]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the self-tests' (x86-64)
pub(crate) unsafe fn optimized_here(addr: u64, kind: SiteLayout) -> bool {
    let mut bytes = [0u8; 10];
    let len = match kind {
        SiteLayout::NopNop10 => 10,
        _ => 5,
    };
    for (i, b) in bytes.iter_mut().enumerate().take(len) {
        // SAFETY: the caller promises `len` readable bytes at `addr`.
        *b = unsafe { std::ptr::read_volatile((addr as usize + i) as *const u8) };
    }
    match long_nop_state(&bytes, kind, addr) {
        LongNop::Call { target } => in_own_trampoline(target),
        _ => false,
    }
}

/// Whether `target` lies in a `[uprobes-trampoline]` line of
/// `/proc/self/maps`, read with `open`/`read` into stack buffers.
#[cfg(target_os = "linux")]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the self-tests' (x86-64)
fn in_own_trampoline(target: u64) -> bool {
    const NAME: &[u8] = b"[uprobes-trampoline]";
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut line = [0u8; 512];
    let mut used = 0usize;
    let mut chunk = [0u8; 4096];
    let mut found = false;
    'read: loop {
        // SAFETY: `chunk` is writable for its length; `fd` is open.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        for &b in &chunk[..n] {
            if b != b'\n' {
                if used < line.len() {
                    line[used] = b;
                }
                used += 1;
                continue;
            }
            let l = &line[..used.min(line.len())];
            if l.ends_with(NAME) && range_holds(l, target) {
                found = true;
                break 'read;
            }
            used = 0;
        }
    }
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    found
}

/// Whether the `lo-hi` range a maps line starts with holds `target`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn range_holds(line: &[u8], target: u64) -> bool {
    let hex = |s: &[u8]| -> Option<u64> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0u64, |n, &c| {
            Some(n << 4 | u64::from((c as char).to_digit(16)?))
        })
    };
    let end = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
    let range = &line[..end];
    let Some(dash) = range.iter().position(|&c| c == b'-') else {
        return false;
    };
    match (hex(&range[..dash]), hex(&range[dash + 1..])) {
        (Some(lo), Some(hi)) => lo <= target && target < hi,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usdt_runtime::site::{NOP10, NOP5};

    #[test]
    fn every_form_of_both_long_nops() {
        use SiteLayout::{NopNop10, NopNop5};
        assert_eq!(long_nop_state(&NOP5, NopNop5, 0), LongNop::Intact);
        assert_eq!(long_nop_state(&NOP10, NopNop10, 0), LongNop::Intact);
        assert_eq!(
            long_nop_state(&[0xcc, 0x1f, 0x44, 0, 0], NopNop5, 0),
            LongNop::Breakpoint
        );
        assert_eq!(
            long_nop_state(&[0xeb, 3, 0x44, 0, 0], NopNop5, 0),
            LongNop::Skipped
        );
        let mut skipped10 = NOP10;
        skipped10[..2].copy_from_slice(&[0xeb, 8]);
        assert_eq!(long_nop_state(&skipped10, NopNop10, 0), LongNop::Skipped);
        // A jmp elsewhere is no mark of ours.
        assert_eq!(
            long_nop_state(&[0xeb, 8, 0x44, 0, 0], NopNop5, 0),
            LongNop::Other
        );
        // Backwards calls: target below the site.
        let back = (-0x2000i32).to_le_bytes();
        let call5 = [0xe8, back[0], back[1], back[2], back[3]];
        assert_eq!(
            long_nop_state(&call5, NopNop5, 0x10_0000),
            LongNop::Call {
                target: 0x10_0000 + 5 - 0x2000
            }
        );
        // A bare call where a nop10 was is not the nop10 form.
        let mut call10 = [0u8; 10];
        call10[..5].copy_from_slice(&call5);
        assert_eq!(long_nop_state(&call10, NopNop10, 0), LongNop::Other);
        assert_eq!(long_nop_state(&call5[..4], NopNop5, 0), LongNop::Other);
        assert_eq!(
            long_nop_state(&NOP5, SiteLayout::NopNop5Nop10, 0),
            LongNop::Other
        );
        assert!(LongNop::Skipped.rewritten() && !LongNop::Breakpoint.rewritten());
        // 7.3 puts a nop10's opcode back over the lea and leaves the call's
        // bytes: the same nop, once optimized.
        let mut put_back = NOP10;
        put_back[5..].copy_from_slice(&[0xe8, 0x15, 0xd7, 0xf6, 0xff]);
        let state = long_nop_state(&put_back, NopNop10, 0);
        assert_eq!(state, LongNop::Restored);
        assert!(state.rewritten() && state.executes_as_emitted());
        assert!(!LongNop::Breakpoint.executes_as_emitted());
        // Both long nops: the nop5 must be as emitted too.
        let mut both = [0x90u8; 16];
        both[1..6].copy_from_slice(&NOP5);
        both[6..].copy_from_slice(&put_back);
        assert!(site_executes_as_emitted(&both, SiteLayout::NopNop5Nop10));
        both[1] = 0xcc;
        assert!(!site_executes_as_emitted(&both, SiteLayout::NopNop5Nop10));
        assert!(!site_executes_as_emitted(
            &both[..10],
            SiteLayout::NopNop5Nop10
        ));
        assert!(!site_executes_as_emitted(&[0x90], SiteLayout::Other));
    }

    #[test]
    fn trampoline_lines() {
        let maps = "7f00-7f10 r-xp 00000000 00:00 0 [uprobes-trampoline]\n\
                    5555-5556 r-xp 00000000 08:01 12 /bin/x\n";
        assert_eq!(trampoline_ranges(maps), vec![(0x7f00, 0x7f10)]);
        assert!(range_holds(b"7f00-7f10 r-xp", 0x7f0f));
        assert!(!range_holds(b"7f00-7f10 r-xp", 0x7f10));
        assert!(!range_holds(b"zz-7f10 r-xp", 0x7f00));
    }

    /// Nothing optimized this process's own self-test site unless traced:
    /// the in-process reader sees no call there.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn an_untraced_site_is_not_optimized() {
        let code = [0x90u8, 0x0f, 0x1f, 0x44, 0, 0];
        // SAFETY: five readable bytes (a stack array stands in for code).
        assert!(!unsafe { optimized_here(code.as_ptr() as u64 + 1, SiteLayout::NopNop5) });
    }
}
