//! Reading ELF files: the probe notes (`.note.stapsdt`, [`note`]), their
//! argument strings ([`arg`]; each machine's operand syntax is its
//! `crate::arch` table's), the signature records of `#[usdt::provider]` probes
//! (`.usdt.signatures`, [`signature`]), and the fork guard's marker
//! (`.note.usdt`, [`forkguard`]), and where a site may be attached
//! ([`sites`]: Location in code on a nop, a semaphore in writable data).

pub(crate) mod arg;
pub(crate) mod forkguard;
pub(crate) mod note;
pub(crate) mod signature;
pub(crate) mod sites;
