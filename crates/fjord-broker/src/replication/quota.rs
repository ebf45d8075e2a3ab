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
//! The rate is `crate::quota::rate`'s (Kafka's `SimpleRate`); `ReplicationQuota` shares one
//! between tasks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use fjord_common::{lock, BrokerId};
use fjord_config::ReplicationConfig;

use crate::quota::rate::{Elapsed, Rate};
use crate::replication::Partition;

/// Which side of replication a throttle bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What a leader sends (`leader.replication.throttled.replicas`).
    Leader,
    /// What a follower fetches (`follower.replication.throttled.replicas`).
    Follower,
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
                Elapsed::SinceOldest,
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
            lock(&self.rate).record(bytes as f64, now_ms);
        }
    }

    /// Whether the bytes replicated for throttled replicas run above the bound.
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let bound = self.bound();
        bound < f64::MAX && lock(&self.rate).per_second(now_ms) > bound
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
