//! Request dispatch: decodes a frame's header and body, checks the version, decides how the
//! request may overlap its connection's others, and routes it to its handler.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fjord_common::{errors, now_ms, Requester};
use fjord_controller::ControllerApi;
use fjord_metadata::quota::REQUEST_PERCENTAGE;
use fjord_protocol::messages::api_versions_request::ApiVersionsRequest;
use fjord_protocol::messages::api_versions_response::ApiVersionsResponse;
use fjord_protocol::messages::produce_request::ProduceRequest;
use fjord_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use fjord_protocol::messages::sasl_handshake_response::SaslHandshakeResponse;
use fjord_protocol::{
    decode_request_header, ApiKey, Decoder, RequestBody, RequestHeader, ResponseBody,
};
use fjord_quorum::MetadataQuorum;
use tokio::sync::watch;

use crate::api::versions::{api_versions_error, api_versions_response, supported_range};
use crate::api::{authz, encode_response, Access, Broker};
use crate::metrics::Metrics;
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
            | ApiKey::ShareGroupHeartbeat
            | ApiKey::ShareGroupDescribe
    )
}

impl Broker {
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
            Some(ApiKey::Produce) if self.txns.produce_must_ask(frame) => Sequencing::AfterAll,
            Some(ApiKey::Produce) => Sequencing::Lane(PRODUCE_LANE),
            // Like a transactional produce, a TxnOffsetCommit that must first ask its
            // transaction coordinator runs alone.
            Some(ApiKey::TxnOffsetCommit) if self.txns.txn_offset_commit_must_ask(frame) => {
                Sequencing::AfterAll
            }
            Some(api) if is_group_api(api) && self.groups.groups.all_loaded() => {
                Sequencing::Lane(GROUP_LANE)
            }
            _ => Sequencing::AfterAll,
        }
    }

    /// Decodes `frame` and routes it (`route`), counting the time spent on it against its
    /// client's `request_percentage` quota.
    fn handle(self: &Arc<Self>, frame: Bytes, requester: &Arc<Requester>, listener: &str) -> Reply {
        let started = Instant::now();
        let (header, answer, mut body) = match self.decode(frame) {
            Ok(decoded) => decoded,
            Err(reply) => return reply,
        };
        crate::api::topic_ids::name_topics(|| self.node.image(), &mut body, answer.version);
        let access = self
            .node
            .access(requester)
            .with_client_id(header.client_id.as_deref());
        let counted = !exempt_from_request_quota(&body)
            && access.image().client_quotas().any_sets(REQUEST_PERCENTAGE);
        if !counted {
            return self.route(header, answer, body, access, listener);
        }
        let (api, version) = (answer.api, answer.version);
        let reply = self.route(header, answer, body, access.clone(), listener);
        let node = self.node.clone();
        let account = move |spent: Duration| -> i32 {
            let now = now_ms();
            let percent = spent.as_secs_f64() * 100.0;
            let quotas = access.image().client_quotas();
            let throttle_ms =
                node.client_quotas
                    .request
                    .record(quotas, access.quota_client(), percent, now);
            // Kafka throttles a request quota at most one window sample long.
            let throttle_ms = throttle_ms.min(node.config.client_quota_window().1 as i32);
            access.requester().mute_for(throttle_ms, now);
            throttle_ms
        };
        match reply {
            Reply::Later(future) => Reply::Later(Box::pin(Timed {
                future,
                spent: started.elapsed(),
                account: Some(Box::new(account)),
                answer: (api, version),
            })),
            Reply::Now(response) => {
                let throttle_ms = account(started.elapsed());
                Reply::Now(with_throttle(api, version, response, throttle_ms))
            }
            reply => {
                account(started.elapsed());
                reply
            }
        }
    }

    /// Routes a decoded request: refused whole when the principal may not make it, controller
    /// work to the active controller, everything else to its API family's handler.
    fn route(
        self: &Arc<Self>,
        header: RequestHeader,
        answer: Answer,
        body: RequestBody,
        access: Access,
        listener: &str,
    ) -> Reply {
        match authz::refusal(&access, &body, answer.version) {
            Some(authz::Refusal::Answer(refused)) => return answer.now(refused),
            Some(authz::Refusal::Close(reason)) => return Reply::Close(reason),
            None => {}
        }
        let body = match ControllerApi::from_body(body) {
            Ok(request) => return self.forward(request, &access, answer),
            Err(body) => *body,
        };
        match body {
            body @ (RequestBody::Produce(_)
            | RequestBody::Fetch(_)
            | RequestBody::ListOffsets(_)
            | RequestBody::OffsetForLeaderEpoch(_)
            | RequestBody::DeleteRecords(_)
            | RequestBody::AlterReplicaLogDirs(_)
            | RequestBody::DescribeLogDirs(_)) => self.route_log(body, answer, &access),
            body @ (RequestBody::InitProducerId(_)
            | RequestBody::AddPartitionsToTxn(_)
            | RequestBody::AddOffsetsToTxn(_)
            | RequestBody::EndTxn(_)
            | RequestBody::WriteTxnMarkers(_)
            | RequestBody::DescribeTransactions(_)
            | RequestBody::ListTransactions(_)
            | RequestBody::DescribeProducers(_)) => self.route_txn(body, answer, &access),
            RequestBody::FindCoordinator(request) => {
                let endpoint = self.node.advertised(listener);
                let found = self.groups.find_coordinator(
                    request,
                    answer.version,
                    (listener, endpoint),
                    &access,
                );
                answer.later(async move { ResponseBody::FindCoordinator(found.await) })
            }
            // A connection is authenticated before its first other request, once: a handshake
            // now (or on a listener without SASL) is out of place, as Kafka answers it.
            RequestBody::SaslHandshake(_) => {
                answer.now(ResponseBody::SaslHandshake(SaslHandshakeResponse {
                    error_code: errors::ILLEGAL_SASL_STATE,
                    mechanisms: Vec::new(),
                }))
            }
            RequestBody::SaslAuthenticate(_) => {
                answer.now(ResponseBody::SaslAuthenticate(SaslAuthenticateResponse {
                    error_code: errors::ILLEGAL_SASL_STATE,
                    error_message: Some(
                        "SaslAuthenticate request received after successful authentication"
                            .to_string(),
                    ),
                    ..Default::default()
                }))
            }
            RequestBody::ShareFetch(request) => {
                let shares = self.shares.clone();
                let version = answer.version;
                answer.later(async move {
                    ResponseBody::ShareFetch(shares.share_fetch(request, version, access).await)
                })
            }
            RequestBody::InitializeShareGroupState(request) => {
                let shares = self.shares.state.clone();
                answer.later(async move {
                    ResponseBody::InitializeShareGroupState(
                        shares.initialize_share_group_state(request).await,
                    )
                })
            }
            RequestBody::ReadShareGroupState(request) => {
                let shares = self.shares.state.clone();
                answer.later(async move {
                    ResponseBody::ReadShareGroupState(shares.read_share_group_state(request).await)
                })
            }
            RequestBody::WriteShareGroupState(request) => {
                let shares = self.shares.state.clone();
                answer.later(async move {
                    ResponseBody::WriteShareGroupState(
                        shares.write_share_group_state(request).await,
                    )
                })
            }
            RequestBody::DeleteShareGroupState(request) => {
                let shares = self.shares.state.clone();
                answer.later(async move {
                    ResponseBody::DeleteShareGroupState(
                        shares.delete_share_group_state(request).await,
                    )
                })
            }
            RequestBody::ReadShareGroupStateSummary(request) => {
                let shares = self.shares.state.clone();
                answer.later(async move {
                    ResponseBody::ReadShareGroupStateSummary(
                        shares.read_share_group_state_summary(request).await,
                    )
                })
            }
            RequestBody::ShareAcknowledge(request) => {
                let shares = self.shares.clone();
                let version = answer.version;
                answer.later(async move {
                    ResponseBody::ShareAcknowledge(
                        shares.share_acknowledge(&request, version, &access).await,
                    )
                })
            }
            body if is_group_api(answer.api) => self.groups.group_request(
                body,
                answer.api,
                answer.version,
                answer.correlation_id,
                header.client_id,
                &access,
            ),
            body => self.route_cluster(body, answer, (listener, &access)),
        }
    }

    /// Controller work, less what the principal may not touch, sent to the active controller;
    /// ACL changes are refused while no authorizer is configured, as Kafka refuses them.
    fn forward(&self, mut request: ControllerApi, access: &Access, answer: Answer) -> Reply {
        let acl_change = matches!(
            request,
            ControllerApi::CreateAcls(_) | ControllerApi::DeleteAcls(_)
        );
        if acl_change && !self.node.has_authorizer() {
            let message = "No Authorizer is configured.";
            return answer.now(fjord_controller::error_response(
                &request,
                errors::SECURITY_DISABLED,
                message,
            ));
        }
        if let Some(refused) = crate::api::tokens::refusal(access, &request, answer.version) {
            return answer.now(refused);
        }
        // Made for the client: a controller on another node judges it (and decides token
        // requests) as the client's, as Kafka's controller judges forwarded requests.
        let client = Some(access.requester().clone());
        let denied = authz::split_controller(access, &mut request);
        let unusable = crate::api::tls_configs::refuse_unusable(&self.node, &mut request);
        let tls_changed = crate::api::tls_configs::names_listener_tls(&self.node, &request);
        let version = answer.version;
        let node = self.node.clone();
        let partitions = node.config.num_partitions;
        let mutations =
            (node.mutation_quotas).take(access, &mut request, version, partitions, now_ms());
        let forwarder = self.forwarder.clone();
        let requester = access.requester().clone();
        answer.later(async move {
            let mut response = forwarder.forward_for(version, request, client).await;
            denied.restore(&mut response);
            if let Some(refused) = unusable {
                authz::merge(&mut response, refused);
            }
            if tls_changed {
                crate::api::tls_configs::reload(&node);
            }
            if let Some(mutations) = mutations {
                let throttle_ms = node
                    .mutation_quotas
                    .settle(mutations, &mut response, now_ms());
                requester.mute_for(throttle_ms, now_ms());
            }
            response
        })
    }

    /// A frame's header and body, or the reply to a frame that cannot be served: one not
    /// readable, or of an API or version fjord does not serve, closes the connection (Kafka
    /// answers an unsupported ApiVersions with the versions it serves, so the client can retry).
    fn decode(&self, frame: Bytes) -> Result<(RequestHeader, Answer, RequestBody), Reply> {
        let request_size = frame.len();
        let mut input = Decoder::new(frame);
        let header = decode_request_header(&mut input)
            .map_err(|error| Reply::Close(format!("unreadable request header: {error}")))?;
        let version = header.request_api_version;
        let Some(api) = ApiKey::from_i16(header.request_api_key) else {
            return Err(Reply::Close(format!(
                "unknown API key {}",
                header.request_api_key
            )));
        };
        let Some((min, max)) = supported_range(api) else {
            return Err(Reply::Close(format!("API {} is not supported", api.name())));
        };
        if version < min || version > max {
            if api == ApiKey::ApiVersions {
                let body = ResponseBody::ApiVersions(api_versions_response(
                    errors::UNSUPPORTED_VERSION,
                    self.node.config.cluster.kraft_version(),
                ));
                return Err(Reply::Now(encode_response(
                    api,
                    0,
                    header.correlation_id,
                    &body,
                )));
            }
            return Err(Reply::Close(format!(
                "{} version {version} is not supported",
                api.name()
            )));
        }
        let body = RequestBody::decode(api, &mut input, version).map_err(|error| {
            Reply::Close(format!(
                "malformed {} v{version} request: {error}",
                api.name()
            ))
        })?;
        let answer = Answer {
            api,
            version,
            correlation_id: header.correlation_id,
            request_size,
            metrics: self.replicas().metrics().clone(),
        };
        Ok((header, answer, body))
    }

    /// The APIs on partition logs: produce, fetch, offsets, deletion, log dirs.
    fn route_log(self: &Arc<Self>, body: RequestBody, answer: Answer, access: &Access) -> Reply {
        let Answer {
            version,
            correlation_id,
            ..
        } = answer;
        let now = now_ms();
        match body {
            RequestBody::Produce(request) => self.route_produce(request, answer, access),
            RequestBody::Fetch(request) => {
                self.fetch
                    .fetch(request, (version, correlation_id), now, access)
            }
            RequestBody::ListOffsets(request) => answer.now(ResponseBody::ListOffsets(
                self.fetch.list_offsets(&request, version, access),
            )),
            RequestBody::OffsetForLeaderEpoch(request) => {
                answer.now(ResponseBody::OffsetForLeaderEpoch(
                    self.fetch.offset_for_leader_epoch(&request, access),
                ))
            }
            RequestBody::DeleteRecords(request) => {
                let deleted = self.log_admin.delete_records(request, now, access);
                answer.later(async move { ResponseBody::DeleteRecords(deleted.await) })
            }
            RequestBody::AlterReplicaLogDirs(request) => {
                let altered = self.log_admin.alter_replica_log_dirs(request, now);
                answer.later(async move { ResponseBody::AlterReplicaLogDirs(altered.await) })
            }
            RequestBody::DescribeLogDirs(request) => {
                let described = self.log_admin.describe_log_dirs(request);
                answer.later(async move { ResponseBody::DescribeLogDirs(described.await) })
            }
            other => unrouted(&other),
        }
    }

    /// A produce: appended at once, or — a transactional one that must first ask its
    /// transaction coordinator (KIP-890) — after the asking. Such a produce is sequenced after
    /// every earlier request and holds back the later ones (see `sequencing`), so the append
    /// still happens in arrival order.
    fn route_produce(
        self: &Arc<Self>,
        request: ProduceRequest,
        answer: Answer,
        access: &Access,
    ) -> Reply {
        let Answer {
            api,
            version,
            correlation_id,
            request_size,
            ..
        } = answer;
        let header = (api, version, correlation_id);
        // The producer's byte rate counts every produce it sends, as Kafka's quota does.
        let node = &self.node;
        let throttle_ms = node.client_quotas.produce.record(
            access.image().client_quotas(),
            access.quota_client(),
            request_size as f64,
            fjord_common::now_ms(),
        );
        access
            .requester()
            .mute_for(throttle_ms, fjord_common::now_ms());
        let header = (header, throttle_ms);
        let Some(ask) = self.txns.produce_ask(&request, version) else {
            let verdicts = Default::default();
            return self.produce.produce(request, header, &verdicts, access);
        };
        let (txns, produce, access) = (self.txns.clone(), self.produce.clone(), access.clone());
        Reply::Later(Box::pin(async move {
            let verdicts = txns.ask_coordinator(ask).await;
            match produce.produce(request, header, &verdicts, &access) {
                Reply::Now(response) => response,
                Reply::Later(future) => future.await,
                Reply::Close(message) => Response::Close(message),
            }
        }))
    }

    /// The transaction APIs (the coordinator's, the leaders' markers, the admin reads) and
    /// InitProducerId.
    fn route_txn(self: &Arc<Self>, body: RequestBody, answer: Answer, access: &Access) -> Reply {
        let version = answer.version;
        let now = now_ms();
        let this = self.txns.clone();
        match body {
            RequestBody::InitProducerId(request) => answer.later(async move {
                ResponseBody::InitProducerId(this.init_producer_id(request).await)
            }),
            RequestBody::AddPartitionsToTxn(request) => {
                let access = access.clone();
                answer.later(async move {
                    let added = this.add_partitions_to_txn(request, version, access).await;
                    ResponseBody::AddPartitionsToTxn(added)
                })
            }
            RequestBody::AddOffsetsToTxn(request) => answer.later(async move {
                ResponseBody::AddOffsetsToTxn(this.add_offsets_to_txn(request).await)
            }),
            RequestBody::EndTxn(request) => answer
                .later(async move { ResponseBody::EndTxn(this.end_txn(request, version).await) }),
            RequestBody::WriteTxnMarkers(request) => {
                let markers = self.txns.markers.clone();
                answer.later(async move {
                    ResponseBody::WriteTxnMarkers(markers.write_txn_markers(request, now).await)
                })
            }
            RequestBody::DescribeTransactions(request) => {
                answer.now(ResponseBody::DescribeTransactions(
                    self.txns.describe_transactions(&request, access),
                ))
            }
            RequestBody::ListTransactions(request) => answer.now(ResponseBody::ListTransactions(
                self.txns.list_transactions(&request, now, access),
            )),
            RequestBody::DescribeProducers(request) => answer.now(ResponseBody::DescribeProducers(
                self.txns.describe_producers(&request, access),
            )),
            other => unrouted(&other),
        }
    }

    /// The cluster's description: ApiVersions, Metadata, DescribeCluster,
    /// DescribeTopicPartitions, DescribeConfigs, ListConfigResources,
    /// DescribeUserScramCredentials, DescribeAcls, DescribeClientQuotas,
    /// DescribeDelegationToken, as this broker's image has them; and client telemetry
    /// (GetTelemetrySubscriptions, PushTelemetry).
    fn route_cluster(
        self: &Arc<Self>,
        body: RequestBody,
        answer: Answer,
        (listener, access): (&str, &Access),
    ) -> Reply {
        let version = answer.version;
        match body {
            RequestBody::ApiVersions(request) => {
                // Who the client is, for client-metrics subscriptions (KIP-714).
                access.requester().named_software(
                    &request.client_software_name,
                    &request.client_software_version,
                );
                answer.now(ResponseBody::ApiVersions(
                    self.api_versions(&request, version),
                ))
            }
            RequestBody::Metadata(request) => {
                let this = self.cluster.clone();
                let endpoint = self.node.advertised(listener);
                let (listener, access) = (listener.to_string(), access.clone());
                answer.later(async move {
                    ResponseBody::Metadata(
                        this.metadata(request, version, (listener, endpoint), access)
                            .await,
                    )
                })
            }
            RequestBody::DescribeTopicPartitions(request) => {
                answer.now(ResponseBody::DescribeTopicPartitions(
                    self.cluster.describe_topic_partitions(&request, access),
                ))
            }
            RequestBody::DescribeCluster(request) => answer.now(ResponseBody::DescribeCluster(
                self.cluster.describe_cluster(
                    &request,
                    (listener, self.node.advertised(listener)),
                    access,
                ),
            )),
            RequestBody::DescribeConfigs(request) => answer.now(ResponseBody::DescribeConfigs(
                self.cluster.describe_configs(&request, access),
            )),
            RequestBody::ListConfigResources(request) => {
                answer.now(ResponseBody::ListConfigResources(
                    self.cluster
                        .list_config_resources(&request, version, access),
                ))
            }
            RequestBody::GetTelemetrySubscriptions(request) => {
                answer.now(ResponseBody::GetTelemetrySubscriptions(
                    self.cluster.get_telemetry_subscriptions(&request, access),
                ))
            }
            RequestBody::PushTelemetry(request) => answer.now(ResponseBody::PushTelemetry(
                self.cluster.push_telemetry(&request, access),
            )),
            RequestBody::DescribeAcls(request) => answer.now(ResponseBody::DescribeAcls(
                self.cluster.describe_acls(&request),
            )),
            RequestBody::DescribeClientQuotas(request) => answer.now(
                ResponseBody::DescribeClientQuotas(self.cluster.describe_client_quotas(&request)),
            ),
            RequestBody::DescribeUserScramCredentials(request) => {
                answer.now(ResponseBody::DescribeUserScramCredentials(
                    self.cluster.describe_user_scram_credentials(&request),
                ))
            }
            RequestBody::DescribeDelegationToken(request) => {
                let config = self.node.config.delegation_tokens();
                answer.now(ResponseBody::DescribeDelegationToken(
                    crate::api::tokens::describe(access, config.as_ref(), &request, version),
                ))
            }
            other => unrouted(&other),
        }
    }

    /// ApiVersions as this broker answers it; Kafka answers a refused request with its error
    /// alone.
    fn api_versions(&self, request: &ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
        let node = (self.node.cluster_id.as_str(), self.node.config.node_id);
        match api_versions_error(request, version, Some(node)) {
            errors::NONE => {
                api_versions_response(errors::NONE, self.node.config.cluster.kraft_version())
            }
            code => ApiVersionsResponse {
                error_code: code,
                ..Default::default()
            },
        }
    }
}

/// What a request's answer is encoded with: its API, version and correlation id; the
/// request's size, which a producer's byte-rate quota counts; where its error codes are counted.
#[derive(Clone)]
struct Answer {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    request_size: usize,
    metrics: Arc<Metrics>,
}

impl Answer {
    /// The answer, ready now.
    fn now(self, body: ResponseBody) -> Reply {
        Reply::Now(self.encode(&body))
    }

    /// The answer `body` will give once it completes.
    fn later<F>(self, body: F) -> Reply
    where
        F: std::future::Future<Output = ResponseBody> + Send + 'static,
    {
        Reply::Later(Box::pin(async move { self.encode(&body.await) }))
    }

    fn encode(&self, body: &ResponseBody) -> Response {
        (self.metrics.requests).answered_with(self.api, |visit| body.visit_error_codes(visit));
        encode_response(self.api, self.version, self.correlation_id, body)
    }
}

/// Requests whose time does not count against a `request_percentage` quota: a follower's
/// fetches, and the requests between nodes, as Kafka exempts them.
fn exempt_from_request_quota(body: &RequestBody) -> bool {
    match body {
        RequestBody::Fetch(r) => r.replica_id >= 0 || r.replica_state.replica_id >= 0,
        RequestBody::WriteTxnMarkers(_) | RequestBody::ApiVersions(_) => true,
        _ => false,
    }
}

/// A reply being worked on, and the time spent working on it (its polls): once it completes,
/// the whole time is accounted for, and the throttle that earns is written into the response.
struct Timed {
    future: crate::net::ReplyFuture,
    spent: Duration,
    /// Records the time spent; the throttle it earns.
    account: Option<Box<dyn FnOnce(Duration) -> i32 + Send>>,
    /// The API and version the response answers.
    answer: (ApiKey, i16),
}

impl std::future::Future for Timed {
    type Output = Response;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Response> {
        let started = Instant::now();
        let polled = self.future.as_mut().poll(cx);
        self.spent += started.elapsed();
        let std::task::Poll::Ready(response) = polled else {
            return std::task::Poll::Pending;
        };
        let throttle_ms = self.account.take().map_or(0, |account| account(self.spent));
        let (api, version) = self.answer;
        std::task::Poll::Ready(with_throttle(api, version, response, throttle_ms))
    }
}

/// `response` with its `throttle_time_ms` raised to `throttle_ms`, as Kafka answers a request
/// its `request_percentage` quota throttles: the time is known only once the response is made,
/// so the field is written into the encoded response, where it sits at a fixed place (all but
/// Produce, ApiVersions and a few token responses, whose connections are muted all the same).
fn with_throttle(api: ApiKey, version: i16, response: Response, throttle_ms: i32) -> Response {
    if throttle_ms <= 0 {
        return response;
    }
    let Some(offset) = fjord_protocol::messages::throttle_time_offset(api, version) else {
        return response;
    };
    // The response header: the correlation id, and in its flexible version no tagged fields.
    let header = 4 + usize::from(fjord_protocol::response_header_version(api, version) == 1);
    let at = header + offset;
    match response {
        Response::Send(bytes) => Response::Send(raise_i32(bytes, at, throttle_ms)),
        Response::SendParts(mut parts) => {
            if let Some(crate::net::OutPart::Bytes(first)) = parts.first_mut() {
                *first = raise_i32(std::mem::take(first), at, throttle_ms);
            }
            Response::SendParts(parts)
        }
        other => other,
    }
}

/// `bytes` with the big-endian i32 at `at` raised to `value` (left as it is when already higher
/// or out of range).
fn raise_i32(bytes: Bytes, at: usize, value: i32) -> Bytes {
    let current = match bytes.get(at..at + 4).map(<[u8; 4]>::try_from) {
        Some(Ok(field)) => i32::from_be_bytes(field),
        _ => return bytes,
    };
    if current >= value {
        return bytes;
    }
    let mut out = bytes
        .try_into_mut()
        .unwrap_or_else(|shared| bytes::BytesMut::from(&shared[..]));
    if let Some(field) = out.get_mut(at..at + 4) {
        field.copy_from_slice(&value.to_be_bytes());
    }
    out.freeze()
}

/// A request a family's router was handed but does not serve: `handle` routes only what
/// `supported_range` lets through, so this is a routing bug; the connection is closed.
fn unrouted(body: &RequestBody) -> Reply {
    tracing::error!(
        api = body.api_key().name(),
        "request routed to the wrong API family"
    );
    Reply::Close(format!("API {} is not supported", body.api_key().name()))
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
    /// Judges the raft RPCs a learner's listener carries (the broker judges everything else).
    pub authorizer: Option<Arc<fjord_metadata::acl::Authorizer>>,
}

impl Dispatch for BrokerDispatch {
    fn sequencing(&self, frame: &Bytes) -> Sequencing {
        match &*self.broker.borrow() {
            Some(broker) => broker.sequencing(frame),
            None => Sequencing::AfterAll,
        }
    }

    fn closed(&self, requester: &Arc<Requester>) {
        if let Some(broker) = &*self.broker.borrow() {
            broker.shares.connection_closed(requester);
        }
    }

    fn dispatch(&self, frame: Bytes, requester: &Arc<Requester>) -> Reply {
        if self.carries_raft && fjord_quorum::is_raft_frame(&frame) {
            let access = Access::new(
                self.authorizer.clone(),
                self.quorum.image(),
                requester.clone(),
            );
            return crate::api::controller::raft_reply(&self.quorum, frame, &access);
        }
        if let Some(broker) = &*self.broker.borrow() {
            return broker.handle(frame, requester, &self.listener);
        }
        let requester = requester.clone();
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
            match broker.handle(frame, &requester, &listener) {
                Reply::Now(response) => response,
                Reply::Later(future) => future.await,
                Reply::Close(message) => Response::Close(message),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_protocol::messages::metadata_response::MetadataResponse;
    use fjord_protocol::{Decodable, Decoder};

    fn throttle_of(response: Response, version: i16) -> i32 {
        let Response::Send(bytes) = response else {
            panic!("not bytes")
        };
        let mut input = Decoder::new(bytes);
        let header_version = fjord_protocol::response_header_version(ApiKey::Metadata, version);
        fjord_protocol::ResponseHeader::decode(&mut input, header_version).unwrap();
        MetadataResponse::decode(&mut input, version)
            .unwrap()
            .throttle_time_ms
    }

    #[test]
    fn a_throttle_is_written_into_an_encoded_response_raising_only() {
        for version in [3, 12] {
            let answer = |throttle_time_ms| {
                let body = ResponseBody::Metadata(MetadataResponse {
                    throttle_time_ms,
                    ..Default::default()
                });
                encode_response(ApiKey::Metadata, version, 7, &body)
            };
            let raised = with_throttle(ApiKey::Metadata, version, answer(0), 250);
            assert_eq!(throttle_of(raised, version), 250, "v{version}");
            let kept = with_throttle(ApiKey::Metadata, version, answer(900), 250);
            assert_eq!(throttle_of(kept, version), 900, "v{version}");
            let none = with_throttle(ApiKey::Metadata, version, answer(0), 0);
            assert_eq!(throttle_of(none, version), 0, "v{version}");
        }
        // Metadata v1 has no throttle time: the response is left as it is.
        let body = ResponseBody::Metadata(MetadataResponse::default());
        let Response::Send(before) = encode_response(ApiKey::Metadata, 1, 7, &body) else {
            panic!()
        };
        let Response::Send(after) =
            with_throttle(ApiKey::Metadata, 1, Response::Send(before.clone()), 250)
        else {
            panic!()
        };
        assert_eq!(before, after);
    }
}
