//! The client: a bootstrap connection, connections to brokers by node id, metadata, coordinator
//! discovery with retries, and the admin calls for consumer groups and offsets.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use fjord_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use fjord_protocol::messages::list_groups_request::ListGroupsRequest;
use fjord_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use fjord_protocol::messages::list_offsets_response::ListOffsetsResponse;
use fjord_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use fjord_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use fjord_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestGroup};
use fjord_protocol::messages::offset_fetch_response::OffsetFetchResponse;
use fjord_protocol::{ApiKey, RequestBody, ResponseBody, Uuid};

use crate::connection::{ClientConfig, Connection};
use crate::consumer_protocol::{self, Assignment};
use fjord_common::{errors, TopicPartition};

use crate::error::{is_retriable, ClientError};

/// A broker as metadata and FindCoordinator describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

impl Broker {
    /// `host:port`, for connecting.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// A topic in a metadata answer. `error_code` is non-zero for topics that do not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub topic_id: Uuid,
    pub error_code: i16,
    pub is_internal: bool,
    pub partitions: Vec<PartitionMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    pub leader_id: i32,
    pub error_code: i16,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas on brokers that are down.
    pub offline: Vec<i32>,
}

/// The brokers and topics a Metadata request returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    /// The broker the cluster names as its controller (-1: none known).
    pub controller_id: i32,
    pub brokers: Vec<Broker>,
    pub topics: Vec<TopicMetadata>,
}

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Empty when the broker's ListGroups version predates states (v4).
    pub state: String,
    /// "classic" or "consumer"; empty before ListGroups v5.
    pub group_type: String,
}

/// Which rebalance protocol a described group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// JoinGroup/SyncGroup groups, described with DescribeGroups.
    Classic,
    /// KIP-848 groups, described with ConsumerGroupDescribe.
    Consumer,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Sorted; empty when the member holds nothing (or the group is not a consumer group).
    pub assignment: Vec<TopicPartition>,
}

/// A described group. A group that does not exist is described with state "Dead".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub kind: GroupKind,
    /// Kafka's state name: Empty, Stable, PreparingRebalance, CompletingRebalance, Assigning,
    /// Reconciling or Dead.
    pub state: String,
    pub protocol_type: String,
    /// The selected (classic) or server-side (consumer) assignor.
    pub assignor: String,
    pub coordinator: Broker,
    pub members: Vec<MemberDescription>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    pub offset: i64,
    /// `None` when the committer did not know the leader epoch.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

/// Which offset ListOffsets looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (high watermark for read_uncommitted).
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    fn wire(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(ts) => ts,
        }
    }
}

/// A ListOffsets answer for one partition. `offset` is -1 when a timestamp lookup found no
/// record at or after the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    pub offset: i64,
    pub timestamp: i64,
}

/// Pause between retries of calls that failed with a retriable error.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// An async Kafka client. Calls take `&mut self`: one request per connection at a time.
pub struct Client {
    config: ClientConfig,
    bootstrap: Vec<String>,
    bootstrap_conn: Connection,
    brokers: HashMap<i32, Broker>,
    connections: HashMap<i32, Connection>,
}

impl Client {
    /// Connects to the first reachable address of a comma-separated bootstrap list.
    pub async fn connect(bootstrap: &str) -> Result<Client, ClientError> {
        Client::connect_with(bootstrap, ClientConfig::default()).await
    }

    /// Like [`Client::connect`], with explicit settings.
    pub async fn connect_with(
        bootstrap: &str,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let bootstrap: Vec<String> = bootstrap
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let bootstrap_conn = Client::connect_any(&bootstrap, &config).await?;
        Ok(Client {
            config,
            bootstrap,
            bootstrap_conn,
            brokers: HashMap::new(),
            connections: HashMap::new(),
        })
    }

    async fn connect_any(
        addrs: &[String],
        config: &ClientConfig,
    ) -> Result<Connection, ClientError> {
        let mut last = ClientError::Malformed("bootstrap server list: empty".to_string());
        for addr in addrs {
            match Connection::connect(addr, config).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A connection to any broker, for cluster-wide requests.
    pub(crate) async fn any_conn(&mut self) -> Result<&mut Connection, ClientError> {
        if !self.bootstrap_conn.is_usable() {
            self.bootstrap_conn = Client::connect_any(&self.bootstrap, &self.config).await?;
        }
        Ok(&mut self.bootstrap_conn)
    }

    /// A connection to broker `node_id`, opened (after a metadata refresh if needed) on demand.
    pub(crate) async fn node_conn(&mut self, node_id: i32) -> Result<&mut Connection, ClientError> {
        let usable = self
            .connections
            .get(&node_id)
            .is_some_and(Connection::is_usable);
        if !usable {
            if !self.brokers.contains_key(&node_id) {
                self.metadata(Some(&[])).await?;
            }
            let broker = self.brokers.get(&node_id).cloned().ok_or_else(|| {
                ClientError::Malformed(format!("metadata: no broker with node id {node_id}"))
            })?;
            let conn = Connection::connect(&broker.addr(), &self.config).await?;
            self.connections.insert(node_id, conn);
        }
        self.connections
            .get_mut(&node_id)
            .ok_or_else(|| ClientError::Closed(format!("node {node_id}")))
    }

    /// Metadata for `topics`, or for every topic when `None`. `Some(&[])` asks for brokers only.
    pub async fn metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<ClusterMetadata, ClientError> {
        let request = MetadataRequest {
            topics: topics.map(|names| {
                names
                    .iter()
                    .map(|name| MetadataRequestTopic {
                        topic_id: Uuid::default(),
                        name: Some(name.clone()),
                    })
                    .collect()
            }),
            allow_auto_topic_creation: false,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        };
        let conn = self.any_conn().await?;
        let ResponseBody::Metadata(response) = conn.send(RequestBody::Metadata(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::Metadata));
        };
        let brokers: Vec<Broker> = response
            .brokers
            .iter()
            .map(|b| Broker {
                node_id: b.node_id,
                host: b.host.clone(),
                port: b.port,
            })
            .collect();
        for broker in &brokers {
            self.brokers.insert(broker.node_id, broker.clone());
        }
        let topics = response
            .topics
            .into_iter()
            .map(|t| TopicMetadata {
                name: t.name.unwrap_or_default(),
                topic_id: t.topic_id,
                error_code: t.error_code,
                is_internal: t.is_internal,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| PartitionMetadata {
                        partition: p.partition_index,
                        leader_id: p.leader_id,
                        error_code: p.error_code,
                        replicas: p.replica_nodes.clone(),
                        isr: p.isr_nodes.clone(),
                        offline: p.offline_replicas.clone(),
                    })
                    .collect(),
            })
            .collect();
        Ok(ClusterMetadata {
            cluster_id: response.cluster_id,
            controller_id: response.controller_id,
            brokers,
            topics,
        })
    }

    /// The coordinator of `group_id`, retrying while it is being elected or loaded.
    pub async fn find_coordinator(&mut self, group_id: &str) -> Result<Broker, ClientError> {
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            let conn = self.any_conn().await?;
            let version = conn.version(ApiKey::FindCoordinator).ok_or_else(|| {
                ClientError::UnsupportedApi {
                    api: ApiKey::FindCoordinator.name(),
                    addr: conn.addr().to_string(),
                }
            })?;
            // Batched keys (v4+) replace the single key field.
            let request = if version >= 4 {
                FindCoordinatorRequest {
                    key: String::new(),
                    key_type: 0,
                    coordinator_keys: vec![group_id.to_string()],
                }
            } else {
                FindCoordinatorRequest {
                    key: group_id.to_string(),
                    key_type: 0,
                    coordinator_keys: Vec::new(),
                }
            };
            let ResponseBody::FindCoordinator(response) = conn
                .send_at(version, RequestBody::FindCoordinator(request))
                .await?
            else {
                return Err(ClientError::unexpected(ApiKey::FindCoordinator));
            };
            let (code, message, broker) = if version >= 4 {
                let c = response
                    .coordinators
                    .into_iter()
                    .find(|c| c.key == group_id)
                    .ok_or_else(|| {
                        ClientError::Malformed(format!(
                            "FindCoordinator response: no entry for group {group_id}"
                        ))
                    })?;
                let broker = Broker {
                    node_id: c.node_id,
                    host: c.host,
                    port: c.port,
                };
                (c.error_code, c.error_message, broker)
            } else {
                let broker = Broker {
                    node_id: response.node_id,
                    host: response.host,
                    port: response.port,
                };
                (response.error_code, response.error_message, broker)
            };
            if code == errors::NONE {
                self.brokers.insert(broker.node_id, broker.clone());
                return Ok(broker);
            }
            if !is_retriable(code) || Instant::now() >= deadline {
                return Err(ClientError::kafka(
                    format!("FindCoordinator for group {group_id}"),
                    code,
                    message,
                ));
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Sends a request to `group_id`'s coordinator. `check` extracts the answer, or the error
    /// code when the group-level call failed; retriable codes find the coordinator again.
    async fn group_call<T>(
        &mut self,
        group_id: &str,
        mut build: impl FnMut(&Connection) -> Result<RequestBody, ClientError>,
        mut check: impl FnMut(
            ResponseBody,
            &Broker,
        ) -> Result<Result<T, (i16, Option<String>)>, ClientError>,
    ) -> Result<T, ClientError> {
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            let coordinator = self.find_coordinator(group_id).await?;
            let conn = self.node_conn(coordinator.node_id).await?;
            let request = build(conn)?;
            let api = request.api_key();
            let response = conn.send(request).await?;
            match check(response, &coordinator)? {
                Ok(value) => return Ok(value),
                Err((code, message)) => {
                    if !is_retriable(code) || Instant::now() >= deadline {
                        return Err(ClientError::kafka(
                            format!("{} for group {group_id}", api.name()),
                            code,
                            message,
                        ));
                    }
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Every group on every broker whose protocol type is "consumer" or empty (as Kafka's
    /// `listConsumerGroups`), sorted by id.
    pub async fn list_groups(&mut self) -> Result<Vec<GroupListing>, ClientError> {
        let metadata = self.metadata(Some(&[])).await?;
        let mut groups = BTreeMap::new();
        for broker in metadata.brokers {
            let conn = self.node_conn(broker.node_id).await?;
            let request = ListGroupsRequest {
                states_filter: Vec::new(),
                types_filter: Vec::new(),
            };
            let ResponseBody::ListGroups(response) =
                conn.send(RequestBody::ListGroups(request)).await?
            else {
                return Err(ClientError::unexpected(ApiKey::ListGroups));
            };
            if response.error_code != errors::NONE {
                return Err(ClientError::kafka(
                    format!("ListGroups on broker {}", broker.node_id),
                    response.error_code,
                    None,
                ));
            }
            for g in response.groups {
                if g.protocol_type.is_empty() || g.protocol_type == consumer_protocol::PROTOCOL_TYPE
                {
                    groups.insert(
                        g.group_id.clone(),
                        GroupListing {
                            group_id: g.group_id,
                            protocol_type: g.protocol_type,
                            state: g.group_state,
                            group_type: g.group_type,
                        },
                    );
                }
            }
        }
        Ok(groups.into_values().collect())
    }

    /// Describes `group_id`: with ConsumerGroupDescribe first (KIP-848 groups), then with
    /// DescribeGroups when the coordinator says it is not a consumer-protocol group.
    pub async fn describe_group(
        &mut self,
        group_id: &str,
    ) -> Result<GroupDescription, ClientError> {
        let coordinator = self.find_coordinator(group_id).await?;
        let supports_848 = self
            .node_conn(coordinator.node_id)
            .await?
            .version(ApiKey::ConsumerGroupDescribe)
            .is_some();
        if supports_848 {
            if let Some(description) = self.describe_consumer_group(group_id).await? {
                return Ok(description);
            }
        }
        self.describe_classic_group(group_id).await
    }

    /// `None` when the group is not a consumer-protocol group.
    async fn describe_consumer_group(
        &mut self,
        group_id: &str,
    ) -> Result<Option<GroupDescription>, ClientError> {
        self.group_call(
            group_id,
            |_| {
                Ok(RequestBody::ConsumerGroupDescribe(
                    ConsumerGroupDescribeRequest {
                        group_ids: vec![group_id.to_string()],
                        include_authorized_operations: false,
                    },
                ))
            },
            |response, coordinator| {
                let ResponseBody::ConsumerGroupDescribe(response) = response else {
                    return Err(ClientError::unexpected(ApiKey::ConsumerGroupDescribe));
                };
                let Some(group) = response.groups.into_iter().find(|g| g.group_id == group_id)
                else {
                    return Err(ClientError::Malformed(format!(
                        "ConsumerGroupDescribe response: no entry for group {group_id}"
                    )));
                };
                if group.error_code == errors::GROUP_ID_NOT_FOUND {
                    return Ok(Ok(None));
                }
                if group.error_code != errors::NONE {
                    return Ok(Err((group.error_code, group.error_message)));
                }
                let members = group
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut assignment: Vec<TopicPartition> = m
                            .assignment
                            .topic_partitions
                            .iter()
                            .flat_map(|t| {
                                t.partitions
                                    .iter()
                                    .map(|p| TopicPartition::new(t.topic_name.clone(), *p))
                            })
                            .collect();
                        assignment.sort();
                        MemberDescription {
                            member_id: m.member_id,
                            group_instance_id: m.instance_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            assignment,
                        }
                    })
                    .collect();
                Ok(Ok(Some(GroupDescription {
                    group_id: group.group_id,
                    kind: GroupKind::Consumer,
                    state: group.group_state,
                    protocol_type: consumer_protocol::PROTOCOL_TYPE.to_string(),
                    assignor: group.assignor_name,
                    coordinator: coordinator.clone(),
                    members,
                })))
            },
        )
        .await
    }

    async fn describe_classic_group(
        &mut self,
        group_id: &str,
    ) -> Result<GroupDescription, ClientError> {
        self.group_call(
            group_id,
            |_| {
                Ok(RequestBody::DescribeGroups(DescribeGroupsRequest {
                    groups: vec![group_id.to_string()],
                    include_authorized_operations: false,
                }))
            },
            |response, coordinator| {
                let ResponseBody::DescribeGroups(response) = response else {
                    return Err(ClientError::unexpected(ApiKey::DescribeGroups));
                };
                let Some(group) = response.groups.into_iter().find(|g| g.group_id == group_id)
                else {
                    return Err(ClientError::Malformed(format!(
                        "DescribeGroups response: no entry for group {group_id}"
                    )));
                };
                if group.error_code == errors::GROUP_ID_NOT_FOUND {
                    // Newer coordinators answer so for unknown groups; Kafka's admin reports Dead.
                    return Ok(Ok(GroupDescription {
                        group_id: group.group_id,
                        kind: GroupKind::Classic,
                        state: "Dead".to_string(),
                        protocol_type: String::new(),
                        assignor: String::new(),
                        coordinator: coordinator.clone(),
                        members: Vec::new(),
                    }));
                }
                if group.error_code != errors::NONE {
                    return Ok(Err((group.error_code, None)));
                }
                // Only consumer-protocol members carry assignments in the consumer format.
                let decode = group.protocol_type.is_empty()
                    || group.protocol_type == consumer_protocol::PROTOCOL_TYPE;
                let mut members = Vec::with_capacity(group.members.len());
                for m in group.members {
                    let mut assignment = Vec::new();
                    if decode && !m.member_assignment.is_empty() {
                        let decoded = Assignment::decode(m.member_assignment.clone())?;
                        for t in decoded.assigned_partitions {
                            for p in t.partitions {
                                assignment.push(TopicPartition::new(t.topic.clone(), p));
                            }
                        }
                        assignment.sort();
                    }
                    members.push(MemberDescription {
                        member_id: m.member_id,
                        group_instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        assignment,
                    });
                }
                Ok(Ok(GroupDescription {
                    group_id: group.group_id,
                    kind: GroupKind::Classic,
                    state: group.group_state,
                    protocol_type: group.protocol_type,
                    assignor: group.protocol_data,
                    coordinator: coordinator.clone(),
                    members,
                }))
            },
        )
        .await
    }

    /// Every offset `group_id` has committed. Partitions without a committed offset are absent.
    pub async fn fetch_offsets(
        &mut self,
        group_id: &str,
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>, ClientError> {
        self.group_call(
            group_id,
            |conn| offset_fetch_request(conn, group_id),
            |response, _| {
                let ResponseBody::OffsetFetch(response) = response else {
                    return Err(ClientError::unexpected(ApiKey::OffsetFetch));
                };
                Ok(committed_offsets(response, group_id))
            },
        )
        .await
    }

    /// Commits `offsets` for `group_id` as an admin does: generation -1 and no member id, so
    /// the coordinator accepts it only while the group has no members.
    pub async fn commit_offsets(
        &mut self,
        group_id: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, offset) in offsets {
            by_topic
                .entry(tp.topic.as_str())
                .or_default()
                .push(OffsetCommitRequestPartition {
                    partition_index: tp.partition,
                    committed_offset: *offset,
                    committed_leader_epoch: -1,
                    committed_metadata: Some(String::new()),
                });
        }
        let topics: Vec<OffsetCommitRequestTopic> = by_topic
            .into_iter()
            .map(|(name, partitions)| OffsetCommitRequestTopic {
                name: name.to_string(),
                partitions,
                ..Default::default()
            })
            .collect();
        self.group_call(
            group_id,
            |_| {
                Ok(RequestBody::OffsetCommit(OffsetCommitRequest {
                    group_id: group_id.to_string(),
                    generation_id_or_member_epoch: -1,
                    member_id: String::new(),
                    group_instance_id: None,
                    retention_time_ms: -1,
                    topics: topics.clone(),
                }))
            },
            |response, _| {
                let ResponseBody::OffsetCommit(response) = response else {
                    return Err(ClientError::unexpected(ApiKey::OffsetCommit));
                };
                for t in &response.topics {
                    for p in &t.partitions {
                        if p.error_code != errors::NONE {
                            return Ok(Err((
                                p.error_code,
                                Some(format!("partition {}-{}", t.name, p.partition_index)),
                            )));
                        }
                    }
                }
                Ok(Ok(()))
            },
        )
        .await
    }

    /// Looks `spec` up for every partition in `partitions`, asking each partition's leader.
    /// Partitions whose leader is unknown or answers with a retriable error are asked again
    /// (after a metadata refresh) until the request timeout.
    pub async fn list_offsets(
        &mut self,
        partitions: &BTreeSet<TopicPartition>,
        spec: OffsetSpec,
    ) -> Result<BTreeMap<TopicPartition, ListedOffset>, ClientError> {
        let mut result = BTreeMap::new();
        if partitions.is_empty() {
            return Ok(result);
        }
        let deadline = Instant::now() + self.config.request_timeout;
        let mut pending: BTreeSet<TopicPartition> = partitions.clone();
        loop {
            let (by_leader, mut retry_code) = self.partitions_by_leader(&pending).await?;
            for (leader, topics) in by_leader {
                let response = self.list_offsets_on(leader, topics, spec).await?;
                if let Some(code) = take_listed_offsets(response, &mut pending, &mut result)? {
                    retry_code = Some(code);
                }
            }
            if pending.is_empty() {
                return Ok(result);
            }
            if Instant::now() >= deadline {
                let tp = pending
                    .iter()
                    .next()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                return Err(ClientError::kafka(
                    format!("ListOffsets for {tp}"),
                    retry_code.unwrap_or(errors::LEADER_NOT_AVAILABLE),
                    None,
                ));
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// The leaders of `partitions`, from fresh metadata: each leader's partitions by topic.
    /// Partitions without a leader yet are left out, with LEADER_NOT_AVAILABLE to retry on; a
    /// topic that does not exist (a non-retriable topic error) or lacks the partition fails.
    pub(crate) async fn partitions_by_leader(
        &mut self,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<(PartitionsByLeader, Option<i16>), ClientError> {
        let topics: Vec<String> = partitions
            .iter()
            .map(|tp| tp.topic.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let metadata = self.metadata(Some(&topics)).await?;
        let mut by_leader = PartitionsByLeader::new();
        let mut retry_code = None;
        for tp in partitions {
            let topic = metadata.topics.iter().find(|t| t.name == tp.topic);
            let partition =
                topic.and_then(|t| t.partitions.iter().find(|p| p.partition == tp.partition));
            match (topic, partition) {
                (Some(t), _) if t.error_code != errors::NONE && !is_retriable(t.error_code) => {
                    return Err(ClientError::kafka(
                        format!("Metadata for topic {}", tp.topic),
                        t.error_code,
                        None,
                    ));
                }
                (_, Some(p)) if p.leader_id >= 0 => {
                    by_leader
                        .entry(p.leader_id)
                        .or_default()
                        .entry(tp.topic.clone())
                        .or_default()
                        .push(tp.partition);
                }
                (Some(t), None) if t.error_code == errors::NONE => {
                    return Err(ClientError::kafka(
                        format!("partition {tp}"),
                        errors::UNKNOWN_TOPIC_OR_PARTITION,
                        None,
                    ));
                }
                _ => retry_code = Some(errors::LEADER_NOT_AVAILABLE),
            }
        }
        Ok((by_leader, retry_code))
    }

    /// Sends one ListOffsets for `topics` (partitions by topic) to broker `leader`.
    async fn list_offsets_on(
        &mut self,
        leader: i32,
        topics: BTreeMap<String, Vec<i32>>,
        spec: OffsetSpec,
    ) -> Result<ListOffsetsResponse, ClientError> {
        let timeout_ms = i32::try_from(self.config.request_timeout.as_millis()).unwrap_or(i32::MAX);
        let conn = self.node_conn(leader).await?;
        if conn.version(ApiKey::ListOffsets).unwrap_or(0) < 1 {
            // v0 answers with a list of offsets instead of one offset and timestamp.
            return Err(ClientError::UnsupportedApi {
                api: "ListOffsets v1+",
                addr: conn.addr().to_string(),
            });
        }
        let request = ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: topics
                .into_iter()
                .map(|(name, parts)| ListOffsetsTopic {
                    name,
                    partitions: parts
                        .into_iter()
                        .map(|p| ListOffsetsPartition {
                            partition_index: p,
                            current_leader_epoch: -1,
                            timestamp: spec.wire(),
                        })
                        .collect(),
                })
                .collect(),
            timeout_ms,
        };
        let ResponseBody::ListOffsets(response) =
            conn.send(RequestBody::ListOffsets(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::ListOffsets));
        };
        Ok(response)
    }

    /// Deletes `group_id` with its committed offsets. Fails with NON_EMPTY_GROUP while it has
    /// members and GROUP_ID_NOT_FOUND when it does not exist.
    pub async fn delete_group(&mut self, group_id: &str) -> Result<(), ClientError> {
        self.group_call(
            group_id,
            |_| {
                Ok(RequestBody::DeleteGroups(DeleteGroupsRequest {
                    groups_names: vec![group_id.to_string()],
                }))
            },
            |response, _| {
                let ResponseBody::DeleteGroups(response) = response else {
                    return Err(ClientError::unexpected(ApiKey::DeleteGroups));
                };
                match response.results.iter().find(|r| r.group_id == group_id) {
                    Some(r) if r.error_code == errors::NONE => Ok(Ok(())),
                    Some(r) => Ok(Err((r.error_code, None))),
                    None => Err(ClientError::Malformed(format!(
                        "DeleteGroups response: no entry for group {group_id}"
                    ))),
                }
            },
        )
        .await
    }
}

/// Partitions by topic, by the node id of their leader.
type PartitionsByLeader = BTreeMap<i32, BTreeMap<String, Vec<i32>>>;

/// Moves the partitions a ListOffsets answer settles from `pending` into `listed`. A retriable
/// error leaves its partition pending: the last such code is returned, to name the failure if
/// the retries run out. Any other error fails the lookup.
fn take_listed_offsets(
    response: ListOffsetsResponse,
    pending: &mut BTreeSet<TopicPartition>,
    listed: &mut BTreeMap<TopicPartition, ListedOffset>,
) -> Result<Option<i16>, ClientError> {
    let mut retry_code = None;
    for t in response.topics {
        for p in t.partitions {
            let tp = TopicPartition::new(t.name.clone(), p.partition_index);
            if !pending.contains(&tp) {
                continue;
            }
            if p.error_code == errors::NONE {
                pending.remove(&tp);
                listed.insert(
                    tp,
                    ListedOffset {
                        offset: p.offset,
                        timestamp: p.timestamp,
                    },
                );
            } else if is_retriable(p.error_code) {
                retry_code = Some(p.error_code);
            } else {
                return Err(ClientError::kafka(
                    format!("ListOffsets for {tp}"),
                    p.error_code,
                    None,
                ));
            }
        }
    }
    Ok(retry_code)
}

/// An OffsetFetch for every offset `group_id` has committed (a null topic list, which needs
/// v2), in the layout of the connection's version: the group's fields before v8, a list of
/// groups from v8.
fn offset_fetch_request(conn: &Connection, group_id: &str) -> Result<RequestBody, ClientError> {
    let version = conn.version(ApiKey::OffsetFetch).unwrap_or(0);
    if version < 2 {
        // Fetching every topic (a null topic list) needs v2.
        return Err(ClientError::UnsupportedApi {
            api: "OffsetFetch v2+",
            addr: conn.addr().to_string(),
        });
    }
    Ok(RequestBody::OffsetFetch(if version >= 8 {
        OffsetFetchRequest {
            group_id: String::new(),
            // The v0-7 field keeps its default; v8+ lists topics per group.
            topics: Some(Vec::new()),
            groups: vec![OffsetFetchRequestGroup {
                group_id: group_id.to_string(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            }],
            require_stable: false,
        }
    } else {
        OffsetFetchRequest {
            group_id: group_id.to_string(),
            topics: None,
            groups: Vec::new(),
            require_stable: false,
        }
    }))
}

/// The offsets an OffsetFetch answer says `group_id` committed, from either layout (topics at
/// the top before v8, per group from v8), or the first group or partition error code.
fn committed_offsets(
    response: OffsetFetchResponse,
    group_id: &str,
) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>, (i16, Option<String>)> {
    let mut offsets = BTreeMap::new();
    if response.groups.is_empty() {
        if response.error_code != errors::NONE {
            return Err((response.error_code, None));
        }
        for t in response.topics {
            for p in t.partitions {
                add_committed(
                    &mut offsets,
                    &t.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata,
                    p.error_code,
                )?;
            }
        }
    } else {
        for g in response
            .groups
            .into_iter()
            .filter(|g| g.group_id == group_id)
        {
            if g.error_code != errors::NONE {
                return Err((g.error_code, None));
            }
            for t in g.topics {
                for p in t.partitions {
                    add_committed(
                        &mut offsets,
                        &t.name,
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata,
                        p.error_code,
                    )?;
                }
            }
        }
    }
    Ok(offsets)
}

/// Adds a partition's committed offset to `offsets` (an offset of -1: none is committed), or
/// answers its error code, naming the partition.
fn add_committed(
    offsets: &mut BTreeMap<TopicPartition, OffsetAndMetadata>,
    topic: &str,
    partition: i32,
    offset: i64,
    epoch: i32,
    metadata: Option<String>,
    code: i16,
) -> Result<(), (i16, Option<String>)> {
    if code != errors::NONE {
        return Err((code, Some(format!("partition {topic}-{partition}"))));
    }
    // -1 means no committed offset for the partition.
    if offset >= 0 {
        offsets.insert(
            TopicPartition::new(topic, partition),
            OffsetAndMetadata {
                offset,
                leader_epoch: (epoch >= 0).then_some(epoch),
                metadata: metadata.unwrap_or_default(),
            },
        );
    }
    Ok(())
}
