//! One cleaning pass over one log: map the dirty section's keys to their last offsets, then
//! rewrite the log from its start up to where the map reaches, a group of segments at a time,
//! swapping each cleaned group in under the log's lock.
//!
//! Only the snapshot of the segments and each swap take the lock: the reading and writing in
//! between go through the segments' own file handles, so produce and fetch on the partition
//! wait at most for one swap.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use fjord_common::lock;
use fjord_records::compact::{
    filter_batch, for_each_key, stamp_delete_horizon, FilterOptions, Filtered,
};
use fjord_records::control::read_marker;
use fjord_records::header::compute_crc;
use fjord_records::{BatchHeader, BATCH_HEADER_LEN};

use super::offset_map::OffsetMap;
use super::throttle::Throttler;
use super::txn::TxnTracker;
use crate::error::StorageError;
use crate::log::{delete_segment_files, CleanableLog, CleaningSources, Log, SegmentSource};
use crate::segment::{LogSegment, CLEANED_FILE_SUFFIX};
use crate::txn_index::AbortedTxn;

/// Largest records section the cleaner decompresses from one batch.
const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;
/// Index entry sizes, for grouping segments within `segment.index.bytes`.
const OFFSET_INDEX_ENTRY_BYTES: usize = 8;
const TIME_INDEX_ENTRY_BYTES: usize = 12;

/// What one pass did, as the cleaner logs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_kept: u64,
    pub keys_mapped: usize,
    pub map_memory_bytes: u64,
    pub map_utilization: f64,
    pub segments_read: usize,
    pub segments_written: usize,
    pub elapsed_ms: u64,
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq)]
pub enum PassOutcome {
    /// The log is clean up to `end_offset`, the next pass's first dirty offset.
    Cleaned { end_offset: i64, stats: PassStats },
    /// The log changed under the pass (truncated, trimmed, deleted) or the cleaner is
    /// stopping: nothing was swapped in after that, and the checkpoint stays.
    Aborted,
}

/// The buffers and limits a cleaner thread brings to a pass.
pub struct PassIo<'a> {
    pub map: &'a mut OffsetMap,
    pub throttler: &'a Throttler,
    pub io_buffer_bytes: usize,
    pub stop: &'a AtomicBool,
}

/// Runs one pass over `log` as `cleanable` describes it, at time `now_ms`.
pub fn clean_log(
    log: &Mutex<Log>,
    cleanable: &CleanableLog,
    io: PassIo<'_>,
    now_ms: i64,
) -> Result<PassOutcome, StorageError> {
    let started = Instant::now();
    let sources = lock(log).cleaning_sources(cleanable.first_uncleanable_offset);
    let mut stats = PassStats::default();
    let mut reader = Reader::new(io.io_buffer_bytes, io.throttler);
    let end_offset = build_offset_map(&sources, cleanable, io.map, &mut reader, io.stop)?;
    let Some(end_offset) = end_offset else {
        return Ok(PassOutcome::Aborted);
    };
    stats.keys_mapped = io.map.len();
    stats.map_memory_bytes = io.map.memory_bytes();
    stats.map_utilization = io.map.utilization();
    let to_clean: Vec<&SegmentSource> = sources
        .segments
        .iter()
        .filter(|s| s.base_offset < end_offset)
        .collect();
    let config = &sources.config;
    let groups = group_segments(
        &to_clean,
        config.segment_bytes,
        config.segment_index_bytes as usize,
    );
    let rewrite = Rewrite {
        sources: &sources,
        map: &*io.map,
        first_uncleanable_offset: cleanable.first_uncleanable_offset,
        now_ms,
        horizon: now_ms.saturating_add(config.compaction.delete_retention_ms.max(0)),
        io_buffer_bytes: io.io_buffer_bytes,
        throttler: io.throttler,
        stop: io.stop,
    };
    // One view of the transactions for the whole rewrite: it reads the log from its start.
    let mut txns = TxnTracker::new(sources.aborted_txns.clone());
    for group in groups {
        let Some(cleaned) = rewrite.clean_group(&group, &mut reader, &mut txns, &mut stats)? else {
            return Ok(PassOutcome::Aborted);
        };
        let replaced: Vec<SegmentSource> = group.iter().map(|s| (*s).clone()).collect();
        if !lock(log).replace_segments(cleaned, &replaced, now_ms)? {
            return Ok(PassOutcome::Aborted);
        }
        stats.segments_written += 1;
    }
    stats.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(PassOutcome::Cleaned { end_offset, stats })
}

/// The rewrite of the cleaned part of one log: what decides which batches and records stay.
struct Rewrite<'a> {
    sources: &'a CleaningSources,
    /// Each key of the dirty section mapped to its last offset.
    map: &'a OffsetMap,
    first_uncleanable_offset: i64,
    now_ms: i64,
    /// The delete horizon this pass stamps on tombstones and markers it keeps the first time.
    horizon: i64,
    io_buffer_bytes: usize,
    throttler: &'a Throttler,
    stop: &'a AtomicBool,
}

impl Rewrite<'_> {
    /// Writes what stays of one group of segments into a new `.cleaned` segment and seals it,
    /// ready to be swapped in for the group. `None` when the cleaner is stopping: the
    /// half-written segment is deleted.
    fn clean_group(
        &self,
        group: &[&SegmentSource],
        reader: &mut Reader<'_>,
        txns: &mut TxnTracker,
        stats: &mut PassStats,
    ) -> Result<Option<LogSegment>, StorageError> {
        let config = &self.sources.config;
        // The aborted transactions whose markers this group keeps, for its `.txnindex`.
        let mut retained = Vec::new();
        let cleaned = LogSegment::create_with_suffix(
            &self.sources.dir,
            group[0].base_offset,
            CLEANED_FILE_SUFFIX,
            config.segment_index_bytes,
            config.index_interval_bytes,
            self.now_ms,
        )?;
        let mut writer = Writer {
            segment: cleaned,
            buffer: Vec::with_capacity(self.io_buffer_bytes),
            limit: self.io_buffer_bytes,
            written: 0,
        };
        for source in group {
            stats.segments_read += 1;
            let mut batches = reader.open(source);
            while let Some((header, bytes)) = batches.next_batch()? {
                if self.stop.load(Ordering::Relaxed) {
                    delete_segment_files(writer.segment)?;
                    return Ok(None);
                }
                if header.is_control() {
                    let (removable, aborted) = txns.on_control(&header, read_marker(bytes));
                    retained.extend(aborted);
                    self.clean_marker(&header, bytes, removable, source, &mut writer)?;
                } else {
                    let aborted = txns.on_batch(&header);
                    self.clean_records(&header, bytes, aborted, source, &mut writer, stats)?;
                }
            }
            stats.bytes_read += source.size;
        }
        writer.flush(self.throttler)?;
        stats.bytes_written += writer.written;
        seal_cleaned(writer.segment, &retained, group).map(Some)
    }

    /// A control batch (a transaction marker). It stays while its transaction still has
    /// batches here (`removable` false), or as the last batch before the uncleanable part, which
    /// keeps the offsets continuous. Otherwise it goes once its delete horizon has passed; the
    /// first pass that could remove it stamps the horizon instead, as Kafka does.
    fn clean_marker(
        &self,
        header: &BatchHeader,
        bytes: &[u8],
        removable: bool,
        source: &SegmentSource,
        writer: &mut Writer,
    ) -> Result<(), StorageError> {
        let last_cleanable = header.last_offset() + 1 == self.first_uncleanable_offset;
        match header.delete_horizon_ms() {
            _ if !removable || last_cleanable => writer.push(bytes, self.throttler),
            Some(due) if self.now_ms >= due => Ok(()),
            Some(_) => writer.push(bytes, self.throttler),
            None => {
                let stamped =
                    stamp_delete_horizon(bytes, self.horizon, MAX_DECOMPRESSED_BATCH_BYTES)
                        .map_err(|e| corrupt(source, &e.to_string()))?;
                writer.push(&stamped, self.throttler)
            }
        }
    }

    /// A data batch, rewritten to the records that stay: none of an aborted transaction
    /// (`aborted`); past the map's reach, all; before it, a key's latest record unless it is a
    /// tombstone whose delete horizon has passed; never a keyless one. An emptied batch stays
    /// when it is its producer's last (its sequence state) or the last before the uncleanable
    /// part.
    fn clean_records(
        &self,
        header: &BatchHeader,
        bytes: &[u8],
        aborted: bool,
        source: &SegmentSource,
        writer: &mut Writer,
        stats: &mut PassStats,
    ) -> Result<(), StorageError> {
        let map = self.map;
        let now_ms = self.now_ms;
        let last_of_producer = header.producer_id >= 0
            && self.sources.producer_last_offsets.get(&header.producer_id)
                == Some(&header.last_offset());
        let options = FilterOptions {
            // The last batch before the uncleanable part keeps the offsets continuous.
            retain_empty: last_of_producer
                || header.last_offset() + 1 == self.first_uncleanable_offset,
            delete_horizon_ms: self.horizon,
            max_decompressed: MAX_DECOMPRESSED_BATCH_BYTES,
        };
        let delete_horizon = header.delete_horizon_ms();
        let (filtered, counts) = filter_batch(bytes, options, |record| {
            if aborted {
                return false;
            }
            if record.offset > map.latest_offset() {
                return true;
            }
            let Some(key) = record.key else {
                // Keyless records have no place in a compacted log.
                return false;
            };
            let latest = record.offset >= map.get(key).unwrap_or(-1);
            let tombstone_due =
                record.value.is_none() && delete_horizon.is_some_and(|horizon| now_ms >= horizon);
            latest && !tombstone_due
        })
        .map_err(|e| corrupt(source, &e.to_string()))?;
        stats.records_read += counts.records_read;
        stats.records_kept += counts.records_kept;
        match filtered {
            Filtered::Unchanged => writer.push(bytes, self.throttler),
            Filtered::Rewritten(batch) => writer.push(&batch, self.throttler),
            Filtered::Dropped => Ok(()),
        }
    }
}

/// Makes a written cleaned segment ready for the swap, as a sealed segment: the aborted
/// transactions whose markers it kept go into its `.txnindex`, its time index records its final
/// max timestamp, everything is flushed, and its `.log` takes the modification time of the last
/// segment it replaces (which stands in for the timestamp of records without one).
fn seal_cleaned(
    mut cleaned: LogSegment,
    retained: &[AbortedTxn],
    group: &[&SegmentSource],
) -> Result<LogSegment, StorageError> {
    if !retained.is_empty() {
        cleaned.adopt_aborted_txns(retained)?;
    }
    cleaned.on_become_inactive()?;
    cleaned.flush()?;
    if let Some(last) = group.last() {
        cleaned.set_last_modified(last.last_modified)?;
    }
    Ok(cleaned)
}

/// Maps the keys of the dirty section, from the first dirty offset on, until the map is full
/// or the first uncleanable offset. Returns where the cleaned part will end: just past the
/// last batch mapped whole, or the first uncleanable offset when everything fitted. `None` when
/// stopping.
fn build_offset_map(
    sources: &CleaningSources,
    cleanable: &CleanableLog,
    map: &mut OffsetMap,
    reader: &mut Reader<'_>,
    stop: &AtomicBool,
) -> Result<Option<i64>, StorageError> {
    let first_dirty = cleanable.first_dirty_offset;
    // The records of aborted transactions shadow nothing: they never enter the map. Only those
    // ending in the dirty section matter here (the batches before it are not read).
    let mut txns = TxnTracker::new(
        sources
            .aborted_txns
            .iter()
            .filter(|t| t.last_offset >= first_dirty)
            .copied()
            .collect(),
    );
    for source in sources
        .segments
        .iter()
        .filter(|s| s.next_segment_base > first_dirty)
    {
        let mut batches = reader.open(source);
        while let Some((header, bytes)) = batches.next_batch()? {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if header.last_offset() < first_dirty {
                continue;
            }
            if header.is_control() {
                txns.on_control(&header, read_marker(bytes));
            } else if !txns.on_batch(&header) {
                let mut full = false;
                for_each_key(
                    bytes,
                    MAX_DECOMPRESSED_BATCH_BYTES,
                    |offset, key| match key {
                        Some(key) if offset >= first_dirty => {
                            full = map.put(key, offset).is_err();
                            !full
                        }
                        _ => true,
                    },
                )
                .map_err(|e| corrupt(source, &e.to_string()))?;
                if full {
                    if map.latest_offset() < first_dirty {
                        return Err(StorageError::corrupt(
                            &sources.dir,
                            format!(
                                "the cleaner's offset map holds {} keys, fewer than one batch at \
                                 offset {} has: raise log.cleaner.dedupe.buffer.size",
                                map.max_entries(),
                                header.base_offset
                            ),
                        ));
                    }
                    return Ok(Some(map.latest_offset() + 1));
                }
            }
            map.set_latest_offset(header.last_offset());
        }
    }
    Ok(Some(cleanable.first_uncleanable_offset))
}

/// Kafka's grouping: consecutive segments whose logs together fit `segment.bytes`, whose
/// indexes together fit `segment.index.bytes`, and whose offsets fit 32-bit deltas from the
/// group's base, become one cleaned segment.
fn group_segments<'a>(
    segments: &[&'a SegmentSource],
    max_bytes: u64,
    max_index_bytes: usize,
) -> Vec<Vec<&'a SegmentSource>> {
    let mut groups: Vec<Vec<&SegmentSource>> = Vec::new();
    let mut sums = (0u64, 0usize, 0usize);
    for &segment in segments {
        let offsets = segment.offset_index_entries * OFFSET_INDEX_ENTRY_BYTES;
        let times = segment.time_index_entries * TIME_INDEX_ENTRY_BYTES;
        let fits = groups.last().is_some_and(|group| {
            let base = group[0].base_offset;
            sums.0 + segment.size <= max_bytes
                && sums.1 + offsets <= max_index_bytes
                && sums.2 + times <= max_index_bytes
                && (segment.size == 0
                    || segment.next_segment_base - 1 - base <= i64::from(i32::MAX))
        });
        match groups.last_mut() {
            Some(group) if fits => {
                group.push(segment);
                sums = (sums.0 + segment.size, sums.1 + offsets, sums.2 + times);
            }
            _ => {
                groups.push(vec![segment]);
                sums = (segment.size, offsets, times);
            }
        }
    }
    groups
}

fn corrupt(source: &SegmentSource, what: &str) -> StorageError {
    StorageError::corrupt(
        std::path::Path::new(&format!("segment {}", source.base_offset)),
        what.to_string(),
    )
}

/// Buffers the cleaned batches and appends them to the cleaned segment in large writes.
struct Writer {
    segment: LogSegment,
    buffer: Vec<u8>,
    limit: usize,
    written: u64,
}

impl Writer {
    fn push(&mut self, batch: &[u8], throttler: &Throttler) -> Result<(), StorageError> {
        if !self.buffer.is_empty() && self.buffer.len() + batch.len() > self.limit {
            self.flush(throttler)?;
        }
        self.buffer.extend_from_slice(batch);
        Ok(())
    }

    fn flush(&mut self, throttler: &Throttler) -> Result<(), StorageError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.segment.append_batches(&self.buffer)?;
        throttler.maybe_throttle(self.buffer.len() as u64);
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

/// Reads a sealed segment's batches in large chunks; the buffer grows only for a batch bigger
/// than it, up to the segment's size.
struct Reader<'a> {
    buffer: Vec<u8>,
    chunk: usize,
    throttler: &'a Throttler,
}

impl<'a> Reader<'a> {
    fn new(chunk: usize, throttler: &'a Throttler) -> Reader<'a> {
        Reader {
            buffer: Vec::new(),
            chunk: chunk.max(BATCH_HEADER_LEN),
            throttler,
        }
    }

    fn open<'r>(&'r mut self, source: &'r SegmentSource) -> SegmentBatches<'r, 'a> {
        self.buffer.clear();
        SegmentBatches {
            reader: self,
            source,
            file: &source.file,
            buffer_start: 0,
            at: 0,
        }
    }
}

struct SegmentBatches<'r, 'a> {
    reader: &'r mut Reader<'a>,
    source: &'r SegmentSource,
    file: &'r File,
    /// File position of `buffer[0]`.
    buffer_start: u64,
    /// Position in `buffer` of the next batch.
    at: usize,
}

impl SegmentBatches<'_, '_> {
    /// Makes `buffer[at..at + need]` hold file bytes; false at the end of the segment.
    fn fill(&mut self, need: usize) -> Result<bool, StorageError> {
        let buffer = &mut self.reader.buffer;
        if buffer.len() - self.at >= need {
            return Ok(true);
        }
        let position = self.buffer_start + self.at as u64;
        if position + need as u64 > self.source.size {
            return Ok(false);
        }
        buffer.drain(..self.at);
        self.buffer_start = position;
        self.at = 0;
        let want = need
            .max(self.reader.chunk)
            .min((self.source.size - position) as usize);
        let have = buffer.len();
        buffer.resize(want, 0);
        let slot = buffer.get_mut(have..).unwrap_or_default();
        let from = position + have as u64;
        self.file
            .read_exact_at(slot, from)
            .map_err(|e| corrupt(self.source, &format!("read failed: {e}")))?;
        self.reader.throttler.maybe_throttle((want - have) as u64);
        Ok(true)
    }

    /// The next whole batch, CRC-checked; `None` at the end of the segment.
    fn next_batch(&mut self) -> Result<Option<(BatchHeader, &[u8])>, StorageError> {
        let position = self.buffer_start + self.at as u64;
        if position >= self.source.size {
            return Ok(None);
        }
        if !self.fill(BATCH_HEADER_LEN)? {
            return Err(corrupt(self.source, "a torn batch header"));
        }
        let header = self
            .reader
            .buffer
            .get(self.at..)
            .and_then(|b| BatchHeader::parse(b).ok())
            .ok_or_else(|| corrupt(self.source, &format!("no batch at position {position}")))?;
        let len = header.total_len();
        if !self.fill(len)? {
            return Err(corrupt(self.source, "a batch runs past the segment's end"));
        }
        let start = self.at;
        self.at += len;
        let bytes = self
            .reader
            .buffer
            .get(start..start + len)
            .ok_or_else(|| corrupt(self.source, "short read"))?;
        if compute_crc(bytes) != header.crc {
            return Err(corrupt(
                self.source,
                &format!("CRC mismatch at position {position}"),
            ));
        }
        Ok(Some((header, bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn source(base: i64, next: i64, size: u64, entries: usize) -> SegmentSource {
        SegmentSource {
            base_offset: base,
            next_segment_base: next,
            file: Arc::new(tempfile::tempfile().unwrap()),
            size,
            offset_index_entries: entries,
            time_index_entries: entries,
            last_modified: std::time::UNIX_EPOCH,
        }
    }

    #[test]
    fn groups_stay_within_segment_and_index_bytes() {
        let segments = [
            source(0, 10, 400, 1),
            source(10, 20, 400, 1),
            source(20, 30, 400, 1),
            source(30, 40, 0, 0),
            source(40, 50, 900, 1),
        ];
        let refs: Vec<&SegmentSource> = segments.iter().collect();
        let bases = |groups: Vec<Vec<&SegmentSource>>| -> Vec<Vec<i64>> {
            groups
                .iter()
                .map(|g| g.iter().map(|s| s.base_offset).collect())
                .collect()
        };
        assert_eq!(
            bases(group_segments(&refs, 1000, 1 << 20)),
            vec![vec![0, 10], vec![20, 30], vec![40]]
        );
        // Index room for two offset entries, at 8 bytes each (and 12 for time entries).
        assert_eq!(
            bases(group_segments(&refs, 10_000, 24)),
            vec![vec![0, 10], vec![20, 30, 40]]
        );
    }
}
