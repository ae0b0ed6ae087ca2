//! The counting program, assembled at run time: it adds 1 to the slot of a
//! per-CPU array named by the attach cookie of the site that was hit.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::asm::{
    add64_imm, atomic_add64, call, exit, jeq_imm, load_map_fd, mov64_imm, mov64_reg, store32, Insn,
    R0, R1, R10, R2,
};
use super::BpfError;
use crate::sys::bpf::{bpf_fd, load_kprobe_program, object_name, BPF_TRACE_UPROBE_MULTI};
use crate::sys::bpf::{MapCreateAttr, BPF_MAP_CREATE, BPF_MAP_TYPE_PERCPU_ARRAY};

use crate::sys::bpf::helper::{
    GET_ATTACH_COOKIE as BPF_FUNC_GET_ATTACH_COOKIE, MAP_LOOKUP_ELEM as BPF_FUNC_MAP_LOOKUP_ELEM,
};

/// The program for the counter map `map` (12 instructions):
///
/// ```text
///  0: call bpf_get_attach_cookie      r0 = cookie (r1 is the context)
///  1: *(u32 *)(r10 - 4) = r0          key = slot
///  2: r2 = r10
///  3: r2 += -4                        r2 = &key
///  4: r1 = map (two instructions)
///  6: call bpf_map_lookup_elem        r0 = this CPU's counter, or NULL
///  7: if r0 == 0 goto 10              a cookie past the map's end
///  8: r1 = 1
///  9: lock *(u64 *)(r0 + 0) += r1
/// 10: r0 = 0
/// 11: exit
/// ```
pub(crate) fn count_program(map: i32) -> Vec<Insn> {
    let mut p = vec![
        call(BPF_FUNC_GET_ATTACH_COOKIE),
        store32(R10, -4, R0),
        mov64_reg(R2, R10),
        add64_imm(R2, -4),
    ];
    p.extend(load_map_fd(R1, map));
    p.extend([
        call(BPF_FUNC_MAP_LOOKUP_ELEM),
        jeq_imm(R0, 0, 2),
        mov64_imm(R1, 1),
        atomic_add64(R0, 0, R1),
        mov64_imm(R0, 0),
        exit(),
    ]);
    p
}

/// Creates the per-CPU array of `slots` 8-byte counters.
pub(crate) fn create_counter_map(slots: u32) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
        key_size: 4,
        value_size: 8,
        max_entries: slots,
        map_name: object_name("usdt_counts"),
        ..MapCreateAttr::default()
    };
    // SAFETY: the attributes hold no pointers.
    unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
        .map_err(|e| BpfError::from_os("creating the counter map", e))
}

/// Loads `insns` as a uprobe_multi program; on a verifier rejection, loads
/// again with the log on and returns it in the error.
pub(crate) fn load_program(insns: &[Insn], name: &str) -> Result<OwnedFd, BpfError> {
    load_program_for(insns, name, BPF_TRACE_UPROBE_MULTI)
}

/// Loads `insns` as a kprobe-type program of `expected_attach_type`
/// (`BPF_TRACE_UPROBE_MULTI`, or 0 for a perf event's link, which refuses a
/// program that expects uprobe_multi), as [`load_program`] does.
pub(crate) fn load_program_for(
    insns: &[Insn],
    name: &str,
    expected_attach_type: u32,
) -> Result<OwnedFd, BpfError> {
    match load_kprobe_program(insns, name, expected_attach_type, None) {
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            let mut log = vec![0u8; 1 << 20];
            match load_kprobe_program(insns, name, expected_attach_type, Some(&mut log)) {
                Ok(fd) => Ok(fd),
                Err(e2) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let log = String::from_utf8_lossy(&log[..end]).trim().to_string();
                    if log.is_empty() {
                        Err(BpfError::from_os(
                            &format!("loading the program {name}"),
                            e2,
                        ))
                    } else {
                        Err(BpfError::Verifier {
                            program: name.into(),
                            log,
                        })
                    }
                }
            }
        }
        r => r.map_err(|e| BpfError::from_os(&format!("loading the program {name}"), e)),
    }
}

/// Loads the counting program for `map`.
pub(crate) fn load_count_program(map: BorrowedFd<'_>) -> Result<OwnedFd, BpfError> {
    load_program(&count_program(map.as_raw_fd()), "usdt_count")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_twelve_instructions_ending_in_exit() {
        let p = count_program(3);
        assert_eq!(p.len(), 12);
        assert_eq!(p[11], exit());
        // The jump lands on `r0 = 0`.
        assert_eq!(p[7], jeq_imm(R0, 0, 2));
        assert_eq!(p[10], mov64_imm(R0, 0));
    }
}
