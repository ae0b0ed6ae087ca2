//! perf (Debian's `linux-perf`, perf 6.1) reads every probe of every build:
//! the build-shape cells of `tests/shapes.rs` (LLD and GNU ld, PIE and
//! non-PIE, every opt-level and LTO setting), the `cdylib`, and binaries
//! that link our probes with C `<sys/sdt.h>` probes (`tests/perfmix/`), C
//! objects first and Rust objects first, with each linker. For each build:
//!
//! - `perf buildid-cache --add` and `perf probe -x BIN sdt_PROV:NAME` for
//!   every probe; each uprobe perf writes to `uprobe_events` is at the
//!   site's true file offset (Location's segment: Location - p_vaddr +
//!   p_offset) with the semaphore's file offset as its reference counter;
//! - `perf stat -x,` counts every probe exactly, the lazy ones included
//!   (perf raises their semaphores, so their closures run);
//! - `perf record` and `perf script` show the values the program passed;
//! - the events and the cache entries are removed afterwards.
//!
//! Kernel hazard: deleting a uprobe event that is still in use crashed this
//! kernel (6.18) and left tracefs locked. So these tests run one at a time
//! (a process-wide lock), delete only the events they added, and only once
//! perf has exited; every child has a timeout. Do not run two test binaries
//! that add perf probe events at once.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use usdt_test_support::cdylib::{self, built};
use usdt_test_support::cell::{
    standalone_package, Cell, HOST, O0, O1_THIN_GNU_LD, O2_NON_PIE, O3_FAT_ABORT,
    OS_THIN_NON_PIE_GNU_LD, OZ_FAT_GNU_LD,
};
use usdt_test_support::{ready, root, run_ok, tracing_env, Need, CC, PERF, ROOT, SDT, TRACEFS};
use usdt_trace::ElfProbes;

/// What every test here needs.
const NEEDS: [Need; 5] = [ROOT, TRACEFS, PERF, SDT, CC];

/// Seconds any perf or traced command may take.
const TIMEOUT: &str = "300";

/// One perf test at a time in this process.
fn serialize() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `timeout TIMEOUT perf ARGS`, with `stdin` written to its input.
fn perf(args: &[OsString], stdin: &str) -> Output {
    let mut child = Command::new("timeout")
        .args(["-k", "10", TIMEOUT, "perf"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run perf (Debian package linux-perf)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "perf {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The file offset of `addr` through the `PT_LOAD` segment that holds it.
fn file_offset(probes: &ElfProbes, addr: u64, what: &str) -> u64 {
    let seg = probes
        .segments
        .iter()
        .find(|s| addr >= s.vaddr && addr < s.vaddr + s.memsz)
        .unwrap_or_else(|| panic!("{what}: {addr:#x} in no segment"));
    addr - seg.vaddr + seg.offset
}

/// The events perf added for the probes of one ELF file, removed (with the
/// file's build-id cache entry) on drop.
struct Session {
    elf: PathBuf,
    what: String,
    /// Event (`sdt_PROV:NAME`, `sdt_PROV:NAME_1`, ...) to probe (`PROV:NAME`).
    events: BTreeMap<String, String>,
    /// Argument sizes of each probe, from its notes.
    sizes: BTreeMap<String, Vec<u8>>,
}

impl Session {
    /// Adds `elf` to perf's build-id cache, adds an event for every probe in
    /// its notes and checks where perf put each uprobe.
    fn new(elf: &Path, what: &str) -> Session {
        tracing_env();
        let data = std::fs::read(elf).unwrap_or_else(|e| panic!("{what}: {e}"));
        let probes = usdt_trace::read_probes(&data).expect("read notes");
        let mut names: Vec<String> = probes.sites.iter().map(|s| s.probe()).collect();
        names.sort();
        names.dedup();
        // Never touch events someone else added: refuse to start instead.
        let before = std::fs::read_to_string(UPROBE_EVENTS).unwrap();
        for name in &names {
            let group = format!("p:sdt_{}/", name.split(':').next().unwrap());
            assert!(
                !before.lines().any(|l| l.starts_with(&group)),
                "{what}: events of group {group} exist already:\n{before}"
            );
        }
        let mut session = Session {
            elf: elf.to_owned(),
            what: what.to_owned(),
            events: BTreeMap::new(),
            sizes: BTreeMap::new(),
        };
        perf(
            &[
                "buildid-cache".into(),
                "--add".into(),
                elf.as_os_str().to_owned(),
            ],
            "",
        );
        let mut args = vec!["probe".into(), "-x".into(), elf.as_os_str().to_owned()];
        for name in &names {
            args.extend(["-a".into(), format!("sdt_{name}").into()]);
        }
        let out = perf(&args, "");
        // "  sdt_http:request_start (on %request_start in /path)"
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            let Some((event, on)) = line.split_once("(on %") else {
                continue;
            };
            let event = event.trim();
            if let (Some(group), Some(name)) = (
                event.split(':').next().and_then(|g| g.strip_prefix("sdt_")),
                on.split_whitespace().next(),
            ) {
                session
                    .events
                    .insert(event.to_owned(), format!("{group}:{name}"));
            }
        }
        for site in &probes.sites {
            let sizes = site.args.iter().map(|a| a.size).collect();
            session.sizes.insert(site.probe(), sizes);
        }
        session.check_offsets(&probes);
        session
    }

    /// Each probe's uprobes in `uprobe_events` are exactly its sites' file
    /// offsets, each with the semaphore's file offset (or none).
    fn check_offsets(&self, probes: &ElfProbes) {
        let what = &self.what;
        let mut want: BTreeMap<String, Vec<(u64, Option<u64>)>> = BTreeMap::new();
        for site in &probes.sites {
            let loc = file_offset(probes, site.location, what);
            let sema = site.semaphore.map(|s| file_offset(probes, s, what));
            want.entry(site.probe()).or_default().push((loc, sema));
        }
        let mut got: BTreeMap<String, Vec<(u64, Option<u64>)>> = BTreeMap::new();
        let events = std::fs::read_to_string(UPROBE_EVENTS).unwrap();
        for line in events.lines() {
            // p:sdt_http/request_start /path:0x0000000000014777(0x57000) arg1=...
            let mut words = line.split_whitespace();
            let (Some(event), Some(at)) = (words.next(), words.next()) else {
                continue;
            };
            let event = event.trim_start_matches("p:").replacen('/', ":", 1);
            let Some(probe) = self.events.get(&event) else {
                continue;
            };
            let (_, at) = at.rsplit_once(':').expect("PATH:OFFSET");
            let (offset, sema) = match at.split_once('(') {
                Some((o, s)) => (o, Some(s.trim_end_matches(')'))),
                None => (at, None),
            };
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            got.entry(probe.clone())
                .or_default()
                .push((hex(offset), sema.map(hex)));
        }
        for sites in want.values_mut().chain(got.values_mut()) {
            sites.sort_unstable();
        }
        assert_eq!(got, want, "{what}: uprobes perf wrote:\n{events}");
        eprintln!(
            "{what}: perf placed all {} uprobes of {} probes at their sites' file offsets",
            probes.sites.len(),
            want.len()
        );
    }

    /// `-e EVENT` for every event.
    fn event_args(&self) -> Vec<OsString> {
        self.events
            .keys()
            .flat_map(|e| ["-e".into(), e.into()])
            .collect()
    }

    /// `perf stat` of `cmd`: its stdout and the hits per probe (every probe,
    /// hit or not).
    fn stat(&self, cmd: &[OsString], stdin: &str) -> (String, BTreeMap<String, u64>) {
        let dir = scratch();
        let csv = dir.join("stat.csv");
        let mut args = os(&["stat", "-x,", "-o"]);
        args.push(csv.clone().into());
        args.extend(self.event_args());
        args.push("--".into());
        args.extend(cmd.iter().cloned());
        let out = perf(&args, stdin);
        let mut counts: BTreeMap<String, u64> =
            self.events.values().map(|p| (p.clone(), 0)).collect();
        // 7,,sdt_http:request_start,967785,100.00,,
        for line in std::fs::read_to_string(&csv).unwrap().lines() {
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() < 3 {
                continue;
            }
            if let Some(probe) = self.events.get(fields[2]) {
                let n: u64 = fields[0]
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: perf stat line {line}", self.what));
                *counts.get_mut(probe).unwrap() += n;
            }
        }
        (String::from_utf8_lossy(&out.stdout).into_owned(), counts)
    }

    /// `perf record` of `cmd`, then `perf script`: its stdout and every hit
    /// in order, as probe and argument values.
    fn record(&self, cmd: &[OsString], stdin: &str) -> (String, Vec<(String, Vec<i128>)>) {
        let data = scratch().join("perf.data");
        let mut args = os(&["record", "-q", "-o"]);
        args.push(data.clone().into());
        args.extend(self.event_args());
        args.push("--".into());
        args.extend(cmd.iter().cloned());
        let out = perf(&args, stdin);
        let mut script = os(&["script", "-i"]);
        script.push(data.into());
        let text = perf(&script, "");
        let mut hits = vec![];
        // wt10demo 8321 [000] 225.639160: sdt_http:tick: (55c2fe0077c3) arg1=0 arg2=-1
        for line in String::from_utf8_lossy(&text.stdout).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some((i, probe)) = words.iter().enumerate().find_map(|(i, w)| {
                let event = w.strip_suffix(':')?;
                Some((i, self.events.get(event)?.clone()))
            }) else {
                continue;
            };
            let values = words[i + 1..]
                .iter()
                .filter_map(|w| w.split_once('=').filter(|(k, _)| k.starts_with("arg")))
                .map(|(_, v)| {
                    v.parse::<i128>()
                        .unwrap_or_else(|_| panic!("{}: perf script: {line}", self.what))
                })
                .collect();
            hits.push((probe, values));
        }
        (String::from_utf8_lossy(&out.stdout).into_owned(), hits)
    }

    /// Compares recorded hits with the expected ones (`None`: any value),
    /// each value modulo its argument's size: perf 6.1 prints negative 1-
    /// and 2-byte values as unsigned bit patterns.
    fn check_hits(&self, got: &[(String, Vec<i128>)], want: &[(&str, Vec<Option<i128>>)]) {
        let what = &self.what;
        assert_eq!(
            got.len(),
            want.len(),
            "{what}: perf script hits:\n{got:?}\nexpected:\n{want:?}"
        );
        for ((probe, values), (want_probe, want_values)) in got.iter().zip(want) {
            assert_eq!(probe, want_probe, "{what}: hits {got:?}");
            assert_eq!(
                values.len(),
                want_values.len(),
                "{what}: {probe} {values:?}"
            );
            let sizes = &self.sizes[probe];
            for ((v, w), size) in values.iter().zip(want_values).zip(sizes) {
                let Some(w) = w else { continue };
                let mask = (1i128 << (8 * u32::from(*size))) - 1;
                assert_eq!(
                    v & mask,
                    w & mask,
                    "{what}: {probe} args {values:?}, expected {want_values:?}"
                );
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Every perf that used the events has exited (`perf` waits).
        if !self.events.is_empty() {
            let mut args = os(&["probe", "-q"]);
            for event in self.events.keys() {
                args.extend(["-d".into(), event.into()]);
            }
            let status = Command::new("timeout")
                .args(["-k", "10", TIMEOUT, "perf"])
                .args(&args)
                .status();
            let left = std::fs::read_to_string(UPROBE_EVENTS).unwrap_or_default();
            let ours = left.lines().any(|l| {
                let event = l.split_whitespace().next().unwrap_or("");
                let event = event.trim_start_matches("p:").replacen('/', ":", 1);
                self.events.contains_key(&event)
            });
            if ours || !matches!(status, Ok(s) if s.success()) {
                eprintln!(
                    "{}: perf probe -d {status:?} left events:\n{left}",
                    self.what
                );
            }
        }
        let _ = Command::new("timeout")
            .args(["-k", "10", TIMEOUT, "perf", "buildid-cache", "--remove"])
            .arg(&self.elf)
            .status();
    }
}

const UPROBE_EVENTS: &str = "/sys/kernel/tracing/uprobe_events";

/// `target/shapes/perf`: perf's output files.
fn scratch() -> PathBuf {
    let dir = root().join("target").join("shapes").join("perf");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cmd(bin: &Path, args: &[&str]) -> Vec<OsString> {
    let mut v = vec![bin.as_os_str().to_owned()];
    v.extend(os(args));
    v
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(p, n)| (p.to_string(), *n)).collect()
}

fn some(values: &[i128]) -> Vec<Option<i128>> {
    values.iter().copied().map(Some).collect()
}

/// `types once`: every probe's sites, counts and argument values.
fn check_types(bin: &Path, what: &str) {
    let session = Session::new(bin, what);
    let (out, got) = session.stat(&cmd(bin, &["once"]), "");
    assert!(out.contains("lazy closure runs: 3"), "{what}: {out}");
    let want = counts(&[
        ("types:unsigned", 2),
        ("types:signed", 2),
        ("types:other", 1),
        ("types:strings", 2),
        ("types:pointers", 1),
        ("types:twelve", 1),
        ("types:lazy", 3),
        ("types:generic", 3),
        ("types:inlined", 5),
        ("types:done", 0),
    ]);
    assert_eq!(got, want, "{what}: perf stat");
    eprintln!("{what}: perf stat {got:?}");

    let (out, hits) = session.record(&cmd(bin, &["once"]), "");
    let pointers: Vec<i128> = out
        .lines()
        .find_map(|l| l.strip_prefix("pointers "))
        .expect("types prints its pointers")
        .split(' ')
        .map(|p| p.parse().unwrap())
        .collect();
    let max = |bits: u32| (1i128 << bits) - 1;
    let mut want: Vec<(&str, Vec<Option<i128>>)> = vec![
        (
            "types:unsigned",
            some(&[255, 60000, max(32), max(64), max(64)]),
        ),
        ("types:unsigned", some(&[0; 5])),
        (
            "types:signed",
            some(&[
                -1,
                i16::MIN.into(),
                i32::MIN.into(),
                i64::MIN.into(),
                i64::MIN.into(),
            ]),
        ),
        (
            "types:signed",
            some(&[127, 32767, i32::MAX.into(), i64::MAX.into(), -2]),
        ),
        (
            "types:other",
            some(&[
                1,
                0,
                0xe9,
                1.5f32.to_bits().into(),
                (-2.0f64).to_bits().into(),
            ]),
        ),
        ("types:strings", vec![None; 4]),
        ("types:strings", vec![None; 4]),
        ("types:pointers", some(&pointers)),
        (
            "types:twelve",
            some(&[
                max(64),
                i64::MIN.into(),
                max(32),
                -5,
                60000,
                -300,
                200,
                -100,
                1,
                'z' as i128,
                12345,
                -12345,
            ]),
        ),
    ];
    want.extend((1..=3).map(|v| ("types:generic", some(&[v]))));
    want.extend((1..=5).map(|v| ("types:inlined", some(&[v]))));
    want.extend((0..3).map(|i| ("types:lazy", vec![Some(i), None])));
    session.check_hits(&hits, &want);
}

/// `demo 7`: the eager, lazy and ad-hoc probes.
fn check_demo(bin: &Path, what: &str) {
    let session = Session::new(bin, what);
    let (out, got) = session.stat(&cmd(bin, &["7"]), "");
    assert!(
        out.contains("fired 7 requests; 7 were traced at request_done"),
        "{what}: {out}"
    );
    let want = counts(&[
        ("http:request_start", 7),
        ("http:request_done", 7),
        ("http:tick", 7),
    ]);
    assert_eq!(got, want, "{what}: perf stat");
    let (_, hits) = session.record(&cmd(bin, &["3"]), "");
    let want: Vec<_> = (0..3)
        .flat_map(|i| {
            [
                ("http:request_start", vec![Some(i), None]),
                ("http:request_done", vec![Some(i), Some(200), None]),
                ("http:tick", some(&[i, -1])),
            ]
        })
        .collect();
    session.check_hits(&hits, &want);
}

/// `gc 5`: the one probe the linker kept.
fn check_gc(bin: &Path, what: &str) {
    let session = Session::new(bin, what);
    let (out, got) = session.stat(&cmd(bin, &["5"]), "");
    assert_eq!(out, "kept 5\n", "{what}");
    assert_eq!(got, counts(&[("gc:kept", 5)]), "{what}: perf stat");
    let (_, hits) = session.record(&cmd(bin, &["2"]), "");
    session.check_hits(&hits, &[("gc:kept", some(&[0])), ("gc:kept", some(&[1]))]);
}

/// Reads, counts and records the probes of one build-shape cell.
fn check_cell(cell: Cell) {
    if !ready(&NEEDS) {
        return;
    }
    let what = cell.describe();
    let _serial = serialize();
    check_types(&cell.bin("types"), &format!("types ({what})"));
    check_demo(&cell.bin("demo"), &format!("demo ({what})"));
    check_gc(&cell.bin("gc"), &format!("gc ({what})"));
}

#[test]
fn perf_o0_debug_info_lld() {
    check_cell(O0);
}

#[test]
fn perf_o1_thin_lto_gnu_ld() {
    check_cell(O1_THIN_GNU_LD);
}

#[test]
fn perf_o2_one_codegen_unit_non_pie() {
    check_cell(O2_NON_PIE);
}

#[test]
fn perf_o3_fat_lto_panic_abort() {
    check_cell(O3_FAT_ABORT);
}

#[test]
fn perf_os_thin_lto_non_pie_gnu_ld() {
    check_cell(OS_THIN_NON_PIE_GNU_LD);
}

#[test]
fn perf_oz_fat_lto_gnu_ld() {
    check_cell(OZ_FAT_GNU_LD);
}

/// The cdylib, loaded by the C and the Rust loader: perf's uprobes on the
/// library's file count its probes in any process that maps it.
#[test]
fn perf_cdylib() {
    if !ready(&NEEDS) {
        return;
    }
    let _serial = serialize();
    let built = built();
    let session = Session::new(&built.lib, cdylib::LIB);
    for loader in [&built.c, &built.rust] {
        let lib = built.lib.to_str().unwrap();
        let (out, got) = session.stat(&cmd(loader, &[lib, "10"]), "\n");
        assert!(
            out.contains("fired 10 runs=10"),
            "{}: {out}",
            loader.display()
        );
        assert_eq!(
            got,
            counts(&[("cdylib:eager", 10), ("cdylib:lazy", 10)]),
            "{}: perf stat",
            loader.display()
        );
    }
    let lib = built.lib.to_str().unwrap();
    let (_, hits) = session.record(&cmd(&built.c, &[lib, "3"]), "\n");
    let want: Vec<_> = (0..3)
        .flat_map(|i| {
            [
                ("cdylib:eager", some(&[i])),
                ("cdylib:lazy", some(&[i, i * i])),
            ]
        })
        .collect();
    session.check_hits(&hits, &want);
}

/// The mixes of Rust and C probes, built with GNU ld or LLD.
struct Mix {
    rust_first: PathBuf,
    c_first: PathBuf,
}

/// Builds `tests/perfmix/` with GNU ld (`gnu_ld`) or LLD, in a target
/// directory per linker.
fn mix(gnu_ld: bool) -> Mix {
    let root = root();
    let src = root.join("tests").join("perfmix");
    let linker = if gnu_ld { "bfd" } else { "lld" };
    let dir = root.join("target").join("shapes").join("perfmix");
    let out = dir.join(linker);
    std::fs::create_dir_all(&out).unwrap();
    let probes = out.join("probes.o");
    run_ok(
        Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-c", "-o"])
            .arg(&probes)
            .arg(src.join("probes.c")),
    );
    let targets = format!(
        "[lib]\nname = \"perfmix\"\npath = {:?}\ncrate-type = [\"rlib\", \"staticlib\"]\n\n\
         [[bin]]\nname = \"rust_first\"\npath = {:?}\n\n",
        src.join("lib.rs").display().to_string(),
        src.join("rust_first.rs").display().to_string()
    );
    let pkg = standalone_package(&dir.join("pkg"), "usdt-perfmix", &targets);
    // The C object after every Rust object on the linker's command line.
    let mut flags = format!("-C link-arg={}", probes.display());
    // rustc's bundled LLD, for cc too.
    let sysroot = run_ok(Command::new("rustc").args(["--print", "sysroot"]));
    let gcc_ld = PathBuf::from(String::from_utf8(sysroot.stdout).unwrap().trim())
        .join("lib/rustlib")
        .join(HOST)
        .join("bin/gcc-ld");
    let fuse: Vec<OsString> = if gnu_ld {
        flags.push_str(" -C link-arg=-fuse-ld=bfd");
        os(&["-fuse-ld=bfd"])
    } else {
        vec!["-fuse-ld=lld".into(), "-B".into(), gcc_ld.into()]
    };
    let target_dir = out.join("target");
    run_ok(
        Command::new(env!("CARGO"))
            .current_dir(&pkg)
            .args([
                "build",
                "--quiet",
                "--release",
                "--lib",
                "--bins",
                "--target",
            ])
            .arg(HOST)
            .arg("--target-dir")
            .arg(&target_dir)
            .env("RUSTFLAGS", flags)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
    );
    let release = target_dir.join(HOST).join("release");
    // The C program: its C objects first, then the Rust static library.
    let c_first = out.join("c_first");
    run_ok(
        Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-Wl,--gc-sections"])
            .args(&fuse)
            .arg("-o")
            .arg(&c_first)
            .arg(src.join("c_first.c"))
            .arg(&probes)
            .arg(release.join("libperfmix.a"))
            .args(["-lgcc_s", "-lpthread", "-ldl", "-lm"]),
    );
    Mix {
        rust_first: release.join("rust_first"),
        c_first,
    }
}

/// The probes of a mix: all of Rust's and C's, counted and read.
fn check_mix(bin: &Path, what: &str) {
    // The C probes' notes pass the same arithmetic as ours.
    let data = std::fs::read(bin).unwrap();
    let probes = usdt_trace::read_probes(&data).unwrap();
    let file = object::File::parse(&*data).unwrap();
    check_base(&file, &probes, what);

    let session = Session::new(bin, what);
    let (out, got) = session.stat(&cmd(bin, &["4"]), "");
    assert!(out.contains("fired 4 lazy=4"), "{what}: {out}");
    let want = counts(&[
        ("rmix:eager", 4),
        ("rmix:lazy", 4),
        ("cmix:hit", 4),
        ("cmix:small", 1),
    ]);
    assert_eq!(got, want, "{what}: perf stat");
    let (_, hits) = session.record(&cmd(bin, &["2"]), "");
    let mut want: Vec<_> = (0..2)
        .flat_map(|i| [("rmix:eager", some(&[i, 2])), ("rmix:lazy", some(&[i, -i]))])
        .collect();
    want.extend((0..2).map(|i| ("cmix:hit", some(&[i, 2]))));
    want.push(("cmix:small", some(&[-3, -300])));
    session.check_hits(&hits, &want);
}

/// `.stapsdt.base` is executable, and perf's file offset for every note
/// (section offset - Base + Location) is the site's true one.
fn check_base(file: &object::File, probes: &ElfProbes, what: &str) {
    use object::{Object, ObjectSection, SectionFlags};
    let base = file
        .section_by_name(".stapsdt.base")
        .expect(".stapsdt.base");
    let SectionFlags::Elf { sh_flags } = base.flags() else {
        panic!("{what}: not ELF")
    };
    assert!(sh_flags & 4 != 0, "{what}: .stapsdt.base not executable");
    let (section_offset, _) = base.file_range().unwrap();
    for site in &probes.sites {
        assert_eq!(
            site.note_base,
            base.address(),
            "{what}: {} Base",
            site.probe()
        );
        let perf = section_offset + site.location - site.note_base;
        assert_eq!(
            perf,
            file_offset(probes, site.location, what),
            "{what}: {}",
            site.probe()
        );
    }
}

#[test]
fn perf_rust_and_c_probes_lld() {
    if !ready(&NEEDS) {
        return;
    }
    let _serial = serialize();
    let mix = mix(false);
    check_mix(&mix.rust_first, "rust_first (LLD)");
    check_mix(&mix.c_first, "c_first (LLD)");
}

#[test]
fn perf_rust_and_c_probes_gnu_ld() {
    if !ready(&NEEDS) {
        return;
    }
    let _serial = serialize();
    let mix = mix(true);
    check_mix(&mix.rust_first, "rust_first (GNU ld)");
    check_mix(&mix.c_first, "c_first (GNU ld)");
}

/// The bench binary links our probes with the `probe` crate's, whose
/// templates define `_.stapsdt.base` in a read-only member, some in the same
/// object files as ours: every note of it passes perf's arithmetic. (Its C
/// `<sys/sdt.h>` loop is a library it loads at run time; the C-and-Rust
/// links are the `perf_rust_and_c_probes_*` tests.)
#[test]
fn perf_offsets_of_the_bench_binary() {
    let _serial = serialize();
    let target_dir = root().join("target").join("shapes").join("bench");
    run_ok(
        Command::new(env!("CARGO"))
            .current_dir(root())
            .args([
                "build",
                "--quiet",
                "--release",
                "-p",
                "usdt-bench",
                "--bin",
                "bench",
            ])
            .arg("--target-dir")
            .arg(&target_dir)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET"),
    );
    let bin = target_dir.join("release").join("bench");
    let data = std::fs::read(&bin).unwrap();
    let probes = usdt_trace::read_probes(&data).unwrap();
    assert!(
        probes.sites.iter().any(|s| s.provider == "pbench")
            && probes.sites.iter().any(|s| s.provider == "bench"),
        "the bench binary has the probe crate's probe and ours"
    );
    let file = object::File::parse(&*data).unwrap();
    check_base(&file, &probes, "bench");
}
