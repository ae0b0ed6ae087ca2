//! The sites a session leaves out because their check refused them (see
//! [`SiteCheck`](crate::SiteCheck)), and forcing them in.

use std::path::Path;

use super::Session;
use crate::Site;

impl Session {
    /// The sites that pass their check, and with
    /// [`Session::force_sites`] the refused ones too, forced; the others
    /// are kept aside. Each refused site is said once (those the globs
    /// match) by [`Session::take_notices`].
    pub(super) fn hold_back(
        &mut self,
        open_path: &Path,
        named: &Path,
        sites: Vec<Site>,
    ) -> Vec<Site> {
        let mut kept = vec![];
        for mut site in sites {
            if site.refused().is_none() {
                kept.push(site);
            } else if self.force_sites {
                site.force();
                self.forced.push((named.to_path_buf(), site.clone()));
                kept.push(site);
            } else {
                self.refused
                    .push((open_path.to_path_buf(), named.to_path_buf(), site));
            }
        }
        kept
    }

    /// Attaches sites whose check refused them all the same (see
    /// [`SiteCheck`](crate::SiteCheck)): their Location need not be a nop in the file's code,
    /// nor their semaphore in its writable data, and the kernel writes
    /// there whatever it is. Off by default: such a site is left out, and
    /// said as a [`Notice::Refused`](super::Notice::Refused).
    pub fn force_sites(mut self, force: bool) -> Session {
        self.force_sites = force;
        if force {
            for (open, named, mut site) in std::mem::take(&mut self.refused) {
                site.force();
                self.forced.push((named, site.clone()));
                match self.objects.iter_mut().find(|(p, _)| *p == open) {
                    Some((_, sites)) => sites.push(site),
                    None => self.objects.push((open, vec![site])),
                }
            }
            self.refused_said = 0;
        }
        self
    }

    /// The sites refused and left out, with the file each is in (as
    /// named), the globs' or not.
    pub fn refused(&self) -> impl Iterator<Item = (&Path, &Site)> {
        self.refused
            .iter()
            .map(|(_, named, s)| (named.as_path(), s))
    }
}
