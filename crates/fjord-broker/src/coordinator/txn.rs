//! The async shell around the transaction coordinator shards (`fjord-txn`), hosted by the
//! coordinator runtime (`coordinator::runtime`).
//!
//! One `TransactionCoordinatorShard` per `__transaction_state` partition this broker leads, its
//! coordinator epoch the partition's leader epoch. A request runs on its shard under the
//! shard's lock; a transition's record is appended right after (a transactional id has at most
//! one transition pending, so its records are in the log in the order the shard made them), and
//! the shard hears `written` once the record is durable and in every in-sync replica — only
//! then is the request answered. The
//! request-level handlers, the marker sender and the timers are in `api::txn`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fjord_common::{errors, lock, LeaderEpoch};
use fjord_txn::{MarkerJob, Step, TransactionCoordinatorShard, TxnConfig, Write, Written};
use tokio::sync::Notify;

use crate::coordinator::log::{self as coordinator_log, Replayed};
use crate::coordinator::runtime::{Coordinator, CoordinatorRuntime};
use crate::link::peers::{AskQueues, LinkPool, PendingAsk};
use crate::replication::{FlusherHandle, ReplicaManager};
use fjord_common::errors::KafkaError;

pub const TXN_TOPIC: &str = fjord_txn::TRANSACTION_STATE_TOPIC;

impl Coordinator for TransactionCoordinatorShard {
    const TOPIC: &'static str = TXN_TOPIC;
    const KIND: &'static str = "transaction";
    type Config = TxnConfig;

    /// Its coordinator epoch is the leader epoch it is loaded under.
    fn load(leader_epoch: LeaderEpoch, config: &TxnConfig) -> Self {
        TransactionCoordinatorShard::new(leader_epoch, config.clone())
    }

    fn replay(&mut self, item: Replayed) -> Result<(), KafkaError> {
        match item {
            // A record the shard cannot replay: its partition does not load.
            Replayed::Record { record, .. } => TransactionCoordinatorShard::replay(self, &record)
                .map_err(|e| KafkaError::new(errors::CORRUPT_MESSAGE, e.to_string())),
            // No transaction writes to the transaction log.
            Replayed::Marker { .. } => Ok(()),
        }
    }

    fn next_deadline(&self) -> Option<i64> {
        TransactionCoordinatorShard::next_deadline(self)
    }
}

pub type SharedShard = crate::coordinator::runtime::SharedShard<TransactionCoordinatorShard>;

/// What running a request on a shard came to.
pub enum Ran<T> {
    /// Answered without a write.
    Answer(T),
    /// A transition was written (or failed to be): what the shard made of it.
    Written(Written),
}

pub struct TxnRuntime {
    pub shards: CoordinatorRuntime<TransactionCoordinatorShard>,
    flusher: FlusherHandle,
    /// Connections to each broker that markers are sent to.
    marker_links: Mutex<HashMap<i32, Arc<LinkPool>>>,
    /// Connections to other brokers' coordinators for KIP-890 verification, by broker id:
    /// apart from the markers', which can wait long for replicas (one request to a broker is
    /// out at a time: the asks are batched).
    verification_links: Mutex<HashMap<i32, Arc<LinkPool>>>,
    /// The KIP-890 asks waiting for each other broker's coordinators, sent batched.
    asks: Mutex<AskQueues>,
}

impl TxnRuntime {
    pub fn new(
        config: TxnConfig,
        num_partitions: i32,
        replicas: Arc<ReplicaManager>,
        flusher: FlusherHandle,
        deadline_moved: Arc<Notify>,
    ) -> Self {
        TxnRuntime {
            shards: CoordinatorRuntime::new(config, num_partitions, replicas, deadline_moved),
            flusher,
            marker_links: Mutex::new(HashMap::new()),
            verification_links: Mutex::new(HashMap::new()),
            asks: Mutex::new(AskQueues::default()),
        }
    }

    /// The connections markers for `broker` go on.
    pub fn marker_links(&self, broker: i32) -> Arc<LinkPool> {
        lock(&self.marker_links).entry(broker).or_default().clone()
    }

    /// The connections produce verifications for `broker`'s coordinators go on.
    pub fn verification_links(&self, broker: i32) -> Arc<LinkPool> {
        lock(&self.verification_links)
            .entry(broker)
            .or_default()
            .clone()
    }

    /// Queues a KIP-890 ask for `broker` (see [`AskQueues::push`]).
    pub(crate) fn push_ask(&self, broker: i32, ask: PendingAsk) -> Result<bool, PendingAsk> {
        lock(&self.asks).push(broker, ask)
    }

    /// The asks of the next AddPartitionsToTxn to `broker` (see [`AskQueues::next_request`]).
    pub(crate) fn next_asks(&self, broker: i32) -> Vec<PendingAsk> {
        lock(&self.asks).next_request(broker)
    }

    pub fn partition_of(&self, transactional_id: &str) -> i32 {
        fjord_txn::partition_for(transactional_id, self.shards.num_partitions())
    }

    /// Loads every `__transaction_state` partition this broker leads that is not loaded yet;
    /// returns the markers of transactions found prepared, to be written again.
    pub fn load_hosted(&self) -> Result<Vec<(i32, SharedShard, MarkerJob)>, KafkaError> {
        let mut resumed = Vec::new();
        for (partition, shard) in self.shards.load_hosted()? {
            let jobs = lock(&shard).core.unfinished_markers();
            if !jobs.is_empty() {
                tracing::info!(
                    partition,
                    resumed = jobs.len(),
                    "prepared transactions resumed"
                );
            }
            resumed.extend(jobs.into_iter().map(|job| (partition, shard.clone(), job)));
        }
        Ok(resumed)
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
        let result = coordinator_log::settle(&self.flusher, appended, "transaction").await;
        let result = result.map_err(|f| f.error_code());
        let mut guard = lock(shard);
        let written = ids
            .iter()
            .map(|id| guard.core.written(id, result))
            .collect();
        drop(guard);
        self.shards.deadline_moved();
        written
    }
}
