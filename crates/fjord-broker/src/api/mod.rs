//! The Kafka APIs a broker serves, one module per family: `dispatch` decodes a request and
//! routes it; `produce`, `fetch` (with `fetch_session`), `metadata`, `configs`, `log_admin`,
//! `groups`, the transaction modules (`txn`, `txn_markers`, `txn_verify`, `txn_admin`) answer
//! it; `forward` sends controller work on to the active controller; `controller` serves a
//! controller listener. `Broker` routes each request to its family's narrow context (`ProduceApi`,
//! `FetchApi`, ...), which holds only the parts its handlers use. Nothing but `server`
//! imports this layer.

mod acls;
pub(crate) mod authz;
mod configs;
pub(crate) mod controller;
pub(crate) mod dispatch;
mod fetch;
mod fetch_session;
mod forward;
mod groups;
mod log_admin;
mod metadata;
mod mutation_quota;
mod produce;
mod quotas;
mod refusals;
mod share;
mod share_persister;
mod share_state;
mod telemetry;
mod tls_configs;
mod tokens;
mod topic_ids;
mod topic_partitions;
pub(crate) mod txn;
mod txn_admin;
mod txn_markers;
mod txn_verify;
mod users;
pub mod versions;

use crate::link::Links;
use crate::net::tls::ListenersTls;
use crate::quota::ClientQuotaManagers;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use fjord_client::{ClientConfig, Connection};
use fjord_common::errors::{self, KafkaError};
use fjord_common::Requester;
use fjord_config::BrokerConfig;
use fjord_metadata::acl::Authorizer;
use fjord_metadata::MetadataImage;
use fjord_protocol::{
    response_header_version, ApiKey, Encodable, RequestBody, ResponseBody, ResponseHeader,
};
use fjord_quorum::MetadataQuorum;
use tokio::sync::watch;

use crate::api::fetch_session::FetchSessionCache;
use crate::coordinator::group::GroupRuntime;
use crate::coordinator::producer_ids::ProducerIds;
use crate::coordinator::share::SharePartitions;
use crate::coordinator::share_state::ShareStateRuntime;
use crate::coordinator::txn::TxnRuntime;
use crate::link::controller::ControllerLink;
use crate::link::peers::LinkPool;
use crate::net::Response;
use crate::replication::{FlusherHandle, LogDirMover, ReplicaManager, ReplicationQuotas};
use fjord_telemetry::ClientTelemetry;

pub(crate) use authz::Access;
pub use dispatch::BrokerDispatch;
pub(crate) use forward::InternalTopic;
use share_persister::Persister;

/// This broker as every handler sees it: its config, its identity and the metadata image.
pub struct Node {
    pub config: Arc<BrokerConfig>,
    pub cluster_id: String,
    /// The metadata image as the quorum applies it.
    images: watch::Receiver<Arc<MetadataImage>>,
    /// The ACLs' judge, when `authorizer.class.name` configures one.
    authorizer: Option<Arc<Authorizer>>,
    /// The clients' byte rates, measured against their quotas.
    pub(crate) client_quotas: ClientQuotaManagers,
    /// The clients' partition mutations, against their `controller_mutation_rate`.
    pub(crate) mutation_quotas: mutation_quota::MutationQuotas,
    /// How this node's links to the others are secured.
    pub links: Arc<Links>,
    /// Each TLS listener's server config and certificate, by listener name.
    pub listener_tls: Arc<ListenersTls>,
}

/// The request router: one narrow context per API family, each holding only what its
/// handlers use, so a handler can be built and tested with its own parts alone. Built once
/// the broker has registered; shared by every connection.
pub struct Broker {
    pub node: Arc<Node>,
    /// Controller work and the topics the broker creates itself (`forward`).
    pub(crate) forwarder: Arc<Forwarder>,
    pub(crate) produce: Arc<ProduceApi>,
    pub(crate) fetch: Arc<FetchApi>,
    pub(crate) log_admin: Arc<LogAdminApi>,
    pub(crate) groups: Arc<GroupApi>,
    pub(crate) txns: Arc<TxnApi>,
    pub(crate) cluster: Arc<ClusterApi>,
    pub(crate) shares: Arc<ShareApi>,
}

/// What a broker is built from: its identity and image, the partitions it hosts, and the
/// runtimes and links the API families share.
pub struct BrokerParts {
    pub config: Arc<BrokerConfig>,
    pub cluster_id: String,
    pub quorum: Arc<MetadataQuorum>,
    pub controller: Arc<ControllerLink>,
    pub broker_epoch: i64,
    pub replicas: Arc<ReplicaManager>,
    pub flusher: FlusherHandle,
    pub groups: Arc<GroupRuntime>,
    pub txns: Arc<TxnRuntime>,
    pub share_state: Arc<ShareStateRuntime>,
    pub log_dir_mover: Arc<LogDirMover>,
    pub replication_quotas: Arc<ReplicationQuotas>,
    pub links: Arc<Links>,
    pub listener_tls: Arc<ListenersTls>,
}

/// Controller work forwarded to the active controller, and the topics the broker needs
/// itself (`forward`).
pub(crate) struct Forwarder {
    node: Arc<Node>,
    controller: Arc<ControllerLink>,
    replicas: Arc<ReplicaManager>,
}

/// Produce (`produce`): appends through the partitions, durability through the flusher, and
/// KIP-890's verification through the transaction APIs.
pub(crate) struct ProduceApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    flusher: FlusherHandle,
    txns: Arc<TxnApi>,
}

/// Fetch, ListOffsets and OffsetForLeaderEpoch (`fetch`): reads of the partitions, fetch
/// sessions and the leader's replication throttle.
pub(crate) struct FetchApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    sessions: Mutex<FetchSessionCache>,
    replication_quotas: Arc<ReplicationQuotas>,
}

/// DeleteRecords, DescribeLogDirs and AlterReplicaLogDirs (`log_admin`).
pub(crate) struct LogAdminApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    log_dir_mover: Arc<LogDirMover>,
}

/// FindCoordinator and the group APIs (`groups`), on the group coordinator runtime.
pub(crate) struct GroupApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    groups: Arc<GroupRuntime>,
    /// TxnOffsetCommit's verification, and the transaction coordinator FindCoordinator loads.
    txns: Arc<TxnApi>,
    /// The share coordinator FindCoordinator loads.
    share_state: Arc<ShareStateRuntime>,
    forwarder: Arc<Forwarder>,
}

/// ShareFetch and ShareAcknowledge (`share`) on the share partitions this broker leads.
pub(crate) struct ShareApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    pub(crate) shares: Arc<SharePartitions>,
    /// Where the share partitions' state is written and read back (`share_persister`).
    persister: Arc<Persister>,
    /// The share coordinator's RPCs (`share_state`).
    pub(crate) state: Arc<ShareStateApi>,
}

/// The share coordinator's RPCs (`share_state`), on its shards.
pub(crate) struct ShareStateApi {
    node: Arc<Node>,
    pub(crate) state: Arc<ShareStateRuntime>,
}

/// The transaction APIs (`txn`, `txn_verify`, `txn_admin`), on the transaction coordinator
/// runtime: producer ids, markers sent through `markers` here and over links elsewhere.
pub(crate) struct TxnApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    txns: Arc<TxnRuntime>,
    producer_ids: ProducerIds,
    /// Which `__consumer_offsets` partition a group's offsets go to.
    groups: Arc<GroupRuntime>,
    markers: Arc<MarkerWriter>,
    forwarder: Arc<Forwarder>,
}

/// WriteTxnMarkers as a partition leader (`txn_markers`), for other brokers' coordinators and
/// this broker's own.
pub(crate) struct MarkerWriter {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    flusher: FlusherHandle,
    /// Markers on `__consumer_offsets` commit or drop a transaction's offsets.
    groups: Arc<GroupRuntime>,
}

/// The cluster's description (`metadata`, `topic_partitions`, `configs`): Metadata with its
/// topic auto-creation, DescribeCluster, DescribeTopicPartitions, DescribeConfigs.
pub(crate) struct ClusterApi {
    node: Arc<Node>,
    replicas: Arc<ReplicaManager>,
    forwarder: Arc<Forwarder>,
    /// Client telemetry (KIP-714): subscriptions told and pushes received.
    pub(crate) telemetry: Arc<ClientTelemetry>,
}

/// Encodes a response header and body into one frame body. A response that cannot be encoded
/// is a broker bug; closing the connection tells the client at once instead of leaving it waiting.
pub fn encode_response(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseBody,
) -> Response {
    let mut out = BytesMut::with_capacity(256);
    let header = ResponseHeader { correlation_id };
    if let Err(error) = header.encode(&mut out, response_header_version(api, version)) {
        tracing::error!(%error, "cannot encode a response header");
        return Response::Close(format!("cannot encode a response header: {error}"));
    }
    if let Err(error) = body.encode(&mut out, version) {
        tracing::error!(api = api.name(), version, %error, "cannot encode a response");
        return Response::Close(format!(
            "cannot encode a {} v{version} response: {error}",
            api.name()
        ));
    }
    Response::Send(out.freeze())
}

impl Broker {
    pub fn new(parts: BrokerParts) -> Self {
        let BrokerParts {
            config,
            cluster_id,
            quorum,
            controller,
            broker_epoch,
            replicas,
            flusher,
            groups,
            txns,
            share_state,
            log_dir_mover,
            replication_quotas,
            links,
            listener_tls,
        } = parts;
        let producer_ids = ProducerIds::new(controller.clone(), config.node_id, broker_epoch);
        let authorizer = authz::authorizer(&config);
        let node = Arc::new(Node {
            client_quotas: ClientQuotaManagers::new(config.client_quota_window()),
            mutation_quotas: mutation_quota::MutationQuotas::new(config.controller_quota_window()),
            config,
            cluster_id,
            images: quorum.subscribe(),
            authorizer,
            links,
            listener_tls,
        });
        let forwarder = Arc::new(Forwarder {
            node: node.clone(),
            controller,
            replicas: replicas.clone(),
        });
        let markers = Arc::new(MarkerWriter {
            node: node.clone(),
            replicas: replicas.clone(),
            flusher: flusher.clone(),
            groups: groups.clone(),
        });
        let share_state_api = Arc::new(ShareStateApi {
            node: node.clone(),
            state: share_state.clone(),
        });
        let txn_api = Arc::new(TxnApi {
            node: node.clone(),
            replicas: replicas.clone(),
            txns,
            producer_ids,
            groups: groups.clone(),
            markers,
            forwarder: forwarder.clone(),
        });
        Broker {
            produce: Arc::new(ProduceApi {
                node: node.clone(),
                replicas: replicas.clone(),
                flusher,
                txns: txn_api.clone(),
            }),
            fetch: Arc::new(FetchApi {
                node: node.clone(),
                replicas: replicas.clone(),
                sessions: Mutex::new(FetchSessionCache::default()),
                replication_quotas,
            }),
            log_admin: Arc::new(LogAdminApi {
                node: node.clone(),
                replicas: replicas.clone(),
                log_dir_mover,
            }),
            groups: Arc::new(GroupApi {
                node: node.clone(),
                replicas: replicas.clone(),
                groups,
                txns: txn_api.clone(),
                share_state: share_state.clone(),
                forwarder: forwarder.clone(),
            }),
            shares: Arc::new(ShareApi {
                shares: Arc::new(SharePartitions::new(
                    usize::try_from(node.config.share_groups().max_share_sessions).unwrap_or(1),
                )),
                persister: Arc::new(Persister::new(
                    node.clone(),
                    forwarder.clone(),
                    share_state_api.clone(),
                )),
                node: node.clone(),
                replicas: replicas.clone(),
                state: share_state_api,
            }),
            cluster: Arc::new(ClusterApi {
                telemetry: Arc::new(ClientTelemetry::new(node.config.telemetry_max_bytes())),
                node: node.clone(),
                replicas,
                forwarder: forwarder.clone(),
            }),
            txns: txn_api,
            forwarder,
            node,
        }
    }

    /// The partitions this broker hosts.
    pub(crate) fn replicas(&self) -> &Arc<ReplicaManager> {
        &self.produce.replicas
    }

    /// The group coordinator runtime (the server's timers and leadership-following drive it).
    pub(crate) fn group_runtime(&self) -> &Arc<GroupRuntime> {
        &self.groups.groups
    }

    /// The transaction coordinator runtime.
    pub(crate) fn txn_runtime(&self) -> &Arc<TxnRuntime> {
        &self.txns.txns
    }

    /// The share coordinator runtime.
    pub(crate) fn share_state_runtime(&self) -> &Arc<ShareStateRuntime> {
        &self.shares.state.state
    }

    /// The share partitions this broker leads (the server's timers expire their locks).
    pub(crate) fn share_partitions(&self) -> &Arc<SharePartitions> {
        &self.shares.shares
    }
}

impl Node {
    /// Sends one request to `broker` over the inter-broker listener on a connection of
    /// `links`, connecting it first if it is not usable, at `version` or the newest below it
    /// that the broker supports.
    pub(crate) async fn send_on_link(
        &self,
        links: &LinkPool,
        broker: i32,
        client_id: String,
        request_timeout: Duration,
        version: i16,
        body: RequestBody,
    ) -> Result<ResponseBody, KafkaError> {
        let mut connection = links.take().await;
        if !connection.as_ref().is_some_and(Connection::is_usable) {
            let config = ClientConfig {
                client_id,
                connect_timeout: Duration::from_secs(2),
                request_timeout,
                max_response_bytes: 1024 * 1024,
                security: self.links.inter_broker.clone(),
            };
            *connection = Some(
                crate::link::peers::connect_to_broker(
                    &self.image(),
                    &self.config.cluster.inter_broker_listener_name,
                    broker,
                    &config,
                )
                .await?,
            );
        }
        let Some(connection) = connection.as_mut() else {
            return Err(KafkaError::new(errors::NETWORK_EXCEPTION, "no connection"));
        };
        let api = body.api_key();
        let Some(version) = connection.version(api).map(|v| v.min(version)) else {
            return Err(KafkaError::new(
                errors::UNSUPPORTED_VERSION,
                format!("broker {broker} does not support {}", api.name()),
            ));
        };
        connection.send_at(version, body).await.map_err(|error| {
            KafkaError::new(
                errors::NETWORK_EXCEPTION,
                format!("{} to broker {broker}: {error}", api.name()),
            )
        })
    }

    /// The latest image this broker applied.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.images.borrow().clone()
    }

    /// What `requester` may do, judged on the latest image.
    pub(crate) fn access(&self, requester: &Arc<Requester>) -> Access {
        Access::new(self.authorizer.clone(), self.image(), requester.clone())
    }

    /// Whether an authorizer is configured (ACL admin requests are refused without one).
    pub(crate) fn has_authorizer(&self) -> bool {
        self.authorizer.is_some()
    }

    /// This broker's endpoint as clients of `listener` reach it: that listener's advertised
    /// address, as Kafka answers each connection for the listener it came in on.
    pub fn advertised(&self, listener: &str) -> (String, i32) {
        let advertised = self.config.advertised_listener(listener);
        (advertised.host.clone(), advertised.port as i32)
    }

    /// The error for a partition this broker does not host: NOT_LEADER_OR_FOLLOWER when the
    /// cluster has it (another broker leads it; the client refreshes its metadata), else
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub(crate) fn not_hosted(&self, topic: &str, partition: i32) -> i16 {
        let exists = self
            .image()
            .topic(topic)
            .is_some_and(|t| usize::try_from(partition).is_ok_and(|p| p < t.partitions.len()));
        if exists {
            errors::NOT_LEADER_OR_FOLLOWER
        } else {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        }
    }
}
