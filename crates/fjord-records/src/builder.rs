//! Encoding a v2 batch from records: for tests, the CLI producer and control batches.

use bytes::BytesMut;

use crate::compression::{compress, Compression};
use crate::header::{attributes, BatchHeader, MAGIC_V2};
use crate::record::{encode_record, Header};
use crate::validate::NO_TIMESTAMP;
use crate::RecordsError;

/// Accumulates records and encodes them as one batch. Offset deltas are assigned 0, 1, ... in
/// append order; the first record's timestamp becomes `baseTimestamp`.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    level: Option<i32>,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    log_append_time: Option<i64>,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    record_count: i32,
    records: Vec<u8>,
}

impl BatchBuilder {
    /// A builder for a non-idempotent CreateTime batch at offset 0 with no leader epoch.
    pub fn new(compression: Compression) -> BatchBuilder {
        BatchBuilder {
            compression,
            level: None,
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            log_append_time: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            record_count: 0,
            records: Vec::new(),
        }
    }

    pub fn compression_level(mut self, level: Option<i32>) -> Self {
        self.level = level;
        self
    }

    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Producer id, epoch and the sequence of the first record (idempotent / transactional).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    /// Marks the batch LogAppendTime with `append_time_ms` as its maxTimestamp.
    pub fn log_append_time(mut self, append_time_ms: i64) -> Self {
        self.log_append_time = Some(append_time_ms);
        self
    }

    pub fn record_count(&self) -> i32 {
        self.record_count
    }

    /// Appends a record with the next offset delta. `timestamp` is absolute (ms).
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header],
    ) -> Result<(), RecordsError> {
        let base = *self.base_timestamp.get_or_insert(timestamp);
        let delta = timestamp
            .checked_sub(base)
            .ok_or(RecordsError::InvalidRecord("timestamp delta overflows"))?;
        let headers: Vec<(&[u8], Option<&[u8]>)> = headers
            .iter()
            .map(|h| (&h.key[..], h.value.as_deref()))
            .collect();
        encode_record(
            &mut self.records,
            0,
            delta,
            self.record_count,
            key,
            value,
            &headers,
        )?;
        self.record_count = self
            .record_count
            .checked_add(1)
            .ok_or(RecordsError::InvalidRecord("too many records"))?;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// Encodes the batch with a correct CRC. A batch needs at least one record.
    pub fn build(self) -> Result<BytesMut, RecordsError> {
        if self.record_count == 0 {
            return Err(RecordsError::InvalidRecord(
                "a batch needs at least one record",
            ));
        }
        let section = compress(self.compression, &self.records, self.level)?;
        let mut attrs = self.compression.id();
        if self.transactional {
            attrs |= attributes::TRANSACTIONAL;
        }
        if self.control {
            attrs |= attributes::CONTROL;
        }
        let max_timestamp = match self.log_append_time {
            Some(t) => {
                attrs |= attributes::TIMESTAMP_TYPE_LOG_APPEND;
                t
            }
            None => self.max_timestamp,
        };
        BatchHeader {
            base_offset: self.base_offset,
            batch_length: 0,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC_V2,
            crc: 0,
            attributes: attrs,
            last_offset_delta: self.record_count - 1,
            base_timestamp: self.base_timestamp.unwrap_or(NO_TIMESTAMP),
            max_timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            record_count: self.record_count,
        }
        .encode_with(&section)
    }
}
