//! The `bpf(2)` system call and the parts of `union bpf_attr` this crate
//! uses, laid out as in the kernel's `include/uapi/linux/bpf.h`.
//!
//! Each attribute struct is a prefix of its member of the union: the kernel
//! reads `size` bytes and treats the rest as zero. Every byte is a field (no
//! implicit padding), so that zeroed fields are really zero: the kernel
//! refuses (`EINVAL`) nonzero bytes past the last field of a command. The offsets and sizes are
//! checked at compile time against the uapi header (`offsetof` printed by a C
//! program built with Linux 6.1's `linux/bpf.h`, and for `uprobe_multi`, added
//! in 6.6, the `pahole` layout of the 6.6 header).

use std::mem::{offset_of, size_of};
use std::os::fd::{FromRawFd, OwnedFd};

use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_map_type, bpf_prog_type};

use super::{syscall, Syscall, SyscallError};

// The ABI numbers, from aya-obj's bindings generated from the kernel's
// `include/uapi/linux/bpf.h`.

/// `enum bpf_cmd`.
pub(crate) const BPF_MAP_CREATE: libc::c_int = bpf_cmd::BPF_MAP_CREATE as libc::c_int;
pub(crate) const BPF_MAP_LOOKUP_ELEM: libc::c_int = bpf_cmd::BPF_MAP_LOOKUP_ELEM as libc::c_int;
pub(crate) const BPF_MAP_UPDATE_ELEM: libc::c_int = bpf_cmd::BPF_MAP_UPDATE_ELEM as libc::c_int;
pub(crate) const BPF_MAP_GET_NEXT_KEY: libc::c_int = bpf_cmd::BPF_MAP_GET_NEXT_KEY as libc::c_int;
pub(crate) const BPF_PROG_LOAD: libc::c_int = bpf_cmd::BPF_PROG_LOAD as libc::c_int;
pub(crate) const BPF_LINK_CREATE: libc::c_int = bpf_cmd::BPF_LINK_CREATE as libc::c_int;

/// `BPF_NOEXIST`: a map update that only inserts.
pub(crate) const BPF_NOEXIST: i32 = aya_obj::generated::BPF_NOEXIST as i32;

/// `enum bpf_map_type`: a hash table.
pub(crate) const BPF_MAP_TYPE_HASH: u32 = bpf_map_type::BPF_MAP_TYPE_HASH as u32;
/// `enum bpf_map_type`: an array of values.
pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = bpf_map_type::BPF_MAP_TYPE_ARRAY as u32;
/// `enum bpf_map_type`: one value per CPU for each key.
pub(crate) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY as u32;
/// `enum bpf_map_type`: a ring buffer shared by every CPU (Linux 5.8).
pub(crate) const BPF_MAP_TYPE_RINGBUF: u32 = bpf_map_type::BPF_MAP_TYPE_RINGBUF as u32;
/// `enum bpf_prog_type`: uprobe programs are kprobe programs.
pub(crate) const BPF_PROG_TYPE_KPROBE: u32 = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
/// `enum bpf_attach_type` (Linux 6.6).
pub(crate) const BPF_TRACE_UPROBE_MULTI: u32 = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
/// `enum bpf_attach_type`: a program on a perf event, such as one uprobe
/// (a `BPF_LINK_CREATE` target since Linux 5.15).
pub(crate) const BPF_PERF_EVENT: u32 = bpf_attach_type::BPF_PERF_EVENT as u32;

/// The helpers the programs call (`enum bpf_func_id`; aya-obj's bindings
/// leave them out). Stable numbers, checked against the installed
/// `linux/bpf.h` by a test.
pub(crate) mod helper {
    /// `bpf_map_lookup_elem(map, key)`.
    pub(crate) const MAP_LOOKUP_ELEM: i32 = 1;
    /// `bpf_map_update_elem(map, key, value, flags)`.
    pub(crate) const MAP_UPDATE_ELEM: i32 = 2;
    /// `bpf_map_delete_elem(map, key)`.
    pub(crate) const MAP_DELETE_ELEM: i32 = 3;
    /// `bpf_ktime_get_ns()`.
    pub(crate) const KTIME_GET_NS: i32 = 5;
    /// `bpf_get_current_pid_tgid()`.
    pub(crate) const GET_CURRENT_PID_TGID: i32 = 14;
    /// `bpf_probe_read_user(dst, size, src)`.
    pub(crate) const PROBE_READ_USER: i32 = 112;
    /// `bpf_probe_read_user_str(dst, size, src)`.
    pub(crate) const PROBE_READ_USER_STR: i32 = 114;
    /// `bpf_ringbuf_reserve(ring, size, flags)`.
    pub(crate) const RINGBUF_RESERVE: i32 = 131;
    /// `bpf_ringbuf_submit(data, flags)`.
    pub(crate) const RINGBUF_SUBMIT: i32 = 132;
    /// `bpf_ringbuf_query(ring, flags)`.
    pub(crate) const RINGBUF_QUERY: i32 = 134;
    /// `bpf_get_attach_cookie(ctx)`: for a uprobe_multi link, the site's
    /// cookie.
    pub(crate) const GET_ATTACH_COOKIE: i32 = 174;

    /// Every helper, by its name in `linux/bpf.h`.
    #[cfg(test)]
    pub(crate) const ALL: [(&str, i32); 11] = [
        ("BPF_FUNC_map_lookup_elem", MAP_LOOKUP_ELEM),
        ("BPF_FUNC_map_update_elem", MAP_UPDATE_ELEM),
        ("BPF_FUNC_map_delete_elem", MAP_DELETE_ELEM),
        ("BPF_FUNC_ktime_get_ns", KTIME_GET_NS),
        ("BPF_FUNC_get_current_pid_tgid", GET_CURRENT_PID_TGID),
        ("BPF_FUNC_probe_read_user", PROBE_READ_USER),
        ("BPF_FUNC_probe_read_user_str", PROBE_READ_USER_STR),
        ("BPF_FUNC_ringbuf_reserve", RINGBUF_RESERVE),
        ("BPF_FUNC_ringbuf_submit", RINGBUF_SUBMIT),
        ("BPF_FUNC_ringbuf_query", RINGBUF_QUERY),
        ("BPF_FUNC_get_attach_cookie", GET_ATTACH_COOKIE),
    ];
}

/// The name of a `bpf(2)` command, for errors.
pub(crate) fn command_name(cmd: libc::c_int) -> &'static str {
    match cmd {
        BPF_MAP_CREATE => "bpf(BPF_MAP_CREATE)",
        BPF_MAP_LOOKUP_ELEM => "bpf(BPF_MAP_LOOKUP_ELEM)",
        BPF_MAP_UPDATE_ELEM => "bpf(BPF_MAP_UPDATE_ELEM)",
        BPF_MAP_GET_NEXT_KEY => "bpf(BPF_MAP_GET_NEXT_KEY)",
        BPF_PROG_LOAD => "bpf(BPF_PROG_LOAD)",
        BPF_LINK_CREATE => "bpf(BPF_LINK_CREATE)",
        _ => "bpf",
    }
}

/// One instruction, as `struct bpf_insn` lays it out: opcode, destination
/// register in the low 4 bits of `regs` and source in the high 4, offset
/// and immediate. The engine's encoder writes them; here is only the ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u8,
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

const _: () = assert!(size_of::<Insn>() == 8);

impl Insn {
    /// The instruction of these fields.
    pub(crate) const fn new(code: u8, regs: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs,
            off,
            imm,
        }
    }
}

/// The smallest program, `r0 = 0; exit` (`BPF_ALU64 | BPF_MOV | BPF_K`,
/// `BPF_JMP | BPF_EXIT`): loading it asks the kernel whether it takes a
/// program of a type at all, as libbpf's and aya's feature probes do.
pub(crate) const RETURN_ZERO: [Insn; 2] = [Insn::new(0xb7, 0, 0, 0), Insn::new(0x95, 0, 0, 0)];

/// The license the kernel is told; GPL-compatible, as some helpers require.
const LICENSE: &[u8] = b"Dual MIT/GPL\0";

/// `BPF_PROG_LOAD` of `insns` as a program that uprobe_multi links take
/// (`BPF_PROG_TYPE_KPROBE`, expected attach type `BPF_TRACE_UPROBE_MULTI`),
/// named `name`; with `log`, the verifier writes its log there.
pub(crate) fn load_uprobe_multi_program(
    insns: &[Insn],
    name: &str,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, SyscallError> {
    load_kprobe_program(insns, name, BPF_TRACE_UPROBE_MULTI, log)
}

/// `BPF_PROG_LOAD` of `insns` as a `BPF_PROG_TYPE_KPROBE` program of
/// `expected_attach_type`: [`BPF_TRACE_UPROBE_MULTI`] for uprobe_multi
/// links, 0 for a perf event's link ([`BPF_PERF_EVENT`]), which refuses a
/// program that expects uprobe_multi.
pub(crate) fn load_kprobe_program(
    insns: &[Insn],
    name: &str,
    expected_attach_type: u32,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, SyscallError> {
    let (log_level, log_size, log_buf) = match log {
        Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
        None => (0, 0, 0),
    };
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_KPROBE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name: object_name(name),
        expected_attach_type,
        ..ProgLoadAttr::default()
    };
    // SAFETY: the instructions, the license and the log buffer outlive the
    // call, and the log's size is its length.
    unsafe { bpf_fd(BPF_PROG_LOAD, &mut attr) }
}

/// `BPF_MAP_CREATE`: the first fields of `union bpf_attr`'s map member.
#[repr(C)]
#[derive(Default)]
pub(crate) struct MapCreateAttr {
    pub(crate) map_type: u32,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
    pub(crate) map_flags: u32,
    pub(crate) inner_map_fd: u32,
    pub(crate) numa_node: u32,
    pub(crate) map_name: [u8; 16],
}

const _: () = {
    assert!(offset_of!(MapCreateAttr, max_entries) == 12);
    assert!(offset_of!(MapCreateAttr, map_flags) == 16);
    assert!(offset_of!(MapCreateAttr, map_name) == 28);
    assert!(size_of::<MapCreateAttr>() == 44);
};

/// `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct ProgLoadAttr {
    pub(crate) prog_type: u32,
    pub(crate) insn_cnt: u32,
    pub(crate) insns: u64,
    pub(crate) license: u64,
    pub(crate) log_level: u32,
    pub(crate) log_size: u32,
    pub(crate) log_buf: u64,
    pub(crate) kern_version: u32,
    pub(crate) prog_flags: u32,
    pub(crate) prog_name: [u8; 16],
    pub(crate) prog_ifindex: u32,
    pub(crate) expected_attach_type: u32,
}

const _: () = {
    assert!(offset_of!(ProgLoadAttr, insns) == 8);
    assert!(offset_of!(ProgLoadAttr, license) == 16);
    assert!(offset_of!(ProgLoadAttr, log_level) == 24);
    assert!(offset_of!(ProgLoadAttr, log_buf) == 32);
    assert!(offset_of!(ProgLoadAttr, kern_version) == 40);
    assert!(offset_of!(ProgLoadAttr, prog_name) == 48);
    assert!(offset_of!(ProgLoadAttr, expected_attach_type) == 68);
    assert!(size_of::<ProgLoadAttr>() == 72);
};

/// `BPF_LINK_CREATE` with its `uprobe_multi` member.
#[repr(C)]
#[derive(Default)]
pub(crate) struct LinkCreateAttr {
    pub(crate) prog_fd: u32,
    pub(crate) target_fd: u32,
    pub(crate) attach_type: u32,
    pub(crate) flags: u32,
    /// A pointer to the NUL-terminated path of the file.
    pub(crate) path: u64,
    /// Pointers to `cnt` file offsets, semaphore (`ref_ctr`) offsets and
    /// cookies (the last two may be 0: none).
    pub(crate) offsets: u64,
    pub(crate) ref_ctr_offsets: u64,
    pub(crate) cookies: u64,
    pub(crate) cnt: u32,
    /// `BPF_F_UPROBE_MULTI_RETURN` (1) for return probes; 0 here.
    pub(crate) multi_flags: u32,
    /// A process id (its every thread), or 0 for every process.
    pub(crate) pid: u32,
    /// Padding, zero: the kernel refuses nonzero bytes past the last field
    /// it knows, and Rust leaves implicit padding undefined.
    pub(crate) _pad: u32,
}

const _: () = {
    assert!(offset_of!(LinkCreateAttr, attach_type) == 8);
    assert!(offset_of!(LinkCreateAttr, flags) == 12);
    assert!(offset_of!(LinkCreateAttr, path) == 16);
    assert!(offset_of!(LinkCreateAttr, offsets) == 24);
    assert!(offset_of!(LinkCreateAttr, ref_ctr_offsets) == 32);
    assert!(offset_of!(LinkCreateAttr, cookies) == 40);
    assert!(offset_of!(LinkCreateAttr, cnt) == 48);
    assert!(offset_of!(LinkCreateAttr, multi_flags) == 52);
    assert!(offset_of!(LinkCreateAttr, pid) == 56);
    assert!(size_of::<LinkCreateAttr>() == 64);
};

/// `BPF_LINK_CREATE` with its `perf_event` member: a program on one perf
/// event (`target_fd`), attach type [`BPF_PERF_EVENT`].
#[repr(C)]
#[derive(Default)]
pub(crate) struct PerfLinkCreateAttr {
    pub(crate) prog_fd: u32,
    /// The perf event's descriptor.
    pub(crate) target_fd: u32,
    pub(crate) attach_type: u32,
    pub(crate) flags: u32,
    /// What `bpf_get_attach_cookie` returns in the program.
    pub(crate) bpf_cookie: u64,
}

const _: () = {
    assert!(offset_of!(PerfLinkCreateAttr, target_fd) == 4);
    assert!(offset_of!(PerfLinkCreateAttr, attach_type) == 8);
    assert!(offset_of!(PerfLinkCreateAttr, bpf_cookie) == 16);
    assert!(size_of::<PerfLinkCreateAttr>() == 24);
};

/// `BPF_MAP_LOOKUP_ELEM` and `BPF_MAP_UPDATE_ELEM` (whose `flags` 0 is
/// `BPF_ANY`).
#[repr(C)]
#[derive(Default)]
pub(crate) struct MapElemAttr {
    pub(crate) map_fd: u32,
    pub(crate) _pad: u32,
    pub(crate) key: u64,
    pub(crate) value: u64,
    pub(crate) flags: u64,
}

const _: () = {
    assert!(offset_of!(MapElemAttr, key) == 8);
    assert!(offset_of!(MapElemAttr, value) == 16);
    assert!(size_of::<MapElemAttr>() == 32);
};

/// One attribute struct that `bpf(2)` may be given.
///
/// # Safety
/// The type must be one of the `#[repr(C)]` prefixes of `union bpf_attr`
/// above, for the command it is passed with.
pub(crate) unsafe trait Attr {}
// SAFETY: each is a checked prefix of its member of `union bpf_attr`.
unsafe impl Attr for MapCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for ProgLoadAttr {}
// SAFETY: as above.
unsafe impl Attr for LinkCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for PerfLinkCreateAttr {}
// SAFETY: as above.
unsafe impl Attr for MapElemAttr {}

/// `bpf(cmd, attr, sizeof attr)`, returning the raw result.
///
/// # Safety
/// `attr` must be the struct for `cmd`, and every pointer in it must be valid
/// for what the kernel does with it (reading a path or array, writing a value
/// or log) until the call returns.
pub(crate) unsafe fn bpf<A: Attr>(cmd: libc::c_int, attr: &mut A) -> Result<i64, SyscallError> {
    // SAFETY: `attr` is `size_of::<A>()` bytes of a valid prefix of `union
    // bpf_attr` (trait `Attr`); the caller vouches for its pointers.
    unsafe {
        syscall(Syscall::Bpf {
            cmd,
            attr: (attr as *mut A).cast(),
            size: size_of::<A>() as u32,
        })
    }
}

/// `bpf(2)` for a command that returns a new descriptor.
///
/// # Safety
/// As for [`bpf`].
pub(crate) unsafe fn bpf_fd<A: Attr>(
    cmd: libc::c_int,
    attr: &mut A,
) -> Result<OwnedFd, SyscallError> {
    // SAFETY: the caller's promise is passed on.
    let fd = unsafe { bpf(cmd, attr)? };
    // SAFETY: the kernel just returned this new descriptor; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A name for a map or program: up to 15 bytes and a NUL.
pub(crate) fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_to_15_bytes() {
        assert_eq!(&object_name("usdt_count")[..11], b"usdt_count\0");
        assert_eq!(object_name("0123456789abcdefgh")[15], 0);
        assert_eq!(object_name("0123456789abcdefgh")[14], b'e');
    }

    #[test]
    fn helper_numbers_match_the_installed_header() {
        // Generated by the C compiler from the installed uapi header, when
        // there is one; the numbers never change once a helper exists.
        let dir = std::env::temp_dir().join(format!("usdt-helpers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = String::from("#include <stdio.h>\n#include <linux/bpf.h>\nint main(void) {\n");
        for (name, _) in helper::ALL {
            c.push_str(&format!("printf(\"%d\\n\", (int){name});\n"));
        }
        c.push_str("return 0; }\n");
        std::fs::write(dir.join("h.c"), c).unwrap();
        let built = std::process::Command::new("cc")
            .arg(dir.join("h.c"))
            .arg("-o")
            .arg(dir.join("h"))
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("no C compiler or linux/bpf.h: helper numbers not checked");
            return;
        }
        let out = std::process::Command::new(dir.join("h")).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let got: Vec<i32> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        let want: Vec<i32> = helper::ALL.iter().map(|(_, n)| *n).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn abi_numbers_are_the_kernel_s() {
        assert_eq!((BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_LINK_CREATE), (0, 5, 28));
        assert_eq!((BPF_TRACE_UPROBE_MULTI, BPF_PERF_EVENT), (48, 41));
        assert_eq!(BPF_MAP_TYPE_RINGBUF, 27);
        assert_eq!((BPF_MAP_GET_NEXT_KEY, BPF_MAP_TYPE_HASH), (4, 1));
        assert_eq!(command_name(BPF_LINK_CREATE), "bpf(BPF_LINK_CREATE)");
    }
}
