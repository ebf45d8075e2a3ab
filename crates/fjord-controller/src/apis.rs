//! The controller's request handling, sans-IO: a controller request and the current image in,
//! the records to commit and the response to give once they are committed out. The shell
//! (`fjord_quorum::QuorumController`) commits the records; if it cannot, the whole request is
//! answered with [`error_response`], as Kafka's controller answers a request it could not finish.

use std::collections::HashSet;
use std::sync::Arc;

use fjord_common::{errors, KafkaPrincipal, Requester, TopicId, Uuid};
use fjord_config::{BrokerConfig, DynamicBrokerConfig, TopicConfig};
use fjord_metadata::{
    BrokerEndpoint, MetadataImage, MetadataRecord, ProducerIdsRecord, QuorumStatus,
    RegisterBrokerRecord, ReplicaStatus,
};
use fjord_protocol::messages::add_raft_voter_request::AddRaftVoterRequest;
use fjord_protocol::messages::add_raft_voter_response::AddRaftVoterResponse;
use fjord_protocol::messages::allocate_producer_ids_request::AllocateProducerIdsRequest;
use fjord_protocol::messages::allocate_producer_ids_response::AllocateProducerIdsResponse;
use fjord_protocol::messages::alter_client_quotas_request::AlterClientQuotasRequest;
use fjord_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse as LegacyResult, AlterConfigsResponse,
};
use fjord_protocol::messages::alter_partition_request::AlterPartitionRequest;
use fjord_protocol::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest;
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_registration_request::BrokerRegistrationRequest;
use fjord_protocol::messages::broker_registration_response::BrokerRegistrationResponse;
use fjord_protocol::messages::controller_registration_request::ControllerRegistrationRequest;
use fjord_protocol::messages::controller_registration_response::ControllerRegistrationResponse;
use fjord_protocol::messages::create_acls_request::CreateAclsRequest;
use fjord_protocol::messages::create_delegation_token_request::CreateDelegationTokenRequest;
use fjord_protocol::messages::create_partitions_request::CreatePartitionsRequest;
use fjord_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use fjord_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use fjord_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use fjord_protocol::messages::delete_acls_request::DeleteAclsRequest;
use fjord_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use fjord_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use fjord_protocol::messages::describe_quorum_request::DescribeQuorumRequest;
use fjord_protocol::messages::describe_quorum_response::{
    DescribeQuorumResponse, Listener as DescribeQuorumListener, Node as DescribeQuorumNode,
    PartitionData as DescribeQuorumPartition, ReplicaState as DescribeQuorumReplica,
    TopicData as DescribeQuorumTopic,
};
use fjord_protocol::messages::elect_leaders_request::ElectLeadersRequest;
use fjord_protocol::messages::expire_delegation_token_request::ExpireDelegationTokenRequest;
use fjord_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
};
use fjord_protocol::messages::remove_raft_voter_request::RemoveRaftVoterRequest;
use fjord_protocol::messages::remove_raft_voter_response::RemoveRaftVoterResponse;
use fjord_protocol::messages::renew_delegation_token_request::RenewDelegationTokenRequest;
use fjord_protocol::messages::{
    AlterConfigsRequest, IncrementalAlterConfigsRequest, RequestBody, ResponseBody,
};
use fjord_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use fjord_protocol::ApiKey;

/// The metadata log's topic, as Kafka names it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

use crate::decision::{Decision, Working};
use crate::membership::{self, BrokerSessions};
use crate::plan::{self, CreateTopic, Refusal, TopicPlan};

/// Producer ids are handed to brokers in blocks of this many, as Kafka's controller does.
pub const PRODUCER_ID_BLOCK: i32 = 1000;

/// The Kafka requests the controller answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerApi {
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    ElectLeaders(ElectLeadersRequest),
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    /// Answered from the image, nothing decided.
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    AllocateProducerIds(AllocateProducerIdsRequest),
    BrokerRegistration(BrokerRegistrationRequest),
    BrokerHeartbeat(BrokerHeartbeatRequest),
    AlterPartition(AlterPartitionRequest),
    /// Answered from the quorum's state, not decided: see [`Controller::describe_quorum`].
    DescribeQuorum(DescribeQuorumRequest),
    /// Changes of the quorum's members (KIP-853), not decided on the image: see `voters`.
    AddRaftVoter(AddRaftVoterRequest),
    RemoveRaftVoter(RemoveRaftVoterRequest),
    ControllerRegistration(ControllerRegistrationRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    AlterClientQuotas(AlterClientQuotasRequest),
    /// Decided with the requesting principal and the wall clock: see [`Controller::decide_token`].
    CreateDelegationToken(CreateDelegationTokenRequest),
    RenewDelegationToken(RenewDelegationTokenRequest),
    ExpireDelegationToken(ExpireDelegationTokenRequest),
}

impl ControllerApi {
    /// The controller's request in a decoded request body; the body back if it is not one.
    pub fn from_body(body: RequestBody) -> Result<Self, Box<RequestBody>> {
        Ok(match body {
            RequestBody::CreateTopics(r) => ControllerApi::CreateTopics(r),
            RequestBody::DeleteTopics(r) => ControllerApi::DeleteTopics(r),
            RequestBody::CreatePartitions(r) => ControllerApi::CreatePartitions(r),
            RequestBody::ElectLeaders(r) => ControllerApi::ElectLeaders(r),
            RequestBody::AlterPartitionReassignments(r) => {
                ControllerApi::AlterPartitionReassignments(r)
            }
            RequestBody::ListPartitionReassignments(r) => {
                ControllerApi::ListPartitionReassignments(r)
            }
            RequestBody::IncrementalAlterConfigs(r) => ControllerApi::IncrementalAlterConfigs(r),
            RequestBody::AlterConfigs(r) => ControllerApi::AlterConfigs(r),
            RequestBody::AllocateProducerIds(r) => ControllerApi::AllocateProducerIds(r),
            RequestBody::BrokerRegistration(r) => ControllerApi::BrokerRegistration(r),
            RequestBody::BrokerHeartbeat(r) => ControllerApi::BrokerHeartbeat(r),
            RequestBody::AlterPartition(r) => ControllerApi::AlterPartition(r),
            RequestBody::DescribeQuorum(r) => ControllerApi::DescribeQuorum(r),
            RequestBody::AddRaftVoter(r) => ControllerApi::AddRaftVoter(r),
            RequestBody::RemoveRaftVoter(r) => ControllerApi::RemoveRaftVoter(r),
            RequestBody::ControllerRegistration(r) => ControllerApi::ControllerRegistration(r),
            RequestBody::AlterUserScramCredentials(r) => {
                ControllerApi::AlterUserScramCredentials(r)
            }
            RequestBody::CreateAcls(r) => ControllerApi::CreateAcls(r),
            RequestBody::DeleteAcls(r) => ControllerApi::DeleteAcls(r),
            RequestBody::AlterClientQuotas(r) => ControllerApi::AlterClientQuotas(r),
            RequestBody::CreateDelegationToken(r) => ControllerApi::CreateDelegationToken(r),
            RequestBody::RenewDelegationToken(r) => ControllerApi::RenewDelegationToken(r),
            RequestBody::ExpireDelegationToken(r) => ControllerApi::ExpireDelegationToken(r),
            other => return Err(Box::new(other)),
        })
    }

    /// The request body, to send to a controller on another node.
    pub fn into_body(self) -> RequestBody {
        match self {
            ControllerApi::CreateTopics(r) => RequestBody::CreateTopics(r),
            ControllerApi::DeleteTopics(r) => RequestBody::DeleteTopics(r),
            ControllerApi::CreatePartitions(r) => RequestBody::CreatePartitions(r),
            ControllerApi::ElectLeaders(r) => RequestBody::ElectLeaders(r),
            ControllerApi::AlterPartitionReassignments(r) => {
                RequestBody::AlterPartitionReassignments(r)
            }
            ControllerApi::ListPartitionReassignments(r) => {
                RequestBody::ListPartitionReassignments(r)
            }
            ControllerApi::IncrementalAlterConfigs(r) => RequestBody::IncrementalAlterConfigs(r),
            ControllerApi::AlterConfigs(r) => RequestBody::AlterConfigs(r),
            ControllerApi::AllocateProducerIds(r) => RequestBody::AllocateProducerIds(r),
            ControllerApi::BrokerRegistration(r) => RequestBody::BrokerRegistration(r),
            ControllerApi::BrokerHeartbeat(r) => RequestBody::BrokerHeartbeat(r),
            ControllerApi::AlterPartition(r) => RequestBody::AlterPartition(r),
            ControllerApi::DescribeQuorum(r) => RequestBody::DescribeQuorum(r),
            ControllerApi::AddRaftVoter(r) => RequestBody::AddRaftVoter(r),
            ControllerApi::RemoveRaftVoter(r) => RequestBody::RemoveRaftVoter(r),
            ControllerApi::ControllerRegistration(r) => RequestBody::ControllerRegistration(r),
            ControllerApi::AlterUserScramCredentials(r) => {
                RequestBody::AlterUserScramCredentials(r)
            }
            ControllerApi::CreateAcls(r) => RequestBody::CreateAcls(r),
            ControllerApi::DeleteAcls(r) => RequestBody::DeleteAcls(r),
            ControllerApi::AlterClientQuotas(r) => RequestBody::AlterClientQuotas(r),
            ControllerApi::CreateDelegationToken(r) => RequestBody::CreateDelegationToken(r),
            ControllerApi::RenewDelegationToken(r) => RequestBody::RenewDelegationToken(r),
            ControllerApi::ExpireDelegationToken(r) => RequestBody::ExpireDelegationToken(r),
        }
    }

    /// The request's own timeout, when it has one (positive milliseconds).
    pub fn timeout_ms(&self) -> Option<i32> {
        let ms = match self {
            ControllerApi::CreateTopics(r) => r.timeout_ms,
            ControllerApi::DeleteTopics(r) => r.timeout_ms,
            ControllerApi::CreatePartitions(r) => r.timeout_ms,
            ControllerApi::ElectLeaders(r) => r.timeout_ms,
            ControllerApi::AlterPartitionReassignments(r) => r.timeout_ms,
            ControllerApi::ListPartitionReassignments(r) => r.timeout_ms,
            ControllerApi::AddRaftVoter(r) => r.timeout_ms,
            _ => return None,
        };
        (ms > 0).then_some(ms)
    }

    fn set_timeout_ms(&mut self, ms: i32) {
        match self {
            ControllerApi::CreateTopics(r) => r.timeout_ms = ms,
            ControllerApi::DeleteTopics(r) => r.timeout_ms = ms,
            ControllerApi::CreatePartitions(r) => r.timeout_ms = ms,
            ControllerApi::ElectLeaders(r) => r.timeout_ms = ms,
            ControllerApi::AlterPartitionReassignments(r) => r.timeout_ms = ms,
            ControllerApi::ListPartitionReassignments(r) => r.timeout_ms = ms,
            ControllerApi::AddRaftVoter(r) => r.timeout_ms = ms,
            _ => {}
        }
    }

    pub fn api_key(&self) -> ApiKey {
        match self {
            ControllerApi::CreateTopics(_) => ApiKey::CreateTopics,
            ControllerApi::DeleteTopics(_) => ApiKey::DeleteTopics,
            ControllerApi::CreatePartitions(_) => ApiKey::CreatePartitions,
            ControllerApi::ElectLeaders(_) => ApiKey::ElectLeaders,
            ControllerApi::AlterPartitionReassignments(_) => ApiKey::AlterPartitionReassignments,
            ControllerApi::ListPartitionReassignments(_) => ApiKey::ListPartitionReassignments,
            ControllerApi::IncrementalAlterConfigs(_) => ApiKey::IncrementalAlterConfigs,
            ControllerApi::AlterConfigs(_) => ApiKey::AlterConfigs,
            ControllerApi::AllocateProducerIds(_) => ApiKey::AllocateProducerIds,
            ControllerApi::BrokerRegistration(_) => ApiKey::BrokerRegistration,
            ControllerApi::BrokerHeartbeat(_) => ApiKey::BrokerHeartbeat,
            ControllerApi::AlterPartition(_) => ApiKey::AlterPartition,
            ControllerApi::DescribeQuorum(_) => ApiKey::DescribeQuorum,
            ControllerApi::AddRaftVoter(_) => ApiKey::AddRaftVoter,
            ControllerApi::RemoveRaftVoter(_) => ApiKey::RemoveRaftVoter,
            ControllerApi::ControllerRegistration(_) => ApiKey::ControllerRegistration,
            ControllerApi::AlterUserScramCredentials(_) => ApiKey::AlterUserScramCredentials,
            ControllerApi::CreateAcls(_) => ApiKey::CreateAcls,
            ControllerApi::DeleteAcls(_) => ApiKey::DeleteAcls,
            ControllerApi::AlterClientQuotas(_) => ApiKey::AlterClientQuotas,
            ControllerApi::CreateDelegationToken(_) => ApiKey::CreateDelegationToken,
            ControllerApi::RenewDelegationToken(_) => ApiKey::RenewDelegationToken,
            ControllerApi::ExpireDelegationToken(_) => ApiKey::ExpireDelegationToken,
        }
    }
}

/// One request for the controller at its version, the node id of the broker that received
/// it from a client (or sent it on its own behalf), and the client's principal where the
/// decision depends on who asks (delegation tokens). A request that carries a timeout (CreateTopics,
/// DeleteTopics, CreatePartitions, ElectLeaders, the reassignment APIs) has a deadline: past it the request is answered
/// REQUEST_TIMED_OUT and never decided, so a change the client gave up on is not made later.
#[derive(Debug, Clone)]
pub struct ControllerRequest {
    pub version: i16,
    pub api: ControllerApi,
    pub requester: i32,
    /// The client the request is made for (none: the broker's own request); the decisions that
    /// depend on who asks (delegation tokens) are made for it.
    pub client: Option<Arc<Requester>>,
    pub deadline: Option<std::time::Instant>,
}

impl ControllerRequest {
    /// A request received now: its deadline is its own timeout from now.
    pub fn new(version: i16, api: ControllerApi, requester: i32) -> Self {
        let deadline = api.timeout_ms().and_then(|ms| {
            std::time::Instant::now().checked_add(std::time::Duration::from_millis(ms as u64))
        });
        ControllerRequest {
            version,
            api,
            requester,
            client: None,
            deadline,
        }
    }

    /// The same request, made for `client`.
    pub fn on_behalf_of(mut self, client: Option<Arc<Requester>>) -> Self {
        self.client = client;
        self
    }

    /// The request body to send on, its timeout cut to what is left of the deadline.
    pub fn body_to_forward(&self) -> RequestBody {
        let mut api = self.api.clone();
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            api.set_timeout_ms(left.as_millis().clamp(1, i32::MAX as u128) as i32);
        }
        api.into_body()
    }
}

/// A validate-only request decides everything and commits nothing.
pub(crate) fn committed_unless(
    validate_only: bool,
    records: Vec<MetadataRecord>,
) -> Vec<MetadataRecord> {
    if validate_only {
        Vec::new()
    } else {
        records
    }
}

/// The active controller's decisions. Holds this node's static config (defaults such as
/// `num.partitions`), the cluster id, and the brokers' heartbeat sessions, the one state that
/// lives outside the metadata log (rebuilt by [`Controller::activate`]).
pub struct Controller {
    pub(crate) config: Arc<BrokerConfig>,
    pub(crate) cluster_id: String,
    sessions: BrokerSessions,
}

impl Controller {
    pub fn new(config: Arc<BrokerConfig>, cluster_id: String) -> Self {
        let sessions = BrokerSessions::new(config.cluster.broker_session_timeout_ms);
        Controller {
            config,
            cluster_id,
            sessions,
        }
    }

    /// This node's static config.
    pub fn config(&self) -> &Arc<BrokerConfig> {
        &self.config
    }

    /// The cluster this controller decides for.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// This node became the active controller at `now_ms` (monotonic milliseconds, the clock
    /// every later call uses): every unfenced broker's session starts afresh.
    pub fn activate(&mut self, image: &MetadataImage, now_ms: i64) {
        self.sessions.activate(image, now_ms);
    }

    /// The records that fence one broker whose session expired by `now_ms`, with the elections
    /// that move its leadership; None when every session is live.
    pub fn fence_stale_broker(
        &mut self,
        image: &MetadataImage,
        now_ms: i64,
    ) -> Option<(i32, Vec<MetadataRecord>)> {
        let broker_id = self.sessions.stale_broker(image, now_ms)?;
        self.sessions.fenced(broker_id);
        let unclean = self.unclean_allowed(image);
        Some((broker_id, membership::fence(image, broker_id, &unclean)))
    }

    /// Unclean elections due on `image`: leaderless partitions of topics that allow them (Kafka
    /// checks every `unclean.leader.election.interval.ms`, so a topic allowed later gets its
    /// leader then).
    pub fn elect_unclean_leaders(&self, image: &MetadataImage) -> Vec<MetadataRecord> {
        membership::elect_unclean_leaders(image, &self.unclean_allowed(image))
    }

    fn unclean_allowed<'a>(&'a self, image: &'a MetadataImage) -> impl Fn(&str) -> bool + 'a {
        unclean_policy(&self.config, image)
    }

    /// The preferred elections due on `image` by `leader.imbalance.per.broker.percentage`.
    pub fn balance_leaders(&self, image: &MetadataImage) -> Vec<MetadataRecord> {
        let percentage = self
            .config
            .leader_elections()
            .imbalance_per_broker_percentage;
        crate::election::balance_leaders(image, percentage.into())
    }

    /// Milliseconds until a session on `image` could next expire.
    pub fn next_session_expiry_in(&self, image: &MetadataImage, now_ms: i64) -> i64 {
        self.sessions.next_expiry_in(image, now_ms)
    }

    /// Decides `request` on `image` at `now_ms`. `new_topic_id` supplies a fresh random id per
    /// created topic.
    pub fn decide(
        &mut self,
        image: &MetadataImage,
        request: &ControllerRequest,
        now_ms: i64,
        new_topic_id: &mut dyn FnMut() -> TopicId,
    ) -> Decision {
        match &request.api {
            ControllerApi::CreateTopics(r) => {
                self.create_topics(image, r, request.version, new_topic_id)
            }
            ControllerApi::DeleteTopics(r) => self.delete_topics(image, r),
            ControllerApi::CreatePartitions(r) => self.create_partitions(image, r),
            ControllerApi::ElectLeaders(r) => {
                crate::election::elect_leaders(image, r, request.version)
            }
            ControllerApi::AlterPartitionReassignments(r) => {
                crate::reassignment::alter_partition_reassignments(
                    image,
                    r,
                    &self.unclean_allowed(image),
                )
            }
            ControllerApi::ListPartitionReassignments(r) => {
                crate::reassignment::list_partition_reassignments(image, r)
            }
            ControllerApi::IncrementalAlterConfigs(r) => {
                self.incremental_alter_configs(image, r, request.requester)
            }
            ControllerApi::AlterConfigs(r) => self.alter_configs(image, r, request.requester),
            ControllerApi::AllocateProducerIds(r) => allocate_producer_ids(image, r),
            ControllerApi::BrokerRegistration(r) => self.register_broker(image, r, now_ms),
            ControllerApi::BrokerHeartbeat(r) => {
                let unclean = unclean_policy(&self.config, image);
                membership::heartbeat(image, &mut self.sessions, r, now_ms, &unclean)
            }
            ControllerApi::AlterPartition(r) => {
                crate::isr::alter_partition(image, r, request.version)
            }
            ControllerApi::AlterUserScramCredentials(r) => {
                crate::scram_admin::alter_user_scram_credentials(image, r)
            }
            ControllerApi::CreateAcls(r) => crate::acl_admin::create_acls(image, r, new_topic_id),
            ControllerApi::DeleteAcls(r) => crate::acl_admin::delete_acls(image, r),
            ControllerApi::AlterClientQuotas(r) => {
                crate::quota_admin::alter_client_quotas(image, r)
            }
            // Decided by `decide_token`, with the wall clock.
            ControllerApi::CreateDelegationToken(_)
            | ControllerApi::RenewDelegationToken(_)
            | ControllerApi::ExpireDelegationToken(_) => Decision::answer(error_response(
                &request.api,
                errors::UNKNOWN_SERVER_ERROR,
                "a delegation token request is decided with the wall clock",
            )),
            // The shell answers these from the quorum; decided on the image alone they are
            // refused.
            ControllerApi::DescribeQuorum(_)
            | ControllerApi::AddRaftVoter(_)
            | ControllerApi::RemoveRaftVoter(_)
            | ControllerApi::ControllerRegistration(_) => Decision::answer(error_response(
                &request.api,
                errors::NOT_LEADER_OR_FOLLOWER,
                "the quorum's state is not in the image",
            )),
        }
    }

    /// A delegation token request (CreateDelegationToken, RenewDelegationToken,
    /// ExpireDelegationToken) decided on `image` at `wall_ms` (ms since the epoch: tokens carry
    /// wall-clock times) for the request's principal; `new_token_id` supplies a fresh random id.
    /// None for any other request.
    pub fn decide_token(
        &self,
        image: &MetadataImage,
        request: &ControllerRequest,
        wall_ms: i64,
        new_token_id: &mut dyn FnMut() -> Uuid,
    ) -> Option<Decision> {
        let config = self.config.delegation_tokens();
        let config = config.as_ref();
        let anonymous = KafkaPrincipal::anonymous();
        let principal = request.client.as_ref().map_or(&anonymous, |c| &c.principal);
        Some(match &request.api {
            ControllerApi::CreateDelegationToken(r) => {
                let token_id = new_token_id().to_string();
                crate::token_admin::create(
                    config,
                    r,
                    (principal, request.version),
                    wall_ms,
                    token_id,
                )
            }
            ControllerApi::RenewDelegationToken(r) => {
                crate::token_admin::renew(image, config, r, principal, wall_ms)
            }
            ControllerApi::ExpireDelegationToken(r) => {
                crate::token_admin::expire(image, config, r, principal, wall_ms)
            }
            _ => return None,
        })
    }

    /// The removal of every delegation token expired by `wall_ms`.
    pub fn remove_expired_tokens(
        &self,
        image: &MetadataImage,
        wall_ms: i64,
    ) -> Vec<MetadataRecord> {
        crate::token_admin::remove_expired(image, wall_ms)
    }

    /// DescribeQuorum from the quorum's state (`kafka-metadata-quorum describe`): the metadata
    /// log's leader, epoch and high watermark, each voter's and observer's log end offset, and
    /// (v2) the voters' controller listeners. Only the leader knows the others' progress;
    /// another node answers NOT_LEADER_OR_FOLLOWER, as Kafka's do.
    pub fn describe_quorum(
        &self,
        status: &QuorumStatus,
        request: &DescribeQuorumRequest,
    ) -> ResponseBody {
        let is_leader = status
            .leader
            .is_some_and(|l| l == self.config.node_id as u64);
        let replica = |r: &ReplicaStatus| DescribeQuorumReplica {
            replica_id: r.node_id as i32,
            replica_directory_id: r.node.directory_id.unwrap_or(Uuid::ZERO),
            log_end_offset: r.log_end_offset.map_or(-1, |o| o as i64),
            last_fetch_timestamp: r.last_fetch_ms.unwrap_or(-1),
            last_caught_up_timestamp: r.last_caught_up_ms.unwrap_or(-1),
        };
        let topics = request
            .topics
            .iter()
            .map(|t| DescribeQuorumTopic {
                topic_name: t.topic_name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let known = t.topic_name == METADATA_TOPIC && p.partition_index == 0;
                        let error_code = match (known, is_leader) {
                            (false, _) => errors::UNKNOWN_TOPIC_OR_PARTITION,
                            (true, false) => errors::NOT_LEADER_OR_FOLLOWER,
                            (true, true) => errors::NONE,
                        };
                        if error_code != errors::NONE {
                            return DescribeQuorumPartition {
                                partition_index: p.partition_index,
                                error_code,
                                leader_id: status.leader.map_or(-1, |l| l as i32),
                                ..Default::default()
                            };
                        }
                        DescribeQuorumPartition {
                            partition_index: p.partition_index,
                            error_code,
                            error_message: None,
                            leader_id: status.leader.map_or(-1, |l| l as i32),
                            leader_epoch: status.term.min(i32::MAX as u64) as i32,
                            high_watermark: status.high_watermark as i64,
                            current_voters: status.voters.iter().map(replica).collect(),
                            observers: status.learners.iter().map(replica).collect(),
                        }
                    })
                    .collect(),
            })
            .collect();
        // Each voter's controller listener, as the quorum's membership records it.
        let nodes = status
            .voters
            .iter()
            .filter_map(|v| {
                let (host, port) = v.node.endpoint()?;
                Some(DescribeQuorumNode {
                    node_id: v.node_id as i32,
                    listeners: self
                        .config
                        .cluster
                        .controller_listener_names
                        .iter()
                        .take(1)
                        .map(|name| DescribeQuorumListener {
                            name: name.clone(),
                            host: host.clone(),
                            port,
                        })
                        .collect(),
                })
            })
            .collect();
        ResponseBody::DescribeQuorum(DescribeQuorumResponse {
            error_code: errors::NONE,
            topics,
            nodes,
            ..Default::default()
        })
    }

    /// Where a registering broker that is not a voter takes the metadata log as a learner: its
    /// listener named like this node's inter-broker listener. None for a voter of a static
    /// quorum, or alone. (A controller of a dynamic quorum is already a member when its broker
    /// registers: it registered as a controller first.)
    pub fn learner_address(&self, registration: &BrokerRegistrationRequest) -> Option<String> {
        let cluster = &self.config.cluster;
        if (cluster.voters.is_empty() && cluster.bootstrap_servers.is_empty())
            || cluster
                .voters
                .iter()
                .any(|v| v.id == registration.broker_id)
        {
            return None;
        }
        registration
            .listeners
            .iter()
            .find(|l| l.name == cluster.inter_broker_listener_name)
            .map(|l| format!("{}:{}", l.host, l.port))
    }

    /// The brokers that can host new replicas: registered and not shutting down (a leader is
    /// placed only on an unfenced one).
    fn live_brokers(&self, image: &MetadataImage) -> Vec<crate::placement::UsableBroker> {
        image
            .brokers()
            .filter(|b| !b.in_controlled_shutdown)
            .map(|b| crate::placement::UsableBroker {
                id: b.broker_id,
                rack: b.rack.clone(),
                fenced: b.fenced,
            })
            .collect()
    }

    /// CreateTopics: each topic planned on the image the earlier ones left, so a later entry
    /// sees an earlier one's topic; a name given twice creates nothing (INVALID_REQUEST).
    fn create_topics(
        &self,
        image: &MetadataImage,
        request: &CreateTopicsRequest,
        version: i16,
        new_topic_id: &mut dyn FnMut() -> TopicId,
    ) -> Decision {
        let duplicates = duplicate_names(request);
        let live = self.live_brokers(image);
        let mut working = Working::new(image);
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in request
            .topics
            .iter()
            .filter(|t| !duplicates.contains(t.name.as_str()))
        {
            let create = create_topic(topic);
            let outcome = plan::plan_create_topic(
                working.image(),
                &create,
                self.config.num_partitions,
                self.config.default_replication_factor,
                &live,
                new_topic_id(),
            );
            results.push(match outcome {
                Ok(planned) => {
                    let result =
                        self.created_topic(image, create, &planned, request.validate_only, version);
                    working.add(planned.records);
                    result
                }
                Err(refusal) => CreatableTopicResult {
                    topic_id: image
                        .topic(&create.name)
                        .map(|t| t.topic_id)
                        .unwrap_or(Uuid::ZERO),
                    topic_config_error_code: refusal.error_code,
                    configs: None,
                    ..refused_topic(create.name, refusal.error_code, Some(refusal.message))
                },
            });
        }
        results.extend(duplicates.into_iter().map(|name| {
            let message = Some("Duplicate topic name.".to_string());
            refused_topic(name.to_string(), errors::INVALID_REQUEST, message)
        }));
        Decision {
            records: committed_unless(request.validate_only, working.into_records()),
            response: ResponseBody::CreateTopics(CreateTopicsResponse {
                topics: results,
                ..Default::default()
            }),
        }
    }

    /// A planned topic's result: its id (none for a validate-only request), partition count and
    /// replication factor, and from v5 every config it resolves to, with each one's source.
    fn created_topic(
        &self,
        image: &MetadataImage,
        create: CreateTopic,
        planned: &TopicPlan,
        validate_only: bool,
        version: i16,
    ) -> CreatableTopicResult {
        let (node, default) = image.broker_config_layers(self.config.node_id);
        let dynamic = DynamicBrokerConfig::new(node, default);
        let config = TopicConfig::resolve(&self.config, &dynamic, &create.configs);
        CreatableTopicResult {
            name: create.name,
            topic_id: if validate_only {
                Uuid::ZERO
            } else {
                planned.topic_id
            },
            error_code: errors::NONE,
            num_partitions: planned.num_partitions,
            replication_factor: planned.replication_factor,
            configs: (version >= 5).then(|| {
                config
                    .entries()
                    .map(|(name, value, source)| CreatableTopicConfigs {
                        name: name.to_string(),
                        value: Some(value.to_string()),
                        read_only: false,
                        config_source: source as i8,
                        is_sensitive: false,
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }

    fn delete_topics(&self, image: &MetadataImage, request: &DeleteTopicsRequest) -> Decision {
        let targets: Vec<(Option<String>, Uuid)> = delete_targets(request).collect();
        let mut working = Working::new(image);
        let mut responses = Vec::with_capacity(targets.len());
        for (name, id) in targets {
            let resolved = match (&name, id) {
                (Some(n), _) => Some(n.clone()),
                (None, id) => working.image().topic_by_id(&id).map(|t| t.name.clone()),
            };
            let mut result = DeletableTopicResult {
                name: name.clone(),
                topic_id: id,
                ..Default::default()
            };
            match resolved {
                None => {
                    result.error_code = errors::UNKNOWN_TOPIC_ID;
                    result.error_message =
                        Some("This server does not host this topic ID.".to_string());
                }
                Some(_) if !self.config.delete_topic_enable => {
                    result.error_code = errors::TOPIC_DELETION_DISABLED;
                }
                Some(n) => match plan::plan_delete_topic(working.image(), &n) {
                    Ok(records) => {
                        result.topic_id = working.image().topic(&n).map_or(id, |t| t.topic_id);
                        result.name = Some(n);
                        working.add(records);
                    }
                    Err(refusal) => {
                        result.error_code = refusal.error_code;
                        result.error_message = Some(refusal.message);
                    }
                },
            }
            responses.push(result);
        }
        Decision {
            records: working.into_records(),
            response: ResponseBody::DeleteTopics(DeleteTopicsResponse {
                responses,
                ..Default::default()
            }),
        }
    }

    fn create_partitions(
        &self,
        image: &MetadataImage,
        request: &CreatePartitionsRequest,
    ) -> Decision {
        let live = self.live_brokers(image);
        let mut working = Working::new(image);
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let assignments: Option<Vec<Vec<i32>>> = topic
                .assignments
                .as_ref()
                .map(|a| a.iter().map(|x| x.broker_ids.clone()).collect());
            let outcome = plan::plan_create_partitions(
                working.image(),
                &topic.name,
                topic.count,
                assignments.as_deref(),
                &live,
            );
            let (error_code, error_message) = answer(outcome.map(|records| working.add(records)));
            results.push(CreatePartitionsTopicResult {
                name: topic.name.clone(),
                error_code,
                error_message,
            });
        }
        Decision {
            records: committed_unless(request.validate_only, working.into_records()),
            response: ResponseBody::CreatePartitions(CreatePartitionsResponse {
                results,
                ..Default::default()
            }),
        }
    }

    /// A broker's registration: its endpoints and rack, and a broker epoch above every one it
    /// had, which fences requests from its earlier incarnations. It registers fenced. A second
    /// process with the id of a broker whose session is live is refused
    /// (DUPLICATE_BROKER_REGISTRATION); the same process registering again (a lost response)
    /// keeps its epoch.
    fn register_broker(
        &mut self,
        image: &MetadataImage,
        request: &BrokerRegistrationRequest,
        now_ms: i64,
    ) -> Decision {
        if request.broker_id < 0 {
            return Decision::answer(registration_answer(errors::INVALID_REQUEST, -1));
        }
        if request.cluster_id != self.cluster_id {
            return Decision::answer(registration_answer(errors::INCONSISTENT_CLUSTER_ID, -1));
        }
        if let Some(existing) = image.broker(request.broker_id) {
            if existing.incarnation_id == request.incarnation_id {
                return Decision::answer(registration_answer(errors::NONE, existing.broker_epoch));
            }
            if self
                .sessions
                .has_valid_session(image, request.broker_id, now_ms)
            {
                let refused = registration_answer(errors::DUPLICATE_BROKER_REGISTRATION, -1);
                return Decision::answer(refused);
            }
        }
        let previous = image
            .broker(request.broker_id)
            .map_or(-1, |b| b.broker_epoch);
        let Some(broker_epoch) = previous.max(request.previous_broker_epoch).checked_add(1) else {
            return Decision::answer(registration_answer(errors::INVALID_REQUEST, -1));
        };
        let record = registration_record(request, broker_epoch);
        self.sessions
            .registered(request.broker_id, broker_epoch, now_ms);
        // An earlier incarnation that was never fenced (killed, back before its session
        // expired) leads nothing once the new one registers fenced.
        let records = membership::register(image, record, &self.unclean_allowed(image));
        if records.is_empty() {
            // The record would not apply: nothing to commit, so nothing to claim.
            return Decision::answer(registration_answer(errors::INVALID_REQUEST, -1));
        }
        Decision {
            records,
            response: registration_answer(errors::NONE, broker_epoch),
        }
    }
}

/// The names a CreateTopics request gives more than once: Kafka creates no topic of such a name,
/// and answers it once, INVALID_REQUEST.
fn duplicate_names(request: &CreateTopicsRequest) -> HashSet<&str> {
    let mut seen = HashSet::new();
    request
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.as_str()))
        .map(|t| t.name.as_str())
        .collect()
}

/// A CreateTopics entry as the plan takes it: explicit replicas by partition index, and the
/// configs given a value.
fn create_topic(topic: &CreatableTopic) -> CreateTopic {
    CreateTopic {
        name: topic.name.clone(),
        num_partitions: topic.num_partitions,
        replication_factor: topic.replication_factor,
        assignments: topic
            .assignments
            .iter()
            .map(|a| (a.partition_index, a.broker_ids.clone()))
            .collect(),
        configs: topic
            .configs
            .iter()
            .filter_map(|c| c.value.clone().map(|v| (c.name.clone(), v)))
            .collect(),
    }
}

/// A CreateTopics entry refused: no partitions, no replication factor.
fn refused_topic(
    name: String,
    error_code: i16,
    error_message: Option<String>,
) -> CreatableTopicResult {
    CreatableTopicResult {
        name,
        error_code,
        error_message,
        num_partitions: -1,
        replication_factor: -1,
        ..Default::default()
    }
}

/// The topics a DeleteTopics request names, each by name or id: v6+ names them in `topics`,
/// older versions in `topic_names`.
fn delete_targets(
    request: &DeleteTopicsRequest,
) -> impl Iterator<Item = (Option<String>, Uuid)> + '_ {
    request
        .topic_names
        .iter()
        .map(|n| (Some(n.clone()), Uuid::ZERO))
        .chain(request.topics.iter().map(|t| (t.name.clone(), t.topic_id)))
}

/// The record that registers `request`'s broker at `broker_epoch`: its listeners and rack,
/// fenced until its first heartbeat catches up.
fn registration_record(
    request: &BrokerRegistrationRequest,
    broker_epoch: i64,
) -> RegisterBrokerRecord {
    RegisterBrokerRecord {
        broker_id: request.broker_id,
        incarnation_id: request.incarnation_id,
        broker_epoch,
        endpoints: request
            .listeners
            .iter()
            .map(|l| BrokerEndpoint {
                name: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        rack: request.rack.clone(),
        fenced: true,
        in_controlled_shutdown: false,
    }
}

/// BrokerRegistration's answer: the broker's epoch, or -1 with the refusal's error.
fn registration_answer(error_code: i16, broker_epoch: i64) -> ResponseBody {
    ResponseBody::BrokerRegistration(BrokerRegistrationResponse {
        error_code,
        broker_epoch,
        ..Default::default()
    })
}

/// The next block of producer ids, reserved in the metadata log so that no id is handed out
/// twice, across restarts and controllers.
fn allocate_producer_ids(image: &MetadataImage, request: &AllocateProducerIdsRequest) -> Decision {
    let start = image.next_producer_id();
    Decision {
        records: vec![MetadataRecord::ProducerIds(ProducerIdsRecord {
            broker_id: request.broker_id,
            broker_epoch: request.broker_epoch,
            next_producer_id: start + PRODUCER_ID_BLOCK as i64,
        })],
        response: ResponseBody::AllocateProducerIds(AllocateProducerIdsResponse {
            error_code: errors::NONE,
            producer_id_start: start,
            producer_id_len: PRODUCER_ID_BLOCK,
            ..Default::default()
        }),
    }
}

/// The answer to a controller request that could not be decided or committed: every entry
/// refused with `error_code`, or the request as a whole where Kafka's response has no entries.
pub fn error_response(request: &ControllerApi, error_code: i16, message: &str) -> ResponseBody {
    let message = Some(message.to_string());
    match request {
        ControllerApi::CreateTopics(r) => create_topics_refused(r, error_code, message),
        ControllerApi::DeleteTopics(r) => delete_topics_refused(r, error_code, message),
        ControllerApi::CreatePartitions(r) => create_partitions_refused(r, error_code, message),
        ControllerApi::IncrementalAlterConfigs(r) => {
            incremental_alter_configs_refused(r, error_code, message)
        }
        ControllerApi::AlterConfigs(r) => alter_configs_refused(r, error_code, message),
        ControllerApi::AlterUserScramCredentials(r) => {
            crate::scram_admin::alter_user_scram_credentials_refused(r, error_code, message)
        }
        ControllerApi::CreateAcls(r) => {
            crate::acl_admin::create_acls_refused(r, error_code, message)
        }
        ControllerApi::DeleteAcls(r) => {
            crate::acl_admin::delete_acls_refused(r, error_code, message)
        }
        ControllerApi::AlterClientQuotas(r) => {
            crate::quota_admin::alter_client_quotas_refused(r, error_code, message)
        }
        ControllerApi::CreateDelegationToken(r) => {
            crate::token_admin::create_refused(r, error_code)
        }
        ControllerApi::RenewDelegationToken(_) => crate::token_admin::renew_refused(error_code),
        ControllerApi::ExpireDelegationToken(_) => crate::token_admin::expire_refused(error_code),
        ControllerApi::ElectLeaders(_) => crate::election::elect_leaders_refused(error_code),
        ControllerApi::AlterPartition(_) => crate::isr::alter_partition_refused(error_code),
        ControllerApi::BrokerHeartbeat(_) => membership::heartbeat_refused(error_code),
        ControllerApi::BrokerRegistration(_) => registration_answer(error_code, -1),
        ControllerApi::AllocateProducerIds(_) => {
            ResponseBody::AllocateProducerIds(AllocateProducerIdsResponse {
                error_code,
                producer_id_start: -1,
                producer_id_len: 0,
                ..Default::default()
            })
        }
        ControllerApi::AlterPartitionReassignments(_) => {
            ResponseBody::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
                error_code,
                error_message: message,
                ..Default::default()
            })
        }
        ControllerApi::ListPartitionReassignments(_) => {
            ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
                error_code,
                error_message: message,
                ..Default::default()
            })
        }
        ControllerApi::DescribeQuorum(_) => ResponseBody::DescribeQuorum(DescribeQuorumResponse {
            error_code,
            error_message: message,
            ..Default::default()
        }),
        ControllerApi::AddRaftVoter(_)
        | ControllerApi::RemoveRaftVoter(_)
        | ControllerApi::ControllerRegistration(_) => {
            voter_change_answer(request, error_code, message)
        }
    }
}

/// Every topic of a CreateTopics request refused.
fn create_topics_refused(
    request: &CreateTopicsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    ResponseBody::CreateTopics(CreateTopicsResponse {
        topics: request
            .topics
            .iter()
            .map(|t| refused_topic(t.name.clone(), error_code, error_message.clone()))
            .collect(),
        ..Default::default()
    })
}

/// Every topic a DeleteTopics request names refused, as it names it (by name or by id).
fn delete_topics_refused(
    request: &DeleteTopicsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    ResponseBody::DeleteTopics(DeleteTopicsResponse {
        responses: delete_targets(request)
            .map(|(name, topic_id)| DeletableTopicResult {
                name,
                topic_id,
                error_code,
                error_message: error_message.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

/// Every topic of a CreatePartitions request refused.
fn create_partitions_refused(
    request: &CreatePartitionsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    ResponseBody::CreatePartitions(CreatePartitionsResponse {
        results: request
            .topics
            .iter()
            .map(|t| CreatePartitionsTopicResult {
                name: t.name.clone(),
                error_code,
                error_message: error_message.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

/// Every resource of an IncrementalAlterConfigs request refused.
fn incremental_alter_configs_refused(
    request: &IncrementalAlterConfigsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    ResponseBody::IncrementalAlterConfigs(IncrementalAlterConfigsResponse {
        responses: request
            .resources
            .iter()
            .map(|res| AlterConfigsResourceResponse {
                error_code,
                error_message: error_message.clone(),
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

/// Every resource of a (legacy) AlterConfigs request refused.
fn alter_configs_refused(
    request: &AlterConfigsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    ResponseBody::AlterConfigs(AlterConfigsResponse {
        responses: request
            .resources
            .iter()
            .map(|res| LegacyResult {
                error_code,
                error_message: error_message.clone(),
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

/// The answer to a change of the quorum's members (AddRaftVoter, RemoveRaftVoter, or else
/// ControllerRegistration): `error_code` (NONE once carried out) and `error_message`.
pub fn voter_change_answer(
    request: &ControllerApi,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    match request {
        ControllerApi::AddRaftVoter(_) => ResponseBody::AddRaftVoter(AddRaftVoterResponse {
            error_code,
            error_message,
            ..Default::default()
        }),
        ControllerApi::RemoveRaftVoter(_) => {
            ResponseBody::RemoveRaftVoter(RemoveRaftVoterResponse {
                error_code,
                error_message,
                ..Default::default()
            })
        }
        _ => ResponseBody::ControllerRegistration(ControllerRegistrationResponse {
            error_code,
            error_message,
            ..Default::default()
        }),
    }
}

/// `unclean.leader.election.enable` for a topic, as its config resolves on the controller: the
/// topic's override, else the cluster's dynamic default, else this node's properties.
fn unclean_policy<'a>(
    config: &'a BrokerConfig,
    image: &'a MetadataImage,
) -> impl Fn(&str) -> bool + 'a {
    let (node, default) = image.broker_config_layers(config.node_id);
    let dynamic = fjord_config::DynamicBrokerConfig::new(node, default);
    move |topic: &str| {
        let empty = std::collections::BTreeMap::new();
        let overrides = image.topic_config(topic).unwrap_or(&empty);
        fjord_config::TopicConfig::resolve(config, &dynamic, overrides)
            .settings()
            .unclean_leader_election_enable
    }
}

/// Whether a controller's answer says it is not the active controller (the whole request is then
/// refused so; the sender tries the new one).
pub fn is_not_controller(response: &ResponseBody) -> bool {
    let code = match response {
        ResponseBody::CreateTopics(r) => r.topics.first().map(|t| t.error_code),
        ResponseBody::DeleteTopics(r) => r.responses.first().map(|t| t.error_code),
        ResponseBody::CreatePartitions(r) => r.results.first().map(|t| t.error_code),
        ResponseBody::IncrementalAlterConfigs(r) => r.responses.first().map(|t| t.error_code),
        ResponseBody::AlterConfigs(r) => r.responses.first().map(|t| t.error_code),
        ResponseBody::AllocateProducerIds(r) => Some(r.error_code),
        ResponseBody::BrokerRegistration(r) => Some(r.error_code),
        ResponseBody::BrokerHeartbeat(r) => Some(r.error_code),
        ResponseBody::DescribeQuorum(r) => Some(r.error_code),
        ResponseBody::AlterPartition(r) => Some(r.error_code),
        ResponseBody::ElectLeaders(r) => Some(r.error_code),
        ResponseBody::AlterPartitionReassignments(r) => Some(r.error_code),
        ResponseBody::ListPartitionReassignments(r) => Some(r.error_code),
        ResponseBody::AddRaftVoter(r) => Some(r.error_code),
        ResponseBody::RemoveRaftVoter(r) => Some(r.error_code),
        ResponseBody::ControllerRegistration(r) => Some(r.error_code),
        _ => None,
    };
    code == Some(errors::NOT_CONTROLLER)
}

/// A refusal as a response entry's error code and message.
pub(crate) fn answer(outcome: Result<(), Refusal>) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (errors::NONE, None),
        Err(refusal) => (refusal.error_code, Some(refusal.message)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fjord_metadata::MetadataDelta;
    use fjord_protocol::messages::create_topics_request::CreatableTopic;
    use fjord_protocol::messages::delete_topics_request::DeleteTopicState;

    use super::*;

    fn controller() -> Controller {
        let (config, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        Controller::new(Arc::new(config), "cluster".into())
    }

    /// The image after committing `records`, as the metadata log would apply them.
    fn committed(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for record in records {
            delta.apply(record).expect("the controller's records apply");
        }
        delta.finish(image.offset() + 1)
    }

    fn request(api: ControllerApi) -> ControllerRequest {
        ControllerRequest::new(7, api, 1)
    }

    fn ids() -> impl FnMut() -> TopicId {
        let mut next = 0u8;
        move || {
            next += 1;
            Uuid([next; 16])
        }
    }

    impl Controller {
        fn decide_now(
            &mut self,
            image: &MetadataImage,
            request: &ControllerRequest,
            ids: &mut dyn FnMut() -> TopicId,
        ) -> Decision {
            self.decide(image, request, 0, ids)
        }
    }

    /// An image with broker 1 registered and unfenced.
    fn cluster(controller: &mut Controller) -> MetadataImage {
        let registration = BrokerRegistrationRequest {
            broker_id: 1,
            cluster_id: "cluster".into(),
            incarnation_id: Uuid([9; 16]),
            previous_broker_epoch: -1,
            ..Default::default()
        };
        let decision = controller.decide_now(
            &MetadataImage::empty(),
            &request(ControllerApi::BrokerRegistration(registration)),
            &mut ids(),
        );
        let image = committed(&MetadataImage::empty(), &decision.records);
        let epoch = image.broker(1).unwrap().broker_epoch;
        let decision = controller.decide_now(
            &image,
            &request(ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
                broker_id: 1,
                broker_epoch: epoch,
                current_metadata_offset: image.offset() as i64,
                ..Default::default()
            })),
            &mut ids(),
        );
        let image = committed(&image, &decision.records);
        assert!(image.broker(1).unwrap().is_active());
        image
    }

    fn create(names: &[&str], validate_only: bool) -> ControllerApi {
        ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: names
                .iter()
                .map(|n| CreatableTopic {
                    name: n.to_string(),
                    num_partitions: 2,
                    replication_factor: 1,
                    ..Default::default()
                })
                .collect(),
            timeout_ms: 1000,
            validate_only,
        })
    }

    fn topic_errors(response: &ResponseBody) -> Vec<(String, i16)> {
        match response {
            ResponseBody::CreateTopics(r) => r
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.error_code))
                .collect(),
            other => panic!("not a CreateTopics answer: {other:?}"),
        }
    }

    #[test]
    fn later_entries_of_one_request_see_the_earlier_ones() {
        let mut controller = controller();
        let image = cluster(&mut controller);
        // "a.b" then "a_b" collide; "x" twice is a duplicate of the request itself.
        let decision = controller.decide_now(
            &image,
            &request(create(&["a.b", "a_b", "x", "x"], false)),
            &mut ids(),
        );
        assert_eq!(
            topic_errors(&decision.response),
            vec![
                ("a.b".into(), errors::NONE),
                ("a_b".into(), errors::INVALID_TOPIC_EXCEPTION),
                ("x".into(), errors::INVALID_REQUEST),
            ]
        );
        let image = committed(&image, &decision.records);
        assert_eq!(image.topic("a.b").unwrap().partitions.len(), 2);
        assert!(image.topic("a_b").is_none() && image.topic("x").is_none());
        // Once committed, the same creation is refused.
        let again = controller.decide_now(&image, &request(create(&["a.b"], false)), &mut ids());
        assert_eq!(
            topic_errors(&again.response),
            vec![("a.b".into(), errors::TOPIC_ALREADY_EXISTS)]
        );
        assert!(again.records.is_empty());
    }

    #[test]
    fn validate_only_decides_but_commits_nothing() {
        let mut controller = controller();
        let image = cluster(&mut controller);
        let decision = controller.decide_now(&image, &request(create(&["t"], true)), &mut ids());
        assert_eq!(
            topic_errors(&decision.response),
            vec![("t".into(), errors::NONE)]
        );
        assert!(decision.records.is_empty());
    }

    #[test]
    fn a_topic_named_twice_in_one_deletion_is_removed_once() {
        let mut controller = controller();
        let image = cluster(&mut controller);
        let created = controller.decide_now(&image, &request(create(&["t"], false)), &mut ids());
        let image = committed(&image, &created.records);
        let id = image.topic("t").unwrap().topic_id;
        let deletion = ControllerApi::DeleteTopics(DeleteTopicsRequest {
            topics: vec![
                DeleteTopicState {
                    name: Some("t".into()),
                    topic_id: Uuid::ZERO,
                },
                DeleteTopicState {
                    name: None,
                    topic_id: id,
                },
            ],
            ..Default::default()
        });
        let decision = controller.decide_now(&image, &request(deletion), &mut ids());
        let ResponseBody::DeleteTopics(response) = &decision.response else {
            panic!("not a DeleteTopics answer")
        };
        let codes: Vec<i16> = response.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![errors::NONE, errors::UNKNOWN_TOPIC_ID]);
        assert_eq!(decision.records.len(), 1);
        assert!(committed(&image, &decision.records).topic("t").is_none());
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut controller = controller();
        let mut image = cluster(&mut controller);
        let mut starts = Vec::new();
        for _ in 0..3 {
            let api = ControllerApi::AllocateProducerIds(AllocateProducerIdsRequest {
                broker_id: 1,
                broker_epoch: 0,
            });
            let decision = controller.decide_now(&image, &request(api), &mut ids());
            let ResponseBody::AllocateProducerIds(r) = &decision.response else {
                panic!("not an AllocateProducerIds answer")
            };
            assert_eq!(r.producer_id_len, PRODUCER_ID_BLOCK);
            starts.push(r.producer_id_start);
            image = committed(&image, &decision.records);
        }
        let block = PRODUCER_ID_BLOCK as i64;
        assert_eq!(
            starts,
            vec![starts[0], starts[0] + block, starts[0] + 2 * block]
        );
    }

    #[test]
    fn each_registration_gets_a_higher_broker_epoch() {
        let mut controller = controller();
        let image = cluster(&mut controller);
        let first = image.broker(1).unwrap().broker_epoch;
        let again = BrokerRegistrationRequest {
            broker_id: 1,
            cluster_id: "cluster".into(),
            incarnation_id: Uuid([10; 16]),
            previous_broker_epoch: first,
            ..Default::default()
        };
        // The first incarnation's session is live: a second process with its id is refused.
        let duplicate = controller.decide_now(
            &image,
            &request(ControllerApi::BrokerRegistration(again.clone())),
            &mut ids(),
        );
        let ResponseBody::BrokerRegistration(r) = &duplicate.response else {
            panic!("not a BrokerRegistration answer")
        };
        assert_eq!(r.error_code, errors::DUPLICATE_BROKER_REGISTRATION);
        assert!(duplicate.records.is_empty());
        // Once the session has expired, the new incarnation registers.
        let decision = controller.decide(
            &image,
            &request(ControllerApi::BrokerRegistration(again.clone())),
            10_000,
            &mut ids(),
        );
        let image = committed(&image, &decision.records);
        assert!(image.broker(1).unwrap().broker_epoch > first);
        assert!(
            image.broker(1).unwrap().fenced,
            "a new incarnation starts fenced"
        );

        let stranger = BrokerRegistrationRequest {
            cluster_id: "another".into(),
            ..again
        };
        let refused = controller.decide_now(
            &image,
            &request(ControllerApi::BrokerRegistration(stranger)),
            &mut ids(),
        );
        assert!(refused.records.is_empty());
        let ResponseBody::BrokerRegistration(r) = &refused.response else {
            panic!("not a BrokerRegistration answer")
        };
        assert_eq!(r.error_code, errors::INCONSISTENT_CLUSTER_ID);

        // A negative id (bytes from anyone on the controller listener) registers nothing.
        let negative = BrokerRegistrationRequest {
            broker_id: -1,
            cluster_id: "cluster".into(),
            ..Default::default()
        };
        let refused = controller.decide_now(
            &image,
            &request(ControllerApi::BrokerRegistration(negative)),
            &mut ids(),
        );
        assert!(refused.records.is_empty());
        let ResponseBody::BrokerRegistration(r) = &refused.response else {
            panic!("not a BrokerRegistration answer")
        };
        assert_eq!(r.error_code, errors::INVALID_REQUEST);
    }

    #[test]
    fn an_error_response_refuses_every_entry() {
        let api = create(&["a", "b"], false);
        let response = error_response(&api, errors::NOT_CONTROLLER, "moved");
        assert_eq!(
            topic_errors(&response),
            vec![
                ("a".into(), errors::NOT_CONTROLLER),
                ("b".into(), errors::NOT_CONTROLLER)
            ]
        );
    }
}
