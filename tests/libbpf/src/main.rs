//! `usdt-libbpf-check BINARY`: runs `BINARY phases` (the `types` example),
//! attaches one BPF program to every `types` probe with libbpf's
//! `bpf_program__attach_usdt`, lets the program fire everything, and prints
//! what the BPF program read, one line per event, plus the site bytes before
//! and after the hits, whether the process gained `[uprobes-trampoline]`,
//! and the program's own output and exit status. `tests/libbpf.rs` in the
//! root workspace compares that with what `types` passed.

use std::io::{BufRead, BufReader, Write};
use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, RingBufferBuilder, UsdtOpts};

mod busy;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/usdt.skel.rs"));
}

/// The `types` probes and how to print each argument: `u` unsigned, `i`
/// signed, `b` bool, `c` char, `f` f32 bits, `d` f64 bits, `s` string,
/// `p` pointer.
const PROBES: [(&str, &str); 10] = [
    ("unsigned", "uuuuu"),
    ("signed", "iiiii"),
    ("other", "bbcfd"),
    ("strings", "ssss"),
    ("pointers", "ppp"),
    ("twelve", "uiuiuiuibcui"),
    ("lazy", "us"),
    ("generic", "u"),
    ("inlined", "u"),
    ("done", ""),
];

/// `struct event` of `usdt.bpf.c`: cookie, arg_cnt, pid, arg_errors, pad,
/// args[12], strs[4][256].
const ARGS_AT: usize = 24;
const STRS_AT: usize = ARGS_AT + 12 * 8;
const STR_LEN: usize = 256;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let result = match args
        .iter()
        .map(|a| a.to_str())
        .collect::<Vec<_>>()
        .as_slice()
    {
        [Some(bin)] => run(Path::new(bin)),
        [Some("load"), Some(bin)] => with_skel(bin, busy::load),
        [Some("fork"), Some(bin)] => with_skel(bin, busy::fork),
        _ => {
            eprintln!("usage: usdt-libbpf-check [load|fork] BINARY");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("usdt-libbpf-check: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn with_skel(bin: &str, check: fn(&skel::UsdtSkel<'_>, &Path) -> Result<()>) -> Result<()> {
    let exe = std::fs::canonicalize(bin)?;
    let mut storage = MaybeUninit::uninit();
    let skel = skel::UsdtSkelBuilder::default()
        .open(&mut storage)?
        .load()?;
    check(&skel, &exe)
}

fn run(bin: &Path) -> Result<()> {
    let exe = std::fs::canonicalize(bin)?;
    let mut child = Command::new(&exe)
        .arg("phases")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let lines = program_lines(&mut child);
    let pid = child.id();
    // The untraced phase is over once the program says so.
    println!("program {}", next_line(&lines)?);

    let mut storage = MaybeUninit::uninit();
    let skel = skel::UsdtSkelBuilder::default()
        .open(&mut storage)?
        .load()?;
    let links = attach_all(&skel, pid, &exe)?;
    let sites = site_addresses(pid, &exe)?;
    let attached: Vec<String> = sites
        .iter()
        .map(|(_, addr)| site_bytes(pid, *addr))
        .collect::<Result<_>>()?;

    writeln!(child.stdin.as_mut().ok_or("no stdin")?)?;
    receive_until_done(&skel)?;
    let trampoline =
        std::fs::read_to_string(format!("/proc/{pid}/maps"))?.contains("[uprobes-trampoline]");
    for ((probe, addr), before) in sites.iter().zip(&attached) {
        println!(
            "site {probe} attached={before} hit={}",
            site_bytes(pid, *addr)?
        );
    }
    println!("trampoline {trampoline}");

    // Detaching lowers the semaphores; the program then fires the lazy
    // probe untraced and exits.
    drop(links);
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) {
        println!("program {line}");
    }
    println!("exit {}", child.wait()?);
    Ok(())
}

/// The program's stdout, line by line, from a thread.
fn program_lines(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(lines: &Receiver<String>) -> Result<String> {
    Ok(lines.recv_timeout(Duration::from_secs(60))?)
}

/// One libbpf USDT attachment per probe; the cookie says which probe and
/// which arguments are strings.
fn attach_all(skel: &skel::UsdtSkel<'_>, pid: u32, exe: &Path) -> Result<Vec<Link>> {
    let mut links = vec![];
    for (i, (name, kinds)) in PROBES.iter().enumerate() {
        let strings = kinds
            .bytes()
            .enumerate()
            .filter(|&(_, k)| k == b's')
            .fold(0u64, |mask, (j, _)| mask | 1 << j);
        let opts = UsdtOpts {
            cookie: i as u64 | strings << 32,
            ..Default::default()
        };
        let link = skel
            .progs
            .on_probe
            .attach_usdt_with_opts(pid as i32, exe, "types", name, opts)
            .map_err(|e| format!("attaching types:{name}: {e}"))?;
        links.push(link);
    }
    Ok(links)
}

/// Every `types` site's run-time address in the process.
fn site_addresses(pid: u32, exe: &Path) -> Result<Vec<(String, u64)>> {
    let object = usdt_trace::read_process(pid)?
        .into_iter()
        .find(|o| Path::new(&o.path) == exe)
        .ok_or("the program is not mapped")?;
    let probes = object.probes?;
    Ok(probes
        .sites
        .iter()
        .filter(|s| s.provider == "types")
        .map(|s| (s.probe(), s.location.wrapping_add(object.bias)))
        .collect())
}

/// The two bytes at Location, in hex: `90cc` is a uprobe at Location + 1,
/// `cc0f`/`cc66` one at Location, `90e8` a nop5 the kernel optimized.
fn site_bytes(pid: u32, addr: u64) -> Result<String> {
    let mem = std::fs::File::open(PathBuf::from(format!("/proc/{pid}/mem")))?;
    let mut buf = [0u8; 2];
    mem.read_exact_at(&mut buf, addr)?;
    Ok(format!("{:02x}{:02x}", buf[0], buf[1]))
}

/// Prints every event until `types:done` arrives.
fn receive_until_done(skel: &skel::UsdtSkel<'_>) -> Result<()> {
    let done = std::cell::Cell::new(false);
    let mut builder = RingBufferBuilder::new();
    builder.add(&skel.maps.events, |data: &[u8]| {
        let (probe, line) = decode(data);
        println!("event {line}");
        if probe == "done" {
            done.set(true);
        }
        0
    })?;
    let ring = builder.build()?;
    let start = Instant::now();
    while !done.get() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("no types:done event within 60 s".into());
        }
        ring.poll(Duration::from_millis(100))?;
    }
    Ok(())
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(data[at..at + 8].try_into().unwrap())
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(data[at..at + 4].try_into().unwrap())
}

/// `NAME ARG...`, each argument printed as its Rust type would be; a value
/// wider than its type, a wrong argument count or a failed read is printed
/// as such, so it cannot match the expected line.
fn decode(data: &[u8]) -> (&'static str, String) {
    let cookie = u64_at(data, 0);
    let (name, kinds) = PROBES[(cookie & 0xffff_ffff) as usize];
    let count = u32_at(data, 8) as usize;
    let errors = u32_at(data, 16);
    let mut line = name.to_owned();
    if count != kinds.len() || errors != 0 {
        line += &format!(" bad-count={count} errors={errors:#x}");
    }
    for (i, kind) in kinds.bytes().enumerate() {
        let raw = u64_at(data, ARGS_AT + 8 * i);
        line.push(' ');
        line += &match kind {
            b'u' | b'p' => raw.to_string(),
            b'i' => (raw as i64).to_string(),
            b'b' if raw <= 1 => (raw == 1).to_string(),
            b'c' => match u32::try_from(raw).ok().and_then(char::from_u32) {
                Some(c) => c.to_string(),
                None => format!("bad-char={raw:#x}"),
            },
            b'f' if raw <= u64::from(u32::MAX) => f32::from_bits(raw as u32).to_string(),
            b'd' => f64::from_bits(raw).to_string(),
            b's' => {
                let s = &data[STRS_AT + STR_LEN * i..STRS_AT + STR_LEN * (i + 1)];
                let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
                format!("{:?}", String::from_utf8_lossy(&s[..end]))
            }
            _ => format!("bad={raw:#x}"),
        };
    }
    (name, line)
}
