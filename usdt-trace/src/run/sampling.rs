//! A [`Sampler`] attached to what a [`Session`] traces: the attaching
//! that `usdt trace` and [`Recorder`](crate::Recorder) share.

use std::path::Path;

use crate::elf::note::Site;
use crate::engine::Target;
use crate::sample::Sampler;
use crate::session::{NewObject, Session};
use crate::Error;

/// A [`Sampler`] attached to a session's files and threads.
///
/// With BPF, one link per file samples every thread of the process (or
/// every process of a file). A perf event samples only the thread it was
/// opened for: each site is then attached for each thread of the process,
/// and for each thread found later ([`SessionSampler::attach_threads`]);
/// its hits before that are not seen. An automatic BPF attach that the
/// kernel turns out not to support falls back on perf at the first file,
/// and the sampler goes on per thread.
#[derive(Debug)]
pub struct SessionSampler {
    sampler: Sampler,
    /// The process (0: every process of a file).
    pid: u32,
    /// Whether each thread gets its own uprobes (perf events for a
    /// process).
    per_thread: bool,
}

impl SessionSampler {
    /// Attaches with `sampler`.
    pub fn new(sampler: Sampler) -> SessionSampler {
        SessionSampler {
            sampler,
            pid: 0,
            per_thread: false,
        }
    }

    /// The sampler: to poll, drain and detach.
    pub fn sampler(&mut self) -> &mut Sampler {
        &mut self.sampler
    }

    /// Attaches the sites the session's globs match: each thread's with
    /// perf events (a command not started has one), each file's with BPF;
    /// stops between two sites once the session is cancelled.
    pub fn attach(&mut self, session: &mut Session) -> Result<(), Error> {
        self.pid = match session.target() {
            Target::Pid(pid) => pid,
            Target::AllProcesses => 0,
        };
        self.per_thread = !self.sampler.uses_bpf() && self.pid != 0;
        if !self.per_thread {
            let target = session.target();
            for (path, sites) in session.matched() {
                if session.cancelled() {
                    return Ok(());
                }
                self.attach_file(&path, &sites, target)?;
                if self.per_thread {
                    // Auto's BPF proved unsupported: perf, per thread.
                    break;
                }
            }
            if !self.per_thread {
                return Ok(());
            }
        }
        let tids: Vec<u32> = match session.child() {
            // Not started: its one thread, the session's first.
            Some(_) => vec![self.pid],
            None => session.new_threads(),
        };
        self.attach_tids(session, &tids)
    }

    /// With perf events, attaches the threads the process started since
    /// the last look. With stacks, reads the process's maps again too (a
    /// process stopped at an exec has its new program mapped).
    pub fn attach_threads(&mut self, session: &mut Session) -> Result<(), Error> {
        self.sampler.refresh_stacks();
        if !self.per_thread {
            return Ok(());
        }
        let tids = session.new_threads();
        self.attach_tids(session, &tids)
    }

    /// Attaches the sites of an object found after the start: for each
    /// thread of the process with perf events (for a process a launcher
    /// forked, its first thread).
    pub fn attach_object(&mut self, object: &NewObject, session: &Session) -> Result<(), Error> {
        let sites: Vec<&Site> = object.sites.iter().collect();
        if !self.per_thread || object.target != session.target() {
            return self.attach_file(&object.open_path, &sites, object.target);
        }
        for tid in session.threads() {
            match self.attach_sites(&object.open_path, &sites, *tid, session) {
                Err(e) if self.thread_ended(&e, *tid) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Attaches `sites` of the file at `path` for `target` (with BPF, every
    /// thread); notes when Auto fell back on perf.
    fn attach_file(&mut self, path: &Path, sites: &[&Site], target: Target) -> Result<(), Error> {
        self.sampler.attach(path, sites.iter().copied(), target)?;
        self.per_thread = !self.sampler.uses_bpf() && self.pid != 0;
        Ok(())
    }

    /// Attaches every matched site of every object for each of `tids`.
    fn attach_tids(&mut self, session: &Session, tids: &[u32]) -> Result<(), Error> {
        for &tid in tids {
            for (path, sites) in session.matched() {
                match self.attach_sites(&path, &sites, tid, session) {
                    Err(e) if self.thread_ended(&e, tid) => break,
                    other => other?,
                }
            }
        }
        Ok(())
    }

    /// Whether `e` says that thread `tid`, not the process's first, ended
    /// meanwhile (the process's end is the run's to see).
    fn thread_ended(&self, e: &Error, tid: u32) -> bool {
        e.no_process().is_some() && tid != self.pid
    }

    /// Attaches `sites` of the file at `path` for thread `tid`, one site at
    /// a time, until the session is cancelled.
    fn attach_sites(
        &mut self,
        path: &Path,
        sites: &[&Site],
        tid: u32,
        session: &Session,
    ) -> Result<(), Error> {
        for site in sites {
            if session.cancelled() {
                return Ok(());
            }
            self.sampler.attach(path, [*site], Target::Pid(tid))?;
        }
        Ok(())
    }
}
