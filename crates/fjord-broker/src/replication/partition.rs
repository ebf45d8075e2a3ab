//! One hosted partition: its log and its replication state (`PartitionState`), the waiters
//! on its high watermark (its share of Kafka's produce and fetch purgatories), and the appends
//! as leader and as follower. Created and updated in place by `ReplicaManager::apply_image`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use fjord_common::{errors, lock, LeaderEpoch, TopicId, TopicPartition};
use fjord_config::TopicConfig;
use fjord_records::control::EndTxnMarker;
use fjord_records::AppendBatch;
use fjord_storage::log::{AppendInfo, CompactionConfig, Log, LogConfig};
use fjord_storage::log_manager::MoveStep;
use fjord_storage::{LogManager, StorageError};
use tokio::sync::{oneshot, Notify};

use crate::replication::partition_state::{LeaderAndIsr, NotAReplica, PartitionState, Role};

/// Largest records section accepted after decompression, per batch: bounds broker memory when a
/// small compressed batch claims a huge payload.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// One hosted partition: its log and its replication state. Created by
/// `ReplicaManager::apply_image`, which afterwards updates it in place (configs, leadership), so
/// whoever holds it (a group coordinator shard) keeps a live one.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: TopicId,
    /// Reached only through [`Partition::lock`]: every change to the log goes through the
    /// partition, which keeps its replication state in step.
    log: Arc<Mutex<Log>>,
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
    /// As a follower: how far its log end was behind the leader's high watermark when its last
    /// fetch was applied (Kafka's fetcher ConsumerLag).
    follower_lag: AtomicI64,
}

/// A partition's topic config and the durability mode it implies.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) config: Arc<TopicConfig>,
    /// fsync before acknowledging (fjord's default) rather than flush by interval.
    pub(crate) durable: bool,
}

impl Partition {
    /// A partition newly hosted, with `log` and the replication state made from it.
    pub(crate) fn new(
        tp: TopicPartition,
        topic_id: TopicId,
        log: Arc<Mutex<Log>>,
        settings: Settings,
        state: PartitionState,
    ) -> Self {
        Partition {
            tp,
            topic_id,
            log,
            settings: Mutex::new(settings),
            state: Mutex::new(state),
            delayed_fetches: Mutex::new(Vec::new()),
            delayed_produces: Mutex::new(Vec::new()),
            delayed_replica_fetches: Mutex::new(Vec::new()),
            follower_lag: AtomicI64::new(0),
        }
    }

    /// As a follower, its last fetch left its log end `lag` records behind the leader's high
    /// watermark.
    pub(crate) fn followed_with_lag(&self, lag: i64) {
        self.follower_lag.store(lag.max(0), Ordering::Relaxed);
    }

    /// As a follower, how far behind the leader's high watermark its last fetch left it.
    pub fn follower_lag(&self) -> i64 {
        self.follower_lag.load(Ordering::Relaxed)
    }

    /// The topic config changed (a dynamic change, or a broker default it inherits).
    pub(crate) fn set_settings(&self, settings: Settings) {
        *lock(&self.settings) = settings;
    }

    /// The metadata log gave this hosted partition new leadership (`log` is its own, locked):
    /// the state follows; waiters are released when this broker stops leading, and the high
    /// watermark moves as the state says.
    fn apply_leadership(&self, log: &mut Log, leadership: LeaderAndIsr, now_ms: i64) {
        let mut state = self.state();
        let was_leader = state.role() == Role::Leader;
        let applied = state.apply(leadership, now_ms);
        let lost = was_leader && state.role() != Role::Leader;
        let bound = state.high_watermark_bound();
        drop(state);
        if lost {
            self.leadership_lost();
        }
        match applied {
            Ok(()) => self.raise_high_watermark(log, bound),
            Err(stale) => {
                // An ISR change answered by the controller before this node's image applied it.
                tracing::debug!(tp = %self.tp, %stale, "partition state from the metadata log ignored");
            }
        }
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        Arc::clone(&lock(&self.settings).config)
    }

    pub fn durable(&self) -> bool {
        lock(&self.settings).durable
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.state().leader_epoch()
    }

    /// Whether this broker leads the partition, as the metadata log last said.
    pub fn is_leader(&self) -> bool {
        self.state().role() == Role::Leader
    }

    pub fn role(&self) -> Role {
        self.state().role()
    }

    /// See [`PartitionState::preferred_read_replica`].
    pub fn preferred_read_replica(
        &self,
        fetch_offset: i64,
        client_rack: &str,
        rack_of: impl Fn(i32) -> Option<String>,
    ) -> Option<i32> {
        self.state()
            .preferred_read_replica(fetch_offset, client_rack, rack_of)
    }

    /// The ISR and how many replicas the partition has, as the metadata log last said.
    pub fn isr_and_replica_count(&self) -> (Vec<fjord_common::BrokerId>, usize) {
        let state = self.state();
        (
            state.leadership().isr.clone(),
            state.leadership().replicas.len(),
        )
    }

    /// `min.insync.replicas` as it applies to this partition: as in Kafka, a partition with
    /// fewer replicas needs them all (the setting is capped at its replica count).
    pub fn effective_min_isr(&self, replicas: usize) -> i64 {
        self.config()
            .settings()
            .min_insync_replicas
            .min(i64::try_from(replicas).unwrap_or(i64::MAX))
    }

    /// Why an acks=all write may not be taken now, if it may not: fewer in-sync replicas than
    /// the effective `min.insync.replicas`.
    pub fn min_isr_shortfall(&self) -> Option<String> {
        let (isr, replicas) = self.isr_and_replica_count();
        let min_isr = self.effective_min_isr(replicas);
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
    fn follower_fetched(
        &self,
        log: &mut Log,
        replica: fjord_common::BrokerId,
        fetch_offset: i64,
        broker_epoch: i64,
        now_ms: i64,
    ) -> Result<(), NotAReplica> {
        let bound = {
            let mut state = self.state();
            state.on_follower_fetch(replica, fetch_offset, broker_epoch, now_ms)?;
            state.high_watermark_bound()
        };
        self.raise_high_watermark(log, bound);
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
        let mut state = self.state();
        let epoch_start = log
            .epoch_start_offset(state.leader_epoch())
            .unwrap_or(i64::MAX);
        let high_watermark = log.high_watermark();
        drop(log);
        let isr = state.propose_isr_change(
            now_ms,
            lag_time_max_ms,
            epoch_start,
            high_watermark,
            eligible,
        )?;
        Some(LeaderAndIsr {
            isr,
            ..state.leadership().clone()
        })
    }

    /// The controller's answer to a proposed ISR change. The high watermark moves as the new
    /// ISR says.
    pub fn isr_change_answered(&self, answer: IsrAnswer, now_ms: i64) {
        let mut log = lock(&self.log);
        let mut state = self.state();
        match answer {
            IsrAnswer::Committed(leadership) => {
                state.isr_change_done();
                // Stale: the metadata log already brought a newer state.
                let _ = state.apply(leadership, now_ms);
            }
            IsrAnswer::Refused => state.isr_change_done(),
            IsrAnswer::Unknown => state.isr_change_unknown(),
            // Pending until the metadata log brings the partition's newer state.
            IsrAnswer::AwaitMetadata => {}
        }
        let bound = state.high_watermark_bound();
        drop(state);
        self.raise_high_watermark(&mut log, bound);
    }

    /// Follower: appends batches fetched from the leader under `leader_epoch`, offsets and
    /// epochs as the leader wrote them. Refused once the partition has another leader or
    /// epoch than the fetch was made under.
    fn append_as_follower(
        &self,
        log: &mut Log,
        records: &Bytes,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<usize, AppendError> {
        let mut state = self.state();
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
        let state = self.state();
        matches!(state.role(), Role::Follower { .. }) && state.leader_epoch() == leader_epoch
    }

    /// Follower: the leader's high watermark from a fetch made under `leader_epoch` (applied as
    /// far as this log is durable).
    fn leader_high_watermark(&self, log: &mut Log, hw: i64, leader_epoch: LeaderEpoch) {
        let bound = {
            let mut state = self.state();
            if state.leader_epoch() != leader_epoch {
                return;
            }
            state.on_leader_high_watermark(hw);
            state.high_watermark_bound()
        };
        self.raise_high_watermark(log, bound);
    }

    /// Follower: the local log is durable below this (fjord's fsync mode; the log end in
    /// page-cache mode) — what a follower may announce as its position.
    pub fn durable_end(&self) -> i64 {
        self.state().durable_end()
    }

    /// Truncates the log to `offset` as the follower of `leader_epoch` (a divergent tail; an
    /// offset past the log end, or below its start, restarts the log empty there: the leader's
    /// log starts there). The state hears the log's end whatever happens; a failed disk is
    /// reported by the caller.
    fn truncate(
        &self,
        log: &mut Log,
        offset: i64,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<(), AppendError> {
        let mut state = self.state();
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
        // The log is held while the high watermark is read and the entry queued: a move, made
        // under the log's lock, lands either before the read or after the entry is in the queue.
        let log = lock(&self.log);
        let state = self.state();
        let mut waiting = lock(&self.delayed_produces);
        if state.role() != Role::Leader || state.leader_epoch() != leader_epoch {
            drop(done);
        } else if log.high_watermark() >= offset {
            let _ = done.send(());
        } else {
            waiting.retain(|(_, w)| !w.is_closed());
            waiting.push((offset, done));
        }
        wait
    }

    /// Raises the log's high watermark to `bound` (the state's, read under the same log lock).
    /// When it moved, every waiting fetch is woken and every produce it covers answered.
    fn raise_high_watermark(&self, log: &mut Log, bound: i64) {
        if !log.raise_high_watermark(bound) {
            return;
        }
        let hw = log.high_watermark();
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
    fn append_as_leader<B>(
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
    fn append_as_coordinator(
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
        let mut state = self.state();
        // Leadership can move between finding the partition and appending: a broker that was
        // fenced, or lost the partition, appends nothing.
        if state.role() != Role::Leader {
            return Err(AppendError::NotLeader);
        }
        let leader_epoch = state.leader_epoch();
        let info = append(log, leader_epoch)?;
        state.on_append(log.log_end_offset(), !self.durable());
        let bound = state.high_watermark_bound();
        drop(state);
        // Followers waiting for records have some now, whether or not the high watermark moved.
        wake(&self.delayed_replica_fetches);
        self.raise_high_watermark(log, bound);
        Ok((info, leader_epoch))
    }

    /// Appends a transaction's commit or abort marker as leader (WriteTxnMarkers), as
    /// [`Partition::append_as_leader`] appends records.
    fn append_marker(
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

// The lock order of a partition, the one rule for its locks: its log, then its replication
// state, then its waiter queues; never the log while holding the state. (The coordinators'
// locks come before both: a shard's lock, then its partition's. The log manager's locks come
// after the log, see `fjord_storage::lock_order`.) Debug builds check the log and state
// nesting: `STATE_HELD` counts this thread's state guards.
#[cfg(debug_assertions)]
thread_local! {
    static STATE_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A partition's replication state, locked; in debug builds counted in `STATE_HELD`.
struct StateGuard<'a> {
    state: std::sync::MutexGuard<'a, PartitionState>,
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = PartitionState;
    fn deref(&self) -> &PartitionState {
        &self.state
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut PartitionState {
        &mut self.state
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        STATE_HELD.with(|held| held.set(held.get() - 1));
    }
}

/// A partition with its log locked: the way to read the log and the only way to change it.
/// The operations that touch replication state (appends, truncation, a follower's position,
/// the leader's high watermark) are its methods, so the log they change is always this
/// partition's own; reads go through `Deref`.
pub struct LockedPartition<'a> {
    partition: &'a Partition,
    log: std::sync::MutexGuard<'a, Log>,
}

impl std::ops::Deref for LockedPartition<'_> {
    type Target = Log;
    fn deref(&self) -> &Log {
        &self.log
    }
}

impl Partition {
    /// Locks the partition's log (see the lock order above).
    pub fn lock(&self) -> LockedPartition<'_> {
        #[cfg(debug_assertions)]
        STATE_HELD.with(|held| {
            assert_eq!(
                held.get(),
                0,
                "a partition's log is locked before its state, never under it"
            )
        });
        fjord_storage::lock_order::check_log_lock();
        LockedPartition {
            partition: self,
            log: lock(&self.log),
        }
    }

    /// As `lock`, refusing a log whose lock a panic poisoned (KAFKA_STORAGE_ERROR): a request
    /// is not served from a log left half-changed.
    pub fn try_lock(&self) -> Result<LockedPartition<'_>, PartitionError> {
        #[cfg(debug_assertions)]
        STATE_HELD.with(|held| {
            assert_eq!(
                held.get(),
                0,
                "a partition's log is locked before its state, never under it"
            )
        });
        fjord_storage::lock_order::check_log_lock();
        let log = self.log.lock().map_err(|_| {
            PartitionError::new(errors::KAFKA_STORAGE_ERROR, "partition log lock poisoned")
        })?;
        Ok(LockedPartition {
            partition: self,
            log,
        })
    }

    fn state(&self) -> StateGuard<'_> {
        #[cfg(debug_assertions)]
        STATE_HELD.with(|held| held.set(held.get() + 1));
        StateGuard {
            state: lock(&self.state),
        }
    }

    /// Whether `log` is this partition's log (the one it was made with, not since swapped).
    pub(crate) fn has_log(&self, log: &Arc<Mutex<Log>>) -> bool {
        Arc::ptr_eq(&self.log, log)
    }

    /// One step of moving this partition's log to another log dir (AlterReplicaLogDirs): the
    /// log manager copies into the future log and swaps it in, under this partition's lock.
    pub(crate) fn advance_move(
        &self,
        logs: &LogManager,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<MoveStep, StorageError> {
        logs.advance_move(&self.tp, &self.log, || self.lock().log, max_bytes, now_ms)
    }

    /// Gives up moving this partition's log (a step of it failed).
    pub(crate) fn abort_move(&self, logs: &LogManager) -> Result<(), StorageError> {
        logs.abort_move(&self.tp, &mut self.lock().log)
    }
}

impl LockedPartition<'_> {
    /// See [`Partition::apply_leadership`].
    pub(crate) fn apply_leadership(&mut self, leadership: LeaderAndIsr, now_ms: i64) {
        self.partition
            .apply_leadership(&mut self.log, leadership, now_ms)
    }

    /// Leader: follower `replica` fetched from `fetch_offset` (it holds everything below); the
    /// high watermark moves as the partition's state says.
    pub fn follower_fetched(
        &mut self,
        replica: fjord_common::BrokerId,
        fetch_offset: i64,
        broker_epoch: i64,
        now_ms: i64,
    ) -> Result<(), NotAReplica> {
        self.partition
            .follower_fetched(&mut self.log, replica, fetch_offset, broker_epoch, now_ms)
    }

    /// Follower: appends batches fetched under `leader_epoch` (see
    /// [`Partition::append_as_follower`]).
    pub fn append_as_follower(
        &mut self,
        records: &Bytes,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<usize, AppendError> {
        self.partition
            .append_as_follower(&mut self.log, records, leader_epoch, now_ms)
    }

    /// Follower: the leader's high watermark from a fetch under `leader_epoch`.
    pub fn leader_high_watermark(&mut self, hw: i64, leader_epoch: LeaderEpoch) {
        self.partition
            .leader_high_watermark(&mut self.log, hw, leader_epoch)
    }

    /// Follower: truncates to `offset` (see [`Partition::truncate`]).
    pub fn truncate(
        &mut self,
        offset: i64,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<(), AppendError> {
        self.partition
            .truncate(&mut self.log, offset, leader_epoch, now_ms)
    }

    /// Leader: appends a client's batches; a transactional one only if `verification` still
    /// holds under this lock (a marker for the producer may have come since it was verified).
    pub fn append_as_leader(
        &mut self,
        batches: Vec<AppendBatch>,
        verification: Option<TxnVerification>,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        if let Some(v) = verification {
            if !self
                .log
                .transaction_verified(v.producer_id, v.producer_epoch, v.guard)
            {
                return Err(AppendError::TransactionEnded);
            }
        }
        self.partition
            .append_as_leader(&mut self.log, batches, now_ms)
    }

    /// Leader: appends a batch a coordinator built (see [`Partition::append_as_coordinator`]).
    pub fn append_as_coordinator(
        &mut self,
        batch: AppendBatch,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        self.partition
            .append_as_coordinator(&mut self.log, batch, now_ms)
    }

    /// Leader: appends a transaction's marker (see [`Partition::append_marker`]).
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), AppendError> {
        self.partition.append_marker(
            &mut self.log,
            producer_id,
            producer_epoch,
            marker,
            epoch_bumps,
            now_ms,
        )
    }

    /// The log takes `config`; led here at `leader_epoch`, it records where that epoch starts.
    pub(crate) fn configure(
        &mut self,
        config: fjord_storage::log::LogConfig,
        leader_epoch: Option<LeaderEpoch>,
    ) -> Result<(), fjord_storage::StorageError> {
        self.log.set_config(config);
        match leader_epoch {
            Some(epoch) => self.log.become_leader(epoch),
            None => Ok(()),
        }
    }

    /// Retention: deletes segments past `retention.ms` / `retention.bytes` (and below the log
    /// start), as the log decides.
    pub fn delete_old_segments(
        &mut self,
        now_ms: i64,
    ) -> Result<usize, fjord_storage::StorageError> {
        self.log.delete_old_segments(now_ms)
    }

    /// Forgets producers idle for `producer_id_expiration_ms`.
    pub fn remove_expired_producers(&mut self, now_ms: i64, producer_id_expiration_ms: i64) {
        self.log
            .remove_expired_producers(now_ms, producer_id_expiration_ms)
    }

    /// Moves the log start forward (DeleteRecords, or a follower following its leader's);
    /// answers the log start now.
    pub fn increment_log_start_offset(
        &mut self,
        offset: i64,
        now_ms: i64,
    ) -> Result<i64, fjord_storage::StorageError> {
        self.log.increment_log_start_offset(offset, now_ms)
    }

    /// KIP-890: takes the producer's verification guard before its coordinator is asked.
    pub fn start_transaction_verification(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> u64 {
        self.log
            .start_transaction_verification(producer_id, producer_epoch, epoch_bumps, now_ms)
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

impl crate::replication::flusher::Durable for Partition {
    fn log(&self) -> &Arc<Mutex<Log>> {
        &self.log
    }

    fn made_durable(&self, log: &mut Log, offset: i64) {
        let bound = {
            let mut state = self.state();
            state.on_durable(offset);
            state.high_watermark_bound()
        };
        self.raise_high_watermark(log, bound);
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
        self.state()
            .followers()
            .get(&id)
            .map_or(-1, |f| f.broker_epoch)
    }
}

/// What a transactional batch was verified with, checked again under the log's lock when it
/// is appended (`Log::transaction_verified`): a marker for the producer may have come since.
#[derive(Debug, Clone, Copy)]
pub struct TxnVerification {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The guard taken before the coordinator was asked; None when no asking was needed.
    pub guard: Option<u64>,
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

/// The storage settings a topic's config implies.
pub fn log_config(config: &TopicConfig, durable: bool) -> LogConfig {
    let s = config.settings();
    let positive = |v: i64| v.max(0) as u64;
    // Flushing by interval applies in page-cache mode only.
    let interval = |v: i64| (!durable && v != i64::MAX).then_some(v);
    LogConfig {
        segment_bytes: positive(s.segment_bytes),
        segment_ms: s.segment_ms,
        segment_index_bytes: positive(s.segment_index_bytes),
        index_interval_bytes: positive(s.index_interval_bytes),
        retention_bytes: s.retention_bytes,
        retention_ms: s.retention_ms,
        flush_interval_messages: interval(s.flush_messages).map(|v| v.max(1) as u64),
        flush_interval_ms: interval(s.flush_ms),
        file_delete_delay_ms: s.file_delete_delay_ms,
        cleanup_policy_delete: s.cleanup_policy.delete,
        compaction: CompactionConfig {
            compact: s.cleanup_policy.compact,
            min_cleanable_dirty_ratio: s.min_cleanable_dirty_ratio,
            min_compaction_lag_ms: s.min_compaction_lag_ms,
            max_compaction_lag_ms: s.max_compaction_lag_ms,
            delete_retention_ms: s.delete_retention_ms,
        },
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use fjord_config::{BrokerConfig, DynamicBrokerConfig};
    use fjord_records::{BatchBuilder, Compression};

    /// A partition with an empty log in `dir`, as broker `local` sees it under `leadership`.
    pub(crate) fn test_partition(
        dir: &std::path::Path,
        tp: TopicPartition,
        durable: bool,
        local: fjord_common::BrokerId,
        leadership: LeaderAndIsr,
    ) -> Arc<Partition> {
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let config =
            TopicConfig::resolve(&broker, &DynamicBrokerConfig::default(), &BTreeMap::new());
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
        Arc::new(Partition::new(
            tp,
            TopicId::ZERO,
            Arc::new(Mutex::new(log)),
            Settings {
                config: Arc::new(config),
                durable,
            },
            PartitionState::new(local, leadership, 0, 0, 0),
        ))
    }

    /// Broker 1 leads at epoch 0, the only replica.
    fn leader_alone() -> LeaderAndIsr {
        LeaderAndIsr {
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: vec![1],
            isr: vec![1],
        }
    }

    pub(crate) fn partition(dir: &std::path::Path, name: &str, durable: bool) -> Arc<Partition> {
        test_partition(
            dir,
            TopicPartition::new(name, 0),
            durable,
            1,
            leader_alone(),
        )
    }

    pub(crate) fn append(partition: &Partition) {
        let mut builder = BatchBuilder::new(Compression::None);
        builder.append(0, None, Some(b"v"), &[]).unwrap();
        let mut log = partition.log.lock().unwrap();
        partition
            .append_as_leader(&mut log, vec![builder.build().unwrap()], 0)
            .unwrap();
    }

    #[test]
    fn a_partition_moves_its_log_to_another_dir_while_it_takes_appends() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d0"), root.path().join("d1")];
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let config =
            TopicConfig::resolve(&broker, &DynamicBrokerConfig::default(), &BTreeMap::new());
        let (logs, _) = LogManager::open(&dirs, log_config(&config, false), 0).unwrap();
        let tp = TopicPartition::new("moving", 0);
        let log = logs
            .create_log(tp.clone(), TopicId::ZERO, log_config(&config, false), 0)
            .unwrap();
        let p = Partition::new(
            tp.clone(),
            TopicId::ZERO,
            log,
            Settings {
                config: Arc::new(config),
                durable: false,
            },
            PartitionState::new(1, leader_alone(), 0, 0, 0),
        );
        for _ in 0..20 {
            append(&p);
        }
        assert!(p.lock().dir().starts_with(&dirs[0]));
        logs.alter_log_dir(&tp, &dirs[1], 0).unwrap();
        let mut steps = 0;
        // Small steps, an append between each: the copy chases a growing log.
        while !p.advance_move(&logs, 200, 0).unwrap().finished {
            append(&p);
            steps += 1;
            assert!(steps < 1000, "the move never finished");
        }
        assert!(steps > 1, "copied in one step: the test proves nothing");
        append(&p);
        let locked = p.lock();
        assert!(locked.dir().starts_with(&dirs[1]));
        let appended = 20 + steps + 1;
        assert_eq!(locked.log_end_offset(), appended as i64);
        assert_eq!(locked.high_watermark(), appended as i64);
        let read = locked.read(0, 1 << 20, i64::MAX, true).unwrap();
        let bytes = read.records.unwrap().read_to_bytes().unwrap();
        let mut offsets = Vec::new();
        let mut position = 0;
        while position < bytes.len() {
            let header = fjord_records::BatchHeader::parse(&bytes[position..]).unwrap();
            offsets.push(header.base_offset);
            position += header.total_len();
        }
        assert_eq!(offsets, (0..appended as i64).collect::<Vec<_>>());
        drop(locked);
        assert!(logs.moving_partitions().is_empty());
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
        let (flusher, task) = crate::replication::flusher::start(
            Arc::new(|_: &std::path::Path, _: &str| {}),
            crate::metrics::Metrics::new(),
        );
        flusher.flush(p.clone(), 1).await.unwrap();
        assert_eq!(p.log.lock().unwrap().high_watermark(), 1);
        assert!(tokio::time::timeout(quick, waiter.notified()).await.is_ok());
        drop(flusher);
        task.await.unwrap();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "locked before its state")]
    fn locking_the_log_under_the_state_is_caught_in_debug_builds() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), "order", false);
        let _state = p.state();
        let _log = p.lock();
    }

    #[test]
    fn a_locked_partition_appends_to_its_own_log_and_moves_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), "own", false);
        append(&p);
        let mut locked = p.lock();
        assert_eq!((locked.log_end_offset(), locked.high_watermark()), (1, 1));
        // Only a follower truncates: refused here, the log untouched.
        assert!(matches!(
            locked.truncate(0, p.leader_epoch(), 0),
            Err(AppendError::NotLeader)
        ));
        assert_eq!(locked.log_end_offset(), 1);
    }
}
