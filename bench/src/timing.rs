//! Timing: every row is measured the same way, whatever runs its loop.
//!
//! A batch is one call of the row's loop with `n` iterations, timed around the
//! call. `n` is first doubled until a batch takes `BATCH`, which also warms
//! the site up (the kernel optimizes a uprobed nop5 on its first hit). A run
//! repeats batches until it has lasted the run time; its rate is iterations
//! over the sum of the batch times. A row is the mean and standard deviation
//! of its runs' rates. The runs of all rows are interleaved (main.rs), so
//! that other work on the machine weighs on every row alike.

use std::time::Duration;

/// How long a row runs, and how often.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Timed runs per row.
    pub runs: usize,
    /// Least duration of a run.
    pub run_time: Duration,
}

impl Plan {
    /// The README's numbers: 5 runs of at least 1 s.
    pub const FULL: Plan = Plan {
        runs: 5,
        run_time: Duration::from_secs(1),
    };
    /// `--quick`: one run of 0.3 s.
    pub const QUICK: Plan = Plan {
        runs: 1,
        run_time: Duration::from_millis(300),
    };
}

/// Target duration of one batch.
const BATCH: Duration = Duration::from_millis(20);

/// Runs a row's loop `n` times and says how long that took.
pub trait Loop {
    /// One batch.
    fn batch(&mut self, n: u64) -> Result<Duration, String>;
}

/// A loop of this process.
pub struct Local(pub fn(u64));

impl Loop for Local {
    fn batch(&mut self, n: u64) -> Result<Duration, String> {
        let start = std::time::Instant::now();
        (self.0)(std::hint::black_box(n));
        Ok(start.elapsed())
    }
}

/// What a row measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Million iterations per second, per run.
    pub rates: Vec<f64>,
}

impl Measured {
    /// Mean rate, M/s.
    pub fn mean(&self) -> f64 {
        self.rates.iter().sum::<f64>() / self.rates.len().max(1) as f64
    }

    /// Sample standard deviation of the rates, M/s (0 for a single run).
    pub fn stddev(&self) -> f64 {
        if self.rates.len() < 2 {
            return 0.0;
        }
        let mean = self.mean();
        let sum: f64 = self.rates.iter().map(|r| (r - mean).powi(2)).sum();
        (sum / (self.rates.len() - 1) as f64).sqrt()
    }
}

/// Doubles `n` from 1024 until a batch takes `BATCH`; returns `n` and the
/// iterations run meanwhile (which warmed the site up).
pub fn calibrate(l: &mut dyn Loop) -> Result<(u64, u64), String> {
    let (mut n, mut iterations) = (1024, 0);
    loop {
        let t = l.batch(n)?;
        iterations += n;
        if t >= BATCH || n >= 1 << 40 {
            return Ok((n, iterations));
        }
        n *= 2;
    }
}

/// One run: batches of `n` until `run_time` has passed; returns the rate in
/// M/s and the iterations run.
pub fn run_once(l: &mut dyn Loop, n: u64, run_time: Duration) -> Result<(f64, u64), String> {
    let (mut iterations, mut time) = (0u64, Duration::ZERO);
    while time < run_time {
        time += l.batch(n)?;
        iterations += n;
    }
    Ok((iterations as f64 / time.as_secs_f64() / 1e6, iterations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_stddev() {
        let m = Measured {
            rates: vec![1.0, 2.0, 3.0],
        };
        assert_eq!(m.mean(), 2.0);
        assert_eq!(m.stddev(), 1.0);
    }
}
