//! Attaching the rows' uprobes, through usdt-trace (perf_event_open on the
//! uprobe PMU, counting hits), and checking whether the kernel optimized the
//! site.

use std::path::Path;

use usdt_trace::{AttachPoint, SiteLayout, Target};

/// Where a row attaches on its probe's site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// At the note's Location: the 1-byte `nop`, emulated (int3).
    Nop,
    /// At Location + 1: the `nop5`, which the kernel may optimize.
    Next,
    /// Where usdt-trace's feature detection says (Location + 1 on 6.18 - 7.2).
    Auto,
    /// At Location + 1, counted by a BPF program on one uprobe_multi link
    /// instead of a perf counter.
    NextBpf,
}

/// What counts the hits.
enum Counter {
    Perf(usdt_trace::PerfCounter),
    Bpf(usdt_trace::bpf::MultiCounter),
}

/// A uprobe attached for one row; dropping it detaches.
pub struct Attached {
    /// What the table's `attach` column says.
    pub describe: String,
    counter: Counter,
    /// The address of the attached instruction in the traced process.
    addr: u64,
    pid: u32,
    /// The address of the site (Location) in the traced process.
    location: u64,
    /// The site's bytes in the file.
    original: Vec<u8>,
    /// The site's layout (what `original` is).
    layout: SiteLayout,
    /// The long nop the uprobe is on (`NopNop5` or `NopNop10`), if any.
    kind: Option<SiteLayout>,
}

/// Attaches to every site of `probe` (provider, name) in the executable `exe`
/// running as `pid`.
pub fn attach(pid: u32, exe: &Path, probe: (&str, &str), at: At) -> Result<Attached, String> {
    let e = |e: usdt_trace::Error| format!("{}:{}: {e}", probe.0, probe.1);
    let sites: Vec<_> = usdt_trace::read_file(exe)
        .map_err(e)?
        .into_iter()
        .filter(|s| (s.provider.as_str(), s.name.as_str()) == probe)
        .collect();
    let Some(first) = sites.first() else {
        return Err(format!(
            "no probe {}:{} in {}",
            probe.0,
            probe.1,
            exe.display()
        ));
    };
    let point = match at {
        At::Nop => AttachPoint::Nop,
        At::Next | At::NextBpf => AttachPoint::Next,
        At::Auto => AttachPoint::Auto,
    };
    let (counter, offset) = if at == At::NextBpf {
        let features = usdt_trace::KernelFeatures::detect();
        let multi = sites
            .iter()
            .map(|s| usdt_trace::bpf::MultiSite::at(s, point, &features, exe, 0, Target::Pid(pid)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        let mut counter = usdt_trace::bpf::MultiCounter::new(1).map_err(|x| e(x.into()))?;
        counter
            .attach(exe, &multi, Target::Pid(pid))
            .map_err(|x| e(x.into()))?;
        (Counter::Bpf(counter), multi[0].offset)
    } else {
        let mut tracer = usdt_trace::PerfCounter::new(point);
        tracer.attach(exe, &sites, Target::Pid(pid)).map_err(e)?;
        let offset = tracer.sites()[0].offset;
        (Counter::Perf(tracer), offset)
    };
    let insn = match (
        offset - first.location_offset.unwrap_or(offset),
        first.layout,
    ) {
        (0, _) => "nop",
        (1, SiteLayout::NopNop10) | (6, _) => "nop10",
        _ => "nop5",
    };
    let sema = if first.semaphore.is_some() {
        "+sema"
    } else {
        ""
    };
    let describe = match at {
        At::Auto => format!("auto={insn}{sema}"),
        At::NextBpf => format!("{insn}{sema} bpf"),
        _ => format!("{insn}{sema}"),
    };
    let addr = runtime_address(pid, exe, offset)?;
    let delta = offset - first.location_offset.unwrap_or(offset);
    // The site's own bytes: the nop and its long nops.
    let site_len = first.layout.x86_64_bytes().map_or(6, <[u8]>::len);
    let original = first.bytes[..first.bytes.len().min(site_len)].to_vec();
    // Which long nop the uprobe is on, if any (for `optimized`).
    let kind = match (delta, first.layout) {
        (0, _) => None,
        (1, SiteLayout::NopNop10) | (6, _) => Some(SiteLayout::NopNop10),
        _ => Some(SiteLayout::NopNop5),
    };
    Ok(Attached {
        describe,
        counter,
        addr,
        pid,
        location: addr - delta,
        original,
        layout: first.layout,
        kind,
    })
}

/// Which instruction of `site` (in the executable `exe`, running as `pid`)
/// carries a uprobe now: the first byte that differs from the file's
/// (the `int3` of a uprobe, or the `call` of an optimized long nop). `nop`,
/// `nop5` or `nop10`; `none` when the site reads as in the file.
pub fn attached_insn(
    pid: u32,
    exe: &Path,
    site: &usdt_trace::Site,
) -> Result<&'static str, String> {
    let location = site
        .location_offset
        .ok_or_else(|| format!("{} is not in a loaded segment", site.probe()))?;
    let addr = runtime_address(pid, exe, location)?;
    let len = site.layout.x86_64_bytes().map_or(6, <[u8]>::len);
    let original = &site.bytes[..site.bytes.len().min(len)];
    let mut now = vec![0; original.len()];
    read_mem(pid, addr, &mut now).map_err(|e| format!("reading the site at {addr:#x}: {e}"))?;
    Ok(
        match (
            now.iter().zip(original).position(|(a, b)| a != b),
            site.layout,
        ) {
            (None, _) => "none",
            (Some(0), _) => "nop",
            (Some(1), SiteLayout::NopNop10) | (Some(6..), _) => "nop10",
            (Some(_), _) => "nop5",
        },
    )
}

/// Where file offset `offset` of `exe` is mapped in process `pid`.
fn runtime_address(pid: u32, exe: &Path, offset: u64) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(exe)
        .map_err(|e| format!("{}: {e}", exe.display()))?
        .ino();
    let maps = usdt_trace::read_maps(pid).map_err(|e| e.to_string())?;
    maps.iter()
        .find(|m| {
            // The executable mapping: a linker may map the site's file page
            // read-only as well.
            m.inode == inode
                && m.perms.contains('x')
                && m.offset <= offset
                && offset - m.offset < m.end - m.start
        })
        .map(|m| m.start + (offset - m.offset))
        .ok_or_else(|| {
            format!(
                "file offset {offset:#x} of {} is not mapped in process {pid}",
                exe.display()
            )
        })
}

impl Attached {
    /// Detaches, and checks that the kernel put the site back: a site left
    /// as a `call` into the trampoline would slow the next rows down. A
    /// nop10 put back with the `call`'s bytes as its operands (7.3) is the
    /// same nop.
    pub fn detach(self) -> Result<(), String> {
        drop(self.counter);
        let mut now = vec![0; self.original.len()];
        read_mem(self.pid, self.location, &mut now)
            .map_err(|e| format!("reading the site back: {e}"))?;
        if now != self.original && !usdt_trace::site_executes_as_emitted(&now, self.layout) {
            return Err(format!(
                "after detaching, the site at {:#x} reads {:02x?} instead of {:02x?}",
                self.location, now, self.original
            ));
        }
        Ok(())
    }

    /// The site's bytes in the process now, from Location: 16, enough for a
    /// `nop; nop10` rewritten to `nop; lea -0x80(%rsp),%rsp; call rel32`.
    pub fn site_bytes(&self) -> Result<Vec<u8>, String> {
        let mut now = vec![0; 16];
        read_mem(self.pid, self.location, &mut now)
            .map_err(|e| format!("reading the site at {:#x}: {e}", self.location))?;
        Ok(now)
    }

    /// Hits counted so far.
    pub fn count(&self) -> Result<u64, String> {
        match &self.counter {
            Counter::Perf(tracer) => {
                let counts = tracer.probe_counts().map_err(|e| e.to_string())?;
                Ok(counts.values().sum())
            }
            Counter::Bpf(counter) => counter.count(0).map_err(|e| e.to_string()),
        }
    }

    /// Did the kernel optimize the site: is the attached long nop now the
    /// kernel's `call` (after `lea -0x80(%rsp),%rsp` for a nop10) into a
    /// `[uprobes-trampoline]` mapping of the process? (usdt-trace's
    /// `site_rewrite`, the one recogniser.)
    pub fn optimized(&self) -> bool {
        self.kind.is_some_and(|kind| {
            usdt_trace::site_rewrite(self.pid, self.addr, kind).is_ok_and(|r| r.optimized)
        })
    }
}

/// What `Auto` decided for the bench's own sites, and from what.
#[derive(Clone, Debug)]
pub struct Auto {
    /// The build's site layout (`nop;nop5`, `nop;nop10`, `nop;nop5;nop10`).
    pub layout: String,
    /// Bytes past Location where `Auto` attaches (0: the nop).
    pub delta: u64,
    /// The fork self-test's verdict, in words.
    pub fork: String,
    /// Whether the bench's executable carries the fork guard's marker.
    pub guarded: bool,
    /// The speed self-test: trap and optimized M/s, or why there are none.
    pub speed: Result<(f64, f64), String>,
}

/// Where `Auto` attaches this build's sites (in the executable `exe`) on
/// this machine, and the self-tests and fork guard it decided from.
pub fn auto_choice(exe: &Path) -> Auto {
    let caps = usdt_trace::caps();
    let guarded = usdt_trace::read_file_fork_guard(exe).unwrap_or(false);
    let layout = usdt::SITE_LAYOUT;
    let fork = match caps.fork.verdict {
        usdt_trace::OptimizedFork::ChildSurvives => "a forked child survives".to_string(),
        usdt_trace::OptimizedFork::ChildDies => "a forked child dies".to_string(),
        usdt_trace::OptimizedFork::Untested => format!("untested: {}", caps.fork.why),
    };
    Auto {
        layout: layout.name().into(),
        delta: usdt_trace::auto_delta(layout, &caps.auto_inputs(guarded)),
        fork,
        guarded,
        speed: match caps.speed {
            Ok(s) => Ok((s.trap, s.optimized)),
            Err(why) => Err(why.clone()),
        },
    }
}

/// Reads the traced process's memory (its code) at `addr`.
fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    std::fs::File::open(format!("/proc/{pid}/mem"))?.read_exact_at(buf, addr)
}
