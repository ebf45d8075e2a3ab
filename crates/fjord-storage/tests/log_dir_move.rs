//! Moving a partition's log to another log dir (AlterReplicaLogDirs) while it takes appends:
//! the copy, the swap, restarts before and after the swap's commit point, cancelling, and the
//! log start and idempotent producers carried over.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use fjord_common::TopicPartition;
use fjord_storage::future_log::catch_up_round;
use fjord_storage::lock_order::lock_log;
use fjord_storage::log_manager::MOVE_COMMITTED_FILE;
use fjord_storage::{Log, LogConfig, LogManager, Retire, StorageError};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 512,
        ..LogConfig::default()
    }
}

fn dirs(root: &Path) -> Vec<PathBuf> {
    vec![root.join("a"), root.join("b")]
}

/// `batches` batches of 3 records, each acknowledged (high watermark at the log end).
fn fill(log: &Mutex<Log>, batches: usize, epoch: i32) {
    let mut log = log.lock().unwrap();
    for i in 0..batches {
        log.append_as_leader(vec![batch(&[i as i64; 3], 100)], epoch, 0)
            .unwrap();
    }
    let leo = log.log_end_offset();
    log.raise_high_watermark(leo);
}

/// Every batch's (base offset, last offset, epoch) and the bytes of the whole log.
fn contents(log: &Log) -> (Vec<(i64, i64, i32)>, Vec<u8>) {
    let mut batches = Vec::new();
    let mut all = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, i64::MAX, true).unwrap();
        let bytes = read.records.unwrap().read_to_bytes().unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let h = fjord_records::BatchHeader::parse(&bytes[at..]).unwrap();
            batches.push((h.base_offset, h.last_offset(), h.partition_leader_epoch));
            offset = h.last_offset() + 1;
            at += h.total_len();
        }
        all.extend_from_slice(&bytes);
    }
    (batches, all)
}

/// A manager over `dirs` and the log of `tp` (topic id all `id`) with `batches` batches of
/// leader epoch `epoch`.
fn new_log(
    dirs: &[PathBuf],
    tp: &TopicPartition,
    id: u8,
    batches: usize,
    epoch: i32,
) -> (LogManager, Arc<Mutex<Log>>) {
    let (manager, _) = LogManager::open(dirs, config(), 0).unwrap();
    let log = manager
        .create_log(tp.clone(), fjord_common::Uuid([id; 16]), config(), 0)
        .unwrap();
    fill(&log, batches, epoch);
    (manager, log)
}

/// One step of the move of `tp`, driven as the partition owning its log drives it: whether the
/// move is over.
fn step(manager: &LogManager, tp: &TopicPartition, max_bytes: usize) -> bool {
    let log = manager.get(tp);
    match log {
        Some(log) => step_of(manager, tp, &log, max_bytes),
        None => true,
    }
}

fn step_of(
    manager: &LogManager,
    tp: &TopicPartition,
    log: &Arc<Mutex<Log>>,
    max_bytes: usize,
) -> bool {
    manager
        .advance_move(tp, log, || lock_log(log), max_bytes, 0)
        .unwrap()
        .finished
}

fn run_move(manager: &LogManager, tp: &TopicPartition) -> usize {
    let mut steps = 0;
    while !step(manager, tp, 8192) {
        steps += 1;
        assert!(steps < 10_000, "the move never finished");
    }
    steps
}

#[test]
fn a_log_moves_while_appends_go_on_and_keeps_every_batch() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let (manager, _) = LogManager::open(&dirs, config(), 0).unwrap();
    let manager = Arc::new(manager);
    let tp = TopicPartition::new("moving", 0);
    let log = manager
        .create_log(tp.clone(), fjord_common::Uuid([7; 16]), config(), 0)
        .unwrap();
    assert!(log.lock().unwrap().dir().starts_with(&dirs[0]));
    fill(&log, 60, 1);
    log.lock().unwrap().become_leader(2).unwrap();
    fill(&log, 20, 2);

    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    // Asking again for the same destination changes nothing.
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    assert_eq!(manager.moving_partitions(), vec![tp.clone()]);
    let futures = manager.future_logs_by_dir();
    assert!(futures[0].1.is_empty());
    assert_eq!(futures[1].1.len(), 1);

    // A producer keeps appending while the mover copies.
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut appended = 0;
            while !stop.load(Ordering::Relaxed) || appended < 50 {
                fill(&log, 1, 2);
                appended += 1;
                if appended > 400 {
                    break;
                }
            }
            appended
        })
    };
    let mut steps = 0;
    while !step(&manager, &tp, 8192) {
        steps += 1;
        if steps == 20 {
            stop.store(true, Ordering::Relaxed);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let appended = appender.join().unwrap();
    assert!(appended >= 50);

    let before_more = log.lock().unwrap().log_end_offset();
    fill(&log, 5, 2);
    let moved = log.lock().unwrap();
    assert!(moved.dir().starts_with(&dirs[1]), "{:?}", moved.dir());
    assert_eq!(moved.dir().file_name().unwrap(), "moving-0");
    assert_eq!(moved.log_end_offset(), before_more + 15);
    assert_eq!(moved.high_watermark(), moved.log_end_offset());
    let (batches, _) = contents(&moved);
    assert_eq!(batches.len(), 80 + appended + 5);
    for (i, (base, last, epoch)) in batches.iter().enumerate() {
        assert_eq!((*base, *last), (i as i64 * 3, i as i64 * 3 + 2));
        assert_eq!(*epoch, if i < 60 { 1 } else { 2 });
    }
    assert_eq!(moved.latest_epoch(), Some(2));
    assert_eq!(moved.end_offset_for_epoch(1), (1, 180));
    assert!(moved.num_segments() > 10);
    drop(moved);
    assert!(manager.moving_partitions().is_empty());
    // The old dir is renamed `-delete`, and gone once file.delete.delay.ms has passed.
    let left = || -> Vec<String> {
        std::fs::read_dir(&dirs[0])
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("moving-0"))
            .collect()
    };
    let renamed = left();
    assert!(
        renamed.len() == 1 && renamed[0].ends_with("-delete"),
        "{renamed:?}"
    );
    assert_eq!(
        fjord_storage::remove_retired_dirs(manager.take_due_deletions(60_000)),
        1
    );
    assert!(left().is_empty(), "{:?}", left());

    // After a restart the log is found in its new dir, whole.
    let expected = contents(&log.lock().unwrap());
    drop(log);
    manager.shutdown().unwrap();
    drop(manager);
    let (manager, report) = LogManager::open(&dirs, config(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 1);
    let log = manager.get(&tp).unwrap();
    let log = log.lock().unwrap();
    assert!(log.dir().starts_with(&dirs[1]));
    assert_eq!(contents(&log), expected);
    assert_eq!(log.topic_id(), Some(fjord_common::Uuid([7; 16])));
}

#[test]
fn idempotent_producers_and_the_log_start_come_along() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let (manager, _) = LogManager::open(&dirs, config(), 0).unwrap();
    let tp = TopicPartition::new("idem", 0);
    let log = manager
        .create_log(tp.clone(), fjord_common::Uuid([1; 16]), config(), 0)
        .unwrap();
    {
        let mut log = log.lock().unwrap();
        for seq in 0..40 {
            let b = idempotent(batch(&[1, 2], 50), 77, seq * 2);
            log.append_as_leader(vec![b], 0, 0).unwrap();
        }
        let leo = log.log_end_offset();
        log.raise_high_watermark(leo);
        // DeleteRecords to the middle of a batch.
        log.increment_log_start_offset(31, 0).unwrap();
    }
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    run_move(&manager, &tp);
    let mut log = log.lock().unwrap();
    assert!(log.dir().starts_with(&dirs[1]));
    assert_eq!(log.log_start_offset(), 31);
    assert_eq!(log.log_end_offset(), 80);
    assert_eq!(contents(&log).0.first().map(|b| b.0), Some(30));
    // The producer's last batch is known to the moved log: a retry is a duplicate.
    let retry = idempotent(batch(&[1, 2], 50), 77, 78);
    let info = log.append_as_leader(vec![retry], 0, 0).unwrap();
    assert!(info.duplicate);
    assert_eq!(info.first_offset, 78);
    let next = idempotent(batch(&[1, 2], 50), 77, 80);
    assert_eq!(
        log.append_as_leader(vec![next], 0, 0).unwrap().first_offset,
        80
    );
}

#[test]
fn a_restart_resumes_a_copy_and_completes_a_committed_swap() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let tp = TopicPartition::new("crash", 2);
    let expected;
    {
        let (manager, log) = new_log(&dirs, &tp, 3, 50, 4);
        expected = contents(&log.lock().unwrap());
        manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
        for _ in 0..3 {
            assert!(!step(&manager, &tp, 2048));
        }
        // Killed mid-copy: no shutdown.
    }
    let (manager, report) = LogManager::open(&dirs, config(), 0).unwrap();
    assert_eq!(report.moves_resumed, 1);
    assert_eq!(manager.moving_partitions(), vec![tp.clone()]);
    assert!(manager
        .get(&tp)
        .unwrap()
        .lock()
        .unwrap()
        .dir()
        .starts_with(&dirs[0]));
    run_move(&manager, &tp);
    let log = manager.get(&tp).unwrap();
    assert!(log.lock().unwrap().dir().starts_with(&dirs[1]));
    assert_eq!(contents(&log.lock().unwrap()), expected);

    // Back to the first dir, stopping right after the commit point: the future log is complete,
    // synced and marked committed, the current dir renamed for deletion.
    fill(&log, 10, 5);
    log.lock()
        .unwrap()
        .increment_log_start_offset(12, 0)
        .unwrap();
    manager.checkpoint().unwrap();
    let expected = contents(&log.lock().unwrap());
    manager.alter_log_dir(&tp, &dirs[0], 0).unwrap();
    let future = copy_until_caught_up_into(&manager, &tp, 0);
    future.lock().unwrap().close().unwrap();
    let future_dir = future.lock().unwrap().dir().to_path_buf();
    std::fs::write(future_dir.join(MOVE_COMMITTED_FILE), b"").unwrap();
    let current_dir = log.lock().unwrap().dir().to_path_buf();
    std::fs::rename(
        &current_dir,
        dirs[1].join(format!("crash-2.{}-delete", "0f".repeat(16))),
    )
    .unwrap();
    drop((future, log, manager));
    let (manager, report) = LogManager::open(&dirs, config(), 0).unwrap();
    assert_eq!(report.moves_completed, 1);
    // With the first move's old dir, whose delay had not passed when the broker stopped.
    assert_eq!(report.deletions_queued, 2);
    let log = manager.get(&tp).unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.dir(), dirs[0].join("crash-2"));
    assert_eq!(contents(&log), expected);
    // The log start DeleteRecords set and the high watermark come from the old dir's checkpoint.
    assert_eq!(log.log_start_offset(), 12);
    assert_eq!(log.high_watermark(), log.log_end_offset());
    assert!(!log.dir().join(MOVE_COMMITTED_FILE).exists());
    assert_eq!(log.topic_id(), Some(fjord_common::Uuid([3; 16])));
    assert!(manager.moving_partitions().is_empty());
}

fn copy_until_caught_up_into(
    manager: &LogManager,
    tp: &TopicPartition,
    dir: usize,
) -> Arc<Mutex<Log>> {
    let current = manager.get(tp).unwrap();
    let future = manager.future_logs_by_dir()[dir].1[0].1.clone();
    while !catch_up_round(lock_log(&current), &future, 4096, 0)
        .unwrap()
        .0
    {}
    future
}

#[test]
fn cancelling_deleting_and_bad_destinations() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let tp = TopicPartition::new("c", 0);
    let (manager, log) = new_log(&dirs, &tp, 5, 30, 0);
    let future_dirs = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with("-future"))
            .count()
    };

    assert!(matches!(
        manager.alter_log_dir(&tp, &root.path().join("elsewhere"), 0),
        Err(StorageError::LogDirNotFound(_))
    ));
    assert_eq!(
        StorageError::LogDirNotFound(PathBuf::new()).kafka_error_code(),
        57
    );
    assert!(matches!(
        manager.alter_log_dir(&TopicPartition::new("c", 9), &dirs[1], 0),
        Err(StorageError::NoSuchLog(_))
    ));
    // Where it already is: nothing to do.
    manager.alter_log_dir(&tp, &dirs[0], 0).unwrap();
    assert!(manager.moving_partitions().is_empty());

    // Started, then sent back home: the copy is dropped.
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    assert!(!step(&manager, &tp, 1024));
    assert_eq!(future_dirs(&dirs[1]), 1);
    manager.alter_log_dir(&tp, &dirs[0], 0).unwrap();
    assert!(manager.moving_partitions().is_empty());
    assert_eq!(future_dirs(&dirs[1]), 0);

    // An aborted move leaves the log as it was.
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    assert!(!step(&manager, &tp, 1024));
    manager.abort_move(&tp, &mut lock_log(&log)).unwrap();
    assert_eq!(future_dirs(&dirs[1]), 0);
    assert!(log.lock().unwrap().dir().starts_with(&dirs[0]));

    // Deleting a moving partition removes its copy too.
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    assert!(!step(&manager, &tp, 1024));
    manager.retire_log(&tp, Retire::Delete, 0).unwrap();
    assert_eq!(future_dirs(&dirs[1]), 0);
    assert!(manager.moving_partitions().is_empty());
    assert!(step_of(&manager, &tp, &log, 1024));
}

#[test]
fn a_follower_append_refuses_corrupt_and_backward_batches() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(
        &root.path().join("f-0"),
        tp(),
        None,
        config(),
        0,
        0,
        true,
        0,
    )
    .unwrap();
    let mut b = batch(&[1, 2, 3], 10);
    b[0..8].copy_from_slice(&5i64.to_be_bytes());
    let good = b.clone().freeze();
    assert_eq!(log.append_as_follower(&good, 0).unwrap(), 1);
    assert_eq!(log.log_end_offset(), 8);
    // The same offsets again: backwards.
    assert!(log.append_as_follower(&good, 0).is_err());
    let mut corrupt = batch(&[1, 2, 3], 10);
    corrupt[0..8].copy_from_slice(&20i64.to_be_bytes());
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert!(matches!(
        log.append_as_follower(&corrupt.freeze(), 0),
        Err(StorageError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn an_unfinished_copy_without_its_original_is_left_alone() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let tp = TopicPartition::new("orphan", 0);
    let future_dir;
    {
        let (manager, _log) = new_log(&dirs, &tp, 4, 30, 0);
        manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
        assert!(!step(&manager, &tp, 1024));
        future_dir = manager.future_logs_by_dir()[1].1[0]
            .1
            .lock()
            .unwrap()
            .dir()
            .to_path_buf();
    }
    // The original's dir is no longer one of log.dirs.
    let (manager, report) = LogManager::open(&dirs[1..], config(), 0).unwrap();
    assert_eq!((report.moves_completed, report.moves_resumed), (0, 0));
    assert!(manager.get(&tp).is_none());
    assert!(future_dir.exists(), "the partial copy is kept");
    drop(manager);
    // With the original back, the move resumes.
    let (manager, report) = LogManager::open(&dirs, config(), 0).unwrap();
    assert_eq!(report.moves_resumed, 1);
    run_move(&manager, &tp);
    assert!(manager
        .get(&tp)
        .unwrap()
        .lock()
        .unwrap()
        .dir()
        .starts_with(&dirs[1]));
}

#[test]
fn a_destination_gone_offline_never_takes_the_log() {
    let root = tempfile::tempdir().unwrap();
    let dirs = dirs(root.path());
    let tp = TopicPartition::new("offline", 0);
    let (manager, log) = new_log(&dirs, &tp, 6, 10, 0);
    let expected = contents(&log.lock().unwrap());
    manager.alter_log_dir(&tp, &dirs[1], 0).unwrap();
    // Idle partition, copy all but caught up: the disk under the copy fails.
    let future = manager.future_logs_by_dir()[1].1[0].1.clone();
    let future_dir = future.lock().unwrap().dir().to_path_buf();
    assert!(!manager.take_dir_offline(&future_dir, "injected"));
    assert!(matches!(
        manager.advance_move(&tp, &log, || lock_log(&log), 1 << 20, 0),
        Err(StorageError::LogDirOffline(_))
    ));
    manager.abort_move(&tp, &mut lock_log(&log)).unwrap();
    let log = log.lock().unwrap();
    assert!(log.dir().starts_with(&dirs[0]));
    assert_eq!(contents(&log), expected);
    assert!(matches!(
        manager.alter_log_dir(&tp, &dirs[1], 0),
        Err(StorageError::LogDirOffline(_))
    ));
}
