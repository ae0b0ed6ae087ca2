//! The C `<sys/sdt.h>` row's loop (bench/c/loop.c), compiled when the bench
//! runs and loaded with `dlopen`.
//!
//! Compiled here rather than by a build script because the header comes from
//! a Debian package (`systemtap-sdt-dev`) a fresh machine lacks: a build script
//! would fail the whole build (and every test with it) before anything could
//! install it, while at run time the bench first provisions the header (as
//! root) or skips this one row and says why. The peers helper is built at run
//! time for a like reason (peers.rs).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use usdt_provision::{Need, GCC, SDT};

/// The probe's (provider, name) in the note.
pub const PROBE: (&str, &str) = ("cbench", "hit");

/// The loaded library: its path (the attach target) and its loop.
pub struct CLoop {
    pub path: PathBuf,
    run: extern "C" fn(u64),
}

impl CLoop {
    /// Runs `for (i = 0; i < n; i++) STAP_PROBE2(cbench, hit, i, n);`.
    pub fn run(&self, n: u64) {
        (self.run)(n)
    }
}

/// The C loop, compiled (once per source change) and loaded (once per
/// process); `Err` says why the row cannot run here.
pub fn get() -> Result<&'static CLoop, String> {
    static LOADED: OnceLock<Result<CLoop, String>> = OnceLock::new();
    LOADED.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c/loop.c")
}

fn load() -> Result<CLoop, String> {
    let lib = crate::peers::beside_bench("bench-c").join("libusdt_bench_c.so");
    let fresh = |lib: &Path| -> Option<bool> {
        let built = std::fs::metadata(lib).ok()?.modified().ok()?;
        let src = std::fs::metadata(source()).ok()?.modified().ok()?;
        Some(built >= src)
    };
    // A library compiled before (by an earlier run, or for another
    // architecture by the kernel matrix) needs neither the compiler nor
    // the header where it runs.
    if fresh(&lib) != Some(true) {
        usdt_provision::ensure(&[
            Need::package(GCC, "the bench compiles its C <sys/sdt.h> row"),
            Need::package(SDT, "the bench's c-sdt-nop row is a C <sys/sdt.h> probe"),
        ])
        .map_err(|e| e.to_string())?;
        compile(&lib)?;
    }
    let path = CString::new(lib.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path; the library only defines two loops
    // and has no constructors.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("dlopen {}: {}", lib.display(), dlerror()));
    }
    // SAFETY: the handle is valid; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, c"usdt_bench_c_loop".as_ptr()) };
    if sym.is_null() {
        return Err(format!("dlsym usdt_bench_c_loop: {}", dlerror()));
    }
    // The handle stays open for the process's life: the loop is called from
    // every run of the row.
    Ok(CLoop {
        path: lib,
        // SAFETY: loop.c defines `void usdt_bench_c_loop(uint64_t n)`.
        run: unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(u64)>(sym) },
    })
}

/// `cc -O2 -shared -fPIC bench/c/loop.c -o LIB`, through a temporary name so
/// that a concurrent bench never loads a half-written file.
fn compile(lib: &Path) -> Result<(), String> {
    let dir = lib.parent().expect("a directory");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let partial = dir.join(format!("libusdt_bench_c.so.{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-Wall", "-o"])
        .arg(&partial)
        .arg(source())
        .output()
        .map_err(|e| format!("could not run cc: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "cc {}: {}",
            source().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(&partial, lib).map_err(|e| format!("{}: {e}", lib.display()))
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "unknown error".into();
    }
    // SAFETY: non-null, NUL-terminated, valid until the next dl* call.
    unsafe { std::ffi::CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}
