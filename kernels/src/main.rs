//! `usdt-kernels`: the kernel matrix (see lib.rs).
//!
//! ```text
//! usdt-kernels [--json] [--kernel GEN]... [--refresh] [--jobs N]
//! usdt-kernels guest --usdt PATH --layout NAME=EXAMPLES,BENCH... --iterations N --out FILE
//!                    [--values] [--consumers bpftrace,gdb]
//! ```
//!
//! Prints a table (or with `--json` a JSON array, one object per kernel, and
//! the table on stderr) on stdout, progress on stderr; exits 1 when a kernel
//! breaks a contract, 2 when the matrix could not run at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use usdt_kernels::build::{self, Binaries, LayoutBins};
use usdt_kernels::userland::{self, Userland};
use usdt_kernels::{boot, exec, fetch, guest, initramfs, report, Arch, GENERATIONS};

const USAGE: &str = "usage: usdt-kernels [--json] [--kernel GEN]... [--refresh] [--jobs N]
  GEN: 5.10 6.1 6.12 host 6.19 7.2 7.3 arm64-6.1 arm64-6.12 arm64-7.3
       riscv64-6.12 riscv64-7.2 (default: all)";

/// Iterations of each bench row: on the machine, and in an emulated guest
/// (about 50 times slower; an arm64 or riscv64 guest, emulated on x86-64,
/// about 200 times).
const HOST_ITERATIONS: u64 = 1_000_000;
fn guest_iterations(arch: Arch) -> u64 {
    match arch {
        Arch::X86_64 => 100_000,
        Arch::Aarch64 | Arch::Riscv64 => 50_000,
    }
}

struct Options {
    json: bool,
    kernels: Vec<String>,
    refresh: bool,
    jobs: usize,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        json: false,
        kernels: Vec::new(),
        refresh: false,
        jobs: 2,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => o.json = true,
            "--refresh" => o.refresh = true,
            "--kernel" => {
                let g = args
                    .next()
                    .ok_or(format!("--kernel needs a GEN; {USAGE}"))?;
                if usdt_kernels::generation(g).is_none() {
                    return Err(format!("no kernel generation \"{g}\"; {USAGE}"));
                }
                o.kernels.push(g.clone());
            }
            "--jobs" => {
                o.jobs = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or(format!("--jobs needs a positive number; {USAGE}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{arg}`; {USAGE}")),
        }
    }
    if o.kernels.is_empty() {
        o.kernels = GENERATIONS.iter().map(|g| g.name.to_string()).collect();
    }
    Ok(o)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("guest") => guest_main(&args[1..]),
        _ => options(&args).and_then(matrix),
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("usdt-kernels: {e}");
            std::process::exit(2);
        }
    }
}

/// The guest command: the checks, written to `--out`.
fn guest_main(args: &[String]) -> Result<bool, String> {
    let (mut usdt, mut out, mut layouts, mut iterations) =
        (None, None, Vec::new(), guest_iterations(Arch::host()));
    let (mut values, mut consumers) = (false, vec!["bpftrace".to_string(), "gdb".into()]);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--values" {
            values = true;
            continue;
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--consumers" => {
                consumers = value
                    .split(',')
                    .filter(|c| !c.is_empty() && *c != "none")
                    .map(String::from)
                    .collect()
            }
            "--usdt" => usdt = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--layout" => layouts.push(LayoutBins::from_arg(value)?),
            "--iterations" => {
                iterations = value.parse().map_err(|_| format!("--iterations {value}"))?
            }
            _ => return Err(format!("guest: unknown argument `{arg}`")),
        }
    }
    let plan = exec::Plan {
        usdt: usdt.ok_or("guest: --usdt PATH")?,
        layouts,
        bench_iterations: iterations,
        timeout: Duration::from_secs(300),
        values,
        consumers,
    };
    let result = guest::check(&plan);
    let out = out.ok_or("guest: --out FILE")?;
    std::fs::write(&out, result.to_string()).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(true)
}

/// The whole matrix.
fn matrix(opts: Options) -> Result<bool, String> {
    let start = Instant::now();
    let cache = usdt_kernels::cache_dir();
    let chosen: Vec<usdt_kernels::Generation> = opts
        .kernels
        .iter()
        .filter_map(|g| usdt_kernels::generation(g))
        .collect();
    let mut arches: Vec<Arch> = chosen
        .iter()
        .map(|g| match g.series {
            "host" => Arch::host(),
            _ => g.arch,
        })
        .collect();
    arches.dedup();
    arches.sort_by_key(|a| a.name());
    arches.dedup();
    // What the guests of each architecture run.
    let mut bins: BTreeMap<&str, Binaries> = BTreeMap::new();
    for arch in &arches {
        bins.insert(arch.name(), build::build(*arch)?);
    }
    let guests: Vec<&usdt_kernels::Generation> =
        chosen.iter().filter(|g| g.series != "host").collect();
    let guest_arches: Vec<Arch> = arches
        .iter()
        .copied()
        .filter(|a| guests.iter().any(|g| g.arch == *a))
        .collect();
    let venv = match guests.is_empty() {
        true => Err("no guest asked for".to_string()),
        false => boot::prepare(&cache, &guest_arches),
    };
    match &venv {
        Ok(_) => {
            for a in &guest_arches {
                eprintln!(
                    "kernels: {} guests run under {}",
                    a.debian(),
                    boot::accel_for(*a).1
                )
            }
        }
        Err(e) if !guests.is_empty() => {
            eprintln!("kernels: qemu cannot run here, so no guest boots: {e}")
        }
        Err(_) => {}
    }
    // The userland of each foreign architecture's guests.
    let mut lands: BTreeMap<&str, Result<Userland, String>> = BTreeMap::new();
    for a in guest_arches.iter().filter(|a| **a != Arch::host()) {
        let mut packages = userland::BASE.to_vec();
        packages.extend(userland::CONSUMERS);
        lands.insert(a.name(), userland::fetch(&cache, *a, &packages));
    }
    let mut rows: Vec<(usize, Value)> = Vec::new();
    if let (true, Some(host_bins)) = (
        chosen.iter().any(|g| g.series == "host"),
        bins.get(Arch::host().name()),
    ) {
        eprintln!("kernels: checking the host's kernel");
        let t = Instant::now();
        let mut row = guest::check(&host_plan(host_bins));
        row["accel"] = json!("host");
        row["package"] = Value::Null;
        row["version"] = Value::Null;
        row["seconds"] = json!(t.elapsed().as_secs_f64());
        rows.push((position("host"), row));
    }
    let mut kernels = Vec::new();
    for g in &guests {
        let land = lands.get(g.arch.name()).map(|l| l.as_ref().map(|_| ()));
        match (&venv, land, fetch::fetch(&cache, g.name, opts.refresh)) {
            (Ok(_), None | Some(Ok(())), Ok(k)) => {
                if let Some(why) = fetch::unbootable(&k) {
                    eprintln!(
                        "kernels: {}: {why}; it boots on an initramfs of its own",
                        g.name
                    );
                }
                kernels.push(k)
            }
            (Err(e), _, _) => rows.push((
                position(g.name),
                failed(g.name, &format!("qemu cannot run here: {e}")),
            )),
            (_, Some(Err(e)), _) => rows.push((
                position(g.name),
                failed(g.name, &format!("its userland: {e}")),
            )),
            (_, _, Err(e)) => {
                rows.push((position(g.name), failed(g.name, &format!("fetching: {e}"))))
            }
        }
    }
    if let Ok(venv) = &venv {
        let run = Run {
            venv,
            bins: &bins,
            lands: &lands,
            cache: &cache,
        };
        // Emulated guests of another architecture first, beside the oldest
        // of the machine's, which optimize nothing: the newer ones' speed
        // self-tests (trap against optimized, whose verdict moves the default
        // attach) then run beside guests as light as before.
        kernels.sort_by_key(|k| (k.arch == Arch::host(), position(&k.generation)));
        rows.extend(boot_all(&run, &kernels, opts.jobs));
        // A guest whose only broken contract is its traced rate is measured
        // again, alone: emulated guests share the machine's two cores, and
        // an emulated rate drops while another guest (or other work) runs.
        for k in &kernels {
            let at = position(&k.generation);
            let Some(slot) = rows.iter_mut().find(|(i, _)| *i == at) else {
                continue;
            };
            if only_rate_broken(&slot.1) {
                eprintln!(
                    "kernels: {}: measured again, alone (its traced rate alone broke a contract beside another guest)",
                    k.generation
                );
                slot.1 = boot_one(&run, k);
            }
        }
    }
    rows.sort_by_key(|(i, _)| *i);
    let rows: Vec<Value> = rows.into_iter().map(|(_, r)| r).collect();
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?
        );
        eprint!("{}", report::text(&rows));
    } else {
        print!("{}", report::text(&rows));
    }
    eprintln!(
        "kernels: the matrix took {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(rows.iter().all(|r| report::broken(r).is_empty()))
}

/// Whether the one contract `row` breaks is the traced rate's.
fn only_rate_broken(row: &Value) -> bool {
    let broken = report::broken(row);
    !broken.is_empty() && broken.iter().all(|b| b.contains("C sys/sdt.h's rate"))
}

fn position(generation: &str) -> usize {
    GENERATIONS
        .iter()
        .position(|g| g.name == generation)
        .unwrap_or(usize::MAX)
}

fn failed(generation: &str, why: &str) -> Value {
    json!({ "kernel": generation, "error": why })
}

fn host_plan(bins: &Binaries) -> exec::Plan {
    exec::Plan {
        usdt: bins.usdt.clone(),
        layouts: bins.layouts.clone(),
        bench_iterations: HOST_ITERATIONS,
        timeout: Duration::from_secs(120),
        values: bins.values,
        consumers: vec!["bpftrace".into(), "gdb".into()],
    }
}

/// What every guest of one run shares.
struct Run<'a> {
    /// virtme-ng's `bin/`.
    venv: &'a Path,
    /// The programs, by architecture.
    bins: &'a BTreeMap<&'static str, Binaries>,
    /// The userland of each foreign architecture.
    lands: &'a BTreeMap<&'static str, Result<Userland, String>>,
    cache: &'a Path,
}

/// Boots the kernels, `jobs` at a time.
fn boot_all(run: &Run, kernels: &[fetch::Kernel], jobs: usize) -> Vec<(usize, Value)> {
    let queue = std::sync::Mutex::new(kernels.iter());
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(kernels.len()) {
            s.spawn(|| loop {
                let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                let Some(k) = next else { break };
                let row = boot_one(run, k);
                if let Ok(mut d) = done.lock() {
                    d.push((position(&k.generation), row));
                }
            });
        }
    });
    done.into_inner().unwrap_or_default()
}

/// The guest command: this harness's `guest` command, with `bins` as the
/// guest sees them.
fn guest_command(bins: &Binaries, consumers: &[String], out: &Path) -> Vec<String> {
    let mut command = vec![
        bins.harness.display().to_string(),
        "guest".into(),
        "--usdt".into(),
        bins.usdt.display().to_string(),
        "--iterations".into(),
        guest_iterations(bins.arch).to_string(),
        "--out".into(),
        out.display().to_string(),
        "--consumers".into(),
        match consumers.is_empty() {
            true => "none".into(),
            false => consumers.join(","),
        },
    ];
    if bins.values {
        command.push("--values".into());
    }
    for l in &bins.layouts {
        command.extend(["--layout".to_string(), l.to_arg()]);
    }
    command
}

fn boot_one(run: &Run, k: &fetch::Kernel) -> Value {
    eprintln!(
        "kernels: booting {} ({} {})",
        k.release, k.package, k.version
    );
    let shared = run.cache.join("runs").join(&k.release);
    let out = shared.join("result.json");
    let _ = std::fs::remove_file(&out);
    let (accel, _) = boot::accel_for(k.arch);
    let Some(bins) = run.bins.get(k.arch.name()) else {
        return failed(&k.generation, "its programs were not built");
    };
    // A kernel without modules has no 9p, and one of another architecture
    // cannot run the machine's programs: each boots on an initramfs
    // holding what the checks run, and its result comes back on a serial
    // port.
    let initramfs = fetch::unbootable(k).is_some();
    let guest_out = match initramfs {
        true => PathBuf::from(initramfs::GUEST_OUT),
        false => out.clone(),
    };
    let timeout = Duration::from_secs(1200);
    let booted = match (initramfs, run.lands.get(k.arch.name())) {
        (false, _) => {
            let consumers = ["bpftrace".to_string(), "gdb".into()];
            let command = guest_command(bins, &consumers, &guest_out);
            boot::boot(run.venv, k, accel, &command, &shared, timeout)
        }
        (true, None) => {
            let consumers = ["bpftrace".to_string(), "gdb".into()];
            let command = guest_command(bins, &consumers, &guest_out);
            initramfs::archive(run.cache, bins, &command)
                .and_then(|initrd| initramfs::boot(k, accel, &initrd, &shared, &out, timeout))
        }
        (true, Some(Err(e))) => Err(format!("its userland: {e}")),
        (true, Some(Ok(land))) => {
            let (guest_bins, _) = initramfs::placed(bins);
            let consumers: Vec<String> = land
                .consumers()
                .iter()
                .filter_map(|c| Some(c.file_name()?.to_str()?.to_string()))
                .collect();
            let command = guest_command(&guest_bins, &consumers, &guest_out);
            initramfs::archive_foreign(run.cache, bins, land, &command)
                .and_then(|initrd| initramfs::boot(k, accel, &initrd, &shared, &out, timeout))
        }
    };
    let mut row = match &booted {
        Ok(b) => std::fs::read_to_string(&out)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_else(|| {
                failed(
                    &k.generation,
                    &format!(
                        "the guest wrote no result ({} {}; console in {})",
                        if initramfs { "qemu" } else { "vng" },
                        b.status,
                        b.console.display()
                    ),
                )
            }),
        Err(e) => failed(&k.generation, e),
    };
    row["accel"] = json!(accel.name());
    row["root"] = json!(if initramfs { "initramfs" } else { "9p" });
    row["package"] = json!(k.package);
    row["version"] = json!(k.version);
    row["seconds"] = json!(booted.as_ref().map(|b| b.seconds).unwrap_or(0.0));
    eprintln!("kernels: {} done", k.release);
    row
}
