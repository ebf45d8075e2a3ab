//! The log cleaner on real segment files: what a pass keeps, tombstones and their horizon,
//! idempotent producers' state, the memory bound over several passes, and every on-disk state a
//! crash can leave mid-swap.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use bytes::Bytes;
use fjord_records::{BatchBuilder, Compression};
use fjord_storage::cleaner::offset_map::OffsetMap;
use fjord_storage::cleaner::pass::{clean_log, PassIo, PassOutcome, PassStats};
use fjord_storage::cleaner::throttle::Throttler;
use fjord_storage::{CompactionConfig, Log, LogConfig};

const T0: i64 = 1_700_000_000_000;
const DELETE_RETENTION_MS: i64 = 10_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 512,
        compaction: CompactionConfig {
            compact: true,
            delete_retention_ms: DELETE_RETENTION_MS,
            ..CompactionConfig::default()
        },
        cleanup_policy_delete: false,
        ..LogConfig::default()
    }
}

type Write = (String, Option<String>);

fn keyed_batch(
    records: &[Write],
    ts: i64,
    codec: Compression,
    producer: Option<(i64, i32)>,
) -> Bytes {
    let mut builder = BatchBuilder::new(codec);
    if let Some((pid, seq)) = producer {
        builder = builder.producer(pid, 0, seq);
    }
    for (key, value) in records {
        builder
            .append(
                ts,
                Some(key.as_bytes()),
                value.as_deref().map(str::as_bytes),
                &[],
            )
            .unwrap();
    }
    builder.build().unwrap().freeze()
}

fn append(log: &mut Log, batch: Bytes, now: i64) {
    log.append_as_leader(vec![batch], 0, now).unwrap();
    let leo = log.log_end_offset();
    log.raise_high_watermark(leo);
}

/// Every batch in the log, whole, in offset order.
fn batches(log: &Log) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let info = log.read(offset, usize::MAX, i64::MAX, true).unwrap();
        let Some(slice) = info.records else { break };
        let bytes = slice.read_to_bytes().unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let header = fjord_records::BatchHeader::parse(&bytes[at..]).unwrap();
            out.push(bytes.slice(at..at + header.total_len()));
            at += header.total_len();
            offset = header.last_offset() + 1;
        }
    }
    out
}

/// Every record in the log: (offset, key, value).
fn read_all(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    for batch in batches(log) {
        let header = fjord_records::BatchHeader::parse(&batch).unwrap();
        for record in fjord_records::records(&batch, 1 << 24).unwrap() {
            let record = record.unwrap();
            out.push((
                header.base_offset + i64::from(record.offset_delta),
                String::from_utf8(record.key.unwrap().to_vec()).unwrap(),
                record.value.map(|v| String::from_utf8(v.to_vec()).unwrap()),
            ));
        }
    }
    out
}

/// The latest value of each key, tombstones included, from a record list.
fn latest(records: &[(i64, String, Option<String>)]) -> BTreeMap<String, (i64, Option<String>)> {
    let mut map = BTreeMap::new();
    for (offset, key, value) in records {
        map.insert(key.clone(), (*offset, value.clone()));
    }
    map
}

fn assert_compacted(records: &[(i64, String, Option<String>)]) {
    let mut keys = std::collections::HashSet::new();
    for pair in records.windows(2) {
        assert!(pair[0].0 < pair[1].0, "offsets strictly increase: {pair:?}");
    }
    for (_, key, _) in records {
        assert!(
            keys.insert(key.clone()),
            "{key} appears twice after cleaning"
        );
    }
}

/// One pass over everything cleanable (from the log start when `checkpoint` is `None`).
fn pass(log: &Mutex<Log>, checkpoint: Option<i64>, map_bytes: u64, now: i64) -> (i64, PassStats) {
    let cleanable = log.lock().unwrap().cleanable(checkpoint, now).unwrap();
    let mut map = OffsetMap::new(map_bytes, 0.9);
    let throttler = Throttler::new(f64::MAX);
    let stop = AtomicBool::new(false);
    let io = PassIo {
        map: &mut map,
        throttler: &throttler,
        io_buffer_bytes: 64 * 1024,
        stop: &stop,
    };
    match clean_log(log, &cleanable, io, now).unwrap() {
        PassOutcome::Cleaned { end_offset, stats } => (end_offset, stats),
        PassOutcome::Aborted => panic!("the pass was abandoned"),
    }
}

/// 40 keys, 25 rounds of updates in batches of 8 over every codec; every fifth key ends with
/// a tombstone. Rolled at the end, so every record is in a sealed segment.
fn fill(log: &mut Log) {
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut writes: Vec<Write> = Vec::new();
    for round in 0..25 {
        for key in 0..40 {
            let value = if round == 24 && key % 5 == 0 {
                None
            } else {
                Some(format!("v{round}-{key}-{}", "x".repeat(key % 7 * 10)))
            };
            writes.push((format!("k{key:02}"), value));
        }
    }
    for (i, chunk) in writes.chunks(8).enumerate() {
        let codec = codecs[i % codecs.len()];
        append(log, keyed_batch(chunk, T0 + i as i64, codec, None), T0);
    }
    log.roll(T0).unwrap();
}

#[test]
fn a_pass_keeps_the_latest_value_of_every_key_and_tombstones_until_their_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    fill(&mut log);
    let before = read_all(&log);
    let expected = latest(&before);
    let segments_before = log.num_segments();
    let log = Mutex::new(log);

    let (end, stats) = pass(&log, None, 1 << 20, T0 + 1);
    let after = read_all(&log.lock().unwrap());
    assert_eq!(
        end,
        log.lock().unwrap().log_end_offset(),
        "everything sealed was cleanable"
    );
    assert_compacted(&after);
    assert_eq!(
        latest(&after),
        expected,
        "the latest value of every key, tombstones too"
    );
    assert_eq!(after.len(), 40);
    assert_eq!(stats.records_read, 1000);
    assert_eq!(stats.records_kept, 40);
    assert!(stats.bytes_written < stats.bytes_read);

    // Before the horizon a new pass keeps the tombstones; after it they go, and nothing else.
    pass(&log, None, 1 << 20, T0 + DELETE_RETENTION_MS - 1);
    assert_eq!(read_all(&log.lock().unwrap()), after);
    // Segments emptied by the first pass were grouped into one by the second (Kafka groups by
    // the sizes before cleaning).
    assert!(log.lock().unwrap().num_segments() < segments_before);
    pass(&log, None, 1 << 20, T0 + 1 + DELETE_RETENTION_MS);
    let final_records = read_all(&log.lock().unwrap());
    let live: BTreeMap<_, _> = expected
        .iter()
        .filter(|(_, (_, v))| v.is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(latest(&final_records), live);

    // A clean reopen and a recovering one both read the same.
    let mut log = log.into_inner().unwrap();
    let leo = log.log_end_offset();
    log.close().unwrap();
    let (reopened, _) =
        Log::open(dir.path(), common::tp(), None, config(), leo, 0, true, T0).unwrap();
    assert_eq!(read_all(&reopened), final_records);
    assert_eq!(reopened.log_end_offset(), leo);
    drop(reopened);
    let (recovered, _) =
        Log::open(dir.path(), common::tp(), None, config(), 0, 0, false, T0).unwrap();
    assert_eq!(read_all(&recovered), final_records);
}

#[test]
fn the_last_batch_of_an_idempotent_producer_survives_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    let producer_batch = |seq: i32, key: &str| {
        keyed_batch(
            &[(key.to_string(), Some(format!("p{seq}")))],
            T0,
            Compression::None,
            Some((7, seq)),
        )
    };
    append(&mut log, producer_batch(0, "a"), T0);
    append(&mut log, producer_batch(1, "b"), T0);
    // Both keys are overwritten by a later, non-idempotent producer.
    for key in ["a", "b"] {
        append(
            &mut log,
            keyed_batch(
                &[(key.to_string(), Some("later".into()))],
                T0,
                Compression::None,
                None,
            ),
            T0,
        );
    }
    log.roll(T0).unwrap();
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let mut log = log.into_inner().unwrap();
    assert_eq!(
        read_all(&log)
            .into_iter()
            .map(|(o, k, _)| (o, k))
            .collect::<Vec<_>>(),
        vec![(2, "a".to_string()), (3, "b".to_string())]
    );
    // Offset 1 is still a batch (empty), so the producer's last sequence is on disk.
    let batches = common::batch_offsets(&log, 0);
    assert_eq!(batches, vec![(1, 1), (2, 2), (3, 3)]);

    let leo = log.log_end_offset();
    log.close().unwrap();
    // Producer state rebuilt from the cleaned log alone (no snapshot).
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (mut log, _) =
        Log::open(dir.path(), common::tp(), None, config(), leo, 0, false, T0).unwrap();
    let retry = log
        .append_as_leader(vec![producer_batch(1, "b")], 0, T0)
        .unwrap();
    assert!(
        retry.duplicate,
        "the retry of the last batch is still recognised"
    );
    assert_eq!(retry.first_offset, 1);
    let next = log
        .append_as_leader(vec![producer_batch(2, "c")], 0, T0)
        .unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.first_offset, leo);
}

#[test]
fn more_keys_than_the_map_holds_are_cleaned_over_several_bounded_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    let mut writes: Vec<Write> = Vec::new();
    for round in 0..2 {
        for key in 0..1000 {
            writes.push((format!("key-{key:04}"), Some(format!("r{round}"))));
        }
    }
    for chunk in writes.chunks(10) {
        append(&mut log, keyed_batch(chunk, T0, Compression::Lz4, None), T0);
    }
    log.roll(T0).unwrap();
    let expected = latest(&read_all(&log));
    let log = Mutex::new(log);
    // Room for 90 keys.
    let map_bytes = 24 * 100;
    let mut checkpoint = None;
    let mut passes = 0;
    loop {
        let cleanable = log.lock().unwrap().cleanable(checkpoint, T0 + 1).unwrap();
        if cleanable.first_dirty_offset >= cleanable.first_uncleanable_offset {
            break;
        }
        let (end, stats) = pass(&log, checkpoint, map_bytes, T0 + 1);
        assert!(stats.keys_mapped <= 90, "{stats:?}");
        assert!(stats.map_memory_bytes <= map_bytes, "{stats:?}");
        assert!(
            end > cleanable.first_dirty_offset,
            "every pass makes progress"
        );
        checkpoint = Some(end);
        passes += 1;
        assert!(passes < 100);
    }
    assert!(
        passes >= 20,
        "2000 records over 90-key maps: {passes} passes"
    );
    let after = read_all(&log.lock().unwrap());
    assert_compacted(&after);
    assert_eq!(latest(&after), expected);
}

/// Files of `dir` by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn write_files(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn every_state_a_crash_leaves_mid_swap_recovers_without_loss() {
    // The log before a pass, and after it (several groups).
    let before_dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(
        before_dir.path(),
        common::tp(),
        None,
        config(),
        0,
        0,
        true,
        T0,
    )
    .unwrap();
    fill(&mut log);
    // Cleaned once, then dirtied again: the next pass groups the small cleaned segments.
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let mut log = log.into_inner().unwrap();
    for round in 0..10 {
        let writes: Vec<Write> = (0..20)
            .map(|key| (format!("k{key:02}"), Some(format!("again{round}"))))
            .collect();
        for chunk in writes.chunks(4) {
            append(
                &mut log,
                keyed_batch(chunk, T0, Compression::Zstd, None),
                T0,
            );
        }
    }
    log.roll(T0).unwrap();
    let expected = latest(&read_all(&log));
    let leo = log.log_end_offset();
    log.close().unwrap();
    let before = files(before_dir.path());
    let after_dir = tempfile::tempdir().unwrap();
    write_files(after_dir.path(), &before);
    let (mut log, _) = Log::open(
        after_dir.path(),
        common::tp(),
        None,
        config(),
        leo,
        0,
        true,
        T0,
    )
    .unwrap();
    log.restore_high_watermark(leo);
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let mut log = log.into_inner().unwrap();
    let cleaned_bases = log.segment_base_offsets();
    log.close().unwrap();
    let after = files(after_dir.path());
    let segment = |base: i64, kind: &str| format!("{base:020}.{kind}");
    // The first group: the first cleaned segment replaces every old one below the next base.
    let first = cleaned_bases[0];
    let next = cleaned_bases[1];
    let old_bases: Vec<i64> = before
        .keys()
        .filter_map(|n| n.strip_suffix(".log")?.parse().ok())
        .filter(|b| *b >= first && *b < next)
        .collect();
    assert!(
        old_bases.len() > 1,
        "the group merged segments: {old_bases:?}"
    );
    let cleaned_log = after[&segment(first, "log")].clone();

    type Setup<'a> = Box<dyn Fn(&Path) + 'a>;
    let states: Vec<(&str, Setup)> = vec![
        (
            "cleaned files written, not committed",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                std::fs::write(dir.join(segment(first, "log.cleaned")), &cleaned_log).unwrap();
                std::fs::write(dir.join(segment(first, "index.cleaned")), b"junk").unwrap();
            }),
        ),
        (
            "committed as .swap, old segments intact",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                std::fs::write(dir.join(segment(first, "log.swap")), &cleaned_log).unwrap();
                std::fs::write(dir.join(segment(first, "timeindex.swap")), b"junk").unwrap();
            }),
        ),
        (
            "committed, some old segments renamed .deleted",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                std::fs::write(dir.join(segment(first, "log.swap")), &cleaned_log).unwrap();
                for base in &old_bases[..old_bases.len() / 2] {
                    std::fs::rename(
                        dir.join(segment(*base, "log")),
                        dir.join(segment(*base, "log.deleted")),
                    )
                    .unwrap();
                }
            }),
        ),
        (
            "committed, every old segment renamed .deleted",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                std::fs::write(dir.join(segment(first, "log.swap")), &cleaned_log).unwrap();
                for base in &old_bases {
                    std::fs::rename(
                        dir.join(segment(*base, "log")),
                        dir.join(segment(*base, "log.deleted")),
                    )
                    .unwrap();
                }
            }),
        ),
        (
            "swapped in, later groups not yet",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                for base in &old_bases {
                    for kind in ["log", "index", "timeindex"] {
                        let _ = std::fs::remove_file(dir.join(segment(*base, kind)));
                    }
                }
                std::fs::write(dir.join(segment(first, "log")), &cleaned_log).unwrap();
            }),
        ),
        (
            "a torn .swap (never committed this way) is discarded",
            Box::new(|dir: &Path| {
                write_files(dir, &before);
                std::fs::write(
                    dir.join(segment(first, "log.swap")),
                    &cleaned_log[..cleaned_log.len() - 7],
                )
                .unwrap();
            }),
        ),
        (
            "the whole pass done, .deleted files left",
            Box::new(|dir: &Path| {
                write_files(dir, &after);
                for base in &old_bases[1..] {
                    std::fs::write(
                        dir.join(segment(*base, "log.deleted")),
                        &before[&segment(*base, "log")],
                    )
                    .unwrap();
                }
            }),
        ),
    ];
    for (name, setup) in states {
        for clean_shutdown in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            setup(dir.path());
            let (log, _) = Log::open(
                dir.path(),
                common::tp(),
                None,
                config(),
                if clean_shutdown { leo } else { 0 },
                0,
                clean_shutdown,
                T0,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let records = read_all(&log);
            for pair in records.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{name}: offsets go back: {pair:?}");
            }
            assert_eq!(
                latest(&records),
                expected,
                "{name}: the latest value of every key"
            );
            assert_eq!(log.log_end_offset(), leo, "{name}");
            let leftovers: Vec<String> = files(dir.path())
                .into_keys()
                .filter(|n| {
                    n.ends_with(".swap") || n.ends_with(".cleaned") || n.ends_with(".deleted")
                })
                .collect();
            assert!(leftovers.is_empty(), "{name}: {leftovers:?}");
        }
    }
}

#[test]
fn a_pass_over_a_log_that_changed_meanwhile_swaps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    fill(&mut log);
    let before = read_all(&log);
    let cleanable = log.cleanable(None, T0 + 1).unwrap();
    let sources = log.cleaning_sources(cleanable.first_uncleanable_offset);
    // Truncation rewrites the tail: a swap planned before it must not land.
    log.truncate_to(sources.segments[0].next_segment_base + 1)
        .unwrap();
    let cleaned = log.create_cleaned_segment(0, T0).unwrap();
    assert!(!log
        .replace_segments(cleaned, &sources.segments, T0)
        .unwrap());
    let expected: Vec<_> = before
        .into_iter()
        .filter(|(o, _, _)| *o < log.log_end_offset())
        .collect();
    assert_eq!(read_all(&log), expected);
    assert!(files(dir.path()).keys().all(|n| !n.ends_with(".cleaned")));
}

#[test]
fn max_compaction_lag_rolls_the_active_segment_sooner() {
    for (compact, rolls) in [(true, true), (false, false)] {
        let mut config = config();
        config.segment_ms = 1_000_000;
        config.compaction.compact = compact;
        config.compaction.max_compaction_lag_ms = 1_000;
        assert_eq!(
            config.max_segment_ms(),
            if compact { 1_000 } else { 1_000_000 }
        );
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) =
            Log::open(dir.path(), common::tp(), None, config, 0, 0, true, T0).unwrap();
        let one = |ts| {
            keyed_batch(
                &[("k".to_string(), Some("v".to_string()))],
                ts,
                Compression::None,
                None,
            )
        };
        append(&mut log, one(T0), T0);
        append(&mut log, one(T0 + 2_000), T0 + 2_000);
        assert_eq!(log.num_segments() == 2, rolls, "compact={compact}");
    }
}

#[test]
fn cleaned_segments_keep_the_aborted_transactions_of_those_they_replace() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    let mut txn = BatchBuilder::new(Compression::None)
        .producer(5, 0, 0)
        .transactional(true);
    txn.append(T0, Some(b"k00"), Some(b"aborted"), &[]).unwrap();
    append(&mut log, txn.build().unwrap().freeze(), T0);
    let marker = fjord_records::control::EndTxnMarker {
        commit: false,
        coordinator_epoch: 0,
    };
    log.append_marker(5, 0, marker, false, 0, T0).unwrap();
    fill(&mut log);
    let end = log.log_end_offset();
    log.raise_high_watermark(end);
    let aborted = log.aborted_txns(0, end);
    assert_eq!(aborted.len(), 1);
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let log = log.into_inner().unwrap();
    assert_eq!(log.aborted_txns(0, end), aborted);
    drop(log);
    let (log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    assert_eq!(log.aborted_txns(0, end), aborted);
}

#[test]
fn an_open_transaction_bounds_what_the_cleaner_may_touch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    fill(&mut log);
    let sealed_end = log.log_end_offset();
    let mut txn = BatchBuilder::new(Compression::None)
        .producer(5, 0, 0)
        .transactional(true);
    txn.append(T0, Some(b"k00"), Some(b"open"), &[]).unwrap();
    append(&mut log, txn.build().unwrap().freeze(), T0);
    fill(&mut log);
    let end = log.log_end_offset();
    log.raise_high_watermark(end);
    assert_eq!(log.last_stable_offset(), sealed_end);
    let cleanable = log.cleanable(None, T0 + 1).unwrap();
    assert!(
        cleanable.first_uncleanable_offset <= sealed_end,
        "{} is past the open transaction at {sealed_end}",
        cleanable.first_uncleanable_offset
    );
    log.append_marker(
        5,
        0,
        fjord_records::control::EndTxnMarker {
            commit: true,
            coordinator_epoch: 0,
        },
        false,
        0,
        T0,
    )
    .unwrap();
    log.roll(T0).unwrap();
    log.raise_high_watermark(log.log_end_offset());
    let decided = log.cleanable(None, T0 + 1).unwrap();
    assert!(decided.first_uncleanable_offset > sealed_end);
}

/// The transaction markers in the log: (offset, producer id, commit, delete horizon stamped).
fn markers(log: &Log) -> Vec<(i64, i64, bool, bool)> {
    batches(log)
        .iter()
        .filter_map(|batch| {
            let header = fjord_records::BatchHeader::parse(batch).unwrap();
            let marker = fjord_records::control::read_marker(batch)?;
            let horizon = header.delete_horizon_ms().is_some();
            Some((
                header.base_offset,
                header.producer_id,
                marker.commit,
                horizon,
            ))
        })
        .collect()
}

#[test]
fn aborted_transactions_are_cleaned_away_then_their_markers_after_the_horizon() {
    use fjord_records::control::EndTxnMarker;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    let txn = |pid: i64, seq: i32, records: &[(&str, &str)]| {
        let mut b = BatchBuilder::new(Compression::None)
            .producer(pid, 0, seq)
            .transactional(true);
        for (k, v) in records {
            b.append(T0, Some(k.as_bytes()), Some(v.as_bytes()), &[])
                .unwrap();
        }
        b.build().unwrap().freeze()
    };
    let end_txn = |log: &mut Log, pid: i64, commit: bool| {
        let marker = EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        };
        log.append_marker(pid, 0, marker, false, 0, T0).unwrap();
    };
    append(
        &mut log,
        keyed_batch(
            &[("x".into(), Some("v1".into()))],
            T0,
            Compression::None,
            None,
        ),
        T0,
    );
    append(
        &mut log,
        txn(5, 0, &[("x", "aborted"), ("y", "aborted")]),
        T0,
    ); // 1, 2
    end_txn(&mut log, 5, false); // 3
    append(&mut log, txn(6, 0, &[("z", "committed")]), T0); // 4
    end_txn(&mut log, 6, true); // 5
    append(&mut log, txn(5, 2, &[("w", "later")]), T0); // 6
    end_txn(&mut log, 5, true); // 7
    log.roll(T0).unwrap();
    let end = log.log_end_offset();
    log.raise_high_watermark(end);
    assert_eq!(log.aborted_txns(0, end).len(), 1);
    let values = |log: &Log| -> Vec<(String, String)> {
        read_all(log)
            .into_iter()
            .filter(|(_, k, _)| k.len() == 1)
            .map(|(_, k, v)| (k, v.unwrap_or_default()))
            .collect()
    };
    let expected: Vec<(String, String)> = [("x", "v1"), ("z", "committed"), ("w", "later")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();

    // First pass: the aborted batch goes — its records never shadowed the older "x" — and its
    // marker stays (its batch was there), indexed.
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let all = vec![
        (3, 5, false, false),
        (5, 6, true, false),
        (7, 5, true, false),
    ];
    {
        let log = log.lock().unwrap();
        assert_eq!(values(&log), expected);
        assert_eq!(markers(&log), all);
        assert_eq!(log.aborted_txns(0, end).len(), 1);
    }
    // Second pass: nothing of the aborted transaction is left, so its marker may go once the
    // horizon stamped now has passed; its index entry goes now. Committed ones stay with data.
    pass(&log, None, 1 << 20, T0 + 2);
    {
        let log = log.lock().unwrap();
        assert_eq!(values(&log), expected);
        assert_eq!(
            markers(&log),
            vec![
                (3, 5, false, true),
                (5, 6, true, false),
                (7, 5, true, false)
            ]
        );
        assert!(log.aborted_txns(0, end).is_empty());
    }
    pass(&log, None, 1 << 20, T0 + 3 + DELETE_RETENTION_MS);
    let log = log.into_inner().unwrap();
    assert_eq!(values(&log), expected);
    assert_eq!(
        markers(&log),
        vec![(5, 6, true, false), (7, 5, true, false)]
    );
    // What a reload finds: the same, with no transaction left open.
    drop(log);
    let (mut log, _) =
        Log::open(dir.path(), common::tp(), None, config(), 0, 0, false, T0).unwrap();
    log.raise_high_watermark(log.log_end_offset());
    assert_eq!(values(&log), expected);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
}

#[test]
fn an_aborted_transaction_whose_marker_is_in_the_active_segment_shadows_nothing() {
    use fjord_records::control::EndTxnMarker;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), common::tp(), None, config(), 0, 0, true, T0).unwrap();
    append(
        &mut log,
        keyed_batch(
            &[("x".into(), Some("v1".into()))],
            T0,
            Compression::None,
            None,
        ),
        T0,
    );
    let mut b = BatchBuilder::new(Compression::None)
        .producer(5, 0, 0)
        .transactional(true);
    b.append(T0, Some(b"x"), Some(b"aborted"), &[]).unwrap();
    append(&mut log, b.build().unwrap().freeze(), T0);
    // The batch is sealed; its abort marker lands in the new active segment, which is not cleaned.
    log.roll(T0).unwrap();
    let marker = EndTxnMarker {
        commit: false,
        coordinator_epoch: 0,
    };
    log.append_marker(5, 0, marker, false, 0, T0).unwrap();
    log.raise_high_watermark(log.log_end_offset());
    let log = Mutex::new(log);
    pass(&log, None, 1 << 20, T0 + 1);
    let log = log.into_inner().unwrap();
    let values: Vec<(String, Option<String>)> = read_all(&log)
        .into_iter()
        .filter(|(_, k, _)| k == "x")
        .map(|(_, k, v)| (k, v))
        .collect();
    assert_eq!(values, vec![("x".to_string(), Some("v1".to_string()))]);
}
