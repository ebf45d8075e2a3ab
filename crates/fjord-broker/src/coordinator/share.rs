//! The share partitions this broker leads (KIP-932): one `fjord_share::SharePartition` per
//! (share group, partition), made on the group's first fetch of the partition, and the broker's
//! share sessions. The state lives with the partition's leadership: a share partition is
//! dropped when this broker stops leading the partition or leads it under a new epoch.
//!
//! Lock order: the map, then one share partition, then (in the fetch path) the partition's log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fjord_common::lock;
use fjord_common::{LeaderEpoch, TopicPartition};
use fjord_share::{SessionKey, SharePartition, ShareSessions};
use tokio::sync::Notify;

use crate::replication::ReplicaManager;

/// Share partitions at most: a (group, partition) pair beyond it is refused until some are
/// dropped (leadership moved), bounding the memory share groups may take.
pub const MAX_SHARE_PARTITIONS: usize = 100_000;

/// A share session not used for this long may be evicted when the cache is full.
const SESSION_EVICTION_MS: i64 = 120_000;

/// One (group, partition) as the map keys it.
pub type ShareKey = (String, TopicPartition);

struct Entry {
    leader_epoch: LeaderEpoch,
    state: Arc<Mutex<SharePartition>>,
}

/// Every share partition of this broker and its share sessions.
pub struct SharePartitions {
    partitions: Mutex<HashMap<ShareKey, Entry>>,
    pub(crate) sessions: Mutex<ShareSessions>,
    /// Woken when records may have become available: released, their locks expired, or the
    /// start offset moved.
    changed: Notify,
}

impl SharePartitions {
    pub fn new(max_sessions: usize) -> SharePartitions {
        SharePartitions {
            partitions: Mutex::new(HashMap::new()),
            sessions: Mutex::new(ShareSessions::new(max_sessions, SESSION_EVICTION_MS)),
            changed: Notify::new(),
        }
    }

    /// The share partition of `key` led under `leader_epoch`, made with `init` when there is
    /// none (or only one of an earlier leadership). None when the map is full.
    pub fn get_or_init(
        &self,
        key: &ShareKey,
        leader_epoch: LeaderEpoch,
        init: impl FnOnce() -> Option<SharePartition>,
    ) -> Option<Arc<Mutex<SharePartition>>> {
        let mut partitions = lock(&self.partitions);
        if let Some(entry) = partitions.get(key) {
            if entry.leader_epoch == leader_epoch {
                return Some(entry.state.clone());
            }
        }
        if partitions.len() >= MAX_SHARE_PARTITIONS && !partitions.contains_key(key) {
            return None;
        }
        let state = Arc::new(Mutex::new(init()?));
        partitions.insert(
            key.clone(),
            Entry {
                leader_epoch,
                state: state.clone(),
            },
        );
        Some(state)
    }

    /// The share partition of `key`, if there is one of the current leadership.
    pub fn get(
        &self,
        key: &ShareKey,
        leader_epoch: LeaderEpoch,
    ) -> Option<Arc<Mutex<SharePartition>>> {
        lock(&self.partitions)
            .get(key)
            .filter(|e| e.leader_epoch == leader_epoch)
            .map(|e| e.state.clone())
    }

    /// Releases what `member` of `group_id` holds on `partitions` (its session ended).
    pub fn release(&self, group_id: &str, member_id: &str, partitions: &[TopicPartition]) {
        let states: Vec<Arc<Mutex<SharePartition>>> = {
            let map = lock(&self.partitions);
            partitions
                .iter()
                .filter_map(|tp| map.get(&(group_id.to_string(), tp.clone())))
                .map(|e| e.state.clone())
                .collect()
        };
        let released: i64 = states
            .iter()
            .map(|s| lock(s).release_member(member_id))
            .sum();
        if released > 0 {
            self.changed.notify_waiters();
        }
    }

    /// Expires the locks due by `now_ms`; when the next one is due.
    pub fn expire_due(&self, now_ms: i64) -> Option<i64> {
        let states: Vec<Arc<Mutex<SharePartition>>> = lock(&self.partitions)
            .values()
            .map(|e| e.state.clone())
            .collect();
        let mut released = 0;
        let mut next: Option<i64> = None;
        for state in states {
            let mut share = lock(&state);
            released += share.expire_locks(now_ms);
            if let Some(due) = share.next_lock_deadline() {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        if released > 0 {
            self.changed.notify_waiters();
        }
        next
    }

    /// Drops the share partitions of partitions this broker no longer leads.
    pub fn drop_unled(&self, replicas: &ReplicaManager) {
        lock(&self.partitions).retain(|(_, tp), entry| {
            replicas
                .get_hosted(&tp.topic, tp.partition)
                .is_some_and(|p| p.is_leader() && p.leader_epoch() == entry.leader_epoch)
        });
    }

    /// Tells fetches waiting for records that some may have become available.
    pub fn notify_changed(&self) {
        self.changed.notify_waiters();
    }

    /// Resolves at the next [`SharePartitions::notify_changed`].
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

/// The key of a member's share session.
pub fn session_key(group_id: &str, member_id: &str) -> SessionKey {
    SessionKey {
        group_id: group_id.to_string(),
        member_id: member_id.to_string(),
    }
}
