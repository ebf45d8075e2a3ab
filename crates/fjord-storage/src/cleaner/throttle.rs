//! `log.cleaner.io.max.bytes.per.second`: the cleaner threads together read and write at most
//! that many bytes a second on average, sleeping whenever they run ahead.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The span the average is taken over: idle time earns a burst of at most this much I/O.
const WINDOW: Duration = Duration::from_secs(1);

/// Shared by all cleaner threads.
#[derive(Debug)]
pub struct Throttler {
    max_bytes_per_second: f64,
    window: Mutex<(Instant, f64)>,
}

impl Throttler {
    pub fn new(max_bytes_per_second: f64) -> Throttler {
        Throttler {
            max_bytes_per_second,
            window: Mutex::new((Instant::now(), 0.0)),
        }
    }

    fn unlimited(&self) -> bool {
        self.max_bytes_per_second.is_nan()
            || self.max_bytes_per_second <= 0.0
            || self.max_bytes_per_second >= f64::MAX / 2.0
    }

    /// Counts `bytes` of I/O and sleeps as long as it takes to bring the average back to the
    /// limit.
    pub fn maybe_throttle(&self, bytes: u64) {
        if self.unlimited() {
            return;
        }
        let sleep = {
            let mut window = fjord_common::lock(&self.window);
            if window.0.elapsed() > WINDOW {
                *window = (Instant::now(), 0.0);
            }
            window.1 += bytes as f64;
            let due = Duration::from_secs_f64(window.1 / self.max_bytes_per_second);
            due.saturating_sub(window.0.elapsed())
        };
        if !sleep.is_zero() {
            std::thread::sleep(sleep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_average_rate() {
        let throttler = Throttler::new(1_000_000.0);
        let started = Instant::now();
        // 300 kB at 1 MB/s: about 300 ms, whatever the chunking.
        for _ in 0..300 {
            throttler.maybe_throttle(1_000);
        }
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    }

    #[test]
    fn the_default_never_sleeps() {
        let throttler = Throttler::new(f64::MAX);
        let started = Instant::now();
        for _ in 0..1000 {
            throttler.maybe_throttle(1 << 30);
        }
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
