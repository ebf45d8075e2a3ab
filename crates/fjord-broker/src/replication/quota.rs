//! Replication throttles, as Kafka's (KIP-73; `kafka-reassign-partitions --throttle` sets them):
//! a topic's `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
//! name replicas, `partition:broker` (or `*` for all), and the dynamic broker configs
//! `leader.replication.throttled.rate` and `follower.replication.throttled.rate` bound the bytes
//! per second replicated for them. A leader answers a throttled follower's fetch without records
//! while its rate is above the bound; a follower leaves its throttled partitions out of its
//! fetches the same way. Replicas in the ISR are never held back (only catching-up ones are), but
//! their bytes count towards the rate. A fetch already under way is not cut: the rate may
//! overshoot by one fetch, then holds back until the window's average is under the bound again.
//!
//! `Rate` is the sans-IO core (time passed in); `ReplicationQuota` shares one between tasks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use fjord_common::{lock, BrokerId};
use fjord_config::ReplicationConfig;

use crate::replication::Partition;

/// Which side of replication a throttle bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What a leader sends (`leader.replication.throttled.replicas`).
    Leader,
    /// What a follower fetches (`follower.replication.throttled.replicas`).
    Follower,
}

/// Bytes per second over a sliding window of `samples` samples of `window_ms` each (Kafka's
/// `SimpleRate`): the bytes of the samples kept, over the time since the oldest began (at least
/// one sample's length, so a first burst is not divided by almost nothing).
#[derive(Debug)]
pub struct Rate {
    window_ms: i64,
    max_samples: usize,
    /// (start ms, bytes), oldest first.
    samples: VecDeque<(i64, u64)>,
}

impl Rate {
    pub fn new(window_ms: i64, max_samples: usize) -> Self {
        assert!(window_ms > 0 && max_samples > 0);
        Rate {
            window_ms,
            max_samples,
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

    pub fn record(&mut self, bytes: u64, now_ms: i64) {
        self.purge(now_ms);
        match self.samples.back_mut() {
            Some((start, sum)) if now_ms < *start + self.window_ms => *sum += bytes,
            _ => {
                if self.samples.len() == self.max_samples {
                    self.samples.pop_front();
                }
                self.samples.push_back((now_ms, bytes));
            }
        }
    }

    pub fn bytes_per_second(&mut self, now_ms: i64) -> f64 {
        self.purge(now_ms);
        let total: u64 = self.samples.iter().map(|(_, bytes)| bytes).sum();
        let oldest = self.samples.front().map_or(now_ms, |(start, _)| *start);
        let elapsed_ms = (now_ms - oldest).max(self.window_ms);
        total as f64 * 1000.0 / elapsed_ms as f64
    }
}

/// One side's throttle (the leader's or the follower's): its rate and its bound.
pub struct ReplicationQuota {
    rate: Mutex<Rate>,
    /// Bytes per second, as f64 bits; `f64::MAX` when unbounded.
    bound: AtomicU64,
}

impl ReplicationQuota {
    fn new(settings: &ReplicationConfig, bound: f64) -> Self {
        ReplicationQuota {
            rate: Mutex::new(Rate::new(
                settings.quota_window_ms,
                settings.quota_window_num,
            )),
            bound: AtomicU64::new(bound.to_bits()),
        }
    }

    pub fn set_bound(&self, bytes_per_second: f64) {
        self.bound
            .store(bytes_per_second.to_bits(), Ordering::Relaxed);
    }

    fn bound(&self) -> f64 {
        f64::from_bits(self.bound.load(Ordering::Relaxed))
    }

    pub fn record(&self, bytes: u64, now_ms: i64) {
        if bytes > 0 {
            lock(&self.rate).record(bytes, now_ms);
        }
    }

    /// Whether the bytes replicated for throttled replicas run above the bound.
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let bound = self.bound();
        bound < f64::MAX && lock(&self.rate).bytes_per_second(now_ms) > bound
    }
}

/// The leader's and the follower's throttles of this broker.
pub struct ReplicationQuotas {
    pub leader: ReplicationQuota,
    pub follower: ReplicationQuota,
}

impl ReplicationQuotas {
    /// With the bounds `(leader, follower)` in bytes per second.
    pub fn new(settings: &ReplicationConfig, (leader, follower): (f64, f64)) -> Self {
        ReplicationQuotas {
            leader: ReplicationQuota::new(settings, leader),
            follower: ReplicationQuota::new(settings, follower),
        }
    }
}

/// Whether the topic's throttled replicas of `side` name `partition`'s replica on `broker`.
pub fn throttles(partition: &Partition, side: Side, broker: BrokerId) -> bool {
    let config = partition.config();
    let settings = config.settings();
    let replicas = match side {
        Side::Leader => &settings.leader_replication_throttled_replicas,
        Side::Follower => &settings.follower_replication_throttled_replicas,
    };
    replicas.names(partition.tp.partition, broker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_the_bytes_of_the_window_over_its_time() {
        let mut rate = Rate::new(1000, 11);
        assert_eq!(rate.bytes_per_second(0), 0.0);
        // A first burst counts over one sample's length at least.
        rate.record(1_000_000, 0);
        assert_eq!(rate.bytes_per_second(0), 1_000_000.0);
        assert_eq!(rate.bytes_per_second(500), 1_000_000.0);
        // Then over the time since the oldest sample began.
        assert_eq!(rate.bytes_per_second(4000), 250_000.0);
        rate.record(1_000_000, 4000);
        assert_eq!(rate.bytes_per_second(4000), 500_000.0);
        // Samples older than the window (11 s) drop out.
        assert_eq!(rate.bytes_per_second(11_000), 1_000_000.0 / 7.0);
        assert_eq!(rate.bytes_per_second(14_000), 100_000.0);
        assert_eq!(rate.bytes_per_second(15_000), 0.0);
    }

    #[test]
    fn at_most_the_configured_number_of_samples_is_kept() {
        let mut rate = Rate::new(1000, 3);
        for second in 0..10 {
            rate.record(100, second * 1000);
            assert!(rate.samples.len() <= 3);
        }
        // Samples at 7, 8 and 9 s.
        assert_eq!(rate.bytes_per_second(9000), 300.0 / 2.0);
    }

    #[test]
    fn a_quota_is_exceeded_only_above_a_bound() {
        let (config, _) =
            fjord_config::BrokerConfig::from_properties(&std::collections::BTreeMap::new())
                .unwrap();
        let settings = config.replication();
        assert_eq!(
            (settings.quota_window_num, settings.quota_window_ms),
            (11, 1000)
        );
        let quotas = ReplicationQuotas::new(&settings, (f64::MAX, 1000.0));
        quotas.leader.record(u32::MAX as u64, 0);
        assert!(!quotas.leader.exceeded(0), "unbounded");
        quotas.follower.record(1000, 0);
        assert!(!quotas.follower.exceeded(0), "at the bound");
        quotas.follower.record(1, 0);
        assert!(quotas.follower.exceeded(0));
        assert!(!quotas.follower.exceeded(1500), "averaged over 1.5 s");
        quotas.follower.set_bound(f64::MAX);
        assert!(!quotas.follower.exceeded(0));
    }
}
