//! The broker role, started in named phases once the metadata quorum serves: open the logs,
//! register with the active controller, host the partitions the image gives this broker, start
//! the cleaner and the flusher, load the coordinators, follow the metadata log, start the
//! replication tasks, and wait to be unfenced. `Serving` holds what runs and stops it in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_common::now_ms;
use fjord_config::{BrokerConfig, DynamicBrokerConfig};
use fjord_quorum::{MetadataQuorum, QuorumController};
use fjord_storage::log::LogConfig;
use fjord_storage::log_manager::LogManager;
use fjord_storage::LogCleaner;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::api::{Broker, BrokerParts};
use crate::coordinator::group::GroupRuntime;
use crate::coordinator::share_state::ShareStateRuntime;
use crate::coordinator::txn::TxnRuntime;
use crate::link::controller::ControllerLink;
use crate::link::Links;
use crate::metrics::Metrics;
use crate::net::tls::ListenersTls;
use crate::replication::{self, FlusherHandle, LogDirMover, ReplicaManager, ReplicationQuotas};
use crate::server::lifecycle::Membership;
use crate::server::{controller_link, coordinators, housekeeping, lifecycle, startup, BrokerError};

/// How often start-up reports that it still waits for the metadata quorum or its unfencing.
const WAIT_REPORT: Duration = Duration::from_secs(10);

/// Starts the broker role: waits for the metadata quorum, registers with the active controller,
/// waits to see its registration in its own image, then opens the partitions it leads and
/// publishes the broker in `ready`. None if shut down while waiting.
pub(super) async fn start_broker(
    config: &Arc<BrokerConfig>,
    cluster_id: String,
    quorum: Arc<MetadataQuorum>,
    local_controller: Option<Arc<QuorumController>>,
    (links, listener_tls): (&Arc<Links>, &Arc<ListenersTls>),
    (ready, metrics): (&watch::Sender<Option<Arc<Broker>>>, &Arc<Metrics>),
    shutdown: watch::Receiver<bool>,
) -> Result<Option<Serving>, BrokerError> {
    let log_manager = open_logs(config)?;
    let link = || controller_link(config, &quorum, local_controller.clone(), links);
    // Registration and heartbeats have a link of their own: a forwarded request waiting on a
    // slow commit must not hold up the heartbeat that keeps this broker unfenced. A heartbeat
    // gives up well inside the session (a controller cut off must not hold it either).
    let lifecycle_link = Arc::new(link().with_timeout(Duration::from_millis(
        (config.cluster.broker_session_timeout_ms as u64 / 3).max(500),
    )));
    let registered = register(
        config,
        &cluster_id,
        &quorum,
        &lifecycle_link,
        shutdown.clone(),
    );
    let Some(broker_epoch) = registered.await? else {
        return Ok(None);
    };
    let replicas = Arc::new(
        ReplicaManager::new(config.node_id, config.clone(), log_manager)
            .with_metrics(metrics.clone()),
    );
    replicas
        .apply_image(&quorum.image(), now_ms())
        .map_err(startup)?;
    let (node, default) = quorum.image().broker_config_layers(config.node_id);
    let initial = DynamicBrokerConfig::new(node, default);
    let storage = Storage::start(config, &replicas, &initial)?;
    let deadline_moved = Arc::new(Notify::new());
    let (groups, txns, share_state) =
        start_coordinators(config, &replicas, &storage.flusher, &deadline_moved)?;
    let broker = Arc::new(Broker::new(BrokerParts {
        config: config.clone(),
        cluster_id,
        quorum: quorum.clone(),
        controller: Arc::new(link()),
        broker_epoch,
        replicas: replicas.clone(),
        flusher: storage.flusher.clone(),
        groups: groups.clone(),
        txns: txns.clone(),
        share_state: share_state.clone(),
        log_dir_mover: storage.log_dir_mover.clone(),
        replication_quotas: storage.replication_quotas.clone(),
        links: links.clone(),
        listener_tls: listener_tls.clone(),
    }));
    // Transactions prepared before a restart get their markers; open ones time out.
    broker.txns.load_txn_coordinators().map_err(startup)?;
    share_state.shards.load_hosted().map_err(startup)?;
    let tasks = Tasks::start(
        &broker,
        &quorum,
        &storage,
        initial,
        deadline_moved,
        Arc::new(link().with_timeout(Duration::from_secs(10))),
        &shutdown,
    );
    // Producers that expired while the broker was down go before the first request, as Kafka
    // drops them when it loads producer state.
    housekeeping::expire_producers(&replicas, config);

    // Everything is loaded: heartbeats ask to be unfenced, and the broker serves once the
    // controller has unfenced it and this node applied that (it then leads its partitions).
    let (membership_tx, membership) = watch::channel(Membership::Fenced);
    let (stopping, stopping_rx) = watch::channel(false);
    let heartbeats = tokio::spawn(lifecycle::heartbeat(
        lifecycle_link,
        quorum.clone(),
        config.clone(),
        broker_epoch,
        membership_tx,
        stopping_rx,
        replicas.metrics().clone(),
    ));
    await_unfencing(
        config,
        &replicas,
        broker_epoch,
        membership.clone(),
        shutdown,
    )
    .await;
    ready.send_replace(Some(broker.clone()));
    Ok(Some(Serving {
        heartbeats,
        stopping,
        membership,
        broker,
        groups,
        storage,
        tasks,
    }))
}

/// The broker role's background tasks.
struct Tasks {
    /// Follows the metadata log.
    image_task: JoinHandle<()>,
    housekeeping: JoinHandle<()>,
    /// The timers of both kinds of coordinator.
    coordinator_timers: JoinHandle<()>,
    /// The followers' fetchers; they stop on shutdown, before the flusher.
    replica_fetchers: JoinHandle<()>,
    /// The leader's ISR checks (AlterPartition).
    isr_manager: JoinHandle<()>,
}

impl Tasks {
    /// Phase 5: the coordinators' timers, following the metadata log, housekeeping, the
    /// follower fetchers and the ISR manager (with `isr_link`: ISR changes go on a link of
    /// their own, as heartbeats do).
    fn start(
        broker: &Arc<Broker>,
        quorum: &Arc<MetadataQuorum>,
        storage: &Storage,
        initial: DynamicBrokerConfig,
        deadline_moved: Arc<Notify>,
        isr_link: Arc<ControllerLink>,
        shutdown: &watch::Receiver<bool>,
    ) -> Tasks {
        let (config, replicas) = (&broker.node.config, &storage.replicas);
        Tasks {
            coordinator_timers: tokio::spawn(coordinators::run_timers(
                broker.clone(),
                deadline_moved,
                shutdown.clone(),
            )),
            image_task: follow_metadata(config, quorum, broker, storage, initial),
            housekeeping: tokio::spawn(housekeeping::run(
                replicas.clone(),
                config.clone(),
                shutdown.clone(),
            )),
            replica_fetchers: replication::fetcher::start(
                replicas.clone(),
                quorum.clone(),
                config.clone(),
                broker.node.links.clone(),
                storage.flusher.clone(),
                storage.replication_quotas.clone(),
                shutdown.clone(),
            ),
            isr_manager: replication::isr_manager::start(
                replicas.clone(),
                quorum.clone(),
                isr_link,
                config.clone(),
                shutdown.clone(),
            ),
        }
    }
}

/// Phase 1: every partition log under `log.dirs`, recovered where the last shutdown was not
/// clean.
fn open_logs(config: &BrokerConfig) -> Result<LogManager, BrokerError> {
    let started = Instant::now();
    let defaults = LogConfig {
        file_delete_delay_ms: config.log_segment_delete_delay_ms,
        ..LogConfig::default()
    };
    let (log_manager, report) =
        LogManager::open(&config.log_dirs, defaults, now_ms()).map_err(startup)?;
    tracing::info!(
        partitions = report.partitions_loaded,
        recovered = report.partitions_recovered,
        bytes_truncated = report.bytes_truncated,
        clean_shutdown_dirs = report.clean_dirs,
        log_dir_moves_resumed = report.moves_resumed,
        log_dir_moves_completed = report.moves_completed,
        deletions_queued = report.deletions_queued,
        stray_dirs = report.stray_dirs,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "logs loaded"
    );
    Ok(log_manager)
}

/// Phase 2: registration with the active controller, once the quorum has a leader; returns
/// the broker epoch once this node's image shows the registration (it is then at least as new
/// as the controller's when it registered us). None if shut down while waiting.
async fn register(
    config: &Arc<BrokerConfig>,
    cluster_id: &str,
    quorum: &MetadataQuorum,
    link: &Arc<ControllerLink>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Option<i64>, BrokerError> {
    // A voter waits for the quorum to elect; a learner hears of the leader only once it is
    // added, which its registration (sent to the voters in turn) does.
    while config.cluster.controller && quorum.caught_up(WAIT_REPORT).await.is_err() {
        if *shutdown.borrow() {
            return Ok(None);
        }
        if let Some(fatal) = quorum.fatal_error() {
            return Err(startup(format!("the metadata log stopped: {fatal}")));
        }
        tracing::info!("waiting for the metadata quorum to elect a leader");
    }
    let broker_epoch = match lifecycle::register(link, config, cluster_id, &shutdown).await {
        Ok(Some(epoch)) => epoch,
        Ok(None) => return Ok(None),
        Err(error) => return Err(startup(error)),
    };
    let mut images = quorum.subscribe();
    loop {
        let registered = images
            .borrow_and_update()
            .broker(config.node_id)
            .is_some_and(|b| b.broker_epoch >= broker_epoch);
        if registered {
            break;
        }
        tokio::select! {
            changed = images.changed() => if changed.is_err() { return Ok(None) },
            _ = shutdown.changed() => return Ok(None),
        }
    }
    tracing::info!(broker_epoch, "registered with the controller");
    Ok(Some(broker_epoch))
}

/// The hosted logs and what works on them beside requests: the partitions, the cleaner
/// (compaction, on its own threads), the flusher (group commit of fsyncs), the log-dir mover and
/// the replication throttles.
struct Storage {
    replicas: Arc<ReplicaManager>,
    cleaner: Arc<LogCleaner>,
    flusher: FlusherHandle,
    flusher_task: JoinHandle<()>,
    log_dir_mover: Arc<LogDirMover>,
    replication_quotas: Arc<ReplicationQuotas>,
}

impl Storage {
    /// Phase 3, with the dynamic broker configs the image holds (`initial`).
    fn start(
        config: &BrokerConfig,
        replicas: &Arc<ReplicaManager>,
        initial: &DynamicBrokerConfig,
    ) -> Result<Storage, BrokerError> {
        let settings = config.merged_settings(initial);
        let cleaner_logs = replicas.clone();
        let cleaner = Arc::new(
            LogCleaner::start(
                cleaner_config(&settings).map_err(startup)?,
                &config.log_dirs,
                Box::new(move || cleaner_logs.log_manager().logs_by_dir()),
            )
            .map_err(startup)?,
        );
        let failing = replicas.clone();
        let (flusher, flusher_task) = replication::flusher::start(
            Arc::new(move |dir: &std::path::Path, error: &str| failing.storage_failure(dir, error)),
            replicas.metrics().clone(),
        );
        // Moves between log dirs, including those a restart interrupted.
        let log_dir_mover = Arc::new(
            LogDirMover::start(replicas.clone(), settings.log_dir_move_rate())
                .map_err(|e| startup(format!("cannot start the log dir mover: {e}")))?,
        );
        let replication_quotas = Arc::new(ReplicationQuotas::new(
            &config.replication(),
            settings.replication_throttled_rates(),
        ));
        Ok(Storage {
            replicas: replicas.clone(),
            cleaner,
            flusher,
            flusher_task,
            log_dir_mover,
            replication_quotas,
        })
    }
}

/// The coordinator runtimes: group, transaction, share.
type Coordinators = (Arc<GroupRuntime>, Arc<TxnRuntime>, Arc<ShareStateRuntime>);

/// Phase 4: the group, transaction and share coordinators, on the partitions of their internal
/// topics this broker leads; they share one timer task, woken through `deadline_moved`. Groups
/// and offsets committed before a restart are back before the first request.
fn start_coordinators(
    config: &BrokerConfig,
    replicas: &Arc<ReplicaManager>,
    flusher: &FlusherHandle,
    deadline_moved: &Arc<Notify>,
) -> Result<Coordinators, BrokerError> {
    let groups = Arc::new(GroupRuntime::new(
        coordinators::group_config(config),
        config.offsets_topic().num_partitions,
        replicas.clone(),
        flusher.clone(),
        deadline_moved.clone(),
    ));
    let started = Instant::now();
    groups.load_hosted().map_err(startup)?;
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "group coordinators loaded"
    );
    let txns = Arc::new(TxnRuntime::new(
        coordinators::txn_config(config),
        config.transaction_state_topic().num_partitions,
        replicas.clone(),
        flusher.clone(),
        deadline_moved.clone(),
    ));
    let share_state = Arc::new(ShareStateRuntime::new(
        config.share_updates_per_snapshot(),
        config.share_state_topic().num_partitions,
        replicas.clone(),
        flusher.clone(),
        deadline_moved.clone(),
    ));
    Ok((groups, txns, share_state))
}

/// Follows the metadata log. Each new image brings the hosted partitions and the
/// coordinators in line, and changed dynamic broker configs reach what they configure.
fn follow_metadata(
    config: &Arc<BrokerConfig>,
    quorum: &MetadataQuorum,
    broker: &Arc<Broker>,
    storage: &Storage,
    initial: DynamicBrokerConfig,
) -> JoinHandle<()> {
    let mut images = quorum.subscribe();
    let broker = broker.clone();
    let replicas = storage.replicas.clone();
    let cleaner = storage.cleaner.clone();
    let mover = storage.log_dir_mover.clone();
    let quotas = storage.replication_quotas.clone();
    let config = config.clone();
    tokio::spawn(async move {
        let mut dynamic = initial;
        while images.changed().await.is_ok() {
            let image = images.borrow_and_update().clone();
            if let Err(error) = replicas.apply_image(&image, now_ms()) {
                tracing::error!(%error, "cannot apply a metadata change");
            }
            coordinators::follow_leadership(&broker);
            let (node, default) = image.broker_config_layers(config.node_id);
            let now = DynamicBrokerConfig::new(node, default);
            if now != dynamic {
                apply_dynamic_broker_config(&config, &dynamic, &now, &cleaner, &mover, &quotas)
                    .await;
                dynamic = now;
            }
        }
    })
}

/// Phase 6: waits until the controller has unfenced this broker (at `broker_epoch`) and this
/// node applied that, or until it is replaced or asked to stop (`run` then stops what started,
/// in order).
async fn await_unfencing(
    config: &BrokerConfig,
    replicas: &ReplicaManager,
    broker_epoch: i64,
    mut membership: watch::Receiver<Membership>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut reported = Instant::now();
    loop {
        let unfenced = replicas
            .applied_image()
            .and_then(|image| {
                image
                    .broker(config.node_id)
                    .map(|b| !b.fenced && b.broker_epoch == broker_epoch)
            })
            .unwrap_or(false);
        let now = *membership.borrow();
        if unfenced && now == Membership::Unfenced {
            tracing::info!(broker_epoch, "unfenced by the controller");
            return;
        }
        if *shutdown.borrow() || matches!(now, Membership::Replaced | Membership::ShutDown) {
            return;
        }
        if reported.elapsed() > WAIT_REPORT {
            tracing::info!("waiting for the controller to unfence this broker");
            reported = Instant::now();
        }
        tokio::select! {
            _ = membership.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The broker role's parts, running; `stop` shuts them down in order.
pub(super) struct Serving {
    broker: Arc<Broker>,
    pub(super) groups: Arc<GroupRuntime>,
    storage: Storage,
    tasks: Tasks,
    /// Heartbeats to the controller; told to ask for shutdown through `stopping`.
    heartbeats: JoinHandle<()>,
    stopping: watch::Sender<bool>,
    pub(super) membership: watch::Receiver<Membership>,
}

impl Serving {
    /// The log cleaner, for the metrics of its work.
    pub(super) fn cleaner(&self) -> &Arc<LogCleaner> {
        &self.storage.cleaner
    }

    /// Asks the controller to let this broker go and waits until it has moved this broker's
    /// leadership away (or gives up, bounded); the heartbeats end with it.
    pub(super) async fn controlled_shutdown(&self) {
        if self.heartbeats.is_finished() {
            return;
        }
        tracing::info!("controlled shutdown: asking the controller to move leadership away");
        self.stopping.send_replace(true);
        let mut membership = self.membership.clone();
        let _ = membership
            .wait_for(|m| matches!(m, Membership::ShutDown | Membership::Replaced))
            .await;
    }

    pub(super) async fn stop(self) -> Result<(), BrokerError> {
        let Serving {
            broker,
            groups,
            storage,
            tasks,
            heartbeats,
            ..
        } = self;
        let Tasks {
            image_task,
            housekeeping,
            coordinator_timers,
            replica_fetchers,
            isr_manager,
        } = tasks;
        heartbeats.abort();
        let _ = replica_fetchers.await;
        // A request under way to the controller is not waited for: the change stays pending.
        isr_manager.abort();
        let _ = isr_manager.await;
        let _ = housekeeping.await;
        let _ = coordinator_timers.await;
        // Marker senders stop with their shards.
        broker.txn_runtime().shards.close();
        groups.close();
        drop(groups);
        image_task.abort();
        drop(broker);
        let Storage {
            replicas,
            cleaner,
            flusher,
            flusher_task,
            log_dir_mover,
            ..
        } = storage;
        drop(flusher);
        let _ = tokio::time::timeout(Duration::from_secs(30), flusher_task).await;
        // A pass under way stops before its next swap; the cleaner holds the logs until then. A
        // move's step under way finishes (a swap included).
        let _ = tokio::task::spawn_blocking(move || {
            cleaner.shutdown();
            log_dir_mover.shutdown();
        })
        .await;
        replicas.log_manager().shutdown().map_err(startup)?;
        Ok(())
    }
}

/// Dynamic broker configs changed: the cleaner takes its new settings (its threads restart), the
/// log dir mover its rate, the replication throttles their bounds, topic defaults already reached the logs through `apply_image`, and keys
/// fjord accepts without acting on them are named in a warning.
async fn apply_dynamic_broker_config(
    config: &BrokerConfig,
    before: &DynamicBrokerConfig,
    after: &DynamicBrokerConfig,
    cleaner: &Arc<LogCleaner>,
    mover: &LogDirMover,
    quotas: &ReplicationQuotas,
) {
    let (old, new) = (config.merged(before), config.merged(after));
    let (old_settings, settings) = (
        fjord_config::BrokerSettings::from_values(&old),
        fjord_config::BrokerSettings::from_values(&new),
    );
    let rate = settings.log_dir_move_rate();
    if rate != old_settings.log_dir_move_rate() {
        tracing::info!(max_bytes_per_second = rate, "log dir mover reconfigured");
        mover.set_max_bytes_per_second(rate);
    }
    let (old_rates, new_rates) = (
        old_settings.replication_throttled_rates(),
        settings.replication_throttled_rates(),
    );
    for (side, quota, before, after) in [
        ("leader", &quotas.leader, old_rates.0, new_rates.0),
        ("follower", &quotas.follower, old_rates.1, new_rates.1),
    ] {
        if after != before {
            tracing::info!(side, bytes_per_second = after, "replication throttle set");
            quota.set_bound(after);
        }
    }
    for (key, value) in &new {
        if old.get(key) != Some(value) && fjord_config::not_acted_upon(key) {
            tracing::warn!(
                key,
                value,
                "dynamic config accepted but not acted upon by fjord yet"
            );
        }
    }
    match cleaner_config(&settings) {
        Ok(wanted) if wanted != cleaner.config() => {
            tracing::info!(?wanted, "log cleaner reconfigured");
            let cleaner = cleaner.clone();
            let result = tokio::task::spawn_blocking(move || cleaner.reconfigure(wanted)).await;
            if let Ok(Err(error)) = result {
                tracing::error!(%error, "cannot restart the log cleaner");
            }
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "dynamic cleaner settings ignored"),
    }
}

/// The log cleaner's settings, checked as at start, as fjord-storage's cleaner takes them
/// (fjord-config does not depend on storage).
fn cleaner_config(
    settings: &fjord_config::BrokerSettings,
) -> Result<fjord_storage::CleanerConfig, fjord_config::ConfigError> {
    settings.cleaner_config().map(storage_cleaner_config)
}

fn storage_cleaner_config(config: fjord_config::CleanerConfig) -> fjord_storage::CleanerConfig {
    // Taken apart, so that a setting added to either side is a compile error here.
    let fjord_config::CleanerConfig {
        enable,
        threads,
        dedupe_buffer_size,
        dedupe_buffer_load_factor,
        io_buffer_size,
        io_max_bytes_per_second,
        backoff_ms,
    } = config;
    fjord_storage::CleanerConfig {
        enable,
        threads,
        dedupe_buffer_size,
        dedupe_buffer_load_factor,
        io_buffer_size,
        io_max_bytes_per_second,
        backoff_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleaner_gets_the_configured_settings() {
        // fjord-config checks log.cleaner.dedupe.buffer.size by the key map's real entry size.
        assert_eq!(
            fjord_config::CLEANER_BYTES_PER_KEY,
            fjord_storage::cleaner::offset_map::BYTES_PER_ENTRY
        );
        // Kafka's defaults on both sides.
        let (defaults, _) = BrokerConfig::from_properties(&Default::default()).unwrap();
        assert_eq!(
            storage_cleaner_config(defaults.cleaner),
            fjord_storage::CleanerConfig::default()
        );
        let merged = [
            ("log.cleaner.threads", "3"),
            ("log.cleaner.backoff.ms", "7"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let cleaner = cleaner_config(&fjord_config::BrokerSettings::from_values(&merged)).unwrap();
        assert_eq!((cleaner.threads, cleaner.backoff_ms), (3, 7));
        let tiny = [("log.cleaner.dedupe.buffer.size", "24")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert!(cleaner_config(&fjord_config::BrokerSettings::from_values(&tiny)).is_err());
    }
}
