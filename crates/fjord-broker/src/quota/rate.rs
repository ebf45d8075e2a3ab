//! A rate over a sliding window of samples, as Kafka's metrics measure its quotas. Sans-IO: the
//! time is passed in.

use std::collections::VecDeque;

/// What a rate's sum is divided by: Kafka's two rate stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elapsed {
    /// The time since the oldest sample began, one sample's length at least (`SimpleRate`: the
    /// replication throttles).
    SinceOldest,
    /// The time since the oldest sample began, but never less than all samples but one (`Rate`:
    /// the client quotas): a client just starting is measured over the whole window, so a first
    /// burst is not taken for a high rate.
    WholeWindow,
}

/// A sum per second over `max_samples` samples of `window_ms` each.
#[derive(Debug)]
pub struct Rate {
    window_ms: i64,
    max_samples: usize,
    elapsed: Elapsed,
    /// (start ms, sum), oldest first.
    samples: VecDeque<(i64, f64)>,
}

impl Rate {
    pub fn new(window_ms: i64, max_samples: usize, elapsed: Elapsed) -> Self {
        assert!(window_ms > 0 && max_samples > 0);
        Rate {
            window_ms,
            max_samples,
            elapsed,
            samples: VecDeque::with_capacity(max_samples),
        }
    }

    /// Samples older than the whole window no longer count.
    fn purge(&mut self, now_ms: i64) {
        let expired_before = now_ms - self.window_ms * self.max_samples as i64;
        while self
            .samples
            .front()
            .is_some_and(|(start, _)| *start <= expired_before)
        {
            self.samples.pop_front();
        }
    }

    /// Adds `value` (negative to take back what was recorded) at `now_ms`.
    pub fn record(&mut self, value: f64, now_ms: i64) {
        self.purge(now_ms);
        match self.samples.back_mut() {
            Some((start, sum)) if now_ms < *start + self.window_ms => *sum += value,
            _ => {
                if self.samples.len() == self.max_samples {
                    self.samples.pop_front();
                }
                self.samples.push_back((now_ms, value));
            }
        }
    }

    /// The time the window's sum is divided by, in ms (at least 1).
    pub fn window_ms(&mut self, now_ms: i64) -> i64 {
        self.purge(now_ms);
        let oldest = self.samples.front().map_or(now_ms, |(start, _)| *start);
        let elapsed = now_ms - oldest;
        let least = match self.elapsed {
            Elapsed::SinceOldest => self.window_ms,
            Elapsed::WholeWindow => {
                // Kafka counts the samples it lacks as whole ones, and the part of the last.
                let full = elapsed / self.window_ms;
                let lacking = (self.max_samples as i64 - 1 - full).max(0);
                elapsed + lacking * self.window_ms
            }
        };
        elapsed.max(least).max(1)
    }

    pub fn per_second(&mut self, now_ms: i64) -> f64 {
        let window_ms = self.window_ms(now_ms);
        let total: f64 = self.samples.iter().map(|(_, sum)| sum).sum();
        total * 1000.0 / window_ms as f64
    }

    /// When the last sample began (None when every sample has expired).
    pub fn last_sample_ms(&self) -> Option<i64> {
        self.samples.back().map(|(start, _)| *start)
    }
}

/// Kafka's `TokenBucket` (KIP-599): full at first, a bucket of `burst` tokens refilled at
/// `rate` a second; a record takes tokens and may leave it below zero.
#[derive(Debug, Default)]
pub struct TokenBucket {
    /// None until first used: then full.
    tokens: Option<f64>,
    last_ms: i64,
}

impl TokenBucket {
    fn refill(&mut self, rate: f64, burst: f64, now_ms: i64) -> f64 {
        let tokens = match self.tokens {
            Some(tokens) => (tokens + rate * (now_ms - self.last_ms) as f64 / 1000.0).min(burst),
            None => burst,
        };
        self.tokens = Some(tokens);
        self.last_ms = now_ms;
        tokens
    }

    /// When it was last used (None before its first use).
    pub fn last_used_ms(&self) -> Option<i64> {
        self.tokens.map(|_| self.last_ms)
    }

    /// The tokens left at `now_ms`.
    pub fn tokens(&mut self, rate: f64, burst: f64, now_ms: i64) -> f64 {
        self.refill(rate, burst, now_ms)
    }

    /// Takes `value` tokens (gives them back when negative).
    pub fn record(&mut self, value: f64, rate: f64, burst: f64, now_ms: i64) {
        let tokens = self.refill(rate, burst, now_ms);
        self.tokens = Some((tokens - value).min(burst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_rate_is_the_sum_of_the_window_over_its_time() {
        let mut rate = Rate::new(1000, 11, Elapsed::SinceOldest);
        assert_eq!(rate.per_second(0), 0.0);
        // A first burst counts over one sample's length at least.
        rate.record(1_000_000.0, 0);
        assert_eq!(rate.per_second(0), 1_000_000.0);
        assert_eq!(rate.per_second(500), 1_000_000.0);
        // Then over the time since the oldest sample began.
        assert_eq!(rate.per_second(4000), 250_000.0);
        rate.record(1_000_000.0, 4000);
        assert_eq!(rate.per_second(4000), 500_000.0);
        // Samples older than the window (11 s) drop out.
        assert_eq!(rate.per_second(11_000), 1_000_000.0 / 7.0);
        assert_eq!(rate.per_second(14_000), 100_000.0);
        assert_eq!(rate.per_second(15_000), 0.0);
    }

    #[test]
    fn at_most_the_configured_number_of_samples_is_kept() {
        let mut rate = Rate::new(1000, 3, Elapsed::SinceOldest);
        for second in 0..10 {
            rate.record(100.0, second * 1000);
            assert!(rate.samples.len() <= 3);
        }
        // Samples at 7, 8 and 9 s.
        assert_eq!(rate.per_second(9000), 300.0 / 2.0);
        assert_eq!(rate.last_sample_ms(), Some(9000));
    }

    #[test]
    fn a_token_bucket_starts_full_goes_below_zero_and_refills_at_its_rate() {
        let mut bucket = TokenBucket::default();
        assert_eq!(bucket.tokens(2.0, 22.0, 1_000), 22.0);
        bucket.record(30.0, 2.0, 22.0, 1_000);
        assert_eq!(bucket.tokens(2.0, 22.0, 1_000), -8.0);
        assert_eq!(bucket.tokens(2.0, 22.0, 3_000), -4.0);
        assert_eq!(bucket.tokens(2.0, 22.0, 60_000), 22.0);
        bucket.record(-5.0, 2.0, 22.0, 60_000);
        assert_eq!(bucket.tokens(2.0, 22.0, 60_000), 22.0);
    }

    #[test]
    fn a_whole_window_rate_counts_the_samples_it_lacks_as_whole_ones() {
        let mut rate = Rate::new(1000, 11, Elapsed::WholeWindow);
        // 10 s at least: a burst of 10 s of quota reads as the quota.
        rate.record(10_000.0, 0);
        assert_eq!(rate.window_ms(0), 10_000);
        assert_eq!(rate.per_second(0), 1000.0);
        assert_eq!(rate.window_ms(2500), 10_500);
        // Past ten whole samples, the time since the oldest.
        rate.record(1000.0, 10_500);
        assert_eq!(rate.window_ms(10_500), 10_500);
        assert_eq!(rate.per_second(10_500), 11_000.0 * 1000.0 / 10_500.0);
        // Taking back what was recorded.
        rate.record(-1000.0, 10_500);
        assert_eq!(rate.per_second(10_500), 10_000.0 * 1000.0 / 10_500.0);
    }
}
