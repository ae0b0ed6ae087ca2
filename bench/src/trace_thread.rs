//! A `usdt trace` consumer for the bench: a [`Sampler`] on a thread of its
//! own that decodes every hit while the loop runs on the bench thread, as
//! `usdt trace` reads them while the traced program runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use usdt_trace::{AttachPoint, Sampler, Site, Target};

/// The sampler's thread; [`TraceThread::finish`] stops it.
pub struct TraceThread {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<(u64, u64), String>>,
}

impl TraceThread {
    /// Attaches a sampler (BPF with `bpf`, else perf events) at `point` to
    /// `sites` of `exe`, for the hits of this process, and returns once the
    /// uprobes are in place.
    pub fn start(
        exe: PathBuf,
        sites: Vec<Site>,
        point: AttachPoint,
        bpf: bool,
    ) -> Result<TraceThread, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, attached) = mpsc::channel();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut sampler = Sampler::new(point).bpf(bpf);
            let pid = std::process::id();
            if let Err(e) = sampler.attach(&exe, &sites, Target::Pid(pid)) {
                let _ = ready.send(Err(e.to_string()));
                return Err("not attached".to_string());
            }
            let _ = ready.send(Ok(()));
            let mut hits = 0u64;
            while !stopped.load(Ordering::Relaxed) {
                sampler
                    .poll(Duration::from_millis(20), |_| hits += 1)
                    .map_err(|e| e.to_string())?;
            }
            sampler.drain(|_| hits += 1);
            Ok((hits, sampler.lost()))
        });
        match attached.recv() {
            Ok(Ok(())) => Ok(TraceThread { stop, thread }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err("the sampler's thread ended".into()),
        }
    }

    /// Stops the sampler after it read what the rings hold, and detaches:
    /// the hits it decoded and those the rings lost.
    pub fn finish(self) -> Result<(u64, u64), String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the sampler's thread panicked".to_string())?
    }
}
