//! A [`Session`] owns what is traced: a command it starts paused, a
//! running process, or every process that runs a file; the ELF objects
//! with probes it found for them; the threads and the objects that appear
//! later; and a way to be cancelled.
//!
//! - A command's objects are its program and the libraries the dynamic
//!   loader will load (its dynamic section and `ld.so.cache`,
//!   [`shared_libraries`](crate::shared_libraries)); a process's are the
//!   files it maps (`/proc/PID/maps`, [`read_process`](crate::read_process)).
//! - Libraries loaded later (`dlopen`) are found by reading the mappings
//!   again ([`Session::new_objects`]), threads started later by reading
//!   `/proc/PID/task` ([`Session::new_threads`]).
//! - A process's files deleted or replaced since it mapped them are read
//!   and attached through `/proc/PID/map_files` ([`object_path`]).
//! - A command whose program has no probes of its own ([`Launcher`]: a
//!   script, a shim, `env`, `nice`, a shell) is started as any other: the
//!   programs it executes are found at each exec, and theirs are the
//!   probes it is run for.
//! - A program the process executes is found the same way, at once when
//!   the session follows execs ([`Session::follow_exec`]): the process is
//!   then stopped at each exec until the caller attached the new program
//!   and called [`Session::resume`] (see [`follow`](crate::follow) for the
//!   mechanism and its costs), else found by polling, a poll late, and
//!   said ([`Cause::Exec`]).
//! - For every process of a file, the file's path is watched: a new file
//!   put there (a deployment's rename) is read and attached as well
//!   ([`Cause::Replaced`]); the old file's uprobes stay for the processes
//!   that still run it.
//! - What the session met but did not fail on (a file it could not read, a
//!   malformed note it skipped, a site its check refused) is kept as
//!   [`Notice`]s for the caller to say.
//! - A site whose check refused it ([`Site::refused`]) is left out of the
//!   objects, unless [`Session::force_sites`] asks for it.
//! - A command not started when the session is dropped is killed and
//!   reaped: an interrupted attach leaves nothing behind.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::command::{resolve_program, PausedCommand};
use crate::elf::arg::Machine;
use crate::elf::note::{read_file_probes, ElfProbes, Site, SkippedNote};
#[cfg(doc)]
use crate::elf::sites::SiteCheck;
use crate::engine::Target;
use crate::exec_watch::ExecWatch;
use crate::glob::globs_match;
use crate::ldso::shared_libraries;
use crate::process::{
    exec_libraries, object_path, process_alive, process_threads, read_maps, read_process,
};
use crate::Error;

/// Files and their sites: the path to open, and the sites in it.
pub type Objects = Vec<(PathBuf, Vec<Site>)>;

/// How often a traced process's mappings are read for new objects.
const MAPS_POLL: Duration = Duration::from_millis(100);

/// Something a session met and went on from.
#[derive(Debug)]
#[non_exhaustive]
pub enum Notice {
    /// A note of `path` was malformed as a whole and skipped.
    Skipped {
        /// The file (as the process maps it, or as given).
        path: PathBuf,
        /// The note.
        note: SkippedNote,
    },
    /// A site of `path` whose Location or semaphore lies where no
    /// `sys/sdt.h` site's can ([`SiteCheck`]): not attached, or, with
    /// [`Session::force_sites`], attached anyway (`forced`). Said only for
    /// sites the globs match.
    Refused {
        /// The file (as the process maps it, or as given).
        path: PathBuf,
        /// The site.
        site: Box<Site>,
        /// Whether it is attached all the same.
        forced: bool,
    },
    /// The probes of `path` could not be read: they are not attached.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: Error,
    },
}

/// An object a process mapped after the session started.
#[derive(Debug)]
pub struct NewObject {
    /// The path to open (through `/proc/PID/root` or `/proc/PID/map_files`;
    /// for a new file at a binary's path, an open descriptor of it).
    pub open_path: PathBuf,
    /// The path as the process maps it (or the binary's path).
    pub mapped: String,
    /// Its sites that match the session's globs.
    pub sites: Vec<Site>,
    /// Why it is new.
    pub cause: Cause,
    /// Whose hits to attach it for: the process that maps it (the traced
    /// process, or one that a launcher forked), or every process (a new
    /// file of a binary).
    pub target: Target,
}

/// Why an object is new to the session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The process mapped it (a library loaded with `dlopen`).
    Mapped,
    /// The process executed a new program, which maps it.
    Exec {
        /// `None`: the process was stopped at the exec until
        /// [`Session::resume`], so no hit is missed; else why hits between
        /// the exec and the attach may have been missed.
        missed: Option<String>,
    },
    /// A new file took the place of the binary whose every process is
    /// traced (same path, new inode).
    Replaced,
}

/// A command whose program has no probes of its own: the probes it is run
/// for are those of the programs it executes, attached at each exec
/// ([`Session::follow_exec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// A file that is not ELF: a script (`#!`), a version manager's shim.
    Script,
    /// An ELF program without probes: `env`, `nice`, a shell.
    Program,
}

/// What a session traces.
#[derive(Debug)]
enum Kind {
    Command {
        argv: Vec<OsString>,
        exec_path: PathBuf,
        child: Option<PausedCommand>,
        started: bool,
        launcher: Option<Launcher>,
    },
    Process(u32),
    Binary {
        /// The file read (symlinks resolved).
        path: PathBuf,
        /// The path as given, watched for a new file.
        watched: PathBuf,
    },
}

/// The targets of a trace and the objects found for them; see the module
/// documentation.
#[derive(Debug)]
pub struct Session {
    kind: Kind,
    objects: Objects,
    machines: Vec<Machine>,
    globs: Vec<String>,
    notices: Vec<Notice>,
    /// The inodes of the files already looked at.
    seen_files: BTreeSet<u64>,
    next_maps_poll: Instant,
    threads: BTreeSet<u32>,
    cancel: Option<fn() -> bool>,
    force_sites: bool,
    /// The refused sites held back from `objects`: the file to open, the
    /// file as named, the site.
    refused: Vec<(PathBuf, PathBuf, Site)>,
    /// How many of `refused` were said already.
    refused_said: usize,
    /// The refused sites attached all the same, not said yet.
    forced: Vec<(PathBuf, Site)>,
    /// The execs of the process ([`Session::follow_exec`]).
    exec: ExecWatch,
    /// New files at a binary's path, kept open: their sites are attached
    /// through `/proc/self/fd/N`.
    replacements: Vec<File>,
    /// The inode of the program traced: a command's, or the one a process
    /// ran at the start.
    program: Option<u64>,
}

impl Session {
    /// A command (`argv[0]` found in `PATH` when it has no `/`), not
    /// started yet: its program and the shared libraries it will load; no
    /// object for a program that is not ELF (a [`Launcher`]).
    pub fn command(argv: &[OsString]) -> Result<Session, Error> {
        let Some(first) = argv.first() else {
            return Err(Error::ProgramNotFound {
                program: PathBuf::new(),
            });
        };
        let exec_path = resolve_program(Path::new(first))?;
        let program = absolute(&exec_path);
        let probes = match read_file_probes(&program) {
            Ok(probes) => Some(probes),
            // A script or a shim: what it executes is found at the exec.
            Err(e) if e.is_not_elf() => None,
            Err(e) => return Err(e),
        };
        let launcher = match &probes {
            None => Some(Launcher::Script),
            Some(p) if p.sites.is_empty() => Some(Launcher::Program),
            Some(_) => None,
        };
        let mut session = Session::new(Kind::Command {
            argv: argv.to_vec(),
            exec_path,
            child: None,
            started: false,
            launcher,
        });
        session.program = std::fs::metadata(&program).ok().map(|m| m.ino());
        let Some(probes) = probes else {
            return Ok(session);
        };
        session.add(program.clone(), probes);
        for lib in shared_libraries(&program) {
            match read_file_probes(&lib) {
                Ok(probes) => session.add(lib, probes),
                Err(error) => session
                    .notices
                    .push(Notice::Unreadable { path: lib, error }),
            }
        }
        Ok(session)
    }

    /// A running process: every file it maps that has probes.
    pub fn process(pid: u32) -> Result<Session, Error> {
        let mut session = Session::new(Kind::Process(pid));
        // Before the maps: an exec meanwhile is then seen.
        session.program = session.exec.start_at(pid);
        for object in read_process(pid)? {
            match object.probes {
                Ok(probes) => {
                    session.notices.extend(skipped(&object.path, &probes));
                    session.machines.push(probes.machine);
                    let sites = session.hold_back(&object.open_path, &object.path, probes.sites);
                    session.objects.push((object.open_path, sites));
                }
                Err(error) => session.notices.push(Notice::Unreadable {
                    path: object.path,
                    error,
                }),
            }
        }
        session.remember_files();
        Ok(session)
    }

    /// Every process that runs (or maps) the file at `path`.
    pub fn binary(path: &Path) -> Result<Session, Error> {
        let watched = path.to_path_buf();
        let path = absolute(path);
        let mut session = Session::new(Kind::Binary {
            path: path.clone(),
            watched,
        });
        let probes = read_file_probes(&path)?;
        session.add(path, probes);
        session.remember_files();
        Ok(session)
    }

    fn new(kind: Kind) -> Session {
        Session {
            kind,
            objects: vec![],
            machines: vec![],
            globs: vec![],
            notices: vec![],
            seen_files: BTreeSet::new(),
            next_maps_poll: Instant::now(),
            threads: BTreeSet::new(),
            cancel: None,
            force_sites: false,
            refused: vec![],
            refused_said: 0,
            forced: vec![],
            exec: ExecWatch::default(),
            replacements: vec![],
            program: None,
        }
    }

    fn add(&mut self, path: PathBuf, probes: ElfProbes) {
        self.notices.extend(skipped(&path, &probes));
        self.machines.push(probes.machine);
        let sites = self.hold_back(&path, &path, probes.sites);
        self.objects.push((path, sites));
    }

    /// Only the probes (`provider:name`) that match one of `globs` (every
    /// probe when there are none).
    pub fn globs(mut self, globs: &[String]) -> Session {
        self.globs = globs.to_vec();
        self
    }

    /// Asks `cancelled` before each step of a long attach: when it says so,
    /// [`Session::cancelled`] is true and attaching stops.
    pub fn cancel_when(mut self, cancelled: fn() -> bool) -> Session {
        self.cancel = Some(cancelled);
        self
    }

    /// Stop the traced process (a command, or a process by pid) at each
    /// exec until the caller attached the new program
    /// ([`Session::new_objects`], then [`Session::resume`]): the caller
    /// must look often, or wait for the command, since the process waits
    /// at each exec until then (its other ptrace stops are let go by a
    /// thread of the session's, at once). A command that is a
    /// [`Launcher`] is followed into the processes it forks as well (`sh
    /// -c 'PROG ...'` forks PROG), each attached at its exec for itself
    /// ([`NewObject::target`]).
    pub fn follow_exec(mut self) -> Session {
        // A launcher's processes too: `sh -c 'PROG'` forks PROG.
        self.exec.follow(self.launcher().is_some());
        self
    }

    /// Whether the session was cancelled.
    pub fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c())
    }

    /// Whether `site` is one of the probes asked for.
    pub fn wants(&self, site: &Site) -> bool {
        globs_match(&self.globs, &site.probe())
    }

    /// The objects found, with all their sites.
    pub fn objects(&self) -> &Objects {
        &self.objects
    }

    /// The machines of the objects (one entry per object).
    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }

    /// Each object with the sites the globs match.
    pub fn matched(&self) -> Vec<(PathBuf, Vec<&Site>)> {
        self.objects
            .iter()
            .map(|(path, sites)| {
                (
                    path.clone(),
                    sites.iter().filter(|s| self.wants(s)).collect(),
                )
            })
            .collect()
    }

    /// Whose hits to see: the process (or started command), or every
    /// process of the binary. A command not spawned yet is pid 0.
    pub fn target(&self) -> Target {
        match &self.kind {
            Kind::Process(pid) => Target::Pid(*pid),
            Kind::Command { child, .. } => Target::Pid(child.as_ref().map_or(0, |c| c.pid())),
            Kind::Binary { .. } => Target::AllProcesses,
        }
    }

    /// The program a command runs, as found in `PATH` (not canonicalized).
    pub fn exec_path(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Command { exec_path, .. } => Some(exec_path),
            _ => None,
        }
    }

    /// Whether the command's program has no probes of its own, and what
    /// it is then (a script, or a program such as `env`): `None` for a
    /// program with probes, a process or a file.
    pub fn launcher(&self) -> Option<Launcher> {
        match &self.kind {
            Kind::Command { launcher, .. } => *launcher,
            _ => None,
        }
    }

    /// Whether the process was seen running a program other than the one
    /// traced at the start (a command's own, or the one a process ran):
    /// the program a launcher executed, a script's interpreter.
    pub fn ran_another_program(&self) -> bool {
        self.exec.ran_other_than(self.program)
    }

    /// The file whose every process is traced.
    pub fn binary_path(&self) -> Option<&Path> {
        match &self.kind {
            Kind::Binary { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Forks the command, paused before it runs its program, with argv\[0\]
    /// as given; returns its pid. A command spawned already keeps its pid.
    pub fn spawn(&mut self) -> Result<u32, Error> {
        let Kind::Command {
            argv,
            exec_path,
            child,
            ..
        } = &mut self.kind
        else {
            return Err(Error::AlreadyStarted);
        };
        if let Some(child) = child {
            return Ok(child.pid());
        }
        let mut paused = PausedCommand::spawn_as(exec_path, &argv[0], &argv[1..])?;
        let pid = paused.pid();
        self.exec.spawned(&mut paused);
        *child = Some(paused);
        self.threads.insert(pid);
        self.remember_files();
        Ok(pid)
    }

    /// The command, once spawned.
    pub fn child(&mut self) -> Option<&mut PausedCommand> {
        match &mut self.kind {
            Kind::Command { child, .. } => child.as_mut(),
            _ => None,
        }
    }

    /// Lets the paused command run its program.
    pub fn start(&mut self) -> Result<(), Error> {
        let Kind::Command { child, started, .. } = &mut self.kind else {
            return Err(Error::AlreadyStarted);
        };
        let child = child.as_mut().ok_or(Error::AlreadyStarted)?;
        child.start()?;
        *started = true;
        Ok(())
    }

    /// What the session met and went on from, since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        let fresh: Vec<Notice> = self.refused[self.refused_said..]
            .iter()
            .filter(|(_, _, s)| self.wants(s))
            .map(|(_, named, s)| Notice::Refused {
                path: named.clone(),
                site: Box::new(s.clone()),
                forced: false,
            })
            .collect();
        self.refused_said = self.refused.len();
        self.notices.extend(fresh);
        for (path, site) in std::mem::take(&mut self.forced) {
            if self.wants(&site) {
                self.notices.push(Notice::Refused {
                    path,
                    site: Box::new(site),
                    forced: true,
                });
            }
        }
        std::mem::take(&mut self.notices)
    }

    /// The threads of the traced process not returned before (the first
    /// call returns every thread): a uprobe perf event samples only its
    /// own thread.
    pub fn new_threads(&mut self) -> Vec<u32> {
        let Target::Pid(pid) = self.target() else {
            return vec![];
        };
        let tids = process_threads(pid).unwrap_or_default();
        tids.into_iter()
            .filter(|t| self.threads.insert(*t))
            .collect()
    }

    /// Marks `tid` as attached already.
    pub fn add_thread(&mut self, tid: u32) -> bool {
        self.threads.insert(tid)
    }

    /// The threads returned so far.
    pub fn threads(&self) -> &BTreeSet<u32> {
        &self.threads
    }

    /// The files the process mapped since the last look (none until
    /// 100 ms have passed, unless it executed a program) that have sites
    /// the globs match, or for every process of a binary, a new file at
    /// its path; they join [`Session::objects`]. A file that cannot be
    /// read is a [`Notice::Unreadable`]. A process stopped at an exec
    /// stays stopped until [`Session::resume`] (or the next call).
    pub fn new_objects(&mut self) -> Vec<NewObject> {
        if matches!(self.kind, Kind::Binary { .. }) {
            return self.replaced_binary();
        }
        let Target::Pid(pid) = self.target() else {
            return vec![];
        };
        if pid == 0 {
            return vec![];
        }
        let exec = self
            .exec
            .seen(pid, child_of(&mut self.kind))
            .map(|missed| Cause::Exec { missed });
        let mut found = vec![];
        if exec.is_some() || Instant::now() >= self.next_maps_poll {
            self.next_maps_poll = Instant::now() + MAPS_POLL;
            if exec.is_some() {
                // Only the thread that executed is left.
                let now: BTreeSet<u32> = process_threads(pid)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                self.threads.retain(|t| now.contains(t));
            }
            let mut seen = std::mem::take(&mut self.seen_files);
            found = self.mapped(pid, exec, &mut seen);
            self.seen_files = seen;
        }
        if let Some(forked) = self.exec.held_fork(child_of(&mut self.kind)) {
            // A process the command forked executed a program: attached
            // for that process, whatever other processes attached.
            let exec = Cause::Exec { missed: None };
            found.extend(self.mapped(forked, Some(exec), &mut BTreeSet::new()));
        }
        found
    }

    /// The objects with sites the globs match that process `pid` maps,
    /// except the files in `seen` (whose inodes are added): after an exec
    /// (its cause), with the libraries the new program will load.
    fn mapped(
        &mut self,
        pid: u32,
        exec: Option<Cause>,
        seen: &mut BTreeSet<u64>,
    ) -> Vec<NewObject> {
        let Ok(maps) = read_maps(pid) else {
            return vec![]; // gone: the caller notices
        };
        // At the exec stop only the program and its interpreter are
        // mapped: the libraries it will load are read now too.
        let libraries = exec.as_ref().map_or(vec![], |_| exec_libraries(pid));
        let cause = exec.unwrap_or(Cause::Mapped);
        let target = Target::Pid(pid);
        let mut found = vec![];
        for m in maps {
            if !seen.insert(m.inode) {
                continue;
            }
            let open_path = object_path(pid, &m);
            let shown = m.shown();
            let probes = match read_file_probes(&open_path) {
                Ok(p) => p,
                Err(e) if e.is_not_elf() => continue,
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::InvalidInput =>
                {
                    continue
                }
                // The process ended (or executed again) meanwhile: the
                // caller notices, or the next look finds the new program.
                Err(_) if !process_alive(pid) || !std::fs::exists(&open_path).unwrap_or(true) => {
                    seen.remove(&m.inode);
                    continue;
                }
                Err(error) => {
                    self.notices.push(Notice::Unreadable {
                        path: shown.into(),
                        error,
                    });
                    continue;
                }
            };
            found.extend(self.found(open_path, shown, probes, &cause, target));
        }
        for (open_path, shown) in libraries {
            let new = std::fs::metadata(&open_path).is_ok_and(|m| seen.insert(m.ino()));
            if let (true, Ok(probes)) = (new, read_file_probes(&open_path)) {
                found.extend(self.found(open_path, shown, probes, &cause, target));
            }
        }
        found
    }

    /// An object found after the start, if it has sites the globs match:
    /// it joins [`Session::objects`].
    fn found(
        &mut self,
        open_path: PathBuf,
        shown: String,
        probes: ElfProbes,
        cause: &Cause,
        target: Target,
    ) -> Option<NewObject> {
        self.notices.extend(skipped(Path::new(&shown), &probes));
        let sites: Vec<Site> = probes.sites.into_iter().filter(|s| self.wants(s)).collect();
        let sites = self.hold_back(&open_path, Path::new(&shown), sites);
        if sites.is_empty() {
            return None;
        }
        self.machines.push(probes.machine);
        self.objects.push((open_path.clone(), sites.clone()));
        Some(NewObject {
            open_path,
            mapped: shown,
            sites,
            cause: cause.clone(),
            target,
        })
    }

    /// Lets a process stopped at an exec go on: call it once the new
    /// objects [`Session::new_objects`] returned are attached.
    pub fn resume(&mut self) {
        self.exec.resume(child_of(&mut self.kind));
    }

    /// A new file at the path of a binary whose every process is traced
    /// (looked at every 100 ms): read, kept open and returned, unless
    /// seen before.
    fn replaced_binary(&mut self) -> Vec<NewObject> {
        let Kind::Binary { watched, .. } = &self.kind else {
            return vec![];
        };
        if Instant::now() < self.next_maps_poll {
            return vec![];
        }
        self.next_maps_poll = Instant::now() + MAPS_POLL;
        // Gone, or not complete yet: the next look.
        let Ok(file) = File::open(watched) else {
            return vec![];
        };
        let shown = watched.to_string_lossy().into_owned();
        match file.metadata() {
            Ok(meta) if meta.is_file() && self.seen_files.insert(meta.ino()) => {}
            _ => return vec![],
        }
        // This very inode, whatever the path leads to by the time the
        // kernel attaches.
        let open_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let probes = match read_file_probes(&open_path) {
            Ok(p) => p,
            Err(error) => {
                self.notices.push(Notice::Unreadable {
                    path: watched.clone(),
                    error,
                });
                return vec![];
            }
        };
        self.replacements.push(file);
        self.found(
            open_path,
            shown,
            probes,
            &Cause::Replaced,
            Target::AllProcesses,
        )
        .into_iter()
        .collect()
    }

    /// The inodes of the objects found so far: mapped files with these
    /// are not new.
    fn remember_files(&mut self) {
        let inodes: Vec<u64> = self
            .objects
            .iter()
            .filter_map(|(path, _)| std::fs::metadata(path).ok())
            .map(|m| m.ino())
            .collect();
        self.seen_files.extend(inodes);
    }
}

impl Drop for Session {
    /// A command spawned but never started is killed and reaped.
    fn drop(&mut self) {
        if let Kind::Command {
            child,
            started: false,
            ..
        } = &mut self.kind
        {
            if let Some(child) = child.take() {
                child.kill();
            }
        }
    }
}

/// The command of a session, once spawned.
fn child_of(kind: &mut Kind) -> Option<&mut PausedCommand> {
    match kind {
        Kind::Command { child, .. } => child.as_mut(),
        _ => None,
    }
}

fn skipped(path: &Path, probes: &ElfProbes) -> Vec<Notice> {
    probes
        .skipped
        .iter()
        .map(|note| Notice::Skipped {
            path: path.into(),
            note: note.clone(),
        })
        .collect()
}

/// The file to read and attach to: symlinks resolved (the kernel attaches
/// to the file itself).
fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.into())
}

mod refused;
#[cfg(test)]
mod tests;
