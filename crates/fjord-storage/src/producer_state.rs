//! Idempotent and transactional producer state of one partition and its `<offset>.snapshot`
//! files.
//!
//! For every producer id seen in the log the manager keeps the producer epoch, the metadata of
//! its last [`NUM_BATCHES_TO_RETAIN`] batches (to answer retries with the original offsets), the
//! timestamp used to expire idle producers, and its open transaction's first offset (the least
//! of which is the first unstable offset, bounding the last stable offset). A commit or abort
//! marker ends a producer's transaction: [`ProducerStateManager::record_append`] then tells
//! the log of the completed transaction, so an aborted one goes into the aborted-transaction
//! index. [`ProducerStateManager::check`] applies Kafka's
//! sequence and epoch rules to an incoming client batch; [`ProducerStateManager::record_append`]
//! folds an appended batch in. The state is sans-IO; the snapshot functions read and write
//! Kafka's binary snapshot format (version 1, CRC32C) in a partition directory so the log can
//! rebuild state from the newest snapshot plus the batches after it.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use fjord_common::errors;
use fjord_records::control::EndTxnMarker;
use fjord_records::BatchHeader;

use crate::checkpoint::write_file_atomically;

/// Batches remembered per producer for duplicate detection; clients keep at most this many
/// requests in flight when idempotence is on.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// File name suffix of producer snapshots; the stem is the 20-digit offset the snapshot covers
/// up to (exclusive).
pub const PRODUCER_SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
/// The only snapshot format version Kafka defines.
pub const PRODUCER_SNAPSHOT_VERSION: i16 = 1;

const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;
const NO_TIMESTAMP: i64 = -1;
const NO_COORDINATOR_EPOCH: i32 = -1;

const CRC_OFFSET: usize = 2;
const ENTRIES_OFFSET: usize = CRC_OFFSET + 4;
/// producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch,
/// current transaction first offset.
const SNAPSHOT_ENTRY_LEN: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

#[derive(Debug, thiserror::Error)]
pub enum ProducerStateError {
    #[error(
        "producer {producer_id} sent epoch {batch_epoch}, older than its current epoch \
         {current_epoch}"
    )]
    InvalidProducerEpoch {
        producer_id: i64,
        batch_epoch: i16,
        current_epoch: i16,
    },
    #[error(
        "out of order sequence number for producer {producer_id} (epoch {producer_epoch}): \
         incoming first sequence {first_sequence}, last appended sequence {last_sequence}"
    )]
    OutOfOrderSequence {
        producer_id: i64,
        producer_epoch: i16,
        first_sequence: i32,
        /// `-1` when the producer has no retained batch in its current epoch.
        last_sequence: i32,
    },
    #[error("producer {producer_id} wrote a non-transactional batch during its open transaction")]
    InvalidTxnState { producer_id: i64 },
    #[error(
        "marker for producer {producer_id} from coordinator epoch {marker_epoch}, older than \
         {current_epoch}"
    )]
    CoordinatorFenced {
        producer_id: i64,
        marker_epoch: i32,
        current_epoch: i32,
    },
    #[error("corrupt producer snapshot {path}: {reason}")]
    CorruptSnapshot { path: PathBuf, reason: String },
    #[error("producer snapshot I/O error in {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl ProducerStateError {
    /// The Kafka error code a produce response carries for this error.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            Self::InvalidProducerEpoch { .. } => errors::INVALID_PRODUCER_EPOCH,
            Self::OutOfOrderSequence { .. } => errors::OUT_OF_ORDER_SEQUENCE_NUMBER,
            Self::InvalidTxnState { .. } => errors::INVALID_TXN_STATE,
            Self::CoordinatorFenced { .. } => errors::TRANSACTION_COORDINATOR_FENCED,
            Self::CorruptSnapshot { .. } | Self::Io { .. } => errors::KAFKA_STORAGE_ERROR,
        }
    }
}

/// Verdict on an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append the batch.
    Append,
    /// A retry of a batch already in the log: answer with its original offsets, append nothing.
    Duplicate {
        base_offset: i64,
        last_offset: i64,
        max_timestamp: i64,
    },
}

/// What is remembered of one appended batch, stored as Kafka stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    /// `last_offset - first_offset`, which is also the sequence span of the batch.
    pub offset_delta: i32,
    pub max_timestamp: i64,
}

impl BatchMetadata {
    /// First sequence of the batch, undoing the wrap at `i32::MAX` the way the client applies it.
    pub fn first_seq(&self) -> i32 {
        if self.last_seq < self.offset_delta {
            self.last_seq
                .wrapping_add(i32::MAX.wrapping_sub(self.offset_delta))
                .wrapping_add(1)
        } else {
            self.last_seq.wrapping_sub(self.offset_delta)
        }
    }

    pub fn first_offset(&self) -> i64 {
        self.last_offset
            .saturating_sub(i64::from(self.offset_delta))
    }
}

/// The state of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Oldest first; at most [`NUM_BATCHES_TO_RETAIN`], all from `producer_epoch`.
    pub batches: VecDeque<BatchMetadata>,
    pub coordinator_epoch: i32,
    /// Max timestamp of the producer's last batch; drives expiration.
    pub last_timestamp: i64,
    /// First offset of the producer's open transaction.
    pub current_txn_first_offset: Option<i64>,
}

/// A transaction a marker ended on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    /// Its first batch's offset (the marker's own when it wrote nothing here).
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
    /// The last stable offset once it completed: the first offset of the oldest transaction
    /// still open, else just past the marker.
    pub last_stable_offset: i64,
}

impl ProducerStateEntry {
    fn empty(producer_id: i64) -> Self {
        Self {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            coordinator_epoch: NO_COORDINATOR_EPOCH,
            last_timestamp: NO_TIMESTAMP,
            current_txn_first_offset: None,
        }
    }

    /// Sequence of the last retained batch, `-1` if none.
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    fn find_duplicate(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq() == first_seq && b.last_seq == last_seq)
            .copied()
    }

    fn set_epoch(&mut self, epoch: i16) {
        if epoch != self.producer_epoch {
            // A new epoch restarts sequences, so older batches can no longer be matched.
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) {
        self.set_epoch(epoch);
        if self.batches.len() == NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.last_timestamp = batch.max_timestamp;
    }
}

/// Producer state of one partition, built up to [`ProducerStateManager::last_mapped_offset`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: BTreeMap<i64, ProducerStateEntry>,
    /// Open transactions as (first offset, producer id): the first is the first unstable offset.
    ongoing: BTreeSet<(i64, i64)>,
    last_mapped_offset: i64,
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

impl ProducerStateManager {
    /// Empty state for a log whose batches will be folded in from `start_offset`.
    pub fn new(start_offset: i64) -> Self {
        Self {
            producers: BTreeMap::new(),
            ongoing: BTreeSet::new(),
            last_mapped_offset: start_offset,
        }
    }

    fn with_producers(producers: BTreeMap<i64, ProducerStateEntry>, offset: i64) -> Self {
        let ongoing = producers
            .values()
            .filter_map(|e| Some((e.current_txn_first_offset?, e.producer_id)))
            .collect();
        Self {
            producers,
            ongoing,
            last_mapped_offset: offset,
        }
    }

    /// The first offset of the oldest open transaction: nothing from it on is stable.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(offset, _)| *offset)
    }

    /// Applies Kafka's rules to a commit or abort marker about to be written for `header`'s
    /// producer: an older producer epoch or coordinator epoch than the partition has seen is
    /// fenced. On transaction version 2 (`epoch_bumps`, KIP-1228) a marker carries the epoch
    /// its end bumped to, so one at the producer's current epoch is stale too — a late marker
    /// of the previous transaction, which must not end the one open now — unless no
    /// transaction is open (a marker written already and sent again) or the epoch cannot grow.
    pub fn check_marker(
        &self,
        header: &BatchHeader,
        marker: &EndTxnMarker,
        epoch_bumps: bool,
    ) -> Result<(), ProducerStateError> {
        let Some(entry) = self.producers.get(&header.producer_id) else {
            return Ok(());
        };
        let stale = if epoch_bumps {
            header.producer_epoch <= entry.producer_epoch
                && !(header.producer_epoch == entry.producer_epoch
                    && (entry.current_txn_first_offset.is_none()
                        || header.producer_epoch == i16::MAX))
        } else {
            header.producer_epoch < entry.producer_epoch
        };
        if stale {
            return Err(ProducerStateError::InvalidProducerEpoch {
                producer_id: header.producer_id,
                batch_epoch: header.producer_epoch,
                current_epoch: entry.producer_epoch,
            });
        }
        if marker.coordinator_epoch < entry.coordinator_epoch {
            return Err(ProducerStateError::CoordinatorFenced {
                producer_id: header.producer_id,
                marker_epoch: marker.coordinator_epoch,
                current_epoch: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Applies Kafka's rules for a batch a coordinator writes in a producer's name (a
    /// transaction's offset commits): only an older producer epoch is refused. Coordinators
    /// carry no sequence numbers and never retry a batch, so neither is checked.
    pub fn check_coordinator(&self, header: &BatchHeader) -> Result<(), ProducerStateError> {
        match self.producers.get(&header.producer_id) {
            Some(entry) if header.producer_epoch < entry.producer_epoch => {
                Err(ProducerStateError::InvalidProducerEpoch {
                    producer_id: header.producer_id,
                    batch_epoch: header.producer_epoch,
                    current_epoch: entry.producer_epoch,
                })
            }
            _ => Ok(()),
        }
    }

    /// Applies Kafka's rules for a data batch (transactional or not) arriving from a client.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, ProducerStateError> {
        let producer_id = header.producer_id;
        if producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            // Kafka accepts any first sequence from a producer it has no state for: the state
            // may have expired or been removed with the data that built it.
            return Ok(SequenceCheck::Append);
        };
        let epoch = header.producer_epoch;
        let first_seq = header.base_sequence;
        if let Some(dup) = entry.find_duplicate(epoch, first_seq, header.last_sequence()) {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.first_offset(),
                last_offset: dup.last_offset,
                max_timestamp: dup.max_timestamp,
            });
        }
        if epoch < entry.producer_epoch {
            return Err(ProducerStateError::InvalidProducerEpoch {
                producer_id,
                batch_epoch: epoch,
                current_epoch: entry.producer_epoch,
            });
        }
        if !header.is_transactional() && entry.current_txn_first_offset.is_some() {
            return Err(ProducerStateError::InvalidTxnState { producer_id });
        }
        let out_of_order = || ProducerStateError::OutOfOrderSequence {
            producer_id,
            producer_epoch: epoch,
            first_sequence: first_seq,
            last_sequence: entry.last_seq(),
        };
        if epoch != entry.producer_epoch {
            // A bumped epoch must restart at 0, unless the entry never had an epoch.
            if first_seq != 0 && entry.producer_epoch != NO_PRODUCER_EPOCH {
                return Err(out_of_order());
            }
        } else if entry.producer_epoch != NO_PRODUCER_EPOCH
            && !in_sequence(entry.last_seq(), first_seq)
        {
            // Without a known epoch there is no sequence to continue from.
            return Err(out_of_order());
        }
        Ok(SequenceCheck::Append)
    }

    /// The producer's epoch and last sequence as this state has them, to check an append
    /// against with [`Self::assert_sequence_continued`].
    pub fn sequence_of(&self, producer_id: i64) -> Option<(i16, i32)> {
        self.producers
            .get(&producer_id)
            .map(|e| (e.producer_epoch, e.last_seq()))
    }

    /// After a client's batch that [`Self::check`] let through was appended: within an epoch
    /// its sequences continue the producer's (`before`, from [`Self::sequence_of`]). A batch
    /// out of sequence here means the check is broken, not the client.
    pub fn assert_sequence_continued(before: Option<(i16, i32)>, header: &BatchHeader) {
        let Some((epoch, last_seq)) = before else {
            return;
        };
        if header.producer_id >= 0 && epoch == header.producer_epoch && epoch != NO_PRODUCER_EPOCH {
            assert!(
                in_sequence(last_seq, header.base_sequence),
                "producer sequences grow per epoch: producer {} epoch {epoch} appended sequence {} after {last_seq}",
                header.producer_id,
                header.base_sequence
            );
        }
    }

    /// Folds in a batch that has been appended (offsets assigned). Every appended batch should
    /// be passed, with or without a producer id, so [`Self::last_mapped_offset`] tracks the log;
    /// a control batch with the marker it holds. `append_time_ms` is the batch timestamp when the
    /// topic uses LogAppendTime. A marker answers the transaction it completed.
    pub fn record_append(
        &mut self,
        header: &BatchHeader,
        append_time_ms: i64,
        marker: Option<EndTxnMarker>,
    ) -> Option<CompletedTxn> {
        let last_offset = header
            .base_offset
            .saturating_add(i64::from(header.last_offset_delta));
        self.last_mapped_offset = last_offset.saturating_add(1);
        if header.producer_id < 0 {
            return None;
        }
        if header.is_control() {
            // Control batches other than markers (none from clients) change no producer.
            let marker = marker?;
            let entry = self
                .producers
                .entry(header.producer_id)
                .or_insert_with(|| ProducerStateEntry::empty(header.producer_id));
            entry.set_epoch(header.producer_epoch);
            entry.coordinator_epoch = marker.coordinator_epoch;
            let first_offset = match entry.current_txn_first_offset.take() {
                Some(first) => {
                    self.ongoing.remove(&(first, header.producer_id));
                    first
                }
                None => header.base_offset,
            };
            let last_stable_offset = self
                .first_unstable_offset()
                .unwrap_or(last_offset.saturating_add(1));
            return Some(CompletedTxn {
                producer_id: header.producer_id,
                first_offset,
                last_offset,
                aborted: !marker.commit,
                last_stable_offset,
            });
        }
        let max_timestamp = if header.is_log_append_time() {
            append_time_ms
        } else {
            header.max_timestamp
        };
        let batch = BatchMetadata {
            last_seq: header.last_sequence(),
            last_offset,
            offset_delta: header.last_offset_delta,
            max_timestamp,
        };
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(header.producer_id));
        entry.add_batch(header.producer_epoch, batch);
        if header.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(header.base_offset);
            self.ongoing
                .insert((header.base_offset, header.producer_id));
        }
        None
    }

    /// The offset up to which (exclusive) batches have been folded in.
    pub fn last_mapped_offset(&self) -> i64 {
        self.last_mapped_offset
    }

    /// Moves [`Self::last_mapped_offset`] up to a new log start offset; state below it stays, as
    /// producers may still be retrying batches that were deleted.
    pub fn on_log_start_offset_incremented(&mut self, log_start_offset: i64) {
        self.last_mapped_offset = self.last_mapped_offset.max(log_start_offset);
    }

    pub fn last_entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// Active producers, by producer id.
    pub fn producers(&self) -> impl Iterator<Item = &ProducerStateEntry> {
        self.producers.values()
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Forgets producers whose last batch timestamp is at least `producer_id_expiration_ms`
    /// (the broker's `producer.id.expiration.ms`) before `now_ms`, except those with an open
    /// transaction.
    pub fn remove_expired_producers(&mut self, now_ms: i64, producer_id_expiration_ms: i64) {
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < producer_id_expiration_ms
        });
    }

    /// Drops all state and snapshots; folding restarts at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, dir: &Path, offset: i64) -> io::Result<()> {
        self.producers.clear();
        self.ongoing.clear();
        self.last_mapped_offset = offset;
        delete_snapshots_matching(dir, |_| true)
    }

    /// Brings the state in line with a log now spanning `log_start_offset..log_end_offset`, as
    /// after truncation or at startup. Snapshots outside `(log_start_offset, log_end_offset]` are
    /// deleted; if the state does not already end at `log_end_offset` it is reloaded from the
    /// newest remaining snapshot (or emptied to start at `log_start_offset`). The caller then
    /// re-folds the batches from [`Self::last_mapped_offset`] to `log_end_offset`.
    pub fn truncate_and_reload(
        &mut self,
        dir: &Path,
        log_start_offset: i64,
        log_end_offset: i64,
    ) -> Result<(), ProducerStateError> {
        delete_snapshots_matching(dir, |o| o > log_end_offset || o <= log_start_offset)
            .map_err(|source| io_error(dir, source))?;
        if log_end_offset != self.last_mapped_offset {
            *self = Self::load_latest_snapshot(dir, log_end_offset)?;
        }
        self.on_log_start_offset_incremented(log_start_offset);
        Ok(())
    }

    /// Writes the state to `<dir>/<20-digit last_mapped_offset>.snapshot` atomically and returns
    /// the file's path.
    pub fn take_snapshot(&self, dir: &Path) -> io::Result<PathBuf> {
        let path = self.snapshot_path(dir)?;
        write_file_atomically(&path, &self.encode_snapshot())?;
        Ok(path)
    }

    /// Where the snapshot of the state as it stands goes.
    fn snapshot_path(&self, dir: &Path) -> io::Result<PathBuf> {
        if self.last_mapped_offset < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot snapshot at negative offset {}",
                    self.last_mapped_offset
                ),
            ));
        }
        Ok(snapshot_path(dir, self.last_mapped_offset))
    }

    /// Writes the snapshot as `take_snapshot` does, but in place and without waiting for the
    /// disk: for a segment roll, under the log's lock, where an fsync would hold up every append
    /// to the partition. The returned file is synced by the log's next flush; until then a crash
    /// may leave it torn, and a torn snapshot fails its CRC at load and an older one is used.
    pub fn write_snapshot_unsynced(&self, dir: &Path) -> io::Result<fs::File> {
        let mut file = fs::File::create(self.snapshot_path(dir)?)?;
        io::Write::write_all(&mut file, &self.encode_snapshot())?;
        Ok(file)
    }

    /// Loads the newest snapshot at or below `max_offset`. A corrupt snapshot is deleted (as
    /// Kafka does) and the next older one tried; with none usable the state is empty at offset 0,
    /// which the caller raises with [`Self::on_log_start_offset_incremented`].
    pub fn load_latest_snapshot(dir: &Path, max_offset: i64) -> Result<Self, ProducerStateError> {
        let mut offsets = list_snapshot_offsets(dir).map_err(|source| io_error(dir, source))?;
        offsets.retain(|&o| o <= max_offset);
        for &offset in offsets.iter().rev() {
            let path = snapshot_path(dir, offset);
            let bytes = fs::read(&path).map_err(|source| ProducerStateError::Io {
                path: path.clone(),
                source,
            })?;
            match decode_snapshot(&bytes) {
                Ok(producers) => return Ok(Self::with_producers(producers, offset)),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "deleting corrupt producer snapshot");
                    remove_if_exists(&path).map_err(|source| ProducerStateError::Io {
                        path: path.clone(),
                        source,
                    })?;
                }
            }
        }
        Ok(Self::new(0))
    }

    /// Deletes snapshots covering more than `offset` (file offset greater than `offset`).
    pub fn delete_snapshots_after(dir: &Path, offset: i64) -> io::Result<()> {
        delete_snapshots_matching(dir, |o| o > offset)
    }

    /// Deletes snapshots with a file offset below `offset`.
    pub fn delete_snapshots_before(dir: &Path, offset: i64) -> io::Result<()> {
        delete_snapshots_matching(dir, |o| o < offset)
    }

    /// Offset of the newest snapshot in `dir`, if any.
    pub fn latest_snapshot_offset(dir: &Path) -> io::Result<Option<i64>> {
        Ok(list_snapshot_offsets(dir)?.last().copied())
    }

    fn encode_snapshot(&self) -> Vec<u8> {
        let mut buf =
            Vec::with_capacity(ENTRIES_OFFSET + 4 + self.producers.len() * SNAPSHOT_ENTRY_LEN);
        buf.extend_from_slice(&PRODUCER_SNAPSHOT_VERSION.to_be_bytes());
        buf.extend_from_slice(&[0; 4]);
        let count = i32::try_from(self.producers.len()).unwrap_or(i32::MAX);
        buf.extend_from_slice(&count.to_be_bytes());
        for (&producer_id, e) in self.producers.iter().take(count as usize) {
            let last = e.batches.back();
            buf.extend_from_slice(&producer_id.to_be_bytes());
            buf.extend_from_slice(&e.producer_epoch.to_be_bytes());
            buf.extend_from_slice(&e.last_seq().to_be_bytes());
            buf.extend_from_slice(&last.map_or(-1, |b| b.last_offset).to_be_bytes());
            buf.extend_from_slice(&last.map_or(0, |b| b.offset_delta).to_be_bytes());
            buf.extend_from_slice(&e.last_timestamp.to_be_bytes());
            buf.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            buf.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = crc32c::crc32c(buf.get(ENTRIES_OFFSET..).unwrap_or(&[]));
        if let Some(slot) = buf.get_mut(CRC_OFFSET..ENTRIES_OFFSET) {
            slot.copy_from_slice(&crc.to_be_bytes());
        }
        buf
    }
}

fn io_error(path: &Path, source: io::Error) -> ProducerStateError {
    ProducerStateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A big-endian reader over untrusted bytes; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or_else(|| "truncated".to_string())?;
        self.buf = rest;
        Ok(*head)
    }
    fn i16(&mut self) -> Result<i16, String> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_be_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_be_bytes)
    }
}

fn decode_snapshot(bytes: &[u8]) -> Result<BTreeMap<i64, ProducerStateEntry>, String> {
    let mut r = Reader { buf: bytes };
    let version = r.i16()?;
    if version != PRODUCER_SNAPSHOT_VERSION {
        return Err(format!("unknown snapshot version {version}"));
    }
    let stored_crc = u32::from_be_bytes(r.take()?);
    let computed_crc = crc32c::crc32c(bytes.get(ENTRIES_OFFSET..).unwrap_or(&[]));
    if stored_crc != computed_crc {
        return Err(format!(
            "CRC mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}"
        ));
    }
    let count = r.i32()?;
    let count = usize::try_from(count).map_err(|_| format!("invalid entry count {count}"))?;
    // Checking the length first bounds the work and allocation by the file size.
    if count.checked_mul(SNAPSHOT_ENTRY_LEN) != Some(r.buf.len()) {
        return Err(format!(
            "{count} entries declared but {} bytes of entries present",
            r.buf.len()
        ));
    }
    let mut producers = BTreeMap::new();
    for _ in 0..count {
        let producer_id = r.i64()?;
        let producer_epoch = r.i16()?;
        let last_seq = r.i32()?;
        let last_offset = r.i64()?;
        let offset_delta = r.i32()?;
        let timestamp = r.i64()?;
        let coordinator_epoch = r.i32()?;
        let txn_first_offset = r.i64()?;
        let mut batches = VecDeque::new();
        if last_offset >= 0 {
            batches.push_back(BatchMetadata {
                last_seq,
                last_offset,
                offset_delta,
                max_timestamp: timestamp,
            });
        }
        producers.insert(
            producer_id,
            ProducerStateEntry {
                producer_id,
                producer_epoch,
                batches,
                coordinator_epoch,
                last_timestamp: timestamp,
                current_txn_first_offset: (txn_first_offset >= 0).then_some(txn_first_offset),
            },
        );
    }
    Ok(producers)
}

/// `<dir>/<offset as 20 digits>.snapshot`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{PRODUCER_SNAPSHOT_FILE_SUFFIX}"))
}

/// Offsets of the snapshot files in `dir`, ascending. Files whose name does not start with a
/// number are not snapshots and are skipped. A missing directory has none.
pub fn list_snapshot_offsets(dir: &Path) -> io::Result<Vec<i64>> {
    let read_dir = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut offsets = Vec::new();
    for entry in read_dir {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(PRODUCER_SNAPSHOT_FILE_SUFFIX) else {
            continue;
        };
        // fjord and Kafka both name snapshots with exactly 20 digits.
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(offset) = stem.parse::<i64>() {
                offsets.push(offset);
            }
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn delete_snapshots_matching(dir: &Path, doomed: impl Fn(i64) -> bool) -> io::Result<()> {
    for offset in list_snapshot_offsets(dir)? {
        if doomed(offset) {
            remove_if_exists(&snapshot_path(dir, offset))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use fjord_records::header::attributes;
    use proptest::prelude::*;

    fn batch(pid: i64, epoch: i16, base_seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 1_000,
            max_timestamp: 1_000 + base_offset,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: base_seq,
            record_count: count,
        }
    }

    #[test]
    fn an_append_continues_its_producers_sequence_or_asserts() {
        let m = six_batches();
        let before = m.sequence_of(7);
        assert_eq!(before, Some((2, 11)));
        // In sequence, a new epoch, another producer: nothing to object to.
        ProducerStateManager::assert_sequence_continued(before, &batch(7, 2, 12, 1, 112));
        ProducerStateManager::assert_sequence_continued(before, &batch(7, 3, 0, 1, 112));
        ProducerStateManager::assert_sequence_continued(m.sequence_of(8), &batch(8, 0, 5, 1, 112));
        let gap = std::panic::catch_unwind(|| {
            ProducerStateManager::assert_sequence_continued(before, &batch(7, 2, 14, 1, 112))
        });
        assert!(gap.is_err(), "a gap within an epoch is a broken check");
    }

    /// Producer 7, epoch 2: six batches of two records, sequences 0..12 at offsets 100..112.
    fn six_batches() -> ProducerStateManager {
        let mut m = ProducerStateManager::new(100);
        for i in 0..6 {
            m.record_append(&batch(7, 2, i * 2, 2, 100 + i64::from(i) * 2), 0, None);
        }
        m
    }

    fn out_of_order(r: Result<SequenceCheck, ProducerStateError>) -> bool {
        matches!(r, Err(ProducerStateError::OutOfOrderSequence { .. }))
    }

    #[test]
    fn batches_without_producer_id_always_append() {
        let m = six_batches();
        for pid in [-1, -5] {
            assert_eq!(
                m.check(&batch(pid, -1, -1, 3, 0)).unwrap(),
                SequenceCheck::Append
            );
        }
    }

    #[test]
    fn unknown_producer_accepts_any_sequence() {
        let m = six_batches();
        for seq in [0, 1, 42, i32::MAX] {
            assert_eq!(
                m.check(&batch(8, 0, seq, 1, 0)).unwrap(),
                SequenceCheck::Append
            );
        }
    }

    #[test]
    fn sequence_rules_table() {
        let m = six_batches();
        assert_eq!(
            m.last_entry(7).unwrap().batches.len(),
            NUM_BATCHES_TO_RETAIN
        );
        // Duplicates of each of the last five batches return the original offsets.
        for i in 1..6 {
            let base_offset = 100 + i64::from(i) * 2;
            assert_eq!(
                m.check(&batch(7, 2, i * 2, 2, 999)).unwrap(),
                SequenceCheck::Duplicate {
                    base_offset,
                    last_offset: base_offset + 1,
                    max_timestamp: 1_000 + base_offset,
                },
                "batch {i}"
            );
        }
        type Expect = fn(Result<SequenceCheck, ProducerStateError>) -> bool;
        let append: Expect = |r| matches!(r, Ok(SequenceCheck::Append));
        let fenced: Expect = |r| {
            matches!(
                r,
                Err(ProducerStateError::InvalidProducerEpoch {
                    batch_epoch: 1,
                    current_epoch: 2,
                    ..
                })
            )
        };
        let table: &[(&str, BatchHeader, Expect)] = &[
            ("next in sequence", batch(7, 2, 12, 3, 0), append),
            (
                "evicted sixth-newest batch",
                batch(7, 2, 0, 2, 0),
                out_of_order,
            ),
            ("gap", batch(7, 2, 13, 1, 0), out_of_order),
            (
                "overlap with last batch",
                batch(7, 2, 11, 2, 0),
                out_of_order,
            ),
            (
                "same range, different length",
                batch(7, 2, 10, 1, 0),
                out_of_order,
            ),
            ("fenced epoch", batch(7, 1, 12, 1, 0), fenced),
            (
                "fenced epoch, duplicate range",
                batch(7, 1, 10, 2, 0),
                fenced,
            ),
            ("new epoch from zero", batch(7, 3, 0, 1, 0), append),
            (
                "new epoch not from zero",
                batch(7, 3, 12, 1, 0),
                out_of_order,
            ),
            (
                "new epoch, old duplicate range",
                batch(7, 3, 10, 2, 0),
                out_of_order,
            ),
        ];
        for (name, header, expect) in table {
            assert!(expect(m.check(header)), "{name}: {:?}", m.check(header));
        }
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut m = ProducerStateManager::new(0);
        m.record_append(&batch(1, 0, i32::MAX - 1, 2, 0), 0, None);
        assert_eq!(m.last_entry(1).unwrap().last_seq(), i32::MAX);
        assert_eq!(
            m.check(&batch(1, 0, 0, 1, 0)).unwrap(),
            SequenceCheck::Append
        );
        assert!(out_of_order(m.check(&batch(1, 0, 1, 1, 0))));

        // A batch whose sequences cross the wrap point.
        m.record_append(&batch(1, 0, i32::MAX, 3, 2), 0, None);
        let entry = m.last_entry(1).unwrap();
        assert_eq!(entry.last_seq(), 1);
        assert_eq!(entry.batches.back().unwrap().first_seq(), i32::MAX);
        assert_eq!(
            m.check(&batch(1, 0, 2, 1, 0)).unwrap(),
            SequenceCheck::Append
        );
        assert_eq!(
            m.check(&batch(1, 0, i32::MAX, 3, 50)).unwrap(),
            SequenceCheck::Duplicate {
                base_offset: 2,
                last_offset: 4,
                max_timestamp: 1_002
            }
        );
    }

    #[test]
    fn entry_without_batches_needs_sequence_zero() {
        let dir = tempfile::tempdir().unwrap();
        // An epoch known only from a snapshot whose last batch is gone (last offset -1).
        let mut bytes = snapshot_header(1);
        push_entry(&mut bytes, 5, 4, -1, -1, 0, 10, -1, -1);
        write_with_crc(&snapshot_path(dir.path(), 10), bytes);
        let m = ProducerStateManager::load_latest_snapshot(dir.path(), 10).unwrap();
        assert_eq!(
            m.check(&batch(5, 4, 0, 1, 10)).unwrap(),
            SequenceCheck::Append
        );
        assert!(out_of_order(m.check(&batch(5, 4, 3, 1, 10))));
    }

    #[test]
    fn entry_without_epoch_accepts_any_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = snapshot_header(1);
        push_entry(&mut bytes, 5, -1, 3, 0, 0, 10, -1, -1);
        write_with_crc(&snapshot_path(dir.path(), 1), bytes);
        let m = ProducerStateManager::load_latest_snapshot(dir.path(), 1).unwrap();
        assert_eq!(
            m.check(&batch(5, -1, 9, 1, 1)).unwrap(),
            SequenceCheck::Append
        );
        assert_eq!(
            m.check(&batch(5, 0, 9, 1, 1)).unwrap(),
            SequenceCheck::Append
        );
    }

    #[test]
    fn error_codes() {
        let m = six_batches();
        assert_eq!(
            m.check(&batch(7, 1, 12, 1, 0))
                .unwrap_err()
                .kafka_error_code(),
            47
        );
        assert_eq!(
            m.check(&batch(7, 2, 99, 1, 0))
                .unwrap_err()
                .kafka_error_code(),
            45
        );
        let corrupt = ProducerStateError::CorruptSnapshot {
            path: PathBuf::new(),
            reason: String::new(),
        };
        assert_eq!(corrupt.kafka_error_code(), 56);
    }

    #[test]
    fn record_append_tracks_offsets_epochs_and_times() {
        let mut m = ProducerStateManager::new(0);
        m.record_append(&batch(-1, -1, -1, 4, 0), 0, None);
        assert_eq!((m.last_mapped_offset(), m.producer_count()), (4, 0));
        m.record_append(&batch(3, 0, 0, 2, 4), 0, None);
        assert_eq!(m.last_mapped_offset(), 6);
        let mut lat = batch(3, 1, 0, 1, 6);
        lat.attributes = attributes::TIMESTAMP_TYPE_LOG_APPEND;
        m.record_append(&lat, 77_777, None);
        let e = m.last_entry(3).unwrap();
        assert_eq!(
            (e.producer_epoch, e.batches.len()),
            (1, 1),
            "new epoch clears batches"
        );
        assert_eq!(e.last_timestamp, 77_777);
        assert_eq!(e.batches[0].max_timestamp, 77_777);
        m.on_log_start_offset_incremented(3);
        assert_eq!(m.last_mapped_offset(), 7);
        m.on_log_start_offset_incremented(50);
        assert_eq!(m.last_mapped_offset(), 50);
    }

    #[test]
    fn expiration() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = snapshot_header(3);
        push_entry(&mut bytes, 1, 0, 0, 0, 0, 1_000, -1, -1);
        push_entry(&mut bytes, 2, 0, 0, 1, 0, 5_000, -1, -1);
        // An open transaction keeps an idle producer, as does a far-future timestamp.
        push_entry(&mut bytes, 3, 0, 0, 2, 0, i64::MIN, 7, 2);
        write_with_crc(&snapshot_path(dir.path(), 3), bytes);
        let mut m = ProducerStateManager::load_latest_snapshot(dir.path(), 3).unwrap();
        m.remove_expired_producers(6_000, 5_000);
        assert_eq!(
            m.producers().map(|e| e.producer_id).collect::<Vec<_>>(),
            vec![2, 3]
        );
        m.remove_expired_producers(i64::MAX, 5_000);
        assert_eq!(
            m.producers().map(|e| e.producer_id).collect::<Vec<_>>(),
            vec![3]
        );
    }

    fn snapshot_header(count: i32) -> Vec<u8> {
        let mut b = vec![0, 1, 0, 0, 0, 0];
        b.extend_from_slice(&count.to_be_bytes());
        b
    }

    #[allow(clippy::too_many_arguments)]
    fn push_entry(
        b: &mut Vec<u8>,
        pid: i64,
        epoch: i16,
        last_seq: i32,
        last_offset: i64,
        delta: i32,
        ts: i64,
        coord: i32,
        txn: i64,
    ) {
        b.extend_from_slice(&pid.to_be_bytes());
        b.extend_from_slice(&epoch.to_be_bytes());
        b.extend_from_slice(&last_seq.to_be_bytes());
        b.extend_from_slice(&last_offset.to_be_bytes());
        b.extend_from_slice(&delta.to_be_bytes());
        b.extend_from_slice(&ts.to_be_bytes());
        b.extend_from_slice(&coord.to_be_bytes());
        b.extend_from_slice(&txn.to_be_bytes());
    }

    fn write_with_crc(path: &Path, mut b: Vec<u8>) {
        let crc = crc32c::crc32c(&b[6..]);
        b[2..6].copy_from_slice(&crc.to_be_bytes());
        fs::write(path, b).unwrap();
    }

    #[test]
    fn snapshot_bytes_match_kafka_layout() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::new(0);
        m.record_append(&batch(9, 3, 5, 4, 0), 0, None);
        m.record_append(&batch(-1, -1, -1, 2, 4), 0, None);
        m.record_append(&batch(2, 0, 0, 1, 6), 0, None);
        let path = m.take_snapshot(dir.path()).unwrap();
        assert_eq!(path.file_name().unwrap(), "00000000000000000007.snapshot");

        let expected_path = dir.path().join("expected");
        let mut b = snapshot_header(2);
        push_entry(&mut b, 2, 0, 0, 6, 0, 1_006, -1, -1);
        push_entry(&mut b, 9, 3, 8, 3, 3, 1_000, -1, -1);
        write_with_crc(&expected_path, b);
        assert_eq!(fs::read(&path).unwrap(), fs::read(&expected_path).unwrap());

        let loaded = ProducerStateManager::load_latest_snapshot(dir.path(), i64::MAX).unwrap();
        assert_eq!(loaded.last_mapped_offset(), 7);
        assert_eq!(projection(&loaded), projection(&m));
        assert_eq!(loaded.encode_snapshot(), m.encode_snapshot());
        // The last batch survives the round trip, so its retry is still caught.
        assert_eq!(
            loaded.check(&batch(9, 3, 5, 4, 40)).unwrap(),
            SequenceCheck::Duplicate {
                base_offset: 0,
                last_offset: 3,
                max_timestamp: 1_000
            }
        );
    }

    #[test]
    fn corrupt_snapshots_fall_back_and_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::new(0);
        m.record_append(&batch(1, 0, 0, 1, 0), 0, None);
        m.take_snapshot(dir.path()).unwrap(); // offset 1
        m.record_append(&batch(1, 0, 1, 1, 1), 0, None);
        let newest = m.take_snapshot(dir.path()).unwrap(); // offset 2

        // Flip one bit inside the entries: the CRC no longer matches.
        let mut bytes = fs::read(&newest).unwrap();
        bytes[20] ^= 1;
        fs::write(&newest, &bytes).unwrap();
        let loaded = ProducerStateManager::load_latest_snapshot(dir.path(), 2).unwrap();
        assert_eq!(loaded.last_mapped_offset(), 1);
        assert_eq!(loaded.last_entry(1).unwrap().last_seq(), 0);
        assert!(!newest.exists());

        fs::write(snapshot_path(dir.path(), 1), b"\x00").unwrap();
        let loaded = ProducerStateManager::load_latest_snapshot(dir.path(), 2).unwrap();
        assert_eq!(loaded, ProducerStateManager::new(0));
        assert_eq!(
            list_snapshot_offsets(dir.path()).unwrap(),
            Vec::<i64>::new()
        );
    }

    #[test]
    fn decode_rejects_every_malformation() {
        let mut good = snapshot_header(1);
        push_entry(&mut good, 1, 0, 0, 0, 0, 0, -1, -1);
        let crc = crc32c::crc32c(&good[6..]);
        good[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(decode_snapshot(&good).is_ok());

        let with_crc = |mut b: Vec<u8>| {
            if b.len() >= 6 {
                let crc = crc32c::crc32c(&b[6..]);
                b[2..6].copy_from_slice(&crc.to_be_bytes());
            }
            b
        };
        let mut bad_version = good.clone();
        bad_version[1] = 2;
        let mut negative_count = snapshot_header(-1);
        negative_count = with_crc(negative_count);
        let huge_count = with_crc(snapshot_header(i32::MAX));
        let mut trailing = good.clone();
        trailing.push(0);
        let trailing = with_crc(trailing);
        let truncated = with_crc(good[..good.len() - 1].to_vec());
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("short header", vec![0, 1, 0]),
            ("no count", with_crc(vec![0, 1, 0, 0, 0, 0])),
            ("bad version", bad_version),
            ("negative count", negative_count),
            ("huge count", huge_count),
            ("trailing byte", trailing),
            ("truncated entry", truncated),
        ];
        for (name, bytes) in cases {
            assert!(decode_snapshot(&bytes).is_err(), "{name}");
        }
    }

    #[test]
    fn snapshot_file_management() {
        let dir = tempfile::tempdir().unwrap();
        for offset in [0, 5, 10, 15] {
            ProducerStateManager::new(offset)
                .take_snapshot(dir.path())
                .unwrap();
        }
        // Files that are not snapshots are ignored.
        fs::write(dir.path().join("00000000000000000005.log"), b"").unwrap();
        fs::write(dir.path().join("5.snapshot"), b"").unwrap();
        fs::write(dir.path().join("00000000000000000020.snapshot.tmp"), b"").unwrap();
        fs::create_dir(dir.path().join("00000000000000000030.snapshot")).unwrap();
        assert_eq!(
            list_snapshot_offsets(dir.path()).unwrap(),
            vec![0, 5, 10, 15]
        );
        assert_eq!(
            ProducerStateManager::latest_snapshot_offset(dir.path()).unwrap(),
            Some(15)
        );
        assert_eq!(
            ProducerStateManager::load_latest_snapshot(dir.path(), 12)
                .unwrap()
                .last_mapped_offset(),
            10
        );

        ProducerStateManager::delete_snapshots_after(dir.path(), 10).unwrap();
        assert_eq!(list_snapshot_offsets(dir.path()).unwrap(), vec![0, 5, 10]);
        ProducerStateManager::delete_snapshots_before(dir.path(), 5).unwrap();
        assert_eq!(list_snapshot_offsets(dir.path()).unwrap(), vec![5, 10]);

        let missing = dir.path().join("missing");
        assert!(list_snapshot_offsets(&missing).unwrap().is_empty());
        assert_eq!(
            ProducerStateManager::load_latest_snapshot(&missing, 10).unwrap(),
            ProducerStateManager::new(0)
        );
        assert_eq!(
            ProducerStateManager::new(-1)
                .take_snapshot(dir.path())
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn truncate_and_reload_follows_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::new(0);
        for i in 0..6 {
            m.record_append(&batch(1, 0, i, 1, i64::from(i)), 0, None);
            m.take_snapshot(dir.path()).unwrap(); // offsets 1..=6
        }
        // Already at the end: only the out-of-range snapshots go.
        m.truncate_and_reload(dir.path(), 1, 6).unwrap();
        assert_eq!(
            list_snapshot_offsets(dir.path()).unwrap(),
            vec![2, 3, 4, 5, 6]
        );
        assert_eq!(m.last_entry(1).unwrap().last_seq(), 5);

        // Truncated to 4: reload from the snapshot at 4.
        m.truncate_and_reload(dir.path(), 1, 4).unwrap();
        assert_eq!(list_snapshot_offsets(dir.path()).unwrap(), vec![2, 3, 4]);
        assert_eq!(m.last_mapped_offset(), 4);
        assert_eq!(m.last_entry(1).unwrap().last_seq(), 3);

        // No usable snapshot: empty, starting at the log start.
        m.truncate_and_reload(dir.path(), 4, 7).unwrap();
        assert_eq!(m, ProducerStateManager::new(4));

        m.record_append(&batch(1, 0, 0, 1, 4), 0, None);
        m.take_snapshot(dir.path()).unwrap();
        m.truncate_fully_and_start_at(dir.path(), 100).unwrap();
        assert_eq!(m, ProducerStateManager::new(100));
        assert!(list_snapshot_offsets(dir.path()).unwrap().is_empty());
    }

    /// What a snapshot preserves of each producer.
    fn projection(m: &ProducerStateManager) -> Vec<(i64, i16, Option<BatchMetadata>, i64)> {
        m.producers()
            .map(|e| {
                (
                    e.producer_id,
                    e.producer_epoch,
                    e.batches.back().copied(),
                    e.last_timestamp,
                )
            })
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append {
            producer: i64,
            bump_epoch: bool,
            records: i32,
            no_pid: bool,
        },
        Snapshot,
        Reload,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0i64..4, proptest::bool::weighted(0.1), 1i32..5, proptest::bool::weighted(0.1))
                .prop_map(|(producer, bump_epoch, records, no_pid)| Op::Append { producer, bump_epoch, records, no_pid }),
            1 => Just(Op::Snapshot),
            1 => Just(Op::Reload),
        ]
    }

    proptest! {
        /// Appending, snapshotting and reloading (then re-folding the log after the snapshot, as
        /// log recovery does) leaves the same state as never reloading.
        #[test]
        fn snapshots_and_reloads_preserve_state(ops in proptest::collection::vec(op(), 1..60)) {
            let dir = tempfile::tempdir().unwrap();
            let mut log: Vec<BatchHeader> = Vec::new();
            let mut epochs = [0i16; 4];
            let mut next_seq = [0i32; 4];
            let mut live = ProducerStateManager::new(0);
            let mut recovered = ProducerStateManager::new(0);
            let mut end = 0i64;
            for op in ops {
                match op {
                    Op::Append { producer, bump_epoch, records, no_pid } => {
                        let p = producer as usize;
                        let header = if no_pid {
                            batch(-1, -1, -1, records, end)
                        } else {
                            if bump_epoch {
                                epochs[p] += 1;
                                next_seq[p] = 0;
                            }
                            let h = batch(producer, epochs[p], next_seq[p], records, end);
                            next_seq[p] += records;
                            h
                        };
                        prop_assert_eq!(live.check(&header).unwrap(), SequenceCheck::Append);
                        prop_assert_eq!(recovered.check(&header).unwrap(), SequenceCheck::Append);
                        live.record_append(&header, 0, None);
                        recovered.record_append(&header, 0, None);
                        log.push(header);
                        end += i64::from(records);
                    }
                    Op::Snapshot => {
                        recovered.take_snapshot(dir.path()).unwrap();
                    }
                    Op::Reload => {
                        recovered = ProducerStateManager::load_latest_snapshot(dir.path(), end).unwrap();
                        let from = recovered.last_mapped_offset();
                        for h in log.iter().filter(|h| h.base_offset >= from) {
                            recovered.record_append(h, 0, None);
                        }
                    }
                }
                prop_assert_eq!(recovered.last_mapped_offset(), live.last_mapped_offset());
                prop_assert_eq!(projection(&recovered), projection(&live));
                prop_assert_eq!(recovered.encode_snapshot(), live.encode_snapshot());
                // The latest batch of every producer is still recognised as a duplicate.
                for h in log.iter().rev().filter(|h| h.producer_id >= 0) {
                    if live.last_entry(h.producer_id).and_then(|e| e.batches.back()).map(|b| b.last_offset) == Some(h.last_offset()) {
                        prop_assert_eq!(recovered.check(h).unwrap(), live.check(h).unwrap());
                    }
                }
            }
        }

        #[test]
        fn arbitrary_snapshot_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), fix_crc in any::<bool>()) {
            let mut bytes = bytes;
            if fix_crc && bytes.len() >= 6 {
                let crc = crc32c::crc32c(&bytes[6..]);
                bytes[2..6].copy_from_slice(&crc.to_be_bytes());
            }
            let _ = decode_snapshot(&bytes);
        }
    }
}
