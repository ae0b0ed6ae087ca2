//! What `usdt list` and `usdt trace` take from signature records and
//! provider files: the parameters after a probe's name, which arguments
//! are strings, and each hit's values with names and kinds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use usdt_trace::{
    Declarations, Hit, Kind, Sampler, SignatureSource, Signatures, Site, TypedArgs, TypedValue,
    Value,
};

use crate::error::CliError;

/// The built-in catalog with the `--types` files over it.
static DECLARED: OnceLock<Arc<Declarations>> = OnceLock::new();

/// Reads the `--types` files, before anything is attached: a malformed
/// one is an error with its line and column.
pub(crate) fn declare(files: &[PathBuf]) -> Result<(), CliError> {
    let mut declared = Declarations::catalog().clone();
    for file in files {
        declared.add_file(file)?;
    }
    let _ = DECLARED.set(Arc::new(declared));
    Ok(())
}

/// The signatures of every file: its records over the declared probes
/// (a file without records adds none).
pub(crate) fn signatures<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Signatures {
    let declared = DECLARED
        .get_or_init(|| Arc::new(Declarations::catalog().clone()))
        .clone();
    let mut sigs = Signatures::with_declarations(declared);
    for path in paths {
        sigs.add_file(path);
    }
    sigs
}

/// `provider:name(id: u64, path: &str)` for a recorded probe,
/// `provider:name(query: char *) [catalog: postgresql]` for a declared
/// one, else `provider:name`; everything from the binary escaped (names
/// as names, the parameters, which have spaces, as text).
pub(crate) fn probe_column(sigs: &Signatures, site: &Site) -> String {
    let name = format!(
        "{}:{}",
        usdt_trace::escape_name(&site.provider),
        usdt_trace::escape_name(&site.name)
    );
    match sigs.source_of_site(site) {
        Some((sig, SignatureSource::Record)) => name + &usdt_trace::escape(&sig.params_text()),
        Some((sig, source)) => format!(
            "{name}{} [{}]",
            usdt_trace::escape(&sig.params_text()),
            usdt_trace::escape(&source.to_string())
        ),
        None => name,
    }
}

/// Asks the sampler to read, at the hit, the string of every `&str`,
/// `String`, `&CStr` and `CString` parameter of the traced probes, and the
/// first bytes of every byte slice.
pub(crate) fn string_args<'a>(
    sampler: &mut Sampler,
    sigs: &Signatures,
    sites: impl IntoIterator<Item = &'a Site>,
) {
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
                sampler.add_string_arg(&site.probe(), i);
            } else if param.kind == Kind::Bytes {
                sampler.add_bytes_arg(&site.probe(), i);
            }
        }
    }
}

/// `id=1 path="/index.html"` for a recorded probe's hit.
pub(crate) fn text(sigs: &Signatures, hit: &Hit) -> Option<String> {
    let sig = sigs.of_hit(hit)?;
    Some(TypedArgs::new(sig, hit).text())
}

/// `{"id": 1, "path": "/index.html", "data": "0102ff"}` for a recorded
/// probe's hit, keyed in the order of the probe's parameters (serde_json's
/// `preserve_order`): JSON numbers, strings and booleans; byte slices as hex
/// strings, pointers as `0x` strings, durations as nanoseconds, unreadable
/// memory as `null`.
pub(crate) fn json(sigs: &Signatures, hit: &Hit) -> Option<serde_json::Value> {
    let sig = sigs.of_hit(hit)?;
    let args = TypedArgs::new(sig, hit);
    let map: serde_json::Map<String, serde_json::Value> = args
        .values()
        .map(|v| (v.name.to_string(), json_of(&v)))
        .collect();
    Some(map.into())
}

/// One parameter's value by its kind.
fn json_of(v: &TypedValue) -> serde_json::Value {
    use serde_json::Value as J;
    let n = match v.value {
        // A byte slice's bytes.
        Value::Str { bytes, .. } if v.kind == Kind::Bytes => {
            return J::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
        }
        _ if v.kind == Kind::Bytes => return J::Null,
        Value::Int(n) => *n,
        Value::Str { bytes, .. } => return J::String(String::from_utf8_lossy(bytes).into_owned()),
        Value::F32(_) | Value::F64(_) => return v.value.float().map_or(J::Null, Into::into),
        Value::Bytes(_) => return J::String(v.value.to_string().trim_start_matches("hex:").into()),
        Value::Unreadable(_) | Value::Unavailable(_) => return J::Null,
    };
    match v.kind {
        Kind::Bool => J::Bool(n != 0),
        Kind::Char => char::from_u32(n as u32).map_or(J::Null, |c| J::String(c.into())),
        Kind::F32 | Kind::F64 => v
            .float()
            .and_then(serde_json::Number::from_f64)
            .map_or(J::Null, J::Number),
        Kind::Pointer | Kind::Str | Kind::CStr | Kind::Bytes => {
            J::String(format!("{:#x}", n as u64))
        }
        _ => match (i64::try_from(n), u64::try_from(n)) {
            (Ok(i), _) => i.into(),
            (_, Ok(u)) => u.into(),
            _ => J::Null,
        },
    }
}
