//! `usdt-kernels`: the kernel matrix (see lib.rs).
//!
//! ```text
//! usdt-kernels [--json] [--kernel GEN]... [--refresh] [--jobs N]
//! usdt-kernels guest --usdt PATH --layout NAME=EXAMPLES,BENCH... --iterations N --out FILE
//! ```
//!
//! Prints a table (or with `--json` a JSON array, one object per kernel, and
//! the table on stderr) on stdout, progress on stderr; exits 1 when a kernel
//! breaks a contract, 2 when the matrix could not run at all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use usdt_kernels::build::{self, Binaries, LayoutBins};
use usdt_kernels::{boot, fetch, guest, initramfs, report, GENERATIONS};

const USAGE: &str = "usage: usdt-kernels [--json] [--kernel GEN]... [--refresh] [--jobs N]
  GEN: 5.10 6.1 6.12 host 6.19 7.2 7.3 (default: all)";

/// Iterations of each bench row: on the machine, and in an emulated guest
/// (about 50 times slower).
const HOST_ITERATIONS: u64 = 1_000_000;
const GUEST_ITERATIONS: u64 = 100_000;

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
                if !GENERATIONS.contains(&g.as_str()) {
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
        o.kernels = GENERATIONS.iter().map(|g| g.to_string()).collect();
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
        (None, None, Vec::new(), GUEST_ITERATIONS);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--usdt" => usdt = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--layout" => layouts.push(LayoutBins::from_arg(value)?),
            "--iterations" => {
                iterations = value.parse().map_err(|_| format!("--iterations {value}"))?
            }
            _ => return Err(format!("guest: unknown argument `{arg}`")),
        }
    }
    let plan = guest::Plan {
        usdt: usdt.ok_or("guest: --usdt PATH")?,
        layouts,
        bench_iterations: iterations,
        timeout: Duration::from_secs(300),
    };
    let result = guest::check(&plan);
    let out = out.ok_or("guest: --out FILE")?;
    std::fs::write(&out, result.to_string()).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(true)
}

/// The whole matrix.
fn matrix(opts: Options) -> Result<bool, String> {
    let start = Instant::now();
    let bins = build::build_all()?;
    let cache = usdt_kernels::cache_dir();
    let (accel, why) = boot::accel();
    let guests: Vec<&String> = opts.kernels.iter().filter(|g| *g != "host").collect();
    let venv = match guests.is_empty() {
        true => Err("no guest asked for".to_string()),
        false => boot::prepare(&cache),
    };
    match &venv {
        Ok(_) => eprintln!("kernels: guests run under {why}"),
        Err(e) if !guests.is_empty() => {
            eprintln!("kernels: qemu cannot run here, so no guest boots: {e}")
        }
        Err(_) => {}
    }
    let mut rows: Vec<(usize, Value)> = Vec::new();
    if opts.kernels.iter().any(|g| g == "host") {
        eprintln!("kernels: checking the host's kernel");
        let t = Instant::now();
        let mut row = guest::check(&host_plan(&bins));
        row["accel"] = json!("host");
        row["package"] = Value::Null;
        row["version"] = Value::Null;
        row["seconds"] = json!(t.elapsed().as_secs_f64());
        rows.push((position("host"), row));
    }
    let mut kernels = Vec::new();
    for g in &guests {
        match (&venv, fetch::fetch(&cache, g, opts.refresh)) {
            (Ok(_), Ok(k)) => {
                if let Some(why) = fetch::unbootable(&k) {
                    eprintln!("kernels: {g}: {why}; it boots on an initramfs of its own");
                }
                kernels.push(k)
            }
            (Err(e), _) => rows.push((
                position(g),
                failed(g, &format!("qemu cannot run here: {e}")),
            )),
            (_, Err(e)) => rows.push((position(g), failed(g, &format!("fetching: {e}")))),
        }
    }
    if let Ok(venv) = &venv {
        rows.extend(boot_all(venv, &kernels, accel, &bins, &cache, opts.jobs));
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
                slot.1 = boot_one(venv, k, accel, &bins, &cache);
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
        .position(|g| *g == generation)
        .unwrap_or(usize::MAX)
}

fn failed(generation: &str, why: &str) -> Value {
    json!({ "kernel": generation, "error": why })
}

fn host_plan(bins: &Binaries) -> guest::Plan {
    guest::Plan {
        usdt: bins.usdt.clone(),
        layouts: bins.layouts.clone(),
        bench_iterations: HOST_ITERATIONS,
        timeout: Duration::from_secs(120),
    }
}

/// Boots the kernels, `jobs` at a time.
fn boot_all(
    venv: &Path,
    kernels: &[fetch::Kernel],
    accel: boot::Accel,
    bins: &Binaries,
    cache: &Path,
    jobs: usize,
) -> Vec<(usize, Value)> {
    let queue = std::sync::Mutex::new(kernels.iter());
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(kernels.len()) {
            s.spawn(|| loop {
                let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                let Some(k) = next else { break };
                let row = boot_one(venv, k, accel, bins, cache);
                if let Ok(mut d) = done.lock() {
                    d.push((position(&k.generation), row));
                }
            });
        }
    });
    done.into_inner().unwrap_or_default()
}

fn boot_one(
    venv: &Path,
    k: &fetch::Kernel,
    accel: boot::Accel,
    bins: &Binaries,
    cache: &Path,
) -> Value {
    eprintln!(
        "kernels: booting {} ({} {})",
        k.release, k.package, k.version
    );
    let shared = cache.join("runs").join(&k.release);
    let out = shared.join("result.json");
    let _ = std::fs::remove_file(&out);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("usdt-kernels"));
    // A kernel without modules has no 9p: it boots on an initramfs holding
    // what the checks run, and its result comes back on a serial port.
    let initramfs = fetch::unbootable(k).is_some();
    let guest_out = match initramfs {
        true => PathBuf::from(initramfs::GUEST_OUT),
        false => out.clone(),
    };
    let mut command = vec![
        exe.display().to_string(),
        "guest".into(),
        "--usdt".into(),
        bins.usdt.display().to_string(),
        "--iterations".into(),
        GUEST_ITERATIONS.to_string(),
        "--out".into(),
        guest_out.display().to_string(),
    ];
    for l in &bins.layouts {
        command.extend(["--layout".to_string(), l.to_arg()]);
    }
    let timeout = Duration::from_secs(1200);
    let booted = match initramfs {
        false => boot::boot(venv, k, accel, &command, &shared, timeout),
        true => initramfs::archive(cache, &exe, bins, &command)
            .and_then(|initrd| initramfs::boot(k, accel, &initrd, &shared, &out, timeout)),
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
