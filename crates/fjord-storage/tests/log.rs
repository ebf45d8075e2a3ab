mod common;

use common::*;
use fjord_storage::{LogConfig, StorageError};
use std::fs::OpenOptions;

fn seg_files(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn append_and_read_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    let mut expected = Vec::new();
    for i in 0..60 {
        let n = 1 + (i % 4) as usize;
        let ts: Vec<i64> = (0..n).map(|j| 10_000 + i * 10 + j as i64).collect();
        let info = log
            .append_as_leader(vec![batch(&ts, 40)], 3, 5_000)
            .unwrap();
        assert_eq!(info.first_offset, log.log_end_offset() - n as i64);
        assert_eq!(info.record_count, n as i64);
        expected.push((info.first_offset, info.last_offset));
    }
    assert!(log.num_segments() > 3, "segments: {}", log.num_segments());
    assert_eq!(seg_files(dir.path(), "log").len(), log.num_segments());
    assert_eq!(batch_offsets(&log, 0), expected);
    // Each read stays within one segment.
    let first = log
        .read(0, usize::MAX, i64::MAX, false)
        .unwrap()
        .records
        .unwrap();
    assert!(u64::from(first.len()) <= 2048);
    // max_offset is exclusive and cuts at batch boundaries.
    let (b, l) = expected[2];
    let slice = log.read(0, usize::MAX, l, false).unwrap().records.unwrap();
    let bytes = slice.read_to_bytes().unwrap();
    let h = fjord_records::BatchHeader::parse(&bytes).unwrap();
    assert_eq!(h.base_offset, 0);
    assert_eq!(batch_offsets_in(&bytes).last().unwrap().1, b - 1);
    // max_bytes limits to whole batches; min_one_batch forces the first one through.
    assert!(log.read(0, 10, i64::MAX, false).unwrap().records.is_none());
    let one = log.read(0, 10, i64::MAX, true).unwrap().records.unwrap();
    assert_eq!(batch_offsets_in(&one.read_to_bytes().unwrap()).len(), 1);
    // At the log end: empty; beyond it: out of range.
    let end = log.log_end_offset();
    assert!(log
        .read(end, 1000, i64::MAX, true)
        .unwrap()
        .records
        .is_none());
    let err = log.read(end + 1, 1000, i64::MAX, true).unwrap_err();
    assert!(matches!(err, StorageError::OffsetOutOfRange { .. }));
    assert_eq!(err.kafka_error_code(), 1);
    assert_eq!(log.latest_epoch(), Some(3));
    assert_eq!(log.end_offset_for_epoch(3), (3, end));
}

fn batch_offsets_in(bytes: &[u8]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = fjord_records::BatchHeader::parse(&bytes[at..]).unwrap();
        out.push((h.base_offset, h.last_offset()));
        at += h.total_len();
    }
    out
}

#[test]
fn read_inside_a_batch_returns_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    log.append_as_leader(vec![batch(&[1, 2, 3, 4, 5], 10)], 0, 0)
        .unwrap();
    log.append_as_leader(vec![batch(&[6, 7, 8], 10)], 0, 0)
        .unwrap();
    for offset in 0..5 {
        let bytes = log
            .read(offset, 1 << 20, i64::MAX, false)
            .unwrap()
            .records
            .unwrap();
        assert_eq!(
            batch_offsets_in(&bytes.read_to_bytes().unwrap()),
            vec![(0, 4), (5, 7)]
        );
    }
    let bytes = log
        .read(6, 1 << 20, i64::MAX, false)
        .unwrap()
        .records
        .unwrap();
    assert_eq!(
        batch_offsets_in(&bytes.read_to_bytes().unwrap()),
        vec![(5, 7)]
    );
    // The high watermark inside the second batch hides it.
    let bytes = log.read(0, 1 << 20, 6, false).unwrap().records.unwrap();
    assert_eq!(
        batch_offsets_in(&bytes.read_to_bytes().unwrap()),
        vec![(0, 4)]
    );
}

#[test]
fn multiple_batches_in_one_append_get_consecutive_offsets_and_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    let info = log
        .append_as_leader(
            vec![batch(&[5, 9], 1), batch(&[7], 1), batch(&[8, 8, 8], 1)],
            7,
            0,
        )
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 5));
    assert_eq!((info.max_timestamp, info.offset_of_max_timestamp), (9, 1));
    let bytes = log
        .read(0, 1 << 20, i64::MAX, false)
        .unwrap()
        .records
        .unwrap()
        .read_to_bytes()
        .unwrap();
    let h = fjord_records::BatchHeader::parse(&bytes[..]).unwrap();
    assert_eq!(h.partition_leader_epoch, 7);
    assert_eq!(batch_offsets_in(&bytes), vec![(0, 1), (2, 2), (3, 5)]);
    // A batch whose length disagrees with its buffer is refused.
    let mut bad = batch(&[1], 1);
    bad.extend_from_slice(&[0]);
    assert!(log.append_as_leader(vec![bad], 7, 0).is_err());
    // A batch larger than a segment is refused with MESSAGE_TOO_LARGE.
    let (mut tiny, _) = open(
        &dir.path().join("t"),
        LogConfig {
            segment_bytes: 100,
            ..LogConfig::default()
        },
        true,
        0,
    );
    let err = tiny
        .append_as_leader(vec![batch(&[1], 200)], 0, 0)
        .unwrap_err();
    assert_eq!(err.kafka_error_code(), 10);
}

#[test]
fn lookups_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    // Batch i holds offsets 3i..3i+2 with timestamps 1000+100i + {0, 10, 20}.
    for i in 0..40i64 {
        let t = 1000 + 100 * i;
        log.append_as_leader(vec![batch(&[t, t + 10, t + 20], 30)], 1, 0)
            .unwrap();
    }
    assert!(log.num_segments() > 2);
    let at = |ts| {
        log.fetch_offset_by_timestamp(ts)
            .unwrap()
            .map(|r| (r.timestamp, r.offset))
    };
    assert_eq!(at(0), Some((1000, 0)));
    assert_eq!(at(1000), Some((1000, 0)));
    assert_eq!(at(1001), Some((1010, 1)));
    assert_eq!(at(1015), Some((1020, 2)));
    assert_eq!(at(1021), Some((1100, 3)));
    assert_eq!(at(2510), Some((2510, 46)));
    assert_eq!(at(1000 + 3900 + 20), Some((4920, 119)));
    assert_eq!(at(4921), None);
    assert_eq!(at(-1), Some((-1, 120)));
    assert_eq!(at(-2), Some((-1, 0)));
    assert_eq!(at(-3), Some((4920, 119)));
    assert_eq!(
        log.fetch_offset_by_timestamp(-2)
            .unwrap()
            .unwrap()
            .leader_epoch,
        Some(1)
    );
    // Every timestamp agrees with a linear answer.
    for ts in (900..5000).step_by(7) {
        let expected = (0..40i64)
            .flat_map(|i| (0..3).map(move |j| (1000 + 100 * i + 10 * j, 3 * i + j)))
            .find(|(t, _)| *t >= ts);
        assert_eq!(at(ts), expected, "timestamp {ts}");
    }
}

/// Writes `n` batches, returns the log dir and the byte boundaries of the last segment's
/// batches.
fn write_batches(dir: &std::path::Path, n: i64) -> Vec<u64> {
    let (mut log, _) = open(dir, small_config(), true, 0);
    for i in 0..n {
        log.append_as_leader(vec![batch(&[i, i + 1], 20 + (i as usize % 5) * 7)], 0, 0)
            .unwrap();
    }
    log.close().unwrap();
    let last = seg_files(dir, "log").pop().unwrap();
    let bytes = std::fs::read(last).unwrap();
    let mut bounds = vec![0];
    let mut at = 0;
    while at < bytes.len() {
        at += fjord_records::BatchHeader::parse(&bytes[at..])
            .unwrap()
            .total_len();
        bounds.push(at as u64);
    }
    bounds
}

#[test]
fn recovery_truncates_torn_tail_at_every_byte() {
    let template = tempfile::tempdir().unwrap();
    let bounds = write_batches(template.path(), 25);
    assert!(bounds.len() >= 4);
    let full_len = *bounds.last().unwrap();
    let cut_from = bounds[bounds.len() - 4];
    let last_segment = seg_files(template.path(), "log").pop().unwrap();
    let name = last_segment.file_name().unwrap().to_owned();
    let base: i64 = name.to_str().unwrap()[..20].parse().unwrap();
    let segments_before = seg_files(template.path(), "log").len();
    for cut in cut_from..full_len {
        let dir = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(template.path()).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
        OpenOptions::new()
            .write(true)
            .open(dir.path().join(&name))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (mut log, stats) = open(dir.path(), small_config(), false, 0);
        let complete = bounds.iter().filter(|b| **b <= cut).count() - 1;
        // Each batch holds two records.
        let expected_end = base + 2 * complete as i64;
        assert_eq!(log.log_end_offset(), expected_end, "cut at {cut}");
        assert!(stats.needed_recovery);
        assert_eq!(stats.bytes_truncated, cut - bounds[complete]);
        assert_eq!(seg_files(dir.path(), "log").len(), segments_before);
        let offsets = batch_offsets(&log, 0);
        assert_eq!(offsets.last().map_or(0, |o| o.1 + 1), expected_end);
        let info = log.append_as_leader(vec![batch(&[99], 5)], 0, 0).unwrap();
        assert_eq!(info.first_offset, expected_end);
        assert_eq!(
            batch_offsets(&log, expected_end),
            vec![(expected_end, expected_end)]
        );
    }
}

#[test]
fn garbage_after_valid_data_is_cut_and_later_segments_dropped() {
    let dir = tempfile::tempdir().unwrap();
    write_batches(dir.path(), 60);
    let logs = seg_files(dir.path(), "log");
    assert!(logs.len() >= 3);
    // Corrupt one byte inside the CRC-covered part of the second segment's third batch.
    let victim = &logs[1];
    let mut bytes = std::fs::read(victim).unwrap();
    let mut at = 0;
    for _ in 0..2 {
        at += fjord_records::BatchHeader::parse(&bytes[at..])
            .unwrap()
            .total_len();
    }
    bytes[at + 70] ^= 0xff;
    std::fs::write(victim, &bytes).unwrap();
    // And plain garbage at the end of the last one.
    let mut last = OpenOptions::new()
        .append(true)
        .open(logs.last().unwrap())
        .unwrap();
    std::io::Write::write_all(&mut last, &[0xab; 300]).unwrap();
    let (log, stats) = open(dir.path(), small_config(), false, 0);
    let base: i64 = victim.file_name().unwrap().to_str().unwrap()[..20]
        .parse()
        .unwrap();
    assert_eq!(log.log_end_offset(), base + 4);
    assert_eq!(log.num_segments(), 2);
    assert!(stats.segments_deleted >= 1);
    assert_eq!(batch_offsets(&log, 0).last().unwrap().1, base + 3);
}

#[test]
fn garbage_only_appended_to_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    log.append_as_leader(vec![batch(&[1, 2], 10)], 0, 0)
        .unwrap();
    log.close().unwrap();
    let path = seg_files(dir.path(), "log").pop().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    // A plausible header claiming a huge batch, then random bytes.
    let mut junk = batch(&[3], 10).to_vec();
    junk[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    std::io::Write::write_all(&mut f, &junk).unwrap();
    let (log, stats) = open(dir.path(), LogConfig::default(), false, 0);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(stats.bytes_truncated, junk.len() as u64);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn missing_or_corrupt_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let (mut log, _) = open(dir.path(), config.clone(), true, 0);
    for i in 0..50 {
        log.append_as_leader(vec![batch(&[i * 10, i * 10 + 5], 30)], 0, 0)
            .unwrap();
    }
    log.close().unwrap();
    let index = seg_files(dir.path(), "index").pop().unwrap();
    let timeindex = seg_files(dir.path(), "timeindex").pop().unwrap();
    let good_index = std::fs::read(&index).unwrap();
    let good_time = std::fs::read(&timeindex).unwrap();
    assert!(good_index.len() >= 8 * 10 && good_index.len().is_multiple_of(8));
    assert!(good_time.len() >= 12 * 10 && good_time.len().is_multiple_of(12));
    for damage in 0..4 {
        match damage {
            0 => std::fs::remove_file(&index).unwrap(),
            1 => std::fs::remove_file(&timeindex).unwrap(),
            2 => std::fs::write(&index, [0x55u8; 64]).unwrap(),
            _ => {
                let mut t = good_time.clone();
                t.truncate(t.len() - 5);
                std::fs::write(&timeindex, t).unwrap();
            }
        }
        // Even after a clean shutdown, damaged indexes are detected and rebuilt.
        let (log, stats) = open(dir.path(), config.clone(), true, 0);
        assert!(stats.needed_recovery, "damage {damage}");
        assert_eq!(log.log_end_offset(), 100);
        assert_eq!(
            std::fs::read(&index).unwrap(),
            good_index,
            "damage {damage}"
        );
        assert_eq!(
            std::fs::read(&timeindex).unwrap(),
            good_time,
            "damage {damage}"
        );
        assert_eq!(
            log.fetch_offset_by_timestamp(255).unwrap().unwrap().offset,
            51
        );
        assert_eq!(
            batch_offsets(&log, 77),
            vec![(76, 77)]
                .into_iter()
                .chain((39..50).map(|i| (2 * i, 2 * i + 1)))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn clean_shutdown_skips_recovery() {
    let dir = tempfile::tempdir().unwrap();
    write_batches(dir.path(), 20);
    let (log, stats) = open(dir.path(), small_config(), true, 0);
    assert!(!stats.needed_recovery);
    assert_eq!(stats.segments_recovered, 0);
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(log.recovery_point(), 40);
    drop(log);
    // Unclean with the recovery point at the end: only the active segment is checked.
    let (_, stats) = open(dir.path(), small_config(), false, 40);
    assert_eq!(stats.segments_recovered, 1);
    let (_, stats) = open(dir.path(), small_config(), false, 0);
    assert_eq!(stats.segments_recovered, seg_files(dir.path(), "log").len());
}

#[test]
fn retention_by_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: 4096,
        retention_ms: -1,
        file_delete_delay_ms: 0,
        ..small_config()
    };
    let (mut log, _) = open(dir.path(), config, true, 0);
    for i in 0..60 {
        log.append_as_leader(vec![batch(&[i], 100)], 0, 0).unwrap();
    }
    let segments = log.num_segments();
    assert!(segments > 4);
    // Nothing below the high watermark yet: nothing may go.
    assert_eq!(log.delete_old_segments(0).unwrap(), 0);
    log.raise_high_watermark(log.log_end_offset());
    let deleted = log.delete_old_segments(0).unwrap();
    assert!(deleted > 0);
    assert!(log.size_in_bytes() <= 4096 + 2048);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    assert_eq!(seg_files(dir.path(), "log").len(), log.num_segments());
    assert!(matches!(
        log.read(0, 100, i64::MAX, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        batch_offsets(&log, log.log_start_offset())
            .last()
            .unwrap()
            .1,
        59
    );
    log.close().unwrap();

    // Time retention: batch timestamps are tiny, so everything but the active segment expires.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 1000,
        file_delete_delay_ms: 50,
        ..small_config()
    };
    let (mut log, _) = open(dir.path(), config, true, 0);
    for i in 0..60 {
        log.append_as_leader(vec![batch(&[i], 100)], 0, 0).unwrap();
    }
    log.raise_high_watermark(59);
    assert_eq!(log.delete_old_segments(500).unwrap(), 0);
    let n = log.num_segments();
    // The active segment holds an offset above the high watermark: it stays.
    assert_eq!(log.delete_old_segments(5_000).unwrap(), n - 1);
    assert_eq!(log.num_segments(), 1);
    // Deleted files linger for file.delete.delay.ms.
    assert!(!seg_files(dir.path(), "deleted").is_empty());
    log.delete_old_segments(5_100).unwrap();
    assert!(seg_files(dir.path(), "deleted").is_empty());
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    // Idle and wholly below the high watermark, the expired active segment goes too (as in
    // Kafka): an empty segment is rolled at the log end, where the log now starts.
    log.raise_high_watermark(60);
    assert_eq!(log.delete_old_segments(5_200).unwrap(), 1);
    assert_eq!(log.segment_base_offsets(), vec![60]);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (60, 60));
    assert_eq!(
        log.delete_old_segments(9_000).unwrap(),
        0,
        "an empty active segment stays"
    );
    assert_eq!(
        log.append_as_leader(vec![batch(&[60], 100)], 0, 9_000)
            .unwrap()
            .first_offset,
        60
    );
}

#[test]
fn retention_never_deletes_a_compact_only_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 1000,
        retention_bytes: 1,
        cleanup_policy_delete: false,
        file_delete_delay_ms: 0,
        ..small_config()
    };
    let (mut log, _) = open(dir.path(), config.clone(), true, 0);
    for i in 0..60 {
        log.append_as_leader(vec![batch(&[i], 100)], 0, 0).unwrap();
    }
    log.raise_high_watermark(60);
    let segments = log.num_segments();
    assert!(segments > 4);
    assert_eq!(log.delete_old_segments(i64::MAX / 2).unwrap(), 0);
    assert_eq!(log.num_segments(), segments);
    assert_eq!(log.log_start_offset(), 0);
    // compact,delete: retention applies.
    log.set_config(LogConfig {
        cleanup_policy_delete: true,
        ..config
    });
    assert_eq!(log.delete_old_segments(i64::MAX / 2).unwrap(), segments);
    assert_eq!(log.log_start_offset(), 60);
}

#[test]
fn truncation_and_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    for i in 0..30 {
        log.append_as_leader(vec![batch(&[i, i], 50)], (i / 10) as i32, 0)
            .unwrap();
    }
    assert_eq!(log.end_offset_for_epoch(0), (0, 20));
    assert_eq!(log.end_offset_for_epoch(1), (1, 40));
    log.raise_high_watermark(50);
    log.truncate_to(30).unwrap();
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(log.high_watermark(), 30);
    assert_eq!(log.latest_epoch(), Some(1));
    assert_eq!(log.end_offset_for_epoch(1), (1, 30));
    assert_eq!(batch_offsets(&log, 0).last().unwrap().1, 29);
    let info = log.append_as_leader(vec![batch(&[1], 1)], 5, 0).unwrap();
    assert_eq!(info.first_offset, 30);
    log.close().unwrap();
    let (log, _) = open(dir.path(), small_config(), true, 0);
    assert_eq!(log.latest_epoch(), Some(5));
    assert_eq!(log.end_offset_for_epoch(1), (1, 30));
    assert_eq!(log.log_end_offset(), 31);
}

#[test]
fn flush_policy_and_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_interval_messages: Some(5),
        flush_interval_ms: Some(1000),
        ..LogConfig::default()
    };
    let (mut log, _) = open(dir.path(), config, true, 0);
    assert!(!log.needs_flush(10_000));
    log.append_as_leader(vec![batch(&[1, 2], 1)], 0, 100)
        .unwrap();
    assert!(!log.needs_flush(500));
    assert!(log.needs_flush(1100));
    log.append_as_leader(vec![batch(&[1, 2, 3], 1)], 0, 200)
        .unwrap();
    assert!(log.needs_flush(201));
    let ticket = log.prepare_flush();
    assert_eq!(ticket.up_to_offset(), 5);
    ticket.sync().unwrap();
    assert_eq!(log.complete_flush(&ticket), 5);
    assert_eq!(log.recovery_point(), 5);
    assert!(!log.needs_flush(1_000_000));
}

#[test]
fn a_roll_during_a_flush_keeps_the_recovery_point_in_the_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    log.append_as_leader(vec![batch(&[1, 2, 3], 1)], 0, 100)
        .unwrap();
    // Taken while segment 0 is active: it syncs segment 0's data but not its indexes.
    let ticket = log.prepare_flush();
    log.roll(200).unwrap();
    log.append_as_leader(vec![batch(&[4], 1)], 0, 300).unwrap();
    ticket.sync().unwrap();
    // Offsets 0..3 are durable (the high watermark may move there) ...
    assert_eq!(log.complete_flush(&ticket), 3);
    // ... but a crash must still recover segment 0, whose indexes were never synced.
    assert_eq!(log.recovery_point(), 2);
    assert!(log.recovery_point() <= log.log_end_offset());
    // The next flush covers segment 0 as a sealed segment and reaches the log end.
    let ticket = log.prepare_flush();
    ticket.sync().unwrap();
    assert_eq!(log.complete_flush(&ticket), 4);
    assert_eq!(log.recovery_point(), 4);
}

#[test]
fn a_clean_restart_rewrites_no_leader_epoch_checkpoint() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("leader-epoch-checkpoint");
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    log.become_leader(3).unwrap();
    let written = std::fs::metadata(&checkpoint).unwrap().ino();
    log.close().unwrap();
    // The empty log's entry (3, 0) starts at its end: loading drops it, becoming leader at the
    // same epoch restores it, and the file (replaced by a rename whenever written) stays.
    let (mut log, _) = open(dir.path(), LogConfig::default(), true, 0);
    log.become_leader(3).unwrap();
    assert_eq!(std::fs::metadata(&checkpoint).unwrap().ino(), written);
    assert_eq!(log.end_offset_for_epoch(3), (3, 0));
    // A new epoch is written.
    log.become_leader(4).unwrap();
    assert_ne!(std::fs::metadata(&checkpoint).unwrap().ino(), written);
    log.close().unwrap();
}

#[test]
fn a_truncated_batch_is_not_a_duplicate_when_its_producer_retries_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    log.append_as_leader(vec![idempotent(batch(&[1, 2], 5), 42, 0)], 0, 0)
        .unwrap();
    // A snapshot at a roll, then a batch the log loses again (a follower's divergent tail).
    log.roll(0).unwrap();
    log.append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 0, 0)
        .unwrap();
    log.truncate_to(2).unwrap();
    let retried = log
        .append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 1, 0)
        .unwrap();
    assert!(
        !retried.duplicate,
        "the retry is appended, not answered from memory"
    );
    assert_eq!(retried.first_offset, 2);
    let again = log
        .append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 1, 0)
        .unwrap();
    assert!(again.duplicate);
}

#[test]
fn a_roll_snapshot_torn_by_a_crash_before_its_flush_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    log.append_as_leader(vec![idempotent(batch(&[1, 2], 5), 42, 0)], 0, 0)
        .unwrap();
    // The roll writes its producer snapshot without an fsync; a crash before the next flush
    // may leave it torn.
    log.roll(0).unwrap();
    let snapshot = dir.path().join(format!("{:020}.snapshot", 2));
    let written = std::fs::read(&snapshot).unwrap();
    assert!(written.len() > 8, "the roll wrote its snapshot");
    log.append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 0, 0)
        .unwrap();
    drop(log);
    std::fs::write(&snapshot, &written[..written.len() / 2]).unwrap();
    let (mut log, _) = open(dir.path(), small_config(), false, 0);
    assert!(!snapshot.exists(), "the torn snapshot is deleted");
    let retried = log
        .append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 0, 0)
        .unwrap();
    assert!(
        retried.duplicate,
        "the producer's state rebuilt from the log"
    );
    let next = log
        .append_as_leader(vec![idempotent(batch(&[4], 5), 42, 3)], 0, 0)
        .unwrap();
    assert_eq!(next.first_offset, 3);
    log.close().unwrap();
}

#[test]
fn producer_retries_are_deduplicated_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    let first = log
        .append_as_leader(vec![idempotent(batch(&[1, 2], 5), 42, 0)], 0, 0)
        .unwrap();
    let again = log
        .append_as_leader(vec![idempotent(batch(&[1, 2], 5), 42, 0)], 0, 0)
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.first_offset, again.last_offset),
        (first.first_offset, first.last_offset)
    );
    assert_eq!(log.log_end_offset(), 2);
    let gap = log
        .append_as_leader(vec![idempotent(batch(&[3], 5), 42, 5)], 0, 0)
        .unwrap_err();
    assert_eq!(gap.kafka_error_code(), 45);
    log.append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 0, 0)
        .unwrap();
    drop(log);
    // Unclean restart without any snapshot: state is rebuilt from the log.
    let (mut log, _) = open(dir.path(), small_config(), false, 0);
    let dup = log
        .append_as_leader(vec![idempotent(batch(&[3], 5), 42, 2)], 0, 0)
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.first_offset, 2);
    log.close().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    let next = log
        .append_as_leader(vec![idempotent(batch(&[4], 5), 42, 3)], 0, 0)
        .unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, 3);
}

#[test]
fn open_transactions_hold_back_the_last_stable_offset_until_their_markers() {
    use fjord_records::control::EndTxnMarker;
    let commit = EndTxnMarker {
        commit: true,
        coordinator_epoch: 0,
    };
    let abort = EndTxnMarker {
        commit: false,
        ..commit
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    log.append_as_leader(vec![batch(&[1, 2], 5)], 0, 0).unwrap();
    log.append_as_leader(vec![transactional(batch(&[3], 5), 7, 0)], 0, 0)
        .unwrap();
    log.append_as_leader(vec![transactional(batch(&[4], 5), 8, 0)], 0, 0)
        .unwrap();
    log.raise_high_watermark(log.log_end_offset());
    assert_eq!(
        log.last_stable_offset(),
        2,
        "producer 7's transaction is open"
    );
    // A producer may not write outside its open transaction.
    let outside = log
        .append_as_leader(vec![idempotent(batch(&[5], 5), 7, 1)], 0, 0)
        .unwrap_err();
    assert_eq!(outside.kafka_error_code(), 48);

    let (info, completed) = log.append_marker(7, 0, commit, false, 0, 10).unwrap();
    assert_eq!(info.first_offset, 4);
    let completed = completed.unwrap();
    assert_eq!(
        (
            completed.first_offset,
            completed.last_offset,
            completed.aborted
        ),
        (2, 4, false)
    );
    assert_eq!(
        completed.last_stable_offset, 3,
        "producer 8's is still open"
    );
    log.raise_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), 3);

    // Rebuilt from the log alone (no snapshot), the markers are read back.
    drop(log);
    let (mut log, _) = open(dir.path(), small_config(), false, 0);
    log.restore_high_watermark(5);
    assert_eq!(log.last_stable_offset(), 3);
    // Fenced markers: an older coordinator, an older producer epoch.
    log.append_marker(8, 0, abort, false, 0, 11).unwrap();
    let old_coordinator = log
        .append_marker(
            8,
            0,
            EndTxnMarker {
                coordinator_epoch: -1,
                ..abort
            },
            false,
            0,
            12,
        )
        .unwrap_err();
    assert_eq!(old_coordinator.kafka_error_code(), 52);
    log.append_marker(8, 2, abort, false, 0, 12).unwrap();
    let old_epoch = log.append_marker(8, 1, abort, false, 0, 13).unwrap_err();
    assert_eq!(old_epoch.kafka_error_code(), 47);
    log.raise_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), log.high_watermark());

    // An open transaction survives a snapshot and a clean restart.
    log.append_as_leader(vec![transactional(batch(&[6], 5), 9, 0)], 0, 0)
        .unwrap();
    let open_at = log.log_end_offset() - 1;
    log.roll(20).unwrap();
    log.append_as_leader(vec![batch(&[7], 5)], 0, 0).unwrap();
    log.raise_high_watermark(log.log_end_offset());
    log.close().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    log.restore_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), open_at);
}

#[test]
fn a_follower_copying_markers_ends_the_same_transactions() {
    use fjord_records::control::EndTxnMarker;
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let (mut leader, _) = open(leader_dir.path(), config.clone(), true, 0);
    let (mut follower, _) = open(follower_dir.path(), config, true, 0);
    leader
        .append_as_leader(vec![transactional(batch(&[1], 5), 7, 0)], 0, 0)
        .unwrap();
    leader
        .append_as_leader(vec![transactional(batch(&[2], 5), 8, 0)], 0, 0)
        .unwrap();
    let marker = EndTxnMarker {
        commit: false,
        coordinator_epoch: 3,
    };
    leader.append_marker(7, 0, marker, false, 0, 5).unwrap();
    let end = leader.log_end_offset();
    let slice = leader.read(0, 1 << 20, end, true).unwrap().records.unwrap();
    follower
        .append_as_follower(&slice.read_to_bytes().unwrap(), 5)
        .unwrap();
    follower.raise_high_watermark(end);
    leader.raise_high_watermark(end);
    assert_eq!(leader.last_stable_offset(), 1, "producer 8's is open");
    assert_eq!(follower.last_stable_offset(), 1);
    // The follower knows the coordinator epoch the marker carried.
    let stale = follower
        .append_marker(
            7,
            0,
            EndTxnMarker {
                coordinator_epoch: 2,
                ..marker
            },
            false,
            0,
            6,
        )
        .unwrap_err();
    assert_eq!(stale.kafka_error_code(), 52);
}

#[test]
fn aborted_transactions_are_indexed_once_through_restarts_and_truncation() {
    use fjord_records::control::EndTxnMarker;
    let abort = EndTxnMarker {
        commit: false,
        coordinator_epoch: 0,
    };
    let commit = EndTxnMarker {
        commit: true,
        ..abort
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    log.append_as_leader(vec![transactional(batch(&[1, 2], 5), 7, 0)], 0, 0)
        .unwrap();
    log.append_as_leader(vec![transactional(batch(&[3], 5), 8, 0)], 0, 0)
        .unwrap();
    log.append_marker(7, 0, abort, false, 0, 4).unwrap(); // offset 3
    log.append_marker(8, 0, commit, false, 0, 4).unwrap(); // offset 4, committed: not indexed
    log.append_as_leader(vec![transactional(batch(&[5], 5), 9, 0)], 0, 0)
        .unwrap(); // offset 5
    log.append_marker(9, 0, abort, false, 0, 6).unwrap(); // offset 6
    let aborted = log.aborted_txns(0, 7);
    assert_eq!(
        aborted
            .iter()
            .map(|t| (t.producer_id, t.first_offset, t.last_offset))
            .collect::<Vec<_>>(),
        vec![(7, 0, 3), (9, 5, 6)]
    );
    assert_eq!(
        aborted[0].last_stable_offset, 2,
        "producer 8's was still open"
    );
    // Only those overlapping the fetched range.
    assert_eq!(log.aborted_txns(4, 7).len(), 1);
    assert_eq!(log.aborted_txns(0, 1).len(), 1);
    assert!(log.aborted_txns(7, 8).is_empty());
    let txn_files = seg_files(dir.path(), "txnindex");
    assert_eq!(txn_files.len(), 1);
    assert_eq!(std::fs::metadata(&txn_files[0]).unwrap().len(), 2 * 34);

    // Rebuilt by an unclean restart without a snapshot: the same entries, not twice.
    drop(log);
    let (mut log, _) = open(dir.path(), small_config(), false, 0);
    assert_eq!(log.aborted_txns(0, 7), aborted);
    assert_eq!(std::fs::metadata(&txn_files[0]).unwrap().len(), 2 * 34);
    // Cut below the second marker: its entry goes with it.
    log.truncate_to(6).unwrap();
    assert_eq!(log.aborted_txns(0, 7), aborted[..1]);
    log.close().unwrap();
    let (log, _) = open(dir.path(), small_config(), true, 0);
    assert_eq!(log.aborted_txns(0, 7), aborted[..1]);
}

#[test]
fn coordinator_batches_check_producer_epochs_but_not_sequences() {
    use fjord_records::control::EndTxnMarker;
    use fjord_records::AppendBatch;
    let commit = EndTxnMarker {
        commit: true,
        coordinator_epoch: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    // A group coordinator's offset commits in producer 7's transaction carry no sequence.
    let offsets = || AppendBatch::new(transactional(batch(&[1], 5), 7, -1).freeze()).unwrap();
    log.append_as_coordinator(offsets(), 0, 0).unwrap();
    log.append_as_coordinator(offsets(), 0, 0).unwrap();
    assert!(!log.needs_transaction_verification(7, 0));
    assert!(
        log.needs_transaction_verification(7, 1),
        "open at epoch 0, not at the next one"
    );
    // The same batch from a client would be out of sequence.
    let client = log.append_as_leader(vec![offsets()], 0, 0).unwrap_err();
    assert_eq!(client.kafka_error_code(), 45);
    // Once the producer's epoch moved on (its next transaction's marker), the old one is fenced.
    log.append_marker(7, 1, commit, false, 0, 10).unwrap();
    assert_eq!(log.producer_epoch(7), Some(1));
    assert!(log.needs_transaction_verification(7, 1));
    assert!(
        !log.needs_transaction_verification(7, 0),
        "an older epoch is refused by the append"
    );
    let fenced = log.append_as_coordinator(offsets(), 0, 0).unwrap_err();
    assert_eq!(fenced.kafka_error_code(), 47);
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn a_verification_guard_holds_until_a_marker_for_its_producer() {
    use fjord_records::control::EndTxnMarker;
    let abort = EndTxnMarker {
        commit: false,
        coordinator_epoch: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    // Producer 7 has no transaction open here: a batch needs a guard still held.
    assert!(!log.transaction_verified(7, 0, None));
    let guard = log.start_transaction_verification(7, 0, false, 0);
    assert_eq!(
        log.start_transaction_verification(7, 0, false, 0),
        guard,
        "held: the same"
    );
    assert_ne!(
        log.start_transaction_verification(8, 0, false, 0),
        guard,
        "another producer's"
    );
    assert!(log.transaction_verified(7, 0, Some(guard)));
    // The transaction ends (the coordinator aborted it) before the batch is appended: the
    // guard is gone, and the batch verified before cannot open a new transaction.
    log.append_marker(7, 0, abort, false, 0, 10).unwrap();
    assert!(!log.transaction_verified(7, 0, Some(guard)));
    let other = log.start_transaction_verification(8, 0, false, 0);
    assert!(
        log.transaction_verified(8, 0, Some(other)),
        "another producer's guard stays"
    );
    // Verified again, under a new guard; once its first batch is in, later ones need none.
    let again = log.start_transaction_verification(7, 0, false, 0);
    assert_ne!(again, guard);
    let first = transactional(batch(&[1], 5), 7, 0);
    assert!(log.transaction_verified(7, 0, Some(again)));
    log.append_as_leader(vec![first.freeze()], 0, 20).unwrap();
    assert!(log.transaction_verified(7, 0, None));
}

#[test]
fn verification_guards_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    let first = log.start_transaction_verification(0, 0, false, 0);
    for producer in 1..5000 {
        log.start_transaction_verification(producer, 0, false, 0);
    }
    // Held a while: none expired yet, all still held (below the hard bound).
    assert!(log.transaction_verified(0, 0, Some(first)));
    // Past their time, they go when the next ones come.
    for producer in 5000..5002 {
        log.start_transaction_verification(producer, 0, false, 10 * 60 * 1000);
    }
    assert!(!log.transaction_verified(0, 0, Some(first)));
}

#[test]
fn on_transaction_version_2_the_previous_transactions_marker_keeps_the_guard() {
    use fjord_records::control::EndTxnMarker;
    let commit = EndTxnMarker {
        commit: true,
        coordinator_epoch: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    // Producer 7's transaction at epoch 0 is open here; its end bumped the epoch to 1, and its
    // next transaction's batch (epoch 1) is verified before the commit marker arrives.
    log.append_as_leader(vec![transactional(batch(&[1], 5), 7, 0).freeze()], 0, 0)
        .unwrap();
    let guard = log.start_transaction_verification(7, 1, true, 0);
    // The marker carries epoch 1, the one verified: the guard stays.
    log.append_marker(7, 1, commit, true, 0, 10).unwrap();
    assert!(log.needs_transaction_verification(7, 1));
    assert!(log.transaction_verified(7, 1, Some(guard)));
    // A marker at another epoch (an abort that fenced the producer) drops it.
    log.append_marker(7, 2, commit, true, 0, 20).unwrap();
    assert!(!log.transaction_verified(7, 2, Some(guard)));
}

#[test]
fn on_transaction_version_2_a_marker_at_the_open_transactions_epoch_is_stale() {
    use fjord_records::control::EndTxnMarker;
    let commit = EndTxnMarker {
        commit: true,
        coordinator_epoch: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), small_config(), true, 0);
    // Producer 7's transaction at epoch 0 ends with a marker at the epoch its end bumped to.
    log.append_as_leader(vec![transactional(batch(&[1], 5), 7, 0).freeze()], 0, 0)
        .unwrap();
    log.append_marker(7, 1, commit, true, 0, 10).unwrap();
    // The same marker sent again finds no transaction open: let through, as Kafka does.
    log.append_marker(7, 1, commit, true, 0, 11).unwrap();
    // The next transaction (epoch 1) opens; a late marker of the previous one, at epoch 1,
    // would end it: refused INVALID_PRODUCER_EPOCH.
    log.append_as_leader(
        vec![at_epoch(transactional(batch(&[2], 5), 7, 0), 1).freeze()],
        0,
        12,
    )
    .unwrap();
    let late = log.append_marker(7, 1, commit, true, 0, 13).unwrap_err();
    assert_eq!(late.kafka_error_code(), 47);
    // Before transaction version 2 a marker at the producer's epoch is its transaction's own.
    log.append_marker(7, 1, commit, false, 0, 14).unwrap();
    // The next transaction's own end on version 2 carries epoch 2.
    log.append_as_leader(
        vec![at_epoch(transactional(batch(&[3], 5), 7, 0), 2).freeze()],
        0,
        15,
    )
    .unwrap();
    log.append_marker(7, 3, commit, true, 0, 16).unwrap();
}
