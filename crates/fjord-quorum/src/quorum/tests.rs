//! End-to-end tests of the quorum over a real directory: restart, torn tails,
//! snapshots with purge, and concurrent proposals.

use std::path::Path;
use std::time::Duration;

use fjord_metadata::record::*;
use fjord_metadata::ImageError;
use openraft::LogIdOptionExt;

use super::*;
use crate::frame::Frames;
use crate::log_store::LOG_FILE;

const CLUSTER: &str = "test-cluster";

fn config() -> QuorumConfig {
    QuorumConfig {
        max_bytes_between_snapshots: 1 << 20,
        max_snapshot_interval: None,
        max_retained_log_bytes: u64::MAX,
        entries_kept_after_snapshot: 100,
        leader_timeout: Duration::from_secs(10),
        ..QuorumConfig::default()
    }
}

async fn start(dir: &Path) -> MetadataQuorum {
    MetadataQuorum::start_with_config(dir, 1, CLUSTER, QuorumPeers::alone(), config())
        .await
        .unwrap()
}

fn topic(name: &str, id: u8) -> MetadataRecord {
    MetadataRecord::Topic(TopicRecord {
        name: name.into(),
        topic_id: fjord_metadata::Uuid([id; 16]),
    })
}

fn partition(id: u8, partition_id: i32) -> MetadataRecord {
    MetadataRecord::Partition(PartitionRecord {
        partition_id,
        topic_id: fjord_metadata::Uuid([id; 16]),
        replicas: vec![1],
        isr: vec![1],
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

fn feature(name: &str, level: i16) -> MetadataRecord {
    MetadataRecord::FeatureLevel(FeatureLevelRecord {
        name: name.into(),
        level,
    })
}

#[tokio::test]
async fn propose_then_restart_gives_the_same_image() {
    let dir = tempfile::tempdir().unwrap();
    let quorum = start(dir.path()).await;
    let first = quorum
        .propose(vec![topic("orders", 1), partition(1, 0), partition(1, 1)])
        .await
        .unwrap();
    assert_eq!(quorum.image().offset(), first);
    let second = quorum
        .propose(vec![
            MetadataRecord::Config(ConfigRecord {
                resource_type: CONFIG_RESOURCE_TOPIC,
                resource_name: "orders".into(),
                name: "retention.ms".into(),
                value: Some("60000".into()),
            }),
            MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: 1,
                incarnation_id: fjord_metadata::Uuid([9; 16]),
                broker_epoch: first as i64,
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "localhost".into(),
                    port: 9092,
                    security_protocol: 0,
                }],
                rack: None,
                fenced: true,
                in_controlled_shutdown: false,
            }),
            MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: 1,
                broker_epoch: first as i64,
                next_producer_id: 1000,
            }),
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 1,
                topic_id: fjord_metadata::Uuid([1; 16]),
                isr: None,
                leader: Some(1),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }),
        ])
        .await
        .unwrap();
    assert!(second > first);
    let before = quorum.image();
    assert_eq!(before.offset(), second);
    assert_eq!(before.topic("orders").unwrap().partitions.len(), 2);
    assert_eq!(
        before.topic("orders").unwrap().partitions[1].leader_epoch,
        1
    );
    assert_eq!(before.next_producer_id(), 1000);
    quorum.shutdown().await.unwrap();

    let quorum = start(dir.path()).await;
    let after = quorum.image();
    assert_eq!(after.to_records(), before.to_records());
    // A lone voter resumes its leadership; were it to campaign, the new term
    // would add one empty entry.
    assert!(after.offset() >= before.offset());
    let third = quorum.propose(vec![topic("more", 2)]).await.unwrap();
    assert!(third > after.offset());
    quorum.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rejected_proposal_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let quorum = start(dir.path()).await;
    quorum.propose(vec![topic("a", 1)]).await.unwrap();
    let before = quorum.image();
    let err = quorum
        .propose(vec![topic("b", 2), partition(2, 0), partition(2, 5)])
        .await
        .unwrap_err();
    match err {
        MetadataError::Rejected { offset, source } => {
            assert!(offset > before.offset());
            assert!(matches!(source, ImageError::PartitionOutOfOrder { .. }));
        }
        other => panic!("unexpected {other}"),
    }
    let after = quorum.image();
    assert!(after.topic("b").is_none());
    assert_eq!(after.to_records(), before.to_records());
    assert!(matches!(
        quorum.propose(vec![]).await,
        Err(MetadataError::EmptyProposal)
    ));
    quorum.shutdown().await.unwrap();

    // The rejected entry stays in the log and is rejected again on replay.
    let quorum = start(dir.path()).await;
    assert_eq!(quorum.image().to_records(), before.to_records());
    quorum.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_directory_belongs_to_one_cluster_and_node() {
    let dir = tempfile::tempdir().unwrap();
    start(dir.path()).await.shutdown().await.unwrap();
    let err =
        MetadataQuorum::start_with_config(dir.path(), 1, "other", QuorumPeers::alone(), config())
            .await;
    assert!(matches!(
        err,
        Err(MetadataError::IdentityMismatch {
            field: "cluster id",
            ..
        })
    ));
    let err =
        MetadataQuorum::start_with_config(dir.path(), 2, CLUSTER, QuorumPeers::alone(), config())
            .await;
    assert!(matches!(
        err,
        Err(MetadataError::IdentityMismatch {
            field: "node id",
            ..
        })
    ));
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[tokio::test]
async fn a_torn_last_entry_is_dropped_at_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let quorum = start(dir.path()).await;
    quorum.propose(vec![topic("kept", 1)]).await.unwrap();
    quorum.propose(vec![feature("x", 1)]).await.unwrap();
    quorum.shutdown().await.unwrap();

    let log = std::fs::read(dir.path().join(LOG_FILE)).unwrap();
    let last = Frames::new(&log).last().unwrap();
    assert_eq!(last.end, log.len());
    for cut in last.position..last.end {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(copy.path().join(LOG_FILE))
            .unwrap();
        file.set_len(cut as u64).unwrap();
        drop(file);

        let quorum = start(copy.path()).await;
        let image = quorum.image();
        assert!(image.topic("kept").is_some(), "cut at {cut}");
        assert_eq!(image.feature_level("x"), None, "cut at {cut}");
        // The log is usable again after the cut.
        quorum.propose(vec![feature("x", 2)]).await.unwrap();
        assert_eq!(quorum.image().feature_level("x"), Some(2));
        quorum.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn snapshot_purge_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = QuorumConfig {
        max_bytes_between_snapshots: 500,
        entries_kept_after_snapshot: 2,
        ..config()
    };
    let quorum = MetadataQuorum::start_with_config(
        dir.path(),
        1,
        CLUSTER,
        QuorumPeers::alone(),
        config.clone(),
    )
    .await
    .unwrap();
    let mut last = 0;
    for i in 0..12u8 {
        last = quorum
            .propose(vec![topic(&format!("t{i}"), i + 1), partition(i + 1, 0)])
            .await
            .unwrap();
    }
    let metrics = quorum
        .raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.snapshot.index() >= Some(5) && m.purged.is_some(),
            "snapshot and purge",
        )
        .await
        .unwrap();
    let before = quorum.image();
    assert_eq!(before.offset(), last);
    assert_eq!(before.topics().count(), 12);
    quorum.shutdown().await.unwrap();

    // Purged entries are gone from the log file; the snapshot covers them.
    let mut log = crate::log_store::LogStore::open(dir.path()).unwrap();
    let state = openraft::storage::RaftLogStorage::get_log_state(&mut log)
        .await
        .unwrap();
    assert!(state.last_purged_log_id.index() >= metrics.purged.index());
    drop(log);

    let quorum =
        MetadataQuorum::start_with_config(dir.path(), 1, CLUSTER, QuorumPeers::alone(), config)
            .await
            .unwrap();
    assert_eq!(quorum.image().to_records(), before.to_records());
    quorum.shutdown().await.unwrap();
}

#[tokio::test]
async fn snapshots_follow_applied_bytes_and_retention_purges_what_they_cover() {
    let dir = tempfile::tempdir().unwrap();
    let config = QuorumConfig {
        max_bytes_between_snapshots: 1000,
        // Kept entries would hold the whole log; retention overrides them.
        entries_kept_after_snapshot: 1000,
        max_retained_log_bytes: 2000,
        ..config()
    };
    let quorum =
        MetadataQuorum::start_with_config(dir.path(), 1, CLUSTER, QuorumPeers::alone(), config)
            .await
            .unwrap();
    // Below the threshold nothing is snapshotted.
    quorum.propose(vec![topic("small", 1)]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(quorum.raft().metrics().borrow().snapshot, None);

    for i in 0..30u8 {
        quorum
            .propose(vec![topic(&format!("t{i}"), i + 2), partition(i + 2, 0)])
            .await
            .unwrap();
    }
    // With 1000 entries to keep, only retention purges any of these 32.
    let metrics = quorum
        .raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.purged.is_some(), "a purge")
        .await
        .unwrap();
    assert!(metrics.purged.index() <= metrics.snapshot.index());
    assert!(metrics.snapshot.index().unwrap() > 2);
    quorum.shutdown().await.unwrap();
}

#[tokio::test]
async fn concurrent_proposals_are_all_applied_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let quorum = Arc::new(start(dir.path()).await);

    let mut images = quorum.subscribe();
    let watcher = tokio::spawn(async move {
        let mut offsets = vec![images.borrow_and_update().offset()];
        while images.changed().await.is_ok() {
            let image = images.borrow_and_update().clone();
            offsets.push(image.offset());
            if image.topics().count() == 40 {
                break;
            }
        }
        offsets
    });

    let tasks: Vec<_> = (0..40u8)
        .map(|i| {
            let quorum = quorum.clone();
            tokio::spawn(async move {
                let offset = quorum
                    .propose(vec![topic(&format!("t{i}"), i + 1)])
                    .await
                    .unwrap();
                // Applied before propose returns.
                let image = quorum.image();
                assert!(image.offset() >= offset);
                assert!(image.topic(&format!("t{i}")).is_some());
                offset
            })
        })
        .collect();
    let mut offsets = Vec::new();
    for task in tasks {
        offsets.push(task.await.unwrap());
    }
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), 40, "every proposal got its own offset");

    let seen = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .unwrap()
        .unwrap();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(quorum.image().topics().count(), 40);

    let Ok(quorum) = Arc::try_unwrap(quorum) else {
        panic!("quorum still shared");
    };
    quorum.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_damaged_snapshot_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    start(dir.path()).await.shutdown().await.unwrap();
    for bytes in [
        &b"not a frame"[..],
        &crate::frame::encode(b"{\"meta\":1}").unwrap(),
    ] {
        std::fs::write(dir.path().join("snapshot"), bytes).unwrap();
        let err = MetadataQuorum::start_with_config(
            dir.path(),
            1,
            CLUSTER,
            QuorumPeers::alone(),
            config(),
        )
        .await;
        assert!(matches!(err, Err(MetadataError::Corrupt { .. })));
    }
}
