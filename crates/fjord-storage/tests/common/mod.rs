//! Builds real v2 record batches for the storage tests.
#![allow(dead_code)]

use bytes::BytesMut;
use fjord_common::TopicPartition;
use fjord_records::header::compute_crc;
use fjord_storage::{Log, LogConfig, RecoveryStats};
use std::path::Path;

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// An uncompressed batch of `timestamps.len()` records with `value_len`-byte values.
pub fn batch(timestamps: &[i64], value_len: usize) -> BytesMut {
    let base_ts = timestamps.iter().copied().min().unwrap_or(0);
    let max_ts = timestamps.iter().copied().max().unwrap_or(-1);
    let mut records = Vec::new();
    for (i, ts) in timestamps.iter().enumerate() {
        let mut body = vec![0u8];
        varint(&mut body, ts - base_ts);
        varint(&mut body, i as i64);
        varint(&mut body, -1);
        varint(&mut body, value_len as i64);
        body.extend(std::iter::repeat_n(b'v', value_len));
        varint(&mut body, 0);
        varint(&mut records, body.len() as i64);
        records.extend(body);
    }
    let mut b = Vec::new();
    b.extend(0i64.to_be_bytes());
    b.extend(((49 + records.len()) as i32).to_be_bytes());
    b.extend(0i32.to_be_bytes());
    b.push(2);
    b.extend(0u32.to_be_bytes());
    b.extend(0i16.to_be_bytes());
    b.extend((timestamps.len() as i32 - 1).to_be_bytes());
    b.extend(base_ts.to_be_bytes());
    b.extend(max_ts.to_be_bytes());
    b.extend((-1i64).to_be_bytes());
    b.extend((-1i16).to_be_bytes());
    b.extend((-1i32).to_be_bytes());
    b.extend((timestamps.len() as i32).to_be_bytes());
    b.extend(records);
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    BytesMut::from(&b[..])
}

/// `b` as written by idempotent producer `producer_id` (epoch 0) starting at `sequence`.
pub fn idempotent(mut b: BytesMut, producer_id: i64, sequence: i32) -> BytesMut {
    b[43..51].copy_from_slice(&producer_id.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&sequence.to_be_bytes());
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// `b` with its producer epoch set to `epoch`.
pub fn at_epoch(mut b: BytesMut, epoch: i16) -> BytesMut {
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// `b` as written by transactional producer `producer_id` (epoch 0) starting at `sequence`.
pub fn transactional(b: BytesMut, producer_id: i64, sequence: i32) -> BytesMut {
    let mut b = idempotent(b, producer_id, sequence);
    let attributes = i16::from_be_bytes([b[21], b[22]]) | 0x10;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

pub fn tp() -> TopicPartition {
    TopicPartition::new("events", 0)
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

pub fn open(
    dir: &Path,
    config: LogConfig,
    clean: bool,
    recovery_point: i64,
) -> (Log, RecoveryStats) {
    Log::open(dir, tp(), None, config, recovery_point, 0, clean, 1_000).unwrap()
}

/// Reads everything from `from` and returns (base offset, last offset) of each batch.
pub fn batch_offsets(log: &Log, from: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset() {
        let info = log.read(offset, usize::MAX, i64::MAX, true).unwrap();
        let Some(slice) = info.records else { break };
        let bytes = slice.read_to_bytes().unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let h = fjord_records::BatchHeader::parse(&bytes[at..]).unwrap();
            assert_eq!(compute_crc(&bytes[at..at + h.total_len()]), h.crc);
            out.push((h.base_offset, h.last_offset()));
            at += h.total_len();
            offset = h.last_offset() + 1;
        }
    }
    out
}
