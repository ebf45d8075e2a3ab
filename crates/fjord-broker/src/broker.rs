//! Request dispatch: decodes a frame's header and body, runs the handler for its API, and
//! encodes the response. Handlers for admin APIs live here; produce and fetch in their modules.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use bytes::{Bytes, BytesMut};
use fjord_controller::{plan, ControllerApi};

use crate::forwarding::ControllerLink;
use fjord_metadata::MetadataQuorum;
use fjord_protocol::messages::allocate_producer_ids_request::AllocateProducerIdsRequest;
use fjord_protocol::messages::api_versions_request::ApiVersionsRequest;
use fjord_protocol::messages::api_versions_response::*;
use fjord_protocol::messages::describe_cluster_request::*;
use fjord_protocol::messages::describe_cluster_response::*;
use fjord_protocol::messages::describe_configs_request::*;
use fjord_protocol::messages::describe_configs_response::*;
use fjord_protocol::messages::init_producer_id_request::*;
use fjord_protocol::messages::init_producer_id_response::*;
use fjord_protocol::messages::metadata_request::*;
use fjord_protocol::messages::metadata_response::*;
use fjord_protocol::{
    decode_request_header, response_header_version, ApiKey, Decoder, Encodable, RequestBody,
    ResponseBody, ResponseHeader, Uuid,
};

use crate::fetch_session::FetchSessionCache;
use crate::flusher::FlusherHandle;
use crate::forwarding::InternalTopic;
use crate::group_runtime::GroupRuntime;
use crate::log_dir_mover::LogDirMover;
use crate::network::{Dispatch, Reply, Response, Sequencing};
use crate::replica::ReplicaManager;
use crate::replication_quota::ReplicationQuotas;
use crate::txn_runtime::TxnRuntime;
use fjord_common::errors;
use fjord_config::{
    broker_config_keys, broker_config_kind, broker_key_synonyms, is_dynamic_broker_key,
    BrokerConfig, ConfigSource, DynamicBrokerConfig, TOPIC_CONFIGS,
};

/// The API versions fjord implements and advertises: Kafka 4.x's minimums (KIP-896) up to the
/// newest version tested here.
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 11),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 5),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::DescribeLogDirs, 1, 5),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 2, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 10),
    (ApiKey::OffsetFetch, 1, 10),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::WriteTxnMarkers, 1, 2),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 6),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::EndTxn, 0, 5),
];

pub fn supported_range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Request lanes (`network::Sequencing::Lane`): requests that take effect at dispatch and may
/// overlap earlier requests of the same lane on their connection.
const PRODUCE_LANE: u8 = 1;
const GROUP_LANE: u8 = 2;

/// The APIs the group coordinator answers (routed by `Broker::group_request`).
fn is_group_api(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::JoinGroup
            | ApiKey::SyncGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::TxnOffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::OffsetDelete
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
            | ApiKey::ConsumerGroupHeartbeat
            | ApiKey::ConsumerGroupDescribe
    )
}

struct ProducerIdBlock {
    next: i64,
    end: i64,
}

pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub cluster_id: String,
    pub quorum: Arc<MetadataQuorum>,
    pub replicas: Arc<ReplicaManager>,
    pub flusher: FlusherHandle,
    pub fetch_sessions: Mutex<FetchSessionCache>,
    producer_ids: tokio::sync::Mutex<ProducerIdBlock>,
    /// The controller this broker forwards controller work to (see `forwarding`).
    pub(crate) controller: Arc<ControllerLink>,
    /// This broker's epoch, from its registration at start.
    pub broker_epoch: i64,
    /// The group coordinator shards this broker hosts.
    pub groups: Arc<GroupRuntime>,
    /// The transaction coordinator shards this broker hosts.
    pub txns: Arc<TxnRuntime>,
    /// Moves partitions between log dirs (AlterReplicaLogDirs).
    pub log_dir_mover: Arc<LogDirMover>,
    /// The leader's side of the replication throttles (see `replication_quota`).
    pub replication_quotas: Arc<ReplicationQuotas>,
}

pub use fjord_common::now_ms;

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
        Broker {
            config,
            cluster_id,
            quorum,
            replicas,
            flusher,
            fetch_sessions: Mutex::new(FetchSessionCache::default()),
            producer_ids: tokio::sync::Mutex::new(ProducerIdBlock { next: 0, end: 0 }),
            controller,
            broker_epoch,
            groups,
            txns,
            log_dir_mover,
            replication_quotas,
        }
    }

    fn later<F>(self: &Arc<Self>, api: ApiKey, version: i16, correlation_id: i32, f: F) -> Reply
    where
        F: std::future::Future<Output = ResponseBody> + Send + 'static,
    {
        Reply::Later(Box::pin(async move {
            let body = f.await;
            encode_response(api, version, correlation_id, &body)
        }))
    }

    /// How a request may overlap its connection's earlier requests (see `network::Sequencing`):
    /// produce appends, and group requests once the coordinator is loaded, take effect at
    /// dispatch and only wait afterwards, so each kind pipelines with itself. Everything else —
    /// and anything read after a write of another kind — waits for the connection's earlier
    /// requests, as in Kafka.
    pub fn sequencing(&self, frame: &Bytes) -> Sequencing {
        let api = frame
            .get(0..2)
            .and_then(|b| ApiKey::from_i16(i16::from_be_bytes([b[0], b[1]])));
        match api {
            // A transactional produce that must first ask its transaction coordinator (KIP-890,
            // `txn_verify`) waits for everything before it and holds back everything after it.
            Some(ApiKey::Produce) if self.produce_must_ask(frame) => Sequencing::AfterAll,
            Some(ApiKey::Produce) => Sequencing::Lane(PRODUCE_LANE),
            // Like a transactional produce, a TxnOffsetCommit that must first ask its
            // transaction coordinator runs alone.
            Some(ApiKey::TxnOffsetCommit) if self.txn_offset_commit_must_ask(frame) => {
                Sequencing::AfterAll
            }
            Some(api) if is_group_api(api) && self.groups.all_loaded() => {
                Sequencing::Lane(GROUP_LANE)
            }
            _ => Sequencing::AfterAll,
        }
    }

    fn handle(self: &Arc<Self>, frame: Bytes, peer: SocketAddr, listener: &str) -> Reply {
        let mut input = Decoder::new(frame);
        let header = match decode_request_header(&mut input) {
            Ok(header) => header,
            Err(error) => return Reply::Close(format!("unreadable request header: {error}")),
        };
        let correlation_id = header.correlation_id;
        let version = header.request_api_version;
        let Some(api) = ApiKey::from_i16(header.request_api_key) else {
            return Reply::Close(format!("unknown API key {}", header.request_api_key));
        };
        let Some((min, max)) = supported_range(api) else {
            return Reply::Close(format!("API {} is not supported", api.name()));
        };
        if version < min || version > max {
            if api == ApiKey::ApiVersions {
                // Kafka answers an ApiVersions it cannot parse with a v0 response carrying
                // UNSUPPORTED_VERSION and the versions it does support, so the client can retry.
                let body = ResponseBody::ApiVersions(api_versions_response(
                    errors::UNSUPPORTED_VERSION,
                    self.config.cluster.kraft_version(),
                ));
                return Reply::Now(encode_response(api, 0, correlation_id, &body));
            }
            return Reply::Close(format!("{} version {version} is not supported", api.name()));
        }
        let mut body = match RequestBody::decode(api, &mut input, version) {
            Ok(body) => body,
            Err(error) => {
                return Reply::Close(format!(
                    "malformed {} v{version} request: {error}",
                    api.name()
                ))
            }
        };
        crate::topic_ids::name_topics(|| self.quorum.image(), &mut body, version);
        let now = now_ms();
        let respond =
            |body: ResponseBody| Reply::Now(encode_response(api, version, correlation_id, &body));
        match body {
            RequestBody::ApiVersions(request) => {
                let node = (self.cluster_id.as_str(), self.config.node_id);
                respond(ResponseBody::ApiVersions(
                    match api_versions_error(&request, version, Some(node)) {
                        // Kafka answers a refused request with its error alone.
                        errors::NONE => {
                            api_versions_response(errors::NONE, self.config.cluster.kraft_version())
                        }
                        code => ApiVersionsResponse {
                            error_code: code,
                            ..Default::default()
                        },
                    },
                ))
            }
            RequestBody::Metadata(request) => {
                let this = self.clone();
                let endpoint = self.advertised(listener);
                let listener = listener.to_string();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::Metadata(
                        this.metadata(request, version, listener, endpoint).await,
                    )
                })
            }
            RequestBody::DescribeTopicPartitions(request) => respond(
                ResponseBody::DescribeTopicPartitions(self.describe_topic_partitions(&request)),
            ),
            RequestBody::DescribeCluster(request) => respond(ResponseBody::DescribeCluster(
                self.describe_cluster(&request, listener, self.advertised(listener)),
            )),
            RequestBody::CreateTopics(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::CreateTopics(request))
                        .await
                })
            }
            RequestBody::DeleteTopics(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::DeleteTopics(request))
                        .await
                })
            }
            RequestBody::DescribeQuorum(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::DescribeQuorum(request))
                        .await
                })
            }
            RequestBody::CreatePartitions(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::CreatePartitions(request))
                        .await
                })
            }
            RequestBody::ElectLeaders(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::ElectLeaders(request))
                        .await
                })
            }
            RequestBody::AlterPartitionReassignments(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::AlterPartitionReassignments(request))
                        .await
                })
            }
            RequestBody::ListPartitionReassignments(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::ListPartitionReassignments(request))
                        .await
                })
            }
            RequestBody::DescribeConfigs(request) => respond(ResponseBody::DescribeConfigs(
                self.describe_configs(&request),
            )),
            RequestBody::InitProducerId(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::InitProducerId(this.init_producer_id(request).await)
                })
            }
            RequestBody::ListOffsets(request) => respond(ResponseBody::ListOffsets(
                self.list_offsets(&request, version),
            )),
            RequestBody::DeleteRecords(request) => {
                let answer = self.delete_records(request, now);
                self.later(api, version, correlation_id, async move {
                    ResponseBody::DeleteRecords(answer.await)
                })
            }
            RequestBody::IncrementalAlterConfigs(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::IncrementalAlterConfigs(request))
                        .await
                })
            }
            RequestBody::AlterConfigs(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    this.forward(version, ControllerApi::AlterConfigs(request))
                        .await
                })
            }
            RequestBody::AlterReplicaLogDirs(request) => {
                let answer = self.alter_replica_log_dirs(request, now);
                self.later(api, version, correlation_id, async move {
                    ResponseBody::AlterReplicaLogDirs(answer.await)
                })
            }
            RequestBody::DescribeLogDirs(request) => {
                let answer = self.describe_log_dirs(request);
                self.later(api, version, correlation_id, async move {
                    ResponseBody::DescribeLogDirs(answer.await)
                })
            }
            RequestBody::OffsetForLeaderEpoch(request) => respond(
                ResponseBody::OffsetForLeaderEpoch(self.offset_for_leader_epoch(&request)),
            ),
            RequestBody::Produce(request) => match self.produce_ask(&request, version) {
                None => self.produce(
                    request,
                    api,
                    version,
                    correlation_id,
                    now,
                    &Default::default(),
                ),
                // Sequenced after every earlier request, holding back the later ones (see
                // `sequencing`): the append still happens in arrival order.
                Some(ask) => {
                    let this = self.clone();
                    Reply::Later(Box::pin(async move {
                        let verdicts = this.ask_coordinator(ask).await;
                        let reply = this.produce(
                            request,
                            api,
                            version,
                            correlation_id,
                            now_ms(),
                            &verdicts,
                        );
                        match reply {
                            Reply::Now(response) => response,
                            Reply::Later(future) => future.await,
                            Reply::Close(message) => Response::Close(message),
                        }
                    }))
                }
            },
            RequestBody::Fetch(request) => self.fetch(request, api, version, correlation_id, now),
            RequestBody::AddPartitionsToTxn(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::AddPartitionsToTxn(
                        this.add_partitions_to_txn(request, version).await,
                    )
                })
            }
            RequestBody::AddOffsetsToTxn(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::AddOffsetsToTxn(this.add_offsets_to_txn(request).await)
                })
            }
            RequestBody::EndTxn(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::EndTxn(this.end_txn(request, version).await)
                })
            }
            RequestBody::WriteTxnMarkers(request) => {
                let this = self.clone();
                self.later(api, version, correlation_id, async move {
                    ResponseBody::WriteTxnMarkers(this.write_txn_markers(request, now).await)
                })
            }
            RequestBody::DescribeTransactions(request) => respond(
                ResponseBody::DescribeTransactions(self.describe_transactions(&request)),
            ),
            RequestBody::ListTransactions(request) => respond(ResponseBody::ListTransactions(
                self.list_transactions(&request, now),
            )),
            RequestBody::DescribeProducers(request) => respond(ResponseBody::DescribeProducers(
                self.describe_producers(&request),
            )),
            RequestBody::FindCoordinator(request) => {
                let answer =
                    self.find_coordinator(request, version, listener, self.advertised(listener));
                self.later(api, version, correlation_id, async move {
                    ResponseBody::FindCoordinator(answer.await)
                })
            }
            body if is_group_api(api) => self.group_request(
                body,
                api,
                version,
                correlation_id,
                header.client_id.clone(),
                peer,
            ),
            other => Reply::Close(format!("API {} is not supported", other.api_key().name())),
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

    // ---- Metadata -------------------------------------------------------------------------

    /// Every registered broker's endpoint on `listener` (this broker's as `own`), with its
    /// rack, in id order; a broker without that listener is left out, as Kafka does.
    pub(crate) fn live_endpoints(
        &self,
        listener: &str,
        own: (String, i32),
    ) -> Vec<(i32, String, i32, Option<String>)> {
        self.broker_endpoints(listener, own, false)
            .into_iter()
            .map(|(id, host, port, rack, _)| (id, host, port, rack))
            .collect()
    }

    /// The registered brokers' endpoints on `listener` (this broker's is `own`), in id order,
    /// each with whether it is fenced; fenced brokers only with `fenced_too` (they are not alive
    /// to clients, as in Kafka's metadata cache).
    fn broker_endpoints(
        &self,
        listener: &str,
        own: (String, i32),
        fenced_too: bool,
    ) -> Vec<(i32, String, i32, Option<String>, bool)> {
        let image = self.quorum.image();
        let mut brokers: Vec<(i32, String, i32, Option<String>, bool)> = image
            .brokers()
            .filter(|b| b.broker_id != self.config.node_id && (fenced_too || !b.fenced))
            .filter_map(|b| {
                let endpoint = b.endpoints.iter().find(|e| e.name == listener)?;
                Some((
                    b.broker_id,
                    endpoint.host.clone(),
                    endpoint.port as i32,
                    b.rack.clone(),
                    b.fenced,
                ))
            })
            .collect();
        brokers.push((
            self.config.node_id,
            own.0,
            own.1,
            self.config.cluster.rack.clone(),
            false,
        ));
        brokers.sort_by_key(|b| b.0);
        brokers
    }

    async fn metadata(
        self: Arc<Self>,
        request: MetadataRequest,
        version: i16,
        listener: String,
        (host, port): (String, i32),
    ) -> MetadataResponse {
        let listener = listener.as_str();
        let mut response = MetadataResponse {
            brokers: self
                .live_endpoints(listener, (host, port))
                .into_iter()
                .map(|(node_id, host, port, rack)| MetadataResponseBroker {
                    node_id,
                    host,
                    port,
                    rack,
                })
                .collect(),
            cluster_id: Some(self.cluster_id.clone()),
            // As a KRaft broker answers: a live broker (this one), which forwards controller work.
            controller_id: self.config.node_id,
            cluster_authorized_operations: i32::MIN,
            ..Default::default()
        };
        // v0 asks for all topics with an empty list; later versions with null.
        let requested: Option<Vec<MetadataRequestTopic>> = match request.topics {
            Some(list) if list.is_empty() && version == 0 => None,
            other => other,
        };
        let auto_create = self.config.auto_create_topics_enable
            && (version < 4 || request.allow_auto_topic_creation);
        let image = self.quorum.image();
        let Some(requested) = requested else {
            let mut names: Vec<String> = image.topics().map(|t| t.name.clone()).collect();
            names.sort();
            response.topics = names
                .iter()
                .map(|n| self.topic_metadata(&image, n))
                .collect();
            return response;
        };
        let mut to_create = Vec::new();
        for topic in &requested {
            if let Some(name) = &topic.name {
                if image.topic(name).is_none()
                    && auto_create
                    && plan::validate_topic_name(name).is_ok()
                {
                    to_create.push(name.clone());
                }
            }
        }
        if !to_create.is_empty() {
            let topics = to_create
                .into_iter()
                .map(|name| InternalTopic {
                    name,
                    num_partitions: -1,
                    replication_factor: -1,
                    configs: BTreeMap::new(),
                })
                .collect();
            for (name, error_code, message) in self.create_internal_topics(topics).await {
                if error_code != errors::NONE && error_code != errors::TOPIC_ALREADY_EXISTS {
                    tracing::warn!(topic = %name, error = errors::name(error_code), ?message, "auto-creation refused");
                }
            }
        }
        let image = self.quorum.image();
        for topic in requested {
            // As Kafka: a non-zero topic id wins; clients send it with a null or an empty name.
            let by_name = if topic.topic_id == Uuid::ZERO {
                topic.name.as_ref()
            } else {
                None
            };
            let entry = match (by_name, topic.topic_id) {
                (Some(name), _) => {
                    let mut entry = self.topic_metadata(&image, name);
                    if entry.error_code == errors::UNKNOWN_TOPIC_OR_PARTITION
                        && plan::validate_topic_name(name).is_err()
                    {
                        entry.error_code = errors::INVALID_TOPIC_EXCEPTION;
                    }
                    entry
                }
                (None, id) => match image.topic_by_id(&id) {
                    Some(t) => self.topic_metadata(&image, &t.name.clone()),
                    None => MetadataResponseTopic {
                        error_code: errors::UNKNOWN_TOPIC_ID,
                        name: None,
                        topic_id: id,
                        ..Default::default()
                    },
                },
            };
            response.topics.push(entry);
        }
        response
    }

    pub(crate) fn topic_metadata(
        &self,
        image: &fjord_metadata::MetadataImage,
        name: &str,
    ) -> MetadataResponseTopic {
        let Some(topic) = image.topic(name) else {
            return MetadataResponseTopic {
                error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                name: Some(name.to_string()),
                ..Default::default()
            };
        };
        MetadataResponseTopic {
            error_code: errors::NONE,
            name: Some(topic.name.clone()),
            topic_id: topic.topic_id,
            is_internal: topic.name.starts_with("__"),
            partitions: topic
                .partitions
                .iter()
                .enumerate()
                .map(|(index, p)| MetadataResponsePartition {
                    error_code: if p.leader < 0 {
                        errors::LEADER_NOT_AVAILABLE
                    } else {
                        errors::NONE
                    },
                    partition_index: index as i32,
                    leader_id: p.leader,
                    leader_epoch: p.leader_epoch,
                    replica_nodes: p.replicas.clone(),
                    isr_nodes: p.isr.clone(),
                    // Replicas on brokers that are gone or fenced, as Kafka reports them.
                    offline_replicas: p
                        .replicas
                        .iter()
                        .copied()
                        .filter(|&id| image.broker(id).is_none_or(|b| b.fenced))
                        .collect(),
                })
                .collect(),
            topic_authorized_operations: i32::MIN,
        }
    }

    fn describe_cluster(
        &self,
        request: &DescribeClusterRequest,
        listener: &str,
        own: (String, i32),
    ) -> DescribeClusterResponse {
        // Endpoint types as KIP-919 numbers them; a broker describes only brokers.
        const BROKER: i8 = 1;
        const CONTROLLER: i8 = 2;
        if request.endpoint_type != BROKER {
            let (error_code, message) = if request.endpoint_type == CONTROLLER {
                (
                    errors::MISMATCHED_ENDPOINT_TYPE,
                    "This is a broker endpoint; controllers are not described here.".to_string(),
                )
            } else {
                (
                    errors::UNSUPPORTED_ENDPOINT_TYPE,
                    format!("Unsupported endpoint type {}", request.endpoint_type),
                )
            };
            return DescribeClusterResponse {
                error_code,
                error_message: Some(message),
                ..Default::default()
            };
        }
        DescribeClusterResponse {
            error_code: errors::NONE,
            endpoint_type: 1,
            cluster_id: self.cluster_id.clone(),
            controller_id: self.config.node_id,
            // Fenced brokers too when asked (v2, KIP-1073), marked.
            brokers: self
                .broker_endpoints(listener, own, request.include_fenced_brokers)
                .into_iter()
                .map(
                    |(broker_id, host, port, rack, is_fenced)| DescribeClusterBroker {
                        broker_id,
                        host,
                        port,
                        rack,
                        is_fenced,
                    },
                )
                .collect(),
            cluster_authorized_operations: i32::MIN,
            ..Default::default()
        }
    }

    // ---- Configs --------------------------------------------------------------------------

    fn describe_configs(&self, request: &DescribeConfigsRequest) -> DescribeConfigsResponse {
        const TOPIC: i8 = 2;
        const BROKER: i8 = 4;
        let image = self.quorum.image();
        let dynamic = DynamicBrokerConfig::from_image(&image, self.config.node_id);
        let mut results = Vec::new();
        for resource in &request.resources {
            let wanted = |name: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| k == name))
            };
            let mut result = DescribeConfigsResult {
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                ..Default::default()
            };
            match resource.resource_type {
                TOPIC => {
                    if image.topic(&resource.resource_name).is_none() {
                        result.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                        result.error_message =
                            Some(format!("Topic {} does not exist", resource.resource_name));
                    } else {
                        let config = self.replicas.topic_config(&image, &resource.resource_name);
                        for (name, value, source) in config.entries() {
                            if !wanted(name) {
                                continue;
                            }
                            let def = TOPIC_CONFIGS.iter().find(|d| d.name == name);
                            let mut synonyms = Vec::new();
                            if request.include_synonyms {
                                if source == ConfigSource::DynamicTopic {
                                    synonyms.push(synonym(name, value, source));
                                }
                                let names = def
                                    .and_then(|d| d.broker_synonym)
                                    .map(broker_key_synonyms)
                                    .unwrap_or_default();
                                for (n, v, s) in self.config.synonyms(&dynamic, &names) {
                                    synonyms.push(synonym(&n, &v, s));
                                }
                            }
                            result.configs.push(DescribeConfigsResourceResult {
                                name: name.to_string(),
                                value: Some(value.to_string()),
                                read_only: false,
                                config_source: source as i8,
                                is_sensitive: false,
                                synonyms,
                                config_type: def.map(|d| d.kind as i8).unwrap_or(0),
                                documentation: None,
                            });
                        }
                    }
                }
                BROKER if resource.resource_name.is_empty() => {
                    // The cluster-wide default: only what is set dynamically for every broker.
                    for (name, value) in &dynamic.default {
                        if !wanted(name) {
                            continue;
                        }
                        let source = ConfigSource::DynamicDefaultBroker;
                        result.configs.push(broker_entry(
                            name,
                            Some(value.clone()),
                            source,
                            if request.include_synonyms {
                                vec![synonym(name, value, source)]
                            } else {
                                Vec::new()
                            },
                        ));
                    }
                }
                BROKER => {
                    if resource.resource_name != self.config.node_id.to_string() {
                        result.error_code = errors::INVALID_REQUEST;
                        result.error_message = Some(format!(
                            "Unexpected broker id, expected {}, but received {}",
                            self.config.node_id, resource.resource_name
                        ));
                    } else {
                        for (name, _) in broker_config_keys() {
                            if !wanted(name) {
                                continue;
                            }
                            // As Kafka lists them: this key's synonyms from its own name on.
                            let all = self.config.synonyms(&dynamic, &broker_key_synonyms(name));
                            let own: Vec<_> =
                                all.into_iter().skip_while(|(n, _, _)| n != name).collect();
                            let (value, source) = match own.first() {
                                Some((_, v, s)) => (Some(v.clone()), *s),
                                None => (None, ConfigSource::Default),
                            };
                            let synonyms = if request.include_synonyms {
                                own.iter().map(|(n, v, s)| synonym(n, v, *s)).collect()
                            } else {
                                Vec::new()
                            };
                            result
                                .configs
                                .push(broker_entry(name, value, source, synonyms));
                        }
                        // Keys fjord does not know but stored dynamically, as Kafka keeps them.
                        for name in dynamic
                            .node
                            .keys()
                            .filter(|k| broker_config_kind(k).is_none())
                        {
                            if wanted(name) {
                                let mut entry = broker_entry(
                                    name,
                                    None,
                                    ConfigSource::DynamicBroker,
                                    Vec::new(),
                                );
                                entry.is_sensitive = true;
                                result.configs.push(entry);
                            }
                        }
                    }
                }
                other => {
                    result.error_code = errors::INVALID_REQUEST;
                    result.error_message = Some(format!("Unsupported resource type {other}"));
                }
            }
            results.push(result);
        }
        DescribeConfigsResponse {
            results,
            ..Default::default()
        }
    }

    // ---- Producer ids ---------------------------------------------------------------------

    async fn init_producer_id(
        self: Arc<Self>,
        request: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        if let Some(transactional_id) = request.transactional_id.clone() {
            return self
                .init_transactional_producer_id(request, transactional_id)
                .await;
        }
        // Without a transactional id Kafka ignores the producer id and epoch in the request and
        // always hands out a fresh id at epoch 0; idempotent producers bump epochs locally.
        match self.next_producer_id().await {
            Ok(producer_id) => InitProducerIdResponse {
                error_code: errors::NONE,
                producer_id,
                producer_epoch: 0,
                ..Default::default()
            },
            Err(message) => {
                tracing::warn!(%message, "cannot allocate a producer id");
                InitProducerIdResponse {
                    error_code: errors::COORDINATOR_NOT_AVAILABLE,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                }
            }
        }
    }

    /// Producer ids come from blocks reserved in the metadata log, so ids are never reused
    /// across restarts.
    async fn next_producer_id(&self) -> Result<i64, String> {
        let mut block = self.producer_ids.lock().await;
        if block.next >= block.end {
            self.refill_producer_ids(&mut block).await?;
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }

    /// Makes sure a producer id can be taken without waiting: a coordinator needs one while it
    /// holds a shard's lock.
    pub(crate) async fn reserve_producer_ids(&self) -> Result<(), String> {
        let mut block = self.producer_ids.lock().await;
        if block.next >= block.end {
            self.refill_producer_ids(&mut block).await?;
        }
        Ok(())
    }

    /// A producer id from the reserved block, if one is left and no refill is under way.
    pub(crate) fn take_producer_id(&self) -> Option<i64> {
        let mut block = self.producer_ids.try_lock().ok()?;
        (block.next < block.end).then(|| {
            block.next += 1;
            block.next - 1
        })
    }

    async fn refill_producer_ids(&self, block: &mut ProducerIdBlock) -> Result<(), String> {
        let request = AllocateProducerIdsRequest {
            broker_id: self.config.node_id,
            broker_epoch: self.broker_epoch,
        };
        match self
            .forward(0, ControllerApi::AllocateProducerIds(request))
            .await
        {
            ResponseBody::AllocateProducerIds(r) if r.error_code == errors::NONE => {
                block.next = r.producer_id_start;
                block.end = r.producer_id_start + r.producer_id_len as i64;
                Ok(())
            }
            ResponseBody::AllocateProducerIds(r) => Err(format!(
                "the controller refused a block of producer ids: {}",
                errors::name(r.error_code)
            )),
            other => Err(format!(
                "the controller answered {} to AllocateProducerIds",
                other.api_key().name()
            )),
        }
    }
}

/// The cluster features fjord implements, as Kafka 4.x brokers report theirs in ApiVersions
/// (v3+): name, the lowest and highest level a node supports, and the level the cluster runs
/// at. Clients pick code paths by the finalized levels (a 4.x producer uses transaction version
/// 2 only when it is finalized). fjord has no UpdateFeatures: each level is fixed per build.
pub const FEATURES: &[(&str, i16, i16, i16)] = &[
    // 4.0-IV3: the metadata records and inter-broker APIs of Kafka 4.0.
    ("metadata.version", 25, 25, 25),
    // 0: a static voter set (`controller.quorum.voters`); 1: a dynamic quorum (KIP-853). The
    // level here is the static one; `api_versions_of` reports the node's own.
    ("kraft.version", 0, 1, 0),
    // 1: flexible `__transaction_state` records; 2: KIP-890 part 2 (the epoch bumps at every
    // commit and abort, leaders add partitions to transactions: Produce v12, TxnOffsetCommit v5,
    // EndTxn v5).
    ("transaction.version", 0, 2, 2),
    // KIP-848 consumer groups.
    ("group.version", 0, 1, 1),
];

/// The epoch of [`FEATURES`]' finalized levels. Clients take finalized features only from an
/// answer with an epoch above -1 (and keep the highest epoch's); the levels never change.
pub const FINALIZED_FEATURES_EPOCH: i64 = 0;

/// The finalized level of feature `name` (0: off or unknown).
pub fn finalized_level(name: &str) -> i16 {
    FEATURES
        .iter()
        .find(|(n, ..)| *n == name)
        .map_or(0, |(.., level)| *level)
}

/// What an ApiVersions request's own fields call for, as Kafka checks them: INVALID_REQUEST for
/// a client software name or version outside Kafka's pattern (v3+) or a cluster id without a
/// node id or the other way round (v5+); with `node` (this broker's cluster id and node id),
/// REBOOTSTRAP_REQUIRED when the client meant another cluster or node (v5+, KIP-1242: its
/// metadata is stale). Controllers do not check the last.
pub fn api_versions_error(
    request: &ApiVersionsRequest,
    version: i16,
    node: Option<(&str, i32)>,
) -> i16 {
    // `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`
    let software = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
    };
    if version >= 5 && request.cluster_id.is_some() != (request.node_id != -1) {
        return errors::INVALID_REQUEST;
    }
    if version >= 3
        && !(software(&request.client_software_name) && software(&request.client_software_version))
    {
        return errors::INVALID_REQUEST;
    }
    match (version >= 5, &request.cluster_id, node) {
        (true, Some(cluster_id), Some((ours, node_id)))
            if cluster_id != ours || request.node_id != node_id =>
        {
            errors::REBOOTSTRAP_REQUIRED
        }
        _ => errors::NONE,
    }
}

pub fn api_versions_response(error_code: i16, kraft_version: i16) -> ApiVersionsResponse {
    api_versions_of(SUPPORTED_APIS, error_code, kraft_version)
}

/// An ApiVersions answer advertising `apis` and [`FEATURES`], `kraft.version` at the level of
/// this node's quorum.
pub fn api_versions_of(
    apis: &[(ApiKey, i16, i16)],
    error_code: i16,
    kraft_version: i16,
) -> ApiVersionsResponse {
    let level = |name: &str, level: i16| {
        if name == "kraft.version" {
            kraft_version
        } else {
            level
        }
    };
    ApiVersionsResponse {
        error_code,
        api_keys: apis
            .iter()
            .map(|(key, min, max)| ApiVersion {
                api_key: *key as i16,
                min_version: *min,
                max_version: *max,
            })
            .collect(),
        supported_features: FEATURES
            .iter()
            .map(|(name, min, max, _)| SupportedFeatureKey {
                name: (*name).to_string(),
                min_version: *min,
                max_version: *max,
            })
            .collect(),
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        // As in Kafka, a feature at level 0 is not finalized: it is off.
        finalized_features: FEATURES
            .iter()
            .map(|(name, _, _, l)| (name, level(name, *l)))
            .filter(|(_, level)| *level > 0)
            .map(|(name, level)| FinalizedFeatureKey {
                name: (*name).to_string(),
                max_version_level: level,
                min_version_level: level,
            })
            .collect(),
        ..Default::default()
    }
}

/// The network shell's handle on the broker, for the connections of one listener.
pub struct BrokerDispatch {
    /// The broker, once it has started. Listeners serve from before that (a learner's
    /// inter-broker listener carries the metadata log it needs to start); requests that arrive
    /// earlier wait for it.
    pub broker: watch::Receiver<Option<Arc<Broker>>>,
    pub quorum: Arc<MetadataQuorum>,
    /// The name of the listener these connections came in on.
    pub listener: String,
    /// The inter-broker listener: the metadata quorum's leader reaches a learner here.
    pub carries_raft: bool,
}

impl Dispatch for BrokerDispatch {
    fn sequencing(&self, frame: &Bytes) -> Sequencing {
        match &*self.broker.borrow() {
            Some(broker) => broker.sequencing(frame),
            None => Sequencing::AfterAll,
        }
    }

    fn dispatch(&self, frame: Bytes, peer: SocketAddr) -> Reply {
        if self.carries_raft && fjord_metadata::is_raft_frame(&frame) {
            return crate::controller_dispatch::raft_reply(&self.quorum, frame);
        }
        if let Some(broker) = &*self.broker.borrow() {
            return broker.handle(frame, peer, &self.listener);
        }
        // Sequenced after all: nothing else of this connection runs before it.
        let mut ready = self.broker.clone();
        let listener = self.listener.clone();
        Reply::Later(Box::pin(async move {
            let broker = match ready.wait_for(Option::is_some).await {
                Ok(broker) => broker.clone(),
                Err(_) => None,
            };
            let Some(broker) = broker else {
                return Response::Close("the broker stopped before it started".into());
            };
            match broker.handle(frame, peer, &listener) {
                Reply::Now(response) => response,
                Reply::Later(future) => future.await,
                Reply::Close(message) => Response::Close(message),
            }
        }))
    }
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym {
        name: name.to_string(),
        value: Some(value.to_string()),
        source: source as i8,
    }
}

/// A broker config's DescribeConfigs entry; read-only unless it can change on a running broker.
fn broker_entry(
    name: &str,
    value: Option<String>,
    source: ConfigSource,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult {
        name: name.to_string(),
        value,
        read_only: !is_dynamic_broker_key(name),
        config_source: source as i8,
        is_sensitive: false,
        synonyms,
        config_type: broker_config_kind(name).map_or(0, |k| k as i8),
        documentation: None,
    }
}
