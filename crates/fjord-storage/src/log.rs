//! One partition's log: an ordered set of segments under `<topic>-<partition>/`.
//!
//! The log owns offset assignment for leader appends, segment rolling, reads of whole batches,
//! timestamp lookups, retention, truncation, the high watermark and recovery point, and crash
//! recovery when it is opened. It is single-writer: the broker keeps it behind a mutex.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use fjord_common::{TopicId, TopicPartition};
use fjord_records::control::{build_marker, read_marker, EndTxnMarker};
use fjord_records::header::compute_crc;
use fjord_records::{split_batches, AppendBatch, RecordsError};

use crate::error::{IoResultExt, StorageError};
use crate::leader_epoch::{LeaderEpochCache, LEADER_EPOCH_CHECKPOINT_FILE_NAME};
use crate::producer_state::{CompletedTxn, ProducerStateManager, SequenceCheck};
use crate::segment::{
    parse_segment_file_name, segment_file_name, FileSlice, LogSegment, CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
use crate::txn_index::{AbortedTxn, TXN_INDEX_FILE_SUFFIX};

/// Sentinel timestamps of the ListOffsets API.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// Per-log settings, named after Kafka's topic configs; `Default` gives Kafka's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// segment.bytes
    pub segment_bytes: u64,
    /// segment.ms
    pub segment_ms: i64,
    /// segment.index.bytes
    pub segment_index_bytes: u64,
    /// index.interval.bytes
    pub index_interval_bytes: u64,
    /// retention.bytes; negative means unlimited.
    pub retention_bytes: i64,
    /// retention.ms; negative means unlimited.
    pub retention_ms: i64,
    /// flush.messages; `None` leaves flushing to the OS.
    pub flush_interval_messages: Option<u64>,
    /// flush.ms; `None` leaves flushing to the OS.
    pub flush_interval_ms: Option<i64>,
    /// file.delete.delay.ms: how long deleted segments linger as `.deleted` files.
    pub file_delete_delay_ms: i64,
    /// `cleanup.policy` includes `delete`: retention by time and size trims the log. Without it
    /// (a compact-only topic) retention never deletes data; only segments wholly below the log
    /// start offset go.
    pub cleanup_policy_delete: bool,
    /// How the log cleaner treats the log.
    pub compaction: CompactionConfig,
}

/// The log cleaner's per-topic settings, by Kafka's names; `Default` gives Kafka's defaults
/// for a topic that is not compacted.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// `cleanup.policy` includes `compact`.
    pub compact: bool,
    /// min.cleanable.dirty.ratio
    pub min_cleanable_dirty_ratio: f64,
    /// min.compaction.lag.ms
    pub min_compaction_lag_ms: i64,
    /// max.compaction.lag.ms
    pub max_compaction_lag_ms: i64,
    /// delete.retention.ms: how long tombstones outlive the cleaning pass that first kept them.
    pub delete_retention_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 60 * 60 * 1000,
        }
    }
}

impl LogConfig {
    /// The age at which the active segment rolls: `segment.ms`, or sooner for a compacted log
    /// whose `max.compaction.lag.ms` is shorter, as in Kafka, so the cleaner can reach its
    /// records in time.
    pub fn max_segment_ms(&self) -> i64 {
        if self.compaction.compact && self.compaction.max_compaction_lag_ms > 0 {
            self.segment_ms.min(self.compaction.max_compaction_lag_ms)
        } else {
            self.segment_ms
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            flush_interval_messages: None,
            flush_interval_ms: None,
            file_delete_delay_ms: 60_000,
            cleanup_policy_delete: true,
            compaction: CompactionConfig::default(),
        }
    }
}

/// What opening a log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Some segment had to be scanned and validated (unclean shutdown or damaged files).
    pub needed_recovery: bool,
    pub segments_recovered: usize,
    /// Bytes cut from recovered segments plus the sizes of segments deleted after a cut.
    pub bytes_truncated: u64,
    pub segments_deleted: usize,
}

/// Result of a leader append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    pub log_start_offset: i64,
    /// The batch was a retry of one already in the log; offsets are the original ones.
    pub duplicate: bool,
    pub record_count: i64,
}

/// Result of a read: whole batches (if any) plus the log's bounds at the time of the read.
#[derive(Debug, Clone)]
pub struct ReadInfo {
    pub records: Option<FileSlice>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// Answer of a ListOffsets lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: Option<i32>,
}

/// Where the cleaner stands on one log; see [`Log::cleanable`].
#[derive(Debug, Clone, PartialEq)]
pub struct CleanableLog {
    pub first_dirty_offset: i64,
    /// A segment base: cleaning never reaches it.
    pub first_uncleanable_offset: i64,
    /// Bytes of the segments before the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of the segments between the first dirty and first uncleanable offsets.
    pub cleanable_bytes: u64,
    /// How long the oldest dirty record has been waiting beyond max.compaction.lag.ms; above 0
    /// the log must be cleaned whatever its dirty ratio.
    pub max_compaction_delay_ms: i64,
    /// The checkpointed first dirty offset was outside the log and was reset.
    pub reset_checkpoint: bool,
    pub min_cleanable_dirty_ratio: f64,
}

impl CleanableLog {
    /// Dirty bytes over all bytes, the cleaner's measure of which log needs it most.
    pub fn cleanable_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.cleanable_bytes;
        if total == 0 {
            0.0
        } else {
            self.cleanable_bytes as f64 / total as f64
        }
    }

    /// Kafka's test: overdue by max.compaction.lag.ms with something to clean, or dirtier
    /// than min.cleanable.dirty.ratio.
    pub fn needs_cleaning(&self) -> bool {
        (self.max_compaction_delay_ms > 0 && self.cleanable_bytes > 0)
            || self.cleanable_ratio() > self.min_cleanable_dirty_ratio
    }
}

/// One sealed segment as a cleaning pass reads it, outside the log's lock.
#[derive(Debug, Clone)]
pub struct SegmentSource {
    pub base_offset: i64,
    /// The next segment's base offset (or the pass's limit for the last one).
    pub next_segment_base: i64,
    pub file: Arc<File>,
    pub size: u64,
    pub offset_index_entries: usize,
    pub time_index_entries: usize,
    pub last_modified: std::time::SystemTime,
}

/// See [`Log::cleaning_sources`].
#[derive(Debug, Clone)]
pub struct CleaningSources {
    pub dir: PathBuf,
    pub segments: Vec<SegmentSource>,
    /// Producer id → last offset of its last batch: those batches stay, so the producers'
    /// sequence state survives cleaning.
    pub producer_last_offsets: std::collections::HashMap<i64, i64>,
    /// The aborted transactions with batches in those segments (`.txnindex` entries).
    pub aborted_txns: Vec<AbortedTxn>,
    pub config: LogConfig,
}

/// The files a flush must fsync and the offset they make durable. Built under the log's lock
/// by [`Log::prepare_flush`]; [`FlushTicket::sync`] runs without it.
#[derive(Debug)]
pub struct FlushTicket {
    /// Files whose data (and size) must reach the disk: every segment's `.log` from the one
    /// holding the recovery point on.
    data_files: Vec<Arc<File>>,
    /// Index files of sealed segments at or after the recovery point's segment. The active
    /// segment's indexes are left out: recovery rebuilds them, because the recovery point always
    /// lies in the active segment once this ticket completes.
    index_files: Vec<Arc<File>>,
    /// The producer snapshot of the last roll, written without an fsync.
    snapshot_file: Option<Arc<File>>,
    dir: PathBuf,
    /// Set when a segment file was created since the directory was last synced: the directory,
    /// opened when the ticket was taken (the log may be moved to another log dir before the
    /// sync runs; the handle still names the directory the segments were created in).
    sync_dir: Option<Result<File, std::io::ErrorKind>>,
    dir_version: u64,
    /// The active segment when the ticket was taken.
    active_base: i64,
    up_to_offset: i64,
}

impl FlushTicket {
    /// Makes the covered appends durable: fdatasync for the logs (their data and size, not
    /// their timestamps), fsync for sealed indexes, and the directory only when it gained a
    /// segment since its last sync.
    pub fn sync(&self) -> Result<(), StorageError> {
        for file in &self.data_files {
            file.sync_data().at(&self.dir)?;
        }
        for file in self.index_files.iter().chain(&self.snapshot_file) {
            file.sync_data().at(&self.dir)?;
        }
        match &self.sync_dir {
            Some(Ok(dir)) => dir.sync_all().at(&self.dir)?,
            Some(Err(kind)) => return Err(std::io::Error::from(*kind)).at(&self.dir),
            None => {}
        }
        Ok(())
    }

    pub fn up_to_offset(&self) -> i64 {
        self.up_to_offset
    }

    /// The partition directory the ticket syncs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// One partition's log. See the module docs.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    topic_partition: TopicPartition,
    topic_id: Option<TopicId>,
    config: LogConfig,
    /// Keyed by base offset; never empty, the last one is the active segment.
    segments: BTreeMap<i64, LogSegment>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    /// Bumped whenever a segment file is created; the directory is durable up to
    /// `dir_synced_version`.
    dir_version: u64,
    dir_synced_version: u64,
    /// When the oldest append not yet covered by the recovery point happened.
    first_unflushed_ms: Option<i64>,
    /// Which leader epoch started at which offset; persisted in `leader-epoch-checkpoint`.
    leader_epoch_cache: LeaderEpochCache,
    /// What `leader-epoch-checkpoint` holds: a write that would not change it is skipped.
    persisted_leader_epochs: LeaderEpochCache,
    /// Idempotent producers' recent batches, for duplicate and sequence checks.
    producer_state: ProducerStateManager,
    /// The producer snapshot the last roll wrote without an fsync; the next flush syncs it.
    unsynced_snapshot: Option<Arc<File>>,
    /// `.deleted` files and when they may be removed.
    pending_deletes: Vec<(PathBuf, i64)>,
    closed: bool,
    /// Its log dir failed: nothing more is written or served.
    offline: bool,
    /// Being copied into another log dir (AlterReplicaLogDirs): the cleaner leaves it alone,
    /// as Kafka pauses cleaning of a moving partition.
    moving: bool,
    /// KIP-890's verification guards, by producer id: a leader takes one before it asks the
    /// transaction coordinator whether this partition is in the producer's transaction, and the
    /// producer's next transactional batch or marker here drops it. A transaction's first batch
    /// here is appended only under a guard still held (`transaction_verified`), so a batch
    /// verified before its transaction ended cannot open another one behind the marker.
    verification_guards: HashMap<i64, VerificationGuard>,
}

/// A producer's verification guard on one partition (KIP-890).
#[derive(Debug, Clone, Copy)]
struct VerificationGuard {
    guard: u64,
    taken_ms: i64,
    /// The highest producer epoch verified under it.
    epoch: i16,
    /// Transaction version 2: the previous transaction's marker carries `epoch`.
    epoch_bumps: bool,
}

/// How long a verification guard is kept: far longer than a leader waits for a coordinator's
/// answer; older ones are dropped when more than `VERIFICATION_GUARDS_KEPT` are held.
const VERIFICATION_GUARD_TTL_MS: i64 = 5 * 60 * 1000;
const VERIFICATION_GUARDS_KEPT: usize = 1024;
/// Beyond this many (all younger than the TTL) every guard is dropped: their producers'
/// batches are refused and retried, never appended unverified.
const MAX_VERIFICATION_GUARDS: usize = 65_536;

static NEXT_VERIFICATION_GUARD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering it when the previous shutdown
    /// was not clean. See the crate docs for what recovery does.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        tp: TopicPartition,
        topic_id: Option<TopicId>,
        config: LogConfig,
        recovery_point: i64,
        log_start_offset: i64,
        had_clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<(Log, RecoveryStats), StorageError> {
        std::fs::create_dir_all(dir).at(dir)?;
        let bases = clean_dir_and_list_segments(dir)?;
        let (mut segments, needs_recovery) = open_segments(dir, &bases, &config, now_ms)?;
        // Unclean shutdown: everything from the segment holding the recovery point onwards may
        // hold unflushed, torn data.
        let recover_from = if had_clean_shutdown {
            i64::MAX
        } else {
            segments
                .range(..=recovery_point.max(0))
                .next_back()
                .map_or(i64::MIN, |(base, _)| *base)
        };
        let mut stats = RecoveryStats::default();
        let cut_at = recover_segments(&mut segments, &needs_recovery, recover_from, &mut stats)?;
        if let Some(cut) = cut_at {
            delete_segments_from(&mut segments, cut, &mut stats)?;
        }
        let mut log = Log {
            dir: dir.to_path_buf(),
            topic_partition: tp,
            topic_id,
            config,
            segments,
            log_start_offset: log_start_offset.max(0),
            log_end_offset: 0,
            high_watermark: 0,
            recovery_point: 0,
            // A freshly created directory and segment are not known to be durable yet.
            dir_version: next_dir_version(),
            dir_synced_version: 0,
            first_unflushed_ms: None,
            leader_epoch_cache: LeaderEpochCache::default(),
            persisted_leader_epochs: LeaderEpochCache::load(
                &dir.join(LEADER_EPOCH_CHECKPOINT_FILE_NAME),
            )?,
            producer_state: ProducerStateManager::new(0),
            unsynced_snapshot: None,
            pending_deletes: Vec::new(),
            closed: false,
            offline: false,
            moving: false,
            verification_guards: HashMap::new(),
        };
        log.load_offsets(now_ms)?;
        log.init_leader_epoch_cache();
        log.reload_producer_state()?;
        log.check_invariants();
        Ok((log, stats))
    }

    /// Sets the log's offsets from its recovered segments at open: an empty log gets its
    /// first segment at the checkpointed log start, the log end is the active segment's, and
    /// a log start past the log end (everything before it is gone) starts the log afresh there.
    /// The recovery point is the log end; the high watermark starts at the log start until the
    /// checkpointed one is restored.
    fn load_offsets(&mut self, now_ms: i64) -> Result<(), StorageError> {
        if self.segments.is_empty() {
            let segment = self.new_segment(self.log_start_offset, now_ms)?;
            self.segments.insert(self.log_start_offset, segment);
        }
        self.log_end_offset = self.active_segment().next_offset();
        if let Some((&first, _)) = self.segments.iter().next() {
            self.log_start_offset = self.log_start_offset.max(first);
        }
        if self.log_start_offset > self.log_end_offset {
            // Everything before the checkpointed log start is gone: start afresh there.
            self.truncate_fully_and_start_at(self.log_start_offset, now_ms)?;
        }
        // Clean shutdown flushed everything; recovery flushed what it validated.
        self.recovery_point = self.log_end_offset;
        self.high_watermark = self.log_start_offset;
        Ok(())
    }

    /// Takes the leader epochs of `leader-epoch-checkpoint` that the loaded log still covers.
    fn init_leader_epoch_cache(&mut self) {
        // Epochs for offsets no longer in the log would answer OffsetsForLeaderEpoch wrongly.
        // The truncated cache is written with the next epoch change, or at close: until then a
        // crash leaves the old file, which the next load truncates the same way. (An empty log
        // loses its one entry here and gets it back when it becomes leader again, so a restart
        // rewrites nothing.)
        self.leader_epoch_cache = self.persisted_leader_epochs.clone();
        self.leader_epoch_cache
            .truncate_from_end(self.log_end_offset);
        self.leader_epoch_cache
            .truncate_from_start(self.log_start_offset);
    }

    /// Loads the newest producer snapshot at or below the log end and folds in the batches
    /// after it, dropping snapshots the log no longer covers.
    fn reload_producer_state(&mut self) -> Result<(), StorageError> {
        self.producer_state.truncate_and_reload(
            &self.dir,
            self.log_start_offset,
            self.log_end_offset,
        )?;
        let from = self.producer_state.last_mapped_offset();
        let state = &mut self.producer_state;
        // The markers read back record their aborted transactions again.
        for segment in self.segments.values_mut() {
            if segment.next_offset() <= from {
                continue;
            }
            segment.truncate_aborted_txns_from(from)?;
            let mut aborted = Vec::new();
            segment.for_each_batch_from(from, |header, marker| {
                let completed = state.record_append(header, header.max_timestamp, marker);
                aborted.extend(completed.and_then(aborted_txn));
            })?;
            for txn in aborted {
                segment.append_aborted_txn(txn)?;
            }
        }
        Ok(())
    }

    fn new_segment(&mut self, base_offset: i64, now_ms: i64) -> Result<LogSegment, StorageError> {
        self.dir_version = next_dir_version();
        LogSegment::create(
            &self.dir,
            base_offset,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            now_ms,
        )
    }

    fn active_segment(&self) -> &LogSegment {
        // The map is never empty after open; this is the only place relying on it.
        #[allow(clippy::expect_used)]
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_segment_mut(&mut self) -> Result<&mut LogSegment, StorageError> {
        let dir = self.dir.clone();
        self.segments
            .values_mut()
            .next_back()
            .ok_or_else(|| StorageError::corrupt(&dir, "log has no segments"))
    }

    fn check_invariants(&self) {
        assert!(
            self.log_start_offset <= self.high_watermark,
            "log start {} ≤ HW {}",
            self.log_start_offset,
            self.high_watermark
        );
        assert!(
            self.high_watermark <= self.log_end_offset,
            "HW {} ≤ LEO {}",
            self.high_watermark,
            self.log_end_offset
        );
        assert!(
            self.recovery_point <= self.log_end_offset,
            "recovery point {} ≤ LEO {}",
            self.recovery_point,
            self.log_end_offset
        );
        assert_eq!(
            self.active_segment().next_offset(),
            self.log_end_offset,
            "the active segment ends at the log end"
        );
    }

    fn ensure_open(&self) -> Result<(), StorageError> {
        if self.offline {
            return Err(StorageError::LogDirOffline(self.dir.clone()));
        }
        if self.closed {
            return Err(StorageError::LogClosed(self.dir.clone()));
        }
        Ok(())
    }

    /// Its log dir failed (see `LogManager::take_dir_offline`): from now on every append, read
    /// and flush fails with [`StorageError::LogDirOffline`], and close writes nothing.
    pub fn mark_offline(&mut self) {
        self.offline = true;
    }

    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// Marks the log as being copied to another log dir (or no longer); see `moving`.
    pub fn set_moving(&mut self, moving: bool) {
        self.moving = moving;
    }

    /// Appends batches that already carry their offsets and leader epochs, as a follower (or a
    /// future replica in another log dir) copies them from the leader: each must be intact
    /// (CRC) and start at or after the log end. Offsets may jump (a compacted source). Rolls as
    /// the leader does. Returns the number of batches appended.
    pub fn append_as_follower(
        &mut self,
        records: &Bytes,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        self.ensure_open()?;
        let batches = self.check_replicated_batches(records)?;
        for (batch, marker) in &batches {
            self.append_replicated_batch(batch, *marker, now_ms)?;
        }
        self.check_invariants();
        Ok(batches.len())
    }

    /// Splits a follower append into its batches, each with the transaction marker it holds,
    /// checking all of them before anything is written: a bad batch appends nothing.
    fn check_replicated_batches(
        &self,
        records: &Bytes,
    ) -> Result<Vec<(AppendBatch, Option<EndTxnMarker>)>, StorageError> {
        let mut batches = Vec::new();
        let mut next = self.log_end_offset;
        for bytes in split_batches(records)? {
            let batch = AppendBatch::new(bytes.clone())?;
            self.check_replicated_batch(&batch, &bytes, next)?;
            let header = batch.header();
            next = header.last_offset() + 1;
            let marker = if header.is_control() {
                read_marker(&bytes)
            } else {
                None
            };
            batches.push((batch, marker));
        }
        Ok(batches)
    }

    /// One replicated batch: its offsets in range and at or past `next` (the log end, or the end
    /// of the batch before it), its CRC intact, and its size within `segment.bytes`.
    fn check_replicated_batch(
        &self,
        batch: &AppendBatch,
        bytes: &Bytes,
        next: i64,
    ) -> Result<(), StorageError> {
        let header = batch.header();
        if header
            .base_offset
            .checked_add(i64::from(header.last_offset_delta))
            .is_none_or(|last| last == i64::MAX)
        {
            return Err(StorageError::corrupt(
                &self.dir,
                format!(
                    "follower append of offset {} out of range",
                    header.base_offset
                ),
            ));
        }
        if header.base_offset < next {
            return Err(StorageError::corrupt(
                &self.dir,
                format!(
                    "follower append of offset {} below the log end {next}",
                    header.base_offset
                ),
            ));
        }
        // `AppendBatch::new` parsed the whole header, so the CRC's range is there.
        let computed = compute_crc(bytes);
        if computed != header.crc {
            return Err(StorageError::InvalidRecord(RecordsError::CrcMismatch {
                stored: header.crc,
                computed,
            }));
        }
        if batch.len() as u64 > self.config.segment_bytes {
            return Err(StorageError::RecordBatchTooLarge {
                size: batch.len(),
                segment_bytes: self.config.segment_bytes,
            });
        }
        Ok(())
    }

    /// Appends one checked replicated batch at its own offsets, rolling first where the leader
    /// would have, and records its producer, any transaction it aborts and a new leader epoch.
    fn append_replicated_batch(
        &mut self,
        batch: &AppendBatch,
        marker: Option<EndTxnMarker>,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let header = *batch.header();
        let active = self.active_segment();
        // Past what the active segment's 32-bit relative offsets reach, or by Kafka's roll
        // conditions: a new segment at this batch.
        if header.last_offset() - active.base_offset() > i64::from(i32::MAX)
            || active.should_roll(
                self.config.segment_bytes,
                self.config.max_segment_ms(),
                batch.len() as u64,
                header.max_timestamp,
                header.last_offset(),
                now_ms,
            )
        {
            self.roll_at(header.base_offset, now_ms)?;
        }
        self.active_segment_mut()?.append(batch)?;
        let completed = self
            .producer_state
            .record_append(&header, header.max_timestamp, marker);
        if let Some(txn) = completed.and_then(aborted_txn) {
            self.active_segment_mut()?.append_aborted_txn(txn)?;
        }
        let epoch = header.partition_leader_epoch;
        if epoch >= 0 {
            self.assign_newer_leader_epoch(epoch, header.base_offset)?;
        }
        self.note_first_unflushed(now_ms);
        assert!(
            header.last_offset() >= self.log_end_offset,
            "offsets only grow"
        );
        self.log_end_offset = header.last_offset() + 1;
        Ok(())
    }

    /// Records that leader epoch `epoch` starts at `start_offset` when it is newer than every
    /// epoch the log knows, and persists the cache if that changed it.
    fn assign_newer_leader_epoch(
        &mut self,
        epoch: i32,
        start_offset: i64,
    ) -> Result<(), StorageError> {
        if self
            .leader_epoch_cache
            .latest_epoch()
            .is_none_or(|e| epoch > e)
            && self.leader_epoch_cache.assign(epoch, start_offset)
        {
            self.write_leader_epoch_cache()?;
        }
        Ok(())
    }

    /// An append is about to move the log end past the recovery point: when everything before
    /// was flushed, this is the oldest unflushed append, which `flush.ms` counts from.
    fn note_first_unflushed(&mut self, now_ms: i64) {
        if self.recovery_point >= self.log_end_offset {
            self.first_unflushed_ms = Some(now_ms);
        }
    }

    /// Appends validated batches as the partition leader: assigns offsets from the log end,
    /// stamps `leader_epoch`, rolls the active segment first if it is full or old. Each batch is
    /// anything that converts to an [`AppendBatch`] (which checks it is exactly one batch); only
    /// its header is rewritten, the records are written from the caller's buffer.
    pub fn append_as_leader<B>(
        &mut self,
        input: Vec<B>,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError>
    where
        B: TryInto<AppendBatch>,
        StorageError: From<B::Error>,
    {
        self.ensure_open()?;
        let mut batches: Vec<AppendBatch> = Vec::with_capacity(input.len());
        for batch in input {
            batches.push(batch.try_into()?);
        }
        for batch in &batches {
            if let SequenceCheck::Duplicate {
                base_offset,
                last_offset,
                max_timestamp,
            } = self.producer_state.check(batch.header())?
            {
                // A producer retry: answer with the original offsets and append nothing.
                return Ok(AppendInfo {
                    first_offset: base_offset,
                    last_offset,
                    max_timestamp,
                    offset_of_max_timestamp: last_offset,
                    log_start_offset: self.log_start_offset,
                    duplicate: true,
                    record_count: last_offset - base_offset + 1,
                });
            }
        }
        let sequences: Vec<_> = batches
            .iter()
            .map(|b| {
                let header = *b.header();
                (header, self.producer_state.sequence_of(header.producer_id))
            })
            .collect();
        let (info, _) = self.append_assigning_offsets(batches, leader_epoch, now_ms, None)?;
        for (header, before) in &sequences {
            ProducerStateManager::assert_sequence_continued(*before, header);
        }
        Ok(info)
    }

    /// Appends batches a coordinator wrote (its own records, or a transaction's offset commits
    /// in the producer's name), as the partition leader: producer epochs are checked, sequences
    /// not (`ProducerStateManager::check_coordinator`).
    pub fn append_as_coordinator(
        &mut self,
        batch: AppendBatch,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        self.ensure_open()?;
        self.producer_state.check_coordinator(batch.header())?;
        self.append_assigning_offsets(vec![batch], leader_epoch, now_ms, None)
            .map(|(info, _)| info)
    }

    /// Appends a commit or abort marker for a producer's transaction, as the partition leader
    /// does for WriteTxnMarkers: refused when the producer or coordinator epoch is older than
    /// the partition has seen (`epoch_bumps`: the transaction is on transaction version 2, see
    /// `ProducerStateManager::check_marker`). Answers the transaction it completed.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(AppendInfo, Option<CompletedTxn>), StorageError> {
        self.ensure_open()?;
        let batch =
            AppendBatch::new(build_marker(producer_id, producer_epoch, marker, now_ms)?.freeze())?;
        self.producer_state
            .check_marker(batch.header(), &marker, epoch_bumps)?;
        self.append_assigning_offsets(vec![batch], leader_epoch, now_ms, Some(marker))
    }

    /// Takes the verification guard of `producer_id` (KIP-890) before its transaction
    /// coordinator is asked about this partition for a batch at `producer_epoch`: the one
    /// already held (at the highest epoch asked for), or a new one. `epoch_bumps`: the producer
    /// is on transaction version 2, whose markers carry the epoch of its next transaction.
    pub fn start_transaction_verification(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> u64 {
        if let Some(held) = self.verification_guards.get_mut(&producer_id) {
            held.epoch = held.epoch.max(producer_epoch);
            held.epoch_bumps = epoch_bumps;
            return held.guard;
        }
        if self.verification_guards.len() >= VERIFICATION_GUARDS_KEPT {
            self.verification_guards
                .retain(|_, held| now_ms - held.taken_ms < VERIFICATION_GUARD_TTL_MS);
            if self.verification_guards.len() >= MAX_VERIFICATION_GUARDS {
                self.verification_guards.clear();
            }
        }
        let guard = NEXT_VERIFICATION_GUARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.verification_guards.insert(
            producer_id,
            VerificationGuard {
                guard,
                taken_ms: now_ms,
                epoch: producer_epoch,
                epoch_bumps,
            },
        );
        guard
    }

    /// A transactional batch of the producer was appended: its guard goes (its transaction has
    /// begun here, or ended), except for a marker of the previous transaction on transaction
    /// version 2, which carries the epoch of the one being verified.
    fn drop_verification_guard(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Option<EndTxnMarker>,
    ) {
        let next_transaction_verified =
            self.verification_guards
                .get(&producer_id)
                .is_some_and(|held| {
                    marker.is_some() && held.epoch_bumps && held.epoch == producer_epoch
                });
        if !next_transaction_verified {
            self.verification_guards.remove(&producer_id);
        }
    }

    /// Whether a transactional batch of `producer_id` at `producer_epoch` may be appended: it
    /// joins a transaction open here, or `guard`, taken before its coordinator said this
    /// partition is in its transaction, is still held (no marker for the producer came since).
    pub fn transaction_verified(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        guard: Option<u64>,
    ) -> bool {
        !self.needs_transaction_verification(producer_id, producer_epoch)
            || guard.is_some_and(|guard| {
                self.verification_guards
                    .get(&producer_id)
                    .is_some_and(|held| held.guard == guard)
            })
    }

    /// Every producer this partition keeps state for (DescribeProducers), by producer id.
    pub fn active_producers(&self) -> Vec<crate::producer_state::ProducerStateEntry> {
        self.producer_state.producers().cloned().collect()
    }

    /// The latest epoch of `producer_id` this partition has seen, if it knows the producer.
    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.producer_state
            .last_entry(producer_id)
            .map(|e| e.producer_epoch)
    }

    /// Whether a transactional batch of `producer_id` at `producer_epoch` needs its transaction
    /// coordinator's word before it is appended (KIP-890). Not when the producer has a
    /// transaction open here (records after its last marker) at that epoch; nor when the
    /// partition knows a newer epoch of the producer, as the append refuses the batch
    /// (INVALID_PRODUCER_EPOCH). A transaction open at an older epoch does not count: on
    /// transaction version 2 every transaction has its own epoch, and a batch of the next one
    /// must not join the previous before that one's marker arrives.
    pub fn needs_transaction_verification(&self, producer_id: i64, producer_epoch: i16) -> bool {
        match self.producer_state.last_entry(producer_id) {
            None => true,
            Some(e) if e.producer_epoch > producer_epoch => false,
            Some(e) => e.current_txn_first_offset.is_none() || e.producer_epoch != producer_epoch,
        }
    }

    /// The offset below which every transaction is decided: the high watermark, or the first
    /// offset of the oldest open transaction if that is lower. read_committed consumers read
    /// below it.
    pub fn last_stable_offset(&self) -> i64 {
        self.producer_state
            .first_unstable_offset()
            .map_or(self.high_watermark, |first| first.min(self.high_watermark))
    }

    /// The aborted transactions a read_committed fetch from `start_offset` up to `upper_offset`
    /// (exclusive) must name: those whose records overlap the range.
    pub fn aborted_txns(&self, start_offset: i64, upper_offset: i64) -> Vec<AbortedTxn> {
        let first = self
            .segments
            .range(..=start_offset)
            .next_back()
            .map_or(i64::MIN, |(base, _)| *base);
        let mut found = Vec::new();
        for segment in self.segments.range(first..).map(|(_, s)| s) {
            for txn in segment.aborted_txns() {
                if txn.last_offset >= start_offset && txn.first_offset < upper_offset {
                    found.push(*txn);
                }
                // Every transaction aborted later began at or past this one's stable offset.
                if txn.last_stable_offset >= upper_offset {
                    return found;
                }
            }
        }
        found
    }

    /// The append shared by clients' batches and markers (`marker`: the batch is that marker).
    fn append_assigning_offsets(
        &mut self,
        mut batches: Vec<AppendBatch>,
        leader_epoch: i32,
        now_ms: i64,
        marker: Option<EndTxnMarker>,
    ) -> Result<(AppendInfo, Option<CompletedTxn>), StorageError> {
        let total_bytes: u64 = batches.iter().map(|b| b.len() as u64).sum();
        if batches.is_empty() {
            let nothing = AppendInfo {
                first_offset: -1,
                last_offset: -1,
                max_timestamp: -1,
                offset_of_max_timestamp: -1,
                log_start_offset: self.log_start_offset,
                duplicate: false,
                record_count: 0,
            };
            return Ok((nothing, None));
        }
        if total_bytes > self.config.segment_bytes {
            return Err(StorageError::RecordBatchTooLarge {
                size: usize::try_from(total_bytes).unwrap_or(usize::MAX),
                segment_bytes: self.config.segment_bytes,
            });
        }
        let first_offset = self.log_end_offset;
        let mut next = first_offset;
        let mut max_timestamp = -1;
        let mut offset_of_max_timestamp = first_offset;
        let mut record_count: i64 = 0;
        for batch in batches.iter_mut() {
            batch.assign_offsets(next, leader_epoch);
            let header = batch.header();
            next = header.last_offset() + 1;
            record_count += i64::from(header.record_count);
            if header.max_timestamp > max_timestamp {
                max_timestamp = header.max_timestamp;
                offset_of_max_timestamp = header.last_offset();
            }
        }
        let last_offset = next - 1;
        if self.active_segment().should_roll(
            self.config.segment_bytes,
            self.config.max_segment_ms(),
            total_bytes,
            max_timestamp,
            last_offset,
            now_ms,
        ) {
            self.roll(now_ms)?;
        }
        let segment = self.active_segment_mut()?;
        for batch in &batches {
            segment.append(batch)?;
        }
        let mut completed = None;
        for batch in &batches {
            let header = batch.header();
            completed = self
                .producer_state
                .record_append(header, now_ms, marker)
                .or(completed);
            if header.is_transactional() {
                self.drop_verification_guard(header.producer_id, header.producer_epoch, marker);
            }
        }
        if let Some(txn) = completed.and_then(aborted_txn) {
            self.active_segment_mut()?.append_aborted_txn(txn)?;
        }
        assert!(next > self.log_end_offset, "offsets only grow");
        self.assign_newer_leader_epoch(leader_epoch, first_offset)?;
        self.note_first_unflushed(now_ms);
        self.log_end_offset = next;
        self.check_invariants();
        let info = AppendInfo {
            first_offset,
            last_offset,
            max_timestamp,
            offset_of_max_timestamp,
            log_start_offset: self.log_start_offset,
            duplicate: false,
            record_count,
        };
        Ok((info, completed))
    }

    /// Starts a new active segment at the log end offset.
    pub fn roll(&mut self, now_ms: i64) -> Result<(), StorageError> {
        self.roll_at(self.log_end_offset, now_ms)
    }

    /// Starts a new active segment at `base` (at or past the log end: a follower rolls at the
    /// first offset of the batch it appends, which may lie past a gap).
    fn roll_at(&mut self, base: i64, now_ms: i64) -> Result<(), StorageError> {
        assert!(
            base >= self.log_end_offset,
            "a segment never starts inside the log"
        );
        if self.active_segment().base_offset() == base {
            return Ok(());
        }
        self.active_segment_mut()?.on_become_inactive()?;
        let segment = self.new_segment(base, now_ms)?;
        self.segments.insert(base, segment);
        self.log_end_offset = base;
        // As Kafka does, snapshot producer state at each roll so recovery replays little; the
        // snapshot's fsync waits for the next flush, which runs without the log's lock. The
        // directory entry is covered too: the new segment bumped `dir_version`.
        let snapshot = self
            .producer_state
            .write_snapshot_unsynced(&self.dir)
            .at(&self.dir)?;
        self.unsynced_snapshot = Some(Arc::new(snapshot));
        Ok(())
    }

    /// Whole batches from the one containing `fetch_offset`, from a single segment, stopping
    /// before any batch that reaches `max_offset` (exclusive).
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<ReadInfo, StorageError> {
        if self.offline {
            return Err(StorageError::LogDirOffline(self.dir.clone()));
        }
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: fetch_offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset,
            });
        }
        let mut info = ReadInfo {
            records: None,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        };
        let max_offset = max_offset.min(self.log_end_offset);
        if fetch_offset >= max_offset {
            return Ok(info);
        }
        let start = self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(i64::MIN, |(base, _)| *base);
        // A segment ending before the offset, or emptied by the cleaner (gaps compaction
        // leaves), passes the read on to the next one.
        for segment in self.segments.range(start..).map(|(_, s)| s) {
            if segment.next_offset() <= fetch_offset || segment.size() == 0 {
                continue;
            }
            info.records = segment.read(fetch_offset, max_bytes, max_offset, min_one_batch)?;
            break;
        }
        Ok(info)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Moves the high watermark forward to `hw`, clamped to [log start, log end]; a value below
    /// the current one is ignored (the high watermark only moves back through truncation).
    /// Returns whether it moved. The log is the high watermark's one home; its partition's
    /// replication state says how far it may go.
    pub fn raise_high_watermark(&mut self, hw: i64) -> bool {
        let hw = hw.clamp(self.log_start_offset, self.log_end_offset);
        let moved = hw > self.high_watermark;
        if moved {
            self.high_watermark = hw;
        }
        self.check_invariants();
        moved
    }

    /// Sets the high watermark from a checkpoint at startup, clamped to the log's bounds.
    pub fn restore_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw.clamp(self.log_start_offset, self.log_end_offset);
    }

    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// Everything between the recovery point and the log end: the segments that may hold
    /// unflushed bytes.
    pub fn prepare_flush(&self) -> FlushTicket {
        let from = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(i64::MIN, |(base, _)| *base);
        let active = self.active_segment().base_offset();
        let mut data_files = Vec::new();
        let mut index_files = Vec::new();
        for (&base, segment) in self.segments.range(from..) {
            data_files.push(Arc::clone(segment.log_file()));
            if base != active {
                index_files.extend(segment.index_files());
            }
        }
        FlushTicket {
            data_files,
            index_files,
            snapshot_file: self.unsynced_snapshot.clone(),
            dir: self.dir.clone(),
            sync_dir: (self.dir_version > self.dir_synced_version)
                .then(|| File::open(&self.dir).map_err(|e| e.kind())),
            dir_version: self.dir_version,
            active_base: active,
            up_to_offset: self.log_end_offset,
        }
    }

    /// Records that `ticket` has been synced; returns the offset below which the log is now
    /// durable.
    pub fn complete_flush(&mut self, ticket: &FlushTicket) -> i64 {
        let durable = ticket.up_to_offset.min(self.log_end_offset);
        let mut up_to = durable;
        // A roll after the ticket was taken sealed a segment whose indexes it did not sync: the
        // recovery point stays inside that segment, so a crash rebuilds them, until a later
        // flush syncs them.
        if let Some((&next_base, _)) = self.segments.range(ticket.active_base + 1..).next() {
            up_to = up_to.min(next_base - 1);
        }
        if up_to > self.recovery_point {
            self.recovery_point = up_to;
        }
        self.dir_synced_version = self.dir_synced_version.max(ticket.dir_version);
        if let (Some(synced), Some(unsynced)) = (&ticket.snapshot_file, &self.unsynced_snapshot) {
            if Arc::ptr_eq(synced, unsynced) {
                self.unsynced_snapshot = None;
            }
        }
        if self.recovery_point >= self.log_end_offset {
            self.first_unflushed_ms = None;
        }
        durable
    }

    /// Whether flush.messages or flush.ms calls for a flush now.
    pub fn needs_flush(&self, now_ms: i64) -> bool {
        let unflushed = self.log_end_offset - self.recovery_point;
        if unflushed <= 0 {
            return false;
        }
        let by_count = self
            .config
            .flush_interval_messages
            .is_some_and(|n| unflushed as u64 >= n);
        let by_time = self
            .config
            .flush_interval_ms
            .zip(self.first_unflushed_ms)
            .is_some_and(|(interval, since)| now_ms.saturating_sub(since) >= interval);
        by_count || by_time
    }

    /// ListOffsets: the first record with timestamp ≥ `timestamp`, or one of the sentinels
    /// [`LATEST_TIMESTAMP`], [`EARLIEST_TIMESTAMP`], [`MAX_TIMESTAMP`],
    /// [`EARLIEST_LOCAL_TIMESTAMP`]. `None` when no record qualifies.
    pub fn fetch_offset_by_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<TimestampAndOffset>, StorageError> {
        match timestamp {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
                return Ok(Some(TimestampAndOffset {
                    timestamp: -1,
                    offset: self.log_start_offset,
                    leader_epoch: self.epoch_for_offset(self.log_start_offset),
                }))
            }
            LATEST_TIMESTAMP => {
                return Ok(Some(TimestampAndOffset {
                    timestamp: -1,
                    offset: self.log_end_offset,
                    leader_epoch: self.latest_epoch(),
                }))
            }
            MAX_TIMESTAMP => {
                let best = self
                    .segments
                    .values()
                    .filter(|s| s.max_timestamp_so_far() >= 0)
                    .max_by_key(|s| (s.max_timestamp_so_far(), -s.base_offset()));
                let Some(segment) = best else {
                    return Ok(None);
                };
                let found = segment.find_offset_by_timestamp(
                    segment.max_timestamp_so_far(),
                    self.log_start_offset,
                )?;
                return Ok(found.map(|(timestamp, offset, epoch)| TimestampAndOffset {
                    timestamp,
                    offset,
                    leader_epoch: (epoch >= 0).then_some(epoch),
                }));
            }
            t if t < 0 => return Ok(None),
            _ => {}
        }
        for segment in self.segments.values() {
            if segment.max_timestamp_so_far() < timestamp
                || segment.next_offset() <= self.log_start_offset
            {
                continue;
            }
            if let Some((ts, offset, epoch)) =
                segment.find_offset_by_timestamp(timestamp, self.log_start_offset)?
            {
                return Ok(Some(TimestampAndOffset {
                    timestamp: ts,
                    offset,
                    leader_epoch: (epoch >= 0).then_some(epoch),
                }));
            }
        }
        Ok(None)
    }

    /// Deletes segments past retention.ms / retention.bytes (when the cleanup policy includes
    /// `delete`) or wholly below the log start offset. Only segments entirely below the high
    /// watermark qualify; an expired active segment is deleted after rolling a new one, as Kafka
    /// does for an idle topic. Returns how many were deleted.
    pub fn delete_old_segments(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        if self.offline {
            return Ok(0);
        }
        let doomed = self.segments_past_retention(now_ms, self.config.cleanup_policy_delete);
        self.delete_segments(doomed, now_ms)
    }

    /// Deletes the `doomed` segments (the oldest ones, in order), rolling first if that is all of
    /// them, and moves the log start offset to the first segment left.
    fn delete_segments(&mut self, doomed: Vec<i64>, now_ms: i64) -> Result<usize, StorageError> {
        self.remove_due_deleted_files(now_ms)?;
        if !doomed.is_empty() && doomed.len() == self.segments.len() {
            // As Kafka does, an expired active segment goes too: a log always keeps one segment, so
            // roll an empty one at the log end first, where the log then starts.
            self.roll(now_ms)?;
        }
        for base in &doomed {
            if let Some(mut segment) = self.segments.remove(base) {
                let due = now_ms.saturating_add(self.config.file_delete_delay_ms);
                for path in segment.rename_to_deleted()? {
                    self.pending_deletes.push((path, due));
                }
            }
        }
        if let Some((&first, _)) = self.segments.iter().next() {
            self.log_start_offset = self.log_start_offset.max(first);
            self.recovery_point = self.recovery_point.max(self.log_start_offset);
        }
        self.remove_due_deleted_files(now_ms)?;
        if self
            .leader_epoch_cache
            .truncate_from_start(self.log_start_offset)
        {
            self.write_leader_epoch_cache()?;
        }
        self.check_invariants();
        Ok(doomed.len())
    }

    /// Where the log cleaner stands on this log (Kafka's `LogToClean`), or `None` for a log
    /// that is not compacted. `checkpoint` is the first dirty offset recorded after the last
    /// pass; a missing or invalid one starts from the log start.
    pub fn cleanable(&self, checkpoint: Option<i64>, now_ms: i64) -> Option<CleanableLog> {
        let compaction = &self.config.compaction;
        if !compaction.compact || self.closed || self.offline || self.moving {
            return None;
        }
        let checkpointed = checkpoint.unwrap_or(self.log_start_offset);
        let (first_dirty_offset, reset_checkpoint) =
            if checkpointed < self.log_start_offset || checkpointed > self.log_end_offset {
                (self.log_start_offset, true)
            } else {
                (checkpointed, false)
            };
        let active_base = self.active_segment().base_offset();
        let floor_base = |offset: i64| {
            self.segments
                .range(..=offset)
                .next_back()
                .map_or(offset, |(base, _)| *base)
        };
        let dirty_from = floor_base(first_dirty_offset);
        let dirty_sealed = || {
            self.segments
                .range(dirty_from..active_base)
                .map(|(_, segment)| segment)
        };
        // Not past the last stable offset (an open transaction's records are not decided), nor
        // into the active segment, nor into segments younger than min.compaction.lag.ms.
        let mut uncleanable = self.last_stable_offset().min(active_base);
        if compaction.min_compaction_lag_ms > 0 {
            let young = dirty_sealed().find(|s| {
                s.largest_timestamp() > now_ms.saturating_sub(compaction.min_compaction_lag_ms)
            });
            if let Some(segment) = young {
                uncleanable = uncleanable.min(segment.base_offset());
            }
        }
        // Cleaning stops at a segment boundary.
        let first_uncleanable_offset = floor_base(uncleanable).max(first_dirty_offset);
        let clean_bytes = self
            .segments
            .range(..first_dirty_offset)
            .map(|(_, s)| s.size())
            .sum();
        let cleanable_bytes = self
            .segments
            .range(dirty_from.min(first_uncleanable_offset)..first_uncleanable_offset)
            .map(|(_, s)| s.size())
            .sum();
        let earliest_dirty = dirty_sealed()
            .filter_map(LogSegment::first_batch_timestamp)
            .filter(|ts| *ts > 0)
            .min();
        let clean_until = now_ms.saturating_sub(compaction.max_compaction_lag_ms.max(0));
        let max_compaction_delay_ms = earliest_dirty
            .filter(|ts| *ts < clean_until)
            .map_or(0, |ts| clean_until - ts);
        Some(CleanableLog {
            first_dirty_offset,
            first_uncleanable_offset,
            clean_bytes,
            cleanable_bytes,
            max_compaction_delay_ms,
            reset_checkpoint,
            min_cleanable_dirty_ratio: compaction.min_cleanable_dirty_ratio,
        })
    }

    /// What a cleaning pass up to `first_uncleanable_offset` reads, taken under the lock and
    /// used outside it: the sealed segments below that offset (from the log start), each with
    /// its own handle; the last data offset of every producer the log remembers; the config.
    pub fn cleaning_sources(&self, first_uncleanable_offset: i64) -> CleaningSources {
        let active_base = self.active_segment().base_offset();
        let limit = first_uncleanable_offset.min(active_base);
        let mut segments = Vec::new();
        let mut bases = self.segments.range(..limit).peekable();
        while let Some((&base, segment)) = bases.next() {
            let end = bases.peek().map_or(limit, |(next, _)| **next);
            segments.push(SegmentSource {
                base_offset: base,
                next_segment_base: end,
                file: Arc::clone(segment.log_file()),
                size: segment.size(),
                offset_index_entries: segment.offset_index().len(),
                time_index_entries: segment.time_index().len(),
                last_modified: segment.last_modified(),
            });
        }
        let producer_last_offsets = self
            .producer_state
            .producers()
            .filter_map(|p| Some((p.producer_id, p.batches.back()?.last_offset)))
            .collect();
        // Every aborted transaction with batches in those segments, wherever its marker is (a
        // marker past them, in the active segment say, still makes its batches aborted).
        let aborted_txns = self.aborted_txns(self.log_start_offset, limit);
        CleaningSources {
            dir: self.dir.clone(),
            segments,
            producer_last_offsets,
            aborted_txns,
            config: self.config.clone(),
        }
    }

    /// A new segment for the cleaner to write, `.cleaned` beside the others.
    pub fn create_cleaned_segment(
        &self,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<LogSegment, StorageError> {
        LogSegment::create_with_suffix(
            &self.dir,
            base_offset,
            CLEANED_FILE_SUFFIX,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            now_ms,
        )
    }

    /// Swaps `cleaned` (written and synced as `.cleaned` files, its `.txnindex` holding the
    /// aborted transactions whose markers it kept) in for the `replaced` segments, as Kafka does: rename to `.swap` and sync the directory (the commit point:
    /// from here recovery completes the swap), rename the replaced segments to `.deleted`,
    /// drop the `.swap` suffix. Returns false, deleting `cleaned`, when the log changed
    /// underneath (a replaced segment is gone or was rewritten, or the log closed): the pass
    /// is then void and nothing is lost.
    pub fn replace_segments(
        &mut self,
        mut cleaned: LogSegment,
        replaced: &[SegmentSource],
        now_ms: i64,
    ) -> Result<bool, StorageError> {
        let active_base = self.active_segment().base_offset();
        let intact = !self.closed
            && !self.offline
            && replaced.first().map(|s| s.base_offset) == Some(cleaned.base_offset())
            && replaced.iter().all(|source| {
                source.base_offset < active_base
                    && self
                        .segments
                        .get(&source.base_offset)
                        .is_some_and(|segment| {
                            Arc::ptr_eq(segment.log_file(), &source.file)
                                && segment.size() == source.size
                        })
            });
        if !intact {
            delete_segment_files(cleaned)?;
            return Ok(false);
        }
        cleaned.change_suffix(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)?;
        sync_dir(&self.dir)?;
        let due = now_ms.saturating_add(self.config.file_delete_delay_ms);
        for source in replaced {
            if let Some(mut segment) = self.segments.remove(&source.base_offset) {
                for path in segment.rename_to_deleted()? {
                    self.pending_deletes.push((path, due));
                }
            }
        }
        cleaned.change_suffix(SWAP_FILE_SUFFIX, "")?;
        cleaned.flush_and_release()?;
        sync_dir(&self.dir)?;
        self.dir_version = next_dir_version();
        self.dir_synced_version = self.dir_version;
        self.segments.insert(cleaned.base_offset(), cleaned);
        self.check_invariants();
        Ok(true)
    }

    /// Forgets idempotent producers whose last batch is `producer_id_expiration_ms` older than
    /// `now_ms` (by its timestamp, as Kafka judges it), so the producer state stays bounded. A
    /// forgotten producer's next batch is accepted as from a new producer.
    pub fn remove_expired_producers(&mut self, now_ms: i64, producer_id_expiration_ms: i64) {
        self.producer_state
            .remove_expired_producers(now_ms, producer_id_expiration_ms);
    }

    /// Moves the log start offset up to `offset` (DeleteRecords): records below it are no longer
    /// served, and segments wholly below it are deleted.
    /// Never beyond the high watermark, never back. Returns the log start offset afterwards.
    pub fn increment_log_start_offset(
        &mut self,
        offset: i64,
        now_ms: i64,
    ) -> Result<i64, StorageError> {
        self.ensure_open()?;
        if offset > self.high_watermark {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start: self.log_start_offset,
                log_end: self.high_watermark,
            });
        }
        if offset > self.log_start_offset {
            self.log_start_offset = offset;
            let doomed = self.segments_past_retention(now_ms, false);
            self.delete_segments(doomed, now_ms)?;
        }
        Ok(self.log_start_offset)
    }

    /// The segments retention deletes, oldest first: each wholly below the high watermark (so
    /// the log start never passes it) and past `retention.ms` or beyond `retention.bytes` (when
    /// `retention` applies), or wholly below the log start offset. The first segment kept stops
    /// the scan; an empty active segment is always kept.
    fn segments_past_retention(&self, now_ms: i64, retention: bool) -> Vec<i64> {
        let mut remaining: u64 = self.segments.values().map(LogSegment::size).sum();
        let mut doomed = Vec::new();
        let mut segments = self.segments.iter().peekable();
        while let Some((&base, segment)) = segments.next() {
            let next_base = segments.peek().map(|(&next, _)| next);
            let end = next_base.unwrap_or(self.log_end_offset);
            if end > self.high_watermark || (next_base.is_none() && segment.size() == 0) {
                break;
            }
            let by_time = retention
                && self.config.retention_ms >= 0
                && now_ms.saturating_sub(segment.largest_timestamp()) > self.config.retention_ms;
            let by_size = retention
                && self.config.retention_bytes >= 0
                && remaining.saturating_sub(segment.size()) >= self.config.retention_bytes as u64
                && remaining > self.config.retention_bytes as u64;
            let by_start = next_base.is_some_and(|next| next <= self.log_start_offset);
            if !(by_time || by_size || by_start) {
                break;
            }
            remaining -= segment.size();
            doomed.push(base);
        }
        doomed
    }

    fn remove_due_deleted_files(&mut self, now_ms: i64) -> Result<(), StorageError> {
        let mut result = Ok(());
        self.pending_deletes.retain(|(path, due)| {
            if *due > now_ms || result.is_err() {
                return true;
            }
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    result = Err(e).at(path);
                    true
                }
                _ => false,
            }
        });
        result
    }

    /// Removes every batch from the one containing `offset` onwards (a follower's divergent
    /// suffix). The log end becomes the end of the last remaining batch, which is `offset`
    /// whenever `offset` is a batch boundary.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        self.ensure_open()?;
        if offset >= self.log_end_offset {
            return Ok(());
        }
        if offset <= self.log_start_offset {
            let now = self.active_segment().largest_timestamp();
            return self.truncate_fully_and_start_at(offset.max(0), now);
        }
        let doomed: Vec<i64> = self.segments.range(offset..).map(|(b, _)| *b).collect();
        for base in doomed {
            if let Some(segment) = self.segments.remove(&base) {
                delete_segment_files(segment)?;
            }
        }
        if self.segments.is_empty() {
            let segment = self.new_segment(offset, 0)?;
            self.segments.insert(offset, segment);
        }
        self.active_segment_mut()?.truncate_to(offset)?;
        self.log_end_offset = self.active_segment().next_offset();
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        if self
            .leader_epoch_cache
            .truncate_from_end(self.log_end_offset)
        {
            self.write_leader_epoch_cache()?;
        }
        // Producers' sequences go back with the log: a batch cut away here must not be taken
        // for a duplicate when its producer retries it (to this replica as a new leader).
        self.reload_producer_state()?;
        self.check_invariants();
        Ok(())
    }

    /// Drops every segment and starts an empty log at `offset`.
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: i64,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        for (_, segment) in std::mem::take(&mut self.segments) {
            delete_segment_files(segment)?;
        }
        let segment = self.new_segment(offset, now_ms)?;
        self.segments.insert(offset, segment);
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.first_unflushed_ms = None;
        self.leader_epoch_cache.clear();
        self.producer_state
            .truncate_fully_and_start_at(&self.dir, offset)
            .at(&self.dir)?;
        self.write_leader_epoch_cache()
    }

    fn write_leader_epoch_cache(&mut self) -> Result<(), StorageError> {
        if self.leader_epoch_cache == self.persisted_leader_epochs {
            return Ok(());
        }
        let path = self.dir.join(LEADER_EPOCH_CHECKPOINT_FILE_NAME);
        self.leader_epoch_cache.write(&path).at(&path)?;
        self.persisted_leader_epochs = self.leader_epoch_cache.clone();
        Ok(())
    }

    /// This replica became leader at `leader_epoch`: the epoch starts at the current LEO, as
    /// Kafka records on becoming leader, so OffsetForLeaderEpoch answers for it before any append.
    pub fn become_leader(&mut self, leader_epoch: i32) -> Result<(), StorageError> {
        self.ensure_open()?;
        self.assign_newer_leader_epoch(leader_epoch, self.log_end_offset)
    }

    /// OffsetsForLeaderEpoch: the largest epoch ≤ `epoch` and the offset where it ended
    /// (the log end for the latest epoch), or (-1, -1) when unknown.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.leader_epoch_cache
            .end_offset_for(epoch, self.log_end_offset)
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.leader_epoch_cache.latest_epoch()
    }

    /// Where leader epoch `epoch` starts in this log, if it is known here.
    pub fn epoch_start_offset(&self, epoch: i32) -> Option<i64> {
        self.leader_epoch_cache
            .entries()
            .iter()
            .find(|e| e.epoch == epoch)
            .map(|e| e.start_offset)
    }

    /// The epoch of the leader that wrote `offset`, if known.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.leader_epoch_cache.epoch_for_offset(offset)
    }

    /// Flushes everything and stops taking appends.
    pub fn close(&mut self) -> Result<(), StorageError> {
        if self.closed || self.offline {
            return Ok(());
        }
        self.active_segment_mut()?.on_become_inactive()?;
        let ticket = self.prepare_flush();
        ticket.sync()?;
        self.write_leader_epoch_cache()?;
        // The next start skips recovery, so the active segment's indexes must be durable too.
        for file in self.active_segment().index_files() {
            file.sync_data().at(&self.dir)?;
        }
        self.complete_flush(&ticket);
        self.producer_state.take_snapshot(&self.dir).at(&self.dir)?;
        self.closed = true;
        Ok(())
    }

    /// Stops appends without flushing: the log is about to be deleted.
    pub(crate) fn mark_closed(&mut self) {
        self.closed = true;
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }

    pub fn topic_id(&self) -> Option<TopicId> {
        self.topic_id
    }

    /// Replaces the config (a topic's configs changed); takes effect from the next append.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Bytes in all segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.values().map(LogSegment::size).sum()
    }

    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }
}

/// The index entry of a completed transaction, if it was aborted.
fn aborted_txn(completed: CompletedTxn) -> Option<AbortedTxn> {
    completed.aborted.then_some(AbortedTxn {
        producer_id: completed.producer_id,
        first_offset: completed.first_offset,
        last_offset: completed.last_offset,
        last_stable_offset: completed.last_stable_offset,
    })
}

/// Opens the segments at `bases`, each with whether its files need recovery whatever the
/// shutdown was (a missing or damaged index).
fn open_segments(
    dir: &Path,
    bases: &[i64],
    config: &LogConfig,
    now_ms: i64,
) -> Result<(BTreeMap<i64, LogSegment>, Vec<bool>), StorageError> {
    let mut segments = BTreeMap::new();
    let mut needs_recovery = Vec::with_capacity(bases.len());
    for &base in bases {
        let opened = LogSegment::open(
            dir,
            base,
            config.segment_index_bytes,
            config.index_interval_bytes,
            now_ms,
        )?;
        needs_recovery.push(opened.needs_recovery);
        segments.insert(base, opened.segment);
    }
    Ok((segments, needs_recovery))
}

/// Recovers, in offset order, every segment from `recover_from` on and every one that
/// `needs_recovery` names: validates its batches, truncates a torn tail, rebuilds its indexes
/// and flushes it. Returns where the log must be cut: past a segment that lost bytes (what
/// follows it cannot be trusted), or at a segment overlapping the one before it.
fn recover_segments(
    segments: &mut BTreeMap<i64, LogSegment>,
    needs_recovery: &[bool],
    recover_from: i64,
    stats: &mut RecoveryStats,
) -> Result<Option<i64>, StorageError> {
    let mut previous_end = i64::MIN;
    for (i, (&base, segment)) in segments.iter_mut().enumerate() {
        if base < previous_end {
            // Overlaps the previous segment: not a log we can serve from.
            return Ok(Some(base));
        }
        if base >= recover_from || needs_recovery.get(i).copied().unwrap_or(true) {
            stats.needed_recovery = true;
            stats.segments_recovered += 1;
            let truncated = segment.recover()?;
            segment.flush_and_release()?;
            stats.bytes_truncated += truncated;
            if truncated > 0 {
                return Ok(Some(base + 1));
            }
        }
        previous_end = segment.next_offset();
    }
    Ok(None)
}

/// Deletes the files of every segment based at or past `cut`, counting them as truncated.
fn delete_segments_from(
    segments: &mut BTreeMap<i64, LogSegment>,
    cut: i64,
    stats: &mut RecoveryStats,
) -> Result<(), StorageError> {
    let doomed: Vec<i64> = segments.range(cut..).map(|(base, _)| *base).collect();
    for base in doomed {
        if let Some(segment) = segments.remove(&base) {
            stats.segments_deleted += 1;
            stats.bytes_truncated += segment.size();
            delete_segment_files(segment)?;
        }
    }
    Ok(())
}

/// Removes leftovers of interrupted operations, finishes interrupted cleaner swaps, and returns
/// the base offsets of the segments.
fn clean_dir_and_list_segments(dir: &Path) -> Result<Vec<i64>, StorageError> {
    let mut swaps = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.ends_with(DELETED_FILE_SUFFIX) || name.ends_with(CLEANED_FILE_SUFFIX) {
            // A deletion, or a cleaning pass before its commit point: not wanted.
            std::fs::remove_file(&path).at(&path)?;
        } else if let Some(stem) = name.strip_suffix(SWAP_FILE_SUFFIX) {
            match parse_segment_file_name(stem, LOG_FILE_SUFFIX) {
                Some(base) => swaps.push(base),
                // Its log's swap completes it, or (the log renamed first) it belongs to the
                // segment now in place: the replaced segment's went to `.deleted` before.
                None if parse_segment_file_name(stem, TXN_INDEX_FILE_SUFFIX).is_some() => {}
                // A swapped index: rebuilt from its log instead.
                None => std::fs::remove_file(&path).at(&path)?,
            }
        }
    }
    swaps.sort_unstable();
    for base in swaps {
        complete_swap(dir, base)?;
    }
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SWAP_FILE_SUFFIX)) else {
            continue;
        };
        if parse_segment_file_name(stem, TXN_INDEX_FILE_SUFFIX).is_some() {
            let path = entry.path();
            std::fs::rename(&path, dir.join(stem)).at(&path)?;
        }
    }
    let mut bases = Vec::new();
    let mut index_files = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(base) = parse_segment_file_name(&name, LOG_FILE_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = parse_segment_file_name(&name, INDEX_FILE_SUFFIX)
            .or_else(|| parse_segment_file_name(&name, TIME_INDEX_FILE_SUFFIX))
            .or_else(|| parse_segment_file_name(&name, TXN_INDEX_FILE_SUFFIX))
        {
            index_files.push((base, path));
        }
    }
    bases.sort_unstable();
    for (base, path) in index_files {
        if bases.binary_search(&base).is_err() {
            // An index without its log describes nothing.
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    Ok(bases)
}

/// Finishes a cleaner swap cut short by a crash: the `.swap` segment was fully written and
/// synced before it got that name, so it replaces the segments it covers (those based in
/// `[base, its next offset)`), whose indexes go too and are rebuilt from the new log. A swap
/// file that does not read back whole is discarded instead, keeping the old segments.
fn complete_swap(dir: &Path, base: i64) -> Result<(), StorageError> {
    let swap = dir.join(segment_file_name(base, LOG_FILE_SUFFIX) + SWAP_FILE_SUFFIX);
    let txn_swap = dir.join(segment_file_name(base, TXN_INDEX_FILE_SUFFIX) + SWAP_FILE_SUFFIX);
    let Some(next_offset) = scan_whole_segment(&swap, base)? else {
        tracing::warn!(path = %swap.display(), "discarding a cleaned segment that does not read back whole");
        if txn_swap.exists() {
            std::fs::remove_file(&txn_swap).at(&txn_swap)?;
        }
        return std::fs::remove_file(&swap).at(&swap);
    };
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let covered = [
            LOG_FILE_SUFFIX,
            INDEX_FILE_SUFFIX,
            TIME_INDEX_FILE_SUFFIX,
            TXN_INDEX_FILE_SUFFIX,
        ]
        .iter()
        .filter_map(|suffix| parse_segment_file_name(name, suffix))
        .any(|b| b == base || (b > base && b < next_offset));
        if covered {
            let path = entry.path();
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    let target = dir.join(segment_file_name(base, LOG_FILE_SUFFIX));
    std::fs::rename(&swap, &target).at(&swap)?;
    sync_dir(dir)?;
    tracing::info!(segment = %target.display(), "completed an interrupted cleaner swap");
    Ok(())
}

/// The next offset of a segment file if its batches line up to its end with valid CRCs. Reads
/// one batch at a time.
fn scan_whole_segment(path: &Path, base: i64) -> Result<Option<i64>, StorageError> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).at(path)?;
    let size = file.metadata().at(path)?.len();
    let mut position = 0u64;
    let mut next = base;
    let mut header_bytes = [0u8; fjord_records::BATCH_HEADER_LEN];
    let mut batch = Vec::new();
    while position < size {
        if file.read_exact_at(&mut header_bytes, position).is_err() {
            return Ok(None);
        }
        let Ok(header) = fjord_records::BatchHeader::parse(&header_bytes) else {
            return Ok(None);
        };
        let len = header.total_len() as u64;
        if header.base_offset < next || position + len > size {
            return Ok(None);
        }
        batch.resize(header.total_len(), 0);
        file.read_exact_at(&mut batch, position).at(path)?;
        if fjord_records::header::compute_crc(&batch) != header.crc {
            return Ok(None);
        }
        next = header.last_offset() + 1;
        position += len;
    }
    Ok(Some(next))
}

/// Directory versions come from one counter shared by every log, so a flush ticket taken on a
/// log that was since replaced (moved to another log dir) can never vouch for the directory of
/// the log that replaced it.
fn next_dir_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Renames a segment's files `.deleted` and removes them at once. A segment whose directory is
/// already gone (a cleaning pass voided after its log moved to another log dir) has nothing
/// left to delete.
pub(crate) fn delete_segment_files(mut segment: LogSegment) -> Result<(), StorageError> {
    if !segment.log_path().exists() {
        return Ok(());
    }
    for path in segment.rename_to_deleted()? {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e).at(&path),
            _ => {}
        }
    }
    Ok(())
}
