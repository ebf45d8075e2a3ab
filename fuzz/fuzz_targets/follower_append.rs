//! Arbitrary bytes as batches a follower (or a future log) appends with their own offsets:
//! refused with an error or appended, never a panic; whatever was appended reads back whole
//! and offsets only grow.
#![no_main]

use bytes::{Bytes, BytesMut};
use fjord_records::header::compute_crc;
use fjord_records::{BatchHeader, BATCH_HEADER_LEN};
use fjord_common::TopicPartition;
use fjord_storage::{Log, LogConfig};
use libfuzzer_sys::fuzz_target;

/// Rewrites the CRC of every whole batch the length fields delimit, so the fuzzer gets past the
/// CRC check to the rest of the append.
fn fix_crcs(buf: &mut [u8]) {
    let mut at = 0usize;
    while at + BATCH_HEADER_LEN <= buf.len() {
        let len = i32::from_be_bytes([buf[at + 8], buf[at + 9], buf[at + 10], buf[at + 11]]);
        let Some(total) = usize::try_from(len).ok().and_then(|l| l.checked_add(12)) else {
            return;
        };
        if total < BATCH_HEADER_LEN || at + total > buf.len() {
            return;
        }
        let crc = compute_crc(&buf[at..at + total]);
        buf[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        at += total;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut buf = BytesMut::from(rest);
    if flags & 1 == 1 {
        fix_crcs(&mut buf);
    }
    let records: Bytes = buf.freeze();
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let tp = TopicPartition::new("fuzz", 0);
    let Ok((mut log, _)) = Log::open(dir.path(), tp, None, config, 0, 0, true, 0) else {
        return;
    };
    // Twice: the second append must refuse what the first took (offsets never go back).
    for _ in 0..2 {
        let before = log.log_end_offset();
        if log.append_as_follower(&records, 0).is_ok() {
            assert!(log.log_end_offset() >= before);
        }
    }
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let info = log.read(offset, 1 << 16, i64::MAX, true).expect("appended data reads back");
        let bytes = info.records.expect("a batch").read_to_bytes().expect("read");
        let header = BatchHeader::parse(&bytes).expect("a whole batch");
        assert!(header.last_offset() >= offset);
        offset = header.last_offset() + 1;
    }
});
