//! A PostgreSQL cluster of a test's own (or the bench's): made with
//! `initdb` in a temporary directory as `nobody`, served by `pg_ctl` on a
//! Unix socket in that directory and a free port, stopped and removed
//! when dropped (a failed test too).
//!
//! The cluster runs a private copy of Debian's `postgres` (beside symlinks
//! to its library and share directories, where the copy finds them by
//! its own path), so that `usdt ... --all COPY` counts this cluster's
//! processes only, never another PostgreSQL on the machine.

use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Where Debian's PostgreSQL 15 is.
const BIN: &str = "/usr/lib/postgresql/15/bin";
const LIB: &str = "/usr/lib/postgresql/15/lib";
const SHARE: &str = "/usr/share/postgresql/15";
/// Who runs the cluster (initdb refuses root), by id.
const NOBODY: u32 = 65534;

/// A running cluster; dropping it stops the server and removes its files.
pub struct Cluster {
    /// The temporary directory: the copy's tree, `data/`, the socket.
    pub root: PathBuf,
    /// The `postgres` the cluster runs (the private copy).
    pub postgres: PathBuf,
    /// The port in the socket's name.
    pub port: u16,
    started: bool,
}

impl Cluster {
    /// A new cluster named `name` (its directory's name), running, with
    /// pgbench's tables at scale 1. Extra `postgres -c` settings in
    /// `settings` (`"autovacuum=off"`).
    pub fn start(name: &str, settings: &[&str]) -> Result<Cluster, String> {
        let root = std::env::temp_dir().join(format!("usdt-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let bin = root.join(BIN.trim_start_matches('/'));
        let mut cluster = Cluster {
            postgres: bin.join("postgres"),
            root,
            port: free_port()?,
            started: false,
        };
        cluster
            .lay_out(&bin)
            .map_err(|e| format!("{}: {e}", cluster.root.display()))?;
        cluster.run(Command::new(bin.join("initdb")).args([
            "-D",
            "data",
            "-A",
            "trust",
            "-U",
            "nobody",
            "-E",
            "UTF8",
            "--no-sync",
        ]))?;
        let mut options = format!(
            "-k {} -p {} -c listen_addresses='' -c fsync=off",
            cluster.root.display(),
            cluster.port
        );
        for s in settings {
            options.push_str(" -c ");
            options.push_str(s);
        }
        cluster.started = true;
        cluster.run(Command::new(bin.join("pg_ctl")).args([
            "-D", "data", "-l", "log", "-w", "-t", "60", "-o", &options, "start",
        ]))?;
        cluster.pgbench(&["-i", "-q", "-s", "1"])?;
        Ok(cluster)
    }

    /// The directory tree the copy finds its files in: `postgres`,
    /// `initdb` and `pg_ctl` copied (initdb and pg_ctl run the `postgres`
    /// beside them), the library and share directories linked.
    fn lay_out(&self, bin: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(bin)?;
        for program in ["postgres", "initdb", "pg_ctl"] {
            std::fs::copy(Path::new(BIN).join(program), bin.join(program))?;
        }
        symlink(LIB, self.root.join(LIB.trim_start_matches('/')))?;
        let share = self.root.join(SHARE.trim_start_matches('/'));
        std::fs::create_dir_all(share.parent().unwrap_or(&self.root))?;
        symlink(SHARE, share)?;
        std::os::unix::fs::chown(&self.root, Some(NOBODY), Some(NOBODY))
    }

    /// `program` run as nobody in the cluster's directory, with the
    /// connection in its environment (`PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGDATABASE`).
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(program.as_ref())
            .current_dir(&self.root)
            .env("PGHOST", &self.root)
            .env("PGPORT", self.port.to_string())
            .env("PGUSER", "nobody")
            .env("PGDATABASE", "postgres")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `cmd` (as made by [`command`](Self::command) or bare) as
    /// nobody to its end; its output, or what it said when it failed.
    fn run(&self, cmd: &mut Command) -> Result<Output, String> {
        let mut as_nobody = self.command(cmd.get_program());
        as_nobody.args(cmd.get_args());
        let out = as_nobody
            .output()
            .map_err(|e| format!("cannot run {as_nobody:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{as_nobody:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(out)
    }

    /// `pgbench ARGS` against the cluster, to its end.
    pub fn pgbench(&self, args: &[&str]) -> Result<Output, String> {
        self.run(Command::new(Path::new(BIN).join("pgbench")).args(args))
    }

    /// A file in the cluster's directory that nobody can read (a pgbench
    /// script).
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, String> {
        let path = self.root.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started {
            let bin = self.root.join(BIN.trim_start_matches('/'));
            let _ = self.run(
                Command::new(bin.join("pg_ctl")).args(["-D", "data", "-m", "fast", "-w", "stop"]),
            );
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A TCP port nothing listens on now (the socket's name takes it; the
/// cluster listens on no TCP address).
fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// pgbench's TPC-B-like transaction written out as a script (seven
/// statements, one commit), so that a control run with the same options
/// and [`IDLE_SCRIPT`] makes the same connections and sends nothing else.
pub const TPCB_SCRIPT: &str = "\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
";

/// The statements of [`TPCB_SCRIPT`] per transaction.
pub const TPCB_STATEMENTS: u64 = 7;

/// A script that sends no statement: pgbench connects (once per client,
/// or per transaction with `-C`) and runs it as often.
pub const IDLE_SCRIPT: &str = "\\set x 1\n";
