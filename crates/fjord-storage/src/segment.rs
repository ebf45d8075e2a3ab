//! One log segment: a `.log` file of record batches plus its `.index`, `.timeindex` and (once a
//! marker in it aborted a transaction) `.txnindex`.
//!
//! A segment is named by its base offset, zero-padded to 20 digits. It owns appending batches
//! (with offsets already assigned), the sparse index entries that go with them, reading whole
//! batches back as [`FileSlice`]s, timestamp lookups, truncation and crash recovery.
//!
//! Reads use positional I/O only, so any number of readers can share the file handle.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fjord_records::control::{read_marker, EndTxnMarker, MARKER_READ_LEN};
use fjord_records::header::compute_crc;
use fjord_records::{AppendBatch, BatchHeader, BATCH_HEADER_LEN};

use crate::error::{IoResultExt, StorageError};
use crate::file_io;
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};
use crate::txn_index::{AbortedTxn, TxnIndex, TXN_INDEX_FILE_SUFFIX};

pub const LOG_FILE_SUFFIX: &str = ".log";
pub const INDEX_FILE_SUFFIX: &str = ".index";
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of segment files awaiting asynchronous deletion.
pub const DELETED_FILE_SUFFIX: &str = ".deleted";
/// Suffix of a segment the log cleaner is writing; such files are discarded by recovery.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment committed to replace the segments it was cleaned from; recovery
/// finishes the replacement.
pub const SWAP_FILE_SUFFIX: &str = ".swap";

/// `<20-digit base offset><suffix>`, Kafka's segment file naming.
pub fn segment_file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Parses a segment file name back into its base offset, if `name` is `<digits><suffix>`.
pub fn parse_segment_file_name(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Far below i64::MAX so that base + any 32-bit relative offset cannot overflow.
    digits
        .parse()
        .ok()
        .filter(|base: &i64| *base <= MAX_BASE_OFFSET)
}

/// The largest base offset a segment file name may carry.
pub const MAX_BASE_OFFSET: i64 = i64::MAX / 2;

/// A byte range of a segment file holding whole batches. Holding the `Arc<File>` keeps the
/// bytes readable even if the segment is deleted or truncated afterwards (the read then fails
/// with an error instead of returning other data).
#[derive(Debug, Clone)]
pub struct FileSlice {
    file: Arc<File>,
    position: u64,
    len: u32,
    /// Records in its data batches (control batches' markers not counted).
    records: u64,
}

impl FileSlice {
    /// Copies the slice into memory with a positional read, into a buffer that is not
    /// zero-filled first.
    pub fn read_to_bytes(&self) -> io::Result<Bytes> {
        file_io::read_exact_at_uninit(&self.file, self.len as usize, self.position)
    }

    /// Sends the slice's bytes from `done` on to `socket` with `sendfile`; returns how many went.
    /// 0 before the end means the file is shorter than the slice (truncated meanwhile): the
    /// caller must not wait for more.
    pub fn send_to(&self, socket: BorrowedFd<'_>, done: u32) -> io::Result<usize> {
        let remaining = self.len.saturating_sub(done) as usize;
        if remaining == 0 {
            return Ok(0);
        }
        file_io::send_file(
            socket,
            &self.file,
            self.position + u64::from(done),
            remaining,
        )
    }

    pub fn position(&self) -> u64 {
        self.position
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    /// The records its data batches hold (what a consumer is sent; control markers left out).
    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Why a scan of a segment's batches stopped before the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScanStop {
    /// Fewer bytes remain than the batch claims: a torn write.
    Torn,
    /// The bytes at this position are not a sane batch.
    Invalid,
}

/// A segment's files and its in-memory summary.
#[derive(Debug)]
pub struct LogSegment {
    base_offset: i64,
    log_path: PathBuf,
    log: Arc<File>,
    /// Bytes of valid batches; the file is never longer after recovery or truncation.
    size: u64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TxnIndex,
    index_interval_bytes: u64,
    bytes_since_last_index_entry: u64,
    /// Largest batch max timestamp so far (-1: none) and the last offset of that batch.
    max_timestamp_so_far: i64,
    offset_of_max_timestamp_so_far: i64,
    /// One past the last offset in the segment; the base offset when empty.
    next_offset: i64,
    /// Max timestamp of the first batch; segment.ms rolling measures from it, as Kafka does.
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
}

/// Outcome of [`LogSegment::open`].
pub struct OpenedSegment {
    pub segment: LogSegment,
    /// The files did not describe a consistent segment: it must be recovered before use.
    pub needs_recovery: bool,
}

impl LogSegment {
    /// Creates a new empty segment, replacing any stale files of the same name.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_bytes: u64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<LogSegment, StorageError> {
        Self::create_with_suffix(
            dir,
            base_offset,
            "",
            index_bytes,
            index_interval_bytes,
            now_ms,
        )
    }

    /// Creates a new empty segment whose files carry `suffix` after their usual names
    /// (the cleaner's [`CLEANED_FILE_SUFFIX`]), replacing stale files of the same names.
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        index_bytes: u64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<LogSegment, StorageError> {
        let name = |kind: &str| dir.join(segment_file_name(base_offset, kind) + suffix);
        let log_path = name(LOG_FILE_SUFFIX);
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .at(&log_path)?;
        let offset_index = OffsetIndex::create(&name(INDEX_FILE_SUFFIX), base_offset, index_bytes)?;
        let time_index =
            TimeIndex::create(&name(TIME_INDEX_FILE_SUFFIX), base_offset, index_bytes)?;
        let txn_index_path = name(TXN_INDEX_FILE_SUFFIX);
        if txn_index_path.exists() {
            std::fs::remove_file(&txn_index_path).at(&txn_index_path)?;
        }
        Ok(LogSegment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size: 0,
            offset_index,
            time_index,
            txn_index: TxnIndex::empty(txn_index_path),
            index_interval_bytes,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: -1,
            offset_of_max_timestamp_so_far: base_offset,
            next_offset: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms,
        })
    }

    /// Opens an existing segment. Index files that are missing or fail their sanity checks,
    /// and a log whose batch headers do not line up to its end, flag the segment for recovery
    /// (which rebuilds the indexes); nothing here trusts the bytes it reads.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        index_bytes: u64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<OpenedSegment, StorageError> {
        let log_path = dir.join(segment_file_name(base_offset, LOG_FILE_SUFFIX));
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .at(&log_path)?;
        let size = log.metadata().at(&log_path)?.len();
        let index_path = dir.join(segment_file_name(base_offset, INDEX_FILE_SUFFIX));
        let time_index_path = dir.join(segment_file_name(base_offset, TIME_INDEX_FILE_SUFFIX));
        let mut needs_recovery = false;
        let offset_index = match OffsetIndex::open(&index_path, base_offset, index_bytes, size) {
            Ok(index) => index,
            Err(_) => {
                needs_recovery = true;
                OffsetIndex::create(&index_path, base_offset, index_bytes)?
            }
        };
        let time_index = match TimeIndex::open(&time_index_path, base_offset, index_bytes, i64::MAX)
        {
            Ok(index) => index,
            Err(_) => {
                needs_recovery = true;
                TimeIndex::create(&time_index_path, base_offset, index_bytes)?
            }
        };
        let txn_index =
            TxnIndex::open(dir.join(segment_file_name(base_offset, TXN_INDEX_FILE_SUFFIX)))?;
        let mut segment = LogSegment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size,
            offset_index,
            time_index,
            txn_index,
            index_interval_bytes,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: -1,
            offset_of_max_timestamp_so_far: base_offset,
            next_offset: base_offset,
            rolling_based_timestamp: None,
            created_ms: now_ms,
        };
        if !needs_recovery && segment.load_tail().is_err() {
            needs_recovery = true;
        }
        // Now the segment's end is known, the time index must not point past it.
        if !needs_recovery && !segment.time_index_within_segment() {
            needs_recovery = true;
        }
        Ok(OpenedSegment {
            segment,
            needs_recovery,
        })
    }

    fn time_index_within_segment(&self) -> bool {
        match self.time_index.last_entry() {
            Some(entry) => entry.offset < self.next_offset.max(self.base_offset + 1),
            None => true,
        }
    }

    /// Derives the in-memory summary (end offset, max timestamp, index spacing) from the last
    /// index entries and a header scan of the batches after them. Fails if the headers do not
    /// line up exactly with the end of the file.
    fn load_tail(&mut self) -> Result<(), StorageError> {
        let start = self.offset_index.last_entry().map_or(0, |e| e.position);
        match self.time_index.last_entry() {
            Some(entry) => {
                self.max_timestamp_so_far = entry.timestamp;
                self.offset_of_max_timestamp_so_far = entry.offset;
            }
            None => {
                self.max_timestamp_so_far = -1;
                self.offset_of_max_timestamp_so_far = self.base_offset;
            }
        }
        self.next_offset = self
            .offset_index
            .last_entry()
            .map_or(self.base_offset, |e| e.offset);
        self.bytes_since_last_index_entry = self.size - u64::from(start);
        let mut next_offset = self.next_offset;
        let mut max_ts = (
            self.max_timestamp_so_far,
            self.offset_of_max_timestamp_so_far,
        );
        let end = self.scan_headers(u64::from(start), |_, header| {
            next_offset = header.last_offset() + 1;
            if header.max_timestamp > max_ts.0 {
                max_ts = (header.max_timestamp, header.last_offset());
            }
            true
        })?;
        if end != self.size {
            return Err(StorageError::corrupt(
                &self.log_path,
                format!(
                    "batches end at {end} but the file holds {} bytes",
                    self.size
                ),
            ));
        }
        self.next_offset = next_offset;
        (
            self.max_timestamp_so_far,
            self.offset_of_max_timestamp_so_far,
        ) = max_ts;
        self.rolling_based_timestamp = if self.size > 0 {
            self.header_at(0)?.map(|h| h.max_timestamp)
        } else {
            None
        };
        Ok(())
    }

    /// Reads and sanity-checks the batch header at `position`; `Ok(None)` at the end of the
    /// valid bytes.
    fn header_at(&self, position: u64) -> Result<Option<BatchHeader>, StorageError> {
        match self.try_header_at(position)? {
            Ok(header) => Ok(header),
            Err(stop) => Err(StorageError::corrupt(
                &self.log_path,
                format!("{stop:?} batch at position {position}"),
            )),
        }
    }

    fn try_header_at(
        &self,
        position: u64,
    ) -> Result<Result<Option<BatchHeader>, ScanStop>, StorageError> {
        if position >= self.size {
            return Ok(Ok(None));
        }
        if position + BATCH_HEADER_LEN as u64 > self.size {
            return Ok(Err(ScanStop::Torn));
        }
        let mut buf = [0u8; BATCH_HEADER_LEN];
        self.log
            .read_exact_at(&mut buf, position)
            .at(&self.log_path)?;
        let header = match BatchHeader::parse(&buf) {
            Ok(header) => header,
            Err(_) => return Ok(Err(ScanStop::Invalid)),
        };
        // Checked arithmetic: the base offset is arbitrary bytes until proven otherwise.
        let relative_last = header
            .base_offset
            .checked_sub(self.base_offset)
            .filter(|rel| *rel >= 0 && header.last_offset_delta >= 0)
            .and_then(|rel| rel.checked_add(i64::from(header.last_offset_delta)));
        if relative_last.is_none_or(|rel| rel > i64::from(i32::MAX)) {
            return Ok(Err(ScanStop::Invalid));
        }
        let end = position + header.total_len() as u64;
        if end > self.size {
            return Ok(Err(ScanStop::Torn));
        }
        if end > u64::from(u32::MAX) {
            // Index positions are 32-bit; Kafka caps segments below 2 GiB for the same reason.
            return Ok(Err(ScanStop::Invalid));
        }
        Ok(Ok(Some(header)))
    }

    /// Visits batch headers from `position` while `f` returns true; returns the position the
    /// scan stopped at. Errors if a header is not sane before the end of the file.
    fn scan_headers(
        &self,
        mut position: u64,
        mut f: impl FnMut(u64, &BatchHeader) -> bool,
    ) -> Result<u64, StorageError> {
        let mut last_offset = None;
        while let Some(header) = self.header_at(position)? {
            if last_offset.is_some_and(|last| header.base_offset <= last) {
                return Err(StorageError::corrupt(
                    &self.log_path,
                    format!("offsets go backwards at position {position}"),
                ));
            }
            last_offset = Some(header.last_offset());
            if !f(position, &header) {
                break;
            }
            position += header.total_len() as u64;
        }
        Ok(position)
    }

    /// Visits the headers of all batches whose last offset is at least `from_offset`, in order,
    /// each control batch with the transaction marker it holds.
    pub fn for_each_batch_from(
        &self,
        from_offset: i64,
        mut f: impl FnMut(&BatchHeader, Option<EndTxnMarker>),
    ) -> Result<(), StorageError> {
        let start = self.offset_index.lookup(from_offset).position;
        let mut failed = None;
        self.scan_headers(u64::from(start), |position, header| {
            if header.last_offset() < from_offset {
                return true;
            }
            let marker = if header.is_control() {
                match self.read_marker_at(position, header) {
                    Ok(marker) => marker,
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
            } else {
                None
            };
            f(header, marker);
            true
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// The marker of the control batch at `position` (None: another kind of control batch).
    fn read_marker_at(
        &self,
        position: u64,
        header: &BatchHeader,
    ) -> Result<Option<EndTxnMarker>, StorageError> {
        // A marker is small; reading no more than one needs bounds the work on a bad header.
        let len = header.total_len().min(MARKER_READ_LEN);
        let mut buf = vec![0; len];
        self.log
            .read_exact_at(&mut buf, position)
            .at(&self.log_path)?;
        Ok(read_marker(&buf))
    }

    /// Rebuilds the indexes from the log, validating every batch (sanity, CRC, ascending
    /// offsets), and truncates the file at the first invalid or torn batch. Returns the number
    /// of bytes removed.
    pub fn recover(&mut self) -> Result<u64, StorageError> {
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp_so_far = -1;
        self.offset_of_max_timestamp_so_far = self.base_offset;
        self.next_offset = self.base_offset;
        self.rolling_based_timestamp = None;
        let mut position = 0u64;
        let mut buf = Vec::new();
        // Stops at the end, a torn batch or an insane header alike.
        while let Ok(Some(header)) = self.try_header_at(position)? {
            if header.base_offset < self.next_offset {
                break;
            }
            // Bounded by the file size, checked in try_header_at.
            buf.resize(header.total_len(), 0);
            self.log
                .read_exact_at(&mut buf, position)
                .at(&self.log_path)?;
            if compute_crc(&buf) != header.crc {
                break;
            }
            let pos32 = u32::try_from(position)
                .map_err(|_| StorageError::corrupt(&self.log_path, "segment beyond 4 GiB"))?;
            self.index_batch(pos32, &header)?;
            position += header.total_len() as u64;
        }
        let truncated = self.size - position;
        if truncated > 0 {
            self.log.set_len(position).at(&self.log_path)?;
            self.size = position;
        }
        Ok(truncated)
    }

    /// Updates the in-memory summary and the indexes for a batch now at `position`.
    fn index_batch(&mut self, position: u32, header: &BatchHeader) -> Result<(), StorageError> {
        if position == 0 {
            self.rolling_based_timestamp = Some(header.max_timestamp);
        }
        if header.max_timestamp > self.max_timestamp_so_far {
            self.max_timestamp_so_far = header.max_timestamp;
            self.offset_of_max_timestamp_so_far = header.last_offset();
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes {
            self.offset_index.append(header.last_offset(), position)?;
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                false,
            )?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += header.total_len() as u64;
        self.next_offset = header.last_offset() + 1;
        Ok(())
    }

    /// Appends one batch whose offsets were assigned by the log.
    pub fn append(&mut self, batch: &AppendBatch) -> Result<(), StorageError> {
        let header = batch.header();
        if batch.len() != header.total_len() {
            return Err(self.out_of_order(header.base_offset));
        }
        let position = self.append_position(batch.len())?;
        // The log checked a follower's offsets and assigned a leader's from its end: a batch
        // below the segment's end here (whose index entry would not ascend) is fjord's bug.
        assert!(
            header.base_offset >= self.next_offset,
            "index entries ascend: batch at {} below the segment end {}",
            header.base_offset,
            self.next_offset
        );
        // The rewritten header and the caller's records go down in one write, never joined in
        // memory first.
        file_io::write_all_vectored_at(
            &self.log,
            &[batch.header_bytes(), batch.records()],
            self.size,
        )
        .at(&self.log_path)?;
        self.size += batch.len() as u64;
        self.index_batch(position, header)
    }

    /// Appends whole batches, already with their offsets, written in one go (the cleaner's
    /// output). Each batch's offsets must follow the previous ones'.
    pub fn append_batches(&mut self, batches: &[u8]) -> Result<(), StorageError> {
        let mut headers = Vec::new();
        let mut at = 0usize;
        let mut next = self.next_offset;
        while at < batches.len() {
            let header = batches
                .get(at..)
                .and_then(|rest| BatchHeader::parse(rest).ok())
                .filter(|h| at + h.total_len() <= batches.len() && h.base_offset >= next)
                .ok_or_else(|| self.out_of_order(next))?;
            next = header.last_offset() + 1;
            headers.push((at, header));
            at += header.total_len();
        }
        let start = self.append_position(batches.len())?;
        self.log
            .write_all_at(batches, self.size)
            .at(&self.log_path)?;
        self.size += batches.len() as u64;
        for (at, header) in headers {
            self.index_batch(start + at as u32, &header)?;
        }
        Ok(())
    }

    fn out_of_order(&self, offset: i64) -> StorageError {
        StorageError::corrupt(
            &self.log_path,
            format!(
                "append of offset {offset} at next offset {} breaks offset order",
                self.next_offset
            ),
        )
    }

    /// Where `len` more bytes go, refused past what 32-bit index positions address.
    fn append_position(&self, len: usize) -> Result<u32, StorageError> {
        u32::try_from(self.size)
            .ok()
            .filter(|p| u64::from(*p) + len as u64 <= u64::from(u32::MAX))
            .ok_or_else(|| StorageError::corrupt(&self.log_path, "segment beyond 4 GiB"))
    }

    /// Whole batches starting at the one holding `start_offset`, up to `max_bytes` (the first
    /// batch regardless when `min_one_batch`), excluding any batch whose last offset reaches
    /// `max_offset`. `None` when no batch qualifies.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<Option<FileSlice>, StorageError> {
        let from = self.offset_index.lookup(start_offset).position;
        let mut start = None;
        let mut len: u64 = 0;
        let mut records: u64 = 0;
        self.scan_headers(u64::from(from), |position, header| {
            if start.is_none() {
                if header.last_offset() < start_offset {
                    return true;
                }
                start = Some(position);
            }
            let total = header.total_len() as u64;
            if header.last_offset() >= max_offset
                || (len + total > max_bytes as u64 && !(len == 0 && min_one_batch))
            {
                return false;
            }
            len += total;
            if !header.is_control() {
                records += u64::try_from(header.record_count).unwrap_or(0);
            }
            true
        })?;
        Ok(match start {
            Some(position) if len > 0 => Some(FileSlice {
                file: Arc::clone(&self.log),
                position,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                records,
            }),
            _ => None,
        })
    }

    /// The first record at or after `starting_offset` whose timestamp is at least `timestamp`:
    /// the time index narrows the scan, then batches are scanned from the offset index.
    /// Returns (timestamp, offset, partition leader epoch of its batch).
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        starting_offset: i64,
    ) -> Result<Option<(i64, i64, i32)>, StorageError> {
        let hint = self.time_index.lookup(timestamp);
        let position = self
            .offset_index
            .lookup(hint.offset.max(starting_offset))
            .position;
        let mut found = None;
        self.scan_headers(u64::from(position), |position, header| {
            if header.max_timestamp >= timestamp && header.last_offset() >= starting_offset {
                found = Some((position, *header));
                return false;
            }
            true
        })?;
        let Some((position, header)) = found else {
            return Ok(None);
        };
        let (ts, offset) =
            self.first_record_at_or_after(position, &header, timestamp, starting_offset)?;
        Ok(Some((ts, offset, header.partition_leader_epoch)))
    }

    /// Within one batch, the first record with timestamp ≥ `timestamp` and offset ≥
    /// `starting_offset`. Only uncompressed create-time batches can be inspected record by
    /// record here; for others the batch's max timestamp and first eligible offset stand in.
    fn first_record_at_or_after(
        &self,
        position: u64,
        header: &BatchHeader,
        timestamp: i64,
        starting_offset: i64,
    ) -> Result<(i64, i64), StorageError> {
        let fallback = (
            header.max_timestamp,
            header.base_offset.max(starting_offset),
        );
        if header.compression() != 0 || header.is_log_append_time() {
            return Ok(fallback);
        }
        let mut buf = vec![0u8; header.total_len()];
        self.log
            .read_exact_at(&mut buf, position)
            .at(&self.log_path)?;
        let records = buf.get(BATCH_HEADER_LEN..).unwrap_or_default();
        let mut cursor = RecordCursor {
            buf: records,
            at: 0,
        };
        for _ in 0..header.record_count.max(0) {
            let Some((ts_delta, offset_delta, next)) = cursor.next_record() else {
                break;
            };
            let record_ts = header.base_timestamp.saturating_add(ts_delta);
            let record_offset = header.base_offset + i64::from(offset_delta);
            if record_ts >= timestamp && record_offset >= starting_offset {
                return Ok((record_ts, record_offset));
            }
            cursor.at = next;
        }
        Ok(fallback)
    }

    /// Drops every batch from the one holding `offset` onwards. Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64, StorageError> {
        let from = self.offset_index.lookup(offset).position;
        let mut cut = None;
        self.scan_headers(u64::from(from), |position, header| {
            if header.last_offset() >= offset {
                cut = Some(position);
                return false;
            }
            true
        })?;
        let Some(cut) = cut else {
            return Ok(0);
        };
        let cut32 = u32::try_from(cut)
            .map_err(|_| StorageError::corrupt(&self.log_path, "segment beyond 4 GiB"))?;
        self.offset_index.truncate_to_position(cut32)?;
        self.log.set_len(cut).at(&self.log_path)?;
        let removed = self.size - cut;
        self.size = cut;
        // Time index entries name the last offset of a batch, so entries for the removed
        // batches are exactly those at or above `offset`.
        self.time_index.truncate_to(offset)?;
        self.txn_index.truncate_from(offset)?;
        self.load_tail()?;
        if self.size == 0 {
            self.rolling_based_timestamp = None;
        }
        Ok(removed)
    }

    /// The segment stops taking appends: record its final max timestamp in the time index so
    /// a reload sees it, as Kafka does when a segment is rolled or closed.
    pub fn on_become_inactive(&mut self) -> Result<(), StorageError> {
        if self.max_timestamp_so_far >= 0 {
            self.time_index.maybe_append(
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                true,
            )?;
        }
        Ok(())
    }

    /// fsyncs the log and both indexes.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.log.sync_all().at(&self.log_path)?;
        for file in self.index_files() {
            file.sync_all().at(&self.log_path)?;
        }
        Ok(())
    }

    /// fsyncs like [`Self::flush`], then closes the index descriptors until the next write, so
    /// that recovering many partitions does not hold three descriptors for each.
    pub fn flush_and_release(&mut self) -> Result<(), StorageError> {
        self.flush()?;
        self.offset_index.release_file();
        self.time_index.release_file();
        self.txn_index.release_file();
        Ok(())
    }

    /// The `.log` file.
    pub fn log_file(&self) -> &Arc<File> {
        &self.log
    }

    /// The index files written since they were loaded or created (the others hold nothing a
    /// flush must sync).
    pub fn index_files(&self) -> Vec<Arc<File>> {
        [
            self.offset_index.written_file(),
            self.time_index.written_file(),
            self.txn_index.written_file(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    /// Renames the segment's files with the `.deleted` suffix; returns the new paths.
    pub fn rename_to_deleted(&mut self) -> Result<Vec<PathBuf>, StorageError> {
        self.rename_files(|path| with_suffix(path, DELETED_FILE_SUFFIX))
    }

    /// Renames the segment's files from names ending in `from` to names ending in `to` instead
    /// (the cleaner's `.cleaned` → `.swap` → no suffix).
    pub fn change_suffix(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        self.rename_files(|path| {
            let name = path.as_os_str().to_string_lossy();
            let stem = name.strip_suffix(from).unwrap_or(&name);
            PathBuf::from(format!("{stem}{to}"))
        })
        .map(drop)
    }

    fn rename_files(
        &mut self,
        rename: impl Fn(&Path) -> PathBuf,
    ) -> Result<Vec<PathBuf>, StorageError> {
        let mut renamed = Vec::with_capacity(3);
        let log_path = rename(&self.log_path);
        std::fs::rename(&self.log_path, &log_path).at(&self.log_path)?;
        self.log_path = log_path.clone();
        renamed.push(log_path);
        let index_path = rename(self.offset_index.path());
        rename_if_exists(self.offset_index.path(), &index_path)?;
        self.offset_index.set_path(index_path.clone());
        renamed.push(index_path);
        let time_path = rename(self.time_index.path());
        rename_if_exists(self.time_index.path(), &time_path)?;
        self.time_index.set_path(time_path.clone());
        renamed.push(time_path);
        let txn_path = rename(self.txn_index.path());
        rename_if_exists(self.txn_index.path(), &txn_path)?;
        self.txn_index.set_path(txn_path.clone());
        renamed.push(txn_path);
        Ok(renamed)
    }

    /// Sets the `.log` file's modification time, which stands in for the largest timestamp
    /// of a segment without timestamps (a cleaned segment keeps its sources').
    pub fn set_last_modified(&self, time: SystemTime) -> Result<(), StorageError> {
        self.log.set_modified(time).at(&self.log_path)
    }

    /// The `.log` file's modification time.
    pub fn last_modified(&self) -> SystemTime {
        self.log
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(UNIX_EPOCH)
    }

    /// Max timestamp of the first batch (`None` when empty): segment.ms and
    /// max.compaction.lag.ms measure a segment's age from it.
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.rolling_based_timestamp
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn max_timestamp_so_far(&self) -> i64 {
        self.max_timestamp_so_far
    }

    pub fn offset_of_max_timestamp_so_far(&self) -> i64 {
        self.offset_of_max_timestamp_so_far
    }

    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }

    /// The transactions aborted by markers in this segment, oldest first.
    pub fn aborted_txns(&self) -> &[AbortedTxn] {
        self.txn_index.entries()
    }

    /// Records a transaction aborted by a marker in this segment.
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<(), StorageError> {
        self.txn_index.append(txn)
    }

    /// Adopts the aborted transactions of the segments this cleaned one replaces.
    pub fn adopt_aborted_txns(&mut self, txns: &[AbortedTxn]) -> Result<(), StorageError> {
        self.txn_index.extend(txns)
    }

    /// Forgets the aborted transactions of markers at or above `offset`, which the log is about
    /// to read back and record again.
    pub fn truncate_aborted_txns_from(&mut self, offset: i64) -> Result<(), StorageError> {
        self.txn_index.truncate_from(offset)
    }

    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last time-index entry, or the segment's start when it has none.
    pub fn last_time_index_entry(&self) -> TimestampOffset {
        self.time_index.last_entry().unwrap_or(TimestampOffset {
            timestamp: -1,
            offset: self.base_offset,
        })
    }

    /// Kafka's retention clock: the largest timestamp in the segment, or the file's
    /// modification time when no batch carries one.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp_so_far >= 0 {
            return self.max_timestamp_so_far;
        }
        self.log
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Whether appending `batch_bytes` more bytes whose max timestamp is `max_timestamp` and
    /// last offset `last_offset` calls for a new segment first (Kafka's roll conditions).
    pub fn should_roll(
        &self,
        segment_bytes: u64,
        segment_ms: i64,
        batch_bytes: u64,
        max_timestamp: i64,
        last_offset: i64,
        now_ms: i64,
    ) -> bool {
        if self.size == 0 {
            return false;
        }
        let waited = match self.rolling_based_timestamp {
            Some(first) => max_timestamp.saturating_sub(first),
            None => now_ms.saturating_sub(self.created_ms),
        };
        self.size.saturating_add(batch_bytes) > segment_bytes
            || waited > segment_ms
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || last_offset - self.base_offset > i64::from(i32::MAX)
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn rename_if_exists(from: &Path, to: &Path) -> Result<(), StorageError> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.at(from),
    }
}

/// Walks the records of an uncompressed v2 batch far enough to read each one's timestamp and
/// offset deltas.
struct RecordCursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl RecordCursor<'_> {
    fn varlong(&self, at: &mut usize) -> Option<i64> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.buf.get(*at)?;
            *at += 1;
            value |= u64::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        None
    }

    /// (timestamp delta, offset delta, position of the next record).
    fn next_record(&self) -> Option<(i64, i32, usize)> {
        let mut at = self.at;
        let length = usize::try_from(self.varlong(&mut at)?).ok()?;
        let body = at;
        let next = body.checked_add(length)?;
        if next > self.buf.len() {
            return None;
        }
        at += 1; // record attributes
        let ts_delta = self.varlong(&mut at)?;
        let offset_delta = i32::try_from(self.varlong(&mut at)?).ok()?;
        if at > next {
            return None;
        }
        Some((ts_delta, offset_delta, next))
    }
}
