//! `usdt bpftrace BINARY [PROBE-GLOB...]`: prints a bpftrace program that
//! prints hits as `usdt trace` does.

use usdt_trace::bpftrace_program;

use crate::args::BpftraceArgs;
use crate::error::CliError;
use crate::output::write_stdout;
use crate::target::{read_probes_of, select_in};
use crate::typed::signatures;

pub(crate) fn bpftrace(args: BpftraceArgs) -> Result<i32, CliError> {
    let binary = args.binary;
    let globs = args.globs;
    let path = std::fs::canonicalize(&binary).unwrap_or_else(|_| binary.clone());
    let probes = read_probes_of(&path)?;
    let objects = vec![(path.clone(), probes.sites)];
    select_in(&objects, &globs, &path.display().to_string())?;
    let sigs = signatures([path.as_path()]);
    let program = bpftrace_program(&path, &objects[0].1, &sigs, &globs);
    write_stdout(program.as_bytes()).map_err(CliError::Output)?;
    Ok(0)
}
