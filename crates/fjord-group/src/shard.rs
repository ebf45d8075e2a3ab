//! `GroupCoordinatorShard`: everything one `__consumer_offsets` partition owns — its classic
//! groups, its KIP-848 consumer groups and committed offsets — driven by requests, the clock and
//! replayed records.
//!
//! Offsets change only by replaying the records a handler emits, so loading a partition
//! rebuilds exactly the state its handlers produced. A group id names at most one group: a
//! classic group or a consumer group, never both.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use fjord_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use fjord_protocol::messages::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use fjord_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use fjord_protocol::messages::heartbeat_response::HeartbeatResponse;
use fjord_protocol::messages::join_group_request::JoinGroupRequest;
use fjord_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use fjord_protocol::messages::leave_group_request::LeaveGroupRequest;
use fjord_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use fjord_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use fjord_protocol::messages::offset_commit_request::OffsetCommitRequest;
use fjord_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use fjord_protocol::messages::offset_delete_request::OffsetDeleteRequest;
use fjord_protocol::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use fjord_protocol::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use fjord_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use fjord_protocol::messages::share_group_describe_response::{self, ShareGroupDescribeResponse};
use fjord_protocol::messages::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use fjord_protocol::messages::share_group_heartbeat_response::ShareGroupHeartbeatResponse;
use fjord_protocol::messages::sync_group_request::SyncGroupRequest;
use fjord_protocol::messages::sync_group_response::SyncGroupResponse;
use fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use fjord_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use fjord_protocol::messages::{
    consumer_group_describe_response, consumer_group_heartbeat_response,
};
use fjord_protocol::{RequestBody, ResponseBody};

use crate::assignor::ServerAssignor;
use crate::classic::{ClassicGroup, GroupState, JoinTimer, Member, Parked};
use crate::consumer_group::{self, ConsumerGroupConfig, ConsumerGroups};
use crate::records::group_metadata_value::MemberMetadata;
use crate::records::{
    self, GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue, RecordKey,
    RecordValue,
};
use crate::share_group::{ShareGroupTimeouts, ShareGroups, ShareInit};
use crate::{
    CoordinatorRecord, Effects, GroupConfig, GroupError, RequestId, Topics, TxnProducer,
    OFFSET_COMMIT_TOPIC_IDS_FROM, OFFSET_FETCH_TOPIC_IDS_FROM, TXN_OFFSET_COMMIT_TOPIC_IDS_FROM,
};
use fjord_common::errors::*;

/// How long a member that joined but never completed a join phase may stay (Kafka's
/// new-member join timeout, 5 minutes).
const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// The most protocol metadata one JoinGroup may carry. Kafka has no such limit; fjord has one
/// so that a group's memory stays bounded per member (a real subscription is a few hundred
/// bytes, large regex subscriptions a few KiB).
pub const MAX_MEMBER_METADATA_BYTES: usize = 1 << 20;

/// Who sent a request, for DescribeGroups' member listing (Kafka takes these from the
/// request header and the connection); for a ShareGroupHeartbeat, also the share group's
/// timeouts as the broker resolved them from the group's configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_host: String,
    pub share_group: ShareGroupTimeouts,
}

/// One group as a metrics scrape reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub group_id: String,
    /// "classic", "consumer" (KIP-848) or "share" (KIP-932), as Kafka's group type.
    pub protocol: &'static str,
    /// The state as Kafka names it.
    pub state: &'static str,
    pub members: usize,
    /// Each committed offset, by topic and partition.
    pub offsets: Vec<((String, i32), i64)>,
}

/// A committed offset as the coordinator keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from records written for OffsetCommit v1-v4 requests with a retention time.
    pub expire_timestamp_ms: Option<i64>,
    /// Where its record stands among the shard's records, in log order: when a transaction's
    /// commit marker comes, its offset replaces a committed one only if written after it.
    pub record_position: u64,
}

/// Offsets by group id, then (topic, partition).
type GroupOffsets = BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>;

/// One topic's fetched partitions: index and committed offset, if any.
type FetchedPartitions<'a> = Vec<(i32, Option<&'a CommittedOffset>)>;

/// The first DescribeGroups version that refuses an unknown group GROUP_ID_NOT_FOUND (KIP-1043).
const DESCRIBE_GROUPS_NOT_FOUND_FROM: i16 = 6;

/// Cloned only to put a shard back as it was when its write is refused (its partition's ISR
/// below `min.insync.replicas`), as Kafka reverts a coordinator whose write failed.
#[derive(Clone)]
pub struct GroupCoordinatorShard {
    config: GroupConfig,
    groups: BTreeMap<String, ClassicGroup>,
    /// KIP-848 groups; their ids never also name a classic group in `groups`.
    consumer: ConsumerGroups,
    /// Share groups (KIP-932); their ids name no classic or consumer group.
    share: ShareGroups,
    offsets: GroupOffsets,
    /// Offsets committed in transactions not yet decided (TxnOffsetCommit), by producer id and
    /// group: the producer's commit marker moves them into `offsets`, its abort marker drops
    /// them.
    pending: BTreeMap<i64, GroupOffsets>,
    /// How many records the shard has applied: the position of the next one.
    records_applied: u64,
    /// Loaded members have no session timer until the first call that knows the time.
    timers_unarmed: bool,
    /// Classic rebalances completed (a new generation with members) since the last
    /// [`GroupCoordinatorShard::take_rebalances`].
    classic_rebalances: u64,
    next_offset_expiry_ms: Option<i64>,
    member_id_counter: u64,
}

fn is_static(m: &Member) -> bool {
    m.group_instance_id.is_some()
}

fn protocols_of(request: &JoinGroupRequest) -> Vec<(String, Bytes)> {
    request
        .protocols
        .iter()
        .map(|p| (p.name.clone(), p.metadata.clone()))
        .collect()
}

/// A JoinGroup's rebalance timeout: v0 has none (-1), and the session timeout serves.
fn rebalance_timeout_of(request: &JoinGroupRequest) -> i32 {
    if request.rebalance_timeout_ms < 0 {
        request.session_timeout_ms
    } else {
        request.rebalance_timeout_ms
    }
}

/// The member a JoinGroup adds, its join parked until the join phase completes; a new member
/// that never completes one is removed after the new-member join timeout.
fn joining_member(
    now_ms: i64,
    parked: Parked,
    request: &JoinGroupRequest,
    client: &ClientInfo,
    member_id: String,
) -> Member {
    Member {
        member_id,
        group_instance_id: request.group_instance_id.clone(),
        client_id: client.client_id.clone(),
        client_host: client.client_host.clone(),
        rebalance_timeout_ms: rebalance_timeout_of(request),
        session_timeout_ms: request.session_timeout_ms,
        protocols: protocols_of(request),
        assignment: Bytes::new(),
        awaiting_join: Some(parked),
        awaiting_sync: None,
        is_new: true,
        heartbeat_deadline: Some(now_ms.saturating_add(NEW_MEMBER_JOIN_TIMEOUT_MS)),
    }
}

fn join_error(version: i16, member_id: &str, error_code: i16) -> JoinGroupResponse {
    JoinGroupResponse {
        error_code,
        generation_id: -1,
        member_id: member_id.to_string(),
        // Non-nullable before v7: Kafka sends an empty name there.
        protocol_name: if version >= 7 {
            None
        } else {
            Some(String::new())
        },
        ..JoinGroupResponse::default()
    }
}

fn sync_response(
    error_code: i16,
    group: Option<&ClassicGroup>,
    assignment: Bytes,
    version: i16,
) -> SyncGroupResponse {
    let (protocol_type, protocol_name) = match (group, version >= 5) {
        (Some(g), true) if error_code == NONE => (g.protocol_type.clone(), g.protocol_name.clone()),
        _ => (None, None),
    };
    SyncGroupResponse {
        error_code,
        protocol_type,
        protocol_name,
        assignment,
        ..SyncGroupResponse::default()
    }
}

/// Why a member may not sync with a classic group, if it may not: the group is dead, the
/// member (or its instance id) is unknown or fenced, its generation is not the group's, or it
/// names another protocol type or name than the group's.
fn sync_error(group: &ClassicGroup, request: &SyncGroupRequest) -> Option<i16> {
    if group.state == GroupState::Dead {
        return Some(COORDINATOR_NOT_AVAILABLE);
    }
    if let Some(code) =
        group.validate_member(&request.member_id, request.group_instance_id.as_deref())
    {
        return Some(code);
    }
    if request.generation_id != group.generation_id {
        return Some(ILLEGAL_GENERATION);
    }
    let type_mismatch = request
        .protocol_type
        .as_ref()
        .is_some_and(|t| group.protocol_type.as_ref() != Some(t));
    let name_mismatch = request
        .protocol_name
        .as_ref()
        .is_some_and(|n| group.protocol_name.as_ref() != Some(n));
    if type_mismatch || name_mismatch {
        return Some(INCONSISTENT_GROUP_PROTOCOL);
    }
    None
}

/// Answers every parked SyncGroup of the group with the member's assignment, restarting the
/// member's session.
fn propagate_assignment(now_ms: i64, group: &mut ClassicGroup, fx: &mut Effects) {
    for m in group.members.values_mut() {
        if let Some((id, v)) = m.awaiting_sync.take() {
            fx.responses.push((
                id,
                ResponseBody::SyncGroup(sync_response(NONE, None, m.assignment.clone(), v)),
            ));
            m.heartbeat_deadline = Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
        }
    }
}

/// The answer to a group request that this node cannot handle (its group's coordinator is
/// elsewhere: NOT_COORDINATOR), every group and partition in it refused with `error_code`,
/// shaped as a coordinator would answer at `version`. None for a request that is not a group
/// request.
pub fn refusal(version: i16, request: &RequestBody, error_code: i16) -> Option<ResponseBody> {
    Some(match request {
        RequestBody::JoinGroup(r) => {
            ResponseBody::JoinGroup(join_error(version, &r.member_id, error_code))
        }
        RequestBody::SyncGroup(_) => {
            ResponseBody::SyncGroup(sync_response(error_code, None, Bytes::new(), version))
        }
        RequestBody::Heartbeat(_) => ResponseBody::Heartbeat(HeartbeatResponse {
            error_code,
            ..HeartbeatResponse::default()
        }),
        RequestBody::LeaveGroup(_) => ResponseBody::LeaveGroup(LeaveGroupResponse {
            error_code,
            ..LeaveGroupResponse::default()
        }),
        RequestBody::OffsetCommit(_) | RequestBody::TxnOffsetCommit(_) => {
            return refused_partitions(request, error_code)
        }
        // From v8 OffsetFetch asks for several groups, each answered on its own.
        RequestBody::OffsetFetch(_) if version < 8 => {
            ResponseBody::OffsetFetch(OffsetFetchResponse {
                error_code,
                ..OffsetFetchResponse::default()
            })
        }
        RequestBody::OffsetFetch(_)
        | RequestBody::DescribeGroups(_)
        | RequestBody::DeleteGroups(_)
        | RequestBody::ConsumerGroupDescribe(_) => return refused_groups(request, error_code),
        RequestBody::OffsetDelete(_) => ResponseBody::OffsetDelete(OffsetDeleteResponse {
            error_code,
            ..OffsetDeleteResponse::default()
        }),
        RequestBody::ConsumerGroupHeartbeat(_) => ResponseBody::ConsumerGroupHeartbeat(
            consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse {
                error_code,
                ..Default::default()
            },
        ),
        RequestBody::ShareGroupHeartbeat(_) => {
            ResponseBody::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
                error_code,
                ..Default::default()
            })
        }
        RequestBody::ShareGroupDescribe(r) => {
            ResponseBody::ShareGroupDescribe(ShareGroupDescribeResponse {
                groups: r
                    .group_ids
                    .iter()
                    .map(|g| share_group_describe_response::DescribedGroup {
                        error_code,
                        group_id: g.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
        }
        _ => return None,
    })
}

/// [`refusal`] of a commit (OffsetCommit, TxnOffsetCommit): these carry their errors per
/// partition, so every partition asked for is refused.
fn refused_partitions(request: &RequestBody, error_code: i16) -> Option<ResponseBody> {
    Some(match request {
        RequestBody::OffsetCommit(r) => ResponseBody::OffsetCommit(OffsetCommitResponse {
            topics: r
                .topics
                .iter()
                .map(|t| OffsetCommitResponseTopic {
                    name: t.name.clone(),
                    topic_id: t.topic_id,
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| OffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code,
                        })
                        .collect(),
                })
                .collect(),
            ..OffsetCommitResponse::default()
        }),
        RequestBody::TxnOffsetCommit(r) => ResponseBody::TxnOffsetCommit(TxnOffsetCommitResponse {
            topics: r
                .topics
                .iter()
                .map(|t| TxnOffsetCommitResponseTopic {
                    name: t.name.clone(),
                    topic_id: t.topic_id,
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| TxnOffsetCommitResponsePartition {
                            partition_index: p.partition_index,
                            error_code,
                        })
                        .collect(),
                })
                .collect(),
            ..TxnOffsetCommitResponse::default()
        }),
        _ => return None,
    })
}

/// [`refusal`] of a request naming several groups (OffsetFetch v8+, DescribeGroups,
/// DeleteGroups, ConsumerGroupDescribe): these carry their errors per group, so every group
/// asked for is refused.
fn refused_groups(request: &RequestBody, error_code: i16) -> Option<ResponseBody> {
    Some(match request {
        RequestBody::OffsetFetch(r) => ResponseBody::OffsetFetch(OffsetFetchResponse {
            groups: r
                .groups
                .iter()
                .map(|g| OffsetFetchResponseGroup {
                    group_id: g.group_id.clone(),
                    error_code,
                    ..OffsetFetchResponseGroup::default()
                })
                .collect(),
            ..OffsetFetchResponse::default()
        }),
        RequestBody::DescribeGroups(r) => ResponseBody::DescribeGroups(DescribeGroupsResponse {
            groups: r
                .groups
                .iter()
                .map(|g| DescribedGroup {
                    error_code,
                    group_id: g.clone(),
                    ..DescribedGroup::default()
                })
                .collect(),
            ..DescribeGroupsResponse::default()
        }),
        RequestBody::DeleteGroups(r) => ResponseBody::DeleteGroups(DeleteGroupsResponse {
            results: r
                .groups_names
                .iter()
                .map(|g| DeletableGroupResult {
                    group_id: g.clone(),
                    error_code,
                    error_message: None,
                })
                .collect(),
            ..DeleteGroupsResponse::default()
        }),
        RequestBody::ConsumerGroupDescribe(r) => ResponseBody::ConsumerGroupDescribe(
            consumer_group_describe_response::ConsumerGroupDescribeResponse {
                groups: r
                    .group_ids
                    .iter()
                    .map(|g| consumer_group_describe_response::DescribedGroup {
                        error_code,
                        group_id: g.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        ),
        _ => return None,
    })
}

/// The `group.consumer.*` settings in the form `ConsumerGroups` takes. Assignor names it does
/// not know are left out (an empty list falls back to its default).
fn consumer_group_config(config: &GroupConfig) -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        session_timeout_ms: config.group_consumer_session_timeout_ms,
        heartbeat_interval_ms: config.group_consumer_heartbeat_interval_ms,
        max_size: usize::try_from(config.group_consumer_max_size).unwrap_or(0),
        assignors: config
            .group_consumer_assignors
            .iter()
            .filter_map(|name| ServerAssignor::from_name(name))
            .collect(),
        min_session_timeout_ms: config.group_consumer_min_session_timeout_ms,
        max_session_timeout_ms: config.group_consumer_max_session_timeout_ms,
    }
}

/// The tombstone of a classic group's GroupMetadata record.
fn group_tombstone(group_id: &str) -> Option<CoordinatorRecord> {
    records::encode(
        &RecordKey::GroupMetadata(GroupMetadataKey {
            group: group_id.to_string(),
        }),
        None,
    )
    .ok()
}

/// Kafka's list filters: states compared case-insensitively (trimmed), types by name.
fn listed(states: &[String], types: &[String], state: &str, group_type: &str) -> bool {
    let state_ok = states.is_empty() || states.iter().any(|f| f.trim().eq_ignore_ascii_case(state));
    let type_ok = types.is_empty() || types.iter().any(|t| t.eq_ignore_ascii_case(group_type));
    state_ok && type_ok
}

/// Kafka's admission rule for group.max.size: an empty group takes anyone; while preparing a
/// rebalance, members already waiting are kept and new ones are taken while fewer than the maximum
/// are waiting (so a shrunk maximum trims the group); otherwise members stay and new ones are taken
/// while the group is below the maximum.
fn accept_joining_member(group: &ClassicGroup, member_id: &str, max_size: i32) -> bool {
    let max = usize::try_from(max_size).unwrap_or(0);
    match group.state {
        GroupState::Empty | GroupState::Dead => true,
        GroupState::PreparingRebalance => {
            let awaiting = group
                .members
                .values()
                .filter(|m| m.awaiting_join.is_some())
                .count();
            group
                .members
                .get(member_id)
                .is_some_and(|m| m.awaiting_join.is_some())
                || awaiting < max
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            group.members.contains_key(member_id) || group.members.len() < max
        }
    }
}

impl GroupCoordinatorShard {
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinatorShard {
            consumer: ConsumerGroups::new(consumer_group_config(&config)),
            share: ShareGroups::default(),
            config,
            groups: BTreeMap::new(),
            offsets: BTreeMap::new(),
            pending: BTreeMap::new(),
            records_applied: 0,
            timers_unarmed: false,
            next_offset_expiry_ms: None,
            member_id_counter: 0,
            classic_rebalances: 0,
        }
    }

    /// The rebalances completed since the last call, classic and consumer (a classic group's
    /// new generation with members; a consumer group's new target assignment), for metrics.
    pub fn take_rebalances(&mut self) -> (u64, u64, u64) {
        (
            std::mem::take(&mut self.classic_rebalances),
            self.consumer.take_rebalances(),
            self.share.take_rebalances(),
        )
    }

    /// Applies one record of this shard's partition, in log order, while loading. Tombstones
    /// delete. Records of types this coordinator does not know are skipped, as Kafka does.
    pub fn replay(&mut self, record: &CoordinatorRecord) -> Result<(), GroupError> {
        self.apply(None, record)
    }

    /// Applies one record of a transactional batch of `producer_id` (a TxnOffsetCommit's
    /// offsets): pending until the producer's marker decides them.
    pub fn replay_transactional(
        &mut self,
        producer_id: i64,
        record: &CoordinatorRecord,
    ) -> Result<(), GroupError> {
        self.apply(Some(producer_id), record)
    }

    /// A commit or abort marker of `producer_id`'s transaction in this shard's partition,
    /// replayed or just written: a commit makes its pending offsets the committed ones (each
    /// unless a later plain commit of the partition came first), an abort drops them.
    pub fn complete_transaction(&mut self, producer_id: i64, commit: bool) {
        let Some(groups) = self.pending.remove(&producer_id) else {
            return;
        };
        if !commit {
            return;
        }
        for (group_id, offsets) in groups {
            let committed = self.offsets.entry(group_id).or_default();
            for (partition, offset) in offsets {
                let newer = committed
                    .get(&partition)
                    .is_none_or(|c| c.record_position < offset.record_position);
                if newer {
                    committed.insert(partition, offset);
                }
            }
        }
    }

    /// Whether a transaction not yet decided committed an offset of the group's partition.
    fn has_pending_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        self.pending.values().any(|groups| {
            groups
                .get(group_id)
                .is_some_and(|o| o.contains_key(&(topic.to_string(), partition)))
        })
    }

    /// Whether a transaction not yet decided committed offsets of the group.
    fn has_open_transaction(&self, group_id: &str) -> bool {
        self.pending
            .values()
            .any(|groups| groups.contains_key(group_id))
    }

    /// Applies one record, committed (`producer_id` None) or of a transaction not yet
    /// decided, by its type.
    fn apply(
        &mut self,
        producer_id: Option<i64>,
        record: &CoordinatorRecord,
    ) -> Result<(), GroupError> {
        let position = self.records_applied;
        self.records_applied += 1;
        let (key, value) = match records::decode(record) {
            Err(GroupError::UnknownRecordType(_)) => return Ok(()),
            other => other?,
        };
        match (key, value) {
            (RecordKey::OffsetCommit(k), Some(RecordValue::OffsetCommit(v))) => {
                self.apply_offset_commit(producer_id, position, k, v);
            }
            (RecordKey::OffsetCommit(k), None) => self.apply_offset_tombstone(k),
            (RecordKey::GroupMetadata(k), Some(RecordValue::GroupMetadata(v))) => {
                self.apply_group_metadata(k, v);
            }
            (RecordKey::GroupMetadata(k), None) => {
                self.groups.remove(&k.group);
            }
            (
                key @ (RecordKey::ShareGroupMemberMetadata(_)
                | RecordKey::ShareGroupMetadata(_)
                | RecordKey::ShareGroupTargetAssignmentMetadata(_)
                | RecordKey::ShareGroupTargetAssignmentMember(_)
                | RecordKey::ShareGroupCurrentMemberAssignment(_)
                | RecordKey::ShareGroupStatePartitionMetadata(_)),
                value,
            ) => self.share.replay(&key, value.as_ref()),
            (key, value) => self.apply_consumer_group_record(key, value),
        }
        Ok(())
    }

    /// An OffsetCommit record: the group's committed offset of the partition, or a pending
    /// one of `producer_id`'s transaction.
    fn apply_offset_commit(
        &mut self,
        producer_id: Option<i64>,
        position: u64,
        k: OffsetCommitKey,
        v: OffsetCommitValue,
    ) {
        // Offsets without a group make a simple classic group, unless a consumer group owns
        // them.
        if !self.consumer.contains(&k.group) {
            self.groups
                .entry(k.group.clone())
                .or_insert_with(|| ClassicGroup::new(&k.group));
        }
        let offsets = match producer_id {
            None => &mut self.offsets,
            Some(producer_id) => self.pending.entry(producer_id).or_default(),
        };
        offsets.entry(k.group).or_default().insert(
            (k.topic, k.partition),
            CommittedOffset {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata,
                commit_timestamp_ms: v.commit_timestamp,
                expire_timestamp_ms: (v.expire_timestamp >= 0).then_some(v.expire_timestamp),
                record_position: position,
            },
        );
    }

    /// An OffsetCommit tombstone deletes the committed offset and every pending one.
    fn apply_offset_tombstone(&mut self, k: OffsetCommitKey) {
        let partition = (k.topic, k.partition);
        for offsets in std::iter::once(&mut self.offsets).chain(self.pending.values_mut()) {
            if let Some(group) = offsets.get_mut(&k.group) {
                group.remove(&partition);
                if group.is_empty() {
                    offsets.remove(&k.group);
                }
            }
        }
        self.pending.retain(|_, groups| !groups.is_empty());
    }

    /// A GroupMetadata record: the classic group as written. The later record wins a group id:
    /// a consumer group of the same id was deleted before this classic group was written (its
    /// tombstones come first in a log Kafka or fjord wrote; this keeps any other log loadable).
    fn apply_group_metadata(&mut self, k: GroupMetadataKey, v: GroupMetadataValue) {
        if self.consumer.contains(&k.group) {
            self.consumer.replay(
                &RecordKey::ConsumerGroupMetadata(records::ConsumerGroupMetadataKey {
                    group_id: k.group.clone(),
                }),
                None,
            );
        }
        let group = group_from_record(&k.group, v);
        self.timers_unarmed |= !group.members.is_empty();
        self.groups.insert(k.group, group);
    }

    /// A KIP-848 consumer group record, replayed by `ConsumerGroups`. A group id names one
    /// group: the classic group of the same id gives way to the consumer group, and the offsets
    /// a deleted consumer group leaves behind go to a simple classic group. Any other record (a
    /// key whose value is of another type) has nothing to apply.
    fn apply_consumer_group_record(&mut self, key: RecordKey, value: Option<RecordValue>) {
        let group_id = match &key {
            RecordKey::ConsumerGroupMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupPartitionMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupMemberMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupTargetAssignmentMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupTargetAssignmentMember(k) => &k.group_id,
            RecordKey::ConsumerGroupCurrentMemberAssignment(k) => &k.group_id,
            _ => return,
        };
        if value.is_some() {
            // The consumer group replaces the classic group of the same id (the simple group
            // its offsets created, or a classic group converted while empty).
            self.groups.remove(group_id);
        }
        if matches!(
            (&key, &value),
            (RecordKey::ConsumerGroupMemberMetadata(_), Some(_))
        ) {
            self.timers_unarmed = true;
        }
        self.consumer.replay(&key, value.as_ref());
        // Offsets outlive a consumer group replaced by a classic one; like any offsets without
        // a group they belong to a simple classic group.
        if matches!((&key, &value), (RecordKey::ConsumerGroupMetadata(_), None))
            && self.offsets.contains_key(group_id)
            && !self.groups.contains_key(group_id)
        {
            self.groups
                .insert(group_id.clone(), ClassicGroup::new(group_id));
        }
    }

    /// `handle_from` for a client whose id and host are not known.
    pub fn handle(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        version: i16,
        request: RequestBody,
        topics: &Topics,
    ) -> Effects {
        self.handle_from(
            now_ms,
            request_id,
            version,
            request,
            topics,
            &ClientInfo::default(),
        )
    }

    /// Handles one group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
    /// TxnOffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups,
    /// ConsumerGroupHeartbeat, ConsumerGroupDescribe; other APIs get no response). Responses for this or earlier parked requests come out in
    /// `Effects`, each with its request id; the records must be appended (durably) before the
    /// responses are sent.
    pub fn handle_from(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        version: i16,
        request: RequestBody,
        topics: &Topics,
        client: &ClientInfo,
    ) -> Effects {
        let mut fx = Effects::default();
        self.arm_loaded_timers(now_ms);
        let response = match request {
            RequestBody::JoinGroup(r) => {
                self.join_group(now_ms, (request_id, version), r, client, &mut fx)
            }
            RequestBody::SyncGroup(r) => self.sync_group(now_ms, (request_id, version), r, &mut fx),
            RequestBody::Heartbeat(r) => Some(ResponseBody::Heartbeat(HeartbeatResponse {
                error_code: self.heartbeat(
                    now_ms,
                    &r.group_id,
                    &r.member_id,
                    r.group_instance_id.as_deref(),
                    r.generation_id,
                    &mut fx,
                ),
                ..HeartbeatResponse::default()
            })),
            RequestBody::LeaveGroup(r) => Some(self.leave_group(now_ms, version, r, &mut fx)),
            RequestBody::OffsetCommit(r) => {
                Some(self.offset_commit(now_ms, version, r, topics, &mut fx))
            }
            RequestBody::TxnOffsetCommit(r) => {
                Some(self.txn_offset_commit(now_ms, version, r, topics, &mut fx))
            }
            RequestBody::OffsetFetch(r) => Some(self.offset_fetch(version, r, topics)),
            RequestBody::OffsetDelete(r) => Some(self.offset_delete(r, &mut fx)),
            RequestBody::ListGroups(r) => Some(self.list_groups(&r.states_filter, &r.types_filter)),
            RequestBody::DescribeGroups(r) => Some(self.describe_groups(version, &r.groups)),
            RequestBody::DeleteGroups(r) => {
                Some(self.delete_groups(now_ms, &r.groups_names, &mut fx))
            }
            RequestBody::ConsumerGroupHeartbeat(r) => {
                Some(self.consumer_group_heartbeat(now_ms, &r, topics, client, &mut fx))
            }
            RequestBody::ConsumerGroupDescribe(r) => {
                Some(self.consumer_group_describe(&r.group_ids, topics))
            }
            RequestBody::ShareGroupHeartbeat(r) => {
                Some(self.share_group_heartbeat(now_ms, &r, topics, client, &mut fx))
            }
            RequestBody::ShareGroupDescribe(r) => {
                let groups = self.share.describe(&r.group_ids, topics, |id| {
                    self.groups.contains_key(id) || self.consumer.contains(id)
                });
                Some(ResponseBody::ShareGroupDescribe(
                    ShareGroupDescribeResponse {
                        groups,
                        ..Default::default()
                    },
                ))
            }
            // Not a group API: the broker routes only the APIs above to a shard.
            _ => None,
        };
        if let Some(response) = response {
            fx.responses.push((request_id, response));
        }
        fx
    }

    /// Fires every timer due at `now_ms`: pending-member and session expiry, the join phase
    /// (initial delay, rebalance timeout), the sync deadline and offset retention.
    /// The broker's word on share-partition state a heartbeat asked it to initialize
    /// (`Effects::share_inits`): the record of its outcome.
    pub fn share_initialized(&mut self, init: &ShareInit, success: bool) -> Effects {
        let topics: Vec<_> = init
            .topics
            .iter()
            .map(|(topic_id, partitions, _)| (*topic_id, partitions.clone()))
            .collect();
        Effects {
            records: self.share.initialized(&init.group_id, &topics, success),
            ..Effects::default()
        }
    }

    pub fn tick(&mut self, now_ms: i64) -> Effects {
        let mut fx = Effects::default();
        self.arm_loaded_timers(now_ms);
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.tick_group(now_ms, &id, &mut fx);
        }
        // Consumer and share group records are already applied to their state.
        fx.records.extend(self.consumer.tick(now_ms));
        fx.records.extend(self.share.tick(now_ms));
        if self.next_offset_expiry_ms.is_none_or(|t| t <= now_ms) {
            self.expire_offsets(now_ms, &mut fx);
            self.next_offset_expiry_ms =
                Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms.max(1)));
        }
        fx
    }

    /// The earliest time `tick` has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let mut next = self.next_offset_expiry_ms;
        for t in [self.consumer.next_deadline(), self.share.next_deadline()]
            .into_iter()
            .flatten()
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        let mut consider = |t: Option<i64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for g in self.groups.values() {
            consider(g.join_deadline.map(|(t, _)| t));
            consider(g.sync_deadline.map(|(t, _)| t));
            for &t in g.pending_join.values() {
                consider(Some(t));
            }
            for m in g.members.values() {
                consider(m.heartbeat_deadline);
            }
        }
        next
    }

    /// The committed offsets of a group (for the broker's tools and tests).
    pub fn committed_offsets(
        &self,
        group_id: &str,
    ) -> Option<&BTreeMap<(String, i32), CommittedOffset>> {
        self.offsets.get(group_id)
    }

    /// Every group of this shard — classic, KIP-848, and groups known only by committed
    /// offsets (listed by Kafka as empty classic groups) — with its committed offsets.
    pub fn summaries(&self) -> Vec<GroupSummary> {
        let offsets_of = |group_id: &str| -> Vec<((String, i32), i64)> {
            self.offsets
                .get(group_id)
                .map(|offsets| {
                    offsets
                        .iter()
                        .map(|(tp, c)| (tp.clone(), c.offset))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut summaries: Vec<GroupSummary> = self
            .groups
            .iter()
            .map(|(id, g)| GroupSummary {
                group_id: id.clone(),
                protocol: "classic",
                state: g.state.as_str(),
                members: g.members.len(),
                offsets: offsets_of(id),
            })
            .collect();
        for (id, state, members) in self.consumer.summaries() {
            let offsets = offsets_of(&id);
            summaries.push(GroupSummary {
                group_id: id,
                protocol: "consumer",
                state,
                members,
                offsets,
            });
        }
        for (id, state, members) in self.share.summaries() {
            summaries.push(GroupSummary {
                group_id: id,
                protocol: "share",
                state,
                members,
                offsets: Vec::new(),
            });
        }
        for id in self.offsets.keys() {
            if !self.groups.contains_key(id) && !self.consumer.contains(id) {
                summaries.push(GroupSummary {
                    group_id: id.clone(),
                    protocol: "classic",
                    state: GroupState::Empty.as_str(),
                    members: 0,
                    offsets: offsets_of(id),
                });
            }
        }
        summaries
    }

    /// A classic group's state, or `None` when this shard has no such classic group.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// A KIP-848 consumer group's state as Kafka names it ("Empty", "Assigning",
    /// "Reconciling", "Stable"), or `None` when this shard has no such consumer group.
    pub fn consumer_group_state(&self, group_id: &str) -> Option<&'static str> {
        self.consumer.group_state(group_id)
    }

    // ----- timers ---------------------------------------------------------------------------

    fn arm_loaded_timers(&mut self, now_ms: i64) {
        if !self.timers_unarmed {
            return;
        }
        self.timers_unarmed = false;
        self.consumer.on_loaded(now_ms);
        self.share.on_loaded(now_ms);
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                if m.heartbeat_deadline.is_none() {
                    m.heartbeat_deadline =
                        Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
                }
            }
        }
    }

    fn tick_group(&mut self, now_ms: i64, group_id: &str, fx: &mut Effects) {
        let Some(mut group) = self.groups.remove(group_id) else {
            return;
        };
        let expired_pending: Vec<String> = group
            .pending_join
            .iter()
            .filter(|(_, &t)| t <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired_pending {
            group.pending_join.remove(&id);
            if group.state == GroupState::PreparingRebalance && group.has_all_members_joined() {
                self.complete_join(now_ms, &mut group, fx);
            }
        }
        let due: Vec<String> = group
            .members
            .values()
            .filter(|m| m.heartbeat_deadline.is_some_and(|t| t <= now_ms))
            .map(|m| m.member_id.clone())
            .collect();
        for id in due {
            let satisfied = match group.members.get_mut(&id) {
                Some(m) => {
                    m.heartbeat_deadline = None;
                    m.has_satisfied_heartbeat()
                }
                None => continue,
            };
            if !satisfied {
                self.remove_member_and_update(now_ms, &mut group, &id, fx);
            }
        }
        if let Some((t, timer)) = group.join_deadline {
            if t <= now_ms {
                group.join_deadline = None;
                match timer {
                    JoinTimer::Initial {
                        delay_ms,
                        remaining_ms,
                    } if group.new_member_added && remaining_ms > 0 => {
                        group.new_member_added = false;
                        let next_delay = i64::from(self.config.group_initial_rebalance_delay_ms)
                            .min(remaining_ms);
                        let next_remaining = (remaining_ms - delay_ms).max(0);
                        group.join_deadline = Some((
                            now_ms.saturating_add(next_delay),
                            JoinTimer::Initial {
                                delay_ms: next_delay,
                                remaining_ms: next_remaining,
                            },
                        ));
                    }
                    _ => self.complete_join(now_ms, &mut group, fx),
                }
            }
        }
        if let Some((t, generation)) = group.sync_deadline {
            if t <= now_ms {
                group.sync_deadline = None;
                if generation == group.generation_id
                    && matches!(
                        group.state,
                        GroupState::CompletingRebalance | GroupState::Stable
                    )
                    && !group.pending_sync.is_empty()
                {
                    let laggards: Vec<String> = group.pending_sync.iter().cloned().collect();
                    for id in laggards {
                        self.respond_removed(&mut group, &id, fx);
                        group.remove_member(&id);
                    }
                    self.prepare_rebalance(now_ms, &mut group, fx);
                }
            }
        }
        self.groups.insert(group_id.to_string(), group);
    }

    // ----- the consumer protocol (KIP-848) ----------------------------------------------------

    fn consumer_group_heartbeat(
        &mut self,
        now_ms: i64,
        request: &ConsumerGroupHeartbeatRequest,
        topics: &Topics,
        client: &ClientInfo,
        fx: &mut Effects,
    ) -> ResponseBody {
        let error = |code: i16, message: String| {
            ResponseBody::ConsumerGroupHeartbeat(
                consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse {
                    error_code: code,
                    error_message: Some(message),
                    ..Default::default()
                },
            )
        };
        if let Err((code, message)) = self.consumer.validate_heartbeat(request) {
            return error(code, message);
        }
        if self.share.contains(&request.group_id) {
            return error(
                GROUP_ID_NOT_FOUND,
                format!("Group {} is not a consumer group.", request.group_id),
            );
        }
        let mut replaced_classic = None;
        if let Some(group) = self.groups.get(&request.group_id) {
            // Kafka replaces an empty classic group with a consumer group when a member joins
            // (epoch 0). A non-empty one it would upgrade online; fjord refuses that with the
            // answer Kafka gives when an upgrade is not possible.
            if request.member_epoch != 0 || group.state != GroupState::Empty {
                return error(
                    GROUP_ID_NOT_FOUND,
                    format!("Group {} is not a consumer group.", request.group_id),
                );
            }
            replaced_classic = group_tombstone(&request.group_id);
        }
        let info = consumer_group::ClientInfo {
            client_id: client.client_id.clone(),
            client_host: client.client_host.clone(),
        };
        let (response, records) =
            self.consumer
                .heartbeat_from(now_ms, Some(&info), request, topics);
        if response.error_code == NONE {
            if let Some(tombstone) = replaced_classic {
                let _ = self.replay(&tombstone);
                fx.records.push(tombstone);
            }
            // Already applied by `heartbeat_from`.
            fx.records.extend(records);
        }
        ResponseBody::ConsumerGroupHeartbeat(response)
    }

    /// ShareGroupHeartbeat: refused for an id that names a group of another type (a classic
    /// group, offsets alone, or a consumer group), as Kafka refuses it.
    fn share_group_heartbeat(
        &mut self,
        now_ms: i64,
        request: &ShareGroupHeartbeatRequest,
        topics: &Topics,
        client: &ClientInfo,
        fx: &mut Effects,
    ) -> ResponseBody {
        let id = &request.group_id;
        if self.groups.contains_key(id)
            || self.consumer.contains(id)
            || self.offsets.contains_key(id)
        {
            return ResponseBody::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
                error_code: GROUP_ID_NOT_FOUND,
                error_message: Some(format!("Group {id} is not a share group.")),
                ..Default::default()
            });
        }
        let max_size = usize::try_from(self.config.group_share_max_size).unwrap_or(0);
        // Records are applied to the share groups as they are made.
        let response = self.share.heartbeat(
            now_ms,
            request,
            topics,
            client,
            max_size,
            &mut fx.records,
            &mut fx.share_inits,
        );
        ResponseBody::ShareGroupHeartbeat(response)
    }

    fn consumer_group_describe(&self, ids: &[String], topics: &Topics) -> ResponseBody {
        // A classic group is not a consumer group: `describe` answers GROUP_ID_NOT_FOUND for
        // every id it does not own, as Kafka does.
        let groups = self
            .consumer
            .describe(ids, topics)
            .into_iter()
            .map(|mut g| {
                if g.group_id.is_empty() {
                    g.error_code = INVALID_GROUP_ID;
                    g.error_message = None;
                }
                g
            })
            .collect();
        ResponseBody::ConsumerGroupDescribe(
            consumer_group_describe_response::ConsumerGroupDescribeResponse {
                groups,
                ..Default::default()
            },
        )
    }

    // ----- the classic protocol -------------------------------------------------------------

    fn new_member_id(&mut self, now_ms: i64, prefix: &str, group: &ClassicGroup) -> String {
        loop {
            self.member_id_counter = self.member_id_counter.wrapping_add(1);
            let seed = (now_ms as u64) ^ self.member_id_counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let (a, b) = (splitmix(seed), splitmix(seed ^ 0xD1B5_4A32_D192_ED03));
            let id = format!(
                "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xffff,
                b >> 48,
                b & 0xffff_ffff_ffff
            );
            if !group.members.contains_key(&id) && !group.pending_join.contains_key(&id) {
                return id;
            }
        }
    }

    fn join_group(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: JoinGroupRequest,
        client: &ClientInfo,
        fx: &mut Effects,
    ) -> Option<ResponseBody> {
        let version = parked.1;
        let error = |code: i16| {
            Some(ResponseBody::JoinGroup(join_error(
                version,
                &request.member_id,
                code,
            )))
        };
        if request.group_id.is_empty() {
            return error(INVALID_GROUP_ID);
        }
        if request.session_timeout_ms < self.config.group_min_session_timeout_ms
            || request.session_timeout_ms > self.config.group_max_session_timeout_ms
        {
            return error(INVALID_SESSION_TIMEOUT);
        }
        let metadata_bytes: usize = request
            .protocols
            .iter()
            .map(|p| p.metadata.len() + p.name.len())
            .sum();
        if metadata_bytes > MAX_MEMBER_METADATA_BYTES {
            return error(INVALID_REQUEST);
        }
        let known_member = !request.member_id.is_empty();
        if self.consumer.contains(&request.group_id) {
            // Kafka lets classic-protocol members join a non-empty consumer group (KIP-848
            // interoperability); fjord does not, and answers as Kafka does for protocols the
            // consumer group cannot take.
            if !self.consumer.is_empty(&request.group_id) {
                return error(INCONSISTENT_GROUP_PROTOCOL);
            }
            if known_member {
                return error(UNKNOWN_MEMBER_ID);
            }
            // An empty consumer group gives way to the classic group this join creates; its
            // offsets stay.
            match self.consumer.delete_group(&request.group_id) {
                Ok(tombstones) => fx.records.extend(tombstones),
                Err(code) => return error(code),
            }
        }
        if known_member && !self.groups.contains_key(&request.group_id) {
            return error(UNKNOWN_MEMBER_ID);
        }
        let mut group = self
            .groups
            .remove(&request.group_id)
            .unwrap_or_else(|| ClassicGroup::new(&request.group_id));
        let response = self.join_group_in(now_ms, parked, &request, client, &mut group, fx);
        // A group that a failed first join created is not kept.
        if !(group.members.is_empty()
            && group.pending_join.is_empty()
            && group.generation_id == 0
            && group.state == GroupState::Empty
            && !self.offsets.contains_key(&request.group_id))
        {
            self.groups.insert(request.group_id.clone(), group);
        }
        response.map(ResponseBody::JoinGroup)
    }

    /// JoinGroup on a classic group: a dead group, a full one, and protocols the group cannot
    /// take refuse the member; then a member without an id joins as a new member and one with
    /// an id as an existing one.
    fn join_group_in(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: &JoinGroupRequest,
        client: &ClientInfo,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) -> Option<JoinGroupResponse> {
        let version = parked.1;
        if group.state == GroupState::Dead {
            return Some(join_error(
                version,
                &request.member_id,
                COORDINATOR_NOT_AVAILABLE,
            ));
        }
        if !accept_joining_member(group, &request.member_id, self.config.group_max_size) {
            // As Kafka: the refused member is forgotten (pending or not), and told the group is full.
            group.pending_join.remove(&request.member_id);
            if group.state == GroupState::PreparingRebalance {
                group.remove_member(&request.member_id);
            }
            return Some(join_error(version, "", GROUP_MAX_SIZE_REACHED));
        }
        if !group.supports_protocols(&request.protocol_type, &protocols_of(request)) {
            return Some(join_error(
                version,
                &request.member_id,
                INCONSISTENT_GROUP_PROTOCOL,
            ));
        }
        if request.member_id.is_empty() {
            self.join_new_member(now_ms, parked, request, client, group, fx)
        } else {
            self.join_existing_member(now_ms, parked, request, client, group, fx)
        }
    }

    /// JoinGroup without a member id: the coordinator names the member. A static member takes
    /// the place of its instance id's current member, or joins; a dynamic member is added at
    /// once before v4, and from v4 (KIP-394) must first come back with its new id.
    fn join_new_member(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: &JoinGroupRequest,
        client: &ClientInfo,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) -> Option<JoinGroupResponse> {
        let version = parked.1;
        let prefix = request
            .group_instance_id
            .as_deref()
            .unwrap_or(&client.client_id);
        let member_id = self.new_member_id(now_ms, prefix, group);
        if let Some(instance) = &request.group_instance_id {
            if let Some(old_id) = group.static_members.get(instance).cloned() {
                return self
                    .replace_static_member(now_ms, parked, group, &old_id, member_id, request, fx);
            }
        } else if version >= 4 {
            // KIP-394: the member must come back with this id before it is counted.
            group.pending_join.insert(
                member_id.clone(),
                now_ms.saturating_add(i64::from(request.session_timeout_ms)),
            );
            return Some(join_error(version, &member_id, MEMBER_ID_REQUIRED));
        }
        let member = joining_member(now_ms, parked, request, client, member_id);
        self.add_member_and_rebalance(now_ms, group, member, &request.protocol_type, fx);
        None
    }

    /// JoinGroup with a member id: a member the coordinator named (KIP-394) is added now, unless
    /// its instance id has a member already. A known member whose protocols are unchanged gets
    /// the current join response while the group completes its rebalance or is stable (the
    /// leader of a stable group rejoins, to rebalance); otherwise it rejoins.
    fn join_existing_member(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: &JoinGroupRequest,
        client: &ClientInfo,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) -> Option<JoinGroupResponse> {
        let version = parked.1;
        let member_id = &request.member_id;
        if group.pending_join.contains_key(member_id) {
            if let Some(instance) = &request.group_instance_id {
                if group.static_members.contains_key(instance) {
                    return Some(join_error(version, member_id, FENCED_INSTANCE_ID));
                }
            }
            let member = joining_member(now_ms, parked, request, client, member_id.clone());
            self.add_member_and_rebalance(now_ms, group, member, &request.protocol_type, fx);
            return None;
        }
        if let Some(code) = group.validate_member(member_id, request.group_instance_id.as_deref()) {
            return Some(join_error(version, member_id, code));
        }
        let Some(member) = group.members.get(member_id) else {
            return Some(join_error(version, member_id, UNKNOWN_MEMBER_ID));
        };
        let same = member.same_protocols(&protocols_of(request));
        let is_leader = group.is_leader(member_id);
        match group.state {
            GroupState::CompletingRebalance if same => {
                Some(self.current_join_response(group, member_id, version, false))
            }
            GroupState::Stable if same && !is_leader => {
                Some(self.current_join_response(group, member_id, version, false))
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => {
                self.update_member_and_rebalance(now_ms, parked, request, group, fx);
                None
            }
            GroupState::Empty | GroupState::Dead => {
                Some(join_error(version, member_id, UNKNOWN_MEMBER_ID))
            }
        }
    }

    /// A known member rejoins: its join is parked (a join it had parked already is superseded,
    /// answered UNKNOWN_MEMBER_ID), it takes the request's protocols and timeouts, and the group
    /// rebalances or completes its join phase.
    fn update_member_and_rebalance(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: &JoinGroupRequest,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) {
        if let Some(m) = group.members.get_mut(&request.member_id) {
            if let Some(old) = m.awaiting_join.replace(parked) {
                fx.responses.push((
                    old.0,
                    ResponseBody::JoinGroup(join_error(
                        old.1,
                        &request.member_id,
                        UNKNOWN_MEMBER_ID,
                    )),
                ));
            }
            m.protocols = protocols_of(request);
            m.rebalance_timeout_ms = rebalance_timeout_of(request);
            m.session_timeout_ms = request.session_timeout_ms;
        }
        self.rebalance_or_complete_join(now_ms, group, fx);
    }

    #[allow(clippy::too_many_arguments)]
    fn replace_static_member(
        &mut self,
        now_ms: i64,
        parked: Parked,
        group: &mut ClassicGroup,
        old_id: &str,
        new_id: String,
        request: &JoinGroupRequest,
        fx: &mut Effects,
    ) -> Option<JoinGroupResponse> {
        let version = parked.1;
        let protocols = protocols_of(request);
        let Some(mut member) = group.members.remove(old_id) else {
            return Some(join_error(version, "", UNKNOWN_MEMBER_ID));
        };
        // The old incarnation's parked requests are fenced.
        if let Some((id, v)) = member.awaiting_join.take() {
            fx.responses.push((
                id,
                ResponseBody::JoinGroup(join_error(v, old_id, FENCED_INSTANCE_ID)),
            ));
        }
        if let Some((id, v)) = member.awaiting_sync.take() {
            fx.responses.push((
                id,
                ResponseBody::SyncGroup(sync_response(FENCED_INSTANCE_ID, None, Bytes::new(), v)),
            ));
        }
        let was_leader = group.is_leader(old_id);
        let same = member.same_protocols(&protocols);
        let old_member = member.clone();
        member.member_id = new_id.clone();
        member.client_id = old_member.client_id.clone();
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = rebalance_timeout_of(request);
        member.heartbeat_deadline =
            Some(now_ms.saturating_add(i64::from(request.session_timeout_ms)));
        if group.pending_sync.remove(old_id) {
            group.pending_sync.insert(new_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            group
                .static_members
                .insert(instance.clone(), new_id.clone());
        }
        if was_leader {
            group.leader_id = Some(new_id.clone());
        }
        match group.state {
            GroupState::Stable if same => {
                // Nothing changes but the member id: keep the assignment, persist, answer.
                group.members.insert(new_id.clone(), member);
                match group_metadata_record(group) {
                    Ok(record) => fx.records.push(record),
                    Err(_) => return Some(join_error(version, "", UNKNOWN_MEMBER_ID)),
                }
                Some(self.current_join_response(group, &new_id, version, was_leader))
            }
            _ => {
                member.protocols = protocols;
                member.awaiting_join = Some(parked);
                group.members.insert(new_id, member);
                self.rebalance_or_complete_join(now_ms, group, fx);
                None
            }
        }
    }

    fn current_join_response(
        &self,
        group: &ClassicGroup,
        member_id: &str,
        version: i16,
        skip_assignment: bool,
    ) -> JoinGroupResponse {
        let members = if group.is_leader(member_id) {
            self.member_list(group, version)
        } else {
            Vec::new()
        };
        JoinGroupResponse {
            error_code: NONE,
            generation_id: group.generation_id,
            protocol_type: if version >= 7 {
                group.protocol_type.clone()
            } else {
                None
            },
            protocol_name: match (&group.protocol_name, version >= 7) {
                (Some(p), _) => Some(p.clone()),
                (None, true) => None,
                (None, false) => Some(String::new()),
            },
            leader: group.leader_id.clone().unwrap_or_default(),
            skip_assignment: skip_assignment && version >= 9,
            member_id: member_id.to_string(),
            members,
            ..JoinGroupResponse::default()
        }
    }

    fn member_list(&self, group: &ClassicGroup, version: i16) -> Vec<JoinGroupResponseMember> {
        let protocol = group.protocol_name.as_deref().unwrap_or("");
        group
            .members
            .values()
            .map(|m| JoinGroupResponseMember {
                member_id: m.member_id.clone(),
                group_instance_id: if version >= 5 {
                    m.group_instance_id.clone()
                } else {
                    None
                },
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    fn add_member_and_rebalance(
        &mut self,
        now_ms: i64,
        group: &mut ClassicGroup,
        member: Member,
        protocol_type: &str,
        fx: &mut Effects,
    ) {
        if group.state == GroupState::PreparingRebalance
            && group.previous_state == GroupState::Empty
        {
            group.new_member_added = true;
        }
        group.add_member(member, protocol_type);
        self.rebalance_or_complete_join(now_ms, group, fx);
    }

    fn rebalance_or_complete_join(
        &mut self,
        now_ms: i64,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) {
        if group.can_rebalance() {
            self.prepare_rebalance(now_ms, group, fx);
        } else if group.state == GroupState::PreparingRebalance
            && group.previous_state != GroupState::Empty
            && group.has_all_members_joined()
        {
            self.complete_join(now_ms, group, fx);
        }
    }

    fn prepare_rebalance(&mut self, now_ms: i64, group: &mut ClassicGroup, fx: &mut Effects) {
        if group.state == GroupState::CompletingRebalance {
            // Members waiting for the leader's assignment must rejoin instead.
            for m in group.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some((id, v)) = m.awaiting_sync.take() {
                    fx.responses.push((
                        id,
                        ResponseBody::SyncGroup(sync_response(
                            REBALANCE_IN_PROGRESS,
                            None,
                            Bytes::new(),
                            v,
                        )),
                    ));
                }
            }
        }
        group.sync_deadline = None;
        let initial = group.state == GroupState::Empty;
        group.transition(GroupState::PreparingRebalance, now_ms);
        if initial {
            let delay = i64::from(self.config.group_initial_rebalance_delay_ms);
            let remaining = (group.rebalance_timeout_ms() - delay).max(0);
            group.join_deadline = Some((
                now_ms.saturating_add(delay),
                JoinTimer::Initial {
                    delay_ms: delay,
                    remaining_ms: remaining,
                },
            ));
        } else if group.has_all_members_joined() {
            self.complete_join(now_ms, group, fx);
        } else {
            group.join_deadline = Some((
                now_ms.saturating_add(group.rebalance_timeout_ms()),
                JoinTimer::Rebalance,
            ));
        }
    }

    fn complete_join(&mut self, now_ms: i64, group: &mut ClassicGroup, fx: &mut Effects) {
        group.join_deadline = None;
        let laggards: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && !is_static(m))
            .map(|m| m.member_id.clone())
            .collect();
        for id in laggards {
            self.respond_removed(group, &id, fx);
            group.remove_member(&id);
        }
        if group.state == GroupState::Dead {
            return;
        }
        if !group.maybe_elect_new_joined_leader() && !group.members.is_empty() {
            // Only static members that have not rejoined remain: wait for them (or their
            // session expiry) one more rebalance timeout.
            group.join_deadline = Some((
                now_ms.saturating_add(group.rebalance_timeout_ms()),
                JoinTimer::Rebalance,
            ));
            return;
        }
        group.generation_id = group.generation_id.wrapping_add(1);
        group.pending_sync.clear();
        if group.members.is_empty() {
            group.protocol_name = None;
            group.leader_id = None;
            group.transition(GroupState::Empty, now_ms);
            if let Ok(record) = group_metadata_record(group) {
                fx.records.push(record);
            }
            return;
        }
        group.protocol_name = group.select_protocol();
        group.transition(GroupState::CompletingRebalance, now_ms);
        self.classic_rebalances += 1;
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in ids {
            let parked = group.members.get(&id).and_then(|m| m.awaiting_join);
            if let Some((request_id, version)) = parked {
                let response = self.current_join_response(group, &id, version, false);
                fx.responses
                    .push((request_id, ResponseBody::JoinGroup(response)));
            }
            if let Some(m) = group.members.get_mut(&id) {
                m.awaiting_join = None;
                m.is_new = false;
                m.heartbeat_deadline = Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
            }
            group.pending_sync.insert(id);
        }
        group.sync_deadline = Some((
            now_ms.saturating_add(group.rebalance_timeout_ms()),
            group.generation_id,
        ));
    }

    /// Answers a member's parked requests before it is removed, so the client retries.
    fn respond_removed(&mut self, group: &mut ClassicGroup, member_id: &str, fx: &mut Effects) {
        if let Some(m) = group.members.get_mut(member_id) {
            if let Some((id, v)) = m.awaiting_join.take() {
                fx.responses.push((
                    id,
                    ResponseBody::JoinGroup(join_error(v, "", UNKNOWN_MEMBER_ID)),
                ));
            }
            if let Some((id, v)) = m.awaiting_sync.take() {
                fx.responses.push((
                    id,
                    ResponseBody::SyncGroup(sync_response(
                        UNKNOWN_MEMBER_ID,
                        None,
                        Bytes::new(),
                        v,
                    )),
                ));
            }
        }
    }

    fn remove_member_and_update(
        &mut self,
        now_ms: i64,
        group: &mut ClassicGroup,
        member_id: &str,
        fx: &mut Effects,
    ) {
        self.respond_removed(group, member_id, fx);
        group.remove_member(member_id);
        match group.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now_ms, group, fx)
            }
            GroupState::PreparingRebalance
                if group.has_all_members_joined() && group.previous_state != GroupState::Empty =>
            {
                self.complete_join(now_ms, group, fx)
            }
            _ => {}
        }
    }

    fn sync_group(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: SyncGroupRequest,
        fx: &mut Effects,
    ) -> Option<ResponseBody> {
        let version = parked.1;
        let reply = |code: i16| {
            Some(ResponseBody::SyncGroup(sync_response(
                code,
                None,
                Bytes::new(),
                version,
            )))
        };
        if request.group_id.is_empty() {
            return reply(INVALID_GROUP_ID);
        }
        let Some(mut group) = self.groups.remove(&request.group_id) else {
            return reply(UNKNOWN_MEMBER_ID);
        };
        let response = self.sync_group_in(now_ms, parked, &request, &mut group, fx);
        self.groups.insert(request.group_id.clone(), group);
        response.map(ResponseBody::SyncGroup)
    }

    /// SyncGroup on a classic group: a member that may not sync is refused; while the group
    /// completes its rebalance the member's sync is parked (the leader's completes it), and in
    /// a stable group the member gets its assignment at once.
    fn sync_group_in(
        &mut self,
        now_ms: i64,
        parked: Parked,
        request: &SyncGroupRequest,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) -> Option<SyncGroupResponse> {
        let version = parked.1;
        let reply = |code: i16| Some(sync_response(code, None, Bytes::new(), version));
        if let Some(code) = sync_error(group, request) {
            return reply(code);
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => reply(UNKNOWN_MEMBER_ID),
            GroupState::PreparingRebalance => reply(REBALANCE_IN_PROGRESS),
            GroupState::CompletingRebalance => {
                group.pending_sync.remove(&request.member_id);
                if let Some(m) = group.members.get_mut(&request.member_id) {
                    m.awaiting_sync = Some(parked);
                    m.heartbeat_deadline =
                        Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
                }
                if group.is_leader(&request.member_id) {
                    self.complete_rebalance(now_ms, version, request, group, fx);
                }
                None
            }
            GroupState::Stable => {
                group.pending_sync.remove(&request.member_id);
                let assignment = match group.members.get_mut(&request.member_id) {
                    Some(m) => {
                        m.heartbeat_deadline =
                            Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
                        m.assignment.clone()
                    }
                    None => Bytes::new(),
                };
                Some(sync_response(NONE, Some(group), assignment, version))
            }
        }
    }

    /// The leader's SyncGroup ends the rebalance: every member takes the assignment the leader
    /// gave it (members it left out an empty one), the group is persisted (a group whose record
    /// cannot be written rebalances again instead), every parked SyncGroup is answered and the
    /// group is stable.
    fn complete_rebalance(
        &mut self,
        now_ms: i64,
        version: i16,
        request: &SyncGroupRequest,
        group: &mut ClassicGroup,
        fx: &mut Effects,
    ) {
        let assignments: BTreeMap<&str, &Bytes> = request
            .assignments
            .iter()
            .map(|a| (a.member_id.as_str(), &a.assignment))
            .collect();
        for m in group.members.values_mut() {
            m.assignment = assignments
                .get(m.member_id.as_str())
                .map(|b| (*b).clone())
                .unwrap_or_default();
        }
        match group_metadata_record(group) {
            Ok(record) => fx.records.push(record),
            Err(_) => {
                self.prepare_rebalance(now_ms, group, fx);
                return;
            }
        }
        propagate_assignment(now_ms, group, fx);
        group.transition(GroupState::Stable, now_ms);
        // Fill in protocol type/name for v5+ now that the group is stable.
        for (_, response) in fx.responses.iter_mut() {
            if let ResponseBody::SyncGroup(r) = response {
                if r.error_code == NONE && r.protocol_type.is_none() && version >= 5 {
                    r.protocol_type = group.protocol_type.clone();
                    r.protocol_name = group.protocol_name.clone();
                }
            }
        }
    }

    fn heartbeat(
        &mut self,
        now_ms: i64,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        _fx: &mut Effects,
    ) -> i16 {
        if group_id.is_empty() {
            return INVALID_GROUP_ID;
        }
        let Some(group) = self.groups.get_mut(group_id) else {
            return UNKNOWN_MEMBER_ID;
        };
        if group.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if let Some(code) = group.validate_member(member_id, instance_id) {
            return code;
        }
        if generation_id != group.generation_id {
            return ILLEGAL_GENERATION;
        }
        if group.state == GroupState::Empty {
            return UNKNOWN_MEMBER_ID;
        }
        if let Some(m) = group.members.get_mut(member_id) {
            m.heartbeat_deadline = Some(now_ms.saturating_add(i64::from(m.session_timeout_ms)));
        }
        if group.state == GroupState::PreparingRebalance {
            REBALANCE_IN_PROGRESS
        } else {
            NONE
        }
    }

    fn leave_group(
        &mut self,
        now_ms: i64,
        version: i16,
        request: LeaveGroupRequest,
        fx: &mut Effects,
    ) -> ResponseBody {
        let identities: Vec<(String, Option<String>)> = if version >= 3 {
            request
                .members
                .iter()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
                .collect()
        } else {
            vec![(request.member_id.clone(), None)]
        };
        let top = |code: i16| {
            ResponseBody::LeaveGroup(LeaveGroupResponse {
                error_code: code,
                ..LeaveGroupResponse::default()
            })
        };
        if request.group_id.is_empty() {
            return top(INVALID_GROUP_ID);
        }
        let Some(mut group) = self.groups.remove(&request.group_id) else {
            return top(UNKNOWN_MEMBER_ID);
        };
        if group.state == GroupState::Dead {
            self.groups.insert(request.group_id.clone(), group);
            return top(COORDINATOR_NOT_AVAILABLE);
        }
        let mut results = Vec::new();
        for (member_id, instance_id) in identities {
            let code = match &instance_id {
                Some(instance) => match group.static_members.get(instance).cloned() {
                    None => UNKNOWN_MEMBER_ID,
                    Some(existing) if !member_id.is_empty() && existing != member_id => {
                        FENCED_INSTANCE_ID
                    }
                    Some(existing) => {
                        self.remove_member_and_update(now_ms, &mut group, &existing, fx);
                        NONE
                    }
                },
                None if group.pending_join.remove(&member_id).is_some() => {
                    if group.state == GroupState::PreparingRebalance
                        && group.previous_state != GroupState::Empty
                        && group.has_all_members_joined()
                    {
                        self.complete_join(now_ms, &mut group, fx);
                    }
                    NONE
                }
                None if group.members.contains_key(&member_id) => {
                    self.remove_member_and_update(now_ms, &mut group, &member_id, fx);
                    NONE
                }
                None => UNKNOWN_MEMBER_ID,
            };
            results.push(MemberResponse {
                member_id,
                group_instance_id: instance_id,
                error_code: code,
            });
        }
        self.groups.insert(request.group_id.clone(), group);
        if version >= 3 {
            ResponseBody::LeaveGroup(LeaveGroupResponse {
                error_code: NONE,
                members: results,
                ..LeaveGroupResponse::default()
            })
        } else {
            top(results.first().map_or(NONE, |r| r.error_code))
        }
    }

    // ----- offsets --------------------------------------------------------------------------

    fn offset_commit(
        &mut self,
        now_ms: i64,
        version: i16,
        request: OffsetCommitRequest,
        topics: &Topics,
        fx: &mut Effects,
    ) -> ResponseBody {
        let group_error = self.validate_offset_commit(version, &request, topics);
        let mut response = OffsetCommitResponse::default();
        let mut records = Vec::new();
        for t in &request.topics {
            let topic = topics.get(&t.name);
            let mut out = OffsetCommitResponseTopic {
                name: t.name.clone(),
                topic_id: t.topic_id,
                ..Default::default()
            };
            for p in &t.partitions {
                let metadata = p.committed_metadata.clone().unwrap_or_default();
                let code = if let Some(code) = group_error {
                    code
                } else if version >= OFFSET_COMMIT_TOPIC_IDS_FROM && t.name.is_empty() {
                    UNKNOWN_TOPIC_ID
                } else if !topic.is_some_and(|info| {
                    p.partition_index >= 0 && p.partition_index < info.partitions
                }) {
                    UNKNOWN_TOPIC_OR_PARTITION
                } else if metadata.len()
                    > usize::try_from(self.config.offset_metadata_max_bytes).unwrap_or(0)
                {
                    OFFSET_METADATA_TOO_LARGE
                } else {
                    let expire = (request.retention_time_ms >= 0 && (2..=4).contains(&version))
                        .then(|| now_ms.saturating_add(request.retention_time_ms));
                    let value = OffsetCommitValue {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata,
                        commit_timestamp: now_ms,
                        expire_timestamp: expire.unwrap_or(-1),
                    };
                    match offset_record(&request.group_id, &t.name, p.partition_index, Some(value))
                    {
                        Ok(record) => {
                            records.push(record);
                            NONE
                        }
                        Err(_) => INVALID_REQUEST,
                    }
                };
                out.partitions.push(OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: code,
                });
            }
            response.topics.push(out);
        }
        for record in records {
            // The shard's own records always decode.
            let _ = self.replay(&record);
            fx.records.push(record);
        }
        ResponseBody::OffsetCommit(response)
    }

    /// TxnOffsetCommit: offsets committed within a transaction stay pending — OffsetFetch
    /// asking for stable offsets is told UNSTABLE_OFFSET_COMMIT — until the producer's marker
    /// decides them. Its records are the producer's transactional batch (`Effects::transaction`).
    /// The broker has checked the producer's epoch and that the partition is in its transaction.
    fn txn_offset_commit(
        &mut self,
        now_ms: i64,
        version: i16,
        request: TxnOffsetCommitRequest,
        topics: &Topics,
        fx: &mut Effects,
    ) -> ResponseBody {
        debug_assert!(
            fx.records.is_empty(),
            "a transactional write mixed with others"
        );
        let group_error = self.validate_txn_offset_commit(&request, topics);
        let max_metadata = usize::try_from(self.config.offset_metadata_max_bytes).unwrap_or(0);
        let mut response = TxnOffsetCommitResponse::default();
        let mut records = Vec::new();
        for t in &request.topics {
            let mut out = TxnOffsetCommitResponseTopic {
                name: t.name.clone(),
                topic_id: t.topic_id,
                ..Default::default()
            };
            for p in &t.partitions {
                let metadata = p.committed_metadata.clone().unwrap_or_default();
                let code = if let Some(code) = group_error {
                    code
                } else if version >= TXN_OFFSET_COMMIT_TOPIC_IDS_FROM && t.name.is_empty() {
                    UNKNOWN_TOPIC_ID
                } else if metadata.len() > max_metadata {
                    OFFSET_METADATA_TOO_LARGE
                } else {
                    let value = OffsetCommitValue {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata,
                        commit_timestamp: now_ms,
                        expire_timestamp: -1,
                    };
                    match offset_record(&request.group_id, &t.name, p.partition_index, Some(value))
                    {
                        Ok(record) => {
                            records.push(record);
                            NONE
                        }
                        Err(_) => INVALID_REQUEST,
                    }
                };
                out.partitions.push(TxnOffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: code,
                });
            }
            response.topics.push(out);
        }
        for record in records {
            // The shard's own records always decode.
            let _ = self.apply(Some(request.producer_id), &record);
            fx.records.push(record);
        }
        if !fx.records.is_empty() {
            fx.transaction = Some(TxnProducer {
                producer_id: request.producer_id,
                producer_epoch: request.producer_epoch,
            });
        }
        ResponseBody::TxnOffsetCommit(response)
    }

    /// Kafka's checks of a TxnOffsetCommit's group: as an OffsetCommit's, except that a
    /// rebalance in progress does not refuse it and a stale member epoch is ILLEGAL_GENERATION.
    fn validate_txn_offset_commit(
        &self,
        request: &TxnOffsetCommitRequest,
        topics: &Topics,
    ) -> Option<i16> {
        if request.group_id.is_empty() {
            return Some(INVALID_GROUP_ID);
        }
        let generation = request.generation_id_or_member_epoch;
        if self.consumer.contains(&request.group_id) {
            let partitions = request.topics.iter().flat_map(|t| {
                let topic_id = topics.get(&t.name).map(|info| info.topic_id);
                t.partitions
                    .iter()
                    .map(move |p| (topic_id, p.partition_index))
            });
            return match self.consumer.validate_offset_commit(
                &request.group_id,
                &request.member_id,
                generation,
                partitions,
            ) {
                Ok(()) => None,
                Err(STALE_MEMBER_EPOCH) => Some(ILLEGAL_GENERATION),
                Err(code) => Some(code),
            };
        }
        let Some(group) = self.groups.get(&request.group_id) else {
            // A simple (group-less) consumer's offsets make the group.
            return (generation >= 0).then_some(ILLEGAL_GENERATION);
        };
        if group.state == GroupState::Dead {
            return Some(COORDINATOR_NOT_AVAILABLE);
        }
        if generation < 0 && group.state == GroupState::Empty {
            return None;
        }
        if generation >= 0 || !request.member_id.is_empty() || request.group_instance_id.is_some() {
            if let Some(code) =
                group.validate_member(&request.member_id, request.group_instance_id.as_deref())
            {
                return Some(code);
            }
            if generation != group.generation_id {
                return Some(ILLEGAL_GENERATION);
            }
        }
        None
    }

    fn validate_offset_commit(
        &mut self,
        version: i16,
        request: &OffsetCommitRequest,
        topics: &Topics,
    ) -> Option<i16> {
        if request.group_id.is_empty() {
            return Some(INVALID_GROUP_ID);
        }
        let generation = request.generation_id_or_member_epoch;
        if self.consumer.contains(&request.group_id) {
            let group_id = &request.group_id;
            let partitions = request.topics.iter().flat_map(|t| {
                let topic_id = topics.get(&t.name).map(|info| info.topic_id);
                t.partitions
                    .iter()
                    .map(move |p| (topic_id, p.partition_index))
            });
            let result = self.consumer.validate_offset_commit(
                group_id,
                &request.member_id,
                generation,
                partitions,
            );
            let by_admin = generation < 0 && self.consumer.is_empty(group_id);
            return match result {
                Err(code) if code == UNKNOWN_MEMBER_ID || code == GROUP_ID_NOT_FOUND => Some(code),
                // Consumer-protocol members must commit with OffsetCommit v9+.
                _ if version < 9 && !by_admin => Some(UNSUPPORTED_VERSION),
                Err(code) => Some(code),
                Ok(()) => None,
            };
        }
        let Some(group) = self.groups.get(&request.group_id) else {
            if generation < 0 {
                // A simple (group-less) consumer: the group comes into being with its offsets.
                return None;
            }
            return Some(if version >= 9 {
                GROUP_ID_NOT_FOUND
            } else {
                ILLEGAL_GENERATION
            });
        };
        if group.state == GroupState::Dead {
            return Some(COORDINATOR_NOT_AVAILABLE);
        }
        if generation < 0 && group.state == GroupState::Empty {
            return None;
        }
        if generation >= 0 || !request.member_id.is_empty() || request.group_instance_id.is_some() {
            if let Some(code) =
                group.validate_member(&request.member_id, request.group_instance_id.as_deref())
            {
                return Some(code);
            }
            if generation != group.generation_id {
                return Some(ILLEGAL_GENERATION);
            }
        } else if group.state != GroupState::Empty {
            return Some(UNKNOWN_MEMBER_ID);
        }
        if group.state == GroupState::CompletingRebalance {
            return Some(REBALANCE_IN_PROGRESS);
        }
        None
    }

    fn fetch_group(
        &self,
        group_id: &str,
        requested: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, FetchedPartitions<'_>)> {
        let offsets = self.offsets.get(group_id);
        match requested {
            Some(topics) => topics
                .into_iter()
                .map(|(name, partitions)| {
                    let parts = partitions
                        .into_iter()
                        .map(|p| (p, offsets.and_then(|o| o.get(&(name.clone(), p)))))
                        .collect();
                    (name, parts)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<&CommittedOffset>)>> =
                    BTreeMap::new();
                for ((topic, partition), committed) in offsets.into_iter().flatten() {
                    by_topic
                        .entry(topic.clone())
                        .or_default()
                        .push((*partition, Some(committed)));
                }
                by_topic.into_iter().collect()
            }
        }
    }

    /// One fetched partition as OffsetFetch answers it: (offset, leader epoch, metadata, error).
    /// Asked for stable offsets (read_committed consumers), a partition with an offset
    /// committed in a transaction not yet decided is UNSTABLE_OFFSET_COMMIT: the consumer asks
    /// again rather than start from an offset about to change.
    fn fetched(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
        committed: Option<&CommittedOffset>,
        require_stable: bool,
    ) -> (i64, i32, String, i16) {
        if require_stable && self.has_pending_offset(group_id, topic, partition) {
            return (-1, -1, String::new(), UNSTABLE_OFFSET_COMMIT);
        }
        match committed {
            Some(c) => (c.offset, c.leader_epoch, c.metadata.clone(), NONE),
            None => (-1, -1, String::new(), NONE),
        }
    }

    /// OffsetFetch: from v8 every group asked for is answered on its own; before, the one
    /// group's offsets make the response, an empty group id refused from v2.
    fn offset_fetch(
        &self,
        version: i16,
        request: OffsetFetchRequest,
        known: &Topics,
    ) -> ResponseBody {
        let require_stable = request.require_stable;
        if version >= 8 {
            return ResponseBody::OffsetFetch(OffsetFetchResponse {
                groups: request
                    .groups
                    .into_iter()
                    .map(|g| self.fetch_group_offsets(version, g, require_stable, known))
                    .collect(),
                ..OffsetFetchResponse::default()
            });
        }
        let mut response = OffsetFetchResponse::default();
        let topics = request.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        response.topics = self
            .fetch_group(&request.group_id, topics)
            .into_iter()
            .map(|(name, parts)| OffsetFetchResponseTopic {
                partitions: parts
                    .into_iter()
                    .map(|(p, c)| {
                        let (offset, epoch, metadata, error_code) =
                            self.fetched(&request.group_id, &name, p, c, require_stable);
                        OffsetFetchResponsePartition {
                            partition_index: p,
                            committed_offset: offset,
                            committed_leader_epoch: if version >= 5 { epoch } else { -1 },
                            metadata: Some(metadata),
                            error_code,
                        }
                    })
                    .collect(),
                name,
            })
            .collect();
        if request.group_id.is_empty() && version >= 2 {
            response.error_code = INVALID_GROUP_ID;
        }
        ResponseBody::OffsetFetch(response)
    }

    /// One group of an OffsetFetch v8+. A member that fails the group's validation learns
    /// nothing of the offsets; otherwise the group's offsets of the topics asked for (all of
    /// them when none are named). From v10 topics come by id: a topic asked for is answered
    /// with its id, an id not known is UNKNOWN_TOPIC_ID, and a fetch of all offsets leaves out
    /// topics that no longer exist (they have no id to name them by).
    fn fetch_group_offsets(
        &self,
        version: i16,
        group: OffsetFetchRequestGroup,
        require_stable: bool,
        known: &Topics,
    ) -> OffsetFetchResponseGroup {
        let error_code = self.offset_fetch_group_error(&group);
        if error_code != NONE && error_code != INVALID_GROUP_ID {
            return OffsetFetchResponseGroup {
                group_id: group.group_id,
                topics: Vec::new(),
                error_code,
            };
        }
        let by_id = version >= OFFSET_FETCH_TOPIC_IDS_FROM;
        let requested = requested_topics(by_id, group.topics);
        let mut topics: Vec<OffsetFetchResponseTopics> = self
            .fetch_group(&group.group_id, requested.names)
            .into_iter()
            .filter_map(|(name, parts)| {
                let topic_id = match requested.ids.get(&name) {
                    Some(id) => *id,
                    None if by_id => known.get(&name)?.topic_id,
                    None => Default::default(),
                };
                let partitions = parts
                    .into_iter()
                    .map(|(p, c)| {
                        let (offset, epoch, metadata, error_code) =
                            self.fetched(&group.group_id, &name, p, c, require_stable);
                        OffsetFetchResponsePartitions {
                            partition_index: p,
                            committed_offset: offset,
                            committed_leader_epoch: epoch,
                            metadata: Some(metadata),
                            error_code,
                        }
                    })
                    .collect();
                Some(OffsetFetchResponseTopics {
                    name,
                    topic_id,
                    partitions,
                })
            })
            .collect();
        topics.extend(requested.unknown);
        OffsetFetchResponseGroup {
            group_id: group.group_id,
            topics,
            error_code,
        }
    }

    /// A group's error in OffsetFetch v8+: INVALID_GROUP_ID for an empty group id, and for a
    /// KIP-848 consumer group whatever its member validation says (a member named must exist
    /// with that epoch).
    fn offset_fetch_group_error(&self, group: &OffsetFetchRequestGroup) -> i16 {
        if group.group_id.is_empty() {
            INVALID_GROUP_ID
        } else if self.consumer.contains(&group.group_id) {
            match self.consumer.validate_offset_fetch(
                &group.group_id,
                group.member_id.as_deref(),
                group.member_epoch,
            ) {
                Ok(()) => NONE,
                Err(code) => code,
            }
        } else {
            NONE
        }
    }

    fn offset_delete(&mut self, request: OffsetDeleteRequest, fx: &mut Effects) -> ResponseBody {
        let top = |code: i16| {
            ResponseBody::OffsetDelete(OffsetDeleteResponse {
                error_code: code,
                ..Default::default()
            })
        };
        if request.group_id.is_empty() {
            return top(INVALID_GROUP_ID);
        }
        // Per requested topic: whether the group still consumes it.
        let in_use: Vec<bool> = if self.consumer.contains(&request.group_id) {
            request
                .topics
                .iter()
                .map(|t| {
                    self.consumer
                        .is_subscribed_to_topic(&request.group_id, &t.name)
                })
                .collect()
        } else {
            let Some(group) = self.groups.get(&request.group_id) else {
                return top(GROUP_ID_NOT_FOUND);
            };
            if group.state == GroupState::Dead {
                return top(GROUP_ID_NOT_FOUND);
            }
            let active = group.state != GroupState::Empty;
            if active && group.protocol_type.as_deref() != Some("consumer") {
                return top(NON_EMPTY_GROUP);
            }
            let subscribed = if active {
                group.subscribed_topics()
            } else {
                Some(Default::default())
            };
            request
                .topics
                .iter()
                // Unknown subscriptions count as subscribed to everything, to be safe.
                .map(|t| subscribed.as_ref().is_none_or(|s| s.contains(&t.name)))
                .collect()
        };
        let mut response = OffsetDeleteResponse::default();
        let mut records = Vec::new();
        for (t, &in_use) in request.topics.iter().zip(&in_use) {
            let mut out = OffsetDeleteResponseTopic {
                name: t.name.clone(),
                ..Default::default()
            };
            for p in &t.partitions {
                let code = if in_use {
                    GROUP_SUBSCRIBED_TO_TOPIC
                } else {
                    let exists = self
                        .offsets
                        .get(&request.group_id)
                        .is_some_and(|o| o.contains_key(&(t.name.clone(), p.partition_index)));
                    if exists {
                        if let Ok(record) =
                            offset_record(&request.group_id, &t.name, p.partition_index, None)
                        {
                            records.push(record);
                        }
                    }
                    NONE
                };
                out.partitions.push(OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: code,
                });
            }
            response.topics.push(out);
        }
        for record in records {
            let _ = self.replay(&record);
            fx.records.push(record);
        }
        ResponseBody::OffsetDelete(response)
    }

    /// Kafka's retention for consumer groups: offsets of topics no member follows expire by
    /// commit time; an empty group whose offsets are all gone is deleted.
    fn expire_consumer_group_offsets(&mut self, now_ms: i64, fx: &mut Effects) {
        let retention = self.config.offsets_retention_ms();
        let ids: Vec<String> = self.consumer.list().into_iter().map(|(id, _)| id).collect();
        for id in ids {
            let committed: Vec<((String, i32), bool)> = self
                .offsets
                .get(&id)
                .into_iter()
                .flatten()
                .map(|(tp, c)| {
                    let expired = match c.expire_timestamp_ms {
                        Some(t) => now_ms >= t,
                        None => now_ms.saturating_sub(c.commit_timestamp_ms) >= retention,
                    };
                    (tp.clone(), expired)
                })
                .collect();
            let mut all_expired = true;
            for ((topic, partition), expired) in committed {
                // An offset a transaction is about to replace stays until it is decided.
                if !expired
                    || self.consumer.is_subscribed_to_topic(&id, &topic)
                    || self.has_pending_offset(&id, &topic, partition)
                {
                    all_expired = false;
                    continue;
                }
                if let Ok(record) = offset_record(&id, &topic, partition, None) {
                    let _ = self.replay(&record);
                    fx.records.push(record);
                }
            }
            if all_expired && self.consumer.is_empty(&id) && !self.has_open_transaction(&id) {
                if let Ok(tombstones) = self.consumer.delete_group(&id) {
                    fx.records.extend(tombstones);
                }
            }
        }
    }

    fn expire_offsets(&mut self, now_ms: i64, fx: &mut Effects) {
        self.expire_consumer_group_offsets(now_ms, fx);
        let retention = self.config.offsets_retention_ms();
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            let Some(group) = self.groups.get(&id) else {
                continue;
            };
            if group.state != GroupState::Empty {
                continue;
            }
            let base = group.current_state_timestamp;
            let mut records = Vec::new();
            for ((topic, partition), c) in self.offsets.get(&id).into_iter().flatten() {
                if self.has_pending_offset(&id, topic, *partition) {
                    continue;
                }
                let expired = match c.expire_timestamp_ms {
                    Some(t) => now_ms >= t,
                    None => {
                        now_ms.saturating_sub(base.unwrap_or(c.commit_timestamp_ms)) >= retention
                    }
                };
                if expired {
                    if let Ok(record) = offset_record(&id, topic, *partition, None) {
                        records.push(record);
                    }
                }
            }
            for record in records {
                let _ = self.replay(&record);
                fx.records.push(record);
            }
            let no_offsets = !self.offsets.contains_key(&id);
            let empty = self.groups.get(&id).is_some_and(|g| {
                g.state == GroupState::Empty && g.members.is_empty() && g.pending_join.is_empty()
            });
            if no_offsets && empty && !self.has_open_transaction(&id) {
                self.groups.remove(&id);
                if let Ok(record) = records::encode(
                    &RecordKey::GroupMetadata(GroupMetadataKey { group: id.clone() }),
                    None,
                ) {
                    fx.records.push(record);
                }
            }
        }
    }

    // ----- listing, describing, deleting ----------------------------------------------------

    fn list_groups(&self, states: &[String], types: &[String]) -> ResponseBody {
        let classic = self
            .groups
            .values()
            .filter(|g| {
                g.state != GroupState::Dead && listed(states, types, g.state.as_str(), "classic")
            })
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                group_state: g.state.as_str().to_string(),
                group_type: "classic".to_string(),
            });
        let consumer = self
            .consumer
            .list()
            .into_iter()
            .filter(|(_, state)| listed(states, types, state, "consumer"))
            .map(|(group_id, state)| ListedGroup {
                group_id,
                protocol_type: "consumer".to_string(),
                group_state: state.to_string(),
                group_type: "consumer".to_string(),
            });
        let share = self
            .share
            .summaries()
            .into_iter()
            .filter(|(_, state, _)| listed(states, types, state, "share"))
            .map(|(group_id, state, _)| ListedGroup {
                group_id,
                protocol_type: "share".to_string(),
                group_state: state.to_string(),
                group_type: "share".to_string(),
            });
        let mut groups: Vec<ListedGroup> = classic.chain(consumer).chain(share).collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        ResponseBody::ListGroups(ListGroupsResponse {
            groups,
            ..Default::default()
        })
    }

    /// DescribeGroups' answer for a group id that names no live classic group (`consumer`: it
    /// names a KIP-848 group).
    fn not_a_classic_group(&self, version: i16, id: &str, consumer: bool) -> DescribedGroup {
        let (error_code, error_message) = if version >= DESCRIBE_GROUPS_NOT_FOUND_FROM {
            let message = if consumer {
                format!("Group {id} is not a classic group.")
            } else {
                format!("Group {id} not found.")
            };
            (GROUP_ID_NOT_FOUND, Some(message))
        } else {
            (NONE, None)
        };
        DescribedGroup {
            error_code,
            error_message,
            group_id: id.to_string(),
            group_state: GroupState::Dead.as_str().to_string(),
            ..Default::default()
        }
    }

    fn describe_groups(&self, version: i16, ids: &[String]) -> ResponseBody {
        let groups = ids
            .iter()
            .map(|id| match self.groups.get(id) {
                None if id.is_empty() => DescribedGroup {
                    error_code: INVALID_GROUP_ID,
                    group_id: id.clone(),
                    group_state: GroupState::Dead.as_str().to_string(),
                    ..Default::default()
                },
                // From v6 (KIP-1043) a group that is not a live classic group is refused
                // GROUP_ID_NOT_FOUND, as Kafka's coordinator does; before, it is described dead.
                None => self.not_a_classic_group(
                    version,
                    id,
                    self.consumer.contains(id) || self.share.contains(id),
                ),
                Some(g) if g.state == GroupState::Dead => {
                    self.not_a_classic_group(version, id, false)
                }
                Some(g) => {
                    let stable = g.state == GroupState::Stable;
                    let protocol = g.protocol_name.clone().unwrap_or_default();
                    DescribedGroup {
                        error_code: NONE,
                        group_id: id.clone(),
                        group_state: g.state.as_str().to_string(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        protocol_data: if stable {
                            protocol.clone()
                        } else {
                            String::new()
                        },
                        members: g
                            .members
                            .values()
                            .map(|m| DescribedGroupMember {
                                member_id: m.member_id.clone(),
                                group_instance_id: if version >= 4 {
                                    m.group_instance_id.clone()
                                } else {
                                    None
                                },
                                client_id: m.client_id.clone(),
                                client_host: m.client_host.clone(),
                                member_metadata: if stable {
                                    m.metadata(&protocol).cloned().unwrap_or_default()
                                } else {
                                    Bytes::new()
                                },
                                member_assignment: if stable {
                                    m.assignment.clone()
                                } else {
                                    Bytes::new()
                                },
                            })
                            .collect(),
                        ..Default::default()
                    }
                }
            })
            .collect();
        ResponseBody::DescribeGroups(DescribeGroupsResponse {
            groups,
            ..Default::default()
        })
    }

    /// Deletes an empty consumer group: its offsets' tombstones, then the group's.
    /// Tombstones for every offset of a group being deleted: committed, and pending in open
    /// transactions (their commit then finds nothing to make committed).
    fn delete_all_offsets(&mut self, group_id: &str, fx: &mut Effects) {
        let partitions: BTreeSet<(String, i32)> = std::iter::once(&self.offsets)
            .chain(self.pending.values())
            .filter_map(|offsets| offsets.get(group_id))
            .flat_map(|o| o.keys().cloned())
            .collect();
        for (topic, partition) in partitions {
            if let Ok(record) = offset_record(group_id, &topic, partition, None) {
                let _ = self.replay(&record);
                fx.records.push(record);
            }
        }
    }

    fn delete_consumer_group(&mut self, group_id: &str, fx: &mut Effects) -> i16 {
        let group_records = match self.consumer.delete_group(group_id) {
            Ok(records) => records,
            Err(code) => return code,
        };
        self.delete_all_offsets(group_id, fx);
        // Already applied by `delete_group`.
        fx.records.extend(group_records);
        NONE
    }

    fn delete_groups(&mut self, _now_ms: i64, ids: &[String], fx: &mut Effects) -> ResponseBody {
        let mut results = Vec::new();
        for id in ids {
            let code = match self.groups.get(id) {
                _ if id.is_empty() => INVALID_GROUP_ID,
                None if self.consumer.contains(id) => self.delete_consumer_group(id, fx),
                None if self.share.contains(id) => match self.share.delete_group(id) {
                    // Already applied by `delete_group`.
                    Ok(records) => {
                        fx.records.extend(records);
                        NONE
                    }
                    Err(code) => code,
                },
                None => GROUP_ID_NOT_FOUND,
                Some(g) if g.state == GroupState::Dead => GROUP_ID_NOT_FOUND,
                Some(g) if g.state != GroupState::Empty || !g.pending_join.is_empty() => {
                    NON_EMPTY_GROUP
                }
                Some(_) => {
                    self.delete_all_offsets(id, fx);
                    if let Ok(record) = records::encode(
                        &RecordKey::GroupMetadata(GroupMetadataKey { group: id.clone() }),
                        None,
                    ) {
                        let _ = self.replay(&record);
                        fx.records.push(record);
                    }
                    NONE
                }
            };
            results.push(DeletableGroupResult {
                group_id: id.clone(),
                error_code: code,
                error_message: None,
            });
        }
        ResponseBody::DeleteGroups(DeleteGroupsResponse {
            results,
            ..Default::default()
        })
    }
}

/// An offset's `__consumer_offsets` record: its value, or its tombstone with `None`.
fn offset_record(
    group_id: &str,
    topic: &str,
    partition: i32,
    value: Option<OffsetCommitValue>,
) -> Result<CoordinatorRecord, GroupError> {
    let key = RecordKey::OffsetCommit(OffsetCommitKey {
        group: group_id.to_string(),
        topic: topic.to_string(),
        partition,
    });
    records::encode(&key, value.map(RecordValue::OffsetCommit).as_ref())
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The GroupMetadata record for a group's current generation (empty groups included).
fn group_metadata_record(group: &ClassicGroup) -> Result<CoordinatorRecord, GroupError> {
    let protocol = group.protocol_name.clone();
    let members = group
        .members
        .values()
        .map(|m| MemberMetadata {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout: m.rebalance_timeout_ms,
            session_timeout: m.session_timeout_ms,
            subscription: protocol
                .as_deref()
                .and_then(|p| m.metadata(p))
                .cloned()
                .unwrap_or_default(),
            assignment: m.assignment.clone(),
        })
        .collect();
    let value = GroupMetadataValue {
        protocol_type: if group.members.is_empty() {
            String::new()
        } else {
            group.protocol_type.clone().unwrap_or_default()
        },
        generation: group.generation_id,
        protocol,
        leader: group.leader_id.clone(),
        current_state_timestamp: group.current_state_timestamp.unwrap_or(-1),
        members,
    };
    records::encode(
        &RecordKey::GroupMetadata(GroupMetadataKey {
            group: group.group_id.clone(),
        }),
        Some(&RecordValue::GroupMetadata(value)),
    )
}

/// A group as loaded from its last GroupMetadata record: Empty without members, otherwise
/// Stable with the recorded assignment. Session timers start at the first call after loading.
fn group_from_record(group_id: &str, v: GroupMetadataValue) -> ClassicGroup {
    let mut group = ClassicGroup::new(group_id);
    group.generation_id = v.generation;
    group.current_state_timestamp =
        (v.current_state_timestamp >= 0).then_some(v.current_state_timestamp);
    let protocol = v.protocol.clone().unwrap_or_default();
    for m in v.members {
        if let Some(instance) = &m.group_instance_id {
            group
                .static_members
                .insert(instance.clone(), m.member_id.clone());
        }
        group.members.insert(
            m.member_id.clone(),
            Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: if m.rebalance_timeout < 0 {
                    m.session_timeout
                } else {
                    m.rebalance_timeout
                },
                session_timeout_ms: m.session_timeout,
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                heartbeat_deadline: None,
            },
        );
    }
    if !group.members.is_empty() {
        group.state = GroupState::Stable;
        group.protocol_type = Some(v.protocol_type);
        group.protocol_name = v.protocol;
        group.leader_id = v
            .leader
            .filter(|l| group.members.contains_key(l))
            .or_else(|| group.members.keys().next().cloned());
    }
    group
}

/// The topics one group of an OffsetFetch v8+ asks for.
struct RequestedTopics {
    /// By name, with their partitions, as `fetch_group` takes them; None asks for all.
    names: Option<Vec<(String, Vec<i32>)>>,
    /// The id each topic named was asked by.
    ids: BTreeMap<String, fjord_common::TopicId>,
    /// Topics asked for by an id this broker does not know (it left their names empty),
    /// already answered UNKNOWN_TOPIC_ID.
    unknown: Vec<OffsetFetchResponseTopics>,
}

/// Sorts the topics of one OffsetFetch v8+ group into those to fetch and, when they come by id
/// (`by_id`, v10+), those whose id is not known.
fn requested_topics(by_id: bool, topics: Option<Vec<OffsetFetchRequestTopics>>) -> RequestedTopics {
    let mut ids = BTreeMap::new();
    let mut unknown = Vec::new();
    let names = topics.map(|ts| {
        ts.into_iter()
            .filter_map(|t| {
                if by_id && t.name.is_empty() {
                    unknown.push(unknown_topic_id(t.topic_id, &t.partition_indexes));
                    return None;
                }
                ids.insert(t.name.clone(), t.topic_id);
                Some((t.name, t.partition_indexes))
            })
            .collect()
    });
    RequestedTopics {
        names,
        ids,
        unknown,
    }
}

/// An OffsetFetch v10+ answer for a topic id the broker does not know.
fn unknown_topic_id(
    topic_id: fjord_common::TopicId,
    partitions: &[i32],
) -> OffsetFetchResponseTopics {
    OffsetFetchResponseTopics {
        name: String::new(),
        topic_id,
        partitions: partitions
            .iter()
            .map(|&partition_index| OffsetFetchResponsePartitions {
                partition_index,
                committed_offset: -1,
                committed_leader_epoch: -1,
                metadata: Some(String::new()),
                error_code: UNKNOWN_TOPIC_ID,
            })
            .collect(),
    }
}
