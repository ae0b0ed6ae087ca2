//! The reading side of a BPF ring buffer map (`BPF_MAP_TYPE_RINGBUF`), one
//! ring that every CPU's program writes records into.
//!
//! ```text
//! offset 0           one page: consumer_pos (written by the reader)
//! offset 1 page      one page: producer_pos (written by the kernel), then
//!                    the data area, mapped twice in a row so that a record
//!                    that wraps around its end reads as one piece
//! ```
//!
//! Each record starts with an 8-byte header: a `u32` length whose bit 31
//! says the record is still being written (busy) and bit 30 that it was
//! discarded, then a `u32` the kernel uses. Records are 8-byte aligned. The
//! protocol (`kernel/bpf/ringbuf.c`, libbpf's `ringbuf.c`): the reader
//! loads producer_pos and each header with Acquire, pairing with the
//! kernel's Release stores when it reserves and submits a record, and
//! stores consumer_pos with Release once it is done with the records, which
//! the kernel reads before reusing their space.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sys::{mem, SyscallError};

/// The length bit of a record still being written.
const BUSY: u32 = 1 << 31;
/// The length bit of a discarded record.
const DISCARD: u32 = 1 << 30;
/// The size of a record's header.
const HEADER: u64 = 8;

/// One mapped BPF ring buffer.
#[derive(Debug)]
pub(crate) struct RingBuf {
    consumer: *mut u8,
    producer: *mut u8,
    /// The data area's size (a power of two).
    size: u64,
    page: usize,
}

// SAFETY: the mappings belong to this value alone; the kernel is the only
// other writer, and it synchronizes through the positions and headers.
unsafe impl Send for RingBuf {}

impl RingBuf {
    /// Maps the ring buffer map `fd` of `size` data bytes (the map's
    /// `max_entries`).
    pub(crate) fn map(fd: BorrowedFd<'_>, size: u64) -> Result<RingBuf, SyscallError> {
        let page = usdt_runtime::page_size() as usize;
        // The map's consumer page, which the kernel lets the reader write.
        let consumer = mem::map_shared(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        // The producer page and the data area twice, read-only, as the
        // kernel lays them out from offset one page.
        let producer = mem::map_shared(fd, page + 2 * size as usize, libc::PROT_READ, page as u64)
            .inspect_err(|_| {
                // SAFETY: the mapping made above, used by nothing else.
                unsafe { mem::unmap(consumer, page) };
            })?;
        Ok(RingBuf {
            consumer,
            producer,
            size,
            page,
        })
    }

    /// The data area's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page is mapped, page-aligned, and holds the
        // position at its start for as long as `self` lives.
        unsafe { &*self.consumer.cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, for the producer page.
        unsafe { &*self.producer.cast::<AtomicU64>() }
    }

    /// Calls `each` with every submitted record's data in order, and
    /// releases their space; stops at a record still being written.
    pub(crate) fn drain(&mut self, mut each: impl FnMut(&[u8])) {
        let mask = self.size - 1;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        let prod = self.producer_pos().load(Ordering::Acquire);
        while cons < prod {
            let at = self.page as u64 + (cons & mask);
            // SAFETY: `at` is inside the first copy of the data area, and
            // the header is 8-byte aligned (records are).
            let header = unsafe { &*self.producer.add(at as usize).cast::<AtomicU32>() };
            let len = header.load(Ordering::Acquire);
            if len & BUSY != 0 {
                break;
            }
            let data_len = u64::from(len & !(BUSY | DISCARD));
            if len & DISCARD == 0 {
                // SAFETY: the record's data follows its header, inside the
                // data area mapped twice, so it reads as one piece even when
                // it wraps; the kernel does not touch it until consumer_pos
                // moves past it.
                let data = unsafe {
                    std::slice::from_raw_parts(
                        self.producer.add((at + HEADER) as usize),
                        data_len as usize,
                    )
                };
                each(data);
            }
            cons += (data_len + HEADER + 7) & !7;
            self.consumer_pos().store(cons, Ordering::Release);
        }
    }
}

impl Drop for RingBuf {
    fn drop(&mut self) {
        // SAFETY: the two mappings made by `map`, with their lengths.
        unsafe {
            mem::unmap(self.consumer, self.page);
            mem::unmap(self.producer, self.page + 2 * self.size as usize);
        }
    }
}
