//! A node of a dynamic metadata quorum (KIP-853: `controller.quorum.bootstrap.servers`, no
//! `controller.quorum.voters`), started from its properties alone. Kafka needs a format step
//! first (`kafka-storage format --standalone` on one controller, `--no-initial-controllers` on
//! the others); fjord decides the same at the first start:
//! - the controller whose own controller listener is the first bootstrap server begins the
//!   quorum as its only voter, unless another bootstrap server already answers for a quorum
//!   with a leader (then it joins that one: a wiped first node does not found a second cluster);
//! - every other node learns the cluster id from a bootstrap server that knows the leader and
//!   joins: a controller registers (ControllerRegistration) and follows the log as a learner,
//!   and becomes a voter through AddRaftVoter — its own when
//!   `controller.quorum.auto.join.enable`, else `kafka-metadata-quorum add-controller`'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_client::{ClientConfig, Connection};
use fjord_common::{errors, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_metadata::QuorumNode;
use fjord_protocol::messages::add_raft_voter_request::{
    AddRaftVoterRequest, Listener as VoterListener,
};
use fjord_protocol::messages::controller_registration_request::{
    ControllerRegistrationRequest, Listener as RegistrationListener,
};
use fjord_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_quorum::{DynamicQuorum, MetadataQuorum};
use tokio::sync::watch;

use crate::link::controller::ControllerLink;
use crate::server::log_dirs::{known_cluster_id, random_uuid};
use crate::server::BrokerError;

/// How this node takes part in the dynamic quorum at this start.
#[derive(Debug, Clone)]
pub(crate) struct DynamicStart {
    /// The cluster id learned from the quorum, or this node's own; None: a new cluster.
    pub cluster_id: Option<String>,
    /// This node begins the quorum, if its metadata log is new.
    standalone: bool,
}

impl DynamicStart {
    /// What the metadata quorum is told: begin as the lone voter, or wait to be added.
    pub(crate) fn quorum(&self, config: &BrokerConfig, directory_id: Uuid) -> DynamicQuorum {
        match own_controller_address(config).filter(|_| self.standalone) {
            Some(addr) => DynamicQuorum::Standalone(QuorumNode {
                addr,
                directory_id: Some(directory_id),
                broker: false,
            }),
            None => DynamicQuorum::Join,
        }
    }
}

/// This node's advertised controller listener (the first of `controller.listener.names`), when
/// it listens on one.
pub(crate) fn own_controller_address(config: &BrokerConfig) -> Option<String> {
    let listener = own_controller_listener(config)?;
    Some(fjord_common::host_port(&listener.host, listener.port))
}

fn own_controller_listener(config: &BrokerConfig) -> Option<&fjord_config::Listener> {
    let name = config.cluster.controller_listener_names.first()?;
    config.advertised_listeners.iter().find(|l| &l.name == name)
}

/// How long a probe of one bootstrap server may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between rounds of probes while no bootstrap server answers for a quorum.
const PROBE_BACKOFF: Duration = Duration::from_millis(500);
/// How often a node waiting for the quorum says so.
const WAIT_REPORT: Duration = Duration::from_secs(10);

/// Decides how this node starts (see the module's description). None: shut down while waiting
/// for a bootstrap server to answer.
pub(crate) async fn how_to_start(
    config: &BrokerConfig,
    security: &fjord_client::Security,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<DynamicStart>, BrokerError> {
    let known = known_cluster_id(config)?;
    let own = config
        .cluster
        .controller
        .then(|| own_controller_address(config))
        .flatten();
    let others: Vec<&String> = config
        .cluster
        .bootstrap_servers
        .iter()
        .filter(|addr| Some(*addr) != own.as_ref())
        .collect();
    if own.is_some() && own.as_ref() == config.cluster.bootstrap_servers.first() {
        for addr in &others {
            if let Some(cluster_id) = probe(addr, security).await {
                return Ok(Some(DynamicStart {
                    cluster_id: Some(cluster_id),
                    standalone: false,
                }));
            }
        }
        return Ok(Some(DynamicStart {
            cluster_id: known,
            standalone: true,
        }));
    }
    if known.is_some() {
        return Ok(Some(DynamicStart {
            cluster_id: known,
            standalone: false,
        }));
    }
    let mut reported = Instant::now();
    loop {
        for addr in &others {
            if let Some(cluster_id) = probe(addr, security).await {
                tracing::info!(%cluster_id, controller = %addr, "joining the metadata quorum");
                return Ok(Some(DynamicStart {
                    cluster_id: Some(cluster_id),
                    standalone: false,
                }));
            }
        }
        if reported.elapsed() >= WAIT_REPORT {
            tracing::info!(bootstrap_servers = ?config.cluster.bootstrap_servers, "waiting for a controller of controller.quorum.bootstrap.servers to answer for a quorum with a leader");
            reported = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(PROBE_BACKOFF) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(None),
        }
    }
}

/// The cluster id a controller at `addr` answers with, when its quorum has a leader
/// (DescribeCluster on the controller listener, KIP-919).
async fn probe(addr: &str, security: &fjord_client::Security) -> Option<String> {
    let config = ClientConfig {
        client_id: "fjord-quorum-bootstrap".into(),
        connect_timeout: PROBE_TIMEOUT,
        request_timeout: PROBE_TIMEOUT,
        security: security.clone(),
        ..ClientConfig::default()
    };
    let attempt = async {
        let mut connection = Connection::connect(addr, &config).await.ok()?;
        let request = DescribeClusterRequest {
            include_cluster_authorized_operations: false,
            endpoint_type: 2,
            ..Default::default()
        };
        match connection
            .send_at(1, RequestBody::DescribeCluster(request))
            .await
            .ok()?
        {
            ResponseBody::DescribeCluster(r)
                if r.error_code == errors::NONE && r.controller_id >= 0 =>
            {
                Some(r.cluster_id)
            }
            _ => None,
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT * 2, attempt)
        .await
        .ok()
        .flatten()
}

/// How often a controller looks again at its place in the quorum.
const JOIN_CHECK: Duration = Duration::from_secs(1);
/// How long one AddRaftVoter may take (the new voter catching up included).
const ADD_VOTER_TIMEOUT_MS: i32 = 30_000;

/// Keeps this controller in the quorum for as long as the node runs: registers it with the
/// active controller while it is not a member (it then follows the log as a learner), and with
/// `controller.quorum.auto.join.enable` asks to become a voter while it is not one (again after
/// a `remove-controller`, as Kafka's auto-join does).
pub(crate) async fn join(
    link: Arc<ControllerLink>,
    quorum: Arc<MetadataQuorum>,
    config: Arc<BrokerConfig>,
    cluster_id: String,
    directory_id: Uuid,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(listener) = own_controller_listener(&config).cloned() else {
        return;
    };
    let incarnation_id = random_uuid();
    let node_id = config.node_id as u64;
    let registration = || {
        ControllerApi::ControllerRegistration(ControllerRegistrationRequest {
            controller_id: config.node_id,
            incarnation_id,
            zk_migration_ready: false,
            listeners: vec![RegistrationListener {
                name: listener.name.clone(),
                host: listener.host.clone(),
                port: listener.port,
                security_protocol: 0,
            }],
            features: Vec::new(),
        })
    };
    // Where the leader can reach this node's raft: its controller listener, and the
    // inter-broker listener its broker (if any) registered as a learner.
    let mut reachable_at = vec![fjord_common::host_port(&listener.host, listener.port)];
    if config.cluster.broker {
        let inter = config.advertised_listener(&config.cluster.inter_broker_listener_name);
        reachable_at.push(fjord_common::host_port(&inter.host, inter.port));
    }
    loop {
        let me = quorum.members().into_iter().find(|m| m.node_id == node_id);
        // A learner the leader reaches at neither of this node's listeners (it listened
        // elsewhere before a restart) registers again, and is reached here from then on.
        let unreachable = me
            .as_ref()
            .is_some_and(|m| !m.voter && !reachable_at.contains(&m.node.addr));
        let api = match me {
            None => Some(registration()),
            _ if unreachable => Some(registration()),
            Some(m) if !m.voter && config.cluster.quorum_auto_join => {
                Some(ControllerApi::AddRaftVoter(AddRaftVoterRequest {
                    cluster_id: Some(cluster_id.clone()),
                    timeout_ms: ADD_VOTER_TIMEOUT_MS,
                    voter_id: config.node_id,
                    voter_directory_id: directory_id,
                    listeners: vec![VoterListener {
                        name: listener.name.clone(),
                        host: listener.host.clone(),
                        port: listener.port,
                    }],
                    ack_when_committed: true,
                }))
            }
            _ => None,
        };
        if let Some(api) = api {
            let name = api.api_key().name();
            let version = if matches!(api, ControllerApi::AddRaftVoter(_)) {
                1
            } else {
                0
            };
            match link
                .call(ControllerRequest::new(version, api, config.node_id))
                .await
            {
                Ok(response) => match answered_error(&response) {
                    None => tracing::info!(
                        request = name,
                        "the active controller took this controller's request"
                    ),
                    Some((code, message)) => tracing::warn!(
                        request = name,
                        error = errors::name(code),
                        message,
                        "the active controller refused this controller's request"
                    ),
                },
                Err(error) => {
                    tracing::debug!(request = name, %error, "no active controller reached")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(JOIN_CHECK) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

fn answered_error(response: &ResponseBody) -> Option<(i16, String)> {
    let (code, message) = match response {
        ResponseBody::AddRaftVoter(r) => (r.error_code, r.error_message.clone()),
        ResponseBody::ControllerRegistration(r) => (r.error_code, r.error_message.clone()),
        _ => return None,
    };
    (code != errors::NONE).then(|| (code, message.unwrap_or_default()))
}
