//! Arbitrary bytes as a segment's `.log` and `.index` files: opening (and recovering) the log
//! and reading from it must return errors, never panic.
#![no_main]

use fjord_common::TopicPartition;
use fjord_storage::{Log, LogConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = (usize::from(split) * 8).min(rest.len());
    let (index, log_bytes) = rest.split_at(at);
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let base = "00000000000000000000";
    if std::fs::write(dir.path().join(format!("{base}.log")), log_bytes).is_err()
        || std::fs::write(dir.path().join(format!("{base}.index")), index).is_err()
    {
        return;
    }
    let config = LogConfig {
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let clean = split & 1 == 0;
    let tp = TopicPartition::new("fuzz", 0);
    if let Ok((log, _)) = Log::open(dir.path(), tp, None, config, 0, 0, clean, 0) {
        let end = log.log_end_offset();
        for offset in [0, end / 2, end] {
            if let Ok(info) = log.read(offset, 1 << 16, i64::MAX, true) {
                if let Some(slice) = info.records {
                    let _ = slice.read_to_bytes();
                }
            }
        }
        let _ = log.fetch_offset_by_timestamp(i64::from(split));
        let _ = log.fetch_offset_by_timestamp(-3);
    }
});
