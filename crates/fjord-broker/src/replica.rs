//! The partitions this broker hosts and the produce/fetch operations on them.
//!
//! `ReplicaManager` follows the metadata image: when a partition led by this node appears it
//! opens or creates its log, when a topic disappears it deletes the logs. Each `Partition` owns
//! its log behind a mutex; only produce (append), the flusher (recovery point, high watermark)
//! and retention mutate it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use fjord_common::{lock, LeaderEpoch, TopicId, TopicPartition};
use fjord_metadata::MetadataImage;
use fjord_records::control::EndTxnMarker;
use fjord_records::{AppendBatch, Compression, TimestampType, ValidationConfig};
use fjord_storage::log::{AppendInfo, CompactionConfig, Log, LogConfig};
use fjord_storage::log_manager::{LogManager, Retire};
use tokio::sync::{oneshot, Notify};

use crate::partition::{LeaderAndIsr, PartitionState, Role};
use fjord_common::errors;
use fjord_config::{BrokerConfig, DynamicBrokerConfig, TopicConfig};

/// Largest records section accepted after decompression, per batch: bounds broker memory when a
/// small compressed batch claims a huge payload.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// One hosted partition: its log and its replication state. Created by
/// `ReplicaManager::apply_image`, which afterwards updates it in place (configs, leadership), so
/// whoever holds it (a group coordinator shard) keeps a live one.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: TopicId,
    pub log: Arc<Mutex<Log>>,
    settings: Mutex<Settings>,
    /// Role, epochs, ISR and the high watermark. Locked after the log, never before.
    state: Mutex<PartitionState>,
    /// Long-poll fetches waiting for this partition's high watermark to move (its share of
    /// Kafka's fetch purgatory): woken and cleared when it does.
    delayed_fetches: Mutex<Vec<Weak<Notify>>>,
    /// acks=all produces waiting for the high watermark to pass their records (its share of
    /// Kafka's produce purgatory): each answered when it does.
    delayed_produces: Mutex<Vec<(i64, oneshot::Sender<()>)>>,
    /// Followers' long-poll fetches: woken by appends as well as by the high watermark.
    delayed_replica_fetches: Mutex<Vec<Weak<Notify>>>,
}

#[derive(Clone)]
struct Settings {
    config: Arc<TopicConfig>,
    /// fsync before acknowledging (fjord's default) rather than flush by interval.
    durable: bool,
}

impl Partition {
    pub fn config(&self) -> Arc<TopicConfig> {
        Arc::clone(&lock(&self.settings).config)
    }

    pub fn durable(&self) -> bool {
        lock(&self.settings).durable
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        lock(&self.state).leader_epoch()
    }

    /// Whether this broker leads the partition, as the metadata log last said.
    pub fn is_leader(&self) -> bool {
        lock(&self.state).role() == Role::Leader
    }

    pub fn role(&self) -> Role {
        lock(&self.state).role()
    }

    /// See [`PartitionState::preferred_read_replica`].
    pub fn preferred_read_replica(
        &self,
        fetch_offset: i64,
        client_rack: &str,
        rack_of: impl Fn(i32) -> Option<String>,
    ) -> Option<i32> {
        lock(&self.state).preferred_read_replica(fetch_offset, client_rack, rack_of)
    }

    /// The ISR and how many replicas the partition has, as the metadata log last said.
    pub fn isr_and_replica_count(&self) -> (Vec<fjord_common::BrokerId>, usize) {
        let state = lock(&self.state);
        (
            state.leadership().isr.clone(),
            state.leadership().replicas.len(),
        )
    }

    /// Why an acks=all write may not be taken now, if it may not: fewer in-sync replicas than
    /// `min.insync.replicas`. As in Kafka, a partition with fewer replicas needs them all (the
    /// setting is capped at its replica count).
    pub fn min_isr_shortfall(&self) -> Option<String> {
        let (isr, replicas) = self.isr_and_replica_count();
        let min_isr = self
            .config()
            .get_i64("min.insync.replicas")
            .min(i64::try_from(replicas).unwrap_or(i64::MAX));
        (i64::try_from(isr.len()).unwrap_or(i64::MAX) < min_isr).then(|| {
            format!(
                "The size of the current ISR {isr:?} is insufficient to satisfy the min.isr requirement of {min_isr} for partition {}",
                self.tp
            )
        })
    }

    /// As `delay_fetch`, for a follower's fetch: woken by appends too, since a follower reads
    /// up to the log end.
    pub fn delay_replica_fetch(&self, waiter: &Arc<Notify>) {
        let mut waiting = lock(&self.delayed_replica_fetches);
        waiting.retain(|w| w.strong_count() > 0);
        waiting.push(Arc::downgrade(waiter));
    }

    /// Leader: follower `replica` fetched from `fetch_offset` (it holds everything below).
    /// The high watermark moves as the partition's state says.
    pub fn follower_fetched(
        &self,
        log: &mut Log,
        replica: fjord_common::BrokerId,
        fetch_offset: i64,
        broker_epoch: i64,
        now_ms: i64,
    ) -> Result<(), crate::partition::NotAReplica> {
        let moved =
            lock(&self.state).on_follower_fetch(replica, fetch_offset, broker_epoch, now_ms)?;
        if let Some(hw) = moved {
            self.high_watermark_moved(log, hw);
        }
        Ok(())
    }

    /// Leader: the ISR change due now (see `PartitionState::propose_isr_change`), with the
    /// epochs it is asked under; it is pending until `isr_change_answered`.
    pub fn propose_isr_change(
        &self,
        now_ms: i64,
        lag_time_max_ms: i64,
        eligible: impl Fn(fjord_common::BrokerId) -> bool,
    ) -> Option<LeaderAndIsr> {
        let log = lock(&self.log);
        let mut state = lock(&self.state);
        let epoch_start = log
            .epoch_start_offset(state.leader_epoch())
            .unwrap_or(i64::MAX);
        drop(log);
        let isr = state.propose_isr_change(now_ms, lag_time_max_ms, epoch_start, eligible)?;
        Some(LeaderAndIsr {
            isr,
            ..state.leadership().clone()
        })
    }

    /// The controller's answer to a proposed ISR change. The high watermark moves as the new
    /// ISR says.
    pub fn isr_change_answered(&self, answer: IsrAnswer, now_ms: i64) {
        let mut log = lock(&self.log);
        let mut state = lock(&self.state);
        let moved = match answer {
            IsrAnswer::Committed(leadership) => {
                state.isr_change_done();
                state.apply(leadership, now_ms).ok().flatten()
            }
            IsrAnswer::Refused => {
                state.isr_change_done();
                None
            }
            IsrAnswer::Unknown => {
                state.isr_change_unknown();
                None
            }
            // Pending until the metadata log brings the partition's newer state.
            IsrAnswer::AwaitMetadata => None,
        };
        drop(state);
        if let Some(hw) = moved {
            self.high_watermark_moved(&mut log, hw);
        }
    }

    /// Follower: appends batches fetched from the leader under `leader_epoch`, offsets and
    /// epochs as the leader wrote them. Refused once the partition has another leader or
    /// epoch than the fetch was made under.
    pub fn append_as_follower(
        &self,
        log: &mut Log,
        records: &Bytes,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<usize, AppendError> {
        let mut state = lock(&self.state);
        if !matches!(state.role(), Role::Follower { .. }) || state.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeader);
        }
        let appended = log.append_as_follower(records, now_ms)?;
        state.on_append(log.log_end_offset(), !self.durable());
        Ok(appended)
    }

    /// Whether this broker follows the partition under `leader_epoch`: a fetch answer made under
    /// another epoch (a stale fetcher's) must not touch the log.
    pub fn follows_at(&self, leader_epoch: LeaderEpoch) -> bool {
        let state = lock(&self.state);
        matches!(state.role(), Role::Follower { .. }) && state.leader_epoch() == leader_epoch
    }

    /// Follower: the leader's high watermark from a fetch made under `leader_epoch` (applied as
    /// far as this log is durable).
    pub fn leader_high_watermark(&self, log: &mut Log, hw: i64, leader_epoch: LeaderEpoch) {
        let moved = {
            let mut state = lock(&self.state);
            if state.leader_epoch() != leader_epoch {
                return;
            }
            state.on_leader_high_watermark(hw)
        };
        if let Some(hw) = moved {
            self.high_watermark_moved(log, hw);
        }
    }

    /// Follower: the local log is durable below this (fjord's fsync mode; the log end in
    /// page-cache mode) — what a follower may announce as its position.
    pub fn durable_end(&self) -> i64 {
        lock(&self.state).durable_end()
    }

    /// Truncates the log to `offset` as the follower of `leader_epoch` (a divergent tail; an
    /// offset past the log end, or below its start, restarts the log empty there: the leader's
    /// log starts there). The state hears the log's end whatever happens; a failed disk is
    /// reported by the caller.
    pub fn truncate(
        &self,
        log: &mut Log,
        offset: i64,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<(), AppendError> {
        let mut state = lock(&self.state);
        if !matches!(state.role(), Role::Follower { .. }) || state.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeader);
        }
        let outcome = if offset < log.log_start_offset()
            || offset > log.log_end_offset()
            || log.log_end_offset() == log.log_start_offset()
        {
            log.truncate_fully_and_start_at(offset, now_ms)
        } else {
            log.truncate_to(offset)
        };
        state.on_truncate(log.log_end_offset());
        outcome.map_err(AppendError::from)
    }

    /// Wakes `waiter` the next time the high watermark moves. A waiter registered before it
    /// reads misses nothing: the wake-up waits in the `Notify` until it is awaited.
    pub fn delay_fetch(&self, waiter: &Arc<Notify>) {
        let mut waiting = lock(&self.delayed_fetches);
        // Fetches that gave up (answered, timed out) leave dead entries: the queue stays as long
        // as the fetches still waiting.
        waiting.retain(|w| w.strong_count() > 0);
        waiting.push(Arc::downgrade(waiter));
    }

    /// Resolves once the high watermark reaches `offset`: every in-sync replica has the records
    /// below it (acks=all). Dropping the receiver (the request gave up) leaves a dead entry that
    /// the next waiter clears.
    /// `leader_epoch` is the epoch the records were appended under: if this broker no longer
    /// leads at it, the records may be truncated and the wait is refused at once (the receiver
    /// sees its sender dropped).
    pub fn delay_produce(&self, offset: i64, leader_epoch: LeaderEpoch) -> oneshot::Receiver<()> {
        let (done, wait) = oneshot::channel();
        // Held while the high watermark is read: a move that lands after the read drains the
        // queue only after this entry is in it.
        let mut waiting = lock(&self.delayed_produces);
        let state = lock(&self.state);
        if state.role() != Role::Leader || state.leader_epoch() != leader_epoch {
            drop(done);
        } else if state.high_watermark() >= offset {
            let _ = done.send(());
        } else {
            waiting.retain(|(_, w)| !w.is_closed());
            waiting.push((offset, done));
        }
        wait
    }

    /// The high watermark moved to `hw`: into the log; every waiting fetch is woken and every
    /// produce it covers answered.
    fn high_watermark_moved(&self, log: &mut Log, hw: i64) {
        log.set_high_watermark(hw);
        wake(&self.delayed_fetches);
        wake(&self.delayed_replica_fetches);
        let mut produces = lock(&self.delayed_produces);
        if !produces.is_empty() {
            let (done, still): (Vec<_>, Vec<_>) = std::mem::take(&mut *produces)
                .into_iter()
                .partition(|(offset, _)| *offset <= hw);
            *produces = still;
            for (_, waiter) in done {
                let _ = waiter.send(());
            }
        }
    }

    /// Appends `batches` as the leader, stamped with the partition's leader epoch, to `log`
    /// (this partition's, locked by the caller); the high watermark moves as the partition's
    /// state says.
    pub fn append_as_leader<B>(
        &self,
        log: &mut Log,
        batches: Vec<B>,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError>
    where
        B: TryInto<AppendBatch>,
        fjord_storage::StorageError: From<B::Error>,
    {
        self.append_under_leadership(log, |log, leader_epoch| {
            log.append_as_leader(batches, leader_epoch, now_ms)
        })
    }

    /// Appends a batch a coordinator built (`Log::append_as_coordinator`: producer epochs
    /// checked, sequences not) as the leader, as `append_as_leader` does.
    pub fn append_as_coordinator(
        &self,
        log: &mut Log,
        batch: AppendBatch,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        self.append_under_leadership(log, |log, leader_epoch| {
            log.append_as_coordinator(batch, leader_epoch, now_ms)
        })
    }

    /// Runs `append` (given the leader epoch to stamp) if this broker leads, then moves the high
    /// watermark as the partition's state says.
    fn append_under_leadership(
        &self,
        log: &mut Log,
        append: impl FnOnce(&mut Log, LeaderEpoch) -> Result<AppendInfo, fjord_storage::StorageError>,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        let mut state = lock(&self.state);
        // Leadership can move between finding the partition and appending: a broker that was
        // fenced, or lost the partition, appends nothing.
        if state.role() != Role::Leader {
            return Err(AppendError::NotLeader);
        }
        let leader_epoch = state.leader_epoch();
        let info = append(log, leader_epoch)?;
        let moved = state.on_append(log.log_end_offset(), !self.durable());
        drop(state);
        if let Some(hw) = moved {
            self.high_watermark_moved(log, hw);
        } else {
            wake(&self.delayed_replica_fetches);
        }
        Ok((info, leader_epoch))
    }

    /// Appends a transaction's commit or abort marker as leader (WriteTxnMarkers), as
    /// [`Partition::append_as_leader`] appends records.
    pub fn append_marker(
        &self,
        log: &mut Log,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        self.append_under_leadership(log, |log, leader_epoch| {
            log.append_marker(
                producer_id,
                producer_epoch,
                marker,
                epoch_bumps,
                leader_epoch,
                now_ms,
            )
            .map(|(info, _)| info)
        })
    }

    /// This broker no longer leads: the acks=all produces still waiting are refused
    /// (NOT_LEADER_OR_FOLLOWER), since a new leader may not have their records.
    fn leadership_lost(&self) {
        lock(&self.delayed_produces).clear();
        wake(&self.delayed_fetches);
        wake(&self.delayed_replica_fetches);
    }
}

/// Wakes and clears a delayed-fetch queue.
fn wake(queue: &Mutex<Vec<Weak<Notify>>>) {
    for waiter in std::mem::take(&mut *lock(queue)) {
        if let Some(waiter) = waiter.upgrade() {
            waiter.notify_one();
        }
    }
}

impl crate::flusher::Durable for Partition {
    fn log(&self) -> &Arc<Mutex<Log>> {
        &self.log
    }

    fn made_durable(&self, log: &mut Log, offset: i64) {
        let moved = lock(&self.state).on_durable(offset);
        if let Some(hw) = moved {
            self.high_watermark_moved(log, hw);
        }
    }
}

/// What became of a proposed ISR change.
pub enum IsrAnswer {
    /// Committed: the partition's state as the controller has it now.
    Committed(LeaderAndIsr),
    /// Refused, not committed: the next check may propose anew.
    Refused,
    /// No answer: it may have committed; asked again as it is.
    Unknown,
    /// Refused because the controller's partition is newer than this leader's view: pending
    /// until the metadata log brings that.
    AwaitMetadata,
}

impl Partition {
    /// The broker epoch follower `id` fetched with, as this leader saw (-1: not known).
    pub fn follower_broker_epoch(&self, id: fjord_common::BrokerId) -> i64 {
        lock(&self.state)
            .followers()
            .get(&id)
            .map_or(-1, |f| f.broker_epoch)
    }
}

/// Why an append as the leader failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("this broker is not the leader of the partition")]
    NotLeader,
    /// A transactional batch whose transaction ended (a marker came) after it was verified.
    #[error("the producer's transaction ended after the batch was verified")]
    TransactionEnded,
    #[error(transparent)]
    Storage(#[from] fjord_storage::StorageError),
}

/// A produce failure for one partition: Kafka's error code and message.
#[derive(Debug, Clone)]
pub struct PartitionError {
    pub code: i16,
    pub message: Option<String>,
    /// Per-record errors (batch index within the batch and message), for INVALID_RECORD.
    pub record_errors: Vec<(i32, String)>,
}

impl PartitionError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: Some(message.into()),
            record_errors: Vec::new(),
        }
    }
}

pub struct Appended {
    pub info: AppendInfo,
    /// The leader epoch the records were appended under (acks=all waits only while it leads).
    pub leader_epoch: LeaderEpoch,
    pub log_append_time_ms: i64,
}

pub struct ReplicaManager {
    node_id: i32,
    broker_config: Arc<BrokerConfig>,
    log_manager: LogManager,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// The last image applied, which the next one is compared with; held through an apply.
    applied: Mutex<Option<Arc<MetadataImage>>>,
    /// The same image, for readers that must not wait for an apply under way.
    current: RwLock<Option<Arc<MetadataImage>>>,
    /// Bumped whenever hosted partitions or their leadership change: the replica fetchers
    /// follow it.
    changes: tokio::sync::watch::Sender<u64>,
}

fn lock_log(log: &Mutex<Log>) -> Result<std::sync::MutexGuard<'_, Log>, PartitionError> {
    log.lock().map_err(|_| {
        PartitionError::new(errors::KAFKA_STORAGE_ERROR, "partition log lock poisoned")
    })
}

impl ReplicaManager {
    pub fn new(node_id: i32, broker_config: Arc<BrokerConfig>, log_manager: LogManager) -> Self {
        ReplicaManager {
            node_id,
            broker_config,
            log_manager,
            partitions: RwLock::new(HashMap::new()),
            applied: Mutex::new(None),
            current: RwLock::new(None),
            changes: tokio::sync::watch::channel(0).0,
        }
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Wakes after every change of hosted partitions or their leadership.
    pub fn subscribe_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The partition if this broker hosts a replica of it, leader or follower.
    pub fn hosted(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.read().ok()?.get(tp).cloned()
    }

    /// The last metadata image the partitions were brought in line with.
    pub fn applied_image(&self) -> Option<Arc<MetadataImage>> {
        self.current.read().ok()?.clone()
    }

    pub fn log_manager(&self) -> &LogManager {
        &self.log_manager
    }

    /// A write or fsync failed under `partition_dir`: its log dir goes offline. With every log dir
    /// offline the broker cannot serve anything and halts, as Kafka does.
    pub fn storage_failure(&self, partition_dir: &std::path::Path, error: &str) {
        if self.log_manager.take_dir_offline(partition_dir, error) {
            tracing::error!("every log dir has failed: halting the broker");
            std::process::exit(1);
        }
    }

    /// The partition, if this broker leads it: what clients produce to and fetch from, and
    /// what a group coordinator appends to.
    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let key = TopicPartition::new(topic, partition);
        let partition = self.partitions.read().ok()?.get(&key).cloned()?;
        partition.is_leader().then_some(partition)
    }

    /// A partition this broker hosts a replica of, leader or follower (consumers may read from
    /// followers, KIP-392).
    pub fn get_hosted(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let key = TopicPartition::new(topic, partition);
        self.partitions.read().ok()?.get(&key).cloned()
    }

    /// Every partition this broker hosts a replica of, leader or not (retention, flushing and
    /// checkpoints run on all of them).
    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The topic config and log config a topic gets from its overrides in the image.
    pub fn topic_config(&self, image: &MetadataImage, topic: &str) -> TopicConfig {
        let dynamic = DynamicBrokerConfig::from_image(image, self.node_id);
        self.topic_config_with(image, &dynamic, topic)
    }

    /// As `topic_config`, with this broker's dynamic configs already read from the image.
    fn topic_config_with(
        &self,
        image: &MetadataImage,
        dynamic: &DynamicBrokerConfig,
        topic: &str,
    ) -> TopicConfig {
        let empty = BTreeMap::new();
        let overrides = image.topic_config(topic).unwrap_or(&empty);
        TopicConfig::resolve(&self.broker_config, dynamic, overrides)
    }

    /// Brings hosted partitions in line with the image: opens or creates logs for partitions this
    /// node leads, refreshes configs and leader epochs, deletes logs of removed topics. Only what
    /// changed since the last image applied is touched (the metadata delta): every partition when
    /// broker-level configs changed, else only the partitions of changed or removed topics. An
    /// image older than the last one applied is ignored.
    pub fn apply_image(&self, image: &Arc<MetadataImage>, now_ms: i64) -> Result<(), String> {
        let mut applied = lock(&self.applied);
        let scope = match applied.as_ref() {
            Some(last) if last.offset() > image.offset() || Arc::ptr_eq(last, image) => {
                return Ok(())
            }
            Some(last) => {
                let changes = image.changes_since(last);
                if changes.is_empty() {
                    *applied = Some(image.clone());
                    if let Ok(mut current) = self.current.write() {
                        *current = Some(image.clone());
                    }
                    return Ok(());
                }
                (!changes.broker_configs_changed).then(|| {
                    changes
                        .changed_topics
                        .into_iter()
                        .chain(changes.removed_topics.into_iter().map(|(name, _)| name))
                        .collect::<HashSet<String>>()
                })
            }
            None => None,
        };
        self.apply_changes(image, scope.as_ref(), now_ms)?;
        *applied = Some(image.clone());
        if let Ok(mut current) = self.current.write() {
            *current = Some(image.clone());
        }
        Ok(())
    }

    /// Applies `image` to the partitions of the topics in `scope` (all: None).
    fn apply_changes(
        &self,
        image: &MetadataImage,
        scope: Option<&HashSet<String>>,
        now_ms: i64,
    ) -> Result<(), String> {
        let in_scope = |topic: &str| scope.is_none_or(|s| s.contains(topic));
        let mut wanted: HashMap<TopicPartition, (Arc<TopicConfig>, TopicId, LeaderAndIsr)> =
            HashMap::new();
        // Read once: every topic's defaults layer the same broker configs.
        let dynamic = DynamicBrokerConfig::from_image(image, self.node_id);
        let topics: Vec<&Arc<fjord_metadata::TopicImage>> = match scope {
            None => image.topics().collect(),
            Some(names) => names.iter().filter_map(|n| image.topic(n)).collect(),
        };
        for topic in topics {
            let config = Arc::new(self.topic_config_with(image, &dynamic, &topic.name));
            for (index, partition) in topic.partitions.iter().enumerate() {
                // Every replica this broker holds stays, led or not: a leader that is fenced
                // keeps its log for when it leads again.
                if partition.replicas.contains(&self.node_id) {
                    wanted.insert(
                        TopicPartition::new(topic.name.clone(), index as i32),
                        (
                            config.clone(),
                            topic.topic_id,
                            LeaderAndIsr {
                                leader: partition.leader,
                                leader_epoch: partition.leader_epoch,
                                partition_epoch: partition.partition_epoch,
                                replicas: partition.replicas.clone(),
                                isr: partition.isr.clone(),
                            },
                        ),
                    );
                }
            }
        }
        // The map's lock is taken only to read it or to change it, never across the disk work
        // below (deleting and creating logs, leader epoch checkpoints): every produce and fetch
        // takes it. Images are applied one at a time (`applied`), so nothing else changes the
        // map in between.
        fn poisoned<G>(_: std::sync::PoisonError<G>) -> String {
            "partition map poisoned".to_string()
        }
        let removed: Vec<TopicPartition> = {
            let mut partitions = self.partitions.write().map_err(poisoned)?;
            let removed: Vec<TopicPartition> = partitions
                .keys()
                .filter(|tp| in_scope(&tp.topic) && !wanted.contains_key(*tp))
                .cloned()
                .collect();
            for tp in &removed {
                partitions.remove(tp);
            }
            removed
        };
        for tp in removed {
            if let Err(error) = self.log_manager.retire_log(&tp, Retire::Delete, now_ms) {
                tracing::warn!(%tp, %error, "could not delete the log of a removed partition");
            }
        }
        let hosted_now: HashMap<TopicPartition, Arc<Partition>> = {
            let partitions = self.partitions.read().map_err(poisoned)?;
            wanted
                .keys()
                .filter_map(|tp| partitions.get(tp).map(|p| (tp.clone(), p.clone())))
                .collect()
        };
        // Logs on disk for partitions the image does not give this broker (a topic deleted, or
        // the replica moved away, while it was down): set aside, as Kafka does, not deleted.
        for (tp, _) in self.log_manager.all_logs() {
            if in_scope(&tp.topic) && !wanted.contains_key(&tp) && !hosted_now.contains_key(&tp) {
                if let Err(error) = self.log_manager.retire_log(&tp, Retire::Stray, now_ms) {
                    tracing::warn!(%tp, %error, "could not set a stray log aside");
                }
            }
        }
        /// A partition this broker leads, with its log found or created.
        struct Placed {
            tp: TopicPartition,
            settings: Settings,
            topic_id: TopicId,
            leadership: LeaderAndIsr,
            log_config: LogConfig,
            log: Arc<Mutex<Log>>,
            /// Hosted already, on this very log: updated in place.
            hosted: Option<Arc<Partition>>,
        }
        let mut placed = Vec::with_capacity(wanted.len());
        for (tp, (config, topic_id, leadership)) in wanted {
            let durable = !(config.is_set("flush.messages") || config.is_set("flush.ms"));
            let log_config = log_config(&config, durable);
            let mut existing = self.log_manager.get(&tp);
            let existing_id = existing.as_ref().and_then(|log| lock(log).topic_id());
            if existing_id.is_some_and(|id| id != topic_id) {
                // The topic was deleted and another made under its name before this broker
                // saw the deletion: the log on disk belongs to the old one.
                let retire = if hosted_now.contains_key(&tp) {
                    Retire::Delete
                } else {
                    Retire::Stray
                };
                self.log_manager
                    .retire_log(&tp, retire, now_ms)
                    .map_err(|e| format!("cannot retire the old log of {tp}: {e}"))?;
                existing = None;
            }
            let log = match existing {
                Some(log) => log,
                None => self
                    .log_manager
                    .create_log(tp.clone(), topic_id, log_config.clone(), now_ms)
                    .map_err(|e| format!("cannot create the log of {tp}: {e}"))?,
            };
            let hosted = hosted_now
                .get(&tp)
                .filter(|p| p.topic_id == topic_id && Arc::ptr_eq(&p.log, &log))
                .cloned();
            placed.push(Placed {
                tp,
                settings: Settings { config, durable },
                topic_id,
                leadership,
                log_config,
                log,
                hosted,
            });
        }
        // Recording a new leader epoch fsyncs a checkpoint per partition: at start-up, when
        // every partition gets one, they go to the disk side by side.
        let states = fjord_storage::parallel::map(
            placed.iter().collect(),
            fjord_storage::parallel::DISK_THREADS,
            |p: &Placed| {
                let mut log = lock(&p.log);
                log.set_config(p.log_config.clone());
                if p.leadership.leader == self.node_id {
                    if let Err(error) = log.become_leader(p.leadership.leader_epoch) {
                        tracing::warn!(tp = %p.tp, %error, "cannot record the leader epoch start");
                    }
                }
                match &p.hosted {
                    Some(hosted) => {
                        let mut state = lock(&hosted.state);
                        let was_leader = state.role() == Role::Leader;
                        let applied = state.apply(p.leadership.clone(), now_ms);
                        let lost = was_leader && state.role() != Role::Leader;
                        drop(state);
                        if lost {
                            hosted.leadership_lost();
                        }
                        match applied {
                            Ok(Some(hw)) => hosted.high_watermark_moved(&mut log, hw),
                            Ok(None) => {}
                            Err(stale) => {
                                // An ISR change answered by the controller before this node's
                                // image applied it.
                                tracing::debug!(tp = %p.tp, %stale, "partition state from the metadata log ignored");
                            }
                        }
                        None
                    }
                    None => {
                        // Everything that survived recovery is durable: a high watermark
                        // checkpointed lower rises to it when this broker holds the whole ISR.
                        let state = PartitionState::new(
                            self.node_id,
                            p.leadership.clone(),
                            log.log_end_offset(),
                            log.recovery_point(),
                            log.high_watermark(),
                            now_ms,
                        );
                        log.set_high_watermark(state.high_watermark());
                        Some(state)
                    }
                }
            },
        );
        let mut warned = std::collections::HashSet::new();
        let mut added = Vec::new();
        for (
            Placed {
                tp,
                settings,
                topic_id,
                log,
                hosted,
                ..
            },
            state,
        ) in placed.into_iter().zip(states)
        {
            let config_changed = hosted
                .as_ref()
                .is_none_or(|p| *p.config() != *settings.config);
            if config_changed && warned.insert(tp.topic.clone()) {
                for (key, value) in settings.config.ignored_overrides() {
                    tracing::warn!(topic = %tp.topic, key, value, "topic config accepted but not acted upon by fjord yet");
                }
            }
            match (hosted, state) {
                (Some(hosted), _) => {
                    if config_changed {
                        *lock(&hosted.settings) = settings;
                    }
                }
                (None, Some(state)) => {
                    added.push(Arc::new(Partition {
                        tp,
                        topic_id,
                        log,
                        settings: Mutex::new(settings),
                        state: Mutex::new(state),
                        delayed_fetches: Mutex::new(Vec::new()),
                        delayed_produces: Mutex::new(Vec::new()),
                        delayed_replica_fetches: Mutex::new(Vec::new()),
                    }));
                }
                (None, None) => {}
            }
        }
        if !added.is_empty() {
            let mut partitions = self.partitions.write().map_err(poisoned)?;
            for partition in added {
                partitions.insert(partition.tp.clone(), partition);
            }
        }
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Validates and appends one partition's records from a produce request. Runs on the
    /// connection's reader, in request order, so pipelined batches of one producer append in the
    /// order they were sent.
    /// Appends a transaction marker to a partition this broker leads (WriteTxnMarkers).
    pub fn append_marker(
        &self,
        partition: &Partition,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), PartitionError> {
        self.leader_append(partition, |partition, log| {
            partition.append_marker(
                log,
                producer_id,
                producer_epoch,
                marker,
                epoch_bumps,
                now_ms,
            )
        })
    }

    /// Runs a leader append under the partition's log lock, turning its failures into Kafka
    /// errors; a failed disk takes its log dir offline.
    fn leader_append(
        &self,
        partition: &Partition,
        append: impl FnOnce(&Partition, &mut Log) -> Result<(AppendInfo, LeaderEpoch), AppendError>,
    ) -> Result<(AppendInfo, LeaderEpoch), PartitionError> {
        let mut log = lock_log(&partition.log)?;
        match append(partition, &mut log) {
            Ok(appended) => Ok(appended),
            Err(AppendError::NotLeader) => Err(PartitionError::new(
                errors::NOT_LEADER_OR_FOLLOWER,
                AppendError::NotLeader.to_string(),
            )),
            Err(AppendError::TransactionEnded) => Err(PartitionError::new(
                errors::TRANSACTION_ABORTABLE,
                AppendError::TransactionEnded.to_string(),
            )),
            Err(AppendError::Storage(e)) => {
                let dir = log.dir().to_path_buf();
                drop(log);
                if e.is_disk_failure() {
                    self.storage_failure(&dir, &e.to_string());
                }
                Err(PartitionError::new(e.kafka_error_code(), e.to_string()))
            }
        }
    }

    /// Appends a client's produce to `partition`; a transactional batch only if `verification`
    /// still holds under the log's lock (else TRANSACTION_ABORTABLE: its transaction ended
    /// since it was verified).
    pub(crate) fn append(
        &self,
        partition: &Partition,
        records: &Bytes,
        verification: Option<crate::txn_verify::TxnVerification>,
        now_ms: i64,
    ) -> Result<Appended, PartitionError> {
        let config = partition.config();
        let batches = fjord_records::split_batches(records).map_err(|e| records_error(&e))?;
        if batches.is_empty() {
            return Err(PartitionError::new(
                errors::INVALID_RECORD,
                "produce request carried no record batch",
            ));
        }
        // Produce v3+ (all fjord accepts) carries exactly one batch per partition, as Kafka
        // enforces; a client sending more is broken, not batching.
        if batches.len() > 1 {
            return Err(PartitionError::new(
                errors::INVALID_RECORD,
                "a produce request may carry only one record batch per partition",
            ));
        }
        let timestamp_type = if config.log_append_time() {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
        let validation = ValidationConfig {
            max_batch_bytes: config.get_i64("max.message.bytes").max(0) as usize,
            max_decompressed_bytes: MAX_DECOMPRESSED_BATCH_BYTES,
            require_keys: config.compacted(),
            timestamp_type,
            now_ms,
            timestamp_before_max_ms: config.get_i64("message.timestamp.before.max.ms"),
            timestamp_after_max_ms: config.get_i64("message.timestamp.after.max.ms"),
            origin: fjord_records::AppendOrigin::Client,
        };
        let target = match config.get("compression.type") {
            "producer" => None,
            name => Compression::from_config_name(name),
        };
        let mut owned = Vec::with_capacity(batches.len());
        for batch in batches {
            let validated = fjord_records::validate_batch(&batch, &validation)
                .map_err(|e| records_error(&e))?;
            // Only the header is copied for the log's rewrites; the records stay in the frame
            // unless the topic's codec differs, which needs a real rewrite.
            let batch = match target {
                Some(codec) if codec != validated.compression => {
                    fjord_records::recompress(&batch, codec, None, MAX_DECOMPRESSED_BATCH_BYTES)
                        .map_err(|e| records_error(&e))?
                        .freeze()
                }
                _ => batch,
            };
            let mut batch = AppendBatch::new(batch).map_err(|e| records_error(&e))?;
            match timestamp_type {
                TimestampType::LogAppendTime => batch.set_log_append_time(now_ms),
                TimestampType::CreateTime => {
                    batch.set_max_timestamp(TimestampType::CreateTime, validated.max_timestamp)
                }
            }
            owned.push(batch);
        }
        let (info, leader_epoch) = self.leader_append(partition, |partition, log| {
            if let Some(v) = verification {
                if !log.transaction_verified(v.producer_id, v.producer_epoch, v.guard) {
                    return Err(AppendError::TransactionEnded);
                }
            }
            partition.append_as_leader(log, owned, now_ms)
        })?;
        let log_append_time_ms = if timestamp_type == TimestampType::LogAppendTime {
            now_ms
        } else {
            -1
        };
        Ok(Appended {
            info,
            leader_epoch,
            log_append_time_ms,
        })
    }
}

fn records_error(error: &fjord_records::RecordsError) -> PartitionError {
    let record_errors = match error {
        fjord_records::RecordsError::RecordErrors(list) => list
            .iter()
            .map(|e| (e.batch_index, e.kind.message().to_string()))
            .collect(),
        _ => Vec::new(),
    };
    PartitionError {
        code: error.kafka_error_code(),
        message: Some(error.to_string()),
        record_errors,
    }
}

/// The storage settings a topic's config implies.
pub fn log_config(config: &TopicConfig, durable: bool) -> LogConfig {
    let positive = |name: &str| config.get_i64(name).max(0) as u64;
    let optional = |name: &str| {
        let v = config.get_i64(name);
        (!durable && v != i64::MAX).then_some(v)
    };
    LogConfig {
        segment_bytes: positive("segment.bytes"),
        segment_ms: config.get_i64("segment.ms"),
        segment_index_bytes: positive("segment.index.bytes"),
        index_interval_bytes: positive("index.interval.bytes"),
        retention_bytes: config.get_i64("retention.bytes"),
        retention_ms: config.get_i64("retention.ms"),
        flush_interval_messages: optional("flush.messages").map(|v| v.max(1) as u64),
        flush_interval_ms: optional("flush.ms"),
        file_delete_delay_ms: config.get_i64("file.delete.delay.ms"),
        cleanup_policy_delete: config.cleanup_policy_delete(),
        compaction: CompactionConfig {
            compact: config.compacted(),
            min_cleanable_dirty_ratio: config
                .get("min.cleanable.dirty.ratio")
                .trim()
                .parse()
                .unwrap_or(0.5),
            min_compaction_lag_ms: config.get_i64("min.compaction.lag.ms"),
            max_compaction_lag_ms: config.get_i64("max.compaction.lag.ms"),
            delete_retention_ms: config.get_i64("delete.retention.ms"),
        },
    }
}

/// The metadata record of partition `index` of topic `topic_id`, on broker 1 alone, which leads it.
#[cfg(test)]
pub(crate) fn led_by_broker_1(
    topic_id: fjord_common::Uuid,
    index: i32,
) -> fjord_metadata::MetadataRecord {
    led_by_broker_1_with(topic_id, index, vec![1], vec![1])
}

/// As `led_by_broker_1`, with these replicas and in-sync replicas.
#[cfg(test)]
pub(crate) fn led_by_broker_1_with(
    topic_id: fjord_common::Uuid,
    index: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
) -> fjord_metadata::MetadataRecord {
    fjord_metadata::MetadataRecord::Partition(fjord_metadata::PartitionRecord {
        partition_id: index,
        topic_id,
        replicas,
        isr,
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

/// A partition with an empty log in `dir`, as broker `local` sees it under `leadership`.
#[cfg(test)]
pub(crate) fn test_partition(
    dir: &std::path::Path,
    tp: TopicPartition,
    durable: bool,
    local: fjord_common::BrokerId,
    leadership: LeaderAndIsr,
) -> Arc<Partition> {
    let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
    let config = TopicConfig::resolve(&broker, &DynamicBrokerConfig::default(), &BTreeMap::new());
    let (log, _) = Log::open(
        &dir.join(tp.dir_name()),
        tp.clone(),
        None,
        log_config(&config, durable),
        0,
        0,
        true,
        0,
    )
    .unwrap();
    Arc::new(Partition {
        tp,
        topic_id: TopicId::ZERO,
        log: Arc::new(Mutex::new(log)),
        settings: Mutex::new(Settings {
            config: Arc::new(config),
            durable,
        }),
        state: Mutex::new(PartitionState::new(local, leadership, 0, 0, 0, 0)),
        delayed_fetches: Mutex::new(Vec::new()),
        delayed_produces: Mutex::new(Vec::new()),
        delayed_replica_fetches: Mutex::new(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_records::BatchBuilder;

    fn partition(dir: &std::path::Path, name: &str, durable: bool) -> Arc<Partition> {
        let leadership = LeaderAndIsr {
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: vec![1],
            isr: vec![1],
        };
        test_partition(dir, TopicPartition::new(name, 0), durable, 1, leadership)
    }

    fn append(partition: &Partition) {
        let mut builder = BatchBuilder::new(Compression::None);
        builder.append(0, None, Some(b"v"), &[]).unwrap();
        let mut log = partition.log.lock().unwrap();
        partition
            .append_as_leader(&mut log, vec![builder.build().unwrap()], 0)
            .unwrap();
    }

    #[test]
    fn a_batch_verified_before_its_transaction_ended_is_refused() {
        use crate::txn_verify::TxnVerification;
        let dir = tempfile::tempdir().unwrap();
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let (logs, _) =
            LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = ReplicaManager::new(1, Arc::new(broker), logs);
        let topic_id = fjord_common::Uuid([3; 16]);
        let records = [
            fjord_metadata::MetadataRecord::Topic(fjord_metadata::TopicRecord {
                name: "t".into(),
                topic_id,
            }),
            led_by_broker_1(topic_id, 0),
        ];
        replicas.apply_image(&image(1, &records), 0).unwrap();
        let p = replicas.get("t", 0).unwrap();
        let batch = |sequence: i32| {
            let mut builder = BatchBuilder::new(Compression::None)
                .producer(7, 0, sequence)
                .transactional(true);
            builder.append(0, None, Some(b"v"), &[]).unwrap();
            builder.build().unwrap().freeze()
        };
        let verified = |guard| {
            Some(TxnVerification {
                producer_id: 7,
                producer_epoch: 0,
                guard: Some(guard),
            })
        };
        // The leader takes its guard and asks the coordinator; before the batch is appended
        // the transaction is aborted and its marker lands here.
        let guard = lock(&p.log).start_transaction_verification(7, 0, false, 0);
        let abort = EndTxnMarker {
            commit: false,
            coordinator_epoch: 0,
        };
        p.append_marker(&mut lock(&p.log), 7, 0, abort, false, 0)
            .unwrap();
        let refused = replicas.append(&p, &batch(0), verified(guard), 0);
        assert_eq!(
            refused.err().map(|e| e.code),
            Some(errors::TRANSACTION_ABORTABLE)
        );
        assert_eq!(lock(&p.log).log_end_offset(), 1, "only the marker");
        // Verified anew: appended, and the transaction is open for the next batch.
        let guard = lock(&p.log).start_transaction_verification(7, 0, false, 0);
        replicas.append(&p, &batch(0), verified(guard), 0).unwrap();
        let open = Some(TxnVerification {
            producer_id: 7,
            producer_epoch: 0,
            guard: None,
        });
        replicas.append(&p, &batch(1), open, 0).unwrap();
        assert_eq!(lock(&p.log).log_end_offset(), 3);
    }

    fn image(offset: u64, records: &[fjord_metadata::MetadataRecord]) -> Arc<MetadataImage> {
        Arc::new(MetadataImage::from_records(offset, records).unwrap())
    }

    #[test]
    fn images_apply_as_deltas_and_never_go_back() {
        use fjord_common::Uuid;
        use fjord_metadata::{ConfigRecord, MetadataRecord, TopicRecord};
        let dir = tempfile::tempdir().unwrap();
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let (logs, _) =
            LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = ReplicaManager::new(1, Arc::new(broker), logs);
        let topic = |name: &str, id: u8| {
            MetadataRecord::Topic(TopicRecord {
                name: name.into(),
                topic_id: Uuid([id; 16]),
            })
        };
        let partition = |id: u8, index: i32| led_by_broker_1(Uuid([id; 16]), index);
        let mut records = vec![
            topic("a", 1),
            partition(1, 0),
            topic("b", 2),
            partition(2, 0),
        ];
        let first = image(1, &records);
        replicas.apply_image(&first, 0).unwrap();
        let a = replicas.get("a", 0).unwrap();
        records.push(partition(2, 1));
        records.push(MetadataRecord::Config(ConfigRecord {
            resource_type: fjord_metadata::CONFIG_RESOURCE_TOPIC,
            resource_name: "a".into(),
            name: "retention.ms".into(),
            value: Some("1234".into()),
        }));
        let second = image(2, &records);
        replicas.apply_image(&second, 0).unwrap();
        assert!(replicas.get("b", 1).is_some());
        assert!(
            Arc::ptr_eq(&a, &replicas.get("a", 0).unwrap()),
            "updated in place"
        );
        assert_eq!(a.config().get_i64("retention.ms"), 1234);
        // An older image arriving late (a racing applier) changes nothing.
        replicas.apply_image(&first, 0).unwrap();
        assert!(replicas.get("b", 1).is_some());
        assert_eq!(a.config().get_i64("retention.ms"), 1234);
        // A removed topic's partitions and logs go.
        records.push(MetadataRecord::RemoveTopic(
            fjord_metadata::RemoveTopicRecord {
                topic_id: Uuid([2; 16]),
            },
        ));
        replicas.apply_image(&image(3, &records), 0).unwrap();
        assert!(replicas.get("b", 0).is_none() && replicas.get("b", 1).is_none());
        assert!(replicas.get("a", 0).is_some());
        // Their dirs are renamed at once and removed once file.delete.delay.ms has passed.
        assert_eq!(dirs_ending(dir.path(), "-delete").len(), 2);
        assert!(!dir.path().join("b-0").exists());
        let logs = replicas.log_manager();
        assert!(logs.take_due_deletions(59_999).is_empty());
        assert_eq!(
            fjord_storage::remove_retired_dirs(logs.take_due_deletions(60_000)),
            2
        );
        assert!(dirs_ending(dir.path(), "-delete").is_empty());
    }

    fn dirs_ending(dir: &std::path::Path, suffix: &str) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(suffix))
            .collect()
    }

    #[test]
    fn a_topic_made_again_under_its_name_gets_a_new_log_and_strays_are_set_aside() {
        use fjord_common::Uuid;
        use fjord_metadata::{MetadataRecord, RemoveTopicRecord, TopicRecord};
        let topic = |name: &str, id: u8| {
            MetadataRecord::Topic(TopicRecord {
                name: name.into(),
                topic_id: Uuid([id; 16]),
            })
        };
        let remove = |id: u8| {
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: Uuid([id; 16]),
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let manager = || {
            let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
            let (logs, report) =
                LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
            (ReplicaManager::new(1, Arc::new(broker), logs), report)
        };
        let (replicas, _) = manager();
        let mut records = vec![topic("t", 1), led_by_broker_1(Uuid([1; 16]), 0)];
        replicas.apply_image(&image(1, &records), 0).unwrap();
        append(&replicas.get("t", 0).unwrap());
        // Deleted and made again between two images this broker applies.
        records.extend([remove(1), topic("t", 2), led_by_broker_1(Uuid([2; 16]), 0)]);
        replicas.apply_image(&image(2, &records), 0).unwrap();
        let t = replicas.get("t", 0).unwrap();
        assert_eq!(
            lock(&t.log).log_end_offset(),
            0,
            "not the old topic's records"
        );
        assert_eq!(lock(&t.log).topic_id(), Some(Uuid([2; 16])));
        assert_eq!(dirs_ending(dir.path(), "-delete").len(), 1);
        append(&t);
        drop((t, replicas));

        // While this broker is down, t is made again once more and another topic comes and
        // goes: at start its logs on disk belong to no partition it has, and are set aside.
        let (replicas, _) = manager();
        let gone = replicas
            .log_manager()
            .create_log(
                TopicPartition::new("gone", 0),
                Uuid([5; 16]),
                LogConfig::default(),
                0,
            )
            .unwrap();
        drop((gone, replicas));
        let (replicas, _) = manager();
        records.extend([remove(2), topic("t", 3), led_by_broker_1(Uuid([3; 16]), 0)]);
        replicas.apply_image(&image(3, &records), 0).unwrap();
        let t = replicas.get("t", 0).unwrap();
        assert_eq!(lock(&t.log).log_end_offset(), 0);
        assert_eq!(lock(&t.log).topic_id(), Some(Uuid([3; 16])));
        let mut strays = dirs_ending(dir.path(), "-stray");
        strays.sort();
        assert_eq!(strays.len(), 2, "{strays:?}");
        assert!(strays[0].starts_with("gone-0.") && strays[1].starts_with("t-0."));
        drop((t, replicas));
        // Kept, and not loaded again.
        let (_, report) = manager();
        assert_eq!(report.stray_dirs, 2);
        assert_eq!(report.partitions_loaded, 1);
    }

    #[tokio::test]
    async fn a_moving_high_watermark_wakes_only_its_partitions_fetches() {
        let dir = tempfile::tempdir().unwrap();
        // Page-cache mode: an append moves the high watermark at once.
        let (a, b) = (
            partition(dir.path(), "a", false),
            partition(dir.path(), "b", false),
        );
        let (on_a, on_b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        a.delay_fetch(&on_a);
        b.delay_fetch(&on_b);
        append(&a);
        assert_eq!(a.log.lock().unwrap().high_watermark(), 1);
        let quick = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, on_a.notified()).await.is_ok());
        assert!(tokio::time::timeout(quick, on_b.notified()).await.is_err());
        // Woken once, the queue is empty: the next move wakes no one until asked again.
        append(&a);
        assert!(tokio::time::timeout(quick, on_a.notified()).await.is_err());
        // Fetches that gave up are dropped from the queue when the next one waits.
        drop(on_b);
        b.delay_fetch(&Arc::new(Notify::new()));
        assert_eq!(b.delayed_fetches.lock().unwrap().len(), 1);
    }

    #[test]
    fn an_acks_all_produce_waits_until_the_high_watermark_passes_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), "acks", false);
        let mut two = p.delay_produce(2, 0);
        let abandoned = p.delay_produce(5, 0);
        append(&p);
        assert!(
            two.try_recv().is_err(),
            "high watermark 1 does not cover offset 1"
        );
        drop(abandoned);
        append(&p);
        assert!(two.try_recv().is_ok());
        assert!(p
            .delayed_produces
            .lock()
            .unwrap()
            .iter()
            .all(|(o, _)| *o == 5));
        let mut covered = p.delay_produce(1, 0);
        assert!(
            covered.try_recv().is_ok(),
            "already below the high watermark"
        );
        // The next waiter clears the abandoned entry.
        let _three = p.delay_produce(3, 0);
        assert_eq!(p.delayed_produces.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn in_fsync_mode_only_a_completed_flush_moves_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), "durable", true);
        let waiter = Arc::new(Notify::new());
        p.delay_fetch(&waiter);
        append(&p);
        assert_eq!(p.log.lock().unwrap().high_watermark(), 0);
        let quick = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, waiter.notified())
            .await
            .is_err());
        let (flusher, task) = crate::flusher::start(Arc::new(|_: &std::path::Path, _: &str| {}));
        flusher.flush(p.clone(), 1).await.unwrap();
        assert_eq!(p.log.lock().unwrap().high_watermark(), 1);
        assert!(tokio::time::timeout(quick, waiter.notified()).await.is_ok());
        drop(flusher);
        task.await.unwrap();
    }
}
