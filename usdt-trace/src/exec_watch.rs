//! Whether a session's process executed a program since the last look, and
//! whether it is stopped there: the state a [`Session`](crate::Session)
//! keeps to follow execs (the mechanism is [`follow`](crate::follow)'s).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;

use crate::command::PausedCommand;
use crate::follow::Tracee;

/// Where a session stands with the execs of its process.
#[derive(Debug, Default)]
pub(crate) struct ExecWatch {
    /// Stop the process at each exec.
    follow: bool,
    /// And the processes it forks, at theirs (a command's only).
    forks: bool,
    /// The trace of a process given by pid (a command's is its own).
    tracee: Option<Tracee>,
    /// Why the process cannot be stopped at exec.
    not_followed: Option<String>,
    /// The inode `/proc/PID/exe` led to at the last look.
    exe_inode: Option<u64>,
    /// The last look returned with the process held at an exec.
    reported_hold: bool,
    /// The inodes of the programs the process was seen running.
    programs: BTreeSet<u64>,
}

impl ExecWatch {
    /// Stop the process at each exec from now on; with `forks`, a
    /// command's forked processes at theirs too.
    pub(crate) fn follow(&mut self, forks: bool) {
        self.follow = true;
        self.forks = forks;
    }

    /// Remembers the program process `pid` runs now (before its maps are
    /// read: an exec meanwhile is then seen); returns its inode.
    pub(crate) fn start_at(&mut self, pid: u32) -> Option<u64> {
        self.exe_inode = exe_inode(pid);
        self.exe_inode
    }

    /// Whether the process was seen running a program other than the one
    /// whose inode is `program`.
    pub(crate) fn ran_other_than(&self, program: Option<u64>) -> bool {
        self.programs.iter().any(|i| Some(*i) != program)
    }

    /// Traces a command just spawned, when following.
    pub(crate) fn spawned(&mut self, child: &mut PausedCommand) {
        if self.follow {
            if let Err(e) = child.follow_exec(self.forks) {
                self.not_followed = Some(format!("it could not be traced: {e}"));
            }
        }
    }

    /// Lets a process stopped at an exec go on.
    pub(crate) fn resume(&mut self, child: Option<&mut PausedCommand>) {
        self.reported_hold = false;
        if let Some(tracee) = self.tracee_of(child) {
            tracee.resume();
        }
    }

    fn tracee_of<'a>(&'a mut self, child: Option<&'a mut PausedCommand>) -> Option<&'a mut Tracee> {
        match child {
            Some(c) => c.tracee(),
            None => self.tracee.as_mut(),
        }
    }

    /// A process the command forked, stopped at an exec until
    /// [`ExecWatch::resume`] (or the next look): its pid.
    pub(crate) fn held_fork(&mut self, child: Option<&mut PausedCommand>) -> Option<u32> {
        let pid = self.tracee_of(child)?.held_fork()?;
        self.reported_hold = true;
        self.programs.extend(exe_inode(pid));
        Some(pid)
    }

    /// Whether process `pid` (the command `child`, if it is one) executed
    /// a program since the last look: `Some(None)` when it is stopped
    /// there (nothing missed), `Some(Some(why))` when hits before the
    /// attach may have been missed. A process given by pid is seized at
    /// the first look (after the caller attached: a traced process waits
    /// at each signal for the next look). A process held at the last look
    /// goes on first.
    pub(crate) fn seen(
        &mut self,
        pid: u32,
        mut child: Option<&mut PausedCommand>,
    ) -> Option<Option<String>> {
        if std::mem::take(&mut self.reported_hold) {
            // The caller did not: its last round is over.
            self.resume(child.as_deref_mut());
        }
        if self.follow && self.tracee.is_none() && child.is_none() {
            match Tracee::seize(pid, false) {
                Ok(t) => self.tracee = Some(t),
                Err(e) if self.not_followed.is_none() => {
                    self.not_followed = Some(format!("it could not be traced: {e}"));
                }
                Err(_) => {}
            }
        }
        if let Some(tracee) = self.tracee.as_mut() {
            // Not a child: its end is its parent's to see.
            let _ = tracee.wait(false);
        }
        let (stopped, lost, traced) = match self.tracee_of(child.as_deref_mut()) {
            Some(t) => (t.take_exec() && t.held(), !t.seized(), true),
            None => (false, false, false),
        };
        self.reported_hold = stopped;
        let inode = exe_inode(pid);
        let changed = inode.is_some() && inode != self.exe_inode;
        if let Some(i) = inode {
            self.exe_inode = inode;
            self.programs.insert(i);
        }
        if self.follow && (lost || (changed && !stopped)) {
            // The kernel dropped the trace (an exec by another thread than
            // the one traced): trace the process again.
            match child {
                Some(c) => {
                    let _ = c.follow_exec(self.forks);
                }
                None => self.tracee = None, // seized again at the next look
            }
        }
        if !changed && !stopped {
            return None;
        }
        Some(match (stopped, &self.not_followed) {
            (true, _) => None,
            (false, Some(why)) => Some(why.clone()),
            (false, None) if !self.follow => Some("execs are not followed".into()),
            (false, None) if traced => Some(
                "a thread other than the main one executed it, and only the main thread \
                 is stopped at exec"
                    .into(),
            ),
            (false, None) => Some("it executed before it was traced".into()),
        })
    }
}

/// The inode `/proc/PID/exe` leads to (`None` for a process gone or a
/// zombie).
fn exe_inode(pid: u32) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/exe"))
        .ok()
        .map(|m| m.ino())
}
