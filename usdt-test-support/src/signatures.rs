//! The signature records every build shape must keep: one record in the
//! non-allocated `.usdt.signatures` per provider-probe site, at the note's
//! Location, with the note's provider and name and as many operands as the
//! note; none for ad-hoc and C probes, and none left over from code the
//! linker removed.

use std::collections::BTreeMap;
use std::path::Path;

use object::{Object, ObjectSection, SectionFlags};
use usdt_trace::ElfProbes;

/// Checks the records of the binary at `path` against its notes.
pub fn check_signatures(path: &Path, data: &[u8], probes: &ElfProbes, what: &str) {
    let records = usdt_trace::read_signatures(data).expect("read signature records");
    let file = object::File::parse(data).unwrap();
    let provider_sites = probes
        .sites
        .iter()
        .filter(|s| s.semaphore.is_some())
        .count();
    if provider_sites == 0 {
        assert!(
            records.is_empty(),
            "{what}: records without provider probes"
        );
        return;
    }
    for section in file
        .sections()
        .filter(|s| s.name() == Ok(".usdt.signatures"))
    {
        let SectionFlags::Elf { sh_flags } = section.flags() else {
            panic!("{what}: not ELF flags");
        };
        // Not loaded: the running program never maps it.
        assert_eq!(
            sh_flags & u64::from(object::elf::SHF_ALLOC),
            0,
            "{what}: SHF_ALLOC"
        );
        assert_eq!(
            section.address(),
            0,
            "{what}: .usdt.signatures has an address"
        );
    }
    let mut by_location: BTreeMap<u64, &usdt_trace::Signature> = BTreeMap::new();
    for r in &records {
        assert!(
            by_location.insert(r.location, r).is_none(),
            "{what}: two records at {:#x}",
            r.location
        );
    }
    for site in &probes.sites {
        // The note's Location as written (Base equals .stapsdt.base here).
        let record = by_location.remove(&site.location);
        match (site.semaphore, record) {
            (Some(_), Some(r)) => {
                assert_eq!(
                    (r.provider.as_str(), r.name.as_str()),
                    (site.provider.as_str(), site.name.as_str()),
                    "{what}: record at {:#x}",
                    site.location
                );
                assert_eq!(r.operands(), site.args.len(), "{what}: {}", r.display());
            }
            (Some(_), None) => panic!(
                "{what} ({}): no record for {} at {:#x}",
                path.display(),
                site.probe(),
                site.location
            ),
            (None, Some(r)) => panic!("{what}: ad-hoc {} has a record", r.display()),
            (None, None) => {}
        }
    }
    assert!(
        by_location.is_empty(),
        "{what}: records with no note (code the linker removed?): {by_location:?}"
    );
}
