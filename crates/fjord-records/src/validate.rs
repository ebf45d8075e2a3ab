//! Produce-path checks of record batches, as the Kafka broker performs them before appending:
//! framing, size, CRC, header consistency, and per-record structure, keys and timestamps.
//! Also splits a produce request's `records` field into its batches.

use bytes::Bytes;

use crate::compression::{decompress, Compression};
use crate::header::{
    BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_V2, OFFSET_BATCH_LENGTH, OFFSET_MAGIC,
};
use crate::record::{RecordRefIter, Records};
use crate::{RecordError, RecordErrorKind, RecordsError};

/// `NO_TIMESTAMP` in Kafka: a record without a timestamp.
pub const NO_TIMESTAMP: i64 = -1;

/// A topic's `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Who is appending. Kafka applies the stricter header checks only to client produce requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
    Replication,
}

/// Topic and broker settings the checks depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationConfig {
    /// `max.message.bytes` (topic) / `message.max.bytes` (broker): largest batch accepted.
    pub max_batch_bytes: usize,
    /// Largest records section accepted after decompression; bounds broker memory per batch.
    pub max_decompressed_bytes: usize,
    /// Whether each record needs a non-null key (`cleanup.policy` includes `compact`).
    pub require_keys: bool,
    /// The topic's `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// Broker wall clock for the timestamp range check.
    pub now_ms: i64,
    /// `message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: i64,
    pub origin: AppendOrigin,
}

impl ValidationConfig {
    /// Kafka 4.x defaults for a client produce at `now_ms`.
    pub fn new(now_ms: i64) -> ValidationConfig {
        ValidationConfig {
            max_batch_bytes: 1_048_588,
            max_decompressed_bytes: 64 * 1024 * 1024,
            require_keys: false,
            timestamp_type: TimestampType::CreateTime,
            now_ms,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            origin: AppendOrigin::Client,
        }
    }
}

/// What validation learned about an accepted batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatedBatch {
    pub header: BatchHeader,
    pub compression: Compression,
    /// Largest record timestamp ([`NO_TIMESTAMP`] if none). For a CreateTime topic this is the
    /// value Kafka stores as the batch's maxTimestamp (see [`crate::set_max_timestamp`]); for a
    /// LogAppendTime topic the broker uses its append time instead ([`crate::set_log_append_time`]).
    pub max_timestamp: i64,
    /// Offset delta of the first record carrying `max_timestamp` (-1 if none).
    pub offset_delta_of_max_timestamp: i32,
    pub record_count: i32,
    /// Bytes the batch occupies, header included.
    pub size_in_bytes: usize,
    /// Bytes of the records section after decompression.
    pub uncompressed_records_bytes: usize,
}

/// Checks one complete batch (`batch` holds exactly it) the way the Kafka broker checks a
/// produce request before appending. Record-level refusals (keys, timestamps) are collected
/// for the whole batch into [`RecordsError::RecordErrors`], as Kafka reports them.
pub fn validate_batch(
    batch: &[u8],
    cfg: &ValidationConfig,
) -> Result<ValidatedBatch, RecordsError> {
    // Check magic before anything length-related: older formats have smaller headers and the
    // broker must answer them distinctly.
    let magic = *batch.get(OFFSET_MAGIC).ok_or(RecordsError::Truncated)? as i8;
    if magic != MAGIC_V2 {
        return Err(RecordsError::UnsupportedMagic(magic));
    }
    let header = BatchHeader::parse(batch)?;
    let size = header.total_len();
    if size > batch.len() {
        return Err(RecordsError::Truncated);
    }
    if size < batch.len() {
        return Err(RecordsError::Corrupt("bytes follow the batch"));
    }
    if size > cfg.max_batch_bytes {
        return Err(RecordsError::MessageTooLarge {
            size,
            max: cfg.max_batch_bytes,
        });
    }
    let computed = crate::header::compute_crc(batch);
    if computed != header.crc {
        return Err(RecordsError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    let compression = Compression::from_attributes(header.attributes)?;

    if cfg.origin == AppendOrigin::Client {
        if header.base_offset != 0 {
            return Err(RecordsError::InvalidRecord(
                "baseOffset of a produced batch must be 0",
            ));
        }
        if header.is_control() {
            return Err(RecordsError::InvalidRecord(
                "clients may not write control batches",
            ));
        }
        if header.producer_id >= 0 && header.base_sequence < 0 {
            return Err(RecordsError::InvalidRecord(
                "idempotent batch without a base sequence",
            ));
        }
    }
    if header.last_offset_delta < 0 {
        return Err(RecordsError::InvalidRecord(
            "batch has an invalid offset range",
        ));
    }
    if header.record_count <= 0 {
        return Err(RecordsError::InvalidRecord("invalid record count"));
    }
    if header.last_offset_delta as i64 + 1 != header.record_count as i64 {
        return Err(RecordsError::InvalidRecord(
            "offset range and record count disagree",
        ));
    }

    let section = batch
        .get(BATCH_HEADER_LEN..)
        .ok_or(RecordsError::Truncated)?;
    let decompressed;
    let records: &[u8] = if compression == Compression::None {
        section
    } else {
        decompressed = decompress(compression, section, cfg.max_decompressed_bytes)?;
        &decompressed
    };
    let scan = scan_records(&header, records, cfg)?;
    Ok(ValidatedBatch {
        header,
        compression,
        max_timestamp: scan.max_timestamp,
        offset_delta_of_max_timestamp: scan.offset_delta_of_max_timestamp,
        record_count: header.record_count,
        size_in_bytes: size,
        uncompressed_records_bytes: records.len(),
    })
}

struct Scan {
    max_timestamp: i64,
    offset_delta_of_max_timestamp: i32,
}

fn timestamp_error(
    header: &BatchHeader,
    timestamp: i64,
    cfg: &ValidationConfig,
) -> Option<RecordErrorKind> {
    if cfg.timestamp_type == TimestampType::CreateTime && timestamp != NO_TIMESTAMP {
        // Wide arithmetic: the limits default to Long.MAX and must not overflow.
        let diff = i128::from(cfg.now_ms) - i128::from(timestamp);
        if diff > i128::from(cfg.timestamp_before_max_ms)
            || -diff > i128::from(cfg.timestamp_after_max_ms)
        {
            return Some(RecordErrorKind::TimestampOutOfRange { timestamp });
        }
        None
    } else if header.is_log_append_time() {
        Some(RecordErrorKind::LogAppendTimeFromProducer)
    } else {
        None
    }
}

/// Walks the records without allocating (unless some are refused).
fn scan_records(
    header: &BatchHeader,
    records: &[u8],
    cfg: &ValidationConfig,
) -> Result<Scan, RecordsError> {
    let mut scan = Scan {
        max_timestamp: NO_TIMESTAMP,
        offset_delta_of_max_timestamp: -1,
    };
    let mut errors: Vec<RecordError> = Vec::new();
    let mut iter = RecordRefIter::new(records, header.record_count);
    // The iterator yields at most `record_count` (an i32) records, so the index fits.
    for (index, record) in (0i32..).zip(iter.by_ref()) {
        let record = record?;
        if record.offset_delta != index {
            return Err(RecordsError::InvalidRecord(
                "record offset deltas are not 0..n-1 in order",
            ));
        }
        // In a LogAppendTime batch every record reads as the batch's maxTimestamp.
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        let kind = if cfg.require_keys && record.key.is_none() {
            Some(RecordErrorKind::MissingKey)
        } else {
            timestamp_error(header, timestamp, cfg)
        };
        match kind {
            Some(kind) => errors.push(RecordError {
                batch_index: index,
                kind,
            }),
            None if timestamp > scan.max_timestamp => {
                scan.max_timestamp = timestamp;
                scan.offset_delta_of_max_timestamp = record.offset_delta;
            }
            None => {}
        }
    }
    iter.finish()?;
    if !errors.is_empty() {
        return Err(RecordsError::RecordErrors(errors));
    }
    Ok(scan)
}

/// Splits a produce request's `records` field into one zero-copy slice per batch. Any batch
/// whose magic is not 2 is reported as [`RecordsError::UnsupportedMagic`]; a partial trailing
/// batch is [`RecordsError::Truncated`]. An empty field yields no batches.
pub fn split_batches(records: &Bytes) -> Result<Vec<Bytes>, RecordsError> {
    let mut batches = Vec::new();
    let mut pos = 0usize;
    while pos < records.len() {
        let rest = records.get(pos..).unwrap_or(&[]);
        // magic sits at the same offset in every message format.
        let magic = *rest.get(OFFSET_MAGIC).ok_or(RecordsError::Truncated)? as i8;
        if magic != MAGIC_V2 {
            return Err(RecordsError::UnsupportedMagic(magic));
        }
        let len_bytes = rest
            .get(OFFSET_BATCH_LENGTH..LOG_OVERHEAD)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .ok_or(RecordsError::Truncated)?;
        let batch_length = i32::from_be_bytes(len_bytes);
        if (batch_length as i64) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(RecordsError::InvalidBatchLength(batch_length));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > rest.len() {
            return Err(RecordsError::Truncated);
        }
        batches.push(records.slice(pos..pos + total));
        pos += total;
    }
    Ok(batches)
}

/// The records of one batch (`batch` holds at least the whole batch), decompressing at most
/// `max_decompressed` bytes. Uncompressed records share `batch`'s buffer. The CRC is not
/// checked here: use it on batches already validated or read back from the log.
pub fn records(batch: &Bytes, max_decompressed: usize) -> Result<Records, RecordsError> {
    let header = BatchHeader::parse(batch)?;
    let total = header.total_len();
    if total > batch.len() {
        return Err(RecordsError::Truncated);
    }
    let section = batch.slice(BATCH_HEADER_LEN..total);
    let data = match Compression::from_attributes(header.attributes)? {
        Compression::None => section,
        codec => Bytes::from(decompress(codec, &section, max_decompressed)?),
    };
    Ok(Records::new(data, header.record_count))
}
