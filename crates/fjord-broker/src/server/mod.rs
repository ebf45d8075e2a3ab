//! Start-up and shutdown: `run` opens the log dirs, starts the metadata quorum (and the
//! controller on a controller node), serves every listener, starts the broker role in phases
//! (logs, registration, partitions, coordinators, replication, unfencing) and stops it all in
//! order. Registration and heartbeats are in `lifecycle`, the dynamic quorum's joining in
//! `dynamic_quorum`, periodic work in `housekeeping`.

mod broker_role;
mod console;
mod coordinators;
mod dynamic_quorum;
mod group_lag;
mod housekeeping;
mod http;
mod jwks;
mod lifecycle;
mod listener_tls;
mod log_dirs;
mod observe;
mod scram_users;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_client::{OAuthToken, SaslLogin};
use fjord_controller::Controller;
use fjord_quorum::{MetadataQuorum, QuorumConfig, QuorumController, QuorumLinks, QuorumPeers};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::controller::ControllerDispatch;
use crate::api::versions::supported_range;
use crate::api::{Broker, BrokerDispatch};
use crate::link::controller::{ControllerAddresses, ControllerLink};
use crate::link::Links;
use crate::metrics::Metrics;
use crate::net::limits::ConnectionLimits;
use crate::net::tls::ListenersTls;
use crate::net::{ListenerSecurity, NetworkConfig};
use fjord_common::scram::{ScramCredential, ScramMechanism};
use fjord_config::{
    BrokerConfig, DynamicBrokerConfig, JwksEndpoint, LinkLogin, OAuthBearerSettings,
};
use fjord_protocol::ApiKey;
use fjord_sasl::jwks::VerificationKeys;
use fjord_sasl::scram::{DelegationTokenCredential, ScramCredentials};
use fjord_sasl::{random_nonce, SaslConfig};
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
    let (ready, broker_rx) = watch::channel::<Option<Arc<Broker>>>(None);
    // HTTP first, so that liveness and readiness answer through start-up.
    let metrics = Metrics::new();
    let links = Arc::new(node_links(&config)?);
    let console = console::console(&config, &links, &metrics);
    let (observer, http) = http::start(&config, &metrics, console, &shutdown).await?;
    let security = listener_security(&config, &broker_rx)?;
    let listener_tls: Arc<ListenersTls> = Arc::new(
        security
            .iter()
            .filter_map(|(name, guards)| Some((name.clone(), guards.tls.clone()?)))
            .collect(),
    );
    let dynamic = if config.cluster.bootstrap_servers.is_empty() {
        None
    } else {
        match dynamic_quorum::how_to_start(&config, &links.controller, &mut shutdown).await? {
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
    let quorum = start_quorum(
        &config,
        &cluster_id,
        dynamic.as_ref(),
        metadata_dir_id,
        &links,
    );
    let quorum = quorum.await?;
    observer.quorum_started(&quorum);
    let (controller, controller_task) = start_controller(&config, &cluster_id, &quorum);
    // Every listener serves from here on: voters need each other's raft RPCs to elect a leader,
    // and a learner needs the leader's to catch up, before this node can register as a broker.
    // Broker requests wait (their connections are refused) until the broker is up. Listeners
    // stop after a controlled shutdown has moved leadership away (clients keep being answered
    // NOT_LEADER_OR_FOLLOWER meanwhile and find the new leaders).
    let (stop_listening, listening) = watch::channel(false);
    let node = Node {
        config: &config,
        cluster_id: &cluster_id,
        quorum: &quorum,
        controller: &controller,
    };
    // The servers own their listeners' security: a SASL listener's credentials read the broker,
    // which must be gone once they stop.
    let servers = serve_listeners(
        &node,
        (security, &listener_tls),
        (&broker_rx, &metrics),
        &listening,
    )
    .await?;
    // A controller of a dynamic quorum makes itself known to the leader, and asks to vote if
    // `controller.quorum.auto.join.enable` says so.
    let joining = (dynamic.is_some() && config.cluster.controller).then(|| {
        let link = controller_link(&config, &quorum, controller.clone(), &links);
        tokio::spawn(dynamic_quorum::join(
            Arc::new(link),
            quorum.clone(),
            config.clone(),
            cluster_id.clone(),
            metadata_dir_id,
            shutdown.clone(),
        ))
    });
    let (stop_broker, broker_stopping) = broker_stop_signal(&shutdown);
    let serving = if config.cluster.broker {
        broker_role::start_broker(
            &config,
            cluster_id.clone(),
            quorum.clone(),
            controller.clone(),
            (&links, &listener_tls),
            (&ready, &metrics),
            broker_stopping,
        )
        .await?
    } else {
        None
    };
    if let Some(broker) = ready.borrow().as_ref() {
        observer.broker_started(broker);
    }
    if let Some(serving) = &serving {
        observer.cleaner_started(serving.cleaner());
    }
    if serving.is_some() || !config.cluster.broker {
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "started");
    }
    // Requests that waited for a broker that never started are refused now.
    let ready = serving.is_some().then_some(ready);
    let adding_users = scram_users::add_missing(ready.as_ref(), &config.add_scram);
    drop(broker_rx);
    let replaced = wait_for_stop(&config, serving.as_ref(), shutdown, &stop_broker).await;

    stop_listening.send_replace(true);
    let running = Running {
        adding_users,
        servers,
        joining,
        controller,
        controller_task,
        quorum,
    };
    running.stop(ready, serving).await?;
    http.stop().await;
    if let Some(error) = replaced {
        return Err(error);
    }
    tracing::info!("clean shutdown complete");
    Ok(())
}

/// The broker's own stop signal: the process's shutdown, or this broker's registration being
/// replaced by another process (then the broker's tasks must stop without a SIGTERM).
fn broker_stop_signal(
    shutdown: &watch::Receiver<bool>,
) -> (watch::Sender<bool>, watch::Receiver<bool>) {
    let (stop_broker, broker_stopping) = watch::channel(false);
    let mut forwarded = shutdown.clone();
    let stop_on_shutdown = stop_broker.clone();
    tokio::spawn(async move {
        if forwarded.wait_for(|stop| *stop).await.is_ok() {
            stop_on_shutdown.send_replace(true);
        }
    });
    (stop_broker, broker_stopping)
}

/// What runs beside the broker role: the listeners' servers, a dynamic quorum's joining, the
/// controller and the metadata quorum.
struct Running {
    /// `--add-scram`'s users being added; stopped first, as it holds the broker.
    adding_users: Option<JoinHandle<()>>,
    servers: Vec<JoinHandle<()>>,
    joining: Option<JoinHandle<()>>,
    controller: Option<Arc<QuorumController>>,
    controller_task: Option<JoinHandle<()>>,
    quorum: Arc<MetadataQuorum>,
}

impl Running {
    /// Stops everything in order once the listeners were told to stop: in-flight requests
    /// finish, then the broker role (`serving`, after its last holder `ready`), the controller
    /// and the metadata quorum.
    async fn stop(
        self,
        ready: Option<watch::Sender<Option<Arc<Broker>>>>,
        serving: Option<broker_role::Serving>,
    ) -> Result<(), BrokerError> {
        for task in [self.joining, self.adding_users].into_iter().flatten() {
            task.abort();
            let _ = task.await;
        }
        // In-flight requests waiting on this node's controller (a commit a lost quorum cannot
        // make) are answered now rather than after their timeouts.
        if let Some(controller) = &self.controller {
            controller.stop();
        }
        tracing::info!("shutting down: no new connections; finishing in-flight requests");
        for server in self.servers {
            let _ = server.await;
        }
        // The broker's last holders are gone with the connections; this one goes before its
        // parts.
        drop(ready);
        if let Some(serving) = serving {
            serving.stop().await?;
        }
        drop(self.controller);
        if let Some(task) = self.controller_task {
            let _ = task.await;
        }
        match Arc::try_unwrap(self.quorum) {
            Ok(quorum) => quorum.shutdown().await.map_err(startup)?,
            Err(_) => tracing::warn!("metadata quorum still in use at shutdown"),
        }
        Ok(())
    }
}

/// What every listener of this node serves with.
struct Node<'a> {
    config: &'a Arc<BrokerConfig>,
    cluster_id: &'a str,
    quorum: &'a Arc<MetadataQuorum>,
    /// This node's controller, if it has the controller role.
    controller: &'a Option<Arc<QuorumController>>,
}

/// This node's controller, when it has the controller role, and its task.
fn start_controller(
    config: &Arc<BrokerConfig>,
    cluster_id: &str,
    quorum: &Arc<MetadataQuorum>,
) -> (Option<Arc<QuorumController>>, Option<JoinHandle<()>>) {
    if !config.cluster.controller {
        return (None, None);
    }
    let (controller, task) = QuorumController::start(
        Controller::new(config.clone(), cluster_id.to_string()),
        quorum.clone(),
        CONTROLLER_COMMIT_TIMEOUT,
    );
    (Some(Arc::new(controller)), Some(task))
}

/// The metadata log: this node's replica of it, in the metadata log dir, with the voters of a
/// static quorum or the start `dynamic` decided.
async fn start_quorum(
    config: &BrokerConfig,
    cluster_id: &str,
    dynamic: Option<&dynamic_quorum::DynamicStart>,
    metadata_dir_id: fjord_common::Uuid,
    links: &Links,
) -> Result<Arc<MetadataQuorum>, BrokerError> {
    let metadata_dir = config.metadata_log_dir.join(METADATA_DIR_NAME);
    let peers = QuorumPeers {
        voters: config
            .cluster
            .voters
            .iter()
            .map(|v| (v.id as u64, format!("{}:{}", v.host, v.port)))
            .collect(),
        dynamic: dynamic.map(|d| d.quorum(config, metadata_dir_id)),
    };
    let settings = QuorumConfig {
        max_bytes_between_snapshots: config.cluster.metadata_max_bytes_between_snapshots,
        max_snapshot_interval: u64::try_from(config.cluster.metadata_max_snapshot_interval_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
        links: QuorumLinks {
            voters: links.controller.clone(),
            learners: links.inter_broker.clone(),
        },
        max_retained_log_bytes: u64::try_from(config.cluster.metadata_max_retention_bytes)
            .unwrap_or(u64::MAX),
        ..QuorumConfig::default()
    };
    let quorum = MetadataQuorum::start_with_config(
        &metadata_dir,
        config.node_id as u64,
        cluster_id,
        peers,
        settings,
    )
    .await
    .map_err(|e| startup(format!("metadata log at {}: {e}", metadata_dir.display())))?;
    Ok(Arc::new(quorum))
}

/// How this node's links to the others are secured, set up (key material read and checked)
/// before anything touches the disk.
fn node_links(config: &BrokerConfig) -> Result<Links, BrokerError> {
    let Some(links) = &config.links else {
        return Ok(Links::default());
    };
    let security = |link: &fjord_config::LinkSettings, what: &str| {
        let tls = match &link.tls {
            Some(tls) => Some(crate::net::tls::client_config(tls).map_err(|e| {
                startup(format!(
                    "cannot set up TLS for the {what} link to listener {}: {e}",
                    link.listener
                ))
            })?),
            None => None,
        };
        let sasl = link.login.as_ref().map(|login| match login {
            LinkLogin::Plain { username, password } => SaslLogin::Plain {
                username: username.clone(),
                password: password.clone(),
            },
            LinkLogin::Scram {
                mechanism,
                username,
                password,
            } => SaslLogin::Scram {
                mechanism: *mechanism,
                username: username.clone(),
                password: password.clone(),
            },
            LinkLogin::OAuthBearer {
                principal,
                lifetime_s,
            } => SaslLogin::OAuthBearer(OAuthToken::Unsecured {
                principal: principal.clone(),
                lifetime: Duration::from_secs(u64::try_from(*lifetime_s).unwrap_or(3600)),
            }),
        });
        Ok::<_, BrokerError>(fjord_client::Security { tls, sasl })
    };
    Ok(Links {
        inter_broker: security(&links.inter_broker, "inter-broker")?,
        controller: security(&links.controller, "controller")?,
    })
}

/// Each listener's TLS and SASL, set up before anything touches the disk: key material that
/// cannot be read is a configuration error like any other.
fn listener_security(
    config: &BrokerConfig,
    broker: &watch::Receiver<Option<Arc<Broker>>>,
) -> Result<BTreeMap<String, ListenerSecurity>, BrokerError> {
    let mut security = BTreeMap::new();
    for listener in &config.listeners {
        let tls = match config.listener_tls(&listener.name) {
            Some(settings) => Some(crate::net::tls::ListenerTls::new(
                crate::net::tls::server_config(settings).map_err(|e| {
                    startup(format!(
                        "cannot set up TLS on listener {}: {e}",
                        listener.name
                    ))
                })?,
                crate::net::tls::leaf_certificate(&settings.keystore).ok(),
            )),
            None => None,
        };
        let sasl = config.listener_sasl(&listener.name).map(|settings| {
            let verification_keys = match &settings.oauthbearer {
                OAuthBearerSettings::Jwks(validator)
                    if settings.mechanism("OAUTHBEARER").is_some() =>
                {
                    jwks_keys(&validator.jwks, &listener.name)?
                }
                _ => Arc::new(VerificationKeys::default()),
            };
            Ok::<_, BrokerError>(Arc::new(SaslConfig {
                settings: settings.clone(),
                max_receive_size: usize::try_from(config.settings().sasl_server_max_receive_size)
                    .unwrap_or(usize::MAX),
                failed_delay: Duration::from_millis(
                    u64::try_from(config.settings().connection_failed_authentication_delay_ms)
                        .unwrap_or(0),
                ),
                api_versions_max: supported_range(ApiKey::ApiVersions).map_or(0, |(_, max)| max),
                credentials: Arc::new(BrokerCredentials(broker.clone())),
                verification_keys,
                nonce: random_nonce,
                now_ms: fjord_common::now_ms,
            }))
        });
        let sasl = sasl.transpose()?;
        // On SSL (not SASL_SSL) a client certificate names the principal.
        let certificate_principals = config
            .listener_tls(&listener.name)
            .filter(|_| sasl.is_none())
            .map(|settings| Arc::new(settings.principal_mapper.clone()));
        security.insert(
            listener.name.clone(),
            ListenerSecurity {
                limits: None,
                tls,
                sasl,
                certificate_principals,
            },
        );
    }
    Ok(security)
}

/// The keys listener `listener` checks signed tokens with: those of a JWKS file, read now (a
/// file that cannot be used stops the node), or those an identity provider serves, kept by a task
/// from now on.
fn jwks_keys(
    endpoint: &JwksEndpoint,
    listener: &str,
) -> Result<Arc<VerificationKeys>, BrokerError> {
    let cannot = |e: String| startup(format!("cannot read the JWKS of listener {listener}: {e}"));
    match endpoint {
        JwksEndpoint::File(path) => {
            let document =
                jwks::read_file(path).map_err(|e| cannot(format!("{}: {e}", path.display())))?;
            let keys = VerificationKeys::from_jwks(&document)
                .map_err(|e| cannot(format!("{}: {e}", path.display())))?;
            Ok(Arc::new(keys))
        }
        JwksEndpoint::Http(http) => {
            let tls = match &http.tls {
                Some(link) => Some(crate::net::tls::client_config(link).map_err(|e| {
                    startup(format!(
                        "cannot set up TLS to the JWKS of listener {listener}: {e}"
                    ))
                })?),
                None => None,
            };
            let keys = Arc::new(VerificationKeys::default());
            jwks::follow(
                http.as_ref().clone(),
                tls,
                keys.clone(),
                listener.to_string(),
            );
            Ok(keys)
        }
    }
}

/// The SCRAM credentials in the broker's image; none before the broker is up.
struct BrokerCredentials(watch::Receiver<Option<Arc<Broker>>>);

impl ScramCredentials for BrokerCredentials {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.0.borrow().as_ref()?.scram_credential(user, mechanism)
    }

    fn delegation_token(&self, token_id: &str) -> Option<DelegationTokenCredential> {
        self.0.borrow().as_ref()?.delegation_token(token_id)
    }
}

/// Binds every listener and serves it: a controller listener with this node's controller, the
/// others with the broker (`broker`, once it has started).
async fn serve_listeners(
    node: &Node<'_>,
    (mut security, listener_tls): (BTreeMap<String, ListenerSecurity>, &Arc<ListenersTls>),
    (broker, metrics): (&watch::Receiver<Option<Arc<Broker>>>, &Arc<Metrics>),
    listening: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, BrokerError> {
    let config = node.config;
    let (limits, follower) = connection_limits(node, listening.clone());
    let tls_follower = listener_tls::follow(
        node.config.clone(),
        node.quorum.subscribe(),
        listener_tls.clone(),
        listening.clone(),
    );
    let mut servers = vec![follower, tls_follower];
    for listener in &config.listeners {
        let address = format!("{}:{}", listener.host, listener.port);
        let socket = tokio::net::TcpListener::bind(&address).await.map_err(|e| {
            startup(format!(
                "cannot listen on {} ({address}): {e}",
                listener.name
            ))
        })?;
        tracing::info!(listener = %listener.name, address = %socket.local_addr().map(|a| a.to_string()).unwrap_or(address), "listening");
        let dispatch = listener_dispatch(node, &listener.name, broker);
        let mut guards = security.remove(&listener.name).unwrap_or_default();
        guards.limits = Some((listener.name.clone(), limits.clone()));
        let network_config = NetworkConfig {
            socket_request_max_bytes: config.socket_request_max_bytes,
            connections_max_idle_ms: config.connections_max_idle_ms,
            listener: listener.name.as_str().into(),
            metrics: metrics.clone(),
            slow_request: config.slow_request_log(),
        };
        servers.push(tokio::spawn(crate::net::serve(
            socket,
            dispatch,
            network_config,
            guards,
            listening.clone(),
        )));
    }
    Ok(servers)
}

/// The connection limits every listener counts in: the configured ones, changed as the dynamic
/// broker configs in the metadata image change them (the task returned follows them until the
/// listeners stop), and each
/// address's `connection_creation_rate` quota as the image has it. The broker's own links (the
/// inter-broker and controller listeners) are outside the broker-wide limits when other
/// listeners serve the clients.
fn connection_limits(
    node: &Node<'_>,
    mut stopping: watch::Receiver<bool>,
) -> (Arc<ConnectionLimits>, JoinHandle<()>) {
    let config = node.config;
    let cluster = &config.cluster;
    let protected = config
        .listeners
        .iter()
        .map(|l| &l.name)
        .filter(|name| {
            config.listeners.len() > 1
                && (**name == cluster.inter_broker_listener_name
                    || cluster.is_controller_listener(name))
        })
        .cloned()
        .collect::<Vec<_>>();
    let quorum = node.quorum.clone();
    let limits = ConnectionLimits::new(
        config.connection_limits().clone(),
        protected,
        Box::new(move |ip| quorum.image().client_quotas().connection_rate_for(ip)),
    );
    let mut images = node.quorum.subscribe();
    let (config, following) = (node.config.clone(), limits.clone());
    let follower = tokio::spawn(async move {
        // The limits are worked out again only when the dynamic layers change, not at every
        // metadata change.
        let (mut seen, mut applied) = (
            DynamicBrokerConfig::default(),
            config.connection_limits().clone(),
        );
        loop {
            tokio::select! {
                changed = images.changed() => if changed.is_err() { return },
                _ = stopping.wait_for(|stop| *stop) => return,
            }
            let (own, default) = images
                .borrow_and_update()
                .broker_config_layers(config.node_id);
            let dynamic = DynamicBrokerConfig::new(own, default);
            if dynamic == seen {
                continue;
            }
            match config.connection_limits_with(&dynamic) {
                Ok(wanted) if wanted != applied => {
                    tracing::info!(?wanted, "connection limits reconfigured");
                    following.reconfigure(wanted.clone());
                    applied = wanted;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "dynamic connection limits ignored"),
            }
            seen = dynamic;
        }
    });
    (limits, follower)
}

/// Who answers the requests of listener `name`.
fn listener_dispatch(
    node: &Node<'_>,
    name: &str,
    broker: &watch::Receiver<Option<Arc<Broker>>>,
) -> Arc<dyn crate::net::Dispatch> {
    let cluster = &node.config.cluster;
    match (node.controller, cluster.is_controller_listener(name)) {
        (Some(controller), true) => Arc::new(ControllerDispatch {
            quorum: node.quorum.clone(),
            authorizer: crate::api::authz::authorizer(node.config),
            controller: controller.clone(),
            cluster_id: node.cluster_id.to_string(),
            kraft_version: cluster.kraft_version(),
        }),
        _ => Arc::new(BrokerDispatch {
            broker: broker.clone(),
            quorum: node.quorum.clone(),
            authorizer: crate::api::authz::authorizer(node.config),
            listener: name.to_string(),
            // A learner takes raft RPCs there; voters of a static quorum take them on their
            // controller listeners, and a node alone takes none. A controller of a dynamic
            // quorum takes them on both: as an observer it may be reached at the inter-broker
            // listener its broker registered.
            carries_raft: (!cluster.controller || !cluster.bootstrap_servers.is_empty())
                && name == cluster.inter_broker_listener_name,
        }),
    }
}

/// Waits for the process's shutdown, or for this broker's registration to be replaced by
/// another process's (returned as the error `run` ends with); then a controlled shutdown moves
/// leadership away before the broker's tasks are told to stop.
async fn wait_for_stop(
    config: &BrokerConfig,
    serving: Option<&broker_role::Serving>,
    mut shutdown: watch::Receiver<bool>,
    stop_broker: &watch::Sender<bool>,
) -> Option<BrokerError> {
    let Some(serving) = serving else {
        let _ = shutdown.wait_for(|stop| *stop).await;
        return None;
    };
    let mut replaced = None;
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
    // Members waiting in a rebalance go to find the coordinator anew (on another broker once
    // leadership moved) rather than wait for it here until their requests time out.
    serving.groups.refuse_parked(|_| true);
    replaced
}

/// A way to the active controller: known voters' or bootstrap servers' controller listeners.
fn controller_link(
    config: &BrokerConfig,
    quorum: &Arc<MetadataQuorum>,
    local: Option<Arc<QuorumController>>,
    links: &Links,
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
        links.controller.clone(),
    )
}
