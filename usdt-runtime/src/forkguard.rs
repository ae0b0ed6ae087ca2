//! The fork guard: keeps a forked child alive on the kernels whose optimized
//! uprobes do not survive fork (Linux 6.18 to early 7.2, where `syscall(336)`
//! fails with `ENXIO`).
//!
//! On those kernels a uprobe at Location + 1 of a `nop; nop5` site is
//! rewritten, after its first hit, into a `call` to a `[uprobes-trampoline]`
//! page. `fork` does not copy that page (`VM_DONTCOPY`), but the child keeps
//! the `call`: its own first hit of the site jumps to an unmapped address and
//! the child dies of SIGSEGV. The guard, installed once at program start,
//! registers `pthread_atfork` handlers:
//!
//! - before `fork` (in the forking thread of the parent): record the address
//!   of every `[uprobes-trampoline]` mapping, read from `/proc/self/maps`
//!   into a fixed buffer (no allocation), in a fixed table of
//!   [`MAX_TRAMPOLINES`] slots;
//! - in the child: map at each recorded address an anonymous page of `ret`
//!   (`0xc3`) with `MAP_FIXED_NOREPLACE`, then make it read + execute; only
//!   async-signal-safe calls. A patched site in the child then calls a `ret`
//!   and goes on: it acts as a no-op, and the child's hits of it reach no
//!   tracer. Where the address is taken (a kernel that copies the trampoline
//!   on fork reports `EEXIST`) or a call fails, the child goes on exactly as
//!   without the guard.
//!
//! The `call` pushes its return address below the stack pointer, which is
//! safe because probe sites never let the compiler keep data in the red zone
//! (they are `asm!` without `nostack`).
//!
//! The guard costs no probe anything: the sites do not change. It is linked
//! into a program by every site with a nop5 (`nop; nop5`, and `nop; nop5;
//! nop10`, whose nop5 these kernels optimize): the site's `asm!` carries a
//! relocation of no effect (`R_X86_64_NONE`) to [`SYMBOL`], the guard's entry
//! in `.init_array`, so the linker takes this object file from the rlib
//! archive and `--gc-sections` keeps it. The same object file carries the
//! marker a tracer reads ([`NOTE_NAME`], [`NT_USDT_FORK_GUARD`]) to tell a
//! guarded program from a C `sys/sdt.h` one or an older build. A `nop10`
//! build (`nop; nop10` sites) does not reference it (nothing of such a site
//! is optimized on those kernels), so it carries neither guard nor marker.
//!
//! Where no site can be optimized, the guard registers nothing: the kernel's
//! release is before 6.18 (read with `uname`, so that `syscall(336)` is never
//! made on kernels that do not have it, where a seccomp filter may forbid
//! it), or `syscall(336)` does not fail with `ENXIO`. Setting the environment
//! variable [`DISABLE_ENV`] to `0` at program start also leaves the guard
//! out (for comparisons: a child of such a program dies as without the guard,
//! while tracers still see the marker).
//!
//! What it cannot cover: a raw `clone` without `CLONE_VM` that bypasses libc's
//! `fork` (no `pthread_atfork` handler runs), and a site first optimized by
//! another thread between the handler's reading of the maps and the fork
//! itself. `vfork` and `posix_spawn` share the parent's memory until `exec`
//! and need nothing.

/// The guard's entry in `.init_array`, a hidden symbol that every site with a
/// nop5 references (see the module's documentation). Its name carries the
/// crate's version, so that two major versions of this crate in one program
/// each link their own guard.
pub const SYMBOL: &str = symbol!();

/// The guard's symbol, as a literal for the assembly below.
macro_rules! symbol {
    () => {
        "__usdt_fork_guard_0_1"
    };
}
use symbol;

/// The owner name of the marker note, in the non-allocated section
/// `.note.usdt` (it costs the running program nothing).
pub const NOTE_NAME: &str = "usdt";

/// The marker note's type: this program carries the fork guard. Its
/// descriptor is a 4-byte version, [`NOTE_VERSION`].
pub const NT_USDT_FORK_GUARD: u32 = 1;

/// The version in the marker note's descriptor.
pub const NOTE_VERSION: u32 = 1;

/// The environment variable that, set to `0` when the program starts, leaves
/// the guard out.
pub const DISABLE_ENV: &str = "USDT_FORK_GUARD";

/// How many trampoline mappings the guard records (the kernel creates one
/// page per 4 GiB region that holds optimized sites: a few at most).
pub const MAX_TRAMPOLINES: usize = 16;

/// Whether the guard registered its fork handlers in this process: false
/// where no site can be optimized, where [`DISABLE_ENV`] is `0`, on other
/// targets, and in a program that links no site with a nop5.
pub fn active() -> bool {
    imp::active()
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::MAX_TRAMPOLINES;

    // The guard's entry in `.init_array` (so the dynamic loader calls
    // `install` before `main`, or when a shared library is loaded), under the
    // symbol that sites reference, and the marker note, in one block: they
    // are in one object file, which the linker takes whole or not at all.
    core::arch::global_asm!(
        // `.init_array`: an array of function pointers the loader calls.
        ".pushsection .init_array, \"aw\", @init_array",
        ".balign 8",
        concat!(".globl ", super::symbol!()),
        // Hidden: each linked object (program, shared library) has its own.
        concat!(".hidden ", super::symbol!()),
        concat!(super::symbol!(), ":"),
        ".8byte {install}",
        ".popsection",
        // The marker: a note (owner "usdt", type 1, a 4-byte version) in a
        // section that is not loaded.
        ".pushsection .note.usdt, \"\", @note",
        ".balign 4",
        ".4byte 5, 4, 1",
        ".asciz \"usdt\"",
        ".balign 4",
        ".4byte 1",
        ".popsection",
        install = sym install,
        options(att_syntax),
    );

    /// Whether `install` registered the handlers.
    static ACTIVE: AtomicBool = AtomicBool::new(false);

    /// The recorded trampoline mappings: start and end addresses, 0 when
    /// empty. Filled by `prepare` (only ever added to: the kernel never
    /// removes a trampoline while the process lives), read by `child`.
    static STARTS: [AtomicUsize; MAX_TRAMPOLINES] =
        [const { AtomicUsize::new(0) }; MAX_TRAMPOLINES];
    static ENDS: [AtomicUsize; MAX_TRAMPOLINES] = [const { AtomicUsize::new(0) }; MAX_TRAMPOLINES];

    pub(super) fn active() -> bool {
        ACTIVE.load(Ordering::Relaxed)
    }

    /// Called once by the loader: registers the fork handlers where a site
    /// can be optimized.
    extern "C" fn install() {
        if disabled_by_env() || !kernel_optimizes_nop5() {
            return;
        }
        // SAFETY: the handlers are functions of this object, which stays
        // loaded as long as they are registered (glibc unregisters a shared
        // library's handlers when it is unloaded); they are async-signal-safe
        // where they must be (`child`).
        let r = unsafe { libc::pthread_atfork(Some(prepare), None, Some(child)) };
        ACTIVE.store(r == 0, Ordering::Relaxed);
    }

    /// `USDT_FORK_GUARD=0`.
    fn disabled_by_env() -> bool {
        // SAFETY: a NUL-terminated name; the result, if not null, is a
        // NUL-terminated string that stays valid while nothing changes the
        // environment (this runs before `main`, or while a library loads).
        unsafe {
            let value = libc::getenv(c"USDT_FORK_GUARD".as_ptr());
            !value.is_null() && *value == b'0' as libc::c_char && *value.add(1) == 0
        }
    }

    /// Whether this kernel optimizes uprobes on nop5 and loses them on fork:
    /// release 6.18 or later, and `syscall(336)` fails with `ENXIO`.
    fn kernel_optimizes_nop5() -> bool {
        // SAFETY: `utsname` is plain data; uname fills it.
        let mut uts: libc::utsname = unsafe { core::mem::zeroed() };
        // SAFETY: a valid out pointer.
        if unsafe { libc::uname(&mut uts) } != 0 {
            return false;
        }
        let release = uts.release.map(|c| c as u8);
        if !release_at_least(&release, 6, 18) {
            return false;
        }
        crate::features::uprobe_syscall_errno() == Some(libc::ENXIO)
    }

    /// Before fork, in the parent: record the trampoline mappings.
    extern "C" fn prepare() {
        // SAFETY: errno is this thread's; restored below, so that the caller
        // of fork sees no trace of the handler.
        let errno = unsafe { *libc::__errno_location() };
        read_maps(&mut |start, end| record(start, end));
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Adds a mapping to the table unless it is there or the table is full.
    fn record(start: usize, end: usize) {
        for (s, e) in STARTS.iter().zip(&ENDS) {
            match s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    e.store(end, Ordering::Release);
                    return;
                }
                Err(found) if found == start => return,
                Err(_) => {}
            }
        }
    }

    /// In the child: a page of `ret` at each recorded trampoline. Only
    /// async-signal-safe calls (mmap, mprotect, munmap).
    extern "C" fn child() {
        // SAFETY: errno is this thread's; restored below.
        let errno = unsafe { *libc::__errno_location() };
        for (s, e) in STARTS.iter().zip(&ENDS) {
            let (start, end) = (s.load(Ordering::Acquire), e.load(Ordering::Acquire));
            if start != 0 && end > start {
                map_ret(start, end - start);
            }
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Maps `len` bytes of `ret` at `addr`, if nothing is mapped there.
    fn map_ret(addr: usize, len: usize) {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces a mapping: it fails
        // with EEXIST where anything is mapped (a kernel that copied the
        // trampoline), so no memory of the program changes.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return;
        }
        if p as usize != addr {
            // A kernel before 4.17 takes the flag as a hint: not ours to keep.
            // SAFETY: the mapping just made, used by nothing.
            unsafe { libc::munmap(p, len) };
            return;
        }
        // SAFETY: `p` is a fresh, writable mapping of `len` bytes.
        unsafe { core::ptr::write_bytes(p.cast::<u8>(), 0xc3, len) };
        // SAFETY: the same mapping, now read + execute.
        if unsafe { libc::mprotect(p, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            // SAFETY: the mapping made above, used by nothing.
            unsafe { libc::munmap(p, len) };
        }
    }

    /// Calls `found(start, end)` for each `[uprobes-trampoline]` line of
    /// `/proc/self/maps`, read through a fixed buffer.
    fn read_maps(found: &mut dyn FnMut(usize, usize)) {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/proc/self/maps".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return;
        }
        let mut lines = Lines::new();
        loop {
            let room = lines.room();
            // SAFETY: `room` is writable memory of the length passed; `fd`
            // is open.
            let n = unsafe { libc::read(fd, room.as_mut_ptr().cast(), room.len()) };
            let Ok(n @ 1..) = usize::try_from(n) else {
                break;
            };
            lines.filled(n, &mut |line| {
                if let Some(range) = trampoline(line) {
                    found(range.0, range.1);
                }
            });
        }
        // SAFETY: opened above, closed once.
        unsafe { libc::close(fd) };
    }

    /// Splits what `read` returns into lines, in a fixed buffer; a line
    /// longer than the buffer is skipped (a trampoline's line is short).
    pub(super) struct Lines {
        buf: [u8; 4096],
        len: usize,
        skipping: bool,
    }

    impl Lines {
        pub(super) fn new() -> Lines {
            Lines {
                buf: [0; 4096],
                len: 0,
                skipping: false,
            }
        }

        /// Where the next read goes.
        pub(super) fn room(&mut self) -> &mut [u8] {
            &mut self.buf[self.len..]
        }

        /// `n` bytes were read into [`Lines::room`]: hands each complete
        /// line (without its newline) to `line`.
        pub(super) fn filled(&mut self, n: usize, line: &mut dyn FnMut(&[u8])) {
            self.len += n;
            let mut start = 0;
            while let Some(nl) = self.buf[start..self.len].iter().position(|&b| b == b'\n') {
                if !self.skipping {
                    line(&self.buf[start..start + nl]);
                }
                self.skipping = false;
                start += nl + 1;
            }
            self.buf.copy_within(start..self.len, 0);
            self.len -= start;
            if self.len == self.buf.len() {
                // A line longer than the buffer: drop it up to its newline.
                self.len = 0;
                self.skipping = true;
            }
        }
    }

    /// `START-END perms offset dev inode [uprobes-trampoline]`: the range.
    pub(super) fn trampoline(line: &[u8]) -> Option<(usize, usize)> {
        let name = b"[uprobes-trampoline]";
        if !line.ends_with(name) {
            return None;
        }
        let range = line.split(|&b| b == b' ').next()?;
        let dash = range.iter().position(|&b| b == b'-')?;
        Some((hex(&range[..dash])?, hex(&range[dash + 1..])?))
    }

    fn hex(digits: &[u8]) -> Option<usize> {
        if digits.is_empty() || digits.len() > 16 {
            return None;
        }
        digits.iter().try_fold(0usize, |n, &d| {
            let v = (d as char).to_digit(16)?;
            Some(n << 4 | v as usize)
        })
    }

    /// `6.18.44-...` is at least 6.18.
    pub(super) fn release_at_least(release: &[u8], major: u32, minor: u32) -> bool {
        let mut parts = release
            .split(|&b| b == b'.' || b == b'-' || b == 0)
            .map(|p| {
                if p.is_empty() || p.len() > 4 || !p.iter().all(u8::is_ascii_digit) {
                    None
                } else {
                    Some(p.iter().fold(0u32, |n, d| n * 10 + (d - b'0') as u32))
                }
            });
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(a), Some(b)) => (a, b) >= (major, minor),
            _ => false,
        }
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    pub(super) fn active() -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::imp::{release_at_least, trampoline, Lines};

    #[test]
    fn trampoline_lines() {
        assert_eq!(
            trampoline(b"7ffff7ff9000-7ffff7ffa000 r-xp 00000000 00:00 0                          [uprobes-trampoline]"),
            Some((0x7ffff7ff9000, 0x7ffff7ffa000))
        );
        assert_eq!(
            trampoline(b"7ffff7ff9000-7ffff7ffa000 r-xp 00000000 00:00 0 [vdso]"),
            None
        );
        assert_eq!(
            trampoline(b"zz-7ffff7ffa000 r-xp 0 0 0 [uprobes-trampoline]"),
            None
        );
        assert_eq!(trampoline(b"[uprobes-trampoline]"), None);
    }

    #[test]
    fn lines_across_reads_and_overlong_lines() {
        let text = [
            &b"1-2 r-xp 0 0 0 /a\n"[..],
            &[b'x'; 9000],
            b"\n10-20 r-xp 0 0 0 [uprobes-trampoline]\n",
        ]
        .concat();
        for chunk in [1, 7, 100, 5000] {
            let mut lines = Lines::new();
            let mut seen = [0usize; 3];
            let mut count = 0;
            let mut rest = &text[..];
            while !rest.is_empty() {
                let room = lines.room();
                let n = chunk.min(room.len()).min(rest.len());
                room[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                lines.filled(n, &mut |l| {
                    if let Some((s, e)) = trampoline(l) {
                        seen = [s, e, l.len()];
                    }
                    count += 1;
                });
            }
            assert_eq!(seen[..2], [0x10, 0x20], "chunk {chunk}");
            assert_eq!(count, 2, "chunk {chunk}: the overlong line is skipped");
        }
    }

    #[test]
    fn the_names_the_assembly_and_the_code_spell() {
        // `disabled_by_env` spells the variable as a C string literal.
        assert_eq!(super::DISABLE_ENV, "USDT_FORK_GUARD");
        assert!(super::SYMBOL.starts_with("__usdt_fork_guard_"));
    }

    #[test]
    fn releases() {
        assert!(release_at_least(b"6.18.44-fc-v1045\0\0", 6, 18));
        assert!(release_at_least(b"7.3.0-rc7-amd64", 6, 18));
        assert!(!release_at_least(b"6.12.0-1-amd64", 6, 18));
        assert!(!release_at_least(b"5.10.0", 6, 18));
        assert!(!release_at_least(b"", 6, 18));
        assert!(!release_at_least(b"x.y", 6, 18));
    }
}
