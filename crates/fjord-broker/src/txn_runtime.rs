//! The async shell around the transaction coordinator shards (`fjord-txn`).
//!
//! One `TransactionCoordinatorShard` per `__transaction_state` partition this broker leads, its
//! coordinator epoch the partition's leader epoch. A request runs on its shard under the
//! shard's lock; a transition's record is appended right after (a transactional id has at most
//! one transition pending, so its records are in the log in the order the shard made them), and
//! the shard hears `written` once the record is durable and in every in-sync replica — only
//! then is the request answered. The
//! request-level handlers, the marker sender and the timers are in `txn`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fjord_common::{errors, lock, LeaderEpoch};
use fjord_txn::{MarkerJob, Step, TransactionCoordinatorShard, TxnConfig, Write, Written};
use tokio::sync::Notify;

use crate::coordinator_log::{self, WriteFailure};
use crate::flusher::FlusherHandle;
use crate::replica::{Partition, ReplicaManager};

pub const TXN_TOPIC: &str = fjord_txn::TRANSACTION_STATE_TOPIC;

pub struct TxnShard {
    pub core: TransactionCoordinatorShard,
    /// Its `__transaction_state` partition: records go through it like any produce.
    pub partition: Arc<Partition>,
    /// The leader epoch it was loaded under, which is its coordinator epoch.
    pub leader_epoch: LeaderEpoch,
}

pub type SharedShard = Arc<Mutex<TxnShard>>;

/// What running a request on a shard came to.
pub enum Ran<T> {
    /// Answered without a write.
    Answer(T),
    /// A transition was written (or failed to be): what the shard made of it.
    Written(Written),
}

pub struct TxnRuntime {
    config: TxnConfig,
    num_partitions: i32,
    replicas: Arc<ReplicaManager>,
    flusher: FlusherHandle,
    shards: Mutex<HashMap<i32, SharedShard>>,
    /// Wakes the timer task when a shard's deadline may have moved earlier.
    pub deadline_moved: Notify,
    /// One connection per broker that markers are sent to.
    marker_links: Mutex<HashMap<i32, MarkerLink>>,
    /// Connections to other brokers' coordinators for KIP-890 verification, by broker id:
    /// apart from the markers', which can wait long for replicas.
    verification_links: Mutex<HashMap<i32, MarkerLink>>,
}

pub type MarkerLink = Arc<tokio::sync::Mutex<Option<fjord_client::Connection>>>;

/// The error a request is answered with when its transition was not written.
fn failure_code(failure: &WriteFailure) -> i16 {
    match failure {
        WriteFailure::Moved => errors::NOT_COORDINATOR,
        WriteFailure::Failed(_) => errors::COORDINATOR_NOT_AVAILABLE,
    }
}

impl TxnRuntime {
    pub fn new(
        config: TxnConfig,
        num_partitions: i32,
        replicas: Arc<ReplicaManager>,
        flusher: FlusherHandle,
    ) -> Self {
        TxnRuntime {
            config,
            num_partitions,
            replicas,
            flusher,
            shards: Mutex::new(HashMap::new()),
            deadline_moved: Notify::new(),
            marker_links: Mutex::new(HashMap::new()),
            verification_links: Mutex::new(HashMap::new()),
        }
    }

    /// The connection markers for `broker` go on (connected by the sender).
    pub fn marker_link(&self, broker: i32) -> MarkerLink {
        lock(&self.marker_links).entry(broker).or_default().clone()
    }

    /// The connection produce verifications for `broker`'s coordinators go on.
    pub fn verification_link(&self, broker: i32) -> MarkerLink {
        lock(&self.verification_links)
            .entry(broker)
            .or_default()
            .clone()
    }

    pub fn partition_of(&self, transactional_id: &str) -> i32 {
        fjord_txn::partition_for(transactional_id, self.num_partitions)
    }

    pub fn num_partitions(&self) -> i32 {
        self.num_partitions
    }

    pub fn shard(&self, partition: i32) -> Option<SharedShard> {
        lock(&self.shards).get(&partition).cloned()
    }

    pub fn all_shards(&self) -> Vec<(i32, SharedShard)> {
        lock(&self.shards)
            .iter()
            .map(|(p, s)| (*p, s.clone()))
            .collect()
    }

    /// Unloads every shard: the broker is stopping.
    pub fn close(&self) {
        lock(&self.shards).clear();
    }

    /// Whether `shard` is still the loaded shard of `partition` (not unloaded or reloaded).
    pub fn is_current(&self, partition: i32, shard: &SharedShard) -> bool {
        lock(&self.shards)
            .get(&partition)
            .is_some_and(|s| Arc::ptr_eq(s, shard))
    }

    /// Loads every `__transaction_state` partition this broker leads that is not loaded yet;
    /// returns the markers of transactions found prepared, to be written again.
    pub fn load_hosted(&self) -> Result<Vec<(i32, SharedShard, MarkerJob)>, String> {
        let mut resumed = Vec::new();
        for partition in 0..self.num_partitions {
            if self.shard(partition).is_some() {
                continue;
            }
            let Some(hosted) = self.replicas.get(TXN_TOPIC, partition) else {
                continue;
            };
            let leader_epoch = hosted.leader_epoch();
            let mut core = TransactionCoordinatorShard::new(leader_epoch, self.config.clone());
            let (replayed, _) = coordinator_log::replay(&hosted, None, |item| match item {
                coordinator_log::Replayed::Record { record, .. } => {
                    core.replay(&record).map_err(|e| e.to_string())
                }
                // No transaction writes to the transaction log.
                coordinator_log::Replayed::Marker { .. } => Ok(()),
            })?;
            let jobs = core.unfinished_markers();
            tracing::info!(
                partition,
                replayed,
                resumed = jobs.len(),
                "transaction coordinator shard loaded"
            );
            let shard = Arc::new(Mutex::new(TxnShard {
                core,
                partition: hosted,
                leader_epoch,
            }));
            lock(&self.shards).insert(partition, shard.clone());
            resumed.extend(jobs.into_iter().map(|job| (partition, shard.clone(), job)));
        }
        self.deadline_moved.notify_one();
        Ok(resumed)
    }

    /// Unloads the shards of partitions this broker no longer leads, or leads under a new
    /// leader epoch: their transactional ids answer NOT_COORDINATOR (or load afresh) from now.
    pub fn unload_unled(&self) {
        lock(&self.shards).retain(|&partition, shard| {
            let shard = lock(shard);
            let kept = self.replicas.get(TXN_TOPIC, partition).is_some_and(|p| {
                Arc::ptr_eq(&p, &shard.partition) && p.leader_epoch() == shard.leader_epoch
            });
            if !kept {
                tracing::info!(
                    partition,
                    "transaction coordinator shard unloaded: leadership moved"
                );
            }
            kept
        });
    }

    /// True once every `__transaction_state` partition this broker leads has a loaded shard.
    pub fn all_loaded(&self) -> bool {
        let shards = lock(&self.shards);
        (0..self.num_partitions)
            .all(|p| shards.contains_key(&p) || self.replicas.get(TXN_TOPIC, p).is_none())
    }

    /// Runs `step` on the shard; a write it asks for is appended at once and the shard told
    /// once it is durable and replicated (or failed).
    pub async fn run<T>(
        &self,
        shard: &SharedShard,
        step: impl FnOnce(&mut TransactionCoordinatorShard) -> Result<Step<T>, fjord_txn::TxnError>,
    ) -> Result<Ran<T>, i16> {
        let write = {
            let mut guard = lock(shard);
            match step(&mut guard.core) {
                Ok(Step::Answer(answer)) => return Ok(Ran::Answer(answer)),
                Ok(Step::Write(write)) => write,
                Err(error) => {
                    tracing::error!(%error, "transaction coordinator step failed");
                    return Err(errors::COORDINATOR_NOT_AVAILABLE);
                }
            }
        };
        let mut written = self.write(shard, vec![write]).await;
        Ok(Ran::Written(written.pop().unwrap_or_default()))
    }

    /// Runs timer-like work that yields several writes at once (each for its own
    /// transactional id), written as one batch.
    pub async fn run_writes(
        &self,
        shard: &SharedShard,
        step: impl FnOnce(&mut TransactionCoordinatorShard) -> Result<Vec<Write>, fjord_txn::TxnError>,
    ) -> Vec<Written> {
        let writes = {
            let mut guard = lock(shard);
            match step(&mut guard.core) {
                Ok(writes) => writes,
                Err(error) => {
                    tracing::error!(%error, "transaction coordinator step failed");
                    return Vec::new();
                }
            }
        };
        self.write(shard, writes).await
    }

    /// Appends `writes`, waits for them, and tells the shard.
    async fn write(&self, shard: &SharedShard, writes: Vec<Write>) -> Vec<Written> {
        if writes.is_empty() {
            return Vec::new();
        }
        let ids: Vec<String> = writes.iter().map(|w| w.transactional_id.clone()).collect();
        let records: Vec<_> = writes.into_iter().map(|w| w.record).collect();
        let appended = {
            let guard = lock(shard);
            coordinator_log::append(&guard.partition, &records, None)
        };
        let result = match appended {
            Ok(appended) => coordinator_log::written(&self.flusher, appended).await,
            Err(failure) => Err(failure),
        };
        if let Err(failure) = &result {
            tracing::warn!(%failure, "transaction coordinator write failed");
        }
        let result = result.map_err(|f| failure_code(&f));
        let mut guard = lock(shard);
        let written = ids
            .iter()
            .map(|id| guard.core.written(id, result))
            .collect();
        drop(guard);
        self.deadline_moved.notify_one();
        written
    }
}
