//! The bench's children (bpftrace, `usdt serve`, its helpers): their output
//! read with a deadline, and their end brought about within one. A child
//! that prints nothing, or ignores a signal, costs its row an error and
//! never stalls the bench.

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a child may take to print its next line, by default: its
/// start (bpftrace compiling and attaching a thousand probes), or one of
/// the bench's timed batches.
pub const LINE: Duration = Duration::from_secs(120);

/// A child's output stream, read line by line on a thread of its own,
/// to its end (what comes once this is dropped is read and dropped).
pub struct Lines {
    rx: Receiver<std::io::Result<String>>,
    /// What the child is, for errors.
    what: String,
}

impl Lines {
    /// Reads `stream` (a child's stdout or stderr) until its end.
    pub fn of(stream: impl Read + Send + 'static, what: &str) -> Lines {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    // Read to the end even once nobody listens, so that
                    // the child never blocks on a full pipe.
                    Ok(_) => drop(tx.send(Ok(line))),
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        Lines {
            rx,
            what: what.to_string(),
        }
    }

    /// Its next line (with its newline), within `within`.
    pub fn next(&self, within: Duration) -> Result<String, String> {
        match self.rx.recv_timeout(within) {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => Err(format!("reading from {}: {e}", self.what)),
            Err(RecvTimeoutError::Disconnected) => Err(format!("{} exited", self.what)),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "{} printed nothing within {} s",
                self.what,
                within.as_secs()
            )),
        }
    }

    /// Its first line that `wanted` accepts, within `within` in all.
    pub fn until(&self, within: Duration, wanted: impl Fn(&str) -> bool) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.next(left).map_err(|e| match left.is_zero() {
                true => format!(
                    "{} did not get ready within {} s",
                    self.what,
                    within.as_secs()
                ),
                false => e,
            })?;
            if wanted(&line) {
                return Ok(line);
            }
        }
    }

    /// The rest of its output, up to its end or `within`, whichever
    /// comes first.
    pub fn rest(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut text = String::new();
        while let Ok(Ok(line)) = self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            text += &line;
        }
        text
    }
}

/// How long a tracer may take to end once signalled: bpftrace detaches
/// every probe before it prints its maps, and each perf uprobe takes the
/// kernel an RCU grace period to remove (about 0.1 s here).
pub fn detach_time(probes: usize) -> Duration {
    Duration::from_secs(10) + Duration::from_millis(250) * probes as u32
}

/// Ends `child`: `signal`, sent again each second (one sent while a child
/// starts up may be missed), for at most `within`; then SIGKILL. Reaps it.
pub fn stop(child: &mut Child, signal: i32, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        // SAFETY: kill with our own child's pid and a signal has no memory
        // effects.
        unsafe { libc::kill(child.id() as i32, signal) };
        for _ in 0..10 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Ends `child` at once: SIGKILL, reaped.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn a_silent_child_costs_an_error_not_a_hang() {
        let mut child = Command::new("sleep")
            .arg("30")
            .stdout(Stdio::piped())
            .spawn()
            .expect("sleep runs");
        let lines = Lines::of(child.stdout.take().expect("piped"), "sleep");
        let t = Instant::now();
        let e = lines.next(Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("printed nothing"), "{e}");
        stop(&mut child, libc::SIGTERM, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(lines
            .next(Duration::from_secs(5))
            .unwrap_err()
            .contains("exited"));
    }

    #[test]
    fn a_child_that_ignores_the_signal_is_killed() {
        let mut child = Command::new("sh")
            .args(["-c", "trap '' INT; echo ready; sleep 60"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh runs");
        let lines = Lines::of(child.stdout.take().expect("piped"), "sh");
        let ready = lines.until(LINE, |l| l.starts_with("ready")).unwrap();
        assert_eq!(ready, "ready\n");
        let t = Instant::now();
        stop(&mut child, libc::SIGINT, Duration::from_secs(2));
        assert!(child.try_wait().unwrap().is_some());
        assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
    }
}
