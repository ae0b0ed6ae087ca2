//! Sampling attach mode: every hit of a uprobe writes the user registers the
//! note's operands name, the pid and thread id, a timestamp and (for sites
//! that read memory) a copy of the user stack into a perf ring buffer, and
//! [`Sampler`] decodes each probe argument from its note operand.
//!
//! - A register operand is read at its width and sign from the sampled
//!   registers: exact.
//! - An immediate (`$5`) is the note's constant: exact.
//! - A float (`4f@`, `8f@`) is decoded as an `f32` or `f64` ([`Value::F32`],
//!   [`Value::F64`]); a 16 or 24-byte value (a struct or `__int128` passed
//!   by value) is kept as its bytes ([`Value::Bytes`]).
//! - An argument the note reader could not read ([`Operand::Unreadable`]:
//!   `%xmm0`, a stripped symbol) is [`Value::Unavailable`], with the reason.
//! - An indexed operand (`8@(%rdx,%rax,8)`) is computed from the sampled
//!   registers and read like a memory operand below; a symbol's operand
//!   (`sym(%rip)`) is at the symbol's address plus the load bias, which the
//!   sampled instruction pointer gives (the uprobe's address in the process
//!   minus its link-time address).
//! - A site with memory operands (`disp(%reg)`, symbols) or string arguments (see
//!   [`Sampler::string_arg`]) gets, when tracefs is mounted and writable, a
//!   uprobe event defined in `uprobe_events` whose fetch arguments make the
//!   kernel read them at the hit (`-8(%sp):u64`, `+0(%di):string`, a
//!   symbol as `@+FILE_OFFSET:u64`) into the
//!   sample's raw record: exact, including GCC's red-zone operands
//!   (`-8@-16(%rsp)`) and strings freed right after the probe. The kernel
//!   does not fault pages in: a string it could not read is read from the
//!   process instead (racy).
//! - Without tracefs (or with [`Sampler::kernel_fetch`] off), the sample
//!   carries a copy of the stack from the stack pointer upward
//!   (`PERF_SAMPLE_STACK_USER`): a memory operand or string inside it is read
//!   from the copy, exact (Rust probes stage `&str` copies on the probing
//!   frame's stack); anything else, the red zone below the stack pointer
//!   included, is read from the process with `process_vm_readv` when the
//!   sample is decoded, after the fact: racy, it may see a newer value or
//!   none (the process exited).
//!
//! All sites share one ring buffer per CPU (with [`Sampler::per_cpu`]) or
//! one per traced thread (the events are then per thread, on any CPU). Lost samples
//! (`PERF_RECORD_LOST`, written when a ring is full) are counted in
//! [`Sampler::lost`], never dropped silently.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::arg::{Arg, Operand, Reg, Reg64, RegWidth};
use crate::attach::{
    attach_error, online_cpus, open_uprobe, path_cstring, perf_event_open, Uprobe,
};
use crate::glob::glob_match;
use crate::note::Site;
use crate::perf::ring::{Ring, RECORD_LOST, RECORD_SAMPLE};
use crate::perf::{
    self, SAMPLE_IDENTIFIER, SAMPLE_RAW, SAMPLE_REGS_USER, SAMPLE_STACK_USER, SAMPLE_TID,
    SAMPLE_TIME, TYPE_TRACEPOINT,
};
use crate::tracefs::{data_loc_string, DynEvent, Field};
use crate::{AttachPoint, Error, KernelFeatures, Target};

/// The longest string read for a string argument, in bytes (without its
/// NUL): the same bound as the Rust probes' staged copies.
pub const STRING_MAX: usize = 255;

/// How many bytes of a byte-slice argument ([`Sampler::bytes_arg`]) are
/// read at the hit.
pub const BYTES_FETCH: usize = 64;

/// The stack bytes each sample copies by default, for sites that read memory.
pub const DEFAULT_STACK_BYTES: u32 = 8192;

/// The ring buffer data pages per traced target by default (16 MiB with
/// 4 KiB pages), split between the CPUs when the events are per CPU.
pub const DEFAULT_RING_PAGES: usize = 4096;

/// The fewest data pages of a per-CPU ring buffer.
const MIN_CPU_RING_PAGES: usize = 256;

/// A decoded argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    /// An integer, signed or unsigned as the note says (`i128` holds both
    /// `i64` and `u64` exactly).
    Int(i128),
    /// A NUL-terminated string, without its NUL.
    Str {
        /// The bytes.
        bytes: Vec<u8>,
        /// Whether it went on past [`STRING_MAX`] bytes (only those were read).
        truncated: bool,
    },
    /// Memory the argument points at could not be read (the address).
    Unreadable(u64),
    /// A 4-byte float (`4f@`), as its bits (so that values compare exactly).
    F32(u32),
    /// An 8-byte float (`8f@`), as its bits.
    F64(u64),
    /// A 16 or 24-byte value (a struct or `__int128` passed by value), as
    /// the bytes in memory order.
    Bytes(Vec<u8>),
    /// The argument cannot be read: why (`xmm registers are not sampled`).
    Unavailable(String),
}

impl Value {
    /// The integer, if this is one.
    pub fn int(&self) -> Option<i128> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The float, if this is one.
    pub fn float(&self) -> Option<f64> {
        match self {
            Value::F32(bits) => Some(f32::from_bits(*bits).into()),
            Value::F64(bits) => Some(f64::from_bits(*bits)),
            _ => None,
        }
    }

    /// The string's bytes, if this is a string.
    pub fn str_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Str { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

macro_rules! value_from_int {
    ($($t:ty)*) => {$(
        impl From<$t> for Value {
            fn from(n: $t) -> Value {
                Value::Int(n as i128)
            }
        }
    )*};
}
value_from_int!(u8 u16 u32 u64 usize i8 i16 i32 i64 isize bool);

impl From<f32> for Value {
    fn from(x: f32) -> Value {
        Value::F32(x.to_bits())
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::F64(x.to_bits())
    }
}

impl From<char> for Value {
    fn from(c: char) -> Value {
        Value::Int(c as i128)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str {
            bytes: s.as_bytes().to_vec(),
            truncated: false,
        }
    }
}

/// Integers in decimal, floats as Rust prints them (`1.5`, `-3.25`, `NaN`),
/// strings quoted with C-style escapes (`"a\"b\n\x01"`) and `...` after a
/// truncated one, bytes in hex after `hex:`, unreadable memory as
/// `<unreadable 0x..>`, an argument that cannot be read as `? (why)`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // 64-bit formatting is much faster than i128's.
            Value::Int(n) => match (i64::try_from(*n), u64::try_from(*n)) {
                (Ok(i), _) => write!(f, "{i}"),
                (_, Ok(u)) => write!(f, "{u}"),
                _ => write!(f, "{n}"),
            },
            Value::Str { bytes, truncated } => {
                f.write_str("\"")?;
                for &b in bytes {
                    match b {
                        b'"' => f.write_str("\\\"")?,
                        b'\\' => f.write_str("\\\\")?,
                        b'\n' => f.write_str("\\n")?,
                        b'\t' => f.write_str("\\t")?,
                        b'\r' => f.write_str("\\r")?,
                        0x20..=0x7e => write!(f, "{}", b as char)?,
                        _ => write!(f, "\\x{b:02x}")?,
                    }
                }
                f.write_str(if *truncated { "\"..." } else { "\"" })
            }
            Value::Unreadable(addr) => write!(f, "<unreadable {addr:#x}>"),
            Value::F32(bits) => write!(f, "{}", f32::from_bits(*bits)),
            Value::F64(bits) => write!(f, "{}", f64::from_bits(*bits)),
            Value::Bytes(bytes) => {
                f.write_str("hex:")?;
                bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Value::Unavailable(why) => write!(f, "? ({why})"),
        }
    }
}

/// One probe hit with its decoded arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// When it fired: `CLOCK_MONOTONIC` nanoseconds.
    pub time_ns: u64,
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The provider.
    pub provider: Arc<str>,
    /// The probe name.
    pub name: Arc<str>,
    /// The arguments, in note order.
    pub args: Vec<Value>,
}

impl Hit {
    /// `provider:name`.
    pub fn probe(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }

    /// Whether this is a hit of `provider:name`.
    pub fn is(&self, probe: &str) -> bool {
        probe.split_once(':') == Some((&self.provider, &self.name))
    }
}

/// `arg0=V arg1=V ...`
impl fmt::Display for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "arg{i}={v}")?;
        }
        Ok(())
    }
}

/// perf's number of an x86-64 register (the sampler decodes x86-64
/// registers only).
fn perf_reg(reg: Reg64) -> Option<u32> {
    crate::arch::x86_64::register(reg).map(|r| r.perf)
}
const PERF_REG_SP: u32 = crate::arch::x86_64::PERF_SP;
const PERF_REG_IP: u32 = crate::arch::x86_64::PERF_IP;

/// How to decode the samples of one site.
#[derive(Debug)]
struct Plan {
    provider: Arc<str>,
    name: Arc<str>,
    args: Vec<Arg>,
    /// Which arguments are string pointers.
    strings: Vec<bool>,
    /// Which arguments are the addresses of byte slices (the length is the
    /// next argument): [`BYTES_FETCH`] bytes are read at the hit.
    bytes: Vec<bool>,
    /// `sample_regs_user`.
    regs_mask: u64,
    /// `sample_stack_user` (0: no stack copy).
    stack_bytes: u32,
    /// Read by the kernel at the hit (a tracefs uprobe event): where each
    /// value and string is in the raw record.
    raw: Option<RawPlan>,
    /// The link-time address of the uprobe: the sampled instruction pointer
    /// minus this is the load bias.
    attach_addr: u64,
}

/// The fields of a tracefs uprobe event's raw record, per argument.
#[derive(Clone, Debug)]
struct RawPlan {
    values: Vec<Option<Field>>,
    strings: Vec<Option<Field>>,
    bytes: Vec<Option<Field>>,
}

impl Plan {
    fn new(site: &Site, strings: Vec<bool>, stack_bytes: u32) -> Result<Plan, Error> {
        let mut mask = 1u64 << PERF_REG_SP;
        let mut memory = strings.iter().any(|s| *s);
        for arg in &site.args {
            let regs: Vec<Reg64> = match &arg.operand {
                Operand::Register(r) => vec![r.reg],
                Operand::Memory { base, .. } => vec![base.reg],
                Operand::Indexed { base, index, .. } => {
                    base.iter().chain([index]).map(|r| r.reg).collect()
                }
                Operand::Symbol { .. } => vec![Reg64::Rip],
                Operand::Immediate(_) | Operand::Unreadable { .. } => continue,
            };
            memory |= !matches!(arg.operand, Operand::Register(_));
            for reg in regs {
                let n = perf_reg(reg).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "aarch64 registers (in the arguments of {})",
                        site.probe()
                    ))
                })?;
                mask |= 1 << n;
            }
        }
        Ok(Plan {
            provider: site.provider.as_str().into(),
            name: site.name.as_str().into(),
            args: site.args.clone(),
            strings,
            bytes: vec![],
            regs_mask: mask,
            stack_bytes: if memory { stack_bytes } else { 0 },
            raw: None,
            attach_addr: site.location,
        })
    }

    /// Marks the byte-slice arguments, which read memory like strings.
    fn with_bytes(mut self, bytes: Vec<bool>, stack_bytes: u32) -> Plan {
        if bytes.iter().any(|b| *b) {
            self.stack_bytes = stack_bytes;
        }
        self.bytes = bytes;
        self
    }

    /// The sampled value of perf register `n`.
    fn reg(&self, regs: &[u64], n: u32) -> u64 {
        let slot = (self.regs_mask & ((1u64 << n) - 1)).count_ones() as usize;
        regs.get(slot).copied().unwrap_or(0)
    }
}

/// A sample's registers and stack copy, and the process to read the rest from.
struct Context<'a> {
    pid: u32,
    regs: &'a [u64],
    sp: u64,
    stack: &'a [u8],
}

impl Context<'_> {
    /// `len` bytes at `addr`: from the stack copy when they lie inside it,
    /// else from the process.
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if let Some(bytes) = self.in_stack(addr, len) {
            return Some(bytes.to_vec());
        }
        let mut buf = vec![0u8; len];
        (read_process_memory(self.pid, addr, &mut buf) == len).then_some(buf)
    }

    fn in_stack(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        self.stack.get(start..start.checked_add(len)?)
    }

    /// The NUL-terminated string at `addr`, at most [`STRING_MAX`] bytes.
    fn string(&self, addr: u64) -> Value {
        if addr == 0 {
            return Value::Unreadable(0);
        }
        let in_stack = self
            .in_stack(addr, 1)
            .map(|_| &self.stack[(addr - self.sp) as usize..]);
        let bytes = match in_stack {
            Some(s) if s.iter().take(STRING_MAX + 1).any(|b| *b == 0) => s.to_vec(),
            _ => {
                let mut buf = vec![0u8; STRING_MAX + 1];
                let n = read_process_memory(self.pid, addr, &mut buf);
                if n == 0 {
                    return Value::Unreadable(addr);
                }
                buf.truncate(n);
                buf
            }
        };
        let end = bytes.iter().position(|b| *b == 0);
        let len = end.unwrap_or(bytes.len()).min(STRING_MAX);
        Value::Str {
            bytes: bytes[..len].to_vec(),
            truncated: end.is_none_or(|e| e > STRING_MAX),
        }
    }
}

/// Reads as much of `buf.len()` bytes at `addr` of process `pid` as is
/// mapped; returns how many were read.
fn read_process_memory(pid: u32, addr: u64, buf: &mut [u8]) -> usize {
    // Split the remote range at page boundaries: the call stops at the
    // first unreadable page and returns what it read before it.
    let page = usdt_runtime::page_size();
    let mut remote = vec![];
    let mut at = addr;
    let end = addr.saturating_add(buf.len() as u64);
    while at < end {
        let next = ((at / page) + 1).saturating_mul(page).min(end);
        remote.push(libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: (next - at) as usize,
        });
        at = next;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is writable for its length; the
    // remote ranges are only read, by the kernel, with the usual checks.
    let n = unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            &local,
            1,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    n.max(0) as usize
}

/// Converts the low `size` bytes of `raw` to the argument's value.
fn int_value(raw: u64, size: u8, signed: bool) -> i128 {
    let bits = u32::from(size.clamp(1, 8)) * 8;
    let masked = if bits == 64 {
        raw
    } else {
        raw & ((1u64 << bits) - 1)
    };
    if signed {
        let shift = 64 - bits;
        (((masked << shift) as i64) >> shift) as i128
    } else {
        masked as i128
    }
}

/// The part of a register's value a note names.
fn register_part(v: u64, width: RegWidth) -> u64 {
    match width {
        RegWidth::Low8 => v & 0xff,
        RegWidth::High8 => (v >> 8) & 0xff,
        RegWidth::W16 => v & 0xffff,
        RegWidth::W32 => v & 0xffff_ffff,
        RegWidth::W64 => v,
    }
}

/// An argument's value from its little-endian bytes (`arg.size` of them,
/// or a register's 8).
fn value_of(arg: &Arg, bytes: &[u8]) -> Value {
    let size = usize::from(arg.size);
    if size > 8 {
        return Value::Bytes(bytes[..size.min(bytes.len())].to_vec());
    }
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    let raw = u64::from_le_bytes(word);
    match (arg.float, arg.size) {
        (true, 4) => Value::F32(raw as u32),
        (true, 8) => Value::F64(raw),
        _ => Value::Int(int_value(raw, arg.size, arg.signed)),
    }
}

fn decode_arg(plan: &Plan, cx: &Context<'_>, i: usize) -> Value {
    let arg = &plan.args[i];
    let reg = |r: &Reg| perf_reg(r.reg).map_or(0, |n| plan.reg(cx.regs, n));
    let addr = match &arg.operand {
        Operand::Unreadable { reason, .. } => return Value::Unavailable(reason.clone()),
        Operand::Immediate(n) => return finish(plan, cx, i, &n.to_le_bytes()),
        Operand::Register(r) => {
            let v = register_part(reg(r), r.width);
            return finish(plan, cx, i, &v.to_le_bytes());
        }
        Operand::Memory { base, disp } => reg(base).wrapping_add(*disp as u64),
        Operand::Indexed {
            base,
            index,
            scale,
            disp,
        } => base
            .as_ref()
            .map_or(0, reg)
            .wrapping_add(reg(index).wrapping_mul((*scale).into()))
            .wrapping_add(*disp as u64),
        Operand::Symbol { addr: Some(a), .. } => {
            let bias = plan
                .reg(cx.regs, PERF_REG_IP)
                .wrapping_sub(plan.attach_addr);
            a.wrapping_add(bias)
        }
        Operand::Symbol { name, .. } => {
            return Value::Unavailable(format!("symbol `{name}` was not looked up"))
        }
    };
    match cx.read(addr, arg.size.into()) {
        Some(bytes) => finish(plan, cx, i, &bytes),
        None => Value::Unreadable(addr),
    }
}

/// The value of argument `i` from its bytes, or the string it points at.
fn finish(plan: &Plan, cx: &Context<'_>, i: usize, bytes: &[u8]) -> Value {
    let value = value_of(&plan.args[i], bytes);
    match value {
        Value::Int(n) if plan.strings.get(i).copied().unwrap_or(false) => cx.string(n as u64),
        // A byte slice's first bytes, read after the hit.
        Value::Int(n) if plan.bytes.get(i).copied().unwrap_or(false) => {
            match cx.read(n as u64, BYTES_FETCH) {
                Some(bytes) => Value::Str {
                    bytes,
                    truncated: false,
                },
                None => value,
            }
        }
        value => value,
    }
}

/// Decodes argument `i` from a tracefs event's raw record.
fn decode_raw_arg(plan: &Plan, raw: &RawPlan, data: &[u8], pid: u32, i: usize) -> Value {
    let arg = &plan.args[i];
    let bytes = match (&arg.operand, raw.values[i]) {
        (Operand::Unreadable { reason, .. }, _) => return Value::Unavailable(reason.clone()),
        (Operand::Immediate(n), _) => n.to_le_bytes().to_vec(),
        (operand, Some(field)) => {
            let Some(bytes) = data.get(field.offset..field.offset + field.size) else {
                return Value::Unreadable(0);
            };
            match operand {
                Operand::Register(r) => {
                    let mut word = [0u8; 8];
                    let n = bytes.len().min(8);
                    word[..n].copy_from_slice(&bytes[..n]);
                    register_part(u64::from_le_bytes(word), r.width)
                        .to_le_bytes()
                        .to_vec()
                }
                _ => bytes.to_vec(),
            }
        }
        (_, None) => return Value::Unreadable(0),
    };
    let value = value_of(arg, &bytes);
    let Value::Int(ptr) = value else {
        return value;
    };
    // A byte slice's first bytes, read by the kernel at the hit.
    if let Some(field) = raw.bytes.get(i).copied().flatten() {
        if let Some(bytes) = data.get(field.offset..field.offset + field.size) {
            return Value::Str {
                bytes: bytes.to_vec(),
                truncated: false,
            };
        }
    }
    if !plan.strings.get(i).copied().unwrap_or(false) {
        return value;
    }
    let ptr = ptr as u64;
    match raw.strings[i].and_then(|f| data_loc_string(data, f)) {
        Some(bytes) => Value::Str {
            bytes: bytes[..bytes.len().min(STRING_MAX)].to_vec(),
            truncated: bytes.len() > STRING_MAX,
        },
        // The kernel does not fault pages in: read what it could not.
        None => Context {
            pid,
            regs: &[],
            sp: 0,
            stack: &[],
        }
        .string(ptr),
    }
}

/// Reads the fields of a sample record in order.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// One ring buffer and the event whose descriptor it is mapped from. A
/// per-CPU ring takes the samples of every task on its CPU; a ring of a
/// per-task event (CPU -1) only those of its task (the kernel's rule for
/// `PERF_EVENT_IOC_SET_OUTPUT`).
#[derive(Debug)]
struct Slot {
    target: Target,
    cpu: i32,
    owner: usize,
    ring: Ring,
}

/// Uprobes in sampling mode: attach with [`Sampler::attach`], then collect
/// decoded hits with [`Sampler::poll`] and [`Sampler::drain`]. Dropping it
/// detaches every uprobe (and the kernel lowers the semaphores again).
///
/// ```no_run
/// use std::time::Duration;
/// use usdt_trace::{read_file, AttachPoint, Sampler, Target};
///
/// let exe = "/usr/local/bin/server";
/// let sites = read_file(exe)?;
/// let mut sampler = Sampler::new(AttachPoint::Auto).string_arg("http:request_start", 1);
/// sampler.attach(exe, sites.iter().filter(|s| s.provider == "http"), Target::Pid(4242))?;
/// loop {
///     sampler.poll(Duration::from_millis(100), |hit| println!("{} {hit}", hit.probe()))?;
/// }
/// # Ok::<(), usdt_trace::Error>(())
/// ```
#[derive(Debug)]
pub struct Sampler {
    point: AttachPoint,
    features: KernelFeatures,
    per_cpu: bool,
    ring_pages: usize,
    stack_bytes: u32,
    strings: Vec<(String, usize)>,
    bytes: Vec<(String, usize)>,
    plans: Vec<Plan>,
    ids: HashMap<u64, usize>,
    kernel_fetch: bool,
    tracepoints: HashMap<(PathBuf, u64), Option<(u64, RawPlan)>>,
    /// The uprobe addresses attached, per target: one uprobe per address.
    attached: HashSet<(PathBuf, u64, Target)>,
    // Dropped in this order: unmap the rings, close the events, then remove
    // the tracefs events they used.
    slots: Vec<Slot>,
    fds: Vec<OwnedFd>,
    dyn_events: Vec<DynEvent>,
    lost: u64,
    /// Sample records read so far.
    seen: u64,
    pending: Vec<Hit>,
}

impl Sampler {
    /// A sampler that attaches at `point`, using this kernel's features.
    pub fn new(point: AttachPoint) -> Sampler {
        Sampler {
            point,
            features: crate::attach::features_for(point),
            per_cpu: false,
            ring_pages: DEFAULT_RING_PAGES,
            stack_bytes: DEFAULT_STACK_BYTES,
            strings: vec![],
            bytes: vec![],
            plans: vec![],
            ids: HashMap::new(),
            kernel_fetch: true,
            tracepoints: HashMap::new(),
            attached: HashSet::new(),
            slots: vec![],
            fds: vec![],
            dyn_events: vec![],
            lost: 0,
            seen: 0,
            pending: vec![],
        }
    }

    /// Opens the events of a [`Target::Pid`] per CPU, sharing one ring per
    /// CPU with the other threads attached, instead of one event (and one
    /// ring) per thread: for many threads.
    ///
    /// A uprobe perf event samples only the thread it was opened for. The
    /// events are never inherited by threads or children the target starts
    /// later: the kernel would set up each inherited uprobe event again,
    /// reading its path through a pointer into this process from the new
    /// task, and fail the traced program's `fork` or `pthread_create` with
    /// `EFAULT`. Attach to new threads as they appear
    /// ([`process_threads`](crate::process_threads)).
    pub fn per_cpu(mut self, per_cpu: bool) -> Sampler {
        self.per_cpu = per_cpu;
        self
    }

    /// The data pages of ring buffer per traced target (rounded up to a power
    /// of two): one ring of that size, or one per CPU sharing it (at least
    /// 256 pages each) when the events are per CPU.
    pub fn ring_pages(mut self, pages: usize) -> Sampler {
        self.ring_pages = pages.max(1);
        self
    }

    /// How many bytes of user stack each sample copies, for sites with
    /// memory operands or string arguments (rounded down to a multiple of 8;
    /// the kernel also caps it so that a sample stays under 64 KiB).
    pub fn stack_bytes(mut self, bytes: u32) -> Sampler {
        self.stack_bytes = bytes & !7;
        self
    }

    /// Reads argument `index` (from 0) of the probes matching `probe_glob`
    /// (`provider:name`, with `*` and `?`) as a pointer to a NUL-terminated
    /// string. Applies to sites attached afterwards.
    pub fn string_arg(mut self, probe_glob: &str, index: usize) -> Sampler {
        self.strings.push((probe_glob.into(), index));
        self
    }

    /// Reads argument `index` of the probes matching `probe_glob` as the
    /// address of a byte slice (whose length is argument `index + 1`): the
    /// first [`BYTES_FETCH`] bytes there are read at the hit, and the
    /// argument's value is those bytes ([`Value::Str`], not cut to the
    /// length: bytes past the slice are whatever follows it, or the
    /// argument stays the address when they cannot be read).
    pub fn bytes_arg(mut self, probe_glob: &str, index: usize) -> Sampler {
        self.bytes.push((probe_glob.into(), index));
        self
    }

    /// Whether the kernel reads memory operands and strings at the hit,
    /// through a tracefs uprobe event with fetch arguments (the default,
    /// when tracefs is mounted and writable): exact. Otherwise, or when
    /// tracefs refuses, they are read from the stack copy and the process.
    pub fn kernel_fetch(mut self, on: bool) -> Sampler {
        self.kernel_fetch = on;
        self
    }

    /// Samples lost so far because a ring buffer was full: the kernel's
    /// `PERF_RECORD_LOST` counts, and after [`Sampler::drain`] also the hits
    /// the events counted for which no sample arrived (the kernel writes a
    /// lost record only when a later sample finds room, which may never
    /// come).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// How many sites are attached.
    pub fn site_count(&self) -> usize {
        self.plans.len()
    }

    /// Attaches one sampling uprobe per site of the file at `path` (per CPU
    /// with [`Sampler::per_cpu`] or for [`Target::AllProcesses`]). Either every site is
    /// attached or, on error, none of them.
    pub fn attach<'a>(
        &mut self,
        path: impl AsRef<Path>,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
    ) -> Result<(), Error> {
        let path = path.as_ref();
        let c_path = path_cstring(path)?;
        let cpus = match target {
            Target::Pid(_) if !self.per_cpu => vec![-1],
            _ => online_cpus(),
        };
        let (plans_before, fds_before, slots_before) =
            (self.plans.len(), self.fds.len(), self.slots.len());
        let attached = self.attached.clone();
        let result = self.attach_sites(path, &c_path, sites, target, &cpus);
        if result.is_err() {
            self.attached = attached;
            self.slots.truncate(slots_before);
            self.fds.truncate(fds_before);
            self.plans.truncate(plans_before);
            self.ids.retain(|_, plan| *plan < plans_before);
            return result;
        }
        let enabled = self.fds[fds_before..]
            .iter()
            .try_for_each(|fd| perf::enable(fd, false))
            .map_err(|source| Error::Os {
                what: format!("enabling the uprobes of {}", path.display()),
                source,
            });
        if enabled.is_err() {
            self.attached = attached;
            self.slots.truncate(slots_before);
            self.fds.truncate(fds_before);
            self.plans.truncate(plans_before);
            self.ids.retain(|_, plan| *plan < plans_before);
        }
        enabled
    }

    fn attach_sites<'a>(
        &mut self,
        path: &Path,
        c_path: &CString,
        sites: impl IntoIterator<Item = &'a Site>,
        target: Target,
        cpus: &[i32],
    ) -> Result<(), Error> {
        for site in sites {
            let uprobe = Uprobe::at(site, self.point, &self.features, path, c_path)?;
            if !self.attached.insert((path.into(), uprobe.offset, target)) {
                continue; // one uprobe per address
            }
            let probe = site.probe();
            let strings = (0..site.args.len())
                .map(|i| {
                    self.strings
                        .iter()
                        .any(|(g, n)| *n == i && glob_match(g, &probe))
                })
                .collect();
            let bytes = (0..site.args.len())
                .map(|i| {
                    self.bytes
                        .iter()
                        .any(|(g, n)| *n == i && glob_match(g, &probe))
                })
                .collect();
            let mut plan =
                Plan::new(site, strings, self.stack_bytes)?.with_bytes(bytes, self.stack_bytes);
            let from_location = uprobe
                .offset
                .wrapping_sub(site.location_offset.unwrap_or(0));
            plan.attach_addr = site.location.wrapping_add(from_location);
            let tracepoint = match plan.stack_bytes > 0 && self.kernel_fetch {
                true => self.tracepoint(path, &uprobe, &plan),
                false => None,
            };
            if let Some((_, raw)) = &tracepoint {
                plan.raw = Some(raw.clone());
            }
            for &cpu in cpus {
                let fd = match &tracepoint {
                    Some((id, _)) => self.open_tracepoint(*id, target, cpu),
                    None => self.open(&uprobe, &plan, target, cpu),
                }
                .map_err(|e| attach_error(e, path, site, target))?;
                self.ids.insert(event_id(&fd)?, self.plans.len());
                self.fds.push(fd);
                self.route(target, cpu)?;
            }
            self.plans.push(plan);
        }
        Ok(())
    }

    /// The tracefs uprobe event for a site (made once per file offset and
    /// shared by every thread), if tracefs takes it.
    fn tracepoint(
        &mut self,
        path: &Path,
        uprobe: &Uprobe<'_>,
        plan: &Plan,
    ) -> Option<(u64, RawPlan)> {
        let key = (path.to_path_buf(), uprobe.offset);
        if let Some(found) = self.tracepoints.get(&key) {
            return found.clone();
        }
        let ref_ctr = uprobe
            .ref_ctr_offset
            .filter(|_| self.features.kernel_semaphores);
        let event = DynEvent::create(
            path,
            (plan.attach_addr, uprobe.offset),
            ref_ctr,
            &plan.args,
            &plan.strings,
            &plan.bytes,
        );
        // Every value, string and byte slice must have its field.
        let complete = event.filter(|e| {
            plan.args.iter().enumerate().all(|(i, a)| {
                let constant = matches!(
                    a.operand,
                    Operand::Immediate(_) | Operand::Unreadable { .. }
                );
                (constant || e.values[i].is_some())
                    && (!plan.strings[i] || e.strings[i].is_some())
                    && (!plan.bytes.get(i).copied().unwrap_or(false) || e.bytes[i].is_some())
            })
        });
        let found = complete.map(|e| {
            let raw = RawPlan {
                values: e.values.clone(),
                strings: e.strings.clone(),
                bytes: e.bytes.clone(),
            };
            let id = e.id;
            self.dyn_events.push(e);
            (id, raw)
        });
        self.tracepoints.insert(key, found.clone());
        found
    }

    fn open_tracepoint(&self, id: u64, target: Target, cpu: i32) -> io::Result<OwnedFd> {
        let mut attr = perf::attr(TYPE_TRACEPOINT);
        attr.config = id;
        attr.sample_period = 1;
        attr.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_RAW;
        attr.set_disabled(1);
        attr.set_use_clockid(1);
        attr.set_watermark(1);
        attr.wakeup_watermark = 1 << 20;
        attr.clockid = libc::CLOCK_MONOTONIC;
        // SAFETY: a tracepoint event's attributes point to nothing.
        unsafe { perf_event_open(&attr, target, cpu) }
    }

    fn open(
        &self,
        uprobe: &Uprobe<'_>,
        plan: &Plan,
        target: Target,
        cpu: i32,
    ) -> io::Result<OwnedFd> {
        open_uprobe(
            &self.features,
            uprobe,
            target,
            cpu,
            |attr: &mut perf::Attr| {
                attr.sample_period = 1;
                attr.sample_type = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_REGS_USER;
                attr.sample_regs_user = plan.regs_mask;
                attr.set_disabled(1);
                attr.set_use_clockid(1);
                attr.clockid = libc::CLOCK_MONOTONIC;
                if plan.stack_bytes > 0 {
                    attr.sample_type |= SAMPLE_STACK_USER;
                    attr.sample_stack_user = plan.stack_bytes;
                    // Memory outside the stack copy is read after the fact: wake
                    // the reader at every sample to keep that window short.
                    attr.wakeup_events = 1;
                } else {
                    // Otherwise wake it when a quarter of the ring is full.
                    attr.set_watermark(1);
                    attr.wakeup_watermark = 1 << 20;
                }
            },
        )
    }

    /// Sends the newest event's samples to the ring of its target and CPU,
    /// mapping that ring from it if there is none yet.
    fn route(&mut self, target: Target, cpu: i32) -> Result<(), Error> {
        let index = self.fds.len() - 1;
        let fd = &self.fds[index];
        if let Some(slot) = self
            .slots
            .iter()
            .find(|s| s.cpu == cpu && (cpu != -1 || s.target == target))
        {
            return perf::set_output(fd, &self.fds[slot.owner]).map_err(|source| Error::Os {
                what: "sharing a perf ring buffer".into(),
                source,
            });
        }
        let pages = match cpu {
            -1 => self.ring_pages,
            _ => (self.ring_pages / online_cpus().len().max(1)).max(MIN_CPU_RING_PAGES),
        };
        let ring = Ring::map(fd.as_fd(), pages)?;
        self.slots.push(Slot {
            target,
            cpu,
            owner: index,
            ring,
        });
        Ok(())
    }

    /// Waits up to `timeout` for a ring buffer to fill past its watermark,
    /// then decodes what the rings hold; calls `each` per hit in time order.
    /// Hits newer than the moment the rings were read are held back for the
    /// next call, so that hits from different CPUs come out in order.
    /// Returns how many hits were passed on.
    pub fn poll(&mut self, timeout: Duration, each: impl FnMut(Hit)) -> Result<usize, Error> {
        let mut fds: Vec<libc::pollfd> = self
            .slots
            .iter()
            .map(|s| libc::pollfd {
                fd: self.fds[s.owner].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of pollfd of the stated length.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::Os {
                    what: "waiting for samples".into(),
                    source: e,
                });
            }
        }
        Ok(self.collect(false, each))
    }

    /// Decodes everything the rings hold now, held-back hits included, and
    /// calls `each` per hit in time order (use it once the traced process
    /// has exited). Returns how many hits were passed on.
    pub fn drain(&mut self, each: impl FnMut(Hit)) -> usize {
        let n = self.collect(true, each);
        // Every hit counts, sampled or not: what the events counted beyond
        // the hits decoded was lost.
        let counted = self
            .fds
            .iter()
            .map(|fd| read_count(fd).unwrap_or(0))
            .fold(0u64, u64::wrapping_add);
        self.lost = self.lost.max(counted.saturating_sub(self.seen));
        n
    }

    fn collect(&mut self, all: bool, mut each: impl FnMut(Hit)) -> usize {
        let cutoff = monotonic_ns();
        let Sampler {
            slots,
            plans,
            ids,
            lost,
            seen,
            pending,
            ..
        } = self;
        for slot in slots.iter_mut() {
            slot.ring.drain(|kind, record| match kind {
                RECORD_SAMPLE => {
                    *seen += 1;
                    if let Some(hit) = decode_sample(plans, ids, record) {
                        pending.push(hit);
                    }
                }
                RECORD_LOST => {
                    let mut f = Fields(&record[8..]);
                    let _id = f.u64();
                    *lost += f.u64().unwrap_or(0);
                }
                _ => {}
            });
        }
        pending.sort_by_key(|h| h.time_ns);
        let keep = if all {
            0
        } else {
            pending.len() - pending.partition_point(|h| h.time_ns < cutoff)
        };
        let ready = pending.len() - keep;
        for hit in pending.drain(..ready) {
            each(hit);
        }
        ready
    }

    /// The size in bytes of each ring buffer's data area.
    pub fn ring_bytes(&self) -> u64 {
        self.slots.first().map_or(0, |s| s.ring.data_size())
    }
}

fn event_id(fd: &OwnedFd) -> Result<u64, Error> {
    perf::id(fd).map_err(|source| Error::Os {
        what: "reading a perf event's id".into(),
        source,
    })
}

/// The event's count: every hit, whether its sample was written or lost.
fn read_count(fd: &OwnedFd) -> Option<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes; `fd` is an open perf event.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n == 8).then(|| u64::from_ne_bytes(buf))
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Decodes one `PERF_RECORD_SAMPLE` (header included).
fn decode_sample(plans: &[Plan], ids: &HashMap<u64, usize>, record: &[u8]) -> Option<Hit> {
    let mut f = Fields(record.get(8..)?);
    let plan = &plans[*ids.get(&f.u64()?)?];
    let pid_tid = f.take(8)?;
    let pid = u32::from_ne_bytes(pid_tid[0..4].try_into().ok()?);
    let tid = u32::from_ne_bytes(pid_tid[4..8].try_into().ok()?);
    let time_ns = f.u64()?;
    if let Some(raw) = &plan.raw {
        let size = u32::from_ne_bytes(f.take(4)?.try_into().ok()?) as usize;
        let data = f.take(size)?;
        let args = (0..plan.args.len())
            .map(|i| decode_raw_arg(plan, raw, data, pid, i))
            .collect();
        return Some(Hit {
            time_ns,
            pid,
            tid,
            provider: plan.provider.clone(),
            name: plan.name.clone(),
            args,
        });
    }
    let abi = f.u64()?;
    let mut regs = [0u64; 64];
    let nregs = if abi == 0 {
        0
    } else {
        plan.regs_mask.count_ones() as usize
    };
    for r in &mut regs[..nregs] {
        *r = f.u64()?;
    }
    let regs = &regs[..nregs];
    let mut stack: &[u8] = &[];
    if plan.stack_bytes > 0 {
        let size = f.u64()? as usize;
        if size > 0 {
            let data = f.take(size)?;
            let dyn_size = (f.u64()? as usize).min(size);
            stack = &data[..dyn_size];
        }
    }
    let cx = Context {
        pid,
        regs,
        sp: plan.reg(regs, PERF_REG_SP),
        stack,
    };
    let args = (0..plan.args.len())
        .map(|i| decode_arg(plan, &cx, i))
        .collect();
    Some(Hit {
        time_ns,
        pid,
        tid,
        provider: plan.provider.clone(),
        name: plan.name.clone(),
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_at_their_size_and_sign() {
        assert_eq!(int_value(0xff, 1, true), -1);
        assert_eq!(int_value(0x1ff, 1, false), 255);
        assert_eq!(int_value(0x8000, 2, true), i16::MIN as i128);
        assert_eq!(int_value(u64::MAX, 8, false), u64::MAX as i128);
        assert_eq!(int_value(u64::MAX, 8, true), -1);
        assert_eq!(int_value(0xffff_ffff_8000_0000, 4, true), i32::MIN as i128);
        assert_eq!(int_value(0xdead_0000_0005, 4, false), 5);
    }

    #[test]
    fn values_print_quoted_and_escaped() {
        let s = Value::Str {
            bytes: b"a\"b\\\n\x01\xff".to_vec(),
            truncated: true,
        };
        assert_eq!(s.to_string(), r#""a\"b\\\n\x01\xff"..."#);
        assert_eq!(Value::from(-5i8).to_string(), "-5");
        assert_eq!(Value::from(u64::MAX).to_string(), "18446744073709551615");
        assert_eq!(Value::Unreadable(16).to_string(), "<unreadable 0x10>");
    }

    fn site(args: &str, machine: crate::Machine) -> Site {
        Site {
            provider: "p".into(),
            name: "n".into(),
            location: 0,
            location_offset: Some(0),
            note_base: 0,
            stapsdt_base: None,
            semaphore: None,
            semaphore_offset: None,
            args_text: args.into(),
            args: crate::parse_args(args, machine).unwrap(),
            layout: crate::SiteLayout::Nop,
            bytes: vec![],
        }
    }

    #[test]
    fn aarch64_arguments_are_refused_in_words() {
        let e = Plan::new(&site("8@x0", crate::Machine::Aarch64), vec![false], 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "aarch64 registers (in the arguments of p:n) are not supported"
        );
        // Immediates and registers alone need no stack copy.
        let plan = Plan::new(
            &site("8@%rax 4@$1", crate::Machine::X86_64),
            vec![false; 2],
            64,
        );
        assert_eq!(plan.unwrap().stack_bytes, 0);
    }

    #[test]
    fn registers_come_in_mask_order() {
        let site = site("-1@%r8 2@%ah 4@8(%rdi) 8@$7", crate::Machine::X86_64);
        let plan = Plan::new(&site, vec![false; 4], 64).unwrap();
        // rax (for %ah), rdi, rsp and r8, in perf's order.
        assert_eq!(plan.regs_mask, 1 | 1 << 5 | 1 << 7 | 1 << 16);
        assert_eq!(plan.stack_bytes, 64);
        let stack = [0u8, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff];
        let regs = [0x1234, 0x1000, 0x1000, 0x80];
        let cx = Context {
            pid: 0,
            regs: &regs,
            sp: 0x1000,
            stack: &stack,
        };
        let values: Vec<Value> = (0..4).map(|i| decode_arg(&plan, &cx, i)).collect();
        assert_eq!(
            values,
            [
                Value::Int(-128),
                Value::Int(0x12),
                Value::Int(0xffff_fffe),
                Value::Int(7)
            ]
        );
    }
}
