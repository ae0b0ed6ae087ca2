//! Booting a kernel that has no modules package (Debian's 6.19 backport
//! ships `linux-binary-*` without `linux-modules-*`): without modules its
//! guest has no 9p, virtio or block driver, so the machine's root cannot be
//! shared with it. Such a kernel boots on a self-contained initramfs instead
//! (the kernel unpacks it into its own tmpfs, no driver needed): busybox, the
//! harness itself and everything the checks run (the `usdt` command, the
//! examples, the bench and its C row, bpftrace and gdb), each with the shared
//! libraries `ldd` names, at the paths they have on the machine, so the guest
//! command is the same as on the 9p root. Its `/init` mounts proc, sysfs,
//! devtmpfs, tracefs, debugfs and bpffs, runs the guest command, and writes
//! the result between two marker lines on the second serial port, which qemu
//! keeps in a file of the run's directory; the harness puts it where the
//! virtme-ng path's guest writes it (`result.json`).
//!
//! The archive (newc cpio, uncompressed: emulated decompression is slow) is
//! cached under the cache directory, named by a hash of its files' paths,
//! sizes and mtimes, so a rerun with the same binaries boots at once.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::boot::{shell_line, Accel, Boot};
use crate::build::Binaries;
use crate::fetch::Kernel;

/// The lines around the result on the guest's second serial port.
pub const BEGIN: &str = "=== usdt-kernels result begin ===";
pub const END: &str = "=== usdt-kernels result end ===";

/// Where the guest command writes its result inside the initramfs.
pub const GUEST_OUT: &str = "/tmp/usdt-kernels-result.json";

/// busybox's applets the init script and the checks use.
const APPLETS: &[&str] = &[
    "sh", "mount", "mkdir", "cat", "echo", "sleep", "poweroff", "sync", "uname",
];

/// One entry of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    /// A file of the machine, copied with its mode and mtime.
    File(PathBuf),
    Data(Vec<u8>, u32),
    Symlink(PathBuf),
    /// A character device (major, minor).
    Char(u32, u32),
}

/// The archive's entries by their absolute path in the guest.
#[derive(Default, Debug)]
pub struct Tree {
    entries: BTreeMap<PathBuf, Entry>,
}

impl Tree {
    /// `path` and its parents as directories (unless already present).
    pub fn dir(&mut self, path: &Path) {
        for a in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if a != Path::new("/") && a != Path::new("") {
                self.entries.entry(a.to_path_buf()).or_insert(Entry::Dir);
            }
        }
    }

    fn put(&mut self, path: &Path, entry: Entry) {
        if let Some(p) = path.parent() {
            self.dir(p);
        }
        self.entries.insert(path.to_path_buf(), entry);
    }

    pub fn data(&mut self, path: &Path, bytes: &[u8], mode: u32) {
        self.put(path, Entry::Data(bytes.to_vec(), mode));
    }

    pub fn symlink(&mut self, path: &Path, target: &Path) {
        self.put(path, Entry::Symlink(target.to_path_buf()));
    }

    pub fn char_device(&mut self, path: &Path, major: u32, minor: u32) {
        self.put(path, Entry::Char(major, minor));
    }

    /// The machine's `path` as the machine has it: each symbolic link on the
    /// way (`/lib` -> `usr/lib`, `/usr/bin/cc` -> `/etc/alternatives/cc`)
    /// kept as a link, and what it points to added too.
    pub fn host(&mut self, path: &Path) -> Result<(), String> {
        self.host_depth(path, 0)
    }

    fn host_depth(&mut self, path: &Path, depth: usize) -> Result<(), String> {
        if depth > 40 {
            return Err(format!("{}: too many symbolic links", path.display()));
        }
        let mut cur = PathBuf::from("/");
        let comps: Vec<Component> = path.components().collect();
        for (i, c) in comps.iter().enumerate() {
            let name = match c {
                Component::Normal(name) => name,
                // `cur` is the machine's real directory so far.
                Component::ParentDir => {
                    cur.pop();
                    continue;
                }
                _ => continue,
            };
            let next = cur.join(name);
            let md =
                std::fs::symlink_metadata(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            let last = i + 1 == comps.len();
            if md.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                // The link's target, itself perhaps a link
                // (`/usr/bin/cc` -> `/etc/alternatives/cc` -> `/usr/bin/gcc`).
                self.host_depth(&cur.join(&target), depth + 1)?;
                self.put(&next, Entry::Symlink(target));
                cur =
                    std::fs::canonicalize(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            } else if md.is_dir() {
                self.entries.entry(next.clone()).or_insert(Entry::Dir);
                cur = next;
            } else if last {
                self.put(&next, Entry::File(next.clone()));
                cur = next;
            } else {
                return Err(format!("{}: not a directory", next.display()));
            }
        }
        Ok(())
    }

    /// The machine's directory `dir`, every file under it, except the
    /// subdirectories named in `skip`.
    pub fn host_tree(&mut self, dir: &Path, skip: &[&str]) -> Result<(), String> {
        self.host(dir)?;
        let real = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut stack = vec![real];
        while let Some(d) = stack.pop() {
            let rd = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            for e in rd.flatten() {
                let p = e.path();
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    if !skip.iter().any(|s| e.file_name() == *s) {
                        self.entries.insert(p.clone(), Entry::Dir);
                        stack.push(p);
                    }
                } else if ft.is_symlink() {
                    if let Ok(t) = std::fs::read_link(&p) {
                        self.entries.insert(p, Entry::Symlink(t));
                    }
                } else if ft.is_file() {
                    self.entries.insert(p.clone(), Entry::File(p));
                }
            }
        }
        Ok(())
    }

    /// `program` and the shared libraries `ldd` says it loads.
    pub fn program(&mut self, program: &Path) -> Result<(), String> {
        self.host(program)?;
        for lib in libraries(program)? {
            self.host(&lib)?;
        }
        Ok(())
    }

    /// A hash of what the archive holds: the machine's files by path, size
    /// and mtime, the others by content.
    pub fn key(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (path, entry) in &self.entries {
            path.hash(&mut h);
            match entry {
                Entry::File(src) => {
                    if let Ok(md) = std::fs::metadata(src) {
                        (md.len(), md.mtime(), md.mtime_nsec(), md.mode()).hash(&mut h);
                    }
                }
                other => format!("{other:?}").hash(&mut h),
            }
        }
        h.finish()
    }

    /// The archive, in the kernel's `newc` cpio format.
    pub fn write(&self, out: &mut impl Write) -> Result<(), String> {
        let io = |e: std::io::Error| e.to_string();
        for (ino, (path, entry)) in (1u32..).zip(&self.entries) {
            let name = path.strip_prefix("/").unwrap_or(path);
            let (mode, mtime, data, rdev): (u32, u64, Vec<u8>, (u32, u32)) = match entry {
                Entry::Dir => (0o040755, 0, Vec::new(), (0, 0)),
                Entry::File(src) => {
                    let md =
                        std::fs::metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
                    let bytes =
                        std::fs::read(src).map_err(|e| format!("{}: {e}", src.display()))?;
                    (
                        0o100000 | (md.permissions().mode() & 0o7777),
                        md.mtime().max(0) as u64,
                        bytes,
                        (0, 0),
                    )
                }
                Entry::Data(bytes, mode) => (0o100000 | mode, 0, bytes.clone(), (0, 0)),
                Entry::Symlink(t) => (
                    0o120777,
                    0,
                    t.as_os_str().as_encoded_bytes().to_vec(),
                    (0, 0),
                ),
                Entry::Char(major, minor) => (0o020600, 0, Vec::new(), (*major, *minor)),
            };
            header(
                out,
                name.as_os_str().as_encoded_bytes(),
                ino,
                mode,
                mtime,
                data.len(),
                rdev,
            )
            .map_err(io)?;
            out.write_all(&data).map_err(io)?;
            out.write_all(&[0u8; 3][..pad(data.len())]).map_err(io)?;
        }
        header(out, b"TRAILER!!!", 0, 0, 0, 0, (0, 0)).map_err(io)?;
        Ok(())
    }
}

fn pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

fn header(
    out: &mut impl Write,
    name: &[u8],
    ino: u32,
    mode: u32,
    mtime: u64,
    size: usize,
    rdev: (u32, u32),
) -> std::io::Result<()> {
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        mtime as u32,
        size as u32,
        0,
        0,
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0,
    ];
    let mut h = String::from("070701");
    for f in fields {
        h += &format!("{f:08x}");
    }
    out.write_all(h.as_bytes())?;
    out.write_all(name)?;
    out.write_all(&[0])?;
    // The header (110 bytes) and the name with its NUL, padded to 4.
    out.write_all(&[0u8; 3][..pad(110 + name.len() + 1)])
}

/// The shared libraries (and the loader) `ldd` lists for `program`.
pub fn libraries(program: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| format!("cannot run ldd: {e}"))?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// The absolute paths of `ldd`'s output.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.trim(),
                None => l,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The init script: mounts, the command, the result on `/dev/ttyS1`.
pub fn init_script(command: &[String]) -> String {
    format!(
        "#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
mkdir -p /proc /sys /dev /tmp /root /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
ulimit -l unlimited
echo 'usdt-kernels: initramfs root, running the checks'
{command}
echo \"usdt-kernels: the checks exited $?\"
{{ echo '{BEGIN}'; cat {GUEST_OUT}; echo; echo '{END}'; }} > /dev/ttyS1
sync
sleep 2
poweroff -f
",
        command = shell_line(command)
    )
}

/// The archive for `bins` and the harness `exe`: built, or found in
/// `cache/initramfs`.
pub fn archive(
    cache: &Path,
    exe: &Path,
    bins: &Binaries,
    command: &[String],
) -> Result<PathBuf, String> {
    // Two guests of one run build the same archive: one at a time.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Tree::default();
    let busybox = ["/usr/bin/busybox", "/bin/busybox"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or("no busybox on the machine (busybox-static)")?;
    t.host(busybox)?;
    let real = std::fs::canonicalize(busybox).map_err(|e| e.to_string())?;
    let bindir = real.parent().unwrap_or(Path::new("/bin")).to_path_buf();
    for a in APPLETS {
        t.symlink(&bindir.join(a), &real);
    }
    // /bin/sh for gdb's `startup-with-shell` and bpftrace's -c.
    t.host(Path::new("/bin"))?;
    if !std::fs::canonicalize("/bin")
        .map(|b| b == bindir)
        .unwrap_or(false)
    {
        t.symlink(Path::new("/bin/sh"), &real);
    }
    for d in ["/proc", "/sys", "/dev", "/tmp", "/root", "/run"] {
        t.dir(Path::new(d));
    }
    t.char_device(Path::new("/dev/console"), 5, 1);
    t.char_device(Path::new("/dev/null"), 1, 3);
    t.char_device(Path::new("/dev/ttyS1"), 4, 65);
    t.program(exe)?;
    t.program(&bins.usdt)?;
    for l in &bins.layouts {
        for ex in ["demo", "fork", "redzone"] {
            t.program(&l.examples.join(ex))?;
        }
        t.program(&l.bench)?;
        // The bench finds its C row beside its target directory (compiled
        // there by the build, crate::build).
        if let Some(target) = l.bench.ancestors().nth(2) {
            for f in ["CACHEDIR.TAG", "bench-c/libusdt_bench_c.so"] {
                if target.join(f).exists() {
                    t.host(&target.join(f))?;
                }
            }
        }
    }
    // The bench's C row is fresh when its library is newer than its source,
    // and installed when `cc` and <sys/sdt.h> are there (the bench asks).
    let source = crate::build::workspace().join("bench/c/loop.c");
    if source.exists() {
        t.host(&source)?;
    }
    for f in usdt_provision::GCC
        .provides
        .iter()
        .chain(usdt_provision::SDT.provides)
    {
        if Path::new(f).exists() {
            t.host(Path::new(f))?;
        }
    }
    for tool in ["/usr/bin/bpftrace", "/usr/bin/gdb"] {
        t.program(Path::new(tool))?;
    }
    // gdb's Python and its data directory.
    for d in ["/usr/share/gdb", "/etc/gdb"] {
        if Path::new(d).exists() {
            t.host_tree(Path::new(d), &[])?;
        }
    }
    for d in python_dirs() {
        t.host_tree(&d, &["test", "idlelib", "tkinter", "ensurepip", "lib2to3"])?;
    }
    if Path::new("/etc/ld.so.cache").exists() {
        t.host(Path::new("/etc/ld.so.cache"))?;
    }
    let init = init_script(command);
    t.data(Path::new("/init"), init.as_bytes(), 0o755);

    let dir = cache.join("initramfs");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{:016x}.cpio", t.key()));
    if path.exists() {
        // In use: not one of the day-old archives the cleanup below removes.
        if let Ok(f) = std::fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        return Ok(path);
    }
    eprintln!("kernels: building the initramfs {}", path.display());
    let partial = dir.join(format!("partial.{}", std::process::id()));
    let file =
        std::fs::File::create(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let mut w = std::io::BufWriter::new(file);
    t.write(&mut w)?;
    w.flush().map_err(|e| e.to_string())?;
    drop(w);
    std::fs::rename(&partial, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Other archives are of other binaries: those of a day ago are of
    // older ones (a run of another checkout may be booting a newer one).
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(86_400));
            if old && e.path().extension().is_some_and(|x| x == "cpio") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(path)
}

/// The directories of gdb's Python (its standard library).
fn python_dirs() -> Vec<PathBuf> {
    let Ok(libs) = libraries(Path::new("/usr/bin/gdb")) else {
        return Vec::new();
    };
    libs.iter()
        .filter_map(|l| {
            let name = l.file_name()?.to_str()?;
            let v = name.strip_prefix("libpython")?.split(".so").next()?;
            Some(PathBuf::from(format!("/usr/lib/python{v}")))
        })
        .filter(|d| d.exists())
        .collect()
}

/// The result between the markers of the second serial port's log.
pub fn result_from_serial(text: &str) -> Option<String> {
    let (_, rest) = text.split_once(BEGIN)?;
    let (body, _) = rest.split_once(END)?;
    let body = body.replace('\r', "");
    let body = body.trim();
    (!body.is_empty()).then(|| body.to_string())
}

/// Boots `kernel` on `initrd` under qemu, the console in `shared/console.log`,
/// the result into `out`.
pub fn boot(
    kernel: &Kernel,
    accel: Accel,
    initrd: &Path,
    shared: &Path,
    out: &Path,
    timeout: Duration,
) -> Result<Boot, String> {
    std::fs::create_dir_all(shared).map_err(|e| format!("{}: {e}", shared.display()))?;
    let console = shared.join("console.log");
    let serial = shared.join("result.serial");
    let _ = std::fs::remove_file(&serial);
    let log = std::fs::File::create(&console).map_err(|e| format!("{}: {e}", console.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("qemu-system-x86_64");
    match accel {
        Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => cmd.args(["-accel", "tcg", "-cpu", "max"]),
    };
    cmd.args(["-machine", "q35", "-m", "2G", "-smp", "1"])
        .args(["-display", "none", "-vga", "none", "-no-reboot"])
        .args(["-monitor", "none", "-serial", "stdio"])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg("console=ttyS0 rdinit=/init panic=-1 nokaslr")
        .current_dir(shared)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    let (status, seconds) = crate::boot::run_machine(&mut cmd, "qemu-system-x86_64", timeout)?;
    if let Some(r) = std::fs::read_to_string(&serial)
        .ok()
        .and_then(|s| result_from_serial(&s))
    {
        std::fs::write(out, r).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(Boot {
        status,
        console,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ldd() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn finds_the_result_between_the_markers() {
        let serial = format!("noise\r\n{BEGIN}\r\n{{\"a\":1}}\r\n\r\n{END}\r\n");
        assert_eq!(result_from_serial(&serial).as_deref(), Some("{\"a\":1}"));
        assert_eq!(result_from_serial(&format!("{BEGIN}\n{{\"a\"")), None);
    }

    #[test]
    fn writes_newc() {
        let mut t = Tree::default();
        t.data(Path::new("/a/init"), b"hi", 0o755);
        t.symlink(Path::new("/lib"), Path::new("usr/lib"));
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert!(out.len() % 4 == 0);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("070701"));
        // Parents come before what they hold.
        let a = text.find("a\0").unwrap();
        assert!(a < text.find("a/init\0").unwrap());
        assert!(text.contains("usr/lib"));
        assert!(text.contains("TRAILER!!!"));
    }

    #[test]
    fn keeps_a_hosts_symbolic_links() {
        let mut t = Tree::default();
        t.host(Path::new("/bin/sh")).unwrap();
        let dir = std::fs::canonicalize("/bin").unwrap();
        let link = std::fs::read_link("/bin/sh").unwrap();
        assert_eq!(t.entries.get(&dir.join("sh")), Some(&Entry::Symlink(link)));
        let real = std::fs::canonicalize("/bin/sh").unwrap();
        assert_eq!(t.entries.get(&real), Some(&Entry::File(real.clone())));
        // Every link of a chain is kept.
        let mut t = Tree::default();
        let dir = std::env::temp_dir().join(format!("usdt-initramfs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("alt")).unwrap();
        std::fs::write(dir.join("gcc"), "x").unwrap();
        std::os::unix::fs::symlink("../gcc", dir.join("alt/cc")).unwrap();
        std::os::unix::fs::symlink(dir.join("alt/cc"), dir.join("cc")).unwrap();
        t.host(&dir.join("cc")).unwrap();
        let real = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            t.entries.get(&real.join("alt/cc")),
            Some(&Entry::Symlink("../gcc".into()))
        );
        assert_eq!(
            t.entries.get(&real.join("gcc")),
            Some(&Entry::File(real.join("gcc")))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
