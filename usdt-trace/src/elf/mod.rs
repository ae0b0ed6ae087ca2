//! Reading ELF files: the probe notes (`.note.stapsdt`, [`note`]), their
//! argument strings ([`arg`]) and the signature records of
//! `#[usdt::provider]` probes (`.usdt.signatures`, [`signature`]).

pub(crate) mod arg;
pub(crate) mod note;
pub(crate) mod signature;
