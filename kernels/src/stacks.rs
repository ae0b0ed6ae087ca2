//! g. The stacks checks, on the `stacks` example (`examples/stacks.rs`:
//! `app:respond` reached through three known call paths, a known number of
//! times each, built in release without frame pointers): what
//! `usdt-cli/tests/stacks.rs` asserts on x86-64, in the guests of the other
//! architectures.
//!
//! - `usdt trace --stack -- stacks 2 3 4` with each engine the kernel has
//!   (and, where it has no BPF uprobe_multi links, the default engine,
//!   which falls back to perf): every hit, each with its path's functions
//!   in order, innermost first (`stacks::respond`, then `stacks::authorize`
//!   and `stacks::serve_api` for kind 2, then `stacks::main`), unwound to
//!   the program's entry (`_start`, through the standard library and the
//!   static C library);
//! - `usdt count --by stack app:respond -- stacks 2 3 4` the same: one
//!   folded stack per path, from `_start` to its functions, with its
//!   count;
//! - on a machine whose stacks are not unwound ([`Arch::unwinds_stacks`]:
//!   riscv64, which framehop has no unwinder for), each refuses in exactly
//!   one sentence ([`refusal`]).

use std::path::Path;

use serde_json::{json, Value};

use crate::exec::{usdt_on, Outcome, Plan};
use crate::Arch;

/// How many times each path fires: `serve_static`, `serve_api` (through
/// `authorize`), `run_job`; the example's arguments.
pub const COUNTS: [u64; 3] = [2, 3, 4];

/// Each path's functions in the program, root first (as folded stacks
/// write them).
pub const PATHS: [&str; 3] = [
    "stacks::main;stacks::serve_static;stacks::respond",
    "stacks::main;stacks::serve_api;stacks::authorize;stacks::respond",
    "stacks::main;stacks::run_job;stacks::respond",
];

/// The sentence `usdt` refuses `--stack` with on a machine whose stacks
/// are not unwound (usdt-trace's `stack::supported`), as it prints it.
pub fn refusal(arch: Arch) -> String {
    format!(
        "usdt: stacks are unwound on x86-64 and aarch64 only, not on this {} machine",
        arch.name()
    )
}

/// The engines the stacks are checked with: each the kernel has
/// (`engines`), and where it has no uprobe_multi links the default
/// (`auto`: BPF, which falls back to perf).
pub fn engines<'a>(engines: &[&'a str], multi: bool) -> Vec<&'a str> {
    let mut all = engines.to_vec();
    if !multi {
        all.push("auto");
    }
    all
}

/// Every stacks check, on `examples/stacks`; one object per check: `tool`,
/// `engine`, `status`, `exact`, and what was seen (`frames`: the stack of
/// each path; `why`: what differed; `notice`: what `usdt` said of the
/// engine, the default's fallback to perf where BPF has no uprobe_multi
/// links).
pub fn check(plan: &Plan, examples: &Path, engines: &[&str], log: &mut Vec<String>) -> Vec<Value> {
    let program = examples.join("stacks");
    let mut checks = Vec::new();
    for engine in engines {
        let o = usdt(plan, &program, &["trace", "--stack"], engine, log);
        checks.push(judged("usdt trace --stack", engine, &o, trace_paths, log));
        let o = usdt(
            plan,
            &program,
            &["count", "--by", "stack", "app:respond"],
            engine,
            log,
        );
        checks.push(judged(
            "usdt count --by stack",
            engine,
            &o,
            count_paths,
            log,
        ));
    }
    checks
}

/// `usdt ARGS [--engine E] -- stacks 2 3 4`, logged (`auto`: no
/// `--engine`).
fn usdt(
    plan: &Plan,
    program: &Path,
    args: &[&str],
    engine: &str,
    log: &mut Vec<String>,
) -> Outcome {
    let counts = COUNTS.map(|n| n.to_string());
    let counts: Vec<&str> = counts.iter().map(String::as_str).collect();
    let mut all = args.to_vec();
    if engine != "auto" {
        all.extend(["--engine", engine]);
    }
    usdt_on(plan, &all, program, &counts, log)
}

/// The check's object: on a machine that unwinds, `paths` of its output
/// (the stack of each path, or what differed); elsewhere the refusal.
fn judged(
    tool: &str,
    engine: &str,
    o: &Outcome,
    paths: fn(&str, &str) -> Result<Vec<String>, String>,
    log: &mut Vec<String>,
) -> Value {
    let arch = Arch::host();
    let (exact, frames, why) = match arch.unwinds_stacks() {
        true => match paths(&o.stdout, &o.stderr) {
            Ok(frames) if o.ok() => (true, frames, None),
            Ok(frames) => (false, frames, Some(format!("usdt ended {}", o.status))),
            Err(why) => (false, Vec::new(), Some(why)),
        },
        false => match refused(o, arch) {
            true => (true, Vec::new(), None),
            false => (
                false,
                Vec::new(),
                Some(format!("not refused with \"{}\"", refusal(arch))),
            ),
        },
    };
    let notice = o.stderr.lines().find(|l| l.contains("uprobe_multi"));
    if let Some(notice) = notice {
        log.push(format!("  {notice}"));
    }
    for f in &frames {
        log.push(format!("  stack: {f}"));
    }
    if let Some(why) = &why {
        log.push(format!("  {why}"));
    }
    json!({
        "tool": tool,
        "engine": engine,
        "example": "stacks",
        "status": o.status,
        "exact": exact,
        "frames": frames,
        "why": why,
        "notice": notice,
    })
}

/// Refused in exactly the sentence, and nothing traced.
pub fn refused(o: &Outcome, arch: Arch) -> bool {
    o.status == "exit=1"
        && o.stderr.lines().last() == Some(refusal(arch).as_str())
        && !o.stdout.contains("app:respond")
}

/// Each hit of `usdt trace --stack`: its line and its frames' functions
/// (the first word of each indented line).
fn hits(out: &str) -> Vec<(String, Vec<String>)> {
    let mut hits: Vec<(String, Vec<String>)> = Vec::new();
    for line in out.lines() {
        match (line.strip_prefix("    "), hits.last_mut()) {
            (Some(frame), Some((_, frames))) => {
                frames.push(frame.split(' ').next().unwrap_or("").to_string())
            }
            (Some(_), None) => {}
            // The program's own lines are no hits.
            (None, _) if line.contains(" app:respond ") => hits.push((line.into(), vec![])),
            (None, _) => {}
        }
    }
    hits
}

/// Whether `usdt trace --stack` printed every hit of each path with the
/// path's functions in order, innermost first, and no other function of
/// the program, down to `_start`; the frames of one hit of each path (the
/// evidence), or what differed.
pub fn trace_paths(out: &str, _err: &str) -> Result<Vec<String>, String> {
    let hits = hits(out);
    let total: u64 = COUNTS.iter().sum();
    if hits.len() as u64 != total {
        return Err(format!("{} hits, not {total}", hits.len()));
    }
    let mut seen = Vec::new();
    for (kind, (path, count)) in (1..).zip(PATHS.iter().zip(COUNTS)) {
        let want: Vec<&str> = path.rsplit(';').collect();
        let of_kind: Vec<&(String, Vec<String>)> = hits
            .iter()
            .filter(|(line, _)| line.ends_with(&format!(" app:respond kind={kind}")))
            .collect();
        if of_kind.len() as u64 != count {
            return Err(format!(
                "{} hits of kind {kind}, not {count}",
                of_kind.len()
            ));
        }
        for (line, frames) in &of_kind {
            let program: Vec<&str> = frames
                .iter()
                .map(String::as_str)
                .filter(|f| f.starts_with("stacks::"))
                .collect();
            let ends = (frames.first(), frames.last());
            let (first, last) = (ends.0.map(String::as_str), ends.1.map(String::as_str));
            if program != want || first != Some(want[0]) || last != Some("_start") {
                return Err(format!("{line}: {}", frames.join(" <- ")));
            }
        }
        seen.push(of_kind[0].1.join(" <- "));
    }
    Ok(seen)
}

/// Whether `usdt count --by stack` printed one folded stack per path,
/// from `_start` to the path's functions, with its count (and said how many hits
/// in how many stacks); the folded stacks (the evidence), or what
/// differed.
pub fn count_paths(out: &str, err: &str) -> Result<Vec<String>, String> {
    let lines: Vec<(&str, u64)> = out
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack, n.parse().ok()?))
        })
        .filter(|(stack, _)| stack.contains("stacks::"))
        .collect();
    if lines.len() != PATHS.len() {
        return Err(format!(
            "{} stacks, not {}: {lines:?}",
            lines.len(),
            PATHS.len()
        ));
    }
    for (path, count) in PATHS.iter().zip(COUNTS) {
        let found = lines.iter().find(|(stack, _)| stack.ends_with(path));
        match found {
            Some((stack, n)) if *n == count && stack.starts_with("_start;") => {}
            Some((stack, n)) => {
                return Err(format!("{stack}: {n} hits (want {count}, from _start)"))
            }
            None => return Err(format!("no stack ends in {path}: {lines:?}")),
        }
    }
    let total: u64 = COUNTS.iter().sum();
    let said = format!("usdt: {total} hits in 3 stacks");
    if !err.lines().any(|l| l == said) {
        return Err(format!("usdt did not say \"{said}\""));
    }
    Ok(lines.iter().map(|(s, n)| format!("{s} {n}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hit of each kind as `usdt trace --stack` prints it on aarch64
    /// (a static build: no libc.so), with the program's own line.
    fn trace_output(kinds: &[u64]) -> String {
        let mut out = String::new();
        for kind in kinds {
            out += &format!("0.000000001 70/70 app:respond kind={kind}\n");
            let path = PATHS[*kind as usize - 1];
            for f in path.rsplit(';') {
                out += &format!("    {f} (examples/stacks.rs:30)\n");
            }
            out +=
                "    std::rt::lang_start_internal\n    main\n    __libc_start_main\n    _start\n";
        }
        out + "fired 2 3 4 (20)\n"
    }

    fn every_hit() -> Vec<u64> {
        (1..)
            .zip(COUNTS)
            .flat_map(|(k, n)| std::iter::repeat_n(k, n as usize))
            .collect()
    }

    #[test]
    fn a_trace_is_right_with_each_paths_functions_in_order() {
        let out = trace_output(&every_hit());
        let seen = trace_paths(&out, "").unwrap();
        assert_eq!(seen.len(), 3);
        assert!(seen[1].starts_with(
            "stacks::respond <- stacks::authorize <- stacks::serve_api <- stacks::main <- "
        ));
        assert!(seen[1].ends_with(" <- _start"));
        // A hit missing, a frame out of order, a path's function missing.
        let mut fewer = every_hit();
        fewer.pop();
        assert!(trace_paths(&trace_output(&fewer), "").is_err());
        let swapped = out.replacen(
            "    stacks::authorize (examples/stacks.rs:30)\n    stacks::serve_api",
            "    stacks::serve_api (examples/stacks.rs:30)\n    stacks::authorize",
            1,
        );
        assert!(trace_paths(&swapped, "").unwrap_err().contains("kind=2"));
        let cut = out.replacen("    stacks::main (examples/stacks.rs:30)\n", "", 1);
        assert!(trace_paths(&cut, "").is_err());
        // Stopped before the program's entry.
        let early = out.replacen("    _start\n", "", 1);
        assert!(trace_paths(&early, "").unwrap_err().contains("kind=1"));
    }

    #[test]
    fn a_count_is_right_with_each_path_and_its_hits() {
        let out = "_start;__libc_start_main;main;stacks::main;stacks::run_job;stacks::respond 4
_start;__libc_start_main;main;stacks::main;stacks::serve_api;stacks::authorize;stacks::respond 3
_start;__libc_start_main;main;stacks::main;stacks::serve_static;stacks::respond 2
fired 2 3 4 (20)
";
        let err = "usdt: counting the stacks\nusdt: 9 hits in 3 stacks\n";
        assert_eq!(count_paths(out, err).unwrap().len(), 3);
        assert!(count_paths(out, "usdt: 9 hits in 4 stacks").is_err());
        assert!(count_paths(&out.replace("respond 3", "respond 2"), err).is_err());
        let early = out.replacen("_start;__libc_start_main;", "[incomplete];", 1);
        assert!(count_paths(&early, err)
            .unwrap_err()
            .contains("from _start"));
        let incomplete = out.replace(
            "_start;__libc_start_main;main;stacks::main;stacks::run_job",
            "[incomplete];stacks::run_job",
        );
        assert!(count_paths(&incomplete, err)
            .unwrap_err()
            .contains("no stack ends in"));
    }

    #[test]
    fn riscv64_refuses_in_one_exact_sentence() {
        let sentence = refusal(Arch::Riscv64);
        assert_eq!(
            sentence,
            "usdt: stacks are unwound on x86-64 and aarch64 only, not on this riscv64 machine"
        );
        let o = Outcome {
            status: "exit=1".into(),
            stdout: String::new(),
            stderr: format!("{sentence}\n"),
        };
        assert!(refused(&o, Arch::Riscv64));
        let other = Outcome {
            stderr: "usdt: stacks are unwound on x86-64 only, not on this riscv64 machine\n".into(),
            ..o.clone()
        };
        assert!(!refused(&other, Arch::Riscv64));
        let traced = Outcome {
            status: "exit=0".into(),
            ..o
        };
        assert!(!refused(&traced, Arch::Riscv64));
        assert_eq!(engines(&["perf"], false), ["perf", "auto"]);
        assert_eq!(engines(&["perf", "bpf"], true), ["perf", "bpf"]);
    }
}
