//! The one cache of the self-tests: a file per self-test under
//! `/run/usdt/` ([`FORK_TEST_CACHE`](super::FORK_TEST_CACHE),
//! [`SPEED_TEST_CACHE`](super::SPEED_TEST_CACHE)), one line per boot,
//! kernel release and site layout: `BOOT_ID RELEASE LAYOUT VALUE...`. A
//! tracer pays for a self-test once per boot where it may write there (as
//! root), otherwise once per process. Only files owned by root or this
//! user are read, and only their first 4 KiB.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::SiteLayout;

/// One self-test's cache file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cache {
    file: &'static str,
}

impl Cache {
    /// The cache kept in `file`.
    pub(crate) const fn new(file: &'static str) -> Cache {
        Cache { file }
    }

    /// What this boot's line for `layout` holds after its key, if any.
    pub(crate) fn get(&self, layout: SiteLayout) -> Option<String> {
        let key = key(layout)?;
        let text = read_small(self.file)?;
        let line = text.lines().find(|l| {
            l.strip_prefix(&key)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })?;
        Some(line[key.len()..].trim_start().to_string())
    }

    /// Replaces the file with its lines of this boot other than
    /// `layout`'s, plus `layout`'s with `value` (best effort: without the
    /// right to write there, the next tracer tests again).
    pub(crate) fn put(&self, layout: SiteLayout, value: &str) {
        let Some(key) = key(layout) else {
            return;
        };
        let file = self.file;
        let boot = key.split(' ').next().unwrap_or("");
        let old = read_small(file).unwrap_or_default();
        let mut text: String = old
            .lines()
            .filter(|l| l.starts_with(boot) && !l.starts_with(&key))
            .map(|l| format!("{l}\n"))
            .collect();
        text.push_str(&format!("{key} {}\n", value.replace('\n', " ")));
        let dir = std::path::Path::new(file).parent().unwrap_or("/".as_ref());
        let partial = format!("{file}.{}", std::process::id());
        let written = std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .and_then(|_| {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&partial)?;
                f.write_all(text.as_bytes())
            })
            .and_then(|_| std::fs::rename(&partial, file));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
    }
}

/// `BOOT_ID RELEASE LAYOUT`, if the boot id and release can be read.
fn key(layout: SiteLayout) -> Option<String> {
    let boot = read_small("/proc/sys/kernel/random/boot_id")?;
    let release = read_small("/proc/sys/kernel/osrelease")?;
    let word = |s: String| s.trim().replace(char::is_whitespace, "_");
    Some(format!("{} {} {layout}", word(boot), word(release)))
}

/// Up to 4 KiB of a regular file owned by root or by this user.
fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let procfs = path.starts_with("/proc/");
    if !procfs && (!meta.is_file() || (meta.uid() != 0 && meta.uid() != euid)) {
        return None;
    }
    let mut buf = Vec::with_capacity(512);
    file.take(4096).read_to_end(&mut buf).ok()?;
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_boot_kernel_and_layout() {
        assert!(key(SiteLayout::NopNop5).is_some_and(|k| k.ends_with(" nop;nop5")));
        let dir = std::env::temp_dir().join(format!("usdt-cache-{}", std::process::id()));
        let file: &'static str = Box::leak(dir.join("c").to_string_lossy().into_owned().into());
        let cache = Cache::new(file);
        assert_eq!(cache.get(SiteLayout::NopNop5), None);
        cache.put(SiteLayout::NopNop5, "1.0 2.0");
        cache.put(SiteLayout::NopNop10, "dies a\nb");
        cache.put(SiteLayout::NopNop5, "3.0 4.0");
        assert_eq!(cache.get(SiteLayout::NopNop5).as_deref(), Some("3.0 4.0"));
        assert_eq!(cache.get(SiteLayout::NopNop10).as_deref(), Some("dies a b"));
        assert_eq!(std::fs::read_to_string(file).unwrap().lines().count(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
