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
use crate::build::{Binaries, LayoutBins};
use crate::fetch::Kernel;
use crate::userland::Userland;
use crate::Arch;

/// The lines around the result on the guest's second serial port.
pub const BEGIN: &str = "=== usdt-kernels result begin ===";
pub const END: &str = "=== usdt-kernels result end ===";

/// Where the guest command writes its result inside the initramfs.
pub const GUEST_OUT: &str = "/tmp/usdt-kernels-result.json";

/// busybox's applets the init script and the checks use.
const APPLETS: &[&str] = &[
    "sh", "mount", "mkdir", "cat", "echo", "sleep", "poweroff", "sync", "uname", "ip",
];

/// The machine's path of the guest's `path` in the tree at `root`.
fn on(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// Resolves the guest's `path` in the tree at `root`, link by link (a link's
/// target read inside `root`), collecting each directory, link and the file
/// it reaches into `found`; the resolved path.
fn resolve(
    root: &Path,
    path: &Path,
    depth: usize,
    found: &mut Vec<(PathBuf, Entry)>,
) -> Result<PathBuf, String> {
    if depth > 40 {
        return Err(format!("{}: too many symbolic links", path.display()));
    }
    // The guest's real directory so far.
    let mut cur = PathBuf::from("/");
    let comps: Vec<Component> = path.components().collect();
    for (i, c) in comps.iter().enumerate() {
        let name = match c {
            Component::Normal(name) => name,
            Component::ParentDir => {
                cur.pop();
                continue;
            }
            _ => continue,
        };
        let next = cur.join(name);
        let real = on(root, &next);
        let md =
            std::fs::symlink_metadata(&real).map_err(|e| format!("{}: {e}", real.display()))?;
        let last = i + 1 == comps.len();
        if md.file_type().is_symlink() {
            let target =
                std::fs::read_link(&real).map_err(|e| format!("{}: {e}", real.display()))?;
            // The link's target, itself perhaps a link
            // (`/usr/bin/cc` -> `/etc/alternatives/cc` -> `/usr/bin/gcc`).
            cur = resolve(root, &cur.join(&target), depth + 1, found)?;
            found.push((next, Entry::Symlink(target)));
        } else if md.is_dir() {
            found.push((next.clone(), Entry::Dir));
            cur = next;
        } else if last {
            found.push((next.clone(), Entry::File(real)));
            cur = next;
        } else {
            return Err(format!("{}: not a directory", real.display()));
        }
    }
    Ok(cur)
}

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
        self.rooted(Path::new("/"), path).map(|_| ())
    }

    /// The guest's `path` as the tree at `root` on the machine has it (the
    /// machine's own `/`, or a foreign architecture's unpacked userland),
    /// its links kept as in [`Tree::host`], an absolute link's target read
    /// inside `root`; the path with every link resolved.
    pub fn rooted(&mut self, root: &Path, path: &Path) -> Result<PathBuf, String> {
        let mut found = Vec::new();
        let resolved = resolve(root, path, 0, &mut found)?;
        for (path, entry) in found {
            match entry {
                Entry::Dir => self.dir(&path),
                entry => self.put(&path, entry),
            }
        }
        Ok(resolved)
    }

    /// `dest` in the guest, a copy of the machine's file `src`.
    pub fn file(&mut self, dest: &Path, src: &Path) {
        self.put(dest, Entry::File(src.to_path_buf()));
    }

    /// The machine's directory `dir`, every file under it, except the
    /// subdirectories named in `skip`.
    pub fn host_tree(&mut self, dir: &Path, skip: &[&str]) -> Result<(), String> {
        self.rooted_tree(Path::new("/"), dir, skip)
    }

    /// The guest's directory `dir` of the tree at `root`, every file under
    /// it, except the subdirectories named in `skip`.
    pub fn rooted_tree(&mut self, root: &Path, dir: &Path, skip: &[&str]) -> Result<(), String> {
        let top = self.rooted(root, dir)?;
        let mut stack = vec![top];
        while let Some(d) = stack.pop() {
            let real = on(root, &d);
            let rd = std::fs::read_dir(&real).map_err(|e| format!("{}: {e}", real.display()))?;
            for e in rd.flatten() {
                let p = d.join(e.file_name());
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    if !skip.iter().any(|s| e.file_name() == *s) {
                        self.entries.insert(p.clone(), Entry::Dir);
                        stack.push(p);
                    }
                } else if ft.is_symlink() {
                    if let Ok(t) = std::fs::read_link(e.path()) {
                        self.entries.insert(p, Entry::Symlink(t));
                    }
                } else if ft.is_file() {
                    self.entries.insert(p, Entry::File(e.path()));
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

    /// The guest's `program` of the tree at `root` (another architecture's
    /// userland, Debian's `triple` directories), with its interpreter and
    /// the shared libraries its ELF headers name, recursively (`ldd` runs
    /// only the machine's own programs). Every file taken, links resolved.
    pub fn foreign_program(
        &mut self,
        root: &Path,
        program: &Path,
        triple: &str,
    ) -> Result<Vec<PathBuf>, String> {
        let mut queue = vec![program.to_path_buf()];
        let mut done = std::collections::BTreeSet::new();
        while let Some(p) = queue.pop() {
            let resolved = self.rooted(root, &p)?;
            if !done.insert(resolved.clone()) {
                continue;
            }
            let d = crate::userland::dynamic(&on(root, &resolved))?;
            let origin = resolved.parent().unwrap_or(Path::new("/")).to_path_buf();
            let dirs: Vec<PathBuf> = d
                .runpath
                .iter()
                .map(|r| PathBuf::from(r.replace("$ORIGIN", &origin.to_string_lossy())))
                .chain(crate::userland::library_dirs(triple))
                .collect();
            queue.extend(d.interpreter.map(PathBuf::from));
            for name in &d.needed {
                let lib = dirs
                    .iter()
                    .map(|dir| dir.join(name))
                    .find(|l| resolve(root, l, 0, &mut Vec::new()).is_ok())
                    .ok_or(format!(
                        "{name} (needed by {}) is not in {}",
                        p.display(),
                        root.display()
                    ))?;
                queue.push(lib);
            }
        }
        Ok(done.into_iter().collect())
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

/// The init script: mounts, the loopback up (`usdt serve` is scraped on
/// 127.0.0.1), the command, the result on the architecture's
/// second serial port (x86-64's `/dev/ttyS1`), or where it has none on the
/// console, once the kernel's messages are silenced (but for emergencies).
pub fn init_script(arch: Arch, command: &[String]) -> String {
    let (port, quiet) = match arch.result_port() {
        Some((port, _, _)) => (port.to_string(), ""),
        None => (
            format!("/dev/{}", arch.console()),
            "echo 1 > /proc/sys/kernel/printk\n",
        ),
    };
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
ip link set lo up
ulimit -l unlimited
echo 'usdt-kernels: initramfs root, running the checks'
{command}
echo \"usdt-kernels: the checks exited $?\"
{quiet}{{ echo '{BEGIN}'; cat {GUEST_OUT}; echo; echo '{END}'; }} > {port}
sync
sleep 2
poweroff -f
",
        command = shell_line(command)
    )
}

/// Where a foreign architecture's programs sit in its guest: each layout's
/// build in `/usdt/LAYOUT` (`release/bench`, `release/examples/`, and the
/// bench's C row in `bench-c/`, beside the `CACHEDIR.TAG` that tells the
/// bench its target directory), the commands in `/usdt/bin`.
const GUEST_DIR: &str = "/usdt";

/// The examples the checks run, and those of the values and stacks
/// checks.
const EXAMPLES: &[&str] = &["demo", "fork", "redzone"];
const VALUE_EXAMPLES: &[&str] = &["types", "latency", "stacks"];

/// `bins`, built on the machine for another architecture, at their places
/// in its guest (under `/usdt`), and each (guest path, machine path) to copy.
pub fn placed(bins: &Binaries) -> (Binaries, Vec<(PathBuf, PathBuf)>) {
    let dir = Path::new(GUEST_DIR);
    let mut files = vec![
        (dir.join("bin/usdt"), bins.usdt.clone()),
        (dir.join("bin/usdt-kernels"), bins.harness.clone()),
    ];
    let mut layouts = Vec::new();
    for l in &bins.layouts {
        let release = dir.join(l.layout.name).join("release");
        let examples = release.join("examples");
        let values = if bins.values { VALUE_EXAMPLES } else { &[] };
        for ex in EXAMPLES.iter().chain(values) {
            files.push((examples.join(ex), l.examples.join(ex)));
        }
        if let (true, Some(outside)) = (bins.values, &bins.outside) {
            files.push((
                examples.join(crate::build::OUTSIDE.package()),
                outside.clone(),
            ));
        }
        let guest = LayoutBins {
            layout: l.layout,
            examples,
            bench: release.join("bench"),
        };
        files.push((guest.bench.clone(), l.bench.clone()));
        if let (Some(to), Some(from)) = (guest.bench_c(), l.bench_c()) {
            files.push((to, from));
        }
        layouts.push(guest);
    }
    let guest = Binaries {
        usdt: files[0].0.clone(),
        harness: files[1].0.clone(),
        layouts,
        ..bins.clone()
    };
    (guest, files)
}

/// busybox's applets beside `busybox` (a guest path), `/bin/sh` among
/// them (for gdb's `startup-with-shell` and bpftrace's -c), and the
/// directories and devices the init script needs.
fn base(t: &mut Tree, busybox: &Path, arch: Arch) {
    let bindir = busybox.parent().unwrap_or(Path::new("/bin")).to_path_buf();
    for a in APPLETS {
        t.symlink(&bindir.join(a), busybox);
    }
    if !t.entries.contains_key(Path::new("/bin/sh")) {
        t.symlink(Path::new("/bin/sh"), busybox);
    }
    for d in ["/proc", "/sys", "/dev", "/tmp", "/root", "/run"] {
        t.dir(Path::new(d));
    }
    t.char_device(Path::new("/dev/console"), 5, 1);
    t.char_device(Path::new("/dev/null"), 1, 3);
    if let Some((port, major, minor)) = arch.result_port() {
        t.char_device(Path::new(port), major, minor);
    }
}

/// The archive for `bins` (the machine's architecture) and the harness
/// `bins.harness`, from the machine's own files: built, or found in
/// `cache/initramfs`.
pub fn archive(cache: &Path, bins: &Binaries, command: &[String]) -> Result<PathBuf, String> {
    let mut t = Tree::default();
    let busybox = ["/usr/bin/busybox", "/bin/busybox"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or("no busybox on the machine (busybox-static)")?;
    t.host(busybox)?;
    // /bin as the machine has it (a link to usr/bin, or a directory).
    t.host(Path::new("/bin"))?;
    let real = std::fs::canonicalize(busybox).map_err(|e| e.to_string())?;
    base(&mut t, &real, bins.arch);
    t.program(&bins.harness)?;
    t.program(&bins.usdt)?;
    for l in &bins.layouts {
        for ex in EXAMPLES {
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
    bench_source(&mut t)?;
    for tool in ["/usr/bin/bpftrace", "/usr/bin/gdb"] {
        t.program(Path::new(tool))?;
    }
    let gdb_libs = libraries(Path::new("/usr/bin/gdb"))?;
    gdb_data(&mut t, Path::new("/"), &gdb_libs)?;
    if Path::new("/etc/ld.so.cache").exists() {
        t.host(Path::new("/etc/ld.so.cache"))?;
    }
    finish(cache, t, bins.arch, command)
}

/// The archive of a guest of another architecture: `bins` (built for it,
/// statically linked) at their [`placed`] paths, and from `userland` its
/// busybox and the consumers it holds, with their libraries.
pub fn archive_foreign(
    cache: &Path,
    bins: &Binaries,
    userland: &Userland,
    command: &[String],
) -> Result<PathBuf, String> {
    let mut t = Tree::default();
    let root = &userland.root;
    let busybox = t.rooted(root, Path::new("/bin/busybox"))?;
    base(&mut t, &busybox, bins.arch);
    for (guest, machine) in placed(bins).1 {
        t.file(&guest, &machine);
    }
    for l in &bins.layouts {
        let tag = Path::new(GUEST_DIR)
            .join(l.layout.name)
            .join("CACHEDIR.TAG");
        t.data(&tag, crate::build::CACHEDIR_TAG.as_bytes(), 0o644);
    }
    bench_source(&mut t)?;
    for tool in userland.consumers() {
        let files = t.foreign_program(root, &tool, bins.arch.gnu_triple())?;
        if tool.ends_with("gdb") {
            gdb_data(&mut t, root, &files)?;
        }
    }
    finish(cache, t, bins.arch, command)
}

/// The bench's C source at the path the bench was built with: the bench
/// compiles its C row again when the library is older than the source.
fn bench_source(t: &mut Tree) -> Result<(), String> {
    let source = crate::build::workspace().join("bench/c/loop.c");
    match source.exists() {
        true => t.host(&source),
        false => Ok(()),
    }
}

/// gdb's data directory and its Python's standard library, in the tree at
/// `root`, where `libs` (the libraries gdb loads) name its libpython.
fn gdb_data(t: &mut Tree, root: &Path, libs: &[PathBuf]) -> Result<(), String> {
    for d in ["/usr/share/gdb", "/etc/gdb"] {
        if on(root, Path::new(d)).exists() {
            t.rooted_tree(root, Path::new(d), &[])?;
        }
    }
    for d in python_dirs(libs) {
        if on(root, &d).exists() {
            t.rooted_tree(
                root,
                &d,
                &["test", "idlelib", "tkinter", "ensurepip", "lib2to3"],
            )?;
        }
    }
    Ok(())
}

/// The init script added, the archive written to `cache/initramfs` (named
/// by the hash of its contents) unless there already.
fn finish(cache: &Path, mut t: Tree, arch: Arch, command: &[String]) -> Result<PathBuf, String> {
    let init = init_script(arch, command);
    t.data(Path::new("/init"), init.as_bytes(), 0o755);
    // Two guests of one run build the same archive: one at a time.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
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

/// The directories of gdb's Python (its standard library), from the
/// libraries gdb loads (`libpython3.11.so.1.0` -> `/usr/lib/python3.11`).
fn python_dirs(libs: &[PathBuf]) -> Vec<PathBuf> {
    libs.iter()
        .filter_map(|l| {
            let name = l.file_name()?.to_str()?;
            let v = name.strip_prefix("libpython")?.split(".so").next()?;
            Some(PathBuf::from(format!("/usr/lib/python{v}")))
        })
        .collect()
}

/// The result between the markers of a serial port's log.
pub fn result_from_serial(text: &str) -> Option<String> {
    let (_, rest) = text.split_once(BEGIN)?;
    let (body, _) = rest.split_once(END)?;
    let body = body.replace('\r', "");
    let body = body.trim();
    (!body.is_empty()).then(|| body.to_string())
}

/// Boots `kernel` on `initrd` under its architecture's qemu, the console in
/// `shared/console.log`, the result into `out`.
pub fn boot(
    kernel: &Kernel,
    accel: Accel,
    initrd: &Path,
    shared: &Path,
    out: &Path,
    timeout: Duration,
) -> Result<Boot, String> {
    std::fs::create_dir_all(shared).map_err(|e| format!("{}: {e}", shared.display()))?;
    let arch = kernel.arch;
    let console = shared.join("console.log");
    let serial = match arch.result_port() {
        Some(_) => shared.join("result.serial"),
        None => console.clone(),
    };
    let _ = std::fs::remove_file(&serial);
    let log = std::fs::File::create(&console).map_err(|e| format!("{}: {e}", console.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(arch.qemu());
    match accel {
        Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => cmd.args(["-accel", "tcg", "-cpu", arch.tcg_cpu()]),
    };
    cmd.args(arch.machine_args())
        .args(["-m", "2G", "-smp", "1"])
        .args(["-display", "none", "-no-reboot"])
        .args(["-monitor", "none", "-serial", "stdio"]);
    if arch.result_port().is_some() {
        cmd.arg("-serial").arg(format!("file:{}", serial.display()));
    }
    cmd.arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!(
            "console={} rdinit=/init panic=-1 nokaslr",
            arch.console()
        ))
        .current_dir(shared)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    let (status, seconds) = crate::boot::run_machine(&mut cmd, arch.qemu(), timeout)?;
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
