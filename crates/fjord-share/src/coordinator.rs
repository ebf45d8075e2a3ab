//! The share coordinator (KIP-932), sans-IO: the durable state of every share partition whose
//! key ("group:topicId:partition") falls on one `__share_group_state` partition.
//!
//! A partition leader keeps a share partition's in-flight records in memory (`SharePartition`)
//! and writes every change of state to the share coordinator before it answers; a new leader
//! reads the state back. One `ShareCoordinatorShard` per `__share_group_state` partition holds
//! that state. Each request is checked against the state and answered with the record to write
//! (nothing changes yet); the shell appends it and then replays it here, the same way the shard
//! is loaded, so the state in memory is always the replay of its partition's log.
//!
//! Records: a ShareSnapshot holds a share partition's whole state, a ShareUpdate only what one
//! write changed. Every `snapshot_every` updates the next write is a snapshot instead, which
//! bounds how much of the log a load replays per key.

use std::collections::{BTreeMap, HashMap};

use fjord_common::errors;
use fjord_common::CoordinatorRecord;

use crate::records::{
    self, share_snapshot_value, share_update_value, RecordError, ShareSnapshotValue,
    ShareUpdateValue, StateKey, StateRecord,
};

/// Kafka's `share.coordinator.snapshot.update.records.per.snapshot` default.
pub const DEFAULT_UPDATES_PER_SNAPSHOT: u32 = 500;

/// Delivery states a share partition persists: Available, Acknowledged, Archiving (handed to a
/// dead-letter queue), Archived. Acquired (1) is never written.
const PERSISTED_STATES: [i8; 4] = [0, 2, 3, 4];

/// A range of offsets in one delivery state, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistedBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
}

/// One share partition's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedState {
    pub snapshot_epoch: i32,
    /// Set by the group coordinator at initialization: a write of an older one is fenced.
    pub state_epoch: i32,
    /// The highest partition leader epoch that read the state: a write of an older leader is
    /// fenced.
    pub leader_epoch: i32,
    /// -1 until a leader has chosen it (by `share.auto.offset.reset`).
    pub start_offset: i64,
    /// Offsets at or above the start offset whose delivery is complete (-1: not known).
    pub delivery_complete_count: i32,
    pub create_timestamp: i64,
    pub write_timestamp: i64,
    pub batches: Vec<PersistedBatch>,
    /// ShareUpdates replayed since the last ShareSnapshot.
    updates_since_snapshot: u32,
}

/// A refused request: a Kafka error code and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
}

fn refuse(error_code: i16, message: impl Into<String>) -> Refusal {
    Refusal {
        error_code,
        message: message.into(),
    }
}

/// What a leader writes (WriteShareGroupState for one partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub batches: Vec<PersistedBatch>,
}

/// ReadShareGroupStateSummary's answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
}

/// The state of the share partitions of one `__share_group_state` partition.
#[derive(Debug, Default)]
pub struct ShareCoordinatorShard {
    states: HashMap<StateKey, PersistedState>,
    updates_per_snapshot: u32,
}

impl ShareCoordinatorShard {
    pub fn new(updates_per_snapshot: u32) -> ShareCoordinatorShard {
        ShareCoordinatorShard {
            states: HashMap::new(),
            updates_per_snapshot,
        }
    }

    /// How many share partitions it holds state for.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn state(&self, key: &StateKey) -> Option<&PersistedState> {
        self.states.get(key)
    }

    /// InitializeShareGroupState: a fresh state under `state_epoch` starting at `start_offset`
    /// (-1: the leader chooses), replacing any older one.
    pub fn initialize(
        &self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
        now_ms: i64,
    ) -> Result<CoordinatorRecord, Refusal> {
        if state_epoch < 0 || start_offset < -1 {
            return Err(refuse(
                errors::INVALID_REQUEST,
                "negative state epoch or offset",
            ));
        }
        let stored = self.states.get(key);
        if let Some(stored) = stored {
            if stored.state_epoch > state_epoch {
                return Err(fenced_state_epoch(stored.state_epoch, state_epoch));
            }
        }
        let snapshot = ShareSnapshotValue {
            snapshot_epoch: stored.map_or(0, |s| s.snapshot_epoch.saturating_add(1)),
            state_epoch,
            leader_epoch: 0,
            start_offset,
            delivery_complete_count: if start_offset == -1 { -1 } else { 0 },
            create_timestamp: now_ms,
            write_timestamp: now_ms,
            state_batches: Vec::new(),
        };
        encode(key, &StateRecord::Snapshot(snapshot))
    }

    /// ReadShareGroupState by the leader of `leader_epoch`: the state, and the record raising
    /// the stored leader epoch when it is newer (which fences the older leader's writes).
    pub fn read(
        &self,
        key: &StateKey,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(PersistedState, Option<CoordinatorRecord>), Refusal> {
        if leader_epoch < 0 {
            return Err(refuse(errors::INVALID_REQUEST, "negative leader epoch"));
        }
        let stored = self.initialized(key)?;
        if stored.leader_epoch > leader_epoch {
            return Err(fenced_leader_epoch(stored.leader_epoch, leader_epoch));
        }
        let record = (leader_epoch > stored.leader_epoch)
            .then(|| {
                let fence = StateWrite {
                    state_epoch: stored.state_epoch,
                    leader_epoch,
                    start_offset: stored.start_offset,
                    delivery_complete_count: stored.delivery_complete_count,
                    batches: Vec::new(),
                };
                self.record_of_write(key, stored, &fence, leader_epoch, now_ms)
            })
            .transpose()?;
        Ok((stored.clone(), record))
    }

    /// WriteShareGroupState by a leader: the record of what changed.
    pub fn write(
        &self,
        key: &StateKey,
        write: &StateWrite,
        now_ms: i64,
    ) -> Result<CoordinatorRecord, Refusal> {
        if write.state_epoch < 0 || write.leader_epoch < 0 || write.start_offset < -1 {
            return Err(refuse(
                errors::INVALID_REQUEST,
                "negative epoch or start offset",
            ));
        }
        check_batches(&write.batches)?;
        let stored = self.initialized(key)?;
        if stored.leader_epoch > write.leader_epoch {
            return Err(fenced_leader_epoch(stored.leader_epoch, write.leader_epoch));
        }
        if stored.state_epoch > write.state_epoch {
            return Err(fenced_state_epoch(stored.state_epoch, write.state_epoch));
        }
        // A write never raises the stored leader epoch: only a read does.
        self.record_of_write(key, stored, write, stored.leader_epoch, now_ms)
    }

    /// DeleteShareGroupState: the tombstone, or nothing when there is no state.
    pub fn delete(&self, key: &StateKey) -> Result<Option<CoordinatorRecord>, Refusal> {
        if !self.states.contains_key(key) {
            return Ok(None);
        }
        encode(key, &StateRecord::Tombstone).map(Some)
    }

    /// ReadShareGroupStateSummary: the start offset and epochs; a partition without state
    /// answers start offset -1.
    pub fn summary(&self, key: &StateKey) -> Summary {
        match self.states.get(key) {
            Some(s) => Summary {
                state_epoch: s.state_epoch,
                leader_epoch: s.leader_epoch,
                start_offset: s.start_offset,
                delivery_complete_count: s.delivery_complete_count,
            },
            None => Summary {
                state_epoch: 0,
                leader_epoch: 0,
                start_offset: -1,
                delivery_complete_count: -1,
            },
        }
    }

    /// Applies one record of the shard's partition: at load, and after each append.
    pub fn replay(&mut self, record: &CoordinatorRecord) -> Result<(), RecordError> {
        let (key, record) = records::decode(record)?;
        match record {
            StateRecord::Tombstone => {
                self.states.remove(&key);
            }
            StateRecord::Snapshot(snapshot) => {
                let previous = self.states.get(&key);
                let state = PersistedState {
                    snapshot_epoch: snapshot.snapshot_epoch,
                    // The epochs seen never go back within one state's life.
                    state_epoch: previous.map_or(snapshot.state_epoch, |p| {
                        p.state_epoch.max(snapshot.state_epoch)
                    }),
                    leader_epoch: previous.map_or(snapshot.leader_epoch, |p| {
                        p.leader_epoch.max(snapshot.leader_epoch)
                    }),
                    start_offset: snapshot.start_offset,
                    delivery_complete_count: snapshot.delivery_complete_count,
                    create_timestamp: snapshot.create_timestamp,
                    write_timestamp: snapshot.write_timestamp,
                    batches: combine(
                        snapshot.state_batches.iter().map(from_snapshot),
                        snapshot.start_offset,
                    ),
                    updates_since_snapshot: 0,
                };
                self.states.insert(key, state);
            }
            StateRecord::Update(update) => {
                // An update of a state deleted meanwhile has nothing to apply to.
                let Some(state) = self.states.get_mut(&key) else {
                    return Ok(());
                };
                if update.start_offset != -1 {
                    state.start_offset = update.start_offset;
                }
                if update.leader_epoch != -1 {
                    state.leader_epoch = state.leader_epoch.max(update.leader_epoch);
                }
                state.delivery_complete_count = update.delivery_complete_count;
                let old = std::mem::take(&mut state.batches);
                state.batches = combine(
                    old.into_iter()
                        .chain(update.state_batches.iter().map(from_update)),
                    state.start_offset,
                );
                state.updates_since_snapshot = state.updates_since_snapshot.saturating_add(1);
            }
        }
        Ok(())
    }

    fn initialized(&self, key: &StateKey) -> Result<&PersistedState, Refusal> {
        self.states.get(key).ok_or_else(|| {
            refuse(
                errors::INVALID_REQUEST,
                format!(
                    "the share partition {} is not initialized",
                    key.coordinator_key()
                ),
            )
        })
    }

    /// The record of `write` on `stored`: an update with the write's batches, or a snapshot
    /// of the whole merged state once enough updates have gone by since the last.
    fn record_of_write(
        &self,
        key: &StateKey,
        stored: &PersistedState,
        write: &StateWrite,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<CoordinatorRecord, Refusal> {
        let start_offset = write.start_offset.max(stored.start_offset);
        let delivery_complete_count = match write.start_offset.cmp(&stored.start_offset) {
            std::cmp::Ordering::Equal => write
                .delivery_complete_count
                .max(stored.delivery_complete_count),
            std::cmp::Ordering::Less => stored.delivery_complete_count,
            std::cmp::Ordering::Greater => write.delivery_complete_count,
        };
        let record = if stored.updates_since_snapshot >= self.updates_per_snapshot {
            let batches = combine(
                stored.batches.iter().chain(&write.batches).copied(),
                start_offset,
            );
            StateRecord::Snapshot(ShareSnapshotValue {
                snapshot_epoch: stored.snapshot_epoch.saturating_add(1),
                state_epoch: stored.state_epoch,
                leader_epoch,
                start_offset,
                delivery_complete_count,
                create_timestamp: stored.create_timestamp,
                write_timestamp: now_ms,
                state_batches: batches.iter().map(to_snapshot).collect(),
            })
        } else {
            let batches = combine(write.batches.iter().copied(), start_offset);
            StateRecord::Update(ShareUpdateValue {
                snapshot_epoch: stored.snapshot_epoch,
                leader_epoch,
                start_offset,
                delivery_complete_count,
                state_batches: batches.iter().map(to_update).collect(),
            })
        };
        encode(key, &record)
    }
}

fn encode(key: &StateKey, record: &StateRecord) -> Result<CoordinatorRecord, Refusal> {
    records::encode(key, record).map_err(|e| refuse(errors::UNKNOWN_SERVER_ERROR, e.to_string()))
}

fn fenced_state_epoch(stored: i32, asked: i32) -> Refusal {
    refuse(
        errors::FENCED_STATE_EPOCH,
        format!("state epoch {asked} is older than the stored {stored}"),
    )
}

fn fenced_leader_epoch(stored: i32, asked: i32) -> Refusal {
    refuse(
        errors::FENCED_LEADER_EPOCH,
        format!("leader epoch {asked} is older than the stored {stored}"),
    )
}

/// A leader's batches must be well formed: non-negative, ordered ends below the last offset
/// there is, persisted states only.
fn check_batches(batches: &[PersistedBatch]) -> Result<(), Refusal> {
    for b in batches {
        if b.first_offset < 0
            || b.last_offset < b.first_offset
            || b.last_offset == i64::MAX
            || b.delivery_count < 0
            || !PERSISTED_STATES.contains(&b.delivery_state)
        {
            return Err(refuse(
                errors::INVALID_REQUEST,
                format!("invalid state batch {b:?}"),
            ));
        }
    }
    Ok(())
}

/// Merges batches into one sorted, non-overlapping list from `start_offset` on. Where batches
/// overlap, the one with more deliveries wins, then the one with the higher state (as Kafka's
/// share coordinator does: a record's delivery count and state only move forward, so the
/// furthest-along claim is the true one whatever order the writes came in); adjacent ranges in
/// the same state and count are joined.
pub fn combine(
    batches: impl IntoIterator<Item = PersistedBatch>,
    start_offset: i64,
) -> Vec<PersistedBatch> {
    // Where each batch starts (+1) and stops (-1) counting, swept in offset order.
    let mut edges: BTreeMap<i64, Vec<(i16, i8, i32)>> = BTreeMap::new();
    for b in batches {
        let first = b.first_offset.max(start_offset);
        if b.last_offset < first {
            continue;
        }
        let rank = (b.delivery_count, b.delivery_state);
        edges.entry(first).or_default().push((rank.0, rank.1, 1));
        if let Some(end) = b.last_offset.checked_add(1) {
            edges.entry(end).or_default().push((rank.0, rank.1, -1));
        }
    }
    let mut active: BTreeMap<(i16, i8), i32> = BTreeMap::new();
    let mut merged: Vec<PersistedBatch> = Vec::new();
    let mut points = edges.into_iter().peekable();
    while let Some((at, changes)) = points.next() {
        for (count, state, delta) in changes {
            let n = active.entry((count, state)).or_insert(0);
            *n += delta;
            if *n == 0 {
                active.remove(&(count, state));
            }
        }
        let Some((&(count, state), _)) = active.last_key_value() else {
            continue;
        };
        let last = match points.peek() {
            Some((next, _)) => next - 1,
            None => i64::MAX,
        };
        match merged.last_mut() {
            Some(prev)
                if prev.last_offset.checked_add(1) == Some(at)
                    && prev.delivery_state == state
                    && prev.delivery_count == count =>
            {
                prev.last_offset = last;
            }
            _ => merged.push(PersistedBatch {
                first_offset: at,
                last_offset: last,
                delivery_state: state,
                delivery_count: count,
            }),
        }
    }
    merged
}

fn from_snapshot(b: &share_snapshot_value::StateBatch) -> PersistedBatch {
    PersistedBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
    }
}

fn from_update(b: &share_update_value::StateBatch) -> PersistedBatch {
    PersistedBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
    }
}

fn to_snapshot(b: &PersistedBatch) -> share_snapshot_value::StateBatch {
    share_snapshot_value::StateBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
    }
}

fn to_update(b: &PersistedBatch) -> share_update_value::StateBatch {
    share_update_value::StateBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
    }
}

#[cfg(test)]
mod tests;
