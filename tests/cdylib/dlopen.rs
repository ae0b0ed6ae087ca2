//! The Rust twin of `main.c`: loads the probe library with `dlopen`, says
//! `loaded`, waits for a line on stdin (the tracer has attached) and for the
//! lazy probe's semaphore, then fires N times: `dlopen LIBRARY N`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;

fn error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message.
    let msg = unsafe { dlerror() };
    if msg.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated, valid until the next dl call.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

fn symbol(lib: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `lib` is a handle from dlopen, `name` is NUL-terminated.
    let sym = unsafe { dlsym(lib, name.as_ptr()) };
    assert!(!sym.is_null(), "dlsym {name:?}: {}", error());
    sym
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 3, "usage: dlopen LIBRARY N");
    let path = CString::new(args[1].as_str()).unwrap();
    let n: u64 = args[2].parse().expect("N");
    // SAFETY: a NUL-terminated path; the library's initializers are Rust's.
    let lib = unsafe { dlopen(path.as_ptr(), RTLD_NOW) };
    assert!(!lib.is_null(), "dlopen: {}", error());
    // SAFETY: the library defines these with exactly these signatures.
    let fire: extern "C" fn(u64) -> u64 =
        unsafe { std::mem::transmute(symbol(lib, c"usdt_cdylib_fire")) };
    // SAFETY: as above.
    let enabled: extern "C" fn() -> bool =
        unsafe { std::mem::transmute(symbol(lib, c"usdt_cdylib_lazy_enabled")) };
    println!("loaded");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let start = Instant::now();
    while !enabled() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the lazy probe's semaphore was never raised"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("fired {n} runs={}", fire(n));
}
