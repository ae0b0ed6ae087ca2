//! The built-in catalog: provider files of widely shipped programs,
//! written here in the D language from the definitions the programs
//! publish, with argument names where the programs' documentation gives
//! them. Each was checked against the notes of Debian 12's build of the
//! program (`readelf -n`).

/// Each file's name (what `usdt list` says a probe's types came from)
/// and text.
pub const CATALOG: &[(&str, &str)] = &[
    ("python", include_str!("catalog/python.d")),
    ("postgresql", include_str!("catalog/postgresql.d")),
    ("libstdcxx", include_str!("catalog/libstdcxx.d")),
    ("ruby", include_str!("catalog/ruby.d")),
    ("hotspot", include_str!("catalog/hotspot.d")),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::parse_provider_file;

    #[test]
    fn every_file_parses() {
        for (name, text) in CATALOG {
            let sigs = parse_provider_file(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!sigs.is_empty(), "{name}");
        }
    }
}
