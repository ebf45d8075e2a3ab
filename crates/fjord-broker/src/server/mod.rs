//! Start-up and shutdown: `run` opens the log dirs, starts the metadata quorum (and the
//! controller on a controller node), serves every listener, starts the broker role in phases
//! (logs, registration, partitions, coordinators, replication, unfencing) and stops it all in
//! order. Registration and heartbeats are in `lifecycle`, the dynamic quorum's joining in
//! `dynamic_quorum`, periodic work in `housekeeping`.

mod coordinators;
mod dynamic_quorum;
mod housekeeping;
mod lifecycle;
mod log_dirs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_common::now_ms;
use fjord_controller::{Controller, QuorumController};
use fjord_metadata::{MetadataQuorum, QuorumConfig, QuorumPeers};
use fjord_storage::log::LogConfig;
use fjord_storage::log_manager::LogManager;
use fjord_storage::LogCleaner;
use tokio::sync::watch;

use crate::api::controller::ControllerDispatch;
use crate::api::{Broker, BrokerDispatch};
use crate::link::controller::{ControllerAddresses, ControllerLink};
use crate::net::NetworkConfig;
use crate::replication::{self, LogDirMover, ReplicaManager, ReplicationQuotas};
use fjord_config::BrokerConfig;
use log_dirs::check_log_dirs;

/// The directory of the metadata log inside the metadata log dir, named as in KRaft.
pub const METADATA_DIR_NAME: &str = "__cluster_metadata-0";

/// How long the controller waits for one decision's records to commit before answering
/// REQUEST_TIMED_OUT: a client's default request timeout.
const CONTROLLER_COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the broker could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    Startup(String),
}

fn startup(message: impl std::fmt::Display) -> BrokerError {
    BrokerError::Startup(message.to_string())
}

/// Runs the broker until `shutdown` turns true, then stops accepting, finishes in-flight
/// requests, flushes every log, and marks the clean shutdown.
pub async fn run(
    config: BrokerConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), BrokerError> {
    let config = Arc::new(config);
    let started = Instant::now();
    let dynamic = if config.cluster.bootstrap_servers.is_empty() {
        None
    } else {
        match dynamic_quorum::how_to_start(&config, &mut shutdown).await? {
            Some(start) => Some(start),
            None => return Ok(()),
        }
    };
    let (cluster_id, metadata_dir_id) =
        check_log_dirs(&config, dynamic.as_ref().and_then(|d| d.cluster_id.clone()))?;
    let metadata_dir_id = metadata_dir_id
        .and_then(|id| id.parse::<fjord_common::Uuid>().ok())
        .unwrap_or(fjord_common::Uuid::ZERO);
    tracing::info!(node_id = config.node_id, %cluster_id, log_dirs = ?config.log_dirs, "starting fjord");

    let metadata_dir = config.metadata_log_dir.join(METADATA_DIR_NAME);
    let peers = QuorumPeers {
        voters: config
            .cluster
            .voters
            .iter()
            .map(|v| (v.id as u64, format!("{}:{}", v.host, v.port)))
            .collect(),
        dynamic: dynamic.as_ref().map(|d| d.quorum(&config, metadata_dir_id)),
    };
    let quorum = MetadataQuorum::start_with_config(
        &metadata_dir,
        config.node_id as u64,
        &cluster_id,
        peers,
        QuorumConfig {
            max_bytes_between_snapshots: config.cluster.metadata_max_bytes_between_snapshots,
            max_snapshot_interval: u64::try_from(config.cluster.metadata_max_snapshot_interval_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            max_retained_log_bytes: u64::try_from(config.cluster.metadata_max_retention_bytes)
                .unwrap_or(u64::MAX),
            ..QuorumConfig::default()
        },
    )
    .await
    .map_err(|e| startup(format!("metadata log at {}: {e}", metadata_dir.display())))?;
    let quorum = Arc::new(quorum);
    let (controller, controller_task) = if config.cluster.controller {
        let (controller, task) = QuorumController::start(
            Controller::new(config.clone(), cluster_id.clone()),
            quorum.clone(),
            CONTROLLER_COMMIT_TIMEOUT,
        );
        (Some(Arc::new(controller)), Some(task))
    } else {
        (None, None)
    };

    // Every listener serves from here on: voters need each other's raft RPCs to elect a leader,
    // and a learner needs the leader's to catch up, before this node can register as a broker.
    // Broker requests wait (their connections are refused) until the broker is up.
    let network_config = NetworkConfig {
        socket_request_max_bytes: config.socket_request_max_bytes,
        connections_max_idle_ms: config.connections_max_idle_ms,
    };
    let (ready, broker_rx) = watch::channel::<Option<Arc<Broker>>>(None);
    // Listeners stop after a controlled shutdown has moved leadership away (clients keep being
    // answered NOT_LEADER_OR_FOLLOWER meanwhile and find the new leaders).
    let (stop_listening, listening) = watch::channel(false);
    let mut servers = Vec::new();
    for listener in &config.listeners {
        let address = format!("{}:{}", listener.host, listener.port);
        let socket = tokio::net::TcpListener::bind(&address).await.map_err(|e| {
            startup(format!(
                "cannot listen on {} ({address}): {e}",
                listener.name
            ))
        })?;
        tracing::info!(listener = %listener.name, address = %socket.local_addr().map(|a| a.to_string()).unwrap_or(address), "listening");
        let dispatch: Arc<dyn crate::net::Dispatch> = match (
            &controller,
            config.cluster.is_controller_listener(&listener.name),
        ) {
            (Some(controller), true) => Arc::new(ControllerDispatch {
                quorum: quorum.clone(),
                controller: controller.clone(),
                cluster_id: cluster_id.clone(),
                kraft_version: config.cluster.kraft_version(),
            }),
            _ => Arc::new(BrokerDispatch {
                broker: broker_rx.clone(),
                quorum: quorum.clone(),
                listener: listener.name.clone(),
                // A learner takes raft RPCs there; voters of a static quorum take them on their
                // controller listeners, and a node alone takes none. A controller of a dynamic
                // quorum takes them on both: as an observer it may be reached at the inter-broker
                // listener its broker registered.
                carries_raft: (!config.cluster.controller
                    || !config.cluster.bootstrap_servers.is_empty())
                    && listener.name == config.cluster.inter_broker_listener_name,
            }),
        };
        servers.push(tokio::spawn(crate::net::serve(
            socket,
            dispatch,
            network_config.clone(),
            listening.clone(),
        )));
    }

    // A controller of a dynamic quorum makes itself known to the leader, and asks to vote if
    // `controller.quorum.auto.join.enable` says so.
    let joining = (dynamic.is_some() && config.cluster.controller).then(|| {
        tokio::spawn(dynamic_quorum::join(
            Arc::new(controller_link(&config, &quorum, controller.clone())),
            quorum.clone(),
            config.clone(),
            cluster_id.clone(),
            metadata_dir_id,
            shutdown.clone(),
        ))
    });

    // The broker's own stop signal: the process's shutdown, or this broker's registration being
    // replaced by another process (then the broker's tasks must stop without a SIGTERM).
    let (stop_broker, broker_stopping) = watch::channel(false);
    let mut forwarded = shutdown.clone();
    let stop_on_shutdown = stop_broker.clone();
    tokio::spawn(async move {
        if forwarded.wait_for(|stop| *stop).await.is_ok() {
            stop_on_shutdown.send_replace(true);
        }
    });
    let serving = if config.cluster.broker {
        start_broker(
            &config,
            cluster_id,
            quorum.clone(),
            controller.clone(),
            &ready,
            broker_stopping,
        )
        .await?
    } else {
        None
    };
    if serving.is_some() || !config.cluster.broker {
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "started");
    }
    // Requests that waited for a broker that never started are refused now.
    let ready = serving.is_some().then_some(ready);
    drop(broker_rx);

    let mut replaced = None;
    match &serving {
        Some(serving) => {
            let mut membership = serving.membership.clone();
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => {}
                _ = membership.wait_for(|m| *m == lifecycle::Membership::Replaced) => {
                    replaced = Some(startup(format!(
                        "stopping: another process registered node.id {} after this one's session expired",
                        config.node_id
                    )));
                }
            }
            serving.controlled_shutdown().await;
            stop_broker.send_replace(true);
            // Members waiting in a rebalance go to find the coordinator anew (on another broker
            // once leadership moved) rather than wait for it here until their requests time out.
            serving.groups.refuse_parked(|_| true);
        }
        None => {
            let _ = shutdown.wait_for(|stop| *stop).await;
        }
    }
    stop_listening.send_replace(true);
    if let Some(joining) = joining {
        joining.abort();
        let _ = joining.await;
    }
    // In-flight requests waiting on this node's controller (a commit a lost quorum cannot make)
    // are answered now rather than after their timeouts.
    if let Some(controller) = &controller {
        controller.stop();
    }
    tracing::info!("shutting down: no new connections; finishing in-flight requests");
    for server in servers {
        let _ = server.await;
    }
    // The broker's last holders are gone with the connections; this one goes before its parts.
    drop(ready);
    if let Some(serving) = serving {
        serving.stop().await?;
    }
    drop(controller);
    if let Some(task) = controller_task {
        let _ = task.await;
    }
    match Arc::try_unwrap(quorum) {
        Ok(quorum) => quorum.shutdown().await.map_err(startup)?,
        Err(_) => tracing::warn!("metadata quorum still in use at shutdown"),
    }
    if let Some(error) = replaced {
        return Err(error);
    }
    tracing::info!("clean shutdown complete");
    Ok(())
}

/// The broker role's parts, running; `stop` shuts them down in order.
struct Serving {
    broker: Arc<Broker>,
    replicas: Arc<ReplicaManager>,
    groups: Arc<crate::coordinator::group::GroupRuntime>,
    flusher: replication::FlusherHandle,
    flusher_task: tokio::task::JoinHandle<()>,
    cleaner: Arc<LogCleaner>,
    log_dir_mover: Arc<LogDirMover>,
    image_task: tokio::task::JoinHandle<()>,
    housekeeping: tokio::task::JoinHandle<()>,
    /// The timers of both kinds of coordinator.
    coordinator_timers: tokio::task::JoinHandle<()>,
    /// The followers' fetchers; they stop on shutdown, before the flusher.
    replica_fetchers: tokio::task::JoinHandle<()>,
    /// The leader's ISR checks (AlterPartition).
    isr_manager: tokio::task::JoinHandle<()>,
    /// Heartbeats to the controller; told to ask for shutdown through `stopping`.
    heartbeats: tokio::task::JoinHandle<()>,
    stopping: watch::Sender<bool>,
    membership: watch::Receiver<lifecycle::Membership>,
}

impl Serving {
    /// Asks the controller to let this broker go and waits until it has moved this broker's
    /// leadership away (or gives up, bounded); the heartbeats end with it.
    async fn controlled_shutdown(&self) {
        if self.heartbeats.is_finished() {
            return;
        }
        tracing::info!("controlled shutdown: asking the controller to move leadership away");
        self.stopping.send_replace(true);
        let mut membership = self.membership.clone();
        let _ = membership
            .wait_for(|m| {
                matches!(
                    m,
                    lifecycle::Membership::ShutDown | lifecycle::Membership::Replaced
                )
            })
            .await;
    }

    async fn stop(self) -> Result<(), BrokerError> {
        let Serving {
            broker,
            replicas,
            groups,
            flusher,
            flusher_task,
            cleaner,
            log_dir_mover,
            image_task,
            housekeeping,
            coordinator_timers,
            heartbeats,
            replica_fetchers,
            isr_manager,
            ..
        } = self;
        heartbeats.abort();
        let _ = replica_fetchers.await;
        // A request under way to the controller is not waited for: the change stays pending.
        isr_manager.abort();
        let _ = isr_manager.await;
        let _ = housekeeping.await;
        let _ = coordinator_timers.await;
        // Marker senders stop with their shards.
        broker.txns.shards.close();
        broker.groups.close();
        drop(groups);
        image_task.abort();
        drop(broker);
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

/// A way to the active controller: known voters' or bootstrap servers' controller listeners.
fn controller_link(
    config: &BrokerConfig,
    quorum: &Arc<MetadataQuorum>,
    local: Option<Arc<QuorumController>>,
) -> ControllerLink {
    let bootstrap = if config.cluster.voters.is_empty() {
        config.cluster.bootstrap_servers.clone()
    } else {
        config
            .cluster
            .voters
            .iter()
            .map(|v| format!("{}:{}", v.host, v.port))
            .collect()
    };
    let own = config
        .cluster
        .controller
        .then(|| dynamic_quorum::own_controller_address(config))
        .flatten();
    ControllerLink::new(
        config.node_id,
        quorum.clone(),
        local,
        ControllerAddresses { bootstrap, own },
    )
}

/// How often start-up reports that it still waits for the metadata quorum.
const QUORUM_WAIT_REPORT: Duration = Duration::from_secs(10);

/// Starts the broker role: waits for the metadata quorum, registers with the active controller,
/// waits to see its registration in its own image, then opens the partitions it leads and
/// publishes the broker in `ready`. None if shut down while waiting.
async fn start_broker(
    config: &Arc<BrokerConfig>,
    cluster_id: String,
    quorum: Arc<MetadataQuorum>,
    local_controller: Option<Arc<QuorumController>>,
    ready: &watch::Sender<Option<Arc<Broker>>>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Option<Serving>, BrokerError> {
    let load_started = Instant::now();
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
        elapsed_ms = load_started.elapsed().as_millis() as u64,
        "logs loaded"
    );

    let link = || controller_link(config, &quorum, local_controller.clone());
    let controller = Arc::new(link());
    // Registration and heartbeats have a link of their own: a forwarded request waiting on a
    // slow commit must not hold up the heartbeat that keeps this broker unfenced. A heartbeat
    // gives up well inside the session (a controller cut off must not hold it either).
    let lifecycle_link = Arc::new(link().with_timeout(Duration::from_millis(
        (config.cluster.broker_session_timeout_ms as u64 / 3).max(500),
    )));
    // A voter waits for the quorum to elect; a learner hears of the leader only once it is
    // added, which its registration (sent to the voters in turn) does.
    while config.cluster.controller && quorum.caught_up(QUORUM_WAIT_REPORT).await.is_err() {
        if *shutdown.borrow() {
            return Ok(None);
        }
        if let Some(fatal) = quorum.fatal_error() {
            return Err(startup(format!("the metadata log stopped: {fatal}")));
        }
        tracing::info!("waiting for the metadata quorum to elect a leader");
    }
    let broker_epoch =
        match lifecycle::register(&lifecycle_link, config, &cluster_id, &shutdown).await {
            Ok(Some(epoch)) => epoch,
            Ok(None) => return Ok(None),
            Err(error) => return Err(startup(error)),
        };
    // Wait to see our own registration: the local image is then at least as new as the
    // controller's when it registered us.
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

    let replicas = Arc::new(ReplicaManager::new(
        config.node_id,
        config.clone(),
        log_manager,
    ));
    replicas
        .apply_image(&quorum.image(), now_ms())
        .map_err(startup)?;

    // Compaction of logs whose cleanup.policy includes compact (`__consumer_offsets` among
    // them), on its own threads.
    let cleaner_logs = replicas.clone();
    let initial = fjord_config::DynamicBrokerConfig::from_image(&quorum.image(), config.node_id);
    let cleaner_config = BrokerConfig::cleaner_config(&config.merged(&initial)).map_err(startup)?;
    let cleaner = Arc::new(
        LogCleaner::start(
            cleaner_config,
            &config.log_dirs,
            Box::new(move || cleaner_logs.log_manager().logs_by_dir()),
        )
        .map_err(startup)?,
    );

    let failing = replicas.clone();
    let (flusher, flusher_task) =
        replication::flusher::start(Arc::new(move |dir: &std::path::Path, error: &str| {
            failing.storage_failure(dir, error)
        }));
    let offsets_partitions: i32 = config
        .get("offsets.topic.num.partitions")
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    // Both kinds of coordinator share one timer task, woken through this.
    let deadline_moved = Arc::new(tokio::sync::Notify::new());
    let groups = Arc::new(crate::coordinator::group::GroupRuntime::new(
        coordinators::group_config(config),
        offsets_partitions,
        replicas.clone(),
        flusher.clone(),
        deadline_moved.clone(),
    ));
    // Groups and offsets committed before a restart are back before the first request.
    let groups_started = Instant::now();
    groups.load_hosted().map_err(startup)?;
    tracing::info!(
        elapsed_ms = groups_started.elapsed().as_millis() as u64,
        "group coordinators loaded"
    );
    let txns = Arc::new(crate::coordinator::txn::TxnRuntime::new(
        coordinators::txn_config(config),
        config
            .get("transaction.state.log.num.partitions")
            .and_then(|v| v.parse().ok())
            .unwrap_or(50),
        replicas.clone(),
        flusher.clone(),
        deadline_moved.clone(),
    ));
    // Moves between log dirs, including those a restart interrupted.
    let log_dir_mover = Arc::new(
        LogDirMover::start(
            replicas.clone(),
            BrokerConfig::log_dir_move_rate(&config.merged(&initial)),
        )
        .map_err(|e| startup(format!("cannot start the log dir mover: {e}")))?,
    );
    let merged = config.merged(&initial);
    let replication_quotas = Arc::new(ReplicationQuotas::new(
        &config.replication(),
        (
            BrokerConfig::bytes_per_second(&merged, "leader.replication.throttled.rate"),
            BrokerConfig::bytes_per_second(&merged, "follower.replication.throttled.rate"),
        ),
    ));
    let broker = Arc::new(Broker::new(
        config.clone(),
        cluster_id,
        quorum.clone(),
        controller.clone(),
        broker_epoch,
        replicas.clone(),
        flusher.clone(),
        groups.clone(),
        txns.clone(),
        log_dir_mover.clone(),
        replication_quotas.clone(),
    ));
    // Transactions prepared before a restart get their markers; open ones time out.
    broker.load_txn_coordinators().map_err(startup)?;
    let coordinator_timers = tokio::spawn(coordinators::run_timers(
        broker.clone(),
        deadline_moved,
        shutdown.clone(),
    ));

    // Follow metadata changes (a single node applies its own proposals already; this keeps
    // hosted partitions in line with any other writer, e.g. a future controller).
    let mut images = quorum.subscribe();
    let follower_replicas = replicas.clone();
    let image_broker = broker.clone();
    let image_cleaner = cleaner.clone();
    let image_mover = log_dir_mover.clone();
    let image_quotas = replication_quotas.clone();
    let image_config = config.clone();
    let image_task = tokio::spawn(async move {
        let mut dynamic = initial;
        while images.changed().await.is_ok() {
            let image = images.borrow_and_update().clone();
            if let Err(error) = follower_replicas.apply_image(&image, now_ms()) {
                tracing::error!(%error, "cannot apply a metadata change");
            }
            coordinators::follow_leadership(&image_broker);
            let now = fjord_config::DynamicBrokerConfig::from_image(&image, image_config.node_id);
            if now != dynamic {
                apply_dynamic_broker_config(
                    &image_config,
                    &dynamic,
                    &now,
                    &image_cleaner,
                    &image_mover,
                    &image_quotas,
                )
                .await;
                dynamic = now;
            }
        }
    });
    let housekeeping = tokio::spawn(housekeeping::run(
        replicas.clone(),
        config.clone(),
        shutdown.clone(),
    ));
    let replica_fetchers = replication::fetcher::start(
        replicas.clone(),
        quorum.clone(),
        config.clone(),
        flusher.clone(),
        replication_quotas.clone(),
        shutdown.clone(),
    );
    // ISR changes go on a link of their own, as heartbeats do.
    let isr_manager = replication::isr_manager::start(
        replicas.clone(),
        quorum.clone(),
        Arc::new(link().with_timeout(Duration::from_secs(10))),
        config.clone(),
        shutdown.clone(),
    );

    // Producers that expired while the broker was down go before the first request, as Kafka
    // drops them when it loads producer state.
    housekeeping::expire_producers(&replicas, config);

    // Everything is loaded: heartbeats ask to be unfenced, and the broker serves once the
    // controller has unfenced it and this node applied that (it then leads its partitions).
    let (membership_tx, membership) = watch::channel(lifecycle::Membership::Fenced);
    let (stopping, stopping_rx) = watch::channel(false);
    let heartbeats = tokio::spawn(lifecycle::heartbeat(
        lifecycle_link,
        quorum.clone(),
        config.clone(),
        broker_epoch,
        membership_tx,
        stopping_rx,
    ));
    let mut waiting = membership.clone();
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
        if unfenced && *waiting.borrow() == lifecycle::Membership::Unfenced {
            break;
        }
        // Replaced, or asked to stop: `run` stops what started here, in order.
        if *shutdown.borrow()
            || matches!(
                *waiting.borrow(),
                lifecycle::Membership::Replaced | lifecycle::Membership::ShutDown
            )
        {
            break;
        }
        if reported.elapsed() > QUORUM_WAIT_REPORT {
            tracing::info!("waiting for the controller to unfence this broker");
            reported = Instant::now();
        }
        tokio::select! {
            _ = waiting.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            _ = shutdown.changed() => {}
        }
    }
    if *membership.borrow() == lifecycle::Membership::Unfenced {
        tracing::info!(broker_epoch, "unfenced by the controller");
    }
    ready.send_replace(Some(broker.clone()));
    Ok(Some(Serving {
        heartbeats,
        stopping,
        membership,
        broker,
        replicas,
        groups,
        flusher,
        flusher_task,
        cleaner,
        log_dir_mover,
        image_task,
        housekeeping,
        coordinator_timers,
        replica_fetchers,
        isr_manager,
    }))
}

/// Dynamic broker configs changed: the cleaner takes its new settings (its threads restart), the
/// log dir mover its rate, the replication throttles their bounds, topic defaults already reached the logs through `apply_image`, and keys
/// fjord accepts without acting on them are named in a warning.
async fn apply_dynamic_broker_config(
    config: &BrokerConfig,
    before: &fjord_config::DynamicBrokerConfig,
    after: &fjord_config::DynamicBrokerConfig,
    cleaner: &Arc<LogCleaner>,
    mover: &LogDirMover,
    quotas: &ReplicationQuotas,
) {
    let (old, new) = (config.merged(before), config.merged(after));
    let rate = BrokerConfig::log_dir_move_rate(&new);
    if rate != BrokerConfig::log_dir_move_rate(&old) {
        tracing::info!(max_bytes_per_second = rate, "log dir mover reconfigured");
        mover.set_max_bytes_per_second(rate);
    }
    for (key, quota) in [
        ("leader.replication.throttled.rate", &quotas.leader),
        ("follower.replication.throttled.rate", &quotas.follower),
    ] {
        let rate = BrokerConfig::bytes_per_second(&new, key);
        if rate != BrokerConfig::bytes_per_second(&old, key) {
            tracing::info!(key, bytes_per_second = rate, "replication throttle set");
            quota.set_bound(rate);
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
    match BrokerConfig::cleaner_config(&new) {
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
