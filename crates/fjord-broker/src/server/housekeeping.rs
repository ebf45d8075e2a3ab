//! Periodic work on the hosted partitions: retention, offset checkpoints, producer-id expiry,
//! removal of deleted partitions' dirs.

use std::sync::Arc;
use std::time::Duration;

use fjord_common::now_ms;
use fjord_config::BrokerConfig;
use tokio::sync::watch;

use crate::replication::ReplicaManager;

/// Forgets producers idle for `producer.id.expiration.ms`, in every hosted partition.
pub(super) fn expire_producers(replicas: &ReplicaManager, config: &BrokerConfig) {
    let now = now_ms();
    for partition in replicas.all() {
        if let Ok(mut locked) = partition.try_lock() {
            locked.remove_expired_producers(now, config.producer_id_expiration_ms);
        }
    }
}

/// How often housekeeping looks for deleted partitions' dirs whose delay has passed (a lock and
/// a scan of a short list).
const DELETION_CHECK: Duration = Duration::from_secs(1);

/// Periodic work: retention, offset checkpoints, producer-id expiry
/// (`producer.id.expiration.check.interval.ms`), removal of deleted partitions' dirs once
/// `log.segment.delete.delay.ms` has passed.
pub(super) async fn run(
    replicas: Arc<ReplicaManager>,
    config: Arc<BrokerConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    let retention_every =
        Duration::from_millis(config.log_retention_check_interval_ms.max(1000) as u64);
    let checkpoint_every = Duration::from_secs(60);
    let producer_expiry_every =
        Duration::from_millis(config.producer_id_expiration_check_interval_ms.max(1) as u64);
    let mut retention = tokio::time::interval(retention_every);
    let mut checkpoint = tokio::time::interval(checkpoint_every);
    let mut deletions = tokio::time::interval(DELETION_CHECK);
    // Producers that expired while the broker was down went before it started serving.
    let mut producer_expiry = tokio::time::interval(producer_expiry_every);
    retention.tick().await;
    checkpoint.tick().await;
    producer_expiry.tick().await;
    loop {
        tokio::select! {
            // Both touch the disk (renames, fsyncs): off the runtime's worker threads, so that a
            // slow disk stalls this task and not the connections sharing a worker with it.
            _ = retention.tick() => {
                let replicas = replicas.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    let now = now_ms();
                    for partition in replicas.all() {
                        let result =
                            partition.try_lock().map(|mut log| log.delete_old_segments(now));
                        if let Ok(Err(error)) = result {
                            tracing::warn!(tp = %partition.tp, %error, "retention failed");
                        }
                    }
                })
                .await;
            }
            _ = producer_expiry.tick() => expire_producers(&replicas, &config),
            _ = deletions.tick() => {
                let due = replicas.log_manager().take_due_deletions(now_ms());
                if !due.is_empty() {
                    let _ = tokio::task::spawn_blocking(move || fjord_storage::remove_retired_dirs(due))
                        .await;
                }
            }
            _ = checkpoint.tick() => {
                let replicas = replicas.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(error) = replicas.log_manager().checkpoint() {
                        tracing::warn!(%error, "offset checkpoint failed");
                    }
                })
                .await;
            }
            _ = shutdown.changed() => return,
        }
    }
}
