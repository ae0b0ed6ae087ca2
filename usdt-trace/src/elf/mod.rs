//! Reading ELF files: the probe notes (`.note.stapsdt`, [`note`]), their
//! argument strings ([`arg`]) and the signature records of
//! `#[usdt::provider]` probes (`.usdt.signatures`, [`signature`]), and the
//! fork guard's marker (`.note.usdt`, [`forkguard`]).

pub(crate) mod arg;
pub(crate) mod forkguard;
pub(crate) mod note;
pub(crate) mod signature;
