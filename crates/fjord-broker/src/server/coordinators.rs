//! The coordinators' background work: one task drives the timers of both kinds, and both
//! follow the leadership of their internal topics' partitions as the metadata image changes.

use std::sync::Arc;
use std::time::Duration;

use fjord_common::now_ms;
use fjord_config::BrokerConfig;
use tokio::sync::{watch, Notify};

use crate::api::versions::finalized_level;
use crate::api::Broker;
use crate::coordinator::runtime::earliest;

/// Drives the timers of both kinds of coordinator until the broker stops: each round ticks the
/// shards whose deadline has come, then sleeps to the earliest deadline left (at least 10 ms,
/// at most a second, as new work may arm earlier ones) or until woken.
pub(crate) async fn run_timers(
    broker: Arc<Broker>,
    deadline_moved: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut share_inits = broker.group_runtime().take_share_inits();
    loop {
        let now = now_ms();
        let next = earliest(
            earliest(
                broker.group_runtime().run_due_timers(now).await,
                broker.txns.run_due_txn_timers(now).await,
            ),
            broker.shares.expire_due(now),
        );
        let wait_ms = next.map_or(1000, |d| (d - now_ms()).clamp(10, 1000));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms as u64)) => {}
            _ = deadline_moved.notified() => {}
            _ = shutdown.changed() => return,
            Some(init) = next_share_init(&mut share_inits) => {
                // Off the timer's path: the share coordinators may take a while to answer.
                let broker = broker.clone();
                tokio::spawn(async move {
                    let initialized = broker.shares.initialize_share_state(&init).await;
                    broker.group_runtime().share_initialized(&init, initialized).await;
                });
            }
        }
    }
}

/// The next share initialization a group coordinator asked for (never, without the queue).
async fn next_share_init(
    inits: &mut Option<tokio::sync::mpsc::Receiver<fjord_group::ShareInit>>,
) -> Option<fjord_group::ShareInit> {
    match inits {
        Some(inits) => inits.recv().await,
        None => std::future::pending().await,
    }
}

/// Coordinators move with the leadership of their internal topics' partitions: shards of
/// partitions no longer led here (or led under a new epoch) are unloaded, those newly led
/// loaded.
pub(crate) fn follow_leadership(broker: &Arc<Broker>) {
    broker.group_runtime().unload_unled();
    if !broker.group_runtime().all_loaded() {
        if let Err(error) = broker.group_runtime().load_hosted() {
            tracing::warn!(%error, "cannot load a group coordinator shard");
        }
    }
    broker.share_partitions().drop_unled(broker.replicas());
    let share_state = &broker.share_state_runtime().shards;
    share_state.unload_unled();
    if !share_state.all_loaded() {
        if let Err(error) = share_state.load_hosted() {
            tracing::warn!(%error, "cannot load a share coordinator shard");
        }
    }
    broker.txn_runtime().shards.unload_unled();
    if !broker.txn_runtime().shards.all_loaded() {
        if let Err(error) = broker.txns.load_txn_coordinators() {
            tracing::warn!(%error, "cannot load a transaction coordinator shard");
        }
    }
}

/// The transaction coordinator's settings from the broker config.
pub(super) fn txn_config(config: &BrokerConfig) -> fjord_txn::TxnConfig {
    let settings = config.txn_coordinator();
    fjord_txn::TxnConfig {
        max_timeout_ms: settings.max_timeout_ms,
        transactional_id_expiration_ms: i64::from(settings.transactional_id_expiration_ms),
        // The coordinator's own aborts follow the version clients are told is finalized.
        transaction_version: finalized_level("transaction.version"),
    }
}

/// The group coordinator's settings from the broker config.
pub(super) fn group_config(config: &BrokerConfig) -> fjord_group::GroupConfig {
    let g = config.group_coordinator();
    fjord_group::GroupConfig {
        group_min_session_timeout_ms: g.min_session_timeout_ms,
        group_max_session_timeout_ms: g.max_session_timeout_ms,
        group_initial_rebalance_delay_ms: g.initial_rebalance_delay_ms,
        group_max_size: g.max_size,
        offsets_retention_minutes: g.offsets_retention_minutes,
        offsets_retention_check_interval_ms: g.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes: g.offset_metadata_max_bytes,
        offsets_commit_timeout_ms: g.offsets_commit_timeout_ms,
        group_consumer_session_timeout_ms: g.consumer_session_timeout_ms,
        group_consumer_min_session_timeout_ms: g.consumer_min_session_timeout_ms,
        group_consumer_max_session_timeout_ms: g.consumer_max_session_timeout_ms,
        group_consumer_heartbeat_interval_ms: g.consumer_heartbeat_interval_ms,
        group_consumer_min_heartbeat_interval_ms: g.consumer_min_heartbeat_interval_ms,
        group_consumer_max_heartbeat_interval_ms: g.consumer_max_heartbeat_interval_ms,
        group_consumer_max_size: g.consumer_max_size,
        group_consumer_assignors: g.consumer_assignors,
        group_share_max_size: config.share_groups().max_size,
    }
}
