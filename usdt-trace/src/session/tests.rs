//! The session's own tests.
use super::*;

#[test]
fn a_command_is_found_with_its_objects_and_never_left_paused() {
    let argv = [OsString::from("true")];
    let mut session = Session::command(&argv).unwrap();
    assert!(!session.objects().is_empty());
    assert_eq!(session.machines().len(), session.objects().len());
    let pid = session.spawn().unwrap();
    assert_eq!(session.target(), Target::Pid(pid));
    assert_eq!(session.spawn().unwrap(), pid, "spawned once");
    drop(session);
    // Killed and reaped: no such process any more.
    assert!(!crate::process_alive(pid));
}

/// `sh -c SCRIPT`, its execs followed, looked at until it ends (held at
/// each exec until the next look or `resume`): how it ended, and the
/// session.
fn polled(script: &str) -> (crate::ExitStatus, Session) {
    let argv = ["sh", "-c", script].map(OsString::from);
    let mut session = Session::command(&argv).unwrap().follow_exec();
    session.spawn().unwrap();
    session.start().unwrap();
    loop {
        if let Some(s) = session.child().unwrap().try_wait().unwrap() {
            return (s, session);
        }
        let _ = session.new_objects();
        session.resume();
    }
}

#[test]
fn a_followed_command_is_let_go_at_each_exec() {
    use crate::ExitStatus;
    let argv = ["sh", "-c", "exec sh -c 'exit 3'"].map(OsString::from);
    assert_eq!(polled("exec sh -c 'exit 3'").0, ExitStatus::Code(3));
    // Waited for: let go at each stop.
    let mut session = Session::command(&argv).unwrap().follow_exec();
    session.spawn().unwrap();
    session.start().unwrap();
    assert_eq!(
        session.child().unwrap().wait().unwrap(),
        ExitStatus::Code(3)
    );
}

#[test]
fn a_followed_command_gets_its_signals_while_the_session_looks_away() {
    use crate::ExitStatus;
    let script = "trap 'exit 4' USR1; sleep 0.5; kill -USR1 $$; sleep 10";
    let argv = ["sh", "-c", script].map(OsString::from);
    let mut session = Session::command(&argv).unwrap().follow_exec();
    let pid = session.spawn().unwrap();
    session.start().unwrap();
    // Its exec waits for the session to look.
    for _ in 0..10 {
        assert_eq!(session.child().unwrap().try_wait().unwrap(), None);
        let _ = session.new_objects();
        session.resume();
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its signal stops are let go by the tracer's thread, with no
    // new_objects or try_wait meanwhile: it ends by itself.
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!crate::process_alive(pid), "still stopped");
    assert_eq!(
        session.child().unwrap().wait().unwrap(),
        ExitStatus::Code(4)
    );
}

#[test]
fn what_cannot_be_found_is_an_error_value() {
    let argv = [OsString::from("no-such-program-usdt")];
    assert!(matches!(
        Session::command(&argv),
        Err(Error::ProgramNotFound { .. })
    ));
    assert!(matches!(
        Session::binary(Path::new("/proc/self/status")),
        Err(Error::File { .. })
    ));
    assert!(Session::command(&[]).is_err());
}

#[test]
fn every_process_of_a_binary_is_the_target() {
    let session = Session::binary(Path::new("/proc/self/exe")).unwrap();
    assert_eq!(session.target(), Target::AllProcesses);
    assert!(session.binary_path().is_some());
}

#[test]
fn a_command_without_probes_of_its_own_is_a_launcher() {
    let command = |argv: &[&str]| {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        Session::command(&argv).unwrap()
    };
    let dir = std::env::temp_dir().join(format!("usdt-launcher-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("script");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let script = command(&[script.to_str().unwrap()]);
    assert_eq!(script.launcher(), Some(Launcher::Script));
    assert!(script.objects().is_empty());
    let env = command(&["env"]);
    assert_eq!(env.launcher(), Some(Launcher::Program));
    assert!(!env.objects().is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_launcher_is_followed_into_the_program_its_fork_executes() {
    use crate::ExitStatus;
    let run = |script: &str| {
        let (status, session) = polled(script);
        (status, session.ran_another_program())
    };
    // The shell forks `/bin/true`, which is held at its exec, then exits.
    assert_eq!(run("/bin/true; exit 5"), (ExitStatus::Code(5), true));
    // A shell that runs nothing else.
    assert_eq!(run("exit 6"), (ExitStatus::Code(6), false));
}
