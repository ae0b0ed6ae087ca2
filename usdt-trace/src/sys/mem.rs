//! Shared mappings of ring buffers (`mmap(2)`, `munmap(2)`).

use std::os::fd::BorrowedFd;

use super::{syscall, Syscall, SyscallError};

/// Maps `len` bytes of `fd` from `offset`, shared, with protection `prot`
/// (`PROT_READ`, with `PROT_WRITE` or not). The caller unmaps it with
/// [`unmap`].
pub(crate) fn map_shared(
    fd: BorrowedFd<'_>,
    len: usize,
    prot: libc::c_int,
    offset: u64,
) -> Result<*mut u8, SyscallError> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| SyscallError::from_errno("mmap", libc::EOVERFLOW))?;
    // SAFETY: a fresh mapping chosen by the kernel overlaps nothing of
    // ours; no pointer is passed in.
    let addr = unsafe {
        syscall(Syscall::Mmap {
            len,
            prot,
            fd,
            offset,
        })?
    };
    Ok(addr as *mut u8)
}

/// Unmaps a mapping made by [`map_shared`].
///
/// # Safety
/// `addr` and `len` must be one whole mapping from [`map_shared`], and
/// nothing may use it afterwards.
pub(crate) unsafe fn unmap(addr: *mut u8, len: usize) {
    // SAFETY: the caller's contract. A failure leaves the mapping in place,
    // which nothing can do better about.
    let _ = unsafe {
        syscall(Syscall::Munmap {
            addr: addr.cast(),
            len,
        })
    };
}
