//! The consumer side of `usdt`: read USDT probe notes (SystemTap SDT,
//! `.note.stapsdt`) from ELF files and running processes, attach uprobes to
//! their sites with `perf_event_open`, count hits, and sample them with every
//! argument decoded (no BPF).
//!
//! This crate is for tracers, tests and operators; applications with probes
//! depend on `usdt` only. The `usdt` command (package usdt-cli) has
//! `features`, `list`, `count`, `trace` and `bpftrace` commands built on
//! this API.
//!
//! - Reading: [`read_file`] and [`read_sites`] give one [`Site`] per note, with
//!   the Base adjustment applied, file offsets, parsed [`Arg`]uments and the
//!   [`SiteLayout`] found at Location; [`read_process`] does it for every ELF
//!   object a process maps, with its load bias. Malformed input is an
//!   [`Error`], never a panic. Each site is checked ([`SiteCheck`]): one
//!   whose Location is not a known nop in the file's code, or whose
//!   semaphore is not in its writable data, is refused by every engine
//!   unless [forced](Site::force).
//! - Attaching: a [`PerfCounter`] opens one uprobe perf event per site (per CPU for
//!   [`Target::AllProcesses`]) at the [`AttachPoint`] chosen from
//!   [`KernelFeatures`] and the fork self-test ([`fork_test`]), with the semaphore's file offset as `ref_ctr_offset`;
//!   dropping it detaches and the kernel lowers the semaphores again.
//! - Counting with BPF (Linux 6.6+): a [`bpf::MultiCounter`] attaches any
//!   number of sites of a file with one uprobe_multi link and counts the hits
//!   of every thread of a process, or of every process running the file.
//! - Signatures: [`read_signatures`] reads the argument names, Rust types
//!   and [`Kind`]s that `#[usdt::provider]` probes record in
//!   `.usdt.signatures`; [`Signatures`] matches them to notes by
//!   `provider:name`, and [`TypedArgs`] shows a [`Hit`] with them
//!   (`id=1 path="/index.html"`); [`bpftrace_program`] writes a bpftrace
//!   program that prints hits the same way.
//! - Starting a command with uprobes already in place: [`PausedCommand`].
//! - Targets: a [`Session`] owns a command, a pid or every process of a
//!   file, finds their objects, follows new threads and libraries, and
//!   says what it skipped ([`Notice`]).
//! - Engines: [`EngineChoice`] (auto, perf, BPF) is decided here, not by
//!   callers; [`Counter`] counts with the engine picked, and when Auto's
//!   BPF attach proves unsupported and perf fails too the error says both.
//! - Tracing: a [`Sampler`] attaches uprobes in sampling mode (registers,
//!   thread, time and a stack copy per hit, into a perf ring buffer) and
//!   decodes each hit's arguments into a [`Hit`] of [`Value`]s; lost samples
//!   are counted. [`Recorder`] runs a command under a sampler and returns a
//!   [`Recording`] a test can assert on ("this probe fired with these
//!   arguments").
//!
//! ```no_run
//! use usdt_trace::{read_file, AttachPoint, Target, PerfCounter};
//!
//! let exe = "/usr/local/bin/server";
//! let sites = read_file(exe)?;
//! for site in &sites {
//!     println!("{}:{} at {:#x} ({})", site.provider, site.name, site.location, site.layout);
//! }
//! let mut tracer = PerfCounter::new(AttachPoint::Auto);
//! tracer.attach(exe, sites.iter().filter(|s| s.provider == "http"), Target::Pid(4242))?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! for (probe, hits) in tracer.probe_counts()? {
//!     println!("{probe} {hits}");
//! }
//! # Ok::<(), usdt_trace::Error>(())
//! ```
#![warn(missing_docs)]
// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod aggregate;
mod arch;
mod attach;
mod bpftrace;
mod caps;
mod command;
mod cpus;
mod elf;
mod engine;
mod error;
mod escape;
mod exec_watch;
mod follow;
mod glob;
mod ldso;
mod process;
mod raw;
mod record;
mod rewrite;
mod sample;
mod selftest;
mod session;
mod speedtest;
mod sys;
mod typed;

pub use aggregate::{Aggregation, CountedValue, Histogram, LatencyKey};
pub use bpftrace::{bpftrace_program, BPFTRACE_MAX_ARGS};
pub use caps::{
    auto_delta, auto_delta_here, caps, fork_safe, tracefs_root, AutoInputs, Caps, Speed,
};
pub use command::{resolve_program, ExitStatus, PausedCommand};
pub use cpus::online_cpus;
pub use elf::arg::{
    parse_args, Arg, Machine, Operand, Reg, Reg64, RegWidth, ARG_SIZES, MAX_ARGS, MAX_ARGS_TEXT,
};
pub use elf::forkguard::{
    read_file_fork_guard, read_fork_guard, FORK_GUARD_SECTION, NT_USDT_FORK_GUARD,
};
pub use elf::note::{
    layout_of, read_file, read_file_probes, read_probes, read_sites, ElfProbes, Segment, Site,
    SkippedNote, MAX_NAME, MAX_READ, NT_STAPSDT, SITE_BYTES,
};
pub use elf::signature::{
    parse_records, read_file_signatures, read_signatures, Kind, Param, Signature, Signatures,
    BYTES_MAX, BYTES_SHOWN, SIGNATURE_SECTION, SIGNATURE_VERSION,
};
pub use elf::sites::{SiteCheck, SiteRefusal};
pub use engine::bpf;
pub use engine::perf::counter::{AttachedSite, PerfCounter};
pub use engine::perf::tracefs::remove_stale_events;
pub use engine::{attach_delta, AttachPoint, Counter, EngineChoice, Picked, Target};
pub use error::{AttachCause, AttachError, Error};
pub use escape::{escape, escape_name};
pub use glob::glob_match;
pub use ldso::shared_libraries;
pub use process::{
    load_bias, object_path, process_alive, process_exe, process_threads, read_maps, read_process,
    read_semaphore, MappedObject, Mapping,
};
pub use record::{Recorder, Recording};
pub use rewrite::{
    long_nop_state, site_executes_as_emitted, site_rewrite, trampoline_ranges, LongNop,
    SiteRewrite, CALL_REL32, INT3, JMP_REL8, LEA_RSP_MINUS_128,
};
pub use sample::{
    Hit, Sampler, Value, BYTES_FETCH, DEFAULT_RING_PAGES, DEFAULT_STACK_BYTES, STRING_MAX,
};
pub use selftest::{fork_test, tracer_features, ForkTest, FORK_TEST_CACHE};
pub use session::{Cause, NewObject, Notice, Objects, Session};
pub use speedtest::{speed_test, SpeedTest, SPEED_TEST_CACHE};
pub use sys::SyscallError;
pub use typed::{TypedArgs, TypedValue};
pub use usdt_runtime::site::{AARCH64_NOP, NOP, NOP10, NOP5, RISCV64_C_NOP, RISCV64_NOP};
pub use usdt_runtime::{page_size, KernelFeatures, OptimizedFork, SiteLayout, UprobeSyscall};
