//! Reading ELF files: the probe notes (`.note.stapsdt`, [`note`]), their
//! argument strings ([`arg`], with each machine's operand syntax in
//! `operand`) and the signature records of
//! `#[usdt::provider]` probes (`.usdt.signatures`, [`signature`]).

pub(crate) mod arg;
pub(crate) mod note;
mod operand;
pub(crate) mod signature;
