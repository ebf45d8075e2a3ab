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
    loop {
        let now = now_ms();
        let next = earliest(
            broker.groups.run_due_timers(now).await,
            broker.run_due_txn_timers(now).await,
        );
        let wait_ms = next.map_or(1000, |d| (d - now_ms()).clamp(10, 1000));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms as u64)) => {}
            _ = deadline_moved.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Coordinators move with the leadership of their internal topics' partitions: shards of
/// partitions no longer led here (or led under a new epoch) are unloaded, those newly led
/// loaded.
pub(crate) fn follow_leadership(broker: &Arc<Broker>) {
    broker.groups.unload_unled();
    if !broker.groups.all_loaded() {
        if let Err(error) = broker.groups.load_hosted() {
            tracing::warn!(%error, "cannot load a group coordinator shard");
        }
    }
    broker.txns.shards.unload_unled();
    if !broker.txns.shards.all_loaded() {
        if let Err(error) = broker.load_txn_coordinators() {
            tracing::warn!(%error, "cannot load a transaction coordinator shard");
        }
    }
}

/// The transaction coordinator's settings from the broker config (Kafka's names and defaults).
pub(super) fn txn_config(config: &BrokerConfig) -> fjord_txn::TxnConfig {
    let mut txn = fjord_txn::TxnConfig::default();
    if let Some(v) = config
        .get("transaction.max.timeout.ms")
        .and_then(|v| v.trim().parse().ok())
    {
        txn.max_timeout_ms = v;
    }
    if let Some(v) = config
        .get("transactional.id.expiration.ms")
        .and_then(|v| v.trim().parse().ok())
    {
        txn.transactional_id_expiration_ms = v;
    }
    // The coordinator's own aborts follow the version clients are told is finalized.
    txn.transaction_version = finalized_level("transaction.version");
    txn
}

/// The group coordinator's settings from the broker config (Kafka's names and defaults).
pub(super) fn group_config(config: &BrokerConfig) -> fjord_group::GroupConfig {
    let mut group = fjord_group::GroupConfig::default();
    let int = |key: &str, default: i32| {
        config
            .get(key)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default)
    };
    group.group_min_session_timeout_ms = int(
        "group.min.session.timeout.ms",
        group.group_min_session_timeout_ms,
    );
    group.group_max_session_timeout_ms = int(
        "group.max.session.timeout.ms",
        group.group_max_session_timeout_ms,
    );
    group.group_initial_rebalance_delay_ms = int(
        "group.initial.rebalance.delay.ms",
        group.group_initial_rebalance_delay_ms,
    );
    group.group_max_size = int("group.max.size", group.group_max_size);
    group.offsets_retention_minutes =
        int("offsets.retention.minutes", group.offsets_retention_minutes);
    group.offsets_retention_check_interval_ms = config
        .get("offsets.retention.check.interval.ms")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(group.offsets_retention_check_interval_ms);
    group.offset_metadata_max_bytes =
        int("offset.metadata.max.bytes", group.offset_metadata_max_bytes);
    group.offsets_commit_timeout_ms =
        int("offsets.commit.timeout.ms", group.offsets_commit_timeout_ms);
    group.group_consumer_session_timeout_ms = int(
        "group.consumer.session.timeout.ms",
        group.group_consumer_session_timeout_ms,
    );
    group.group_consumer_min_session_timeout_ms = int(
        "group.consumer.min.session.timeout.ms",
        group.group_consumer_min_session_timeout_ms,
    );
    group.group_consumer_max_session_timeout_ms = int(
        "group.consumer.max.session.timeout.ms",
        group.group_consumer_max_session_timeout_ms,
    );
    group.group_consumer_heartbeat_interval_ms = int(
        "group.consumer.heartbeat.interval.ms",
        group.group_consumer_heartbeat_interval_ms,
    );
    group.group_consumer_min_heartbeat_interval_ms = int(
        "group.consumer.min.heartbeat.interval.ms",
        group.group_consumer_min_heartbeat_interval_ms,
    );
    group.group_consumer_max_heartbeat_interval_ms = int(
        "group.consumer.max.heartbeat.interval.ms",
        group.group_consumer_max_heartbeat_interval_ms,
    );
    group.group_consumer_max_size = int("group.consumer.max.size", group.group_consumer_max_size);
    if let Some(assignors) = config.get("group.consumer.assignors") {
        group.group_consumer_assignors = assignors
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
    }
    group
}
