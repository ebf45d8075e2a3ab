//! The async shell around the share coordinator's shards (`fjord_share::ShareCoordinatorShard`,
//! one per `__share_group_state` partition this broker leads), hosted by the coordinator runtime.
//!
//! A request's step runs under its shard's lock, checks the state and yields the records to
//! write; they are appended at once, still under the lock, and replayed into the shard only once
//! the append took them — so the shard is always the replay of its partition's log, in the log's
//! order. The request is answered once the records are durable and in every in-sync replica.

use std::sync::Arc;

use fjord_common::errors::{self, KafkaError};
use fjord_common::{lock, CoordinatorRecord, LeaderEpoch};
use fjord_share::records::StateKey;
use fjord_share::{Refusal, ShareCoordinatorShard};
use tokio::sync::Notify;

use crate::coordinator::log::{self as coordinator_log, Appended, Replayed};
use crate::coordinator::runtime::{Coordinator, CoordinatorRuntime};
use crate::replication::{FlusherHandle, ReplicaManager};

pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

impl Coordinator for ShareCoordinatorShard {
    const TOPIC: &'static str = SHARE_STATE_TOPIC;
    const KIND: &'static str = "share";
    /// ShareUpdates between two ShareSnapshots of a share partition.
    type Config = u32;

    fn load(_leader_epoch: LeaderEpoch, updates_per_snapshot: &u32) -> Self {
        ShareCoordinatorShard::new(*updates_per_snapshot)
    }

    fn replay(&mut self, item: Replayed) -> Result<(), KafkaError> {
        match item {
            Replayed::Record { record, .. } => ShareCoordinatorShard::replay(self, &record)
                .map_err(|e| KafkaError::new(errors::CORRUPT_MESSAGE, e.to_string())),
            Replayed::Marker { .. } => Ok(()),
        }
    }

    fn next_deadline(&self) -> Option<i64> {
        None
    }
}

/// One entry's outcome as a step decides it: its answer (or refusal) and the record it writes.
pub struct Outcome<T> {
    pub answer: Result<T, Refusal>,
    pub record: Option<CoordinatorRecord>,
}

pub struct ShareStateRuntime {
    pub shards: CoordinatorRuntime<ShareCoordinatorShard>,
    flusher: FlusherHandle,
}

impl ShareStateRuntime {
    pub fn new(
        updates_per_snapshot: u32,
        num_partitions: i32,
        replicas: Arc<ReplicaManager>,
        flusher: FlusherHandle,
        deadline_moved: Arc<Notify>,
    ) -> Self {
        ShareStateRuntime {
            shards: CoordinatorRuntime::new(
                updates_per_snapshot,
                num_partitions,
                replicas,
                deadline_moved,
            ),
            flusher,
        }
    }

    /// The `__share_group_state` partition holding `key`'s state.
    pub fn partition_of(&self, key: &StateKey) -> i32 {
        fjord_common::coordinator_partition(&key.coordinator_key(), self.shards.num_partitions())
    }

    /// Runs `step` on the shard of `partition` and writes the records it yields; answers each
    /// entry once its record is durable and replicated, or with the write's error. With
    /// `committed`, a step that writes nothing is answered only once everything the shard
    /// holds is durable and replicated too (the shard replays a record as soon as it is
    /// appended: a read must not hand out state a coordinator failover could still lose).
    /// Refused whole (NOT_COORDINATOR) when this broker does not lead the partition.
    pub async fn run<T>(
        &self,
        partition: i32,
        committed: bool,
        step: impl FnOnce(&ShareCoordinatorShard) -> Vec<Outcome<T>>,
    ) -> Result<Vec<Result<T, Refusal>>, Refusal> {
        let not_coordinator = || Refusal {
            error_code: errors::NOT_COORDINATOR,
            message: format!("this broker does not lead {SHARE_STATE_TOPIC}-{partition}"),
        };
        let Some(shard) = self.shards.shard(partition) else {
            return Err(not_coordinator());
        };
        let (outcomes, appended) = {
            let mut guard = lock(&shard);
            if guard.unloaded {
                return Err(not_coordinator());
            }
            let outcomes = step(&guard.core);
            let records: Vec<CoordinatorRecord> =
                outcomes.iter().filter_map(|o| o.record.clone()).collect();
            if records.is_empty() {
                if !committed {
                    return Ok(outcomes.into_iter().map(|o| o.answer).collect());
                }
                let end_offset = guard
                    .partition
                    .try_lock()
                    .map(|log| log.log_end_offset())
                    .map_err(|_| not_coordinator())?;
                let held = Appended {
                    partition: guard.partition.clone(),
                    end_offset,
                    leader_epoch: guard.leader_epoch,
                };
                (outcomes, Ok(held))
            } else {
                let appended = coordinator_log::append(&guard.partition, &records, None);
                if appended.is_ok() {
                    for record in &records {
                        // The shard made these records itself: one it cannot replay is a bug,
                        // logged rather than crashing the broker.
                        if let Err(error) = guard.core.replay(record) {
                            tracing::error!(%error, "a share state record the shard made does not replay");
                        }
                    }
                }
                (outcomes, appended)
            }
        };
        let written = coordinator_log::settle(&self.flusher, appended, "share").await;
        Ok(outcomes
            .into_iter()
            .map(|o| match (&written, o.record) {
                (Err(failure), Some(_)) => Err(Refusal {
                    error_code: failure.error_code(),
                    message: failure.to_string(),
                }),
                _ => o.answer,
            })
            .collect())
    }
}
