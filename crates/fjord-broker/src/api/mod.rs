//! The Kafka APIs a broker serves, one module per family: `dispatch` decodes a request and
//! routes it; `produce`, `fetch` (with `fetch_session`), `metadata`, `configs`, `log_admin`,
//! `groups`, the transaction modules (`txn`, `txn_markers`, `txn_verify`, `txn_admin`) answer
//! it; `forward` sends controller work on to the active controller; `controller` serves a
//! controller listener. `Broker` is the context every handler runs in. Nothing but `server`
//! imports this layer.

mod configs;
pub(crate) mod controller;
pub(crate) mod dispatch;
mod fetch;
mod fetch_session;
mod forward;
mod groups;
mod log_admin;
mod metadata;
mod produce;
mod topic_ids;
mod topic_partitions;
pub(crate) mod txn;
mod txn_admin;
mod txn_markers;
mod txn_verify;
pub mod versions;

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use fjord_common::errors;
use fjord_config::BrokerConfig;
use fjord_protocol::{response_header_version, ApiKey, Encodable, ResponseBody, ResponseHeader};
use fjord_quorum::MetadataQuorum;

use crate::api::fetch_session::FetchSessionCache;
use crate::coordinator::group::GroupRuntime;
use crate::coordinator::producer_ids::ProducerIds;
use crate::coordinator::txn::TxnRuntime;
use crate::link::controller::ControllerLink;
use crate::net::Response;
use crate::replication::{FlusherHandle, LogDirMover, ReplicaManager, ReplicationQuotas};

pub use dispatch::BrokerDispatch;
pub(crate) use forward::InternalTopic;

/// What every request handler runs with: this broker's config and identity, the metadata
/// image, the partitions it hosts and the coordinators on it. Built once the broker has
/// registered; shared by every connection.
pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub cluster_id: String,
    pub quorum: Arc<MetadataQuorum>,
    pub replicas: Arc<ReplicaManager>,
    pub flusher: FlusherHandle,
    pub fetch_sessions: Mutex<FetchSessionCache>,
    /// Producer ids for idempotent and transactional producers, in blocks from the controller.
    pub(crate) producer_ids: Arc<ProducerIds>,
    /// The controller this broker forwards controller work to (see `forward`).
    pub(crate) controller: Arc<ControllerLink>,
    /// The group coordinator shards this broker hosts.
    pub groups: Arc<GroupRuntime>,
    /// The transaction coordinator shards this broker hosts.
    pub txns: Arc<TxnRuntime>,
    /// Moves partitions between log dirs (AlterReplicaLogDirs).
    pub log_dir_mover: Arc<LogDirMover>,
    /// The leader's side of the replication throttles (see `replication::quota`).
    pub replication_quotas: Arc<ReplicationQuotas>,
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
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<BrokerConfig>,
        cluster_id: String,
        quorum: Arc<MetadataQuorum>,
        controller: Arc<ControllerLink>,
        broker_epoch: i64,
        replicas: Arc<ReplicaManager>,
        flusher: FlusherHandle,
        groups: Arc<GroupRuntime>,
        txns: Arc<TxnRuntime>,
        log_dir_mover: Arc<LogDirMover>,
        replication_quotas: Arc<ReplicationQuotas>,
    ) -> Self {
        let producer_ids = Arc::new(ProducerIds::new(
            controller.clone(),
            config.node_id,
            broker_epoch,
        ));
        Broker {
            config,
            cluster_id,
            quorum,
            replicas,
            flusher,
            fetch_sessions: Mutex::new(FetchSessionCache::default()),
            producer_ids,
            controller,
            groups,
            txns,
            log_dir_mover,
            replication_quotas,
        }
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
            .quorum
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
