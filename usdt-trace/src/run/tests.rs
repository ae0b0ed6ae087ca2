//! The loop on real commands, with an attacher that attaches nothing and
//! writes down what the run asked of it, in order.

use std::ffi::OsString;

use super::*;

/// Each step the run took, in order.
#[derive(Debug, Default)]
struct Steps {
    said: Vec<String>,
    /// `tick` answers `Ok(false)` from this tick on.
    enough_after: Option<usize>,
    ticks: usize,
    /// What `attach` returns.
    fail_attach: Option<fn() -> Error>,
}

impl Attacher for Steps {
    type Error = Error;

    fn library_error(e: &Error) -> Option<&Error> {
        Some(e)
    }

    fn attach(&mut self, session: &mut Session) -> Result<(), Error> {
        let started = session
            .child()
            .is_some_and(|c| c.try_wait().ok() == Some(None));
        self.said.push(format!("attach spawned={started}"));
        match self.fail_attach {
            Some(error) => Err(error()),
            None => Ok(()),
        }
    }

    fn attach_object(&mut self, _: &NewObject, _: &mut Session) -> Result<(), Error> {
        Ok(())
    }

    fn ready(&mut self, _: &Session) {
        self.said.push("ready".into());
    }

    fn tick(&mut self) -> Result<bool, Error> {
        self.ticks += 1;
        std::thread::sleep(TICK);
        Ok(self.enough_after.is_none_or(|n| self.ticks < n))
    }
}

fn command(argv: &[&str]) -> Session {
    let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
    Session::command(&argv).unwrap()
}

#[test]
fn a_command_is_attached_paused_then_run_to_its_exit_status() {
    let mut steps = Steps::default();
    let mut run = Run::new(command(&["/bin/sh", "-c", "exit 3"]));
    assert_eq!(
        run.run(&mut steps).unwrap(),
        Ended::Exited(ExitStatus::Code(3))
    );
    assert_eq!(steps.said, ["attach spawned=true", "ready"]);
    // Reaped once: nothing left to wait for.
    assert_eq!(run.wait().unwrap(), None);
}

#[test]
fn the_duration_ends_the_run_and_the_command_runs_on() {
    let mut steps = Steps::default();
    let mut run =
        Run::new(command(&["/bin/sleep", "30"])).duration(Some(Duration::from_millis(100)));
    let began = Instant::now();
    assert_eq!(run.run(&mut steps).unwrap(), Ended::TimeUp);
    assert!(began.elapsed() < Duration::from_secs(10));
    assert!(steps.ticks >= 2, "{steps:?}");
    run.pass_on(libc::SIGTERM);
    assert_eq!(run.wait().unwrap(), Some(ExitStatus::Signal(libc::SIGTERM)));
}

#[test]
fn a_caller_with_enough_ends_the_run_and_waits_for_the_command() {
    let mut steps = Steps {
        enough_after: Some(3),
        ..Steps::default()
    };
    let mut run = Run::new(command(&["/bin/sh", "-c", "sleep 0.3; exit 4"]));
    assert_eq!(run.run(&mut steps).unwrap(), Ended::Enough);
    assert_eq!(steps.ticks, 3);
    assert_eq!(run.wait().unwrap(), Some(ExitStatus::Code(4)));
}

fn always() -> bool {
    true
}

#[test]
fn a_cancelled_session_never_starts_the_command() {
    let mut steps = Steps::default();
    let mut run = Run::new(command(&["/bin/sh", "-c", "exit 3"]).cancel_when(always));
    assert_eq!(run.run(&mut steps).unwrap(), Ended::Cancelled);
    assert_eq!(steps.said, ["attach spawned=true"]);
    let pid = match run.session().target() {
        Target::Pid(pid) => pid,
        Target::AllProcesses => unreachable!(),
    };
    assert!(process_alive(pid));
    // Dropped: killed and reaped.
    drop(run);
    assert!(!process_alive(pid));
}

#[test]
fn a_process_gone_while_cancelled_is_the_cancel_not_a_failure() {
    let gone = || Error::NoProcess(1);
    let mut steps = Steps {
        fail_attach: Some(gone),
        ..Steps::default()
    };
    let mut run = Run::new(command(&["/bin/true"]).cancel_when(always));
    assert_eq!(run.run(&mut steps).unwrap(), Ended::Cancelled);
    // Not cancelled: the failure it is.
    let mut steps = Steps {
        fail_attach: Some(gone),
        ..Steps::default()
    };
    let mut run = Run::new(command(&["/bin/true"]));
    assert!(matches!(run.run(&mut steps), Err(Error::NoProcess(1))));
    assert!(steps.said.iter().all(|s| s != "ready"));
}

#[test]
fn a_process_is_followed_until_it_ends() {
    let mut child = std::process::Command::new("/bin/sleep")
        .arg("0.3")
        .spawn()
        .unwrap();
    let mut steps = Steps::default();
    let mut run = Run::new(Session::process(child.id()).unwrap());
    // A zombie is no process: ended before it is reaped.
    assert_eq!(run.run(&mut steps).unwrap(), Ended::ProcessEnded);
    child.wait().unwrap();
    assert_eq!(run.wait().unwrap(), None);
    assert_eq!(steps.said, ["attach spawned=false", "ready"]);
}
