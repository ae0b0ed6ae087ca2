//! What the self-tests share to run a scratch child of the tracer against
//! sites in this crate's own text: where such a site is as a file offset,
//! and waiting for the child with a deadline.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use crate::sys::process;

/// Waits for our child `pid`; kills it after `timeout`. Its wait status,
/// or `None` if it had to be killed.
pub(crate) fn wait_with_timeout(pid: libc::pid_t, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        match process::waitpid(pid, libc::WNOHANG) {
            Ok(Some((r, status))) if r == pid => return Some(status),
            Err(e) if e.raw_os_error() != Some(libc::EINTR) => return None,
            _ => {}
        }
        if Instant::now() >= deadline {
            // pid > 0: never a process group.
            if pid > 0 {
                let _ = process::kill(pid, libc::SIGKILL);
                let _ = process::waitpid(pid, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The file (as a path the kernel can resolve) and file offset of the
/// instruction at `addr` in this process.
pub(crate) fn file_offset(addr: u64) -> Result<(String, u64), String> {
    let maps = crate::process::read_maps(std::process::id()).map_err(|e| e.to_string())?;
    let m = maps
        .iter()
        .find(|m| m.start <= addr && addr < m.end)
        .ok_or("the self-test site is in no file mapping")?;
    // The mapping itself, even if the file was replaced since (as cargo
    // does with test binaries): root may open it through map_files.
    let map_file = format!("/proc/self/map_files/{:x}-{:x}", m.start, m.end);
    let path = match std::fs::metadata(&map_file) {
        Ok(meta) if meta.ino() == m.inode => map_file,
        _ => m.path.clone(),
    };
    Ok((path, addr - m.start + m.offset))
}
