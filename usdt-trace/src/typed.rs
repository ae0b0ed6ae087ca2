//! What `usdt list` and `usdt trace` take from signature records: the
//! parameters after a probe's name, which arguments are strings, and each
//! hit's values with names and kinds.

use std::path::Path;

use usdt_trace::{bpftrace_program, Error, Hit, Kind, Sampler, Signatures, Site, TypedArgs};

/// The records of every file (a file without records adds none).
pub(crate) fn signatures<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Signatures {
    let mut sigs = Signatures::new();
    for path in paths {
        sigs.add_file(path);
    }
    sigs
}

/// `provider:name(id: u64, path: &str)` for a recorded probe, else
/// `provider:name`; everything from the binary escaped (names as names,
/// the parameters, which have spaces, as text).
pub(crate) fn probe_column(sigs: &Signatures, site: &Site) -> String {
    let name = format!(
        "{}:{}",
        usdt_trace::escape_name(&site.provider),
        usdt_trace::escape_name(&site.name)
    );
    match sigs.of_site(site) {
        Some(sig) => name + &usdt_trace::escape(&sig.params_text()),
        None => name,
    }
}

/// Asks the sampler to read, at the hit, the string of every `&str`,
/// `String`, `&CStr` and `CString` parameter of the traced probes, and the
/// first bytes of every byte slice.
pub(crate) fn string_args<'a>(
    mut sampler: Sampler,
    sigs: &Signatures,
    sites: impl IntoIterator<Item = &'a Site>,
) -> Sampler {
    let mut done = std::collections::BTreeSet::new();
    for site in sites {
        let Some(sig) = sigs.of_site(site) else {
            continue;
        };
        if !done.insert(site.probe()) {
            continue;
        }
        for (param, i) in sig.params.iter().zip(sig.operand_indices()) {
            // The probe's exact name: provider and probe names hold no glob
            // characters (`*`, `?`), only letters, digits, `_` and `-`.
            if param.kind.is_string() {
                sampler = sampler.string_arg(&site.probe(), i);
            } else if param.kind == Kind::Bytes {
                sampler = sampler.bytes_arg(&site.probe(), i);
            }
        }
    }
    sampler
}

/// `id=1 path="/index.html"` for a recorded probe's hit.
pub(crate) fn text(sigs: &Signatures, hit: &Hit) -> Option<String> {
    let sig = sigs.of_hit(hit)?;
    Some(TypedArgs::new(sig, hit).text())
}

/// `{"id": 1, "path": "/index.html"}` for a recorded probe's hit.
pub(crate) fn json(sigs: &Signatures, hit: &Hit) -> Option<serde_json::Value> {
    let sig = sigs.of_hit(hit)?;
    Some(TypedArgs::new(sig, hit).json().into())
}

/// `usdt bpftrace BINARY [PROBE-GLOB...]`: prints the program.
pub(crate) fn bpftrace(args: &[std::ffi::OsString]) -> Result<i32, Error> {
    let usage = || Error::Invalid(crate::USAGE.into());
    let (binary, globs) = args.split_first().ok_or_else(usage)?;
    let globs: Vec<String> = globs
        .iter()
        .map(|g| g.to_str().map(str::to_owned).ok_or_else(usage))
        .collect::<Result<_, _>>()?;
    if globs.iter().any(|g| g.starts_with('-')) {
        return Err(usage());
    }
    let path = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.into());
    let probes = crate::read_probes_of(&path)?;
    let objects = vec![(path.clone(), probes.sites)];
    crate::select(&objects, &globs, &path.display().to_string())?;
    let sigs = signatures([path.as_path()]);
    print!("{}", bpftrace_program(&path, &objects[0].1, &sigs, &globs));
    Ok(0)
}
