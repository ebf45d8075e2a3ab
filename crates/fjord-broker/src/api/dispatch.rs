//! Request dispatch: decodes a frame's header and body, checks the version, decides how the
//! request may overlap its connection's others, and routes it to its handler.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use fjord_common::{errors, now_ms};
use fjord_controller::ControllerApi;
use fjord_metadata::MetadataQuorum;
use fjord_protocol::messages::api_versions_response::ApiVersionsResponse;
use fjord_protocol::{decode_request_header, ApiKey, Decoder, RequestBody, ResponseBody};
use tokio::sync::watch;

use crate::api::versions::{api_versions_error, api_versions_response, supported_range};
use crate::api::{encode_response, Broker};
use crate::net::{Dispatch, Reply, Response, Sequencing};

/// Request lanes (`net::Sequencing::Lane`): requests that take effect at dispatch and may
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

impl Broker {
    fn later<F>(self: &Arc<Self>, api: ApiKey, version: i16, correlation_id: i32, f: F) -> Reply
    where
        F: std::future::Future<Output = ResponseBody> + Send + 'static,
    {
        Reply::Later(Box::pin(async move {
            let body = f.await;
            encode_response(api, version, correlation_id, &body)
        }))
    }

    /// How a request may overlap its connection's earlier requests (see `net::Sequencing`):
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
        crate::api::topic_ids::name_topics(|| self.quorum.image(), &mut body, version);
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
            return crate::api::controller::raft_reply(&self.quorum, frame);
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
