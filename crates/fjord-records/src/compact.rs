//! Rewriting one batch for log compaction: keep some of its records, never move an offset.
//!
//! The kept records stay at their offsets (same base offset, same offset deltas) and the batch
//! keeps its producer id, epoch, base sequence and `lastOffsetDelta`, so the last sequence of
//! an idempotent producer reads the same after cleaning. A batch whose tombstones are seen for
//! the first time gets a delete horizon (KIP-534: attribute bit 6, the horizon stored in
//! `baseTimestamp`, record timestamp deltas relative to it).

use bytes::BytesMut;

use crate::compression::{compress, decompress, Compression};
use crate::header::{attributes, BatchHeader, BATCH_HEADER_LEN};
use crate::record::{encode_record, RecordRef, RecordRefIter};
use crate::RecordsError;

/// What became of a batch.
#[derive(Debug)]
pub enum Filtered {
    /// Every record is kept and nothing needs stamping: the original bytes stand.
    Unchanged,
    /// No record is kept and the batch need not stay: it goes.
    Dropped,
    /// The batch rewritten with the kept records (possibly none: an empty batch that keeps the
    /// offsets and producer metadata).
    Rewritten(BytesMut),
}

/// How a batch is filtered, apart from the per-record decision.
#[derive(Debug, Clone, Copy)]
pub struct FilterOptions {
    /// Keep the batch, empty, even when no record survives (the last batch of an active
    /// producer, or the last batch before the uncleanable part of the log).
    pub retain_empty: bool,
    /// The horizon to stamp on a batch that keeps a tombstone and has none yet.
    pub delete_horizon_ms: i64,
    /// Bound on the decompressed records section.
    pub max_decompressed: usize,
}

/// Counts for the cleaner's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterCounts {
    pub records_read: u64,
    pub records_kept: u64,
}

/// One record as the filter sees it: its absolute offset and timestamp, key and value.
#[derive(Debug, Clone, Copy)]
pub struct CandidateRecord<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
}

/// Filters the records of `batch` (exactly one whole v2 batch) through `keep`. Control batches
/// are not for this function: the caller decides about them whole.
pub fn filter_batch(
    batch: &[u8],
    options: FilterOptions,
    mut keep: impl FnMut(&CandidateRecord<'_>) -> bool,
) -> Result<(Filtered, FilterCounts), RecordsError> {
    let (header, codec, data) = open_batch(batch, options.max_decompressed)?;
    let mut counts = FilterCounts::default();
    let mut kept: Vec<(i64, RecordRef<'_>)> = Vec::new();
    let mut kept_tombstone = false;
    let mut records = RecordRefIter::new(&data, header.record_count);
    for record in records.by_ref() {
        let record = record?;
        counts.records_read += 1;
        let candidate = CandidateRecord {
            offset: record_offset(&header, record.offset_delta)?,
            timestamp: header.base_timestamp.saturating_add(record.timestamp_delta),
            key: record.key,
            value: record.value,
        };
        if keep(&candidate) {
            kept_tombstone |= record.value.is_none();
            kept.push((candidate.timestamp, record));
        }
    }
    records.finish()?;
    counts.records_kept = kept.len() as u64;
    let stamp_horizon = kept_tombstone && header.delete_horizon_ms().is_none();
    if counts.records_kept == counts.records_read && !stamp_horizon {
        return Ok((Filtered::Unchanged, counts));
    }
    if kept.is_empty() && !options.retain_empty {
        return Ok((Filtered::Dropped, counts));
    }

    let mut out = header;
    out.record_count = i32::try_from(kept.len()).unwrap_or(i32::MAX);
    if kept.is_empty() {
        // An empty batch carries no records section at all, hence no codec.
        out.attributes &= !attributes::COMPRESSION_MASK;
        out.base_timestamp = header.delete_horizon_ms().unwrap_or(header.max_timestamp);
        return Ok((Filtered::Rewritten(out.encode_with(&[])?), counts));
    }
    out.base_timestamp = if stamp_horizon {
        out.attributes |= attributes::DELETE_HORIZON;
        options.delete_horizon_ms
    } else if let Some(horizon) = header.delete_horizon_ms() {
        horizon
    } else {
        kept.first().map_or(header.base_timestamp, |(ts, _)| *ts)
    };
    if !header.is_log_append_time() {
        out.max_timestamp = kept.iter().map(|(ts, _)| *ts).max().unwrap_or(-1);
    }
    let mut encoded = Vec::with_capacity(data.as_ref().len());
    for (timestamp, record) in &kept {
        let headers: Vec<(&[u8], Option<&[u8]>)> = record.headers().collect();
        encode_record(
            &mut encoded,
            record.attributes,
            timestamp.saturating_sub(out.base_timestamp),
            record.offset_delta,
            record.key,
            record.value,
            &headers,
        )?;
    }
    let section = compress(codec, &encoded, None)?;
    Ok((Filtered::Rewritten(out.encode_with(&section)?), counts))
}

/// `batch` (one whole v2 batch without a delete horizon) stamped with `delete_horizon_ms`, its
/// records unchanged: a transaction marker the cleaner may remove once the horizon passes.
pub fn stamp_delete_horizon(
    batch: &[u8],
    delete_horizon_ms: i64,
    max_decompressed: usize,
) -> Result<BytesMut, RecordsError> {
    let (header, codec, data) = open_batch(batch, max_decompressed)?;
    let mut out = header;
    out.attributes |= attributes::DELETE_HORIZON;
    out.base_timestamp = delete_horizon_ms;
    let mut encoded = Vec::with_capacity(data.as_ref().len());
    let mut records = RecordRefIter::new(&data, header.record_count);
    for record in records.by_ref() {
        let record = record?;
        let timestamp = header.base_timestamp.saturating_add(record.timestamp_delta);
        let headers: Vec<(&[u8], Option<&[u8]>)> = record.headers().collect();
        encode_record(
            &mut encoded,
            record.attributes,
            timestamp.saturating_sub(delete_horizon_ms),
            record.offset_delta,
            record.key,
            record.value,
            &headers,
        )?;
    }
    records.finish()?;
    let section = compress(codec, &encoded, None)?;
    out.encode_with(&section)
}

/// A batch's records section, borrowed when uncompressed.
enum Section<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Section<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Section::Borrowed(b) => b,
            Section::Owned(v) => v,
        }
    }
}

impl AsRef<[u8]> for Section<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// A record's offset: its batch's base offset plus its delta, refused when that overflows (a
/// batch from bad bytes, never one fjord wrote).
fn record_offset(header: &BatchHeader, offset_delta: i32) -> Result<i64, RecordsError> {
    header
        .base_offset
        .checked_add(i64::from(offset_delta))
        .ok_or(RecordsError::InvalidRecord("record offset overflows"))
}

/// Parses the header of exactly one whole batch and decompresses its records.
fn open_batch(
    batch: &[u8],
    max_decompressed: usize,
) -> Result<(BatchHeader, Compression, Section<'_>), RecordsError> {
    let header = BatchHeader::parse(batch)?;
    if header.total_len() != batch.len() {
        return Err(RecordsError::Truncated);
    }
    let section = batch.get(BATCH_HEADER_LEN..).unwrap_or_default();
    let codec = Compression::from_attributes(header.attributes)?;
    let data = match codec {
        Compression::None => Section::Borrowed(section),
        codec => Section::Owned(decompress(codec, section, max_decompressed)?),
    };
    Ok((header, codec, data))
}

/// Visits the offset and key of each record of `batch` (exactly one whole batch) while `f`
/// returns true; returns whether every record was visited. The cleaner's offset map is built
/// this way.
pub fn for_each_key(
    batch: &[u8],
    max_decompressed: usize,
    mut f: impl FnMut(i64, Option<&[u8]>) -> bool,
) -> Result<bool, RecordsError> {
    let (header, _, data) = open_batch(batch, max_decompressed)?;
    let mut records = RecordRefIter::new(&data, header.record_count);
    for record in records.by_ref() {
        let record = record?;
        if !f(record_offset(&header, record.offset_delta)?, record.key) {
            return Ok(false);
        }
    }
    records.finish()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::BatchBuilder;
    use bytes::Bytes;

    fn batch(codec: Compression, records: &[(&str, Option<&str>)]) -> BytesMut {
        let mut builder = BatchBuilder::new(codec)
            .base_offset(100)
            .partition_leader_epoch(3)
            .producer(7, 1, 40);
        for (i, (key, value)) in records.iter().enumerate() {
            builder
                .append(
                    1_000 + i as i64,
                    Some(key.as_bytes()),
                    value.map(str::as_bytes),
                    &[],
                )
                .unwrap();
        }
        builder.build().unwrap()
    }

    const OPTIONS: FilterOptions = FilterOptions {
        retain_empty: false,
        delete_horizon_ms: 50_000,
        max_decompressed: 1 << 20,
    };

    #[test]
    fn a_record_offset_past_i64_is_refused_not_overflowed() {
        let mut builder = BatchBuilder::new(Compression::None).base_offset(i64::MAX);
        for key in ["a", "b"] {
            builder
                .append(0, Some(key.as_bytes()), Some(b"v"), &[])
                .unwrap();
        }
        let bytes = builder.build().unwrap();
        let err = for_each_key(&bytes, 1 << 20, |_, _| true).unwrap_err();
        assert!(matches!(err, RecordsError::InvalidRecord(_)), "{err:?}");
        let err = filter_batch(&bytes, OPTIONS, |_| true).unwrap_err();
        assert!(matches!(err, RecordsError::InvalidRecord(_)), "{err:?}");
    }

    fn rewritten(filtered: Filtered) -> (BatchHeader, Vec<(i64, i64, Option<Bytes>)>) {
        let Filtered::Rewritten(bytes) = filtered else {
            panic!("expected a rewrite, got {filtered:?}");
        };
        let bytes = bytes.freeze();
        let header = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(crate::header::compute_crc(&bytes), header.crc);
        let records: Vec<_> = crate::records(&bytes, 1 << 20)
            .unwrap()
            .map(Result::unwrap)
            .map(|r| {
                (
                    record_offset(&header, r.offset_delta).unwrap(),
                    header.base_timestamp + r.timestamp_delta,
                    r.value,
                )
            })
            .collect();
        (header, records)
    }

    #[test]
    fn kept_records_keep_offsets_timestamps_and_producer_metadata() {
        for codec in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let input = batch(
                codec,
                &[("a", Some("1")), ("b", Some("2")), ("a", Some("3"))],
            );
            let (filtered, counts) = filter_batch(&input, OPTIONS, |r| r.offset != 100).unwrap();
            assert_eq!(counts.records_read, 3);
            assert_eq!(counts.records_kept, 2);
            let (header, records) = rewritten(filtered);
            assert_eq!(header.base_offset, 100);
            assert_eq!(
                header.last_offset_delta, 2,
                "last offset kept for the sequence"
            );
            assert_eq!(header.last_sequence(), 42);
            assert_eq!((header.producer_id, header.producer_epoch), (7, 1));
            assert_eq!(header.partition_leader_epoch, 3);
            assert_eq!(header.compression(), codec.id());
            assert_eq!(header.max_timestamp, 1_002);
            assert_eq!(
                records,
                vec![
                    (101, 1_001, Some(Bytes::from_static(b"2"))),
                    (102, 1_002, Some(Bytes::from_static(b"3")))
                ]
            );
        }
    }

    #[test]
    fn all_kept_is_unchanged_and_none_kept_is_dropped_or_empty() {
        let input = batch(Compression::Lz4, &[("a", Some("1")), ("b", Some("2"))]);
        let (filtered, _) = filter_batch(&input, OPTIONS, |_| true).unwrap();
        assert!(matches!(filtered, Filtered::Unchanged));
        let (filtered, _) = filter_batch(&input, OPTIONS, |_| false).unwrap();
        assert!(matches!(filtered, Filtered::Dropped));
        let retain = FilterOptions {
            retain_empty: true,
            ..OPTIONS
        };
        let (filtered, _) = filter_batch(&input, retain, |_| false).unwrap();
        let (header, records) = rewritten(filtered);
        assert!(records.is_empty());
        assert_eq!(header.record_count, 0);
        assert_eq!(header.last_offset(), 101);
        assert_eq!(header.compression(), 0);
        assert_eq!(header.max_timestamp, 1_001);
    }

    #[test]
    fn a_kept_tombstone_stamps_the_delete_horizon_once() {
        let input = batch(Compression::Snappy, &[("a", None), ("b", Some("2"))]);
        let (filtered, _) = filter_batch(&input, OPTIONS, |_| true).unwrap();
        let (header, records) = rewritten(filtered);
        assert_eq!(header.delete_horizon_ms(), Some(50_000));
        assert_eq!(header.base_timestamp, 50_000);
        // Record timestamps survive the new base timestamp.
        assert_eq!(records[0].1, 1_000);
        assert_eq!(records[1].1, 1_001);
        assert_eq!(records[0].2, None);
        // A second pass keeps the first horizon.
        let (again, _) = filter_batch(&rebuild(&input), OPTIONS, |_| true).unwrap();
        assert!(matches!(again, Filtered::Unchanged));
        let later = FilterOptions {
            delete_horizon_ms: 90_000,
            ..OPTIONS
        };
        let (filtered, _) = filter_batch(&rebuild(&input), later, |r| r.value.is_some()).unwrap();
        let (header, records) = rewritten(filtered);
        assert_eq!(header.delete_horizon_ms(), Some(50_000));
        assert_eq!(records, vec![(101, 1_001, Some(Bytes::from_static(b"2")))]);
    }

    /// The batch after a first pass that kept everything (and so stamped the horizon).
    fn rebuild(input: &[u8]) -> Bytes {
        match filter_batch(input, OPTIONS, |_| true).unwrap().0 {
            Filtered::Rewritten(bytes) => bytes.freeze(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_visited_in_order_until_told_to_stop() {
        let input = batch(
            Compression::Gzip,
            &[("a", Some("1")), ("b", None), ("c", Some("3"))],
        );
        let mut seen = Vec::new();
        let whole = for_each_key(&input, 1 << 20, |offset, key| {
            seen.push((offset, key.map(<[u8]>::to_vec)));
            true
        })
        .unwrap();
        assert!(whole);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1], (101, Some(b"b".to_vec())));
        let mut visits = 0;
        let whole = for_each_key(&input, 1 << 20, |_, _| {
            visits += 1;
            visits < 2
        })
        .unwrap();
        assert!(!whole);
        assert_eq!(visits, 2);
    }

    #[test]
    fn damaged_batches_are_errors() {
        let input = batch(Compression::None, &[("a", Some("1"))]);
        assert!(filter_batch(&input[..input.len() - 1], OPTIONS, |_| true).is_err());
        let mut bad = input.to_vec();
        let last = bad.len() - 3;
        bad[last] = 0x7f; // a header count running past the record
        assert!(filter_batch(&bad, OPTIONS, |_| true).is_err());
    }
}
