//! The share partitions this broker leads (KIP-932): one `fjord_share::SharePartition` per
//! (share group, partition), loaded from the share coordinator on the group's first fetch of the
//! partition, and the broker's share sessions. In memory the state lives with the partition's
//! leadership: a share partition is dropped when this broker stops leading the partition or
//! leads it under a new epoch, and loaded again from what was persisted. Every change but an
//! acquisition is taken out as a `Change` for the share coordinator (`api::share_persister`).
//!
//! Lock order: the map, then one share partition, then (in the fetch path) the partition's log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fjord_common::lock;
use fjord_common::Uuid;
use fjord_common::{LeaderEpoch, TopicPartition};
use fjord_share::{PersistedBatch, SessionKey, SharePartition, ShareSessions, StateWrite};
use tokio::sync::Notify;

use crate::replication::ReplicaManager;

/// Share partitions at most: a (group, partition) pair beyond it is refused until some are
/// dropped (leadership moved), bounding the memory share groups may take.
pub const MAX_SHARE_PARTITIONS: usize = 100_000;

/// A share session not used for this long may be evicted when the cache is full.
const SESSION_EVICTION_MS: i64 = 120_000;

/// One (group, partition) as the map keys it.
pub type ShareKey = (String, TopicPartition);

/// A share partition of the current leadership, with what its writes to the share coordinator
/// name: the topic id, and the epochs that fence an older leader's or an older state's writes.
#[derive(Clone)]
pub struct Loaded {
    pub state: Arc<Mutex<SharePartition>>,
    pub topic_id: Uuid,
    pub leader_epoch: LeaderEpoch,
    pub state_epoch: i32,
    /// The key's gate (see [`SharePartitions::gate`]).
    pub gate: Gate,
}

/// One key's gate: a change holds it shared from the moment it is made until its write is
/// answered; a load holds it alone. So a share partition loaded afresh (after a failed write
/// evicted the last one) reads the state only once every write of its predecessor has landed
/// or failed, and two loads of one key never overlap.
pub type Gate = Arc<tokio::sync::RwLock<()>>;

/// What a share partition's change persists: the ranges whose state changed and where the
/// share partition starts now, with its key's gate held until the write is answered.
pub struct Change {
    pub key: ShareKey,
    pub loaded: Loaded,
    pub write: StateWrite,
    /// Held, not read: released when the write is answered.
    pub _gate: tokio::sync::OwnedRwLockReadGuard<()>,
}

impl Loaded {
    /// The changes made since the last call, as the share coordinator takes them; None when
    /// there were none.
    pub fn take_change(&self, share: &mut SharePartition) -> Option<StateWrite> {
        let batches = share.take_changes();
        if batches.is_empty() {
            return None;
        }
        Some(StateWrite {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: share.start_offset(),
            delivery_complete_count: share.delivery_complete_count(),
            batches: batches
                .iter()
                .map(|b| PersistedBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.state.id(),
                    delivery_count: b.delivery_count,
                })
                .collect(),
        })
    }
}

/// Every share partition of this broker and its share sessions.
pub struct SharePartitions {
    partitions: Mutex<HashMap<ShareKey, Loaded>>,
    /// Each key's gate; kept while a share partition or a holder of the gate has it.
    gates: Mutex<HashMap<ShareKey, Gate>>,
    pub(crate) sessions: Mutex<ShareSessions>,
    /// Woken when records may have become available: released, their locks expired, or the
    /// start offset moved.
    changed: Notify,
}

impl SharePartitions {
    pub fn new(max_sessions: usize) -> SharePartitions {
        SharePartitions {
            partitions: Mutex::new(HashMap::new()),
            gates: Mutex::new(HashMap::new()),
            sessions: Mutex::new(ShareSessions::new(max_sessions, SESSION_EVICTION_MS)),
            changed: Notify::new(),
        }
    }

    /// Keeps `loaded` as `key`'s share partition unless one of the same leadership is there
    /// already (another fetch loaded it meanwhile); answers the one kept. None when the map is
    /// full.
    pub fn insert(&self, key: &ShareKey, loaded: Loaded) -> Option<Loaded> {
        let mut partitions = lock(&self.partitions);
        if let Some(entry) = partitions.get(key) {
            if entry.leader_epoch == loaded.leader_epoch {
                return Some(entry.clone());
            }
        }
        if partitions.len() >= MAX_SHARE_PARTITIONS && !partitions.contains_key(key) {
            return None;
        }
        partitions.insert(key.clone(), loaded.clone());
        Some(loaded)
    }

    /// The share partition of `key`, if there is one of the current leadership.
    pub fn get(&self, key: &ShareKey, leader_epoch: LeaderEpoch) -> Option<Loaded> {
        lock(&self.partitions)
            .get(key)
            .filter(|e| e.leader_epoch == leader_epoch)
            .cloned()
    }

    /// `key`'s gate. Gates no share partition and nobody holds are dropped once there are
    /// many (loads that kept failing leave theirs).
    pub fn gate(&self, key: &ShareKey) -> Gate {
        let partitions = lock(&self.partitions);
        let mut gates = lock(&self.gates);
        if gates.len() >= 2 * MAX_SHARE_PARTITIONS {
            gates.retain(|k, g| partitions.contains_key(k) || Arc::strong_count(g) > 1);
        }
        gates.entry(key.clone()).or_default().clone()
    }

    /// Forgets `key`'s share partition if it is still `loaded`, fenced so that nobody still
    /// holding it changes it: a write of it failed, so the next fetch loads it afresh from what
    /// the share coordinator holds.
    pub fn evict(&self, key: &ShareKey, loaded: &Loaded) {
        let mut partitions = lock(&self.partitions);
        lock(&loaded.state).fence();
        if partitions
            .get(key)
            .is_some_and(|e| Arc::ptr_eq(&e.state, &loaded.state))
        {
            partitions.remove(key);
        }
    }

    /// Releases what `member` of `group_id` holds on `partitions` (its session ended); the
    /// changes to persist.
    pub fn release(
        &self,
        group_id: &str,
        member_id: &str,
        partitions: &[TopicPartition],
    ) -> Vec<Change> {
        let loaded: Vec<(ShareKey, Loaded)> = {
            let map = lock(&self.partitions);
            partitions
                .iter()
                .map(|tp| (group_id.to_string(), tp.clone()))
                .filter_map(|key| map.get(&key).cloned().map(|l| (key, l)))
                .collect()
        };
        let mut changes = Vec::new();
        let mut released = 0;
        for (key, loaded) in loaded {
            // Being loaded afresh: this copy is on its way out.
            let Ok(gate) = loaded.gate.clone().try_read_owned() else {
                continue;
            };
            let mut share = lock(&loaded.state);
            if share.is_fenced() {
                continue;
            }
            released += share.release_member(member_id);
            if let Some(write) = loaded.take_change(&mut share) {
                drop(share);
                changes.push(Change {
                    key,
                    loaded,
                    write,
                    _gate: gate,
                });
            }
        }
        if released > 0 {
            self.changed.notify_waiters();
        }
        changes
    }

    /// Expires the locks due by `now_ms`; when the next one is due, and the changes to persist.
    pub fn expire_due(&self, now_ms: i64) -> (Option<i64>, Vec<Change>) {
        let loaded: Vec<(ShareKey, Loaded)> = lock(&self.partitions)
            .iter()
            .map(|(k, l)| (k.clone(), l.clone()))
            .collect();
        let mut released = 0;
        let mut next: Option<i64> = None;
        let mut changes = Vec::new();
        for (key, loaded) in loaded {
            let Ok(gate) = loaded.gate.clone().try_read_owned() else {
                continue;
            };
            let mut share = lock(&loaded.state);
            if share.is_fenced() {
                continue;
            }
            released += share.expire_locks(now_ms);
            if let Some(due) = share.next_lock_deadline() {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
            if let Some(write) = loaded.take_change(&mut share) {
                drop(share);
                changes.push(Change {
                    key,
                    loaded,
                    write,
                    _gate: gate,
                });
            }
        }
        if released > 0 {
            self.changed.notify_waiters();
        }
        (next, changes)
    }

    /// Drops the share partitions of partitions this broker no longer leads.
    pub fn drop_unled(&self, replicas: &ReplicaManager) {
        let mut partitions = lock(&self.partitions);
        partitions.retain(|(_, tp), entry| {
            replicas
                .get_hosted(&tp.topic, tp.partition)
                .is_some_and(|p| p.is_leader() && p.leader_epoch() == entry.leader_epoch)
        });
        lock(&self.gates)
            .retain(|key, gate| partitions.contains_key(key) || Arc::strong_count(gate) > 1);
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
