//! Recording the probe hits of a command, for tests: "this probe fired with
//! these arguments".

use std::ffi::OsString;
use std::path::PathBuf;

use crate::command::ExitStatus;
use crate::engine::AttachPoint;
use crate::run::{Attacher, Ended, Run, SessionSampler, TICK};
use crate::sample::{Hit, Sampler, Value};
use crate::session::{NewObject, Session};
use crate::Error;

/// Runs a command with sampling uprobes on its probes (and those of the
/// shared libraries it links, and of those it loads later) from its first
/// instruction to its exit: a [`Run`] of the command.
///
/// ```no_run
/// use usdt_trace::Recorder;
///
/// let run = Recorder::new("target/debug/examples/traced")
///     .args(["2", "0", "0"])
///     .probes("traced:eager")
///     .run()?;
/// run.assert_fired("traced:eager", &[1u64.into(), (-1i32).into()]);
/// assert_eq!(run.of("traced:eager").count(), 2);
/// # Ok::<(), usdt_trace::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Recorder {
    program: PathBuf,
    args: Vec<OsString>,
    globs: Vec<String>,
    strings: Vec<(String, usize)>,
    point: AttachPoint,
    kernel_fetch: bool,
    force_sites: bool,
}

/// What a recorded command did.
#[derive(Clone, Debug)]
pub struct Recording {
    /// Every hit, in time order.
    pub hits: Vec<Hit>,
    /// Samples lost because a ring buffer was full (0 unless the command
    /// fired faster than they could be read).
    pub lost: u64,
    /// How the command ended.
    pub status: ExitStatus,
}

impl Recorder {
    /// A recorder for `program` (a path, or a name looked up in `PATH`).
    pub fn new(program: impl Into<PathBuf>) -> Recorder {
        Recorder {
            program: program.into(),
            args: vec![],
            globs: vec![],
            strings: vec![],
            point: AttachPoint::Auto,
            kernel_fetch: true,
            force_sites: false,
        }
    }

    /// The command's arguments.
    pub fn args<I, S>(mut self, args: I) -> Recorder
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Records only probes matching `glob` (`provider:name` with `*`, `?`);
    /// may be given several times. None means every probe.
    pub fn probes(mut self, glob: &str) -> Recorder {
        self.globs.push(glob.into());
        self
    }

    /// Reads argument `index` of the probes matching `glob` as a string.
    pub fn string_arg(mut self, glob: &str, index: usize) -> Recorder {
        self.strings.push((glob.into(), index));
        self
    }

    /// Where on each site the uprobe goes.
    pub fn attach_point(mut self, point: AttachPoint) -> Recorder {
        self.point = point;
        self
    }

    /// Whether the kernel reads memory operands and strings at the hit (see
    /// [`Sampler::kernel_fetch`]).
    pub fn kernel_fetch(mut self, on: bool) -> Recorder {
        self.kernel_fetch = on;
        self
    }

    /// Attaches the sites their check refuses too (see
    /// [`Session::force_sites`]).
    pub fn force_sites(mut self, force: bool) -> Recorder {
        self.force_sites = force;
        self
    }

    /// Runs the command to its end (its output passes through) and returns
    /// its hits.
    pub fn run(&self) -> Result<Recording, Error> {
        let mut argv = vec![self.program.clone().into_os_string()];
        argv.extend(self.args.iter().cloned());
        let session = Session::command(&argv)?
            .globs(&self.globs)
            .force_sites(self.force_sites)
            .follow_exec();
        let mut sampler = Sampler::new(self.point)
            .per_cpu(true)
            .kernel_fetch(self.kernel_fetch);
        for (glob, index) in &self.strings {
            sampler = sampler.string_arg(glob, *index);
        }
        let mut attacher = Recorded {
            recorder: self,
            sampler: SessionSampler::new(sampler),
            hits: vec![],
        };
        // Killed with the run unless started.
        let mut run = Run::new(session);
        let ended = run.run(&mut attacher)?;
        let Recorded {
            mut sampler,
            mut hits,
            ..
        } = attacher;
        let sampler = sampler.sampler();
        if sampler.site_count() == 0 {
            // A launcher that executed no program with the probes.
            return Err(no_match(self, run.session()));
        }
        sampler.drain(|h| hits.push(h));
        let status = match ended {
            Ended::Exited(status) => status,
            _ => run.wait()?.unwrap_or(ExitStatus::Code(0)),
        };
        Ok(Recording {
            hits,
            lost: sampler.lost(),
            status,
        })
    }
}

/// What a [`Recorder`] attaches and where the hits go.
struct Recorded<'r> {
    recorder: &'r Recorder,
    sampler: SessionSampler,
    hits: Vec<Hit>,
}

impl Attacher for Recorded<'_> {
    type Error = Error;

    fn library_error(e: &Error) -> Option<&Error> {
        Some(e)
    }

    /// Every site the globs match; an error if there is none, unless the
    /// program is a launcher (whose probes are those of the programs it
    /// executes).
    fn attach(&mut self, session: &mut Session) -> Result<(), Error> {
        self.sampler.attach(session)?;
        if self.sampler.sampler().site_count() > 0 || session.launcher().is_some() {
            return Ok(());
        }
        Err(no_match(self.recorder, session))
    }

    fn attach_threads(&mut self, session: &mut Session) -> Result<(), Error> {
        self.sampler.attach_threads(session)
    }

    fn attach_object(&mut self, object: &NewObject, session: &mut Session) -> Result<(), Error> {
        self.sampler.attach_object(object, session)
    }

    fn tick(&mut self) -> Result<bool, Error> {
        let hits = &mut self.hits;
        self.sampler.sampler().poll(TICK, |h| hits.push(h))?;
        Ok(true)
    }
}

/// No probe of the recorder's command matches its globs.
fn no_match(recorder: &Recorder, session: &Session) -> Error {
    let program = session.objects().first().map(|(p, _)| p.clone());
    Error::NoMatch {
        program: program.unwrap_or_else(|| recorder.program.clone()),
        globs: recorder.globs.join(" "),
    }
}

impl Recording {
    /// The hits of `probe` (`provider:name`), in time order.
    pub fn of<'a>(&'a self, probe: &'a str) -> impl Iterator<Item = &'a Hit> + 'a {
        self.hits.iter().filter(move |h| h.is(probe))
    }

    /// The arguments of every hit of `probe`, in time order.
    pub fn args_of(&self, probe: &str) -> Vec<Vec<Value>> {
        self.of(probe).map(|h| h.args.clone()).collect()
    }

    /// Whether `probe` fired at least once with exactly `args`.
    pub fn fired(&self, probe: &str, args: &[Value]) -> bool {
        self.of(probe).any(|h| h.args == args)
    }

    /// Panics, listing the probe's hits, unless `probe` fired at least once
    /// with exactly `args`.
    #[track_caller]
    pub fn assert_fired(&self, probe: &str, args: &[Value]) {
        if self.fired(probe, args) {
            return;
        }
        let want = Hit {
            time_ns: 0,
            pid: 0,
            tid: 0,
            provider: "".into(),
            name: "".into(),
            args: args.to_vec(),
            stack: None,
        };
        let seen: Vec<String> = self.of(probe).map(|h| format!("  {h}")).collect();
        panic!(
            "{probe} did not fire with {want}; its {} hits were:\n{}",
            seen.len(),
            seen.join("\n")
        );
    }
}
