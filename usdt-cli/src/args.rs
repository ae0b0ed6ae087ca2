//! The command line: one struct per command (clap derive), the checks of
//! numeric values in words, and clap's errors turned into `usdt:` lines.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use usdt_trace::{AttachPoint, EngineChoice, Filter};

/// `usdt`: list the USDT probes of a binary or process, count their hits,
/// trace them with their arguments, and say what the kernel can do for them.
#[derive(Parser, Debug)]
#[command(
    name = "usdt",
    version,
    about = "List, count and trace USDT probes (SystemTap SDT notes), and say what the kernel can do for them",
    after_help = "\
PROBE-GLOB matches provider:name, with * and ? ('http:*'); none means every probe.

Examples:
  usdt features
  usdt list ./server
  sudo usdt count 'http:*' -p 4242
  sudo usdt trace -- ./server --port 8080
  sudo usdt latency http:request_start http:request_done --key id -p 4242
  sudo usdt serve --listen :9464 --all ./server
  bpftrace -e \"$(usdt bpftrace ./server)\" -c ./server

`usdt COMMAND --help` describes each command.",
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Say what this kernel can do for USDT probes
    ///
    /// The uprobe syscall, BPF uprobe_multi links, the fork and speed
    /// self-tests, where `--attach auto` goes on each site layout, the
    /// uprobe PMU and kernel-maintained semaphores.
    #[command(after_help = "Examples:\n  usdt features\n  usdt features --json")]
    Features(FeaturesArgs),
    /// List the probes of a binary or of a process
    ///
    /// One row per probe (a #[usdt::provider] probe with its parameters):
    /// sites, layout, semaphore (with its value in a process), where
    /// `--attach auto` goes, and the argument string. With -p, a table per
    /// file the process maps.
    #[command(after_help = "\
Examples:
  usdt list ./server
  usdt list --sites ./server     # every site, with its address and layout
  usdt list -p 4242              # every file the process maps")]
    List(ListArgs),
    /// Count the hits of probes
    ///
    /// In a running process (-p), a command started with the uprobes in
    /// place (-- COMMAND; its own process only, not the processes it forks,
    /// unless it has no probes of its own: a script, env, nice, sh -c), or
    /// every process that runs a binary (--all, forked ones too). The
    /// counts (`provider:name N`) are printed at the end (Ctrl-C, the end of
    /// the process or of --duration) and every --interval.
    #[command(after_help = "\
Examples:
  sudo usdt count -p 4242                       # every probe of a running process
  sudo usdt count 'http:*' -i 1 -- ./server     # a command, counts every second
  sudo usdt count --all ./server --duration 10  # every process running ./server
  sudo usdt count --if 'status >= 500' http:request_done -p 4242

The engine: one BPF uprobe_multi link per file, counting every thread (Linux
6.6+), or one perf event per site (the main thread only); auto picks BPF when
the kernel has it. $USDT_COUNT_ENGINE sets the default.")]
    Count(CountArgs),
    /// Print one line per hit with its arguments
    ///
    /// `SECONDS PID/TID provider:name ARGS`: a #[usdt::provider] probe's
    /// arguments by name and type (id=1 path="/a"); --raw, and probes without
    /// a signature, show arg0=N... A running process (-p), a command
    /// started with the uprobes in place (-- COMMAND; its own process only,
    /// not the processes it forks, unless it has no probes of its own: a
    /// script, env, nice, sh -c), or every process that runs a binary
    /// (--all).
    #[command(after_help = "\
Examples:
  sudo usdt trace -p 4242
  sudo usdt trace 'http:*' --limit 100 -- ./server
  sudo usdt trace --str 'http:request_start:1' --json -- ./c-server
  sudo usdt trace --all ./server 'http:*'
  sudo usdt trace --if 'path ^= \"/api/\" and status != 200' 'http:*' -p 4242

The engine: a BPF program on one uprobe_multi link per file, which sees every
thread from its first hit and reads memory at the hit (Linux 6.6+, x86-64), or
perf events per site and thread (threads are found as they appear; memory is
read by tracefs uprobe events at the hit, or with --no-kernel-fetch from a
copy of the stack); auto picks BPF when the kernel has it, perf with
--no-kernel-fetch.
$USDT_TRACE_ENGINE sets the default.")]
    Trace(TraceArgs),
    /// Time from one probe to another as a histogram, paired in the kernel
    ///
    /// Each hit of END is paired with the last hit of START with the same
    /// key: the thread by default, or an argument (`--key arg0`, or a
    /// parameter's name from the probe's signature record), so that
    /// requests that cross threads pair right. Start times and the log2
    /// histogram live in BPF maps: no record per hit leaves the kernel. At
    /// the end (the process's or command's, --duration or Ctrl-C) prints
    /// the histogram with count, p50, p90, p99 and max, ends without a
    /// start and starts lost to a full map.
    #[command(after_help = "\
Examples:
  sudo usdt latency http:request_start http:request_done -- ./server
  sudo usdt latency lat:start lat:done --key id --json -p 4242
  sudo usdt latency db:query db:result --all ./server --duration 60
  sudo usdt latency http:request_start http:request_done --key id --by path --sort p99 -p 4242
  sudo usdt latency http:request_start http:request_done --key id --if-end 'status >= 500' -p 4242

Needs BPF uprobe_multi links (Linux 6.6+) on x86-64.")]
    Latency(LatencyArgs),
    /// A log2 histogram of a probe's numeric argument, kept in the kernel
    #[command(after_help = "\
Examples:
  sudo usdt hist http:request_done nanos -- ./server
  sudo usdt hist 'db:*' arg2 -p 4242 --duration 10")]
    Hist(HistArgs),
    /// Serve hit counts and latency histograms to Prometheus (/metrics)
    ///
    /// `usdt_probe_hits_total{binary,provider,probe}` for the probes the
    /// globs match (every probe without globs), and for each --latency
    /// `usdt_latency_seconds{binary,start,end}` as a histogram (with a BY,
    /// one per value: `by`, `value`), counted in the kernel and read at
    /// each scrape. With --all, every current and future process of the
    /// binary. SIGINT or SIGTERM detaches everything.
    #[command(after_help = "\
Examples:
  sudo usdt serve --listen 127.0.0.1:9464 --all ./server
  sudo usdt serve --listen :9464 --all ./server 'http:*' --latency http:request_start,http:request_done,id
  sudo usdt serve --listen :9464 --all ./server --latency http:request_start,http:request_done,id,path --top 20

Prometheus scrapes it with
  scrape_configs:
    - job_name: usdt
      static_configs:
        - targets: ['HOST:9464']")]
    Serve(ServeArgs),
    /// Print a bpftrace program that prints hits as `usdt trace` does
    #[command(after_help = "\
Example:
  bpftrace -e \"$(usdt bpftrace ./server 'http:*')\" -c ./server")]
    Bpftrace(BpftraceArgs),
}

impl Command {
    /// The provider files given with `--types` (none for `features`).
    pub(crate) fn types(&self) -> &[PathBuf] {
        let types = match self {
            Command::Features(_) => return &[],
            Command::List(a) => &a.types,
            Command::Count(a) => &a.types,
            Command::Trace(a) => &a.types,
            Command::Latency(a) => &a.types,
            Command::Hist(a) => &a.types,
            Command::Serve(a) => &a.types,
            Command::Bpftrace(a) => &a.types,
        };
        &types.files
    }
}

/// `usdt features`.
#[derive(clap::Args, Debug)]
pub(crate) struct FeaturesArgs {
    /// Print one JSON object (its keys are described in usdt-trace's README)
    #[arg(long)]
    pub(crate) json: bool,
}

/// `usdt list`.
#[derive(Args, Debug)]
#[command(
    group(ArgGroup::new("target").required(true).args(["pid", "binary"])),
    override_usage = "usdt list [--sites] (BINARY | -p PID)"
)]
pub(crate) struct ListArgs {
    /// Also print one row per site below each probe: address, file offset,
    /// Base, semaphore, layout and argument string.
    #[arg(long)]
    pub(crate) sites: bool,
    /// List every file process PID maps, with semaphore values.
    #[arg(short, long, value_name = "PID", value_parser = parse_pid, allow_hyphen_values = true)]
    pub(crate) pid: Option<u32>,
    /// The ELF file (program or shared library) to read.
    #[arg(value_name = "BINARY")]
    pub(crate) binary: Option<String>,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// Where on a site the uprobe goes (`--attach`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Attach {
    /// Location + 1 where this kernel optimizes the site's long nop and a
    /// forked child survives an optimized hit, else Location
    #[default]
    Auto,
    /// Always Location (the first nop), as tools that do not know nop5 do
    Nop,
    /// Always Location + 1 (the long nop); refused on a site without one
    Next,
}

impl From<Attach> for AttachPoint {
    fn from(a: Attach) -> AttachPoint {
        match a {
            Attach::Auto => AttachPoint::Auto,
            Attach::Nop => AttachPoint::Nop,
            Attach::Next => AttachPoint::Next,
        }
    }
}

/// The target of `count`, `latency`, `hist`, `serve` and `trace`: exactly
/// one of a running process, every process of a binary, or a command
/// started with the uprobes in place ([`TargetArgs::place`]).
#[derive(Args, Clone, Debug, Default)]
#[group(id = "target", required = true, multiple = false)]
pub(crate) struct TargetArgs {
    /// The running process PID (every file it maps, deleted files too, and
    /// the programs it executes).
    #[arg(short, long, value_name = "PID", value_parser = parse_pid, allow_hyphen_values = true)]
    pub(crate) pid: Option<u32>,
    /// Every process that runs BINARY (or maps it, for a library), now or
    /// later, and those of a new file put at its path later.
    #[arg(long, value_name = "BINARY")]
    pub(crate) all: Option<PathBuf>,
    /// The command to start with the uprobes in place (its program and the
    /// shared libraries it loads, in its own process only: not in the
    /// processes it forks, which --all BINARY covers); usdt exits with its
    /// status. A command without probes of its own (a script, a shim, env,
    /// nice, sh -c) is started all the same: the probes of the programs it
    /// and the processes it forks execute are attached at each exec.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `--attach` and `--force-sites`, as every command that attaches takes
/// them.
#[derive(Args, Clone, Copy, Debug, Default)]
pub(crate) struct SiteArgs {
    /// Where on each site the uprobe goes.
    #[arg(long, value_enum, value_name = "POINT", default_value_t)]
    pub(crate) attach: Attach,
    /// Attach sites that are refused otherwise: a Location outside the
    /// file's code or not on a nop, a semaphore outside its writable data
    /// (the kernel then writes there all the same).
    #[arg(long)]
    pub(crate) force_sites: bool,
}

/// `--types FILE.d`, as every command that shows or reads arguments takes
/// it.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct TypesArgs {
    /// Take argument names and types from this DTrace provider file
    /// (`provider p { probe q(const char *query, int n); };`), over the
    /// built-in catalog's; repeatable. A binary's own signature records
    /// still win.
    #[arg(long = "types", value_name = "FILE.d")]
    pub(crate) files: Vec<PathBuf>,
}

/// Where the hits come from: [`TargetArgs`] once clap has checked that
/// exactly one is given.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    /// A running process.
    Process(u32),
    /// Every process that runs (or maps) a file, now or later.
    All(PathBuf),
    /// A command started with the uprobes in place.
    Command(Vec<OsString>),
}

impl TargetArgs {
    /// The one target given.
    pub(crate) fn place(&self) -> Place {
        match (self.pid, &self.all) {
            (Some(pid), _) => Place::Process(pid),
            (None, Some(all)) => Place::All(all.clone()),
            (None, None) => Place::Command(self.command.clone()),
        }
    }
}

/// `usdt count`.
#[derive(Args, Debug)]
#[command(
    override_usage = "usdt count [OPTIONS] [PROBE-GLOB]... (-p PID | --all BINARY | -- COMMAND [ARGS]...)"
)]
pub(crate) struct CountArgs {
    /// Also print the counts every SECONDS (0.001 to 86400).
    #[arg(short, long, value_name = "SECONDS", value_parser = parse_interval, allow_hyphen_values = true)]
    pub(crate) interval: Option<Duration>,
    /// Where and whether each site gets its uprobe.
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// What counts (default: $USDT_COUNT_ENGINE, else auto).
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub(crate) engine: Option<EngineChoice>,
    /// Stop after SECONDS and print the counts.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) duration: Option<Duration>,
    /// Count per value of argument ARG (`argN` or a parameter's name; a
    /// string parameter counts its strings), in the kernel; prints the
    /// --top values. `--by stack` counts per user stack instead and prints
    /// folded stacks (`root;...;leaf COUNT`, a flame graph's input).
    #[arg(long, value_name = "ARG")]
    pub(crate) by: Option<String>,
    /// With --by stack: also draw the flame graph as an SVG picture.
    #[arg(long, value_name = "FILE", requires = "by")]
    pub(crate) svg: Option<PathBuf>,
    /// With --by: read ARG as the address of a NUL-terminated string (for
    /// probes without a signature record).
    #[arg(long, requires = "by")]
    pub(crate) string: bool,
    /// With --by: how many values to print, the most counted first.
    #[arg(long, value_name = "N", default_value_t = 10, requires = "by")]
    pub(crate) top: usize,
    /// Count only the hits for which EXPR holds, tested in the kernel
    /// (`status >= 500`, `path == "/api"`, `path ^= "/api/"`, `and`, `or`,
    /// `not`, parentheses; names from the probe's signature, or argN).
    #[arg(long = "if", value_name = "EXPR", value_parser = parse_if, allow_hyphen_values = true)]
    pub(crate) filter: Option<Filter>,
    /// The probes to count (provider:name, with * and ?); none: every probe.
    #[arg(value_name = "PROBE-GLOB")]
    pub(crate) globs: Vec<String>,
    /// The process, binary or command whose probes are used.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// `usdt latency`.
#[derive(Args, Debug)]
#[command(
    override_usage = "usdt latency [OPTIONS] START END (-p PID | --all BINARY | -- COMMAND [ARGS]...)"
)]
pub(crate) struct LatencyArgs {
    /// The probe that starts (provider:name).
    #[arg(value_name = "START")]
    pub(crate) start: String,
    /// The probe that ends (provider:name).
    #[arg(value_name = "END")]
    pub(crate) end: String,
    /// What pairs an END with its START: `tid` (the default), `argN`, or a
    /// parameter's name from the probes' signature records.
    #[arg(long, value_name = "ARG")]
    pub(crate) key: Option<String>,
    /// A histogram per value of START's argument ARG (`argN`, a parameter's
    /// name, or `str(argN)` for a string at that address; strings by their
    /// first 64 bytes), kept in the kernel; prints the --top values and the
    /// rest summed as other.
    #[arg(long, value_name = "ARG")]
    pub(crate) by: Option<String>,
    /// With --by: how many values to print, each with its histogram.
    #[arg(long, value_name = "N", default_value_t = 10, requires = "by")]
    pub(crate) top: usize,
    /// With --by: the values printed first: the most pairs, or the longest
    /// p99.
    #[arg(
        long,
        value_enum,
        value_name = "ORDER",
        default_value_t,
        requires = "by"
    )]
    pub(crate) sort: Sort,
    /// Time only the pairs whose START and END both pass EXPR (names each
    /// probe has).
    #[arg(long = "if", value_name = "EXPR", value_parser = parse_if, allow_hyphen_values = true, conflicts_with_all = ["if_start", "if_end"])]
    pub(crate) filter: Option<Filter>,
    /// Keep only the STARTs for which EXPR holds (the END of a START left
    /// out is an unmatched end).
    #[arg(long = "if-start", id = "if_start", value_name = "EXPR", value_parser = parse_if_start, allow_hyphen_values = true)]
    pub(crate) if_start: Option<Filter>,
    /// Time only the pairs whose END passes EXPR (an END that fails forgets
    /// its START).
    #[arg(long = "if-end", id = "if_end", value_name = "EXPR", value_parser = parse_if_end, allow_hyphen_values = true)]
    pub(crate) if_end: Option<Filter>,
    /// One JSON object: count, unmatched, lost_starts, buckets, p50_ns,
    /// p90_ns, p99_ns, max_ns (with --by, after one per value printed and
    /// one for the others).
    #[arg(long)]
    pub(crate) json: bool,
    /// Also draw the histogram as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Stop after SECONDS and print the histogram.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) duration: Option<Duration>,
    /// Where and whether each site gets its uprobe.
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// The process, binary or command whose probes are used.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// `usdt hist`.
#[derive(Args, Debug)]
#[command(
    override_usage = "usdt hist [OPTIONS] PROBE-GLOB ARG (-p PID | --all BINARY | -- COMMAND [ARGS]...)"
)]
pub(crate) struct HistArgs {
    /// The probe (provider:name, with * and ?).
    #[arg(value_name = "PROBE-GLOB")]
    pub(crate) probe: String,
    /// The argument: `argN` or a parameter's name.
    #[arg(value_name = "ARG")]
    pub(crate) arg: String,
    /// Put only the hits for which EXPR holds in the histogram, tested in
    /// the kernel.
    #[arg(long = "if", value_name = "EXPR", value_parser = parse_if, allow_hyphen_values = true)]
    pub(crate) filter: Option<Filter>,
    /// One JSON object: count, sum, max, buckets, p50, p90, p99.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also draw the histogram as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Stop after SECONDS and print the histogram.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) duration: Option<Duration>,
    /// Where and whether each site gets its uprobe.
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// The process, binary or command whose probes are used.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// `usdt serve`.
#[derive(Args, Debug)]
#[command(
    override_usage = "usdt serve --listen ADDR [OPTIONS] [PROBE-GLOB]... (-p PID | --all BINARY | -- COMMAND [ARGS]...)"
)]
pub(crate) struct ServeArgs {
    /// The address to serve /metrics on: HOST:PORT, or :PORT for every
    /// interface.
    #[arg(long, value_name = "ADDR", required = true)]
    pub(crate) listen: String,
    /// A latency histogram from START to END, paired by KEY (the thread
    /// by default, or empty; argN or a parameter name), and with BY one
    /// series per value of START's argument BY (the --top values, the rest
    /// as value="other"); repeatable.
    #[arg(long, value_name = "START,END[,KEY[,BY]]", value_parser = parse_latency_option)]
    pub(crate) latency: Vec<LatencyOption>,
    /// With a --latency BY: how many values get a series of their own (the
    /// first seen, most pairs first; the others are summed in
    /// value="other").
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) top: usize,
    /// Count only the hits for which EXPR holds, tested in the kernel (the
    /// latencies are not filtered).
    #[arg(long = "if", value_name = "EXPR", value_parser = parse_if, allow_hyphen_values = true)]
    pub(crate) filter: Option<Filter>,
    /// Where and whether each site gets its uprobe.
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// Stop after SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) duration: Option<Duration>,
    /// The probes whose hits are counted (provider:name, with * and ?);
    /// none: every probe.
    #[arg(value_name = "PROBE-GLOB")]
    pub(crate) globs: Vec<String>,
    /// The process, binary or command whose probes are used.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// A `--latency` of `usdt serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LatencyOption {
    pub(crate) start: String,
    pub(crate) end: String,
    /// The key (none: the thread).
    pub(crate) key: Option<String>,
    /// The start argument whose values get series of their own.
    pub(crate) by: Option<String>,
}

/// `START,END[,KEY[,BY]]` (an empty KEY before a BY: the thread).
fn parse_latency_option(v: &str) -> Result<LatencyOption, String> {
    let bad = || {
        format!(
            "--latency takes START,END[,KEY[,BY]], such as 'http:request_start,http:request_done,id,path', not \"{v}\""
        )
    };
    let parts: Vec<&str> = v.split(',').collect();
    let (start, end, key, by) = match parts[..] {
        [s, e] => (s, e, None, None),
        [s, e, k] if !k.is_empty() => (s, e, Some(k), None),
        [s, e, k, b] if !b.is_empty() => (s, e, Some(k).filter(|k| !k.is_empty()), Some(b)),
        _ => return Err(bad()),
    };
    if !start.contains(':') || !end.contains(':') {
        return Err(bad());
    }
    Ok(LatencyOption {
        start: start.into(),
        end: end.into(),
        key: key.map(Into::into),
        by: by.map(Into::into),
    })
}

/// The order of `latency --by`'s values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Sort {
    /// The most pairs first
    #[default]
    Count,
    /// The longest 99th percentile first
    P99,
}

/// `--if EXPR`: a malformed filter is refused with its column, before
/// anything runs.
fn parse_if(v: &str) -> Result<Filter, String> {
    filter_for("--if", v)
}

fn parse_if_start(v: &str) -> Result<Filter, String> {
    filter_for("--if-start", v)
}

fn parse_if_end(v: &str) -> Result<Filter, String> {
    filter_for("--if-end", v)
}

fn filter_for(flag: &str, v: &str) -> Result<Filter, String> {
    Filter::parse(v).map_err(|e| format!("{flag}: {e}"))
}

/// `usdt trace`.
#[derive(Args, Debug)]
#[command(
    override_usage = "usdt trace [OPTIONS] [PROBE-GLOB]... (-p PID | --all BINARY | -- COMMAND [ARGS]...)"
)]
pub(crate) struct TraceArgs {
    /// Show argument N (from 0) of the probes PROBE-GLOB matches as a string
    /// read at the hit (for probes without a signature); repeatable.
    #[arg(long = "str", value_name = "PROBE-GLOB:N", value_parser = parse_str_option, allow_hyphen_values = true)]
    pub(crate) strings: Vec<(String, usize)>,
    /// One JSON object per hit: time_ns, pid, tid, probe, args.
    #[arg(long)]
    pub(crate) json: bool,
    /// arg0=N... even for probes with a signature.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Print each hit's user stack below it, innermost frame first (in
    /// JSON: "stack"), unwound with each file's DWARF call frame
    /// information: no frame pointers needed. Samples with perf events.
    #[arg(long)]
    pub(crate) stack: bool,
    /// Stop after N hits (the command then runs on, untraced).
    #[arg(long, value_name = "N", value_parser = parse_limit, allow_hyphen_values = true)]
    pub(crate) limit: Option<u64>,
    /// Print only the hits for which EXPR holds (`status >= 500`, `path ^=
    /// "/api/"`, and, or, not; names from the probe's signature, or argN):
    /// tested by the BPF program at the hit, or with perf events in usdt
    /// after each hit is read.
    #[arg(long = "if", value_name = "EXPR", value_parser = parse_if, allow_hyphen_values = true)]
    pub(crate) filter: Option<Filter>,
    /// Where and whether each site gets its uprobe.
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// Read memory operands from the stack copy of each sample instead of
    /// having the kernel or the BPF program read them at the hit (with perf
    /// events: tracefs uprobe events do).
    // `--no-tracefs`: the flag's first name, kept for existing scripts.
    #[arg(long, alias = "no-tracefs")]
    pub(crate) no_kernel_fetch: bool,
    /// What samples (default: $USDT_TRACE_ENGINE, else auto).
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub(crate) engine: Option<EngineChoice>,
    /// The probes to trace (provider:name, with * and ?); none: every probe.
    #[arg(value_name = "PROBE-GLOB")]
    pub(crate) globs: Vec<String>,
    /// The process, binary or command whose probes are used.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

/// `usdt bpftrace`.
#[derive(Args, Debug)]
pub(crate) struct BpftraceArgs {
    /// The ELF file whose probes the program attaches to.
    #[arg(value_name = "BINARY")]
    pub(crate) binary: PathBuf,
    /// The probes to print (provider:name, with * and ?); none: every probe.
    #[arg(value_name = "PROBE-GLOB")]
    pub(crate) globs: Vec<String>,
    /// Argument names and types from provider files.
    #[command(flatten)]
    pub(crate) types: TypesArgs,
}

fn parse_pid(v: &str) -> Result<u32, String> {
    v.parse()
        .ok()
        .filter(|p| *p > 0 && *p <= i32::MAX as u32)
        .ok_or_else(|| format!("\"{v}\" is not a process id"))
}

/// Seconds, at least a millisecond and at most a day.
fn parse_interval(v: &str) -> Result<Duration, String> {
    let secs: f64 = v
        .parse()
        .map_err(|_| format!("the interval is a number of seconds, not \"{v}\""))?;
    if !(0.001..=86_400.0).contains(&secs) {
        return Err(format!(
            "the interval is between 0.001 and 86400 seconds, not \"{v}\""
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_duration(v: &str) -> Result<Duration, String> {
    let bad = || format!("the duration is a positive number of seconds, not \"{v}\"");
    let secs: f64 = v
        .parse()
        .ok()
        .filter(|s: &f64| *s > 0.0 && s.is_finite())
        .ok_or_else(bad)?;
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

fn parse_limit(v: &str) -> Result<u64, String> {
    v.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("the limit is a positive number of hits, not \"{v}\""))
}

/// `PROBE-GLOB:N`, split at the last colon.
fn parse_str_option(v: &str) -> Result<(String, usize), String> {
    let bad = || format!("--str takes PROBE-GLOB:N, such as 'http:request_start:1', not \"{v}\"");
    let (glob, n) = v.rsplit_once(':').ok_or_else(bad)?;
    let n: usize = n.parse().map_err(|_| bad())?;
    if !glob.contains(':') || n >= usdt_trace::MAX_ARGS {
        return Err(bad());
    }
    Ok((glob.into(), n))
}

/// What to print for a command line clap refused, and the exit status:
/// help and version on stdout (0); a value that fails its check as the
/// one plain sentence of that check; other mistakes as clap words them
/// (with the closest flag or value, and the usage), after `usdt:`.
pub(crate) fn refused(e: &clap::Error) -> (String, bool, i32) {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => (e.to_string(), false, 0),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => (e.to_string(), true, 1),
        ErrorKind::ValueValidation => match std::error::Error::source(e) {
            Some(source) => (format!("usdt: {source}\n"), true, 1),
            None => (prefixed(e), true, 1),
        },
        ErrorKind::InvalidValue => (invalid_value(e).unwrap_or_else(|| prefixed(e)), true, 1),
        _ => (prefixed(e), true, 1),
    }
}

/// clap's message with `usdt:` for its `error:`.
fn prefixed(e: &clap::Error) -> String {
    let text = e.to_string();
    match text.strip_prefix("error: ") {
        Some(rest) => format!("usdt: {rest}"),
        None => format!("usdt: {text}"),
    }
}

/// `usdt: --attach takes auto, nop or next, not "middle"`, with the
/// closest value when there is one: one line.
fn invalid_value(e: &clap::Error) -> Option<String> {
    let string = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let arg = string(ContextKind::InvalidArg)?;
    let arg = arg.split(' ').next().unwrap_or(&arg).to_string();
    let value = string(ContextKind::InvalidValue)?;
    let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) else {
        return None;
    };
    let list = match valid.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => return None,
    };
    let near = match e.get(ContextKind::SuggestedValue) {
        Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
        _ => String::new(),
    };
    Some(format!("usdt: {arg} takes {list}, not \"{value}\"{near}\n"))
}

impl Cli {
    /// Parses the command line; `Err` carries what to print and the exit
    /// status.
    pub(crate) fn parse_args(args: Vec<OsString>) -> Result<Cli, (String, bool, i32)> {
        Cli::try_parse_from(args).map_err(|e| refused(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, (String, bool, i32)> {
        let mut all = vec![OsString::from("usdt")];
        all.extend(args.iter().map(OsString::from));
        Cli::parse_args(all)
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn values_are_checked_in_one_sentence() {
        let (text, _, code) = parse(&["count", "--interval", "x", "-p", "1"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: the interval is a number of seconds, not \"x\"\n"
        );
        assert_eq!(code, 1);
        let (text, ..) = parse(&["count", "-p", "-1"]).unwrap_err();
        assert_eq!(text, "usdt: \"-1\" is not a process id\n");
        let (text, ..) = parse(&["count", "--attach", "middle", "--", "x"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: --attach takes auto, nop or next, not \"middle\"\n"
        );
        let (text, ..) = parse(&["count", "--engine", "bfp", "-p", "1"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: --engine takes auto, bpf or perf, not \"bfp\"\n"
        );
        let (text, ..) = parse(&["trace", "--attach", "nex", "-p", "1"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: --attach takes auto, nop or next, not \"nex\" (did you mean next?)\n"
        );
    }

    #[test]
    fn a_mistyped_flag_gets_the_closest() {
        let (text, to_stderr, code) = parse(&["list", "--sitse", "x"]).unwrap_err();
        assert!(
            text.starts_with("usdt: unexpected argument '--sitse'"),
            "{text}"
        );
        assert!(text.contains("'--sites'"), "{text}");
        assert!(to_stderr);
        assert_eq!(code, 1);
    }

    #[test]
    fn help_and_version_exit_0() {
        for args in [
            &["--help"][..],
            &["--version"],
            &["count", "--help"],
            &["trace", "--help"],
            &["list", "--help"],
            &["help", "count"],
        ] {
            let (text, to_stderr, code) = parse(args).unwrap_err();
            assert_eq!((to_stderr, code), (false, 0), "{args:?}: {text}");
        }
    }

    #[test]
    fn exactly_one_target() {
        assert!(parse(&["count", "-p", "1", "--", "x"]).is_err());
        assert!(parse(&["count", "http:*"]).is_err());
        assert!(parse(&["trace", "--all", "x", "-p", "1"]).is_err());
        assert!(parse(&["trace", "p:n"]).is_err());
        let cli = parse(&["count", "a:*", "-p", "7", "b:?"]).unwrap();
        let Command::Count(c) = cli.command else {
            panic!()
        };
        assert_eq!(
            (c.target.pid, c.globs),
            (Some(7), vec!["a:*".into(), "b:?".into()])
        );
        let cli = parse(&["trace", "--all", "/bin/x", "p:*"]).unwrap();
        let Command::Trace(t) = cli.command else {
            panic!()
        };
        assert!(matches!(t.target.place(), Place::All(p) if p.as_os_str() == "/bin/x"));
        let cli = parse(&["trace", "--str", "p:n:1", "--", "prog", "-x", "--y"]).unwrap();
        let Command::Trace(t) = cli.command else {
            panic!()
        };
        assert_eq!(t.strings, vec![("p:n".to_string(), 1)]);
        assert_eq!(t.target.command, ["prog", "-x", "--y"]);
    }

    #[test]
    fn latency_options_are_start_end_and_key() {
        let option = |key: Option<&str>, by: Option<&str>| LatencyOption {
            start: "a:s".into(),
            end: "a:e".into(),
            key: key.map(Into::into),
            by: by.map(Into::into),
        };
        assert_eq!(parse_latency_option("a:s,a:e"), Ok(option(None, None)));
        assert_eq!(
            parse_latency_option("a:s,a:e,id"),
            Ok(option(Some("id"), None))
        );
        assert_eq!(
            parse_latency_option("a:s,a:e,id,path"),
            Ok(option(Some("id"), Some("path")))
        );
        assert_eq!(
            parse_latency_option("a:s,a:e,,path"),
            Ok(option(None, Some("path")))
        );
        assert!(parse_latency_option("a:s").is_err());
        assert!(parse_latency_option("a:s,a:e,").is_err());
        assert!(parse_latency_option("a:s,a:e,id,").is_err());
        let (text, ..) = parse(&["serve", "--all", "x"]).unwrap_err();
        assert!(text.contains("--listen"), "{text}");
        assert!(parse(&["count", "--top", "3", "-p", "1"]).is_err());
        assert!(parse(&["latency", "a:s", "a:e", "-p", "1", "--", "x"]).is_err());
    }

    #[test]
    fn a_malformed_filter_is_refused_with_its_column() {
        let (text, _, code) = parse(&["count", "--if", "status >=", "-p", "1"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: --if: column 10: expected a number or a \"string\" after `>=`, found the end\n"
        );
        assert_eq!(code, 1);
        let (text, ..) =
            parse(&["latency", "a:s", "a:e", "--if-end", "x = 1", "-p", "1"]).unwrap_err();
        assert_eq!(
            text,
            "usdt: --if-end: column 3: `=` alone assigns; compare with `==`\n"
        );
        assert!(parse(&[
            "latency", "a:s", "a:e", "--if", "x == 1", "--if-end", "y == 1", "-p", "1"
        ])
        .is_err());
        let cli = parse(&["trace", "--if", "-1 < a", "-p", "1"]).unwrap();
        let Command::Trace(t) = cli.command else {
            panic!()
        };
        assert_eq!(
            t.filter.map(|f| f.text().to_string()),
            Some("-1 < a".into())
        );
    }

    #[test]
    fn no_tracefs_still_means_no_kernel_fetch() {
        for flag in ["--no-kernel-fetch", "--no-tracefs"] {
            let cli = parse(&["trace", flag, "-p", "1"]).unwrap();
            let Command::Trace(t) = cli.command else {
                panic!()
            };
            assert!(t.no_kernel_fetch, "{flag}");
        }
        let (help, ..) = parse(&["trace", "--help"]).unwrap_err();
        assert!(help.contains("--no-kernel-fetch"), "{help}");
        assert!(
            !help.contains("--no-tracefs"),
            "the old name is hidden: {help}"
        );
    }
}
