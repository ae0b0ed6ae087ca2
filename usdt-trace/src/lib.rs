//! The consumer side of `usdt`: read USDT probe notes (SystemTap SDT,
//! `.note.stapsdt`) from ELF files and running processes, attach uprobes to
//! their sites with `perf_event_open` or BPF uprobe_multi links, count hits,
//! sample them with every argument decoded, and aggregate them in the
//! kernel.
//!
//! This crate is for tracers, tests and operators; applications with probes
//! depend on `usdt` only. The `usdt` command (package usdt-cli) has
//! `features`, `list`, `count`, `trace` and `bpftrace` commands built on
//! this API.
//!
//! Where each concern lives, lowest first (each module imports only those
//! above it in this list; the crate's README has the full map):
//!
//! | module | owns |
//! |---|---|
//! | `sys` | every raw system call, one choke point, typed wrappers |
//! | `error` | [`Error`] and the errors it carries |
//! | `arch` | one register table per machine ([`Machine`]) |
//! | `elf` | notes, arguments, signature records, the site check |
//! | `facts` | what this kernel can do, the self-tests, [`FeatureReport`] |
//! | `placement` | where a uprobe goes on a site ([`AttachPoint`], Auto) |
//! | `engine` | perf and BPF ([`EngineKind`]), choosing between them |
//! | `sample`, `aggregate`, `stack` | decoding hits, in-kernel answers, stacks |
//! | `types` | argument names and types: records, provider files, catalog |
//! | `filter` | [`Filter`]s (`--if`): parsed, bound to each site by `types` |
//! | `session`, `run` | a target's objects; the one run loop ([`Run`]) |
//!
//! - Reading: [`read_file`] and [`read_sites`] give one [`Site`] per note, with
//!   the Base adjustment applied, file offsets, parsed [`Arg`]uments and the
//!   [`SiteLayout`] found at Location; [`read_process`] does it for every ELF
//!   object a process maps, with its load bias. Malformed input is an
//!   [`Error`], never a panic. Each site is checked ([`SiteCheck`]): one
//!   whose Location is not a known nop in the file's code, or whose
//!   semaphore is not in its writable data, is refused by every engine
//!   unless [forced](Site::force).
//! - Kernel facts: [`caps`] finds once what this kernel and machine can do
//!   ([`KernelFeatures`], BPF uprobe_multi links, the fork self-test
//!   [`fork_test`] and the speed self-test [`speed_test`]);
//!   [`Caps::report`] is the whole of it as one serde type
//!   ([`FeatureReport`], `usdt features --json`).
//! - Attaching: a [`PerfCounter`] opens one uprobe perf event per site (per CPU for
//!   [`Target::AllProcesses`]) at the [`AttachPoint`] the placement picks
//!   from the kernel facts ([`attach_delta`], [`auto_delta`]), with the semaphore's file offset as `ref_ctr_offset`;
//!   dropping it detaches and the kernel lowers the semaphores again.
//! - Counting with BPF (Linux 6.6+): a [`bpf::MultiCounter`] attaches any
//!   number of sites of a file with one uprobe_multi link and counts the hits
//!   of every thread of a process, or of every process running the file.
//! - Signatures: [`read_signatures`] reads the argument names, Rust types
//!   and [`Kind`]s that `#[usdt::provider]` probes record in
//!   `.usdt.signatures`; [`Signatures`] matches them to notes by
//!   `provider:name`, over the [`Declarations`] of DTrace provider files
//!   (a user's, and the built-in [`CATALOG`] of CPython's, PostgreSQL's,
//!   libstdc++'s, Ruby's and HotSpot's), and says where each came from
//!   ([`SignatureSource`]); [`TypedArgs`] shows a [`Hit`] with them
//!   (`id=1 path="/index.html"`); [`bpftrace_program`] writes a bpftrace
//!   program that prints hits the same way.
//! - Starting a command with uprobes already in place: [`PausedCommand`].
//! - Targets: a [`Session`] owns a command, a pid or every process of a
//!   file, finds their objects, follows new threads and libraries, and
//!   says what it skipped ([`Notice`]).
//! - Running a target: a [`Run`] of a session spawns a command paused,
//!   attaches through the caller's [`Attacher`], starts it, attaches what
//!   appears later (threads, libraries, programs executed), and ends on a
//!   cancel, a duration, the target's end or the caller's wish
//!   ([`Ended`]); [`SessionSampler`] attaches a [`Sampler`] that way.
//! - Engines: each an [`EngineKind`] (BPF, perf); [`EngineChoice`] (auto,
//!   BPF, perf) is decided here, not by callers, into the engines to try
//!   in order ([`Picked`]); [`Counter`] counts with the first the kernel
//!   supports, and when Auto's BPF attach proves unsupported and perf
//!   fails too the error says both.
//! - Tracing: a [`Sampler`] attaches uprobes in sampling mode (registers,
//!   thread, time and a stack copy per hit, into a perf ring buffer) and
//!   decodes each hit's arguments into a [`Hit`] of [`Value`]s; lost samples
//!   are counted. With [`Sampler::stacks`] each hit also carries its user
//!   [`Stack`], unwound with each file's DWARF call frame information (no
//!   frame pointers needed) and symbolized. [`Recorder`] runs a command under a sampler and returns a
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
//!
//! Linux only: uprobes, `perf_event_open`, BPF and `/proc` are Linux's. On
//! any other target the crate (and the `usdt` command) fails to build with
//! one error that says so; programs with probes build everywhere, through
//! `usdt-probes`.
#![warn(missing_docs)]
// Nothing panics on input or on the system: a failure is an error value.
// Here, at the library crates' roots, not as a workspace lint: tests,
// examples and the tool packages may unwrap (and `#[cfg(test)]` code here
// may too: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "usdt-trace and the `usdt` command run on Linux only (uprobes, perf_event_open and BPF are \
     Linux's): build them for a Linux target. Programs with probes depend on usdt-probes, \
     which builds for every target"
);

/// The items of this crate, each `#[cfg(target_os = "linux")]`, so that
/// another target meets the one error above and no other.
macro_rules! linux_only {
    ($($item:item)*) => {
        $(
            #[cfg(target_os = "linux")]
            $item
        )*
    };
}

linux_only! {
mod aggregate;
mod arch;
mod bpftrace;
mod command;
mod cpus;
mod elf;
mod engine;
mod error;
mod escape;
mod exec_watch;
mod facts;
mod filter;
mod follow;
mod glob;
mod ldso;
mod placement;
mod process;
mod raw;
mod record;
mod rewrite;
mod run;
mod sample;
mod session;
mod stack;
mod sys;
mod typed;
mod types;

pub use aggregate::{Aggregation, CountedValue, Histogram, LatencyKey};
pub use bpftrace::{bpftrace_program, BPFTRACE_MAX_ARGS};
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
    parse_records, read_file_signatures, read_signatures, Kind, Param, Signature, BYTES_MAX,
    BYTES_SHOWN, SIGNATURE_SECTION, SIGNATURE_VERSION,
};
pub use elf::sites::SiteCheck;
pub use engine::bpf;
pub use engine::floor;
pub use engine::perf::counter::{AttachedSite, PerfCounter};
pub use engine::perf::tracefs::remove_stale_events;
pub use engine::{Counter, EngineChoice, EngineKind, Picked};
pub use error::{AttachCause, AttachError, Error, SiteRefusal};
pub use escape::{escape, escape_name};
pub use facts::{
    caps, fork_test, speed_test, tracefs_root, tracer_features, AutoAt, AutoAttach, Caps,
    FeatureReport, ForkTest, ForkVerdict, OptimizedNop, SpeedRates, SpeedTest, FORK_TEST_CACHE,
    SPEED_TEST_CACHE,
};
pub use filter::{Filter, FilterError};
pub use glob::{glob_match, globs_match};
pub use ldso::shared_libraries;
pub use placement::{
    attach_delta, auto_delta, auto_delta_here, fork_safe, optimizable_on, site_words, AttachPoint,
    AutoInputs, Speed, Target,
};
pub use process::{
    load_bias, object_path, process_alive, process_exe, process_threads, read_maps, read_process,
    read_semaphore, MappedObject, Mapping,
};
pub use record::{Recorder, Recording};
pub use rewrite::{
    long_nop_state, site_executes_as_emitted, site_rewrite, trampoline_ranges, LongNop,
    SiteRewrite, CALL_REL32, INT3, JMP_REL8, LEA_RSP_MINUS_128,
};
pub use run::{Attacher, Ended, Run, SessionSampler, TICK};
pub use sample::{
    Hit, Sampler, Value, BYTES_FETCH, DEFAULT_RING_PAGES, DEFAULT_STACK_BYTES, STRING_MAX,
};
pub use session::{Cause, Launcher, NewObject, Notice, Objects, Session};
pub use stack::{Frame, Stack};
pub use sys::SyscallError;
pub use typed::{TypedArgs, TypedValue};
pub use types::{
    parse_provider_file, Declarations, NamedArg, ParseError, SignatureSource, Signatures, CATALOG,
};
pub use usdt_runtime::site::{AARCH64_NOP, NOP, NOP10, NOP5, RISCV64_C_NOP, RISCV64_NOP};
pub use usdt_runtime::{page_size, KernelFeatures, OptimizedFork, SiteLayout, UprobeSyscall};
}
