//! `--if`, `--if-start`, `--if-end`: the filters the commands take (parsed
//! by clap through the library's `Filter`), given the declared signatures
//! their names are looked up in, and checked against every site the
//! command will attach before anything is attached.

use std::path::Path;

use usdt_trace::{Filter, Site};

use crate::error::CliError;
use crate::typed;

/// `filter` with the declared probes (`--types` files and the catalog) to
/// look its names up in; each attached file's records are added to them.
pub(crate) fn prepared(filter: Option<Filter>) -> Option<Filter> {
    filter.map(|f| f.signatures(typed::signatures([])))
}

/// Whether `filter`, given as `flag`, fits every one of `sites` of the
/// file at `path`: an error naming the flag and the column otherwise.
pub(crate) fn check(
    flag: &'static str,
    filter: Option<&Filter>,
    path: &Path,
    sites: &[&Site],
) -> Result<(), CliError> {
    match filter {
        Some(filter) => filter
            .check(path, sites)
            .map_err(|error| CliError::Filter { flag, error }),
        None => Ok(()),
    }
}
