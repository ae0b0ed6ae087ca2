//! The perf ring buffer: the pages the kernel writes sample and lost-sample
//! records into, mapped from a perf event's descriptor.
//!
//! ```text
//! page 0         struct perf_event_mmap_page: data_head (written by the kernel),
//!                data_tail (written by the reader), data_offset, data_size
//! pages 1..=2^n  the data area: records, each starting with
//!                struct perf_event_header { u32 type; u16 misc; u16 size; },
//!                wrapping around at its end
//! ```
//!
//! The kernel never overwrites records the reader has not released (it counts
//! them in a `PERF_RECORD_LOST` record instead), so a slow reader loses
//! samples but never reads torn ones.
//!
//! The protocol (the kernel's `kernel/events/ring_buffer.c` and
//! `tools/include/linux/ring_buffer.h`): the reader loads data_head with
//! Acquire, which pairs with the kernel's barrier between writing records
//! and publishing data_head; it stores data_tail with Release, which pairs
//! with the kernel's read of data_tail before it reuses the space.

use std::mem::offset_of;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::{self, perf_event_mmap_page};

use crate::sys::mem;
use crate::Error;

/// `PERF_RECORD_LOST`: `{ header; u64 id; u64 lost; }`.
pub(crate) const RECORD_LOST: u32 = bindings::PERF_RECORD_LOST;
/// `PERF_RECORD_SAMPLE`: the fields the event's `sample_type` asks for.
pub(crate) const RECORD_SAMPLE: u32 = bindings::PERF_RECORD_SAMPLE;

/// Offsets in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = offset_of!(perf_event_mmap_page, data_head);
const DATA_TAIL: usize = offset_of!(perf_event_mmap_page, data_tail);
const DATA_OFFSET: usize = offset_of!(perf_event_mmap_page, data_offset);
const DATA_SIZE: usize = offset_of!(perf_event_mmap_page, data_size);

/// One mapped ring buffer.
#[derive(Debug)]
pub(crate) struct Ring {
    base: *mut u8,
    len: usize,
    data: *const u8,
    size: u64,
    /// A record that wraps around the end of the data area, made contiguous.
    scratch: Vec<u8>,
}

// SAFETY: the mapping belongs to this value alone; the kernel is the only
// other writer, and it synchronizes through data_head and data_tail.
unsafe impl Send for Ring {}

fn page_size() -> usize {
    usdt_runtime::page_size() as usize
}

impl Ring {
    /// Maps a ring buffer of `pages` data pages (rounded up to a power of two)
    /// for the perf event `fd`.
    pub(crate) fn map(fd: BorrowedFd<'_>, pages: usize) -> Result<Ring, Error> {
        let pages = pages.max(1).next_power_of_two();
        let page = page_size();
        let len = (pages + 1) * page;
        let base =
            mem::map_shared(fd, len, libc::PROT_READ | libc::PROT_WRITE, 0).map_err(|source| {
                let kib = pages * page / 1024;
                match source.raw_os_error() {
                    Some(libc::EPERM) => Error::RingNotPermitted { kib },
                    _ => Error::Syscall {
                        what: format!("mapping a {kib} KiB perf ring buffer"),
                        source,
                    },
                }
            })?;
        // SAFETY: page 0 is the control page; these fields are u64 at fixed
        // offsets the kernel filled in before mmap returned.
        let (offset, size) = unsafe {
            (
                std::ptr::read_volatile(base.add(DATA_OFFSET).cast::<u64>()),
                std::ptr::read_volatile(base.add(DATA_SIZE).cast::<u64>()),
            )
        };
        // Kernels before 4.1 leave both 0: the data starts at page 1.
        let (offset, size) = match (offset, size) {
            (0, 0) => (page as u64, (pages * page) as u64),
            other => other,
        };
        Ok(Ring {
            base,
            len,
            // SAFETY: data_offset lies within the mapping.
            data: unsafe { base.add(offset as usize) },
            size,
            scratch: vec![],
        })
    }

    /// The size of the data area in bytes.
    pub(crate) fn data_size(&self) -> u64 {
        self.size
    }

    /// A u64 of the control page, shared with the kernel.
    fn control(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is that of an aligned u64 field of the control
        // page (page 0 of the mapping, alive as long as `self`); the kernel
        // and this reader access it only atomically.
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    /// Calls `each` with every record written since the last call (type and
    /// the whole record, header included), then releases them to the kernel.
    pub(crate) fn drain(&mut self, mut each: impl FnMut(u32, &[u8])) {
        // Acquire: pairs with the kernel's write barrier before it publishes
        // data_head, so the records up to `head` are complete.
        let head = self.control(DATA_HEAD).load(Ordering::Acquire);
        // Only this reader writes data_tail.
        let mut tail = self.control(DATA_TAIL).load(Ordering::Relaxed);
        while head.wrapping_sub(tail) >= 8 {
            let mut header = [0u8; 8];
            header.copy_from_slice(self.bytes(tail, 8));
            let kind = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
            let size = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if size < 8 || size > head.wrapping_sub(tail) {
                // Cannot happen with a sane kernel; skip what is there.
                tail = head;
                break;
            }
            each(kind, self.bytes(tail, size as usize));
            tail = tail.wrapping_add(size);
        }
        // Release: every read of the records above happens before the
        // kernel sees the space free (it reads data_tail before writing).
        self.control(DATA_TAIL).store(tail, Ordering::Release);
    }

    /// `len` bytes at ring position `at`, contiguous (copied into the
    /// scratch buffer when they wrap around).
    fn bytes(&mut self, at: u64, len: usize) -> &[u8] {
        let start = (at % self.size) as usize;
        let size = self.size as usize;
        if start + len <= size {
            // SAFETY: within the data area, which the kernel does not write
            // between data_tail and data_head.
            return unsafe { std::slice::from_raw_parts(self.data.add(start), len) };
        }
        let first = size - start;
        self.scratch.clear();
        // SAFETY: both parts are within the data area, as above.
        unsafe {
            self.scratch
                .extend_from_slice(std::slice::from_raw_parts(self.data.add(start), first));
            self.scratch
                .extend_from_slice(std::slice::from_raw_parts(self.data, len - first));
        }
        &self.scratch
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`.
        unsafe { mem::unmap(self.base, self.len) };
    }
}
