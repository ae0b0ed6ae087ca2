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

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{FromRawFd, OwnedFd};

/// `enum bpf_cmd`.
pub(crate) const BPF_MAP_CREATE: libc::c_int = 0;
pub(crate) const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
pub(crate) const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
pub(crate) const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
pub(crate) const BPF_PROG_LOAD: libc::c_int = 5;
pub(crate) const BPF_LINK_CREATE: libc::c_int = 28;

/// `enum bpf_map_type`: a hash table.
pub(crate) const BPF_MAP_TYPE_HASH: u32 = 1;
/// `enum bpf_map_type`: an array of values.
pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `enum bpf_map_type`: one value per CPU for each key.
pub(crate) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `enum bpf_map_type`: a ring buffer shared by every CPU (Linux 5.8).
pub(crate) const BPF_MAP_TYPE_RINGBUF: u32 = 27;
/// `enum bpf_prog_type`: uprobe programs are kprobe programs.
pub(crate) const BPF_PROG_TYPE_KPROBE: u32 = 2;
/// `enum bpf_attach_type` (Linux 6.6).
pub(crate) const BPF_TRACE_UPROBE_MULTI: u32 = 48;

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
unsafe impl Attr for MapElemAttr {}

/// `bpf(cmd, attr, sizeof attr)`, returning the raw result.
///
/// # Safety
/// `attr` must be the struct for `cmd`, and every pointer in it must be valid
/// for what the kernel does with it (reading a path or array, writing a value
/// or log) until the call returns.
pub(crate) unsafe fn bpf<A: Attr>(cmd: libc::c_int, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is `size_of::<A>()` bytes of a valid prefix of `union
    // bpf_attr` (trait `Attr`); the caller vouches for its pointers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut A,
            size_of::<A>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// `bpf(2)` for a command that returns a new descriptor.
///
/// # Safety
/// As for [`bpf`].
pub(crate) unsafe fn bpf_fd<A: Attr>(cmd: libc::c_int, attr: &mut A) -> io::Result<OwnedFd> {
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

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, such as
/// `0-3`): a per-CPU map holds one value for each.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    crate::attach::parse_cpu_list(&text)
        .into_iter()
        .max()
        .map(|last| last as usize + 1)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cannot read the CPU list \"{}\"", text.trim()),
            )
        })
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
    fn possible_cpus_are_read() {
        assert!(possible_cpus().unwrap() >= 1);
    }
}
