//! The note checks every build shape must pass: what each example declares,
//! and every field of every note compared with it.

use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::BTreeMap;
use std::path::Path;
use usdt_trace::{ElfProbes, Machine, Operand, SiteLayout};

/// One probe as the sources declare it: argument sizes (negative for
/// signed), how many sites (0: at least one), whether it has a semaphore.
pub type Expected = BTreeMap<&'static str, (Vec<i8>, usize, bool)>;

/// The probes of example `example` (`demo`, `types`, `redzone`, `gc`).
pub fn expected(example: &str) -> Expected {
    let probes: &[(&str, &[i8], usize, bool)] = match example {
        // The demo fires its probes in a loop, which the optimizer may unroll.
        "demo" => &[
            ("http:request_start", &[8, 8], 0, true),
            ("http:request_done", &[8, 2, 8], 0, true),
            ("http:tick", &[8, -4], 0, false),
        ],
        "types" => &[
            ("types:unsigned", &[1, 2, 4, 8, 8], 2, true),
            ("types:signed", &[-1, -2, -4, -8, -8], 2, true),
            ("types:other", &[1, 1, 4, 4, 8], 1, true),
            ("types:strings", &[8, 8, 8, 8], 2, true),
            ("types:pointers", &[8, 8, 8], 1, true),
            (
                "types:twelve",
                &[8, -8, 4, -4, 2, -2, 1, -1, 1, 4, 8, -8],
                1,
                true,
            ),
            // The lazy probe's loop may be unrolled: at least one site.
            ("types:lazy", &[8, 8], 0, true),
            ("types:generic", &[8], 3, true),
            ("types:inlined", &[8], 5, true),
            ("types:done", &[], 1, true),
        ],
        "redzone" => &[("redzone:site", &[8, 8], 0, false)],
        // gc:removed and gc:removed_adhoc are in code the linker removes:
        // they must have no note at all.
        "gc" => &[("gc:kept", &[8], 0, true)],
        _ => panic!("no expectations for example {example}"),
    };
    probes
        .iter()
        .map(|(p, a, n, s)| (*p, (a.to_vec(), *n, *s)))
        .collect()
}

/// The bytes a site of `layout` starts with on `machine`.
fn site_bytes(layout: SiteLayout, machine: Machine) -> &'static [u8] {
    match (layout, machine) {
        (SiteLayout::NopNop5 | SiteLayout::NopNop10, _) => layout.x86_64_bytes().unwrap(),
        (SiteLayout::Nop, Machine::Aarch64) => &usdt_trace::AARCH64_NOP,
        other => panic!("no site bytes for {other:?}"),
    }
}

/// Checks every note of the binary at `path` against `expected`: exactly
/// the declared probes, each site's bytes (`layout`) in an executable
/// segment, Base equal to `.stapsdt.base`'s address, argument sizes, signs
/// and registers, and one 2-byte-aligned semaphore per provider probe, on
/// a page no other writable segment maps. `what` names the binary in
/// messages. Returns the probes read.
pub fn check_notes(path: &Path, expected: &Expected, layout: SiteLayout, what: &str) -> ElfProbes {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{what}: {e}"));
    let file = object::File::parse(&*data).unwrap();
    let probes = usdt_trace::read_probes(&data).expect("read notes");

    // .stapsdt.base survives --gc-sections, and every note's Base is its address.
    let base = file
        .section_by_name(".stapsdt.base")
        .unwrap_or_else(|| panic!("{what}: no .stapsdt.base"));
    let probes_section = file.section_by_name(".probes");

    // readelf sees as many notes as we do.
    let readelf = crate::run_ok(std::process::Command::new("readelf").arg("-n").arg(path));
    let readelf = String::from_utf8_lossy(&readelf.stdout);
    assert_eq!(
        readelf.matches("NT_STAPSDT").count(),
        probes.sites.len(),
        "{what}: readelf -n and our reader disagree on the number of notes"
    );

    let mut sites_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut semaphore_of: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for site in &probes.sites {
        let probe = site.probe();
        let (sizes, _, has_sema) = expected
            .get(probe.as_str())
            .unwrap_or_else(|| panic!("{what}: unexpected probe {probe} at {:#x}", site.location));
        *sites_of.entry(probe.clone()).or_default() += 1;

        // Base.
        assert_eq!(site.stapsdt_base, Some(base.address()), "{what}: {probe}");
        assert_eq!(site.note_base, base.address(), "{what}: {probe} Base");

        // Location: the site's bytes, in an executable segment.
        let seg = probes
            .segments
            .iter()
            .find(|s| site.location >= s.vaddr && site.location < s.vaddr + s.filesz)
            .unwrap_or_else(|| {
                panic!(
                    "{what}: {probe} Location {:#x} in no segment",
                    site.location
                )
            });
        assert!(
            seg.flags & 1 != 0,
            "{what}: {probe} Location {:#x} not executable",
            site.location
        );
        let want = site_bytes(layout, probes.machine);
        let offset = site.location_offset.expect("Location has file bytes") as usize;
        let true_offset = site.location - seg.vaddr + seg.offset;
        assert_eq!(offset as u64, true_offset, "{what}: {probe} file offset");
        check_perf_offset(
            &base,
            site.location,
            true_offset,
            &format!("{what}: {probe}"),
        );
        assert_eq!(
            &data[offset..offset + want.len()],
            want,
            "{what}: {probe} site bytes"
        );
        assert_eq!(site.layout, layout, "{what}: {probe}");

        check_args(site, sizes, probes.machine, what);

        // Semaphore: provider probes only, 2-byte aligned, in a writable .probes.
        match (site.semaphore, has_sema) {
            (None, false) => {}
            (Some(addr), true) => {
                let section = probes_section
                    .as_ref()
                    .unwrap_or_else(|| panic!("{what}: no .probes section"));
                assert!(
                    addr >= section.address() && addr + 2 <= section.address() + section.size(),
                    "{what}: {probe} semaphore {addr:#x} outside .probes"
                );
                assert_eq!(addr % 2, 0, "{what}: {probe} semaphore alignment");
                let off = site.semaphore_offset.expect("semaphore file offset");
                assert_eq!(
                    u16::from_le_bytes([data[off as usize], data[off as usize + 1]]),
                    0
                );
                check_isolated(&probes.segments, addr, off, what);
                check_semaphore_symbol(&file, addr, &site.provider, &site.name, what);
            }
            (got, want) => panic!("{what}: {probe} semaphore {got:?}, expected one: {want}"),
        }
        let previous = semaphore_of.insert(probe.clone(), site.semaphore);
        if let Some(previous) = previous {
            assert_eq!(
                previous, site.semaphore,
                "{what}: {probe}: one semaphore per probe"
            );
        }
    }

    crate::signatures::check_signatures(path, &data, &probes, what);

    // Distinct probes, distinct semaphores.
    let mut all: Vec<u64> = semaphore_of.values().flatten().copied().collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        n,
        "{what}: probes share a semaphore: {semaphore_of:?}"
    );

    for (probe, (_, sites, _)) in expected {
        let got = sites_of.get(*probe).copied().unwrap_or(0);
        if *sites == 0 {
            assert!(got >= 1, "{what}: no site of {probe}");
        } else {
            assert_eq!(got, *sites, "{what}: sites of {probe}");
        }
    }
    check_fork_guard(&file, &data, layout, probes.machine, what);
    probes
}

/// Every x86-64 build whose sites have a nop5 (`nop; nop5`, `nop; nop5;
/// nop10`) links the fork guard: its marker note (which tracers read) and its
/// entry in `.init_array` (which the loader calls); a `nop10` or aarch64
/// build has neither.
fn check_fork_guard(
    file: &object::File,
    data: &[u8],
    layout: SiteLayout,
    machine: Machine,
    what: &str,
) {
    let want = layout.long_nop_at(SiteLayout::NopNop5).is_some() && machine == Machine::X86_64;
    let marker = usdt_trace::read_fork_guard(data).expect("read the fork guard marker");
    assert_eq!(marker, want, "{what}: the fork guard's marker note");
    let entry = file
        .symbols()
        .find(|s| s.name() == Ok(usdt_runtime::forkguard::SYMBOL));
    let section = entry
        .and_then(|s| s.section_index())
        .and_then(|i| file.section_by_index(i).ok())
        .and_then(|s| s.name().ok().map(str::to_owned));
    if want {
        // Stripped of .symtab, a file keeps only the marker to show.
        if file.section_by_name(".symtab").is_some() {
            assert_eq!(
                section.as_deref(),
                Some(".init_array"),
                "{what}: the fork guard's entry"
            );
        }
    } else {
        assert_eq!(section, None, "{what}: no fork guard");
    }
}

/// perf's arithmetic (`sdt_adjust_loc`): the file offset of a site is
/// `.stapsdt.base`'s section file offset - Base + Location. It is the site's
/// true file offset only when `.stapsdt.base` lies in a segment with the
/// sites' vaddr - offset, which is why it is an executable section.
fn check_perf_offset(base: &object::Section, location: u64, true_offset: u64, what: &str) {
    let (section_offset, _) = base.file_range().expect(".stapsdt.base has file bytes");
    let perf = (section_offset + location).wrapping_sub(base.address());
    assert_eq!(
        perf, true_offset,
        "{what}: perf would put the uprobe at file offset {perf:#x}, the site is at {true_offset:#x}"
    );
}

/// Arguments: size, sign, and a register named at exactly that width on
/// x86-64 (a byte in r8..r15 is written with the 64-bit name, see site.rs),
/// the whole 64-bit register on aarch64 and riscv64.
fn check_args(site: &usdt_trace::Site, sizes: &[i8], machine: Machine, what: &str) {
    let probe = site.probe();
    let got: Vec<i8> = site
        .args
        .iter()
        .map(|a| {
            if a.signed {
                -(a.size as i8)
            } else {
                a.size as i8
            }
        })
        .collect();
    assert_eq!(got, sizes, "{what}: {probe} args {:?}", site.args_text);
    for arg in &site.args {
        let Operand::Register(reg) = &arg.operand else {
            panic!(
                "{what}: {probe}: argument not in a register: {}",
                site.args_text
            )
        };
        let wide = reg.width.bytes() == 8;
        let ok = match machine {
            Machine::X86_64 => reg.width.bytes() == arg.size || (arg.size == 1 && wide),
            // aarch64 and riscv64 name the whole register, whatever the size.
            _ => wide && reg.machine() == Some(machine),
        };
        assert!(ok, "{what}: {probe}: {}", site.args_text);
    }
}

/// The semaphore's file page is mapped by no writable segment but its own:
/// the kernel updates a semaphore in every writable mapping of its file offset.
fn check_isolated(segments: &[usdt_trace::Segment], addr: u64, off: u64, what: &str) {
    let page = usdt_trace::page_size();
    let own = segments
        .iter()
        .find(|s| addr >= s.vaddr && addr < s.vaddr + s.memsz)
        .expect("semaphore in a segment");
    assert!(own.flags & 2 != 0, "{what}: semaphore segment not writable");
    for seg in segments.iter().filter(|s| s.flags & 2 != 0 && *s != own) {
        let start = seg.offset & !(page - 1);
        let end = (seg.offset + seg.filesz).div_ceil(page) * page;
        assert!(
            off < start || off >= end,
            "{what}: the semaphore's file page is also mapped by the writable segment at {:#x}",
            seg.vaddr
        );
    }
}

/// The semaphore is its own 2-byte object named after its probe
/// (`__usdt_sema.<crate>.<provider>.<name>`), when the symbol table is there.
fn check_semaphore_symbol(file: &object::File, addr: u64, provider: &str, name: &str, what: &str) {
    if file.symbols().next().is_none() {
        return;
    }
    let suffix = format!(".{provider}.{name}");
    let symbols: Vec<_> = file
        .symbols()
        .filter(|s| s.address() == addr && s.size() != 0)
        .map(|s| (s.name().unwrap_or("").to_owned(), s.size()))
        .collect();
    assert!(
        symbols
            .iter()
            .any(|(n, size)| n.starts_with("__usdt_sema.") && n.ends_with(&suffix) && *size == 2),
        "{what}: {provider}:{name}: the semaphore at {addr:#x} is {symbols:?}"
    );
}
