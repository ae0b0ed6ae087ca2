//! `usdt list`: one table of probes per file, a binary's or each file a
//! process maps (with its load bias and semaphore values).

use std::collections::BTreeMap;
use std::path::Path;

use usdt_trace::{escape, read_file_fork_guard, read_process, read_semaphore, Site};

use crate::args::ListArgs;
use crate::error::CliError;
use crate::output::out;
use crate::target::{read_probes_of, warn_skipped};
use crate::{features, typed};

pub(crate) fn list(args: ListArgs) -> Result<i32, CliError> {
    match (args.pid, args.binary) {
        (Some(pid), _) => list_process(pid, args.sites),
        (None, Some(binary)) => {
            let binary = binary.as_str();
            let probes = read_probes_of(Path::new(binary))?;
            if probes.sites.is_empty() {
                return Err(CliError::NoProbes {
                    what: escape(binary).into_owned(),
                });
            }
            let sigs = typed::signatures([Path::new(binary)]);
            let guarded = read_file_fork_guard(binary).unwrap_or(false);
            print_table(&probes.sites, &sigs, 0, guarded, args.sites, &|_| None)?;
            Ok(0)
        }
        // clap asks for one of them.
        (None, None) => unreachable!("list without -p or BINARY"),
    }
}

/// A table per mapped object with probes, with semaphore values.
fn list_process(pid: u32, with_sites: bool) -> Result<i32, CliError> {
    let mut any = false;
    for object in read_process(pid)? {
        let path = escape(&object.path.to_string_lossy()).into_owned();
        if let Ok(p) = &object.probes {
            warn_skipped(&object.path, p);
        }
        let probes = match object.probes {
            Ok(p) if !p.sites.is_empty() => p,
            Ok(_) => continue,
            Err(e) => {
                eprintln!("usdt: {path}: {}", escape(&e.without_path().to_string()));
                continue;
            }
        };
        any = true;
        out!("{path} (load bias {:#x})", object.bias);
        let value = |addr: u64| read_semaphore(pid, addr.wrapping_add(object.bias)).ok();
        let sigs = typed::signatures([object.open_path.as_path()]);
        let guarded = read_file_fork_guard(&object.open_path).unwrap_or(false);
        print_table(
            &probes.sites,
            &sigs,
            object.bias,
            guarded,
            with_sites,
            &value,
        )?;
    }
    if !any {
        return Err(CliError::NoProcessProbes { pid });
    }
    Ok(0)
}

/// One row per probe (a recorded probe with its parameters:
/// `http:request_start(id: u64, path: &str)`); with `sites`, one indented
/// row per site below it. Names, parameters and argument strings come from
/// the binary: escaped. `guarded`: the binary carries the fork guard.
fn print_table(
    sites: &[Site],
    sigs: &usdt_trace::Signatures,
    bias: u64,
    guarded: bool,
    with_sites: bool,
    semaphore_value: &dyn Fn(u64) -> Option<u16>,
) -> Result<(), CliError> {
    let mut probes: BTreeMap<String, Vec<&Site>> = BTreeMap::new();
    for site in sites {
        probes
            .entry(typed::probe_column(sigs, site))
            .or_default()
            .push(site);
    }
    let width = probes.keys().map(String::len).max().unwrap_or(0).max(5);
    out!(
        "{:width$}  SITES  LAYOUT     SEMAPHORE           ATTACH           ARGUMENTS",
        "PROBE"
    );
    for (name, sites) in &probes {
        let first = sites[0];
        let layout = if sites.iter().all(|s| s.layout == first.layout) {
            first.layout.name()
        } else {
            "mixed"
        };
        let semaphore = match first.semaphore {
            Some(addr) => match semaphore_value(addr) {
                Some(v) => format!("{:#x}={v}", addr.wrapping_add(bias)),
                None => format!("{:#x}", addr.wrapping_add(bias)),
            },
            None => "-".into(),
        };
        let refused: Vec<&Site> = sites
            .iter()
            .copied()
            .filter(|s| s.refused().is_some())
            .collect();
        let attach = if refused.len() == sites.len() {
            "refused"
        } else if !refused.is_empty() {
            "some refused"
        } else if !usdt_trace::optimizable_on(first.machine) {
            &trap_only(first.machine)
        } else if sites.iter().all(|s| s.layout == first.layout) {
            features::auto_attach_words(first.layout, guarded)
        } else {
            "per site"
        };
        let args = if sites.iter().all(|s| s.args_text == first.args_text) {
            escape(&first.args_text).into_owned()
        } else {
            format!("{} (differs between sites)", escape(&first.args_text))
        };
        let why = match refused.first().and_then(|s| s.refused()) {
            Some(why) => format!("  (refused: {})", escape(&why.to_string())),
            None => String::new(),
        };
        out!(
            "{name:width$}  {:5}  {layout:9}  {semaphore:18}  {attach:15}  {args}{why}",
            sites.len()
        );
        if with_sites {
            for s in sites {
                let offset = s.location_offset.map_or("-".into(), |o| format!("{o:#x}"));
                let why = match s.refused() {
                    Some(why) => format!(" refused: {}", escape(&why.to_string())),
                    None => String::new(),
                };
                out!(
                    "  site {:#x} offset {offset} base {:#x} semaphore {:#x} layout {} args {}{why}",
                    s.location.wrapping_add(bias),
                    s.note_base,
                    s.semaphore.map_or(0, |a| a.wrapping_add(bias)),
                    s.layout,
                    escape(&s.args_text)
                );
            }
        }
    }
    Ok(())
}

/// The ATTACH cell of a machine whose uprobes no kernel optimizes: the nop,
/// and why.
fn trap_only(machine: usdt_trace::Machine) -> String {
    format!("nop ({machine}: traps)")
}
