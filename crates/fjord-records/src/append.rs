//! In-place rewrites the leader makes to a validated batch when appending it: offsets, leader
//! epoch and timestamps, and rebuilding it under the topic's `compression.type`.
//!
//! [`AppendBatch`] makes the same rewrites without copying the batch: only its 61-byte header is
//! owned and patched, the records section stays a slice of the request frame.

use bytes::{BufMut, Bytes, BytesMut};

use crate::compression::{compress, decompress, Compression};
use crate::header::{
    attributes, compute_crc, set_base_offset, set_partition_leader_epoch, BatchHeader,
    BATCH_HEADER_LEN, CRC_COVERED_FROM, OFFSET_ATTRIBUTES, OFFSET_BASE_OFFSET, OFFSET_BATCH_LENGTH,
    OFFSET_CRC, OFFSET_MAX_TIMESTAMP, OFFSET_PARTITION_LEADER_EPOCH,
};
use crate::validate::TimestampType;
use crate::RecordsError;

fn checked_header(batch: &[u8]) -> Result<BatchHeader, RecordsError> {
    let header = BatchHeader::parse(batch)?;
    if header.total_len() > batch.len() {
        return Err(RecordsError::Truncated);
    }
    Ok(header)
}

/// Stamps `baseOffset` and `partitionLeaderEpoch`. Neither is covered by the CRC.
pub fn assign_offsets(
    batch: &mut [u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> Result<(), RecordsError> {
    checked_header(batch)?;
    set_base_offset(batch, base_offset);
    set_partition_leader_epoch(batch, partition_leader_epoch);
    Ok(())
}

fn write_at(batch: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), RecordsError> {
    batch
        .get_mut(at..at + bytes.len())
        .ok_or(RecordsError::Truncated)?
        .copy_from_slice(bytes);
    Ok(())
}

/// Sets the timestamp type bit and `maxTimestamp`, recomputing the CRC, as Kafka does after
/// validation. Like Kafka it leaves `baseTimestamp` alone and skips the rewrite (and the CRC
/// work) when both already hold the wanted values.
pub fn set_max_timestamp(
    batch: &mut [u8],
    timestamp_type: TimestampType,
    max_timestamp: i64,
) -> Result<(), RecordsError> {
    let header = checked_header(batch)?;
    let log_append = timestamp_type == TimestampType::LogAppendTime;
    if header.is_log_append_time() == log_append && header.max_timestamp == max_timestamp {
        return Ok(());
    }
    let attrs = if log_append {
        header.attributes | attributes::TIMESTAMP_TYPE_LOG_APPEND
    } else {
        header.attributes & !attributes::TIMESTAMP_TYPE_LOG_APPEND
    };
    write_at(batch, OFFSET_ATTRIBUTES, &attrs.to_be_bytes())?;
    write_at(batch, OFFSET_MAX_TIMESTAMP, &max_timestamp.to_be_bytes())?;
    let total = header.total_len();
    let crc = compute_crc(batch.get(..total).ok_or(RecordsError::Truncated)?);
    write_at(batch, OFFSET_CRC, &crc.to_be_bytes())
}

/// Marks the batch LogAppendTime with `now_ms` as its maxTimestamp (which every record then
/// reads as), recomputing the CRC.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<(), RecordsError> {
    set_max_timestamp(batch, TimestampType::LogAppendTime, now_ms)
}

/// Rebuilds a batch with its records section compressed by `target` instead of its current
/// codec, keeping every other header field (offsets, producer id/epoch/sequence, timestamps,
/// flags, record count) and every record byte-for-byte. `level` is the target's level;
/// `max_decompressed` bounds the decompressed records section.
pub fn recompress(
    batch: &[u8],
    target: Compression,
    level: Option<i32>,
    max_decompressed: usize,
) -> Result<BytesMut, RecordsError> {
    let header = checked_header(batch)?;
    let section = batch
        .get(BATCH_HEADER_LEN..header.total_len())
        .ok_or(RecordsError::Truncated)?;
    let source = Compression::from_attributes(header.attributes)?;
    let raw = decompress(source, section, max_decompressed)?;
    let packed = compress(target, &raw, level)?;
    let batch_length = i32::try_from(BATCH_HEADER_LEN - crate::header::LOG_OVERHEAD + packed.len())
        .map_err(|_| RecordsError::InvalidRecord("recompressed batch too large"))?;
    let attrs = (header.attributes & !attributes::COMPRESSION_MASK) | target.id();

    let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + packed.len());
    out.put_slice(
        batch
            .get(..BATCH_HEADER_LEN)
            .ok_or(RecordsError::Truncated)?,
    );
    out.put_slice(&packed);
    write_at(&mut out, OFFSET_BATCH_LENGTH, &batch_length.to_be_bytes())?;
    write_at(&mut out, OFFSET_ATTRIBUTES, &attrs.to_be_bytes())?;
    let crc = crc32c::crc32c(out.get(CRC_COVERED_FROM..).unwrap_or(&[]));
    write_at(&mut out, OFFSET_CRC, &crc.to_be_bytes())?;
    Ok(out)
}

/// A whole batch on its way into a log: an owned copy of its header, which the leader rewrites
/// (offsets, leader epoch, timestamps, CRC), and its records section, shared with the buffer the
/// batch arrived in. Writing the header and then the records gives the rewritten batch.
#[derive(Debug, Clone)]
pub struct AppendBatch {
    header_bytes: [u8; BATCH_HEADER_LEN],
    header: BatchHeader,
    records: Bytes,
}

impl AppendBatch {
    /// Takes a buffer holding exactly one batch; its header must parse and its length match.
    pub fn new(batch: Bytes) -> Result<AppendBatch, RecordsError> {
        let header = BatchHeader::parse(&batch)?;
        if header.total_len() != batch.len() || header.last_offset_delta < 0 {
            return Err(RecordsError::Corrupt(
                "batch length does not match its buffer",
            ));
        }
        let header_bytes = batch
            .get(..BATCH_HEADER_LEN)
            .and_then(|h| <[u8; BATCH_HEADER_LEN]>::try_from(h).ok())
            .ok_or(RecordsError::Truncated)?;
        let mut records = batch;
        // `parse` checked the buffer holds the whole header, so this split is in bounds.
        let records = records.split_off(BATCH_HEADER_LEN);
        Ok(AppendBatch {
            header_bytes,
            header,
            records,
        })
    }

    /// The header as it stands, rewrites included.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The header's 61 bytes as they go to disk.
    pub fn header_bytes(&self) -> &[u8; BATCH_HEADER_LEN] {
        &self.header_bytes
    }

    /// Everything after the header, untouched.
    pub fn records(&self) -> &Bytes {
        &self.records
    }

    /// Bytes of the whole batch.
    pub fn len(&self) -> usize {
        BATCH_HEADER_LEN + self.records.len()
    }

    /// Never true: a batch has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn write(&mut self, at: usize, bytes: &[u8]) {
        if let Some(field) = self.header_bytes.get_mut(at..at + bytes.len()) {
            field.copy_from_slice(bytes);
        }
    }

    /// Stamps `baseOffset` and `partitionLeaderEpoch`; the CRC does not cover them.
    pub fn assign_offsets(&mut self, base_offset: i64, partition_leader_epoch: i32) {
        self.write(OFFSET_BASE_OFFSET, &base_offset.to_be_bytes());
        self.write(
            OFFSET_PARTITION_LEADER_EPOCH,
            &partition_leader_epoch.to_be_bytes(),
        );
        self.header.base_offset = base_offset;
        self.header.partition_leader_epoch = partition_leader_epoch;
    }

    /// The copy-free form of [`set_max_timestamp`]: the CRC is computed over the patched header
    /// and extended over the unchanged records, and skipped when nothing changes.
    pub fn set_max_timestamp(&mut self, timestamp_type: TimestampType, max_timestamp: i64) {
        let log_append = timestamp_type == TimestampType::LogAppendTime;
        if self.header.is_log_append_time() == log_append
            && self.header.max_timestamp == max_timestamp
        {
            return;
        }
        let attrs = if log_append {
            self.header.attributes | attributes::TIMESTAMP_TYPE_LOG_APPEND
        } else {
            self.header.attributes & !attributes::TIMESTAMP_TYPE_LOG_APPEND
        };
        self.write(OFFSET_ATTRIBUTES, &attrs.to_be_bytes());
        self.write(OFFSET_MAX_TIMESTAMP, &max_timestamp.to_be_bytes());
        let covered = self.header_bytes.get(CRC_COVERED_FROM..).unwrap_or(&[]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(covered), &self.records);
        self.write(OFFSET_CRC, &crc.to_be_bytes());
        self.header.attributes = attrs;
        self.header.max_timestamp = max_timestamp;
        self.header.crc = crc;
    }

    /// The copy-free form of [`set_log_append_time`].
    pub fn set_log_append_time(&mut self, now_ms: i64) {
        self.set_max_timestamp(TimestampType::LogAppendTime, now_ms);
    }
}

impl TryFrom<Bytes> for AppendBatch {
    type Error = RecordsError;

    fn try_from(batch: Bytes) -> Result<AppendBatch, RecordsError> {
        AppendBatch::new(batch)
    }
}

impl TryFrom<BytesMut> for AppendBatch {
    type Error = RecordsError;

    fn try_from(batch: BytesMut) -> Result<AppendBatch, RecordsError> {
        AppendBatch::new(batch.freeze())
    }
}
