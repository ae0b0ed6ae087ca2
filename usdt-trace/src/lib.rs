//! The consumer side of `usdt`: read USDT probe notes from ELF files and
//! running processes, attach uprobes to their sites with `perf_event_open`,
//! and count hits.
//!
//! This crate is for tracers, tests and operators; applications with probes
//! depend on `usdt` only.
//!
//! ```no_run
//! for site in usdt_trace::read_file("/usr/bin/python3")? {
//!     println!("{}:{} at {:#x} ({})", site.provider, site.name, site.location, site.layout);
//! }
//! # Ok::<(), usdt_trace::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod arg;
mod attach;
mod command;
mod error;
mod glob;
mod note;
mod process;

pub use arg::{parse_args, Arg, Machine, Operand, Reg, Reg64, RegWidth, MAX_ARGS, MAX_ARGS_TEXT};
pub use attach::{
    attach_delta, auto_attach_words, online_cpus, AttachPoint, AttachedSite, Target, Tracer,
};
pub use command::{resolve_program, shared_libraries, ExitStatus, PausedCommand};
pub use error::Error;
pub use glob::{closest, glob_match};
pub use note::{
    layout_of, read_file, read_file_probes, read_probes, read_sites, ElfProbes, Segment, Site,
    MAX_NAME, NT_STAPSDT, SITE_BYTES,
};
pub use process::{
    load_bias, process_alive, process_exe, read_maps, read_process, read_semaphore, MappedObject,
    Mapping,
};
pub use usdt_runtime::{KernelFeatures, SiteLayout, UprobeSyscall};
