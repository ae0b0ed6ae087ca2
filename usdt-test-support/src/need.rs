//! What the tests need, each with the reason a skipped or provisioning test
//! gives ([`crate::ready`] checks them and installs the packages).

use usdt_provision::Need;

/// Root, for the tests that attach uprobes.
pub const ROOT: Need =
    Need::root("it attaches uprobes (perf_event_open on the uprobe PMU, or BPF)");
/// tracefs, which bpftrace, perf and the perf engine's fetch events use.
pub const TRACEFS: Need = Need::tracefs("bpftrace and perf create uprobe events in it");
/// bpftrace, which the tests compare their readings with.
pub const BPFTRACE: Need = Need::package(
    usdt_provision::BPFTRACE,
    "the tests trace the same programs with it and compare what it reads",
);
/// gdb, for the tests that stop at the probes.
pub const GDB: Need = Need::package(usdt_provision::GDB, "the tests stop at probes with it");
/// perf, for tests/perf.rs.
pub const PERF: Need = Need::package(
    usdt_provision::PERF,
    "tests/perf.rs adds, counts and records the probes with perf",
);
/// `<sys/sdt.h>`, for the C probe programs (usdt-trace/tests/c/) and the C
/// probes linked with ours.
pub const SDT: Need = Need::package(
    usdt_provision::SDT,
    "the tests build C programs with <sys/sdt.h> probes",
);
/// A C compiler, for the C programs the tests load our libraries into.
pub const CC: Need = Need::package(usdt_provision::GCC, "the tests build C programs");
/// setpriv, which runs `usdt` without privileges.
pub const SETPRIV: Need = Need::package(
    usdt_provision::SETPRIV,
    "the tests run usdt as nobody with it",
);
/// PostgreSQL, whose probes the tests trace in a cluster of their own.
pub const POSTGRESQL: Need = Need::package(
    usdt_provision::POSTGRESQL,
    "the tests trace PostgreSQL's probes under pgbench",
);
/// Debian's Python 3.11, whose probes the tests trace.
pub const PYTHON: Need = Need::package(
    usdt_provision::PYTHON311,
    "the tests trace CPython's probes",
);
/// g++, for the C++ program whose exceptions libstdc++'s probes count.
pub const GXX: Need = Need::package(
    usdt_provision::GXX,
    "the tests build a C++ program that throws",
);
