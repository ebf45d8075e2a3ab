mod common;

use common::*;
use fjord_common::TopicPartition;
use fjord_storage::{LogConfig, LogManager};

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
        log.set_high_watermark(2);
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
        .delete_log(&TopicPartition::new("orders", 3))
        .unwrap();
    assert!(manager.get(&TopicPartition::new("orders", 3)).is_none());
    assert!(!dirs[1].join("orders-3").exists());
    manager.shutdown().unwrap();
    for d in &dirs {
        assert!(d.join(".kafka_cleanshutdown").exists());
        assert!(d.join("recovery-point-offset-checkpoint").exists());
    }
    // A half-finished delete is completed at startup.
    std::fs::create_dir(dirs[0].join("orders-9.0123456789abcdef0123456789abcdef-delete")).unwrap();
    let (manager, report) = LogManager::open(&dirs, LogConfig::default(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 3);
    assert_eq!(report.partitions_recovered, 0);
    assert_eq!(report.deleted_dirs_removed, 1);
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
    // The next partition goes to the dir with fewer partitions ("b" holds one now).
    manager
        .create_log(
            TopicPartition::new("orders", 5),
            fjord_common::Uuid([5; 16]),
            LogConfig::default(),
            0,
        )
        .unwrap();
    assert!(dirs[1].join("orders-5").exists());
    manager.checkpoint().unwrap();
    drop(manager);
    // No clean shutdown this time: the logs are recovered.
    let (manager, report) = LogManager::open(&dirs, LogConfig::default(), 0).unwrap();
    assert_eq!(report.partitions_loaded, 4);
    assert_eq!(report.partitions_recovered, 4);
    assert_eq!(manager.all_logs().len(), 4);
}
