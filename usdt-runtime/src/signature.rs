//! The signature record's format, shared by the macros that write it and
//! the tracers that read it: each provider probe's argument names, types
//! and kinds, one record per site, beside the site's note.
//!
//! ```text
//! .usdt.signatures (not allocated: the running program never maps it;
//! SHF_LINK_ORDER to the site's text section, like the note, so that
//! `--gc-sections` drops the record with the code):
//!       version    1 byte    VERSION
//!       nargs      1 byte    declared arguments (a byte slice is one)
//!       flags      2 bytes   0
//!       length     4 bytes   bytes after this field
//!       Location   8 bytes   address of the site's nop, as in the note
//!       "provider\0" "name\0"            the note's provider and name
//!       per argument: kind (1 byte, `kind`), "name\0", "type\0"
//! ```
//!
//! Records are packed one after another (alignment 1). A reader skips a
//! record of a version it does not know by its length. Consumers that know
//! nothing of the section (readelf -n, gdb, bpftrace, perf, libbpf) never
//! look at it: it is neither a note nor loaded.

/// The record format's version byte.
pub const VERSION: u8 = 1;

/// The section the records are in.
pub const SECTION: &str = ".usdt.signatures";
