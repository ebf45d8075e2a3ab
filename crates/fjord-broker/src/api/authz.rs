//! Authorization, as Kafka's request handlers check it (`authorizer.class.name` set to its
//! StandardAuthorizer): every request is checked against the ACLs in the metadata image for the
//! connection's principal and address before it takes effect.
//!
//! Three shapes, as in Kafka:
//! - a request refused whole ([`refusal`]): an operation on the cluster (CLUSTER_ACTION, ALTER,
//!   DESCRIBE), on a group a member acts in, on a transactional id;
//! - a request split ([`split`], [`split_controller`]): the entries the principal may not touch
//!   (topics, groups, config resources) are taken out and answered with Kafka's error beside the
//!   others' answers ([`Denied::restore`]);
//! - entries checked where they are served (produce, fetch, offsets, metadata, configs,
//!   coordinators, producers and transactions), through [`Access`].

use std::sync::Arc;

use fjord_common::errors;
use fjord_common::Requester;
use fjord_controller::ControllerApi;
use fjord_metadata::acl::{AclOperation, Authorizer, ResourceType, CLUSTER_NAME};
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::alter_configs_request::AlterConfigsRequest;
use fjord_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use fjord_protocol::messages::create_partitions_request::CreatePartitionsRequest;
use fjord_protocol::messages::create_topics_request::CreateTopicsRequest;
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use fjord_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestGroup};
use fjord_protocol::messages::share_group_describe_request::ShareGroupDescribeRequest;
use fjord_protocol::messages::{
    offset_commit_request, offset_delete_request, offset_delete_response, offset_fetch_response,
    txn_offset_commit_request,
};
use fjord_protocol::{RequestBody, ResponseBody};

use AclOperation::{
    Alter, AlterConfigs, ClusterAction, Create, Delete, Describe, DescribeConfigs, Read, Write,
};

/// Kafka's messages for its authorization errors.
pub(crate) fn message(code: i16) -> &'static str {
    match code {
        errors::TOPIC_AUTHORIZATION_FAILED => "Topic authorization failed.",
        errors::GROUP_AUTHORIZATION_FAILED => "Group authorization failed.",
        errors::CLUSTER_AUTHORIZATION_FAILED => "Cluster authorization failed.",
        errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => "Transactional Id authorization failed.",
        _ => "Authorization failed.",
    }
}

/// The authorizer `config` turns on (`authorizer.class.name`), if any.
pub fn authorizer(config: &fjord_config::BrokerConfig) -> Option<Arc<Authorizer>> {
    config.authorizer.as_ref().map(|a| {
        Arc::new(Authorizer::new(
            a.super_users.iter().cloned(),
            a.allow_everyone_if_no_acl_found,
        ))
    })
}

/// Who sends one request (its connection's principal and address, its client id) and what they
/// may do: every check of the request is made on the same image.
#[derive(Clone)]
pub(crate) struct Access {
    /// None: no authorizer is configured, and everything is allowed.
    authorizer: Option<Arc<Authorizer>>,
    image: Arc<MetadataImage>,
    requester: Arc<Requester>,
    /// The request header's client id ("" when it has none), which quotas are set for.
    client_id: String,
}

impl Access {
    pub(crate) fn new(
        authorizer: Option<Arc<Authorizer>>,
        image: Arc<MetadataImage>,
        requester: Arc<Requester>,
    ) -> Access {
        Access {
            authorizer,
            image,
            requester,
            client_id: String::new(),
        }
    }

    /// The same, for a request sent as `client_id`.
    pub(crate) fn with_client_id(mut self, client_id: Option<&str>) -> Access {
        self.client_id = client_id.unwrap_or_default().to_string();
        self
    }

    /// The request header's client id ("" when it has none).
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Whom the request counts against for client quotas.
    pub(crate) fn quota_client(&self) -> crate::quota::Client<'_> {
        crate::quota::Client {
            user: &self.requester.principal.name,
            client_id: &self.client_id,
        }
    }

    /// The image the request is checked on.
    pub(crate) fn image(&self) -> &Arc<MetadataImage> {
        &self.image
    }

    pub(crate) fn requester(&self) -> &Arc<Requester> {
        &self.requester
    }

    pub(crate) fn allows(&self, operation: AclOperation, kind: ResourceType, name: &str) -> bool {
        self.authorizer.as_ref().is_none_or(|authorizer| {
            authorizer.authorize(self.image.acls(), &self.requester, operation, kind, name)
        })
    }

    pub(crate) fn allows_topic(&self, operation: AclOperation, topic: &str) -> bool {
        self.allows(operation, ResourceType::Topic, topic)
    }

    pub(crate) fn allows_group(&self, operation: AclOperation, group: &str) -> bool {
        self.allows(operation, ResourceType::Group, group)
    }

    pub(crate) fn allows_txn_id(&self, operation: AclOperation, id: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, id)
    }

    pub(crate) fn allows_cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// The operations on a resource the principal may do, as the `authorized_operations` bit
    /// fields carry them (bit n: the operation with code n), among those the resource type
    /// supports. Without an authorizer, every supported one.
    pub(crate) fn authorized_operations(&self, kind: ResourceType, name: &str) -> i32 {
        use AclOperation::*;
        let supported: &[AclOperation] = match kind {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        };
        supported
            .iter()
            .filter(|&&operation| self.allows(operation, kind, name))
            .fold(0, |bits, operation| bits | 1 << operation.code())
    }

    /// The cluster's `authorized_operations` as Metadata and DescribeCluster answer them when
    /// asked: 0 without DESCRIBE on the cluster.
    pub(crate) fn cluster_operations(&self) -> i32 {
        if self.allows_cluster(Describe) {
            self.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    }

    /// Whether the principal may do `operation` on some resource of `kind` (an idempotent
    /// producer's WRITE on any topic).
    pub(crate) fn allows_any(&self, operation: AclOperation, kind: ResourceType) -> bool {
        self.authorizer.as_ref().is_none_or(|authorizer| {
            authorizer.authorize_any(self.image.acls(), &self.requester, operation, kind)
        })
    }
}

/// The operation on the cluster a request needs, for the requests that need only that.
fn cluster_operation(body: &RequestBody, version: i16) -> Option<AclOperation> {
    Some(match body {
        RequestBody::WriteTxnMarkers(_)
        | RequestBody::AllocateProducerIds(_)
        | RequestBody::BrokerRegistration(_)
        | RequestBody::BrokerHeartbeat(_)
        | RequestBody::AlterPartition(_)
        | RequestBody::ControllerRegistration(_)
        | RequestBody::InitializeShareGroupState(_)
        | RequestBody::ReadShareGroupState(_)
        | RequestBody::WriteShareGroupState(_)
        | RequestBody::DeleteShareGroupState(_)
        | RequestBody::ReadShareGroupStateSummary(_) => ClusterAction,
        // KIP-890's batched form, sent between brokers.
        RequestBody::AddPartitionsToTxn(_) if version >= 4 => ClusterAction,
        RequestBody::AlterReplicaLogDirs(_)
        | RequestBody::ElectLeaders(_)
        | RequestBody::AlterPartitionReassignments(_)
        | RequestBody::AlterUserScramCredentials(_)
        | RequestBody::CreateAcls(_)
        | RequestBody::DeleteAcls(_)
        | RequestBody::AddRaftVoter(_)
        | RequestBody::RemoveRaftVoter(_) => Alter,
        RequestBody::AlterClientQuotas(_) => AlterConfigs,
        RequestBody::DescribeClientQuotas(_) | RequestBody::ListConfigResources(_) => {
            DescribeConfigs
        }
        RequestBody::DescribeLogDirs(_)
        | RequestBody::ListPartitionReassignments(_)
        | RequestBody::DescribeUserScramCredentials(_)
        | RequestBody::DescribeAcls(_)
        | RequestBody::DescribeQuorum(_) => Describe,
        _ => return None,
    })
}

/// The group operation a group request needs on its one group, refused whole without it.
fn group_operation(body: &RequestBody, version: i16) -> Option<(AclOperation, &str)> {
    Some(match body {
        RequestBody::JoinGroup(r) => (Read, &r.group_id),
        RequestBody::SyncGroup(r) => (Read, &r.group_id),
        RequestBody::Heartbeat(r) => (Read, &r.group_id),
        RequestBody::LeaveGroup(r) => (Read, &r.group_id),
        RequestBody::OffsetCommit(r) => (Read, &r.group_id),
        RequestBody::ConsumerGroupHeartbeat(r) => (Read, &r.group_id),
        RequestBody::ShareGroupHeartbeat(r) => (Read, &r.group_id),
        RequestBody::OffsetDelete(r) => (Delete, &r.group_id),
        RequestBody::OffsetFetch(r) if version < 8 => (Describe, &r.group_id),
        _ => return None,
    })
}

/// The transactional id a request acts for, which it needs WRITE on.
fn transactional_id(body: &RequestBody, version: i16) -> Option<&str> {
    match body {
        RequestBody::InitProducerId(r) => r.transactional_id.as_deref(),
        RequestBody::AddPartitionsToTxn(r) if version < 4 => Some(&r.v3_and_below_transactional_id),
        RequestBody::AddOffsetsToTxn(r) => Some(&r.transactional_id),
        RequestBody::EndTxn(r) => Some(&r.transactional_id),
        RequestBody::TxnOffsetCommit(r) => Some(&r.transactional_id),
        _ => None,
    }
}

/// A request refused whole.
pub(crate) enum Refusal {
    /// The answer to give.
    Answer(ResponseBody),
    /// Refused, but the API has no shape to answer it with (a bug): the connection is closed.
    Close(String),
}

/// A request the principal may not make at all, or None when it may (its entries may still be
/// refused one by one). Checked before anything else of the request.
pub(crate) fn refusal(access: &Access, body: &RequestBody, version: i16) -> Option<Refusal> {
    access.authorizer.as_ref()?;
    let code = refusal_code(access, body, version)?;
    Some(match refused(body, version, code) {
        Some(answer) => Refusal::Answer(answer),
        None => Refusal::Close(format!(
            "{} refused ({}), with no answer to give",
            body.api_key().name(),
            errors::name(code)
        )),
    })
}

fn refusal_code(access: &Access, body: &RequestBody, version: i16) -> Option<i16> {
    if let Some(operation) = cluster_operation(body, version) {
        return (!access.allows_cluster(operation)).then_some(errors::CLUSTER_AUTHORIZATION_FAILED);
    }
    if let Some(id) = transactional_id(body, version) {
        if !access.allows_txn_id(Write, id) {
            return Some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
    }
    if let Some((operation, group)) = group_operation(body, version) {
        return (!access.allows_group(operation, group))
            .then_some(errors::GROUP_AUTHORIZATION_FAILED);
    }
    match body {
        // An idempotent producer without a transactional id: IDEMPOTENT_WRITE on the cluster
        // or WRITE on some topic.
        RequestBody::InitProducerId(r)
            if r.transactional_id.is_none()
                && !access.allows_cluster(AclOperation::IdempotentWrite)
                && !access.allows_any(Write, ResourceType::Topic) =>
        {
            Some(errors::CLUSTER_AUTHORIZATION_FAILED)
        }
        RequestBody::AddOffsetsToTxn(r) if !access.allows_group(Read, &r.group_id) => {
            Some(errors::GROUP_AUTHORIZATION_FAILED)
        }
        RequestBody::TxnOffsetCommit(r) if !access.allows_group(Read, &r.group_id) => {
            Some(errors::GROUP_AUTHORIZATION_FAILED)
        }
        RequestBody::Produce(r) => produce_refusal(access, r),
        _ => None,
    }
}

/// A produce with transactional records needs WRITE on its transactional id.
fn produce_refusal(
    access: &Access,
    request: &fjord_protocol::messages::produce_request::ProduceRequest,
) -> Option<i16> {
    let transactional = request.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|p| {
            p.records.as_ref().is_some_and(|r| {
                fjord_records::BatchHeader::parse(r).is_ok_and(|h| h.is_transactional())
            })
        })
    });
    let allowed = request
        .transactional_id
        .as_deref()
        .is_some_and(|id| access.allows_txn_id(Write, id));
    (transactional && !allowed).then_some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
}

/// `body` refused whole with `code`, shaped as its handler would answer.
fn refused(body: &RequestBody, version: i16, code: i16) -> Option<ResponseBody> {
    if let Some(response) = fjord_group::refusal(version, body, code) {
        return Some(response);
    }
    let message = message(code);
    match ControllerApi::from_body(body.clone()) {
        Ok(api) => Some(fjord_controller::error_response(&api, code, message)),
        Err(body) => crate::api::refusals::refused(&body, version, code, message),
    }
}

/// What a split request's refused entries are answered with.
pub(crate) struct Denied {
    /// The answers to the entries taken out, merged into the answer to the rest.
    parts: Vec<ResponseBody>,
    /// OffsetFetch of every topic: the topics the principal may not describe are left out of
    /// the answer.
    hide_topics: Option<Access>,
    /// ListGroups without DESCRIBE on the cluster: only the groups the principal may describe.
    hide_groups: Option<Access>,
    /// DescribeGroups or ConsumerGroupDescribe asking for `authorized_operations`.
    group_operations: Option<Access>,
}

impl Denied {
    fn none() -> Denied {
        Denied {
            parts: Vec::new(),
            hide_topics: None,
            hide_groups: None,
            group_operations: None,
        }
    }

    /// `response` with the refused entries added back, and what must not be seen left out.
    pub(crate) fn restore(self, response: &mut ResponseBody) {
        for part in self.parts {
            merge(response, part);
        }
        if let Some(access) = self.hide_topics {
            if let ResponseBody::OffsetFetch(r) = response {
                r.topics.retain(|t| access.allows_topic(Describe, &t.name));
                for g in &mut r.groups {
                    g.topics.retain(|t| access.allows_topic(Describe, &t.name));
                }
            }
        }
        if let Some(access) = self.hide_groups {
            if let ResponseBody::ListGroups(r) = response {
                r.groups
                    .retain(|g| access.allows_group(Describe, &g.group_id));
            }
        }
        if let Some(access) = self.group_operations {
            let operations = |id: &str| access.authorized_operations(ResourceType::Group, id);
            match response {
                ResponseBody::DescribeGroups(r) => {
                    for g in r.groups.iter_mut().filter(|g| g.error_code == errors::NONE) {
                        g.authorized_operations = operations(&g.group_id);
                    }
                }
                ResponseBody::ConsumerGroupDescribe(r) => {
                    for g in r.groups.iter_mut().filter(|g| g.error_code == errors::NONE) {
                        g.authorized_operations = operations(&g.group_id);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Moves the elements `denied` picks out of `items`, keeping the others in order.
fn take<T>(items: &mut Vec<T>, denied: impl Fn(&T) -> bool) -> Vec<T> {
    let (out, kept): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(denied);
    *items = kept;
    out
}

/// Takes out of a group request the entries the principal may not touch, to be answered by
/// [`Denied::restore`].
pub(crate) fn split(access: &Access, body: &mut RequestBody, version: i16) -> Denied {
    let mut denied = Denied::none();
    let with_operations = match body {
        RequestBody::DescribeGroups(r) => r.include_authorized_operations,
        RequestBody::ConsumerGroupDescribe(r) => r.include_authorized_operations,
        _ => false,
    };
    if with_operations {
        denied.group_operations = Some(access.clone());
    }
    if access.authorizer.is_none() {
        return denied;
    }
    let topic_refused = errors::TOPIC_AUTHORIZATION_FAILED;
    let group_refused = errors::GROUP_AUTHORIZATION_FAILED;
    let part = match body {
        RequestBody::OffsetCommit(r) => {
            let topics = take(&mut r.topics, |t| !access.allows_topic(Read, &t.name));
            (!topics.is_empty())
                .then(|| {
                    let part = offset_commit_request::OffsetCommitRequest {
                        topics,
                        ..Default::default()
                    };
                    refused(&RequestBody::OffsetCommit(part), version, topic_refused)
                })
                .flatten()
        }
        RequestBody::TxnOffsetCommit(r) => {
            let topics = take(&mut r.topics, |t| !access.allows_topic(Read, &t.name));
            (!topics.is_empty())
                .then(|| {
                    let part = txn_offset_commit_request::TxnOffsetCommitRequest {
                        topics,
                        ..Default::default()
                    };
                    refused(&RequestBody::TxnOffsetCommit(part), version, topic_refused)
                })
                .flatten()
        }
        RequestBody::OffsetDelete(r) => {
            let topics = take(&mut r.topics, |t| !access.allows_topic(Read, &t.name));
            (!topics.is_empty()).then(|| offset_delete_refused(topics))
        }
        RequestBody::OffsetFetch(r) => split_offset_fetch(access, r, version, &mut denied),
        RequestBody::DescribeGroups(r) => {
            let groups = take(&mut r.groups, |g| !access.allows_group(Describe, g));
            (!groups.is_empty())
                .then(|| {
                    let part = DescribeGroupsRequest {
                        groups,
                        ..Default::default()
                    };
                    refused(&RequestBody::DescribeGroups(part), version, group_refused)
                })
                .flatten()
        }
        RequestBody::ShareGroupDescribe(r) => {
            let group_ids = take(&mut r.group_ids, |g| !access.allows_group(Describe, g));
            (!group_ids.is_empty())
                .then(|| {
                    let part = ShareGroupDescribeRequest {
                        group_ids,
                        ..Default::default()
                    };
                    refused(
                        &RequestBody::ShareGroupDescribe(part),
                        version,
                        group_refused,
                    )
                })
                .flatten()
        }
        RequestBody::ConsumerGroupDescribe(r) => {
            let group_ids = take(&mut r.group_ids, |g| !access.allows_group(Describe, g));
            (!group_ids.is_empty())
                .then(|| {
                    let part = ConsumerGroupDescribeRequest {
                        group_ids,
                        ..Default::default()
                    };
                    refused(
                        &RequestBody::ConsumerGroupDescribe(part),
                        version,
                        group_refused,
                    )
                })
                .flatten()
        }
        RequestBody::DeleteGroups(r) => {
            let groups_names = take(&mut r.groups_names, |g| !access.allows_group(Delete, g));
            (!groups_names.is_empty())
                .then(|| {
                    let part = DeleteGroupsRequest { groups_names };
                    refused(&RequestBody::DeleteGroups(part), version, group_refused)
                })
                .flatten()
        }
        RequestBody::ListGroups(_) if !access.allows_cluster(Describe) => {
            denied.hide_groups = Some(access.clone());
            None
        }
        _ => None,
    };
    denied.parts.extend(part);
    denied
}

/// OffsetDelete's topics refused per partition (its request-level error is the group's).
fn offset_delete_refused(
    topics: Vec<offset_delete_request::OffsetDeleteRequestTopic>,
) -> ResponseBody {
    use offset_delete_response::{
        OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    ResponseBody::OffsetDelete(OffsetDeleteResponse {
        topics: topics
            .into_iter()
            .map(|t| OffsetDeleteResponseTopic {
                name: t.name,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| OffsetDeleteResponsePartition {
                        partition_index: p.partition_index,
                        error_code: errors::TOPIC_AUTHORIZATION_FAILED,
                    })
                    .collect(),
            })
            .collect(),
        ..Default::default()
    })
}

/// OffsetFetch: groups (v8+) the principal may not describe are refused; of the others, named
/// topics it may not describe are refused per partition, and an all-topics fetch leaves them
/// out.
fn split_offset_fetch(
    access: &Access,
    request: &mut OffsetFetchRequest,
    version: i16,
    denied: &mut Denied,
) -> Option<ResponseBody> {
    use offset_fetch_response::*;
    let refused_partition = |partition_index| OffsetFetchResponsePartitions {
        partition_index,
        committed_offset: -1,
        committed_leader_epoch: -1,
        metadata: Some(String::new()),
        error_code: errors::TOPIC_AUTHORIZATION_FAILED,
    };
    if version < 8 {
        let Some(topics) = &mut request.topics else {
            denied.hide_topics = Some(access.clone());
            return None;
        };
        let refused = take(topics, |t| !access.allows_topic(Describe, &t.name));
        return (!refused.is_empty()).then(|| {
            ResponseBody::OffsetFetch(OffsetFetchResponse {
                topics: refused
                    .into_iter()
                    .map(|t| OffsetFetchResponseTopic {
                        name: t.name,
                        partitions: t
                            .partition_indexes
                            .into_iter()
                            .map(|p| {
                                let r = refused_partition(p);
                                OffsetFetchResponsePartition {
                                    partition_index: r.partition_index,
                                    committed_offset: r.committed_offset,
                                    committed_leader_epoch: r.committed_leader_epoch,
                                    metadata: r.metadata,
                                    error_code: r.error_code,
                                }
                            })
                            .collect(),
                    })
                    .collect(),
                ..Default::default()
            })
        });
    }
    let refused_groups = take(&mut request.groups, |g| {
        !access.allows_group(Describe, &g.group_id)
    });
    let mut groups: Vec<OffsetFetchResponseGroup> = refused_groups
        .into_iter()
        .map(|g: OffsetFetchRequestGroup| OffsetFetchResponseGroup {
            group_id: g.group_id,
            error_code: errors::GROUP_AUTHORIZATION_FAILED,
            ..Default::default()
        })
        .collect();
    for group in &mut request.groups {
        let Some(topics) = &mut group.topics else {
            denied.hide_topics = Some(access.clone());
            continue;
        };
        let refused = take(topics, |t| !access.allows_topic(Describe, &t.name));
        if refused.is_empty() {
            continue;
        }
        groups.push(OffsetFetchResponseGroup {
            group_id: group.group_id.clone(),
            topics: refused
                .into_iter()
                .map(|t| OffsetFetchResponseTopics {
                    name: t.name,
                    topic_id: t.topic_id,
                    partitions: t
                        .partition_indexes
                        .into_iter()
                        .map(refused_partition)
                        .collect(),
                })
                .collect(),
            ..Default::default()
        });
    }
    (!groups.is_empty()).then(|| {
        ResponseBody::OffsetFetch(OffsetFetchResponse {
            groups,
            ..Default::default()
        })
    })
}

/// Takes out of a controller request the entries the principal may not touch.
pub(crate) fn split_controller(access: &Access, api: &mut ControllerApi) -> Denied {
    let mut denied = Denied::none();
    if access.authorizer.is_none() {
        return denied;
    }
    let code = errors::TOPIC_AUTHORIZATION_FAILED;
    let part = match api {
        // CREATE on the cluster allows every topic; else CREATE on each.
        ControllerApi::CreateTopics(r) if !access.allows_cluster(Create) => {
            let topics = take(&mut r.topics, |t| !access.allows_topic(Create, &t.name));
            (!topics.is_empty()).then(|| {
                ControllerApi::CreateTopics(CreateTopicsRequest {
                    topics,
                    ..Default::default()
                })
            })
        }
        ControllerApi::DeleteTopics(r) => {
            let image = &access.image;
            let name_of = |name: &Option<String>, id: &fjord_common::Uuid| match name {
                Some(name) => Some(name.clone()),
                None => image.topic_by_id(id).map(|t| t.name.clone()),
            };
            let topics = take(&mut r.topics, |t| {
                name_of(&t.name, &t.topic_id).is_some_and(|n| !access.allows_topic(Delete, &n))
            });
            let topic_names = take(&mut r.topic_names, |n| !access.allows_topic(Delete, n));
            (!topics.is_empty() || !topic_names.is_empty()).then(|| {
                ControllerApi::DeleteTopics(DeleteTopicsRequest {
                    topics,
                    topic_names,
                    ..Default::default()
                })
            })
        }
        ControllerApi::CreatePartitions(r) => {
            let topics = take(&mut r.topics, |t| !access.allows_topic(Alter, &t.name));
            (!topics.is_empty()).then(|| {
                ControllerApi::CreatePartitions(CreatePartitionsRequest {
                    topics,
                    ..Default::default()
                })
            })
        }
        ControllerApi::AlterConfigs(r) => {
            let resources = take(&mut r.resources, |c| {
                !may_alter_config(access, c.resource_type, &c.resource_name)
            });
            (!resources.is_empty()).then(|| {
                ControllerApi::AlterConfigs(AlterConfigsRequest {
                    resources,
                    ..Default::default()
                })
            })
        }
        ControllerApi::IncrementalAlterConfigs(r) => {
            let resources = take(&mut r.resources, |c| {
                !may_alter_config(access, c.resource_type, &c.resource_name)
            });
            (!resources.is_empty()).then(|| {
                ControllerApi::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
                    resources,
                    ..Default::default()
                })
            })
        }
        _ => None,
    };
    if let Some(part) = part {
        let mut response = fjord_controller::error_response(&part, code, message(code));
        // Each config resource refused with its own type's error.
        match &mut response {
            ResponseBody::AlterConfigs(r) => {
                for c in &mut r.responses {
                    c.error_code = config_code(c.resource_type);
                    c.error_message = Some(message(c.error_code).to_string());
                }
            }
            ResponseBody::IncrementalAlterConfigs(r) => {
                for c in &mut r.responses {
                    c.error_code = config_code(c.resource_type);
                    c.error_message = Some(message(c.error_code).to_string());
                }
            }
            _ => {}
        }
        denied.parts.push(response);
    }
    denied
}

/// The config resource types (Kafka's `ConfigResource.Type`).
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_CLIENT_METRICS: i8 = 16;
const CONFIG_GROUP: i8 = 32;

/// Whether the principal may change the configs of a resource: ALTER_CONFIGS on the cluster for
/// a broker's or a client-metrics subscription's, on the topic or group for theirs.
fn may_alter_config(access: &Access, resource_type: i8, name: &str) -> bool {
    match resource_type {
        CONFIG_TOPIC => access.allows_topic(AlterConfigs, name),
        CONFIG_GROUP => access.allows_group(AlterConfigs, name),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER | CONFIG_CLIENT_METRICS => {
            access.allows_cluster(AlterConfigs)
        }
        // Unknown types are the controller's to refuse.
        _ => true,
    }
}

/// Whether the principal may read the configs of a resource.
pub(crate) fn may_describe_config(access: &Access, resource_type: i8, name: &str) -> Option<i16> {
    let allowed = match resource_type {
        CONFIG_TOPIC => access.allows_topic(AclOperation::DescribeConfigs, name),
        CONFIG_GROUP => access.allows_group(AclOperation::DescribeConfigs, name),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER | CONFIG_CLIENT_METRICS => {
            access.allows_cluster(AclOperation::DescribeConfigs)
        }
        _ => true,
    };
    (!allowed).then(|| config_code(resource_type))
}

/// The error for a config resource the principal may not touch.
fn config_code(resource_type: i8) -> i16 {
    match resource_type {
        CONFIG_TOPIC => errors::TOPIC_AUTHORIZATION_FAILED,
        CONFIG_GROUP => errors::GROUP_AUTHORIZATION_FAILED,
        _ => errors::CLUSTER_AUTHORIZATION_FAILED,
    }
}

/// Adds `extra`'s entries to `into`, two answers of the same API.
pub(crate) fn merge(into: &mut ResponseBody, extra: ResponseBody) {
    match (into, extra) {
        (ResponseBody::OffsetCommit(a), ResponseBody::OffsetCommit(b)) => a.topics.extend(b.topics),
        (ResponseBody::TxnOffsetCommit(a), ResponseBody::TxnOffsetCommit(b)) => {
            a.topics.extend(b.topics)
        }
        (ResponseBody::OffsetDelete(a), ResponseBody::OffsetDelete(b)) => a.topics.extend(b.topics),
        (ResponseBody::OffsetFetch(a), ResponseBody::OffsetFetch(b)) => {
            a.topics.extend(b.topics);
            for group in b.groups {
                match a.groups.iter_mut().find(|g| g.group_id == group.group_id) {
                    Some(existing) => existing.topics.extend(group.topics),
                    None => a.groups.push(group),
                }
            }
        }
        (ResponseBody::DescribeGroups(a), ResponseBody::DescribeGroups(b)) => {
            a.groups.extend(b.groups)
        }
        (ResponseBody::ConsumerGroupDescribe(a), ResponseBody::ConsumerGroupDescribe(b)) => {
            a.groups.extend(b.groups)
        }
        (ResponseBody::ShareGroupDescribe(a), ResponseBody::ShareGroupDescribe(b)) => {
            a.groups.extend(b.groups)
        }
        (ResponseBody::DeleteGroups(a), ResponseBody::DeleteGroups(b)) => {
            a.results.extend(b.results)
        }
        (ResponseBody::CreateTopics(a), ResponseBody::CreateTopics(b)) => a.topics.extend(b.topics),
        (ResponseBody::DeleteTopics(a), ResponseBody::DeleteTopics(b)) => {
            a.responses.extend(b.responses)
        }
        (ResponseBody::CreatePartitions(a), ResponseBody::CreatePartitions(b)) => {
            a.results.extend(b.results)
        }
        (ResponseBody::AlterConfigs(a), ResponseBody::AlterConfigs(b)) => {
            a.responses.extend(b.responses)
        }
        (ResponseBody::IncrementalAlterConfigs(a), ResponseBody::IncrementalAlterConfigs(b)) => {
            a.responses.extend(b.responses)
        }
        (into, extra) => tracing::error!(
            into = into.api_key().name(),
            extra = extra.api_key().name(),
            "refused entries of another API cannot be merged"
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fjord_common::KafkaPrincipal;

    /// An anonymous client of a broker without an authorizer: allowed everything.
    pub(crate) fn anyone() -> Access {
        let requester = Requester::new(KafkaPrincipal::anonymous(), "127.0.0.1:1".parse().unwrap());
        Access::new(None, Arc::new(MetadataImage::empty()), Arc::new(requester))
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;
    use fjord_common::KafkaPrincipal;

    fn access(user: &str) -> Access {
        let requester = Requester::new(KafkaPrincipal::user(user), "127.0.0.1:1".parse().unwrap());
        let authorizer = Authorizer::new(["User:admin".to_string()], false);
        Access::new(
            Some(Arc::new(authorizer)),
            Arc::new(MetadataImage::empty()),
            Arc::new(requester),
        )
    }

    #[test]
    fn cluster_requests_are_refused_whole_without_the_cluster_operation() {
        let body = RequestBody::DescribeAcls(Default::default());
        let Some(Refusal::Answer(ResponseBody::DescribeAcls(r))) =
            refusal(&access("alice"), &body, 3)
        else {
            panic!("not refused with a DescribeAcls answer")
        };
        assert_eq!(r.error_code, errors::CLUSTER_AUTHORIZATION_FAILED);
        assert!(refusal(&access("admin"), &body, 3).is_none());
    }

    #[test]
    fn share_coordinator_rpcs_need_cluster_action_and_every_entry_says_so() {
        use fjord_protocol::messages::write_share_group_state_request as write;
        let body = RequestBody::WriteShareGroupState(write::WriteShareGroupStateRequest {
            group_id: "g".into(),
            topics: vec![write::WriteStateData {
                topic_id: fjord_common::Uuid([1; 16]),
                partitions: vec![
                    write::PartitionData {
                        partition: 0,
                        ..Default::default()
                    },
                    write::PartitionData {
                        partition: 1,
                        ..Default::default()
                    },
                ],
            }],
        });
        let Some(Refusal::Answer(ResponseBody::WriteShareGroupState(r))) =
            refusal(&access("alice"), &body, 1)
        else {
            panic!("not refused with a WriteShareGroupState answer")
        };
        let codes: Vec<i16> = r.results[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, vec![errors::CLUSTER_AUTHORIZATION_FAILED; 2]);
        assert!(refusal(&access("admin"), &body, 1).is_none());
    }

    fn access_with(acls: &[(ResourceType, &str, AclOperation)]) -> Access {
        use fjord_metadata::acl::{AclBinding, AclPermission, PatternType};
        use fjord_metadata::{AccessControlEntryRecord, MetadataRecord};
        let records: Vec<MetadataRecord> = acls
            .iter()
            .enumerate()
            .map(|(i, (kind, name, operation))| {
                let acl = AclBinding {
                    resource_type: *kind,
                    resource_name: name.to_string(),
                    pattern_type: PatternType::Literal,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: *operation,
                    permission: AclPermission::Allow,
                };
                let id = fjord_common::Uuid([i as u8 + 1; 16]);
                MetadataRecord::AccessControlEntry(AccessControlEntryRecord::new(id, &acl))
            })
            .collect();
        let image = MetadataImage::from_records(1, &records).unwrap();
        let requester = Requester::new(
            KafkaPrincipal::user("alice"),
            "127.0.0.1:1".parse().unwrap(),
        );
        let authorizer = Authorizer::new(Vec::new(), false);
        Access::new(
            Some(Arc::new(authorizer)),
            Arc::new(image),
            Arc::new(requester),
        )
    }

    #[test]
    fn a_commit_is_split_and_its_refused_topics_answered_beside_the_rest() {
        use fjord_protocol::messages::offset_commit_request::*;
        use fjord_protocol::messages::offset_commit_response::*;
        let access = access_with(&[
            (ResourceType::Group, "g", Read),
            (ResourceType::Topic, "mine", Read),
        ]);
        let topic = |name: &str| OffsetCommitRequestTopic {
            name: name.into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut body = RequestBody::OffsetCommit(OffsetCommitRequest {
            group_id: "g".into(),
            topics: vec![topic("mine"), topic("theirs")],
            ..Default::default()
        });
        assert!(refusal(&access, &body, 9).is_none());
        let denied = split(&access, &mut body, 9);
        let RequestBody::OffsetCommit(left) = &body else {
            unreachable!()
        };
        assert_eq!(left.topics.len(), 1);
        let mut response = ResponseBody::OffsetCommit(OffsetCommitResponse {
            topics: vec![OffsetCommitResponseTopic {
                name: "mine".into(),
                partitions: vec![OffsetCommitResponsePartition::default()],
                ..Default::default()
            }],
            ..Default::default()
        });
        denied.restore(&mut response);
        let ResponseBody::OffsetCommit(r) = response else {
            unreachable!()
        };
        let codes: Vec<(&str, i16)> = r
            .topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions[0].error_code))
            .collect();
        assert_eq!(
            codes,
            [("mine", 0), ("theirs", errors::TOPIC_AUTHORIZATION_FAILED)]
        );
        // Without READ on the group, the whole commit is refused.
        let stranger = access_with(&[(ResourceType::Topic, "mine", Read)]);
        assert!(matches!(
            refusal(&stranger, &body, 9),
            Some(Refusal::Answer(_))
        ));
    }

    #[test]
    fn topic_creation_needs_create_on_the_cluster_or_the_topic() {
        use fjord_protocol::messages::create_topics_request::CreatableTopic;
        let access = access_with(&[(ResourceType::Topic, "allowed", Create)]);
        let topic = |name: &str| CreatableTopic {
            name: name.into(),
            ..Default::default()
        };
        let mut api = ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: vec![topic("allowed"), topic("refused")],
            ..Default::default()
        });
        let denied = split_controller(&access, &mut api);
        let ControllerApi::CreateTopics(left) = &api else {
            unreachable!()
        };
        assert_eq!(left.topics.len(), 1);
        let mut response = ResponseBody::CreateTopics(Default::default());
        denied.restore(&mut response);
        let ResponseBody::CreateTopics(r) = response else {
            unreachable!()
        };
        assert_eq!(r.topics[0].name, "refused");
        assert_eq!(r.topics[0].error_code, errors::TOPIC_AUTHORIZATION_FAILED);
        let cluster = access_with(&[(ResourceType::Cluster, CLUSTER_NAME, Create)]);
        let mut api = ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: vec![topic("any")],
            ..Default::default()
        });
        split_controller(&cluster, &mut api);
        let ControllerApi::CreateTopics(left) = &api else {
            unreachable!()
        };
        assert_eq!(left.topics.len(), 1);
    }

    #[test]
    fn described_groups_carry_the_operations_the_principal_may_do_when_asked() {
        use fjord_protocol::messages::describe_groups_response::{
            DescribeGroupsResponse, DescribedGroup,
        };
        let access = access_with(&[(ResourceType::Group, "g", Read)]);
        let mut body = RequestBody::DescribeGroups(DescribeGroupsRequest {
            groups: vec!["g".into()],
            include_authorized_operations: true,
        });
        let denied = split(&access, &mut body, 5);
        let mut response = ResponseBody::DescribeGroups(DescribeGroupsResponse {
            groups: vec![DescribedGroup {
                group_id: "g".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        denied.restore(&mut response);
        let ResponseBody::DescribeGroups(r) = response else {
            unreachable!()
        };
        // READ, and the DESCRIBE it implies.
        assert_eq!(r.groups[0].authorized_operations, 1 << 3 | 1 << 8);
    }
}
