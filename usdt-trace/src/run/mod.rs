//! Running a target under the tracer: the one loop that every user of a
//! [`Session`] runs ([`Recorder`](crate::Recorder), and each of the `usdt`
//! command's `count`, `trace`, `latency`, `hist`, `count --by` and
//! `serve`). What differs between them, how sites are attached and what is
//! done while waiting, is the caller's [`Attacher`].
//!
//! [`Run::run`]:
//! 1. spawns a command, paused before its program's first instruction
//!    (a process by pid, or every process of a file, is there already);
//! 2. attaches the sites the session's globs match ([`Attacher::attach`]);
//! 3. for a process, catches up with what it did meanwhile (threads
//!    started, files mapped, a program executed); says that every site is
//!    attached ([`Attacher::ready`]); lets the command run;
//! 4. follows the target: the threads it starts, the files it maps and
//!    the programs it executes later are attached as the session finds
//!    them ([`Attacher::attach_threads`], [`Attacher::attach_object`]; a
//!    process stopped at an exec goes on once they are), the caller's
//!    [`Attacher::tick`] waiting between two looks;
//! 5. ends when the session is cancelled ([`Session::cancel_when`], Ctrl-C
//!    for the command), the duration is over, the target ended or the
//!    caller has what it wants, and says which ([`Ended`]), with the
//!    command's exit status when it ended.
//!
//! A paused command is gone when a signal meant for the tracer reached it
//! too (Ctrl-C goes to the terminal's whole foreground group): an attach
//! that fails because of that, once the session is cancelled, is the
//! cancel, not a failure. Then, after the caller detached, a command that
//! is still running gets the signal passed on ([`Run::pass_on`]), or is
//! waited for ([`Run::wait`]) as it runs to its end untraced.

use std::time::{Duration, Instant};

use crate::command::ExitStatus;
use crate::engine::Target;
use crate::process::process_alive;
use crate::session::{NewObject, Notice, Session};
use crate::Error;

mod sampling;

pub use sampling::SessionSampler;

/// How long [`Attacher::tick`] waits by default between two looks at the
/// target.
pub const TICK: Duration = Duration::from_millis(20);

/// What a caller of [`Run::run`] does at each step: how it attaches, what
/// it says, and what it does while waiting.
pub trait Attacher {
    /// The error of the caller's steps: the library's, or the caller's own
    /// that may carry one ([`Attacher::library_error`]).
    type Error: From<Error>;

    /// The library's error in `e`, if it is one: the run looks in it for a
    /// process gone because of the signal that cancelled the session.
    fn library_error(e: &Self::Error) -> Option<&Error>;

    /// Attaches the sites the session's globs match
    /// ([`Session::matched`]), before a command starts or for a process
    /// as it is; either all of them or, on error, none.
    fn attach(&mut self, session: &mut Session) -> Result<(), Self::Error>;

    /// Attaches the threads started since the last look, for an engine
    /// that samples one thread per uprobe ([`Session::new_threads`]);
    /// nothing by default.
    fn attach_threads(&mut self, _session: &mut Session) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Attaches the sites of an object found after the start (its `sites`
    /// match the globs).
    fn attach_object(
        &mut self,
        object: &NewObject,
        session: &mut Session,
    ) -> Result<(), Self::Error>;

    /// What became of [`Attacher::attach_object`]: said, or passed on (an
    /// error ends the run). Passed on by default.
    fn attached(
        &mut self,
        _object: &NewObject,
        result: Result<(), Self::Error>,
    ) -> Result<(), Self::Error> {
        result
    }

    /// Something the session met and went on from; nothing by default.
    fn notice(&mut self, _notice: Notice) {}

    /// Every site found so far is attached: before a command starts, or
    /// once a process was caught up with. Nothing by default.
    fn ready(&mut self, _session: &Session) {}

    /// Waits about [`TICK`] (reading hits, answering a request, printing
    /// counts at an interval); `Ok(false)` when the caller has what it
    /// wants ([`Ended::Enough`]). Sleeps by default.
    fn tick(&mut self) -> Result<bool, Self::Error> {
        std::thread::sleep(TICK);
        Ok(true)
    }
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// The command ended, so.
    Exited(ExitStatus),
    /// The process traced by pid ended.
    ProcessEnded,
    /// The session was cancelled ([`Session::cancel_when`]): a command not
    /// started yet is killed with the run; one started runs on
    /// ([`Run::pass_on`]).
    Cancelled,
    /// The duration ([`Run::duration`]) is over: a command runs on.
    TimeUp,
    /// The caller's [`Attacher::tick`] had what it wanted: a command runs
    /// on ([`Run::wait`]).
    Enough,
}

/// A session run from its start to its end; see the module documentation.
#[derive(Debug)]
pub struct Run {
    session: Session,
    duration: Option<Duration>,
}

impl Run {
    /// A run of `session` (a command not spawned yet, a process, or every
    /// process of a file).
    pub fn new(session: Session) -> Run {
        Run {
            session,
            duration: None,
        }
    }

    /// Ends the run this long after the target runs with every site
    /// attached (`None`: no end but the target's or a cancel). A duration
    /// past what the clock can count is no end at all.
    pub fn duration(mut self, duration: Option<Duration>) -> Run {
        self.duration = duration;
        self
    }

    /// The session run.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session run, to change.
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Runs the target with `attacher` from its start to its end; see the
    /// module documentation. An error before the start leaves a command
    /// unstarted (killed when the run is dropped); one after, running.
    pub fn run<A: Attacher>(&mut self, attacher: &mut A) -> Result<Ended, A::Error> {
        let command = self.session.exec_path().is_some();
        if command {
            self.session.spawn()?;
        }
        match attacher.attach(&mut self.session) {
            Err(e) if self.cancelled_by::<A>(&e) => return Ok(Ended::Cancelled),
            other => other?,
        }
        if self.session.cancelled() {
            return Ok(Ended::Cancelled);
        }
        if !command {
            // What the process did while it was attached to: threads it
            // started, files it mapped, a program it executed (stopped at
            // execs from now on).
            self.follow(attacher)?;
        }
        attacher.ready(&self.session);
        if command {
            self.session.start()?;
        }
        let end = self.duration.and_then(|d| Instant::now().checked_add(d));
        loop {
            if self.session.cancelled() {
                return Ok(Ended::Cancelled);
            }
            if end.is_some_and(|end| Instant::now() >= end) {
                return Ok(Ended::TimeUp);
            }
            if let Some(ended) = self.target_ended()? {
                return Ok(ended);
            }
            self.follow(attacher)?;
            if !attacher.tick()? {
                return Ok(Ended::Enough);
            }
        }
    }

    /// Whether the target ended: the command (reaped, with its status), or
    /// the process traced by pid.
    fn target_ended(&mut self) -> Result<Option<Ended>, Error> {
        if let Some(child) = self.session.child() {
            return Ok(child.try_wait()?.map(Ended::Exited));
        }
        Ok(match self.session.target() {
            Target::Pid(pid) if !process_alive(pid) => Some(Ended::ProcessEnded),
            _ => None,
        })
    }

    /// Attaches what the session found since the last look (threads, then
    /// objects), says what it met, and lets a process stopped at an exec
    /// go on.
    fn follow<A: Attacher>(&mut self, attacher: &mut A) -> Result<(), A::Error> {
        attacher.attach_threads(&mut self.session)?;
        let found = self.session.new_objects();
        for notice in self.session.take_notices() {
            attacher.notice(notice);
        }
        for object in found {
            let attached = attacher.attach_object(&object, &mut self.session);
            if self.session.cancelled() {
                break;
            }
            attacher.attached(&object, attached)?;
        }
        self.session.resume();
        Ok(())
    }

    /// Whether `e` is the cancel rather than a failure: the process is
    /// gone and the session cancelled (the signal reached the paused
    /// command too).
    fn cancelled_by<A: Attacher>(&self, e: &A::Error) -> bool {
        let gone = A::library_error(e).is_some_and(|e| e.no_process().is_some());
        gone && self.session.cancelled()
    }

    /// Passes `signal` on to the command, unless it ended (after
    /// [`Ended::Cancelled`], the signal that cancelled the session).
    pub fn pass_on(&mut self, signal: i32) {
        if let Some(child) = self.session.child() {
            child.signal(signal);
        }
    }

    /// Waits for the command to end, once the caller detached (it runs to
    /// its end untraced): its exit status, or `None` for a process or
    /// file, or a command already waited for.
    pub fn wait(&mut self) -> Result<Option<ExitStatus>, Error> {
        match self.session.child() {
            Some(child) => match child.wait() {
                Err(Error::AlreadyWaited) => Ok(None),
                other => other.map(Some),
            },
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
