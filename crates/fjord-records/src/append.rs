//! In-place rewrites the leader makes to a validated batch when appending it: offsets, leader
//! epoch and timestamps, and rebuilding it under the topic's `compression.type`.

use bytes::{BufMut, BytesMut};

use crate::compression::{compress, decompress, Compression};
use crate::header::{
    attributes, compute_crc, set_base_offset, set_partition_leader_epoch, BatchHeader,
    BATCH_HEADER_LEN, CRC_COVERED_FROM, OFFSET_ATTRIBUTES, OFFSET_BATCH_LENGTH, OFFSET_CRC,
    OFFSET_MAX_TIMESTAMP,
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
