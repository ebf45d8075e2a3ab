//! Group APIs at the broker: FindCoordinator, and routing every group request to the
//! coordinator shard that owns its group (see `coordinator::group`). The internal topic
//! `__consumer_offsets` is created on first use, as in Kafka.

use std::sync::Arc;

use fjord_group::{ClientInfo, Topics};
use fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use fjord_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};

use crate::api::txn_verify::Verdicts;
use crate::api::{authz, encode_response, Access, GroupApi};
use crate::coordinator::group::{topics_view, GroupAnswer, OFFSETS_TOPIC};
use crate::coordinator::share_state::SHARE_STATE_TOPIC;
use crate::coordinator::txn::TXN_TOPIC;
use crate::net::{Reply, Response};
use fjord_common::errors;
use fjord_common::errors::KafkaError;
use fjord_metadata::acl::AclOperation;

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// A share partition's state ("group:topicId:partition"), asked by brokers (KIP-932).
const KEY_TYPE_SHARE: i8 = 2;

impl GroupApi {
    /// Creates `__consumer_offsets` if missing and loads the coordinator shards this broker hosts.
    pub(crate) async fn ensure_group_coordinator(&self) -> Result<(), KafkaError> {
        self.forwarder
            .ensure_internal_topic(OFFSETS_TOPIC, self.node.config.offsets_topic())
            .await?;
        if !self.groups.all_loaded() {
            // Another request may have committed the topic a moment ago and not yet opened its
            // partitions: bring them in line with the image before loading the shards.
            self.replicas
                .apply_image(&self.node.image(), fjord_common::now_ms())?;
        }
        self.groups.load_hosted()
    }

    /// Creates `__share_group_state` if missing and loads the share coordinator shards this
    /// broker hosts.
    async fn ensure_share_coordinator(&self) -> Result<(), KafkaError> {
        self.forwarder
            .ensure_internal_topic(SHARE_STATE_TOPIC, self.node.config.share_state_topic())
            .await?;
        if !self.share_state.shards.all_loaded() {
            self.replicas
                .apply_image(&self.node.image(), fjord_common::now_ms())?;
        }
        self.share_state.shards.load_hosted().map(|_| ())
    }

    /// A key the principal may not describe (DESCRIBE on the group or transactional id) is
    /// refused GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    pub(crate) fn find_coordinator(
        self: &Arc<Self>,
        request: FindCoordinatorRequest,
        version: i16,
        (listener, own): (&str, (String, i32)),
        access: &Access,
    ) -> impl std::future::Future<Output = FindCoordinatorResponse> + Send + 'static {
        let this = self.clone();
        let listener = listener.to_string();
        let keys: Vec<String> = if version >= 4 {
            request.coordinator_keys.clone()
        } else {
            vec![request.key.clone()]
        };
        let refused: Vec<Option<i16>> = keys
            .iter()
            .map(|key| match request.key_type {
                KEY_TYPE_GROUP if !access.allows_group(AclOperation::Describe, key) => {
                    Some(errors::GROUP_AUTHORIZATION_FAILED)
                }
                KEY_TYPE_TRANSACTION if !access.allows_txn_id(AclOperation::Describe, key) => {
                    Some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                }
                // Only brokers ask for share coordinators.
                KEY_TYPE_SHARE if !access.allows_cluster(AclOperation::ClusterAction) => {
                    Some(errors::CLUSTER_AUTHORIZATION_FAILED)
                }
                KEY_TYPE_SHARE if !is_share_state_key(key) => Some(errors::INVALID_REQUEST),
                _ => None,
            })
            .collect();
        async move {
            let ready = match request.key_type {
                KEY_TYPE_GROUP => this.ensure_group_coordinator().await,
                KEY_TYPE_TRANSACTION => this.txns.ensure_txn_coordinator().await,
                KEY_TYPE_SHARE => this.ensure_share_coordinator().await,
                _ => Ok(()),
            };
            // Every registered broker's endpoint on this listener, read once for all the keys.
            let endpoints = this.node.live_endpoints(&listener, own);
            let coordinators: Vec<Coordinator> = keys
                .iter()
                .zip(refused)
                .map(|(key, refused)| {
                    let (error_code, error_message) = match (&ready, request.key_type) {
                        _ if let Some(code) = refused => {
                            (code, Some(authz::message(code).to_string()))
                        }
                        (Ok(()), KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION | KEY_TYPE_SHARE) => {
                            (errors::NONE, None)
                        }
                        (Err(error), KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION | KEY_TYPE_SHARE) => (
                            errors::COORDINATOR_NOT_AVAILABLE,
                            Some(error.message.clone()),
                        ),
                        _ => (
                            errors::INVALID_REQUEST,
                            Some(format!("unknown key type {}", request.key_type)),
                        ),
                    };
                    this.coordinator(
                        key,
                        request.key_type,
                        (error_code, error_message),
                        &endpoints,
                    )
                })
                .collect();
            if version >= 4 {
                FindCoordinatorResponse {
                    coordinators,
                    ..Default::default()
                }
            } else {
                let c = coordinators.into_iter().next().unwrap_or_default();
                FindCoordinatorResponse {
                    error_code: c.error_code,
                    error_message: c.error_message,
                    node_id: c.node_id,
                    host: c.host,
                    port: c.port,
                    ..Default::default()
                }
            }
        }
    }

    /// `key`'s coordinator: the leader of the key's partition of the coordinator's topic, reached
    /// on the listener the request came in on (`endpoints`); `outcome` is the key's error so far.
    fn coordinator(
        &self,
        key: &str,
        key_type: i8,
        (error_code, error_message): (i16, Option<String>),
        endpoints: &[(i32, String, i32, Option<String>)],
    ) -> Coordinator {
        let leader = (error_code == errors::NONE)
            .then(|| match key_type {
                KEY_TYPE_GROUP => {
                    self.internal_leader(OFFSETS_TOPIC, self.groups.partition_of(key))
                }
                KEY_TYPE_SHARE => self.internal_leader(
                    SHARE_STATE_TOPIC,
                    fjord_common::coordinator_partition(
                        key,
                        self.share_state.shards.num_partitions(),
                    ),
                ),
                _ => self.internal_leader(TXN_TOPIC, self.txns.txns.partition_of(key)),
            })
            .flatten()
            .and_then(|id| endpoints.iter().find(|b| b.0 == id).cloned());
        match leader {
            Some((node_id, host, port, _)) => Coordinator {
                key: key.to_string(),
                node_id,
                host,
                port,
                error_code,
                error_message,
            },
            None => Coordinator {
                key: key.to_string(),
                node_id: -1,
                host: String::new(),
                port: -1,
                error_code: if error_code == errors::NONE {
                    errors::COORDINATOR_NOT_AVAILABLE
                } else {
                    error_code
                },
                error_message,
            },
        }
    }

    /// The leader of an internal topic's partition, if it has one.
    fn internal_leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let image = self.node.image();
        let leader = image
            .topic(topic)?
            .partitions
            .get(usize::try_from(partition).ok()?)?
            .leader;
        (leader >= 0).then_some(leader)
    }

    /// Routes a group request to its shard. Once the coordinator is loaded the request runs on
    /// its shard at dispatch (so a connection's group requests take effect in arrival order) and
    /// the reply waits for the shard's answer, after its records are durable. Before that — the
    /// first group request creates `__consumer_offsets` — everything happens in the reply, and the
    /// request is sequenced after all earlier ones (see `Broker::sequencing`).
    /// Entries the principal may not touch are answered with Kafka's errors beside the others
    /// (`authz::split`).
    pub(crate) fn group_request(
        self: &Arc<Self>,
        mut body: RequestBody,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        client_id: Option<String>,
        access: &Access,
    ) -> Reply {
        let share_group = match &body {
            RequestBody::ShareGroupHeartbeat(r) => self.share_group_timeouts(&r.group_id),
            _ => Default::default(),
        };
        let client = ClientInfo {
            client_id: client_id.unwrap_or_default(),
            client_host: format!("/{}", access.requester().peer.ip()),
            share_group,
        };
        let denied = authz::split(access, &mut body, version);
        let metrics = self.replicas.metrics().clone();
        let respond = move |outcome: Result<ResponseBody, KafkaError>| match outcome {
            Ok(mut response) => {
                denied.restore(&mut response);
                (metrics.requests).answered_with(api, |visit| response.visit_error_codes(visit));
                encode_response(api, version, correlation_id, &response)
            }
            Err(error) => Response::Close(error.to_string()),
        };
        if self.groups.all_loaded() {
            let answer = self.start_group_request(body, version, &client);
            return Reply::Later(Box::pin(async move { respond(answer.await) }));
        }
        let this = self.clone();
        Reply::Later(Box::pin(async move {
            if let Err(error) = this.ensure_group_coordinator().await {
                return Response::Close(error.to_string());
            }
            let answer = this.start_group_request(body, version, &client);
            respond(answer.await)
        }))
    }

    /// A share group's session timeout and heartbeat interval: its own configs, else the
    /// broker's `group.share.*` defaults.
    fn share_group_timeouts(&self, group_id: &str) -> fjord_group::ShareGroupTimeouts {
        let image = self.node.image();
        let settings = fjord_config::group_configs::share_group_settings(
            image.group_configs().get(group_id),
            &self.node.config.share_groups(),
        );
        fjord_group::ShareGroupTimeouts {
            session_timeout_ms: settings.session_timeout_ms,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
        }
    }

    /// Starts a TxnOffsetCommit on its group's shard, checked there against the producer's
    /// state and transaction (`verdicts`: its transaction coordinator's, if asked beforehand).
    fn start_txn_offset_commit(
        &self,
        body: RequestBody,
        version: i16,
        topics: &Topics,
        client: &ClientInfo,
        verdicts: &Verdicts,
    ) -> GroupAnswer {
        let RequestBody::TxnOffsetCommit(r) = &body else {
            let error = KafkaError::new(errors::INVALID_REQUEST, "not a TxnOffsetCommit");
            return Box::pin(async { Err(error) });
        };
        let partition = self.groups.partition_of(&r.group_id);
        let (id, producer_id, epoch) =
            (r.transactional_id.clone(), r.producer_id, r.producer_epoch);
        self.groups
            .start_checked(partition, version, body, topics, client, |p| {
                self.txns
                    .check_txn_offset_commit(&id, producer_id, epoch, p, verdicts, version)
            })
    }

    /// Starts a group request on the shard(s) owning its group(s).
    fn start_group_request(
        self: &Arc<Self>,
        body: RequestBody,
        version: i16,
        client: &ClientInfo,
    ) -> GroupAnswer {
        let topics = topics_view(&self.node.image());
        if let RequestBody::TxnOffsetCommit(r) = &body {
            // The transaction coordinator is asked first when it must be (KIP-890; the request
            // is then sequenced after everything before it, `txn_verify`).
            let Some(ask) = self.txns.offsets_ask(r, version) else {
                return self.start_txn_offset_commit(
                    body,
                    version,
                    &topics,
                    client,
                    &Default::default(),
                );
            };
            let (this, client) = (self.clone(), client.clone());
            return Box::pin(async move {
                let verdicts = this.txns.ask_coordinator(ask).await;
                this.start_txn_offset_commit(body, version, &topics, &client, &verdicts)
                    .await
            });
        }
        let group_id = match &body {
            RequestBody::JoinGroup(r) => Some(&r.group_id),
            RequestBody::SyncGroup(r) => Some(&r.group_id),
            RequestBody::Heartbeat(r) => Some(&r.group_id),
            RequestBody::LeaveGroup(r) => Some(&r.group_id),
            RequestBody::OffsetCommit(r) => Some(&r.group_id),
            RequestBody::OffsetDelete(r) => Some(&r.group_id),
            RequestBody::ConsumerGroupHeartbeat(r) => Some(&r.group_id),
            RequestBody::ShareGroupHeartbeat(r) => Some(&r.group_id),
            RequestBody::OffsetFetch(r) if version < 8 => Some(&r.group_id),
            _ => None,
        };
        let partition = group_id.map(|g| self.groups.partition_of(g));
        match partition {
            Some(partition) => self.groups.start(partition, version, body, &topics, client),
            None if matches!(body, RequestBody::ListGroups(_)) => {
                self.groups.list_groups(version, body, &topics)
            }
            None => self.groups.multi_group(version, body, &topics, client),
        }
    }
}

/// Whether `key` names a share partition as "group:topicId:partition" (the group id may itself
/// hold colons: the last two fields are the topic id and the partition).
fn is_share_state_key(key: &str) -> bool {
    let mut fields = key.rsplitn(3, ':');
    let (Some(partition), Some(topic_id), Some(group)) =
        (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    !group.is_empty()
        && topic_id.parse::<fjord_common::Uuid>().is_ok()
        && partition.parse::<i32>().is_ok_and(|p| p >= 0)
}
