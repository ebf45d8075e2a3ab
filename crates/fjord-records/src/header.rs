//! The fixed 61-byte header of a magic v2 record batch.
//!
//! Layout (big-endian), as Kafka defines it:
//! ```text
//! 0  baseOffset           i64
//! 8  batchLength          i32   bytes after this field
//! 12 partitionLeaderEpoch i32
//! 16 magic                i8    (2)
//! 17 crc                  u32   CRC32C of bytes 21..end
//! 21 attributes           i16
//! 23 lastOffsetDelta      i32
//! 27 baseTimestamp        i64
//! 35 maxTimestamp         i64
//! 43 producerId           i64
//! 51 producerEpoch        i16
//! 53 baseSequence         i32
//! 57 recordCount          i32
//! 61 records...
//! ```
//! The CRC does not cover `baseOffset`, `batchLength` or `partitionLeaderEpoch`, which is what lets
//! the broker assign offsets and stamp the leader epoch without recomputing it.

use bytes::{BufMut, BytesMut};

use crate::RecordsError;

/// Size of the v2 batch header, up to and including `recordCount`.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batchLength` ends: `baseOffset` + `batchLength`. A batch occupies
/// `LOG_OVERHEAD + batchLength` bytes in a segment.
pub const LOG_OVERHEAD: usize = 12;
/// Byte offset of the first field covered by the CRC.
pub const CRC_COVERED_FROM: usize = 21;
pub const MAGIC_V2: i8 = 2;

pub const OFFSET_BASE_OFFSET: usize = 0;
pub const OFFSET_BATCH_LENGTH: usize = 8;
pub const OFFSET_PARTITION_LEADER_EPOCH: usize = 12;
pub const OFFSET_MAGIC: usize = 16;
pub const OFFSET_CRC: usize = 17;
pub const OFFSET_ATTRIBUTES: usize = 21;
pub const OFFSET_LAST_OFFSET_DELTA: usize = 23;
pub const OFFSET_BASE_TIMESTAMP: usize = 27;
pub const OFFSET_MAX_TIMESTAMP: usize = 35;
pub const OFFSET_PRODUCER_ID: usize = 43;
pub const OFFSET_PRODUCER_EPOCH: usize = 51;
pub const OFFSET_BASE_SEQUENCE: usize = 53;
pub const OFFSET_RECORD_COUNT: usize = 57;

/// Attribute bits of a v2 batch.
pub mod attributes {
    pub const COMPRESSION_MASK: i16 = 0x07;
    pub const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
    pub const TRANSACTIONAL: i16 = 0x10;
    pub const CONTROL: i16 = 0x20;
    pub const DELETE_HORIZON: i16 = 0x40;
}

/// A decoded copy of a batch header. Plain data: cheap to copy, owns nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

// Field readers for `parse`, which has checked the buffer holds a whole header; a short buffer
// reads as zeros rather than panicking.
fn be_bytes<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..at + N)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(be_bytes(b, at))
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(be_bytes(b, at))
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(be_bytes(b, at))
}

impl BatchHeader {
    /// Reads the header at the start of `buf`. Checks only that enough bytes are present for the
    /// header and that `batchLength` is plausible; see [`BatchHeader::total_len`] and
    /// [`crate::validate`] for the full checks.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, RecordsError> {
        if buf.len() < BATCH_HEADER_LEN {
            return Err(RecordsError::Truncated);
        }
        let header = BatchHeader {
            base_offset: be_i64(buf, OFFSET_BASE_OFFSET),
            batch_length: be_i32(buf, OFFSET_BATCH_LENGTH),
            partition_leader_epoch: be_i32(buf, OFFSET_PARTITION_LEADER_EPOCH),
            magic: be_bytes::<1>(buf, OFFSET_MAGIC)[0] as i8,
            crc: be_i32(buf, OFFSET_CRC) as u32,
            attributes: be_i16(buf, OFFSET_ATTRIBUTES),
            last_offset_delta: be_i32(buf, OFFSET_LAST_OFFSET_DELTA),
            base_timestamp: be_i64(buf, OFFSET_BASE_TIMESTAMP),
            max_timestamp: be_i64(buf, OFFSET_MAX_TIMESTAMP),
            producer_id: be_i64(buf, OFFSET_PRODUCER_ID),
            producer_epoch: be_i16(buf, OFFSET_PRODUCER_EPOCH),
            base_sequence: be_i32(buf, OFFSET_BASE_SEQUENCE),
            record_count: be_i32(buf, OFFSET_RECORD_COUNT),
        };
        if header.magic != MAGIC_V2 {
            return Err(RecordsError::UnsupportedMagic(header.magic));
        }
        if (header.batch_length as i64) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(RecordsError::InvalidBatchLength(header.batch_length));
        }
        Ok(header)
    }

    /// Bytes the whole batch occupies, header included.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// The batch's last offset; saturates rather than overflows for a hostile base offset (which
    /// offset checks then refuse).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }

    pub fn compression(&self) -> i16 {
        self.attributes & attributes::COMPRESSION_MASK
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & attributes::TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & attributes::CONTROL != 0
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & attributes::TIMESTAMP_TYPE_LOG_APPEND != 0
    }

    /// The sequence of the last record, wrapping at i32::MAX as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
}

impl BatchHeader {
    /// Encodes a whole batch: this header's fields with `records` (the records section as stored,
    /// compressed or not) after them. `batch_length` and `crc` are computed here; the other
    /// fields are written as they are.
    pub fn encode_with(&self, records: &[u8]) -> Result<BytesMut, RecordsError> {
        let batch_length = i32::try_from(BATCH_HEADER_LEN - LOG_OVERHEAD + records.len())
            .map_err(|_| RecordsError::InvalidRecord("batch too large"))?;
        let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + records.len());
        out.put_i64(self.base_offset);
        out.put_i32(batch_length);
        out.put_i32(self.partition_leader_epoch);
        out.put_i8(MAGIC_V2);
        out.put_u32(0); // CRC, filled in below
        out.put_i16(self.attributes);
        out.put_i32(self.last_offset_delta);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.record_count);
        out.put_slice(records);
        let crc = crc32c::crc32c(out.get(CRC_COVERED_FROM..).unwrap_or(&[]));
        if let Some(slot) = out.get_mut(OFFSET_CRC..OFFSET_CRC + 4) {
            slot.copy_from_slice(&crc.to_be_bytes());
        }
        Ok(out)
    }

    /// The delete horizon the log cleaner stamped on this batch (KIP-534): its tombstones may
    /// be removed once the clock passes it. Stored in `baseTimestamp`.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & attributes::DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
}

/// CRC32C over the covered part of a complete batch (`buf` holds exactly one batch).
///
/// # Panics
/// If `batch` is shorter than 21 bytes; call it only on a parsed batch.
#[allow(clippy::indexing_slicing)]
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[CRC_COVERED_FROM..])
}

/// Overwrites `baseOffset` in place. The CRC is unaffected.
///
/// # Panics
/// If `batch` is shorter than the field; [`crate::assign_offsets`] is the checked form.
#[allow(clippy::indexing_slicing)]
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[OFFSET_BASE_OFFSET..OFFSET_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Overwrites `partitionLeaderEpoch` in place. The CRC is unaffected.
///
/// # Panics
/// If `batch` is shorter than the field; [`crate::assign_offsets`] is the checked form.
#[allow(clippy::indexing_slicing)]
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[OFFSET_PARTITION_LEADER_EPOCH..OFFSET_PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}
