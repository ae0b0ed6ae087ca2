//! How to decode the samples of one site, whichever engine read them: the
//! note's arguments, which of them are strings or byte slices, and the
//! uprobe's link-time address. What each engine reads at the hit (perf's
//! registers mask and stack copy, BPF's fetch rows) is derived by the
//! engine itself (`engine::perf::sampling`, `engine::bpf`).

use std::sync::Arc;

use super::{Hit, Value};
use crate::arch::Arch;
use crate::elf::arg::Arg;
use crate::elf::note::Site;

/// How to decode the samples of one site.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) provider: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) args: Vec<Arg>,
    /// The registers of the site's machine.
    pub(super) arch: &'static Arch,
    /// Which arguments are string pointers.
    pub(super) strings: Vec<bool>,
    /// Which arguments are the addresses of byte slices (the length is the
    /// next argument): [`BYTES_FETCH`](super::BYTES_FETCH) bytes are read
    /// at the hit.
    pub(super) bytes: Vec<bool>,
    /// The link-time address of the uprobe: the sampled instruction pointer
    /// minus this is the load bias.
    pub(super) attach_addr: u64,
}

impl Plan {
    pub(super) fn new(site: &Site, strings: Vec<bool>, bytes: Vec<bool>) -> Plan {
        Plan {
            provider: site.provider.as_str().into(),
            name: site.name.as_str().into(),
            args: site.args.clone(),
            arch: site.machine.arch(),
            strings,
            bytes,
            attach_addr: site.location,
        }
    }

    /// A hit of this plan's probe.
    pub(super) fn hit(&self, time_ns: u64, pid: u32, tid: u32, args: Vec<Value>) -> Hit {
        Hit {
            time_ns,
            pid,
            tid,
            provider: self.provider.clone(),
            name: self.name.clone(),
            args,
        }
    }
}
