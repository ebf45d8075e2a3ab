mod common;

use common::*;
use fjord_common::TopicPartition;
use fjord_storage::{remove_retired_dirs, LogConfig, LogManager, Retire};

#[test]
fn places_partitions_on_least_loaded_dir_and_reloads() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (manager, report) = LogManager::open(&dirs, LogConfig::default(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 0);
    for p in 0..4 {
        let log = manager
            .create_log(
                TopicPartition::new("orders", p),
                fjord_common::Uuid([p as u8 + 1; 16]),
                LogConfig::default(),
                0,
            )
            .unwrap();
        let mut log = log.lock().unwrap();
        log.append_as_leader(vec![batch(&[1, 2, 3], 10)], 2, 0)
            .unwrap();
        log.raise_high_watermark(2);
    }
    for d in &dirs {
        let count = std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count();
        assert_eq!(count, 2, "{d:?}");
    }
    assert!(dirs[0].join("orders-0").join("partition.metadata").exists());
    manager
        .retire_log(&TopicPartition::new("orders", 3), Retire::Delete, 1_000)
        .unwrap();
    assert!(manager.get(&TopicPartition::new("orders", 3)).is_none());
    assert!(!dirs[1].join("orders-3").exists());
    // Renamed at once, removed once file.delete.delay.ms (60 s here) has passed.
    assert_eq!(dirs_ending(&dirs[1], "-delete"), 1);
    assert!(manager.take_due_deletions(60_999).is_empty());
    assert_eq!(remove_retired_dirs(manager.take_due_deletions(61_000)), 1);
    assert_eq!(dirs_ending(&dirs[1], "-delete"), 0);
    // A stray is renamed and kept.
    manager
        .retire_log(&TopicPartition::new("orders", 2), Retire::Stray, 1_000)
        .unwrap();
    assert_eq!(dirs_ending(&dirs[0], "-stray"), 1);
    assert!(manager.take_due_deletions(i64::MAX).is_empty());
    manager.shutdown().unwrap();
    for d in &dirs {
        assert!(d.join(".kafka_cleanshutdown").exists());
        assert!(d.join("recovery-point-offset-checkpoint").exists());
    }
    // A delete the broker stopped before finishing is queued again at startup.
    std::fs::create_dir(dirs[0].join("orders-9.0123456789abcdef0123456789abcdef-delete")).unwrap();
    let (manager, report) = LogManager::open(&dirs, LogConfig::default(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 2);
    assert_eq!(report.partitions_recovered, 0);
    assert_eq!(report.deletions_queued, 1);
    assert_eq!(report.stray_dirs, 1);
    assert_eq!(dirs_ending(&dirs[0], "-delete"), 1);
    assert_eq!(remove_retired_dirs(manager.take_due_deletions(60_000)), 1);
    assert_eq!(dirs_ending(&dirs[0], "-stray"), 1);
    assert_eq!(report.clean_dirs, 2);
    assert!(!dirs[0].join(".kafka_cleanshutdown").exists());
    let log = manager.get(&TopicPartition::new("orders", 1)).unwrap();
    {
        let log = log.lock().unwrap();
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(log.high_watermark(), 2);
        assert_eq!(log.topic_id(), Some(fjord_common::Uuid([2; 16])));
        assert_eq!(log.latest_epoch(), Some(2));
    }
    // The next partition goes to the dir with fewer partitions, the first on a tie (each holds
    // one now).
    manager
        .create_log(
            TopicPartition::new("orders", 5),
            fjord_common::Uuid([5; 16]),
            LogConfig::default(),
            0,
        )
        .unwrap();
    assert!(dirs[0].join("orders-5").exists());
    manager.checkpoint().unwrap();
    drop(manager);
    // No clean shutdown this time: the logs are recovered.
    let (manager, report) = LogManager::open(&dirs, LogConfig::default(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 3);
    assert_eq!(report.partitions_recovered, 3);
    assert_eq!(manager.all_logs().len(), 3);
}

fn dirs_ending(dir: &std::path::Path, suffix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(suffix)
        })
        .count()
}

#[test]
fn a_retired_dir_name_fits_in_255_bytes_as_kafkas_does() {
    let root = tempfile::tempdir().unwrap();
    let (manager, _) =
        LogManager::open(&[root.path().to_path_buf()], LogConfig::default(), 0).unwrap();
    // The longest topic name Kafka allows.
    let tp = TopicPartition::new("t".repeat(249), 12);
    manager
        .create_log(
            tp.clone(),
            fjord_common::Uuid([1; 16]),
            LogConfig::default(),
            0,
        )
        .unwrap();
    manager.retire_log(&tp, Retire::Delete, 0).unwrap();
    let names: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-delete"))
        .collect();
    assert_eq!(names.len(), 1);
    // The topic is cut; the partition, the 32 hex digits and the suffix are whole.
    assert_eq!(names[0].len(), 255);
    assert!(names[0].starts_with("ttt") && names[0].contains("-12."));
}
