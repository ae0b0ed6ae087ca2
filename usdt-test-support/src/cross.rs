//! The cross-built examples: each foreign Linux target the tests build for
//! (its rustup target, GNU triple and qemu-user emulator), running a binary
//! under qemu-user, and stopping it at its probes with gdb through qemu's
//! gdb stub, where each operand its note names is read from the register.
//!
//! No uprobe fires under qemu-user; a breakpoint at each note's Location
//! shows the probe's site runs, with the values the note says where.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use usdt_provision::{Need, Package};

use crate::readelf::{readelf_notes, ReadelfNote};

/// A foreign Linux target: built by rustup's standard library for it, linked
/// by the GNU cross compiler, run by qemu-user.
#[derive(Clone, Copy, Debug)]
pub struct Cross {
    /// The rustup target.
    pub target: &'static str,
    /// The GNU triple: `<gnu>-gcc` links, `/usr/<gnu>` holds the C library.
    pub gnu: &'static str,
    /// The qemu-user emulator.
    pub qemu: &'static str,
    /// The cross C compiler package.
    pub gcc: Package,
    /// The cross C library package.
    pub libc: Package,
}

/// aarch64 Linux.
pub const AARCH64: Cross = Cross {
    target: "aarch64-unknown-linux-gnu",
    gnu: "aarch64-linux-gnu",
    qemu: "qemu-aarch64",
    gcc: usdt_provision::AARCH64_GCC,
    libc: usdt_provision::AARCH64_LIBC,
};

/// riscv64 Linux (RV64GC).
pub const RISCV64: Cross = Cross {
    target: "riscv64gc-unknown-linux-gnu",
    gnu: "riscv64-linux-gnu",
    qemu: "qemu-riscv64",
    gcc: usdt_provision::RISCV64_GCC,
    libc: usdt_provision::RISCV64_LIBC,
};

/// qemu-user and gdb for every architecture, to run and stop the builds.
const RUN: [Need; 2] = [
    Need::package(
        usdt_provision::QEMU,
        "the tests run the cross-built examples under qemu-user",
    ),
    Need::package(
        usdt_provision::GDB_MULTIARCH,
        "the tests stop the cross-built examples at their probes under qemu-user's gdb stub",
    ),
];

impl Cross {
    /// The foreign target named `target`, if it is one of these.
    pub fn of(target: &str) -> Option<Cross> {
        [AARCH64, RISCV64].into_iter().find(|c| c.target == target)
    }

    /// What building for the target needs: the rustup target, the cross
    /// compiler (the linker) and the C library.
    pub fn build_needs(&self) -> [Need; 3] {
        [
            Need::rust_target(self.target, "the tests cross-build the examples"),
            Need::package(self.gcc, "the tests link the cross-built examples with it"),
            Need::package(
                self.libc,
                "the tests link the cross-built examples against it",
            ),
        ]
    }

    /// What building and running (and stopping at probes) needs.
    pub fn run_needs(&self) -> Vec<Need> {
        let mut needs = self.build_needs().to_vec();
        needs.extend(RUN);
        needs
    }

    /// The linker rustc is given for the target.
    pub fn linker(&self) -> String {
        format!("{}-gcc", self.gnu)
    }

    /// Where the target's C library and loader are (qemu-user's `-L`).
    pub fn sysroot(&self) -> PathBuf {
        Path::new("/usr").join(self.gnu)
    }

    /// Runs `bin args` under qemu-user, `stdin` as input; fails the test
    /// unless it succeeds.
    pub fn run(&self, bin: &Path, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .qemu_command(bin, args, None)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} (qemu-user): {e}", self.qemu));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{} {} {args:?}: {}\n{}",
            self.qemu,
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn qemu_command(&self, bin: &Path, args: &[&str], gdb_socket: Option<&Path>) -> Command {
        let mut cmd = Command::new(self.qemu);
        cmd.arg("-L").arg(self.sysroot());
        if let Some(socket) = gdb_socket {
            cmd.arg("-g").arg(socket);
        }
        cmd.arg(bin).args(args);
        cmd
    }

    /// Runs `bin args` under qemu-user stopped at every site of each probe
    /// in `probes` by gdb (`break -probe-stap`, which also raises the
    /// probe's semaphore), and reads at each stop the register each operand
    /// of the site's note names; the operands listed with a probe are also
    /// read as C strings. Returns the stops in the order they happened, and
    /// the program's output.
    pub fn stops(
        &self,
        bin: &Path,
        args: &[&str],
        probes: &[(&str, &[usize])],
    ) -> (Vec<Stop>, Output) {
        let notes: Vec<ReadelfNote> = readelf_notes(bin)
            .into_iter()
            .filter(|n| {
                probes
                    .iter()
                    .any(|(p, _)| *p == format!("{}:{}", n.provider, n.name))
            })
            .collect();
        let operands: Vec<Vec<Operand>> = notes.iter().map(|n| operands(&n.args)).collect();
        let script = gdb_script(bin, &self.sysroot(), &notes, &operands, probes);
        let dir = crate::target_tmp().join("gdb");
        std::fs::create_dir_all(&dir).unwrap();
        static N: AtomicUsize = AtomicUsize::new(0);
        let stem = format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let socket = dir.join(format!("{stem}.sock"));
        let script_path = dir.join(format!("{stem}.gdb"));
        std::fs::write(
            &script_path,
            script.replace("SOCKET", &socket.display().to_string()),
        )
        .unwrap();
        let _ = std::fs::remove_file(&socket);

        let program = self
            .qemu_command(bin, args, Some(&socket))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} (qemu-user): {e}", self.qemu));
        // qemu listens once the socket exists.
        crate::wait_for("qemu-user's gdb socket", || socket.exists());
        let gdb = Command::new("gdb-multiarch")
            .args(["-batch", "-nx", "-x"])
            .arg(&script_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run gdb-multiarch");
        let gdb_out = crate::process::wait_output(gdb, 120);
        let out = crate::process::wait_output(program, 30);
        let gdb_text = String::from_utf8_lossy(&gdb_out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {} {args:?} under gdb: {}\n{}\ngdb:\n{gdb_text}\n{}",
            self.qemu,
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&gdb_out.stderr)
        );
        let stops = parse_stops(&gdb_text, &notes, &operands);
        (stops, out)
    }
}

/// One operand of a note: `SIZE@REG` (only registers: the operands this
/// project's sites write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// The size in bytes, negative when signed.
    pub size: i8,
    /// The register, as the note and gdb name it (`x1`, `a0`).
    pub reg: String,
}

fn operands(args: &str) -> Vec<Operand> {
    args.split_whitespace()
        .map(|arg| {
            let (size, reg) = arg
                .split_once('@')
                .unwrap_or_else(|| panic!("operand {arg:?} is not SIZE@REG"));
            let ok = !reg.is_empty() && reg.bytes().all(|b| b.is_ascii_alphanumeric());
            assert!(ok, "operand {arg:?} is not in a register");
            Operand {
                size: size.parse().unwrap_or_else(|_| panic!("size of {arg:?}")),
                reg: reg.to_owned(),
            }
        })
        .collect()
}

/// A stop at a probe's site.
#[derive(Clone, Debug)]
pub struct Stop {
    /// `provider:name`.
    pub probe: String,
    /// The note's Location.
    pub location: u64,
    /// The note's operands.
    pub operands: Vec<Operand>,
    /// Each operand's value: the register's low `|size|` bytes, extended by
    /// the sign.
    pub values: Vec<i128>,
    /// The C strings read, as `(operand, text)`.
    pub strings: Vec<(usize, String)>,
}

/// The gdb commands: for each probe a breakpoint at its sites (gdb finds
/// them in the notes), which prints which site it stopped at (by Location,
/// relative to `main`, since a PIE loads anywhere) and its operands.
fn gdb_script(
    bin: &Path,
    sysroot: &Path,
    notes: &[ReadelfNote],
    operands: &[Vec<Operand>],
    probes: &[(&str, &[usize])],
) -> String {
    let main = symbol_address(bin, "main");
    let mut s = format!(
        "set pagination off\nset confirm off\nset language c\nset sysroot {}\nfile {}\ntarget remote SOCKET\n",
        sysroot.display(),
        bin.display()
    );
    for (probe, strings) in probes {
        s.push_str(&format!("break -probe-stap {probe}\ncommands\nsilent\n"));
        for (i, note) in notes.iter().enumerate() {
            if format!("{}:{}", note.provider, note.name) != *probe {
                continue;
            }
            let delta = note.location as i128 - main as i128;
            s.push_str(&format!(
                "if (long)$pc == (long)&main + ({delta})\nprintf \"STOP {i}\\n\"\n"
            ));
            for (j, op) in operands[i].iter().enumerate() {
                s.push_str(&format!("printf \"ARG {j} %lx\\n\", ${}\n", op.reg));
                if strings.contains(&j) {
                    s.push_str(&format!(
                        "printf \"STR {j} [%s]\\n\", (char *)${}\n",
                        op.reg
                    ));
                }
            }
            s.push_str("end\n");
        }
        s.push_str("continue\nend\n");
    }
    s.push_str("continue\n");
    s
}

fn parse_stops(gdb: &str, notes: &[ReadelfNote], operands: &[Vec<Operand>]) -> Vec<Stop> {
    let mut stops: Vec<Stop> = vec![];
    for line in gdb.lines() {
        if let Some(i) = line.strip_prefix("STOP ") {
            let i: usize = i.trim().parse().unwrap();
            stops.push(Stop {
                probe: format!("{}:{}", notes[i].provider, notes[i].name),
                location: notes[i].location,
                operands: operands[i].clone(),
                values: vec![],
                strings: vec![],
            });
        } else if let Some(rest) = line.strip_prefix("ARG ") {
            let stop = stops.last_mut().expect("ARG after STOP");
            let (_, hex) = rest.split_once(' ').unwrap();
            let raw = u64::from_str_radix(hex.trim(), 16).unwrap();
            let size = stop.operands[stop.values.len()].size;
            stop.values.push(extend(raw, size));
        } else if let Some(rest) = line.strip_prefix("STR ") {
            let stop = stops.last_mut().expect("STR after STOP");
            let (j, text) = rest.split_once(' ').unwrap();
            let text = text.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
            stop.strings
                .push((j.parse().unwrap(), text.expect("[text]").to_owned()));
        }
    }
    stops
}

/// The low `|size|` bytes of `raw`, sign-extended when `size` is negative.
pub fn extend(raw: u64, size: i8) -> i128 {
    let bits = u32::from(size.unsigned_abs()) * 8;
    let low = if bits >= 64 {
        raw
    } else {
        raw & ((1u64 << bits) - 1)
    };
    if size < 0 && low >> (bits - 1) & 1 == 1 {
        low as i128 - (1i128 << bits)
    } else {
        low as i128
    }
}

/// The address of `name` in the symbol table of `bin` (`readelf -sW`).
fn symbol_address(bin: &Path, name: &str) -> u64 {
    let out = crate::run_ok(Command::new("readelf").arg("-sW").arg(bin));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[7] == name && f[3] == "FUNC")
                .then(|| u64::from_str_radix(f[1], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("no {name} in the symbols of {}", bin.display()))
}

/// Runs `examples/types.rs` (`types once`, cross-built at `bin`) stopped at
/// its probes, and checks that each site fired in order with exactly the
/// values the program passes: every integer width and sign, `bool`, `char`,
/// the bits of floats, the pointers it prints, and the strings staged
/// while gdb raised the semaphores.
pub fn check_types_values(cross: &Cross, bin: &Path) {
    let probes: &[(&str, &[usize])] = &[
        ("types:unsigned", &[]),
        ("types:signed", &[]),
        ("types:other", &[]),
        ("types:strings", &[0, 1, 2, 3]),
        ("types:pointers", &[]),
        ("types:twelve", &[]),
    ];
    let (stops, out) = cross.stops(bin, &["once"], probes);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pointers: Vec<i128> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pointers "))
        .unwrap_or_else(|| panic!("no pointers line in {stdout}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let (u32_max, u64_max) = (i128::from(u32::MAX), i128::from(u64::MAX));
    let (i32_min, i64_min) = (i128::from(i32::MIN), i128::from(i64::MIN));
    let other = vec![
        1,
        0,
        i128::from(u32::from('é')),
        i128::from(1.5f32.to_bits()),
        i128::from((-2.0f64).to_bits()),
    ];
    let twelve = vec![
        u64_max,
        i64_min,
        u32_max,
        -5,
        60000,
        -300,
        200,
        -100,
        1,
        i128::from(u32::from('z')),
        12345,
        -12345,
    ];
    let want: Vec<(&str, Option<Vec<i128>>)> = vec![
        (
            "types:unsigned",
            Some(vec![255, 60000, u32_max, u64_max, u64_max]),
        ),
        ("types:unsigned", Some(vec![0; 5])),
        (
            "types:signed",
            Some(vec![-1, -32768, i32_min, i64_min, i64_min]),
        ),
        (
            "types:signed",
            Some(vec![
                127,
                32767,
                i128::from(i32::MAX),
                i128::from(i64::MAX),
                -2,
            ]),
        ),
        ("types:other", Some(other)),
        // The staged copies' addresses: checked by their text below.
        ("types:strings", None),
        ("types:strings", None),
        ("types:pointers", Some(pointers)),
        ("types:twelve", Some(twelve)),
    ];
    let got: Vec<&str> = stops.iter().map(|s| s.probe.as_str()).collect();
    let names: Vec<&str> = want.iter().map(|(p, _)| *p).collect();
    assert_eq!(got, names, "{}: the stops, in order", cross.target);
    for (stop, (_, values)) in stops.iter().zip(&want) {
        let what = format!("{} {} at {:#x}", cross.target, stop.probe, stop.location);
        match values {
            Some(values) => assert_eq!(&stop.values, values, "{what}: {:?}", stop.operands),
            None => assert!(stop.values.iter().all(|v| *v != 0), "{what}: a null string"),
        }
    }
    let texts =
        |i: usize| -> Vec<String> { stops[i].strings.iter().map(|(_, t)| t.clone()).collect() };
    assert_eq!(
        texts(5),
        ["hello", "owned string", "c string", "owned c string"],
        "{}: the strings",
        cross.target
    );
    // The 300-byte string, cut at the staging buffer's 255 bytes (STR_MAX).
    let cut = "x".repeat(255);
    assert_eq!(
        texts(6),
        [cut.as_str(), "", "", ""],
        "{}: the strings",
        cross.target
    );
}

/// Runs the cell binaries (`bin(name)` builds or finds each) under
/// qemu-user, untraced: every probe costs the program nothing, a lazy
/// probe's closure never runs, the garbage-collected probe's code is gone,
/// and the red-zone example computes what its reference does.
pub fn check_examples_run(cross: &Cross, bin: impl Fn(&str) -> PathBuf) {
    let run = |name: &str, args: &[&str], stdin: &str| {
        let out = cross.run(&bin(name), args, stdin);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run("types", &["once"], "");
    assert!(out.starts_with("pointers "), "{out}");
    assert!(out.ends_with("lazy closure runs: 0\n"), "{out}");
    let out = run("demo", &["3"], "");
    assert_eq!(out, "fired 3 requests; 0 were traced at request_done\n");
    assert_eq!(run("gc", &["2"], ""), "kept 2\n");
    let out = run("redzone", &["1000"], "\n");
    let fields: Vec<&str> = out.split_whitespace().collect();
    let value = |key: &str| {
        fields
            .iter()
            .find_map(|f| f.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {out}"))
    };
    assert_eq!(value("result="), value("reference="), "{out}");
    assert_eq!(value("trampoline="), "false", "{out}");
}
