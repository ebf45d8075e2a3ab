//! The runtime hosting both kinds of coordinator: the group coordinator's shards (`fjord-group`,
//! one per `__consumer_offsets` partition) and the transaction coordinator's
//! (`fjord-txn`, one per `__transaction_state` partition). A `CoordinatorRuntime` holds the
//! shards of one kind: a shard per partition of the kind's internal topic this broker leads,
//! loaded by replaying the partition, unloaded when leadership moves (or its leader epoch
//! changes), its records appended through the partition like any produce (`coordinator::log`).
//! One timer task drives the deadlines of both kinds and both follow leadership in one place
//! (`server::coordinators`). What differs between the kinds stays in their shells: parked
//! requests (`coordinator::group`), markers and verification links (`coordinator::txn`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use fjord_common::{lock, LeaderEpoch};
use tokio::sync::Notify;

use crate::coordinator::log::{self as coordinator_log, Replayed};
use crate::replication::{Partition, ReplicaManager};
use fjord_common::errors::KafkaError;

/// A coordinator's state machine, as the runtime drives it.
pub trait Coordinator: Send + 'static {
    /// The internal topic whose partitions the shards own.
    const TOPIC: &'static str;
    /// What it is called in logs.
    const KIND: &'static str;

    /// A fresh shard for a partition led under `leader_epoch`, before its replay.
    fn load(leader_epoch: LeaderEpoch, config: &Self::Config) -> Self;
    type Config: Send + Sync + 'static;

    /// Applies one item of its partition's log, replayed at load.
    fn replay(&mut self, item: Replayed) -> Result<(), KafkaError>;

    /// When it next wants its timer run, if at all (milliseconds since the epoch).
    fn next_deadline(&self) -> Option<i64>;
}

/// One shard: the state machine and the partition it writes to.
pub struct Shard<C> {
    pub core: C,
    /// Its internal topic's partition: records go through it like any produce.
    pub partition: Arc<Partition>,
    /// The leader epoch it was loaded under: another epoch means another leader may have
    /// written since, so the shard is loaded again (for the transaction coordinator it is the
    /// coordinator epoch).
    pub leader_epoch: LeaderEpoch,
    /// Set, under its lock, when it is taken out of the runtime: a request that looked it up
    /// before then is refused instead of run on a shard nothing drives any more.
    pub unloaded: bool,
}

pub type SharedShard<C> = Arc<Mutex<Shard<C>>>;

/// The shards of one kind of coordinator this broker leads.
pub struct CoordinatorRuntime<C: Coordinator> {
    config: C::Config,
    num_partitions: i32,
    replicas: Arc<ReplicaManager>,
    /// Lock order: this map, then a shard; never the map under a shard's lock.
    shards: Mutex<HashMap<i32, SharedShard<C>>>,
    /// Wakes the timer task when a deadline may have moved earlier (shared by both kinds).
    deadline_moved: Arc<Notify>,
}

impl<C: Coordinator> CoordinatorRuntime<C> {
    pub fn new(
        config: C::Config,
        num_partitions: i32,
        replicas: Arc<ReplicaManager>,
        deadline_moved: Arc<Notify>,
    ) -> Self {
        CoordinatorRuntime {
            config,
            num_partitions,
            replicas,
            shards: Mutex::new(HashMap::new()),
            deadline_moved,
        }
    }

    pub fn num_partitions(&self) -> i32 {
        self.num_partitions
    }

    #[cfg(test)]
    pub fn replicas(&self) -> &Arc<ReplicaManager> {
        &self.replicas
    }

    /// Tells the timer task a deadline may have moved earlier.
    pub fn deadline_moved(&self) {
        self.deadline_moved.notify_one();
    }

    pub fn shard(&self, partition: i32) -> Option<SharedShard<C>> {
        lock(&self.shards).get(&partition).cloned()
    }

    /// Where the broker counts what its coordinators do.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        self.replicas.metrics()
    }

    pub fn all_shards(&self) -> Vec<(i32, SharedShard<C>)> {
        lock(&self.shards)
            .iter()
            .map(|(p, s)| (*p, s.clone()))
            .collect()
    }

    /// Whether `shard` is still the loaded shard of `partition` (not unloaded or reloaded).
    pub fn is_current(&self, partition: i32, shard: &SharedShard<C>) -> bool {
        lock(&self.shards)
            .get(&partition)
            .is_some_and(|s| Arc::ptr_eq(s, shard))
    }

    /// Runs `f` on the loaded shard of `partition` (`None` when there is none) under the
    /// shards' lock: no shard can be loaded or replaced meanwhile, so a shard either hears of
    /// what `f` writes or reads it in its load.
    pub fn with_shard<T>(&self, partition: i32, f: impl FnOnce(Option<&mut Shard<C>>) -> T) -> T {
        let shards = lock(&self.shards);
        match shards.get(&partition) {
            Some(shard) => f(Some(&mut lock(shard))),
            None => f(None),
        }
    }

    /// Loads every partition of the kind's topic this broker leads that has no shard yet, by
    /// replaying its log; answers the shards it loaded.
    pub fn load_hosted(&self) -> Result<Vec<(i32, SharedShard<C>)>, KafkaError> {
        let mut loaded = Vec::new();
        for partition in 0..self.num_partitions {
            if self.shard(partition).is_some() {
                continue;
            }
            let Some(hosted) = self.replicas.get(C::TOPIC, partition) else {
                continue;
            };
            let started = std::time::Instant::now();
            let leader_epoch = hosted.leader_epoch();
            let mut shard = Shard {
                core: C::load(leader_epoch, &self.config),
                partition: hosted,
                leader_epoch,
                unloaded: false,
            };
            // The long replay runs outside the shards' lock.
            let (replayed, loaded_to) = replay_into(&mut shard, None)?;
            let mut shards = lock(&self.shards);
            if let Entry::Vacant(slot) = shards.entry(partition) {
                // What was written since the replay read the log (a transaction's marker, while
                // no shard was there to hear it: see `with_shard`) is replayed before the shard
                // takes requests.
                replay_into(&mut shard, Some(loaded_to))?;
                let shard = Arc::new(Mutex::new(shard));
                slot.insert(shard.clone());
                loaded.push((partition, shard));
                tracing::info!(
                    partition,
                    replayed,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "{} coordinator shard loaded",
                    C::KIND
                );
            }
        }
        self.deadline_moved();
        Ok(loaded)
    }

    /// Unloads the shards of partitions this broker no longer leads, or leads under a new
    /// leader epoch: their keys answer NOT_COORDINATOR (or load afresh) from now. Answers the
    /// partitions unloaded.
    pub fn unload_unled(&self) -> Vec<i32> {
        let mut unloaded = Vec::new();
        lock(&self.shards).retain(|&partition, shard| {
            let mut shard = lock(shard);
            let kept = self.replicas.get(C::TOPIC, partition).is_some_and(|p| {
                Arc::ptr_eq(&p, &shard.partition) && p.leader_epoch() == shard.leader_epoch
            });
            if !kept {
                tracing::info!(
                    partition,
                    "{} coordinator shard unloaded: leadership moved",
                    C::KIND
                );
                shard.unloaded = true;
                unloaded.push(partition);
            }
            kept
        });
        unloaded
    }

    /// Unloads every shard: the broker is stopping.
    pub fn close(&self) {
        for (_, shard) in lock(&self.shards).drain() {
            lock(&shard).unloaded = true;
        }
    }

    /// True once the kind's topic exists and every partition of it this broker leads has a
    /// loaded shard.
    pub fn all_loaded(&self) -> bool {
        // The loaded partitions are copied out first: asking the replica manager under the
        // shards' lock would hold every request while an image is being applied.
        let loaded: HashSet<i32> = lock(&self.shards).keys().copied().collect();
        (0..self.num_partitions)
            .all(|p| loaded.contains(&p) || self.replicas.get(C::TOPIC, p).is_none())
            && self
                .replicas
                .applied_image()
                .is_some_and(|image| image.topic(C::TOPIC).is_some())
    }

    /// The shards whose deadline has come by `now`, and the earliest deadline of the others.
    pub fn due(&self, now: i64) -> (Vec<(i32, SharedShard<C>)>, Option<i64>) {
        let mut due = Vec::new();
        let mut next: Option<i64> = None;
        for (partition, shard) in self.all_shards() {
            match lock(&shard).core.next_deadline() {
                Some(d) if d <= now => due.push((partition, shard.clone())),
                Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                None => {}
            }
        }
        (due, next)
    }
}

/// Replays the shard's partition from `from` (its start when `None`) to its end into the
/// shard; answers how many records it replayed and the offset it reached.
fn replay_into<C: Coordinator>(
    shard: &mut Shard<C>,
    from: Option<i64>,
) -> Result<(usize, i64), KafkaError> {
    let core = &mut shard.core;
    coordinator_log::replay(&shard.partition, from, |item| core.replay(item))
}

/// How long a shard whose deadline is still due after its timer ran (its write was refused or
/// failed) waits before it is tried again: Kafka retries a coordinator timer's failed write
/// after 500 ms.
const TIMER_RETRY_MS: i64 = 500;

/// The deadline a shard's timer, run at `now`, left: one still due is tried again after a
/// pause rather than spun on.
pub fn after_tick(deadline: Option<i64>, now: i64) -> Option<i64> {
    deadline.map(|d| if d <= now { now + TIMER_RETRY_MS } else { d })
}

/// The earliest of two deadlines.
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
