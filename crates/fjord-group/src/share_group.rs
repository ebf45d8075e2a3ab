//! Share groups (KIP-932) on the group coordinator: membership by ShareGroupHeartbeat, the
//! simple assignor, and ShareGroupDescribe, kept in `__consumer_offsets` as Kafka 4.4 keeps them
//! (record types 10 to 14).
//!
//! A share group has no revocation step: a member takes its target assignment at once, its epoch
//! jumping to the assignment epoch, and a partition may be assigned to several members — its
//! records are shared out by the partition's leader, not by the coordinator. The member id is the
//! client's own (KIP-1082). The group epoch moves when a member joins, leaves or changes its
//! subscription, or when a subscribed topic's partitions change; the target assignment is then
//! computed again on the next heartbeat. Only partitions whose share-partition state the share
//! coordinator has initialized are assigned (`initialization`, record type 15).

use std::collections::{BTreeMap, BTreeSet};

use fjord_common::errors::*;
use fjord_protocol::messages::share_group_describe_response as describe;
use fjord_protocol::messages::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use fjord_protocol::messages::share_group_heartbeat_response::{
    Assignment as WireAssignment, ShareGroupHeartbeatResponse, TopicPartitions as WireTopic,
};

use crate::assignor::{Assignment, TopicId};
use crate::records::{self, *};
use crate::{ClientInfo, CoordinatorRecord, Topics};

mod initialization;

use initialization::StatePartitions;
pub use initialization::{ShareInit, INITIALIZE_RETRY_MS};

type Rec = (RecordKey, Option<RecordValue>);

/// The longest member id a client may choose (a UUID's string form).
const MAX_MEMBER_ID_LENGTH: usize = 36;

/// A share group's session timeout and heartbeat interval: its own configs, else the broker's
/// defaults, as the broker resolved them for a ShareGroupHeartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupTimeouts {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
}

impl Default for ShareGroupTimeouts {
    fn default() -> Self {
        ShareGroupTimeouts {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Member {
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    /// Sorted and without duplicates.
    subscribed: Vec<String>,
    epoch: i32,
    previous_epoch: i32,
    assigned: Assignment,
}

#[derive(Debug, Clone, Default)]
struct Group {
    epoch: i32,
    metadata_hash: i64,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    target: BTreeMap<String, Assignment>,
    /// Which partitions have share-partition state.
    state: StatePartitions,
}

impl Group {
    fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }
}

/// The share groups of one coordinator shard.
#[derive(Debug, Clone, Default)]
pub struct ShareGroups {
    groups: BTreeMap<String, Group>,
    /// Each member's session deadline, by (group, member).
    deadlines: BTreeMap<(String, String), i64>,
    /// Members loaded from the log have no deadline until the first call that knows the time.
    unarmed: bool,
    /// Target assignments computed since the last [`ShareGroups::take_rebalances`].
    rebalances: u64,
}

impl ShareGroups {
    pub fn contains(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// Every group with its state ("Empty" or "Stable") and member count.
    pub fn summaries(&self) -> Vec<(String, &'static str, usize)> {
        self.groups
            .iter()
            .map(|(id, g)| (id.clone(), g.state(), g.members.len()))
            .collect()
    }

    pub fn take_rebalances(&mut self) -> u64 {
        std::mem::take(&mut self.rebalances)
    }

    /// ShareGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1). `max_size` is
    /// `group.share.max.size`. Share-partition state to initialize goes to `inits_out`, for
    /// the broker to ask of the share coordinator once the records are written.
    #[allow(clippy::too_many_arguments)]
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        request: &ShareGroupHeartbeatRequest,
        topics: &Topics,
        client: &ClientInfo,
        max_size: usize,
        records_out: &mut Vec<CoordinatorRecord>,
        inits_out: &mut Vec<ShareInit>,
    ) -> ShareGroupHeartbeatResponse {
        self.arm(now_ms, client.share_group.session_timeout_ms);
        let mut out = Vec::new();
        let result = self.beat(
            now_ms, request, topics, client, max_size, &mut out, inits_out,
        );
        records_out.extend(encode_all(&out));
        match result {
            Ok(response) => response,
            Err((error_code, message)) => ShareGroupHeartbeatResponse {
                error_code,
                error_message: Some(message),
                ..Default::default()
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn beat(
        &mut self,
        now_ms: i64,
        request: &ShareGroupHeartbeatRequest,
        topics: &Topics,
        client: &ClientInfo,
        max_size: usize,
        out: &mut Vec<Rec>,
        inits: &mut Vec<ShareInit>,
    ) -> Result<ShareGroupHeartbeatResponse, (i16, String)> {
        validate(request)?;
        self.check_member(request)?;
        let (group_id, member_id) = (&request.group_id, &request.member_id);
        let timeouts = client.share_group;
        if request.member_epoch == -1 {
            self.remove_member(group_id, member_id, out);
            return Ok(ShareGroupHeartbeatResponse {
                member_id: Some(member_id.clone()),
                member_epoch: -1,
                heartbeat_interval_ms: timeouts.heartbeat_interval_ms,
                ..Default::default()
            });
        }
        let group = self.groups.entry(group_id.clone()).or_default();
        if !group.members.contains_key(member_id) && group.members.len() >= max_size {
            return Err((
                GROUP_MAX_SIZE_REACHED,
                format!("The share group has reached its maximum capacity of {max_size} members."),
            ));
        }
        let subscription_changed = update_member(group_id, group, request, client, out);
        let hash = metadata_hash(group, topics);
        let subscribed: BTreeSet<String> = group
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect();
        // Partitions initialized since the last assignment are assigned now.
        let initialized_since = group.assignment_epoch >= group.epoch
            && group
                .state
                .assignment_pending(&subscribed, topics, |id| targeted(group, id));
        if subscription_changed || hash != group.metadata_hash || initialized_since {
            group.epoch += 1;
            group.metadata_hash = hash;
            out.push(group_epoch_record(group_id, Some((group.epoch, hash))));
        }
        let wanted = group.state.plan(&subscribed, topics, now_ms);
        if !wanted.is_empty() {
            out.push(state_partitions_record(group_id, Some(&group.state)));
            inits.push(ShareInit {
                group_id: group_id.clone(),
                state_epoch: group.epoch,
                topics: wanted,
            });
        }
        if group.epoch > group.assignment_epoch {
            compute_target(group_id, group, topics, now_ms, out);
            self.rebalances += 1;
        }
        let assignment_changed = reconcile(
            group_id,
            member_id,
            group,
            topics,
            subscription_changed,
            out,
        );
        let assigned = group
            .members
            .get(member_id)
            .map(|m| (m.epoch, wire_assignment(&m.assigned)));
        let (member_epoch, assignment) = assigned.ok_or((UNKNOWN_SERVER_ERROR, String::new()))?;
        self.deadlines.insert(
            (group_id.clone(), member_id.clone()),
            now_ms.saturating_add(i64::from(timeouts.session_timeout_ms)),
        );
        let full = request.member_epoch == 0 || request.subscribed_topic_names.is_some();
        Ok(ShareGroupHeartbeatResponse {
            member_id: Some(member_id.clone()),
            member_epoch,
            heartbeat_interval_ms: timeouts.heartbeat_interval_ms,
            assignment: (full || assignment_changed).then_some(assignment),
            ..Default::default()
        })
    }

    /// A heartbeat other than a join names a group and member this shard has, at the member's
    /// epoch or the one before (a retry after a lost answer); a leave names a known member.
    fn check_member(&self, request: &ShareGroupHeartbeatRequest) -> Result<(), (i16, String)> {
        let (group_id, member_id, epoch) =
            (&request.group_id, &request.member_id, request.member_epoch);
        if epoch == 0 {
            return Ok(());
        }
        let unknown = || {
            (
                UNKNOWN_MEMBER_ID,
                format!("Member {member_id} is not in group {group_id}."),
            )
        };
        let Some(group) = self.groups.get(group_id) else {
            return Err(match epoch {
                -1 => unknown(),
                _ => (GROUP_ID_NOT_FOUND, format!("Group {group_id} not found.")),
            });
        };
        let member = group.members.get(member_id).ok_or_else(unknown)?;
        let fenced =
            epoch > member.epoch || (epoch < member.epoch && epoch != member.previous_epoch);
        if epoch != -1 && fenced {
            return Err((
                FENCED_MEMBER_EPOCH,
                format!(
                    "The share group member has a member epoch {epoch} that does not match the current {}.",
                    member.epoch
                ),
            ));
        }
        Ok(())
    }

    /// Removes a member (it left or its session expired): its records tombstoned and the group
    /// epoch moved on; the last member out also moves the assignment epoch.
    fn remove_member(&mut self, group_id: &str, member_id: &str, out: &mut Vec<Rec>) {
        self.deadlines
            .remove(&(group_id.to_string(), member_id.to_string()));
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.members.remove(member_id).is_none() {
            return;
        }
        group.target.remove(member_id);
        out.push(current_record(group_id, member_id, None));
        out.push(target_member_record(group_id, member_id, None));
        out.push(member_record(group_id, member_id, None));
        group.epoch += 1;
        out.push(group_epoch_record(
            group_id,
            Some((group.epoch, group.metadata_hash)),
        ));
        if group.members.is_empty() {
            group.assignment_epoch = group.epoch;
            out.push(target_epoch_record(group_id, Some(group.epoch)));
        }
    }

    /// The broker's word on share-partition state it was asked to initialize: the partitions
    /// initialized (assigned from the group's next heartbeat), or, after a failure, asked for
    /// again by a heartbeat once the retry interval has passed. The record that says so.
    pub fn initialized(
        &mut self,
        group_id: &str,
        topics: &[(TopicId, Vec<i32>)],
        success: bool,
    ) -> Vec<CoordinatorRecord> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Vec::new();
        };
        if !group.state.finish(topics, success) {
            return Vec::new();
        }
        encode_all(&[state_partitions_record(group_id, Some(&group.state))])
    }

    /// Fences every member whose session expired by `now_ms`; the records that says.
    pub fn tick(&mut self, now_ms: i64) -> Vec<CoordinatorRecord> {
        let expired: Vec<(String, String)> = self
            .deadlines
            .iter()
            .filter(|(_, &deadline)| deadline <= now_ms)
            .map(|(key, _)| key.clone())
            .collect();
        let mut out = Vec::new();
        for (group_id, member_id) in expired {
            self.remove_member(&group_id, &member_id, &mut out);
        }
        encode_all(&out)
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.deadlines.values().min().copied()
    }

    /// Gives members loaded from the log a session from now on.
    fn arm(&mut self, now_ms: i64, session_timeout_ms: i32) {
        if !std::mem::take(&mut self.unarmed) {
            return;
        }
        for (group_id, group) in &self.groups {
            for member_id in group.members.keys() {
                self.deadlines
                    .entry((group_id.clone(), member_id.clone()))
                    .or_insert(now_ms.saturating_add(i64::from(session_timeout_ms)));
            }
        }
    }

    /// Arms loaded members' sessions with the default timeout when the shard first learns the
    /// time outside a heartbeat.
    pub fn on_loaded(&mut self, now_ms: i64) {
        self.arm(now_ms, ShareGroupTimeouts::default().session_timeout_ms);
    }

    /// DeleteGroups of a share group: refused while it has members, else its records
    /// tombstoned.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Vec<CoordinatorRecord>, i16> {
        let group = self.groups.get(group_id).ok_or(GROUP_ID_NOT_FOUND)?;
        if !group.members.is_empty() {
            return Err(NON_EMPTY_GROUP);
        }
        self.groups.remove(group_id);
        let out = [
            target_epoch_record(group_id, None),
            state_partitions_record(group_id, None),
            group_epoch_record(group_id, None),
        ];
        Ok(encode_all(&out))
    }

    /// ShareGroupDescribe of each id: the group, or GROUP_ID_NOT_FOUND (`other_type`: the id
    /// names a group of another type on this shard).
    pub fn describe(
        &self,
        group_ids: &[String],
        topics: &Topics,
        other_type: impl Fn(&str) -> bool,
    ) -> Vec<describe::DescribedGroup> {
        group_ids
            .iter()
            .map(|id| {
                let not_found = |message: String| describe::DescribedGroup {
                    error_code: GROUP_ID_NOT_FOUND,
                    error_message: Some(message),
                    group_id: id.clone(),
                    group_state: "Dead".to_string(),
                    ..Default::default()
                };
                if id.is_empty() {
                    return describe::DescribedGroup {
                        error_code: INVALID_GROUP_ID,
                        error_message: Some("The group id cannot be empty.".to_string()),
                        ..Default::default()
                    };
                }
                let Some(group) = self.groups.get(id) else {
                    return if other_type(id) {
                        not_found(format!("Group {id} is not a share group."))
                    } else {
                        not_found(format!("Group {id} not found."))
                    };
                };
                describe::DescribedGroup {
                    group_id: id.clone(),
                    group_state: group.state().to_string(),
                    group_epoch: group.epoch,
                    assignment_epoch: group.assignment_epoch,
                    assignor_name: "simple".to_string(),
                    members: group
                        .members
                        .iter()
                        .map(|(member_id, m)| describe::Member {
                            member_id: member_id.clone(),
                            rack_id: m.rack_id.clone(),
                            member_epoch: m.epoch,
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            subscribed_topic_names: m.subscribed.clone(),
                            assignment: describe::Assignment {
                                topic_partitions: m
                                    .assigned
                                    .iter()
                                    .filter_map(|(topic_id, partitions)| {
                                        Some(describe::TopicPartitions {
                                            topic_id: *topic_id,
                                            topic_name: topics.by_id(topic_id)?.name.clone(),
                                            partitions: partitions.iter().copied().collect(),
                                        })
                                    })
                                    .collect(),
                            },
                        })
                        .collect(),
                    authorized_operations: i32::MIN,
                    ..Default::default()
                }
            })
            .collect()
    }

    /// Applies one share group record read back from the log.
    pub fn replay(&mut self, key: &RecordKey, value: Option<&RecordValue>) {
        let group_id = key.group_id().to_string();
        if value.is_none() && matches!(key, RecordKey::ShareGroupMetadata(_)) {
            self.groups.remove(&group_id);
            self.deadlines.retain(|(g, _), _| *g != group_id);
            return;
        }
        if value.is_none() && !self.groups.contains_key(&group_id) {
            return;
        }
        let group = self.groups.entry(group_id.clone()).or_default();
        match (key, value) {
            (RecordKey::ShareGroupMetadata(_), Some(RecordValue::ShareGroupMetadata(v))) => {
                group.epoch = v.epoch;
                group.metadata_hash = v.metadata_hash;
            }
            (
                RecordKey::ShareGroupMemberMetadata(k),
                Some(RecordValue::ShareGroupMemberMetadata(v)),
            ) => {
                let member = group.members.entry(k.member_id.clone()).or_default();
                member.rack_id = v.rack_id.clone();
                member.client_id = v.client_id.clone();
                member.client_host = v.client_host.clone();
                member.subscribed = v.subscribed_topic_names.clone();
                self.unarmed = true;
            }
            (RecordKey::ShareGroupMemberMetadata(k), None) => {
                group.members.remove(&k.member_id);
                self.deadlines.remove(&(group_id, k.member_id.clone()));
            }
            (
                RecordKey::ShareGroupTargetAssignmentMetadata(_),
                Some(RecordValue::ShareGroupTargetAssignmentMetadata(v)),
            ) => {
                group.assignment_epoch = v.assignment_epoch;
            }
            (
                RecordKey::ShareGroupTargetAssignmentMember(k),
                Some(RecordValue::ShareGroupTargetAssignmentMember(v)),
            ) => {
                let assignment = v
                    .topic_partitions
                    .iter()
                    .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
                    .collect();
                group.target.insert(k.member_id.clone(), assignment);
            }
            (RecordKey::ShareGroupTargetAssignmentMember(k), None) => {
                group.target.remove(&k.member_id);
            }
            (
                RecordKey::ShareGroupCurrentMemberAssignment(k),
                Some(RecordValue::ShareGroupCurrentMemberAssignment(v)),
            ) => {
                let member = group.members.entry(k.member_id.clone()).or_default();
                member.epoch = v.member_epoch;
                member.previous_epoch = v.previous_member_epoch;
                member.assigned = v
                    .assigned_partitions
                    .iter()
                    .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
                    .collect();
            }
            (RecordKey::ShareGroupCurrentMemberAssignment(k), None) => {
                if let Some(member) = group.members.get_mut(&k.member_id) {
                    member.epoch = -1;
                    member.assigned.clear();
                }
            }
            (
                RecordKey::ShareGroupStatePartitionMetadata(_),
                Some(RecordValue::ShareGroupStatePartitionMetadata(v)),
            ) => {
                group.state = StatePartitions::from_record(v);
            }
            (RecordKey::ShareGroupStatePartitionMetadata(_), None) => {
                group.state = StatePartitions::default();
            }
            // The assignment epoch's tombstone comes with the group's.
            _ => {}
        }
    }
}

/// Updates (or adds) the heartbeating member: its rack, client and subscription, recorded when
/// they changed; whether its subscription changed (a new member's did).
fn update_member(
    group_id: &str,
    group: &mut Group,
    request: &ShareGroupHeartbeatRequest,
    client: &ClientInfo,
    out: &mut Vec<Rec>,
) -> bool {
    let member_id = &request.member_id;
    let before = group.members.get(member_id).cloned();
    let mut member = before.clone().unwrap_or_default();
    if let Some(rack) = &request.rack_id {
        member.rack_id = Some(rack.clone());
    }
    member.client_id = client.client_id.clone();
    member.client_host = client.client_host.clone();
    let mut subscription_changed = before.is_none();
    if let Some(names) = &request.subscribed_topic_names {
        let names: Vec<String> = names
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        subscription_changed |= names != member.subscribed;
        member.subscribed = names;
    }
    let described = |m: &Member| {
        (
            m.rack_id.clone(),
            m.client_id.clone(),
            m.client_host.clone(),
            m.subscribed.clone(),
        )
    };
    if before.as_ref().map(described) != Some(described(&member)) {
        out.push(member_record(group_id, member_id, Some(&member)));
    }
    group.members.insert(member_id.clone(), member);
    subscription_changed
}

/// Kafka's checks of a ShareGroupHeartbeat before it reaches the group.
fn validate(request: &ShareGroupHeartbeatRequest) -> Result<(), (i16, String)> {
    let invalid = |message: &str| Err((INVALID_REQUEST, message.to_string()));
    if request.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if request.member_id.is_empty() || request.member_id.chars().count() > MAX_MEMBER_ID_LENGTH {
        return invalid("Invalid member id in the request.");
    }
    if request.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if request.member_epoch < -1 {
        return invalid("MemberEpoch is invalid.");
    }
    if request.member_epoch == 0
        && request
            .subscribed_topic_names
            .as_ref()
            .is_none_or(Vec::is_empty)
    {
        return invalid("SubscribedTopicNames must be set in first request.");
    }
    Ok(())
}

/// A hash of the subscribed topics as they are: id, name and partition count, so a topic
/// created, deleted or grown moves the group epoch.
fn metadata_hash(group: &Group, topics: &Topics) -> i64 {
    let subscribed: BTreeSet<&String> =
        group.members.values().flat_map(|m| &m.subscribed).collect();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for b in bytes {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for name in subscribed {
        if let Some(topic) = topics.get(name) {
            mix(name.as_bytes());
            mix(&topic.topic_id.0);
            mix(&topic.partitions.to_be_bytes());
        }
    }
    hash as i64
}

/// Computes the target assignment of every member with the simple assignor and records the
/// members whose target changed and the new assignment epoch.
fn compute_target(
    group_id: &str,
    group: &mut Group,
    topics: &Topics,
    now_ms: i64,
    out: &mut Vec<Rec>,
) {
    let subscriptions: BTreeMap<String, Vec<String>> = group
        .members
        .iter()
        .map(|(id, m)| (id.clone(), m.subscribed.clone()))
        .collect();
    let target = simple_assign(
        &subscriptions,
        topics,
        &group.target,
        &group.state.assignable(),
    );
    for (member_id, assignment) in &target {
        if group.target.get(member_id) != Some(assignment) {
            out.push(target_member_record(group_id, member_id, Some(assignment)));
        }
    }
    group.target = target;
    group.assignment_epoch = group.epoch;
    out.push((
        RecordKey::ShareGroupTargetAssignmentMetadata(ShareGroupTargetAssignmentMetadataKey {
            group_id: group_id.to_string(),
        }),
        Some(RecordValue::ShareGroupTargetAssignmentMetadata(
            ShareGroupTargetAssignmentMetadataValue {
                assignment_epoch: group.epoch,
                assignment_timestamp: now_ms,
            },
        )),
    ));
}

/// Brings a member to the target assignment at once; whether its assignment changed.
fn reconcile(
    group_id: &str,
    member_id: &str,
    group: &mut Group,
    topics: &Topics,
    subscription_changed: bool,
    out: &mut Vec<Rec>,
) -> bool {
    let assignment_epoch = group.assignment_epoch;
    let target = group.target.get(member_id).cloned().unwrap_or_default();
    let Some(member) = group.members.get_mut(member_id) else {
        return false;
    };
    if member.epoch == assignment_epoch && !subscription_changed {
        return false;
    }
    let subscribed: BTreeSet<TopicId> = member
        .subscribed
        .iter()
        .filter_map(|name| topics.get(name).map(|t| t.topic_id))
        .collect();
    let assigned: Assignment = target
        .into_iter()
        .filter(|(topic_id, _)| subscribed.contains(topic_id))
        .collect();
    let changed = assigned != member.assigned;
    if member.epoch != assignment_epoch {
        member.previous_epoch = member.epoch;
        member.epoch = assignment_epoch;
    }
    member.assigned = assigned;
    out.push(current_record(group_id, member_id, Some(member)));
    changed
}

/// Kafka's simple share assignor. With every member subscribed to the same topics, the
/// partitions of all of them are one pool; otherwise each topic is its own pool among its
/// subscribers. In a pool of P partitions and N members each partition goes to at most
/// S = ceil(N / P) members and each member takes its share of the S·P places (shares differing
/// by at most one); what a member held before is kept where balance allows.
pub fn simple_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    topics: &Topics,
    previous: &BTreeMap<String, Assignment>,
    assignable: &BTreeMap<TopicId, BTreeSet<i32>>,
) -> BTreeMap<String, Assignment> {
    let mut result: BTreeMap<String, Assignment> = subscriptions
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    let mut subscribed: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (member, names) in subscriptions {
        for name in names {
            if topics.get(name).is_some() {
                subscribed.entry(name.as_str()).or_default().push(member);
            }
        }
    }
    let homogeneous = subscriptions
        .values()
        .all(|names| names.iter().filter(|n| topics.get(n).is_some()).count() == subscribed.len());
    let pools: Vec<(Vec<&String>, Vec<&str>)> = if homogeneous {
        vec![(
            subscriptions.keys().collect(),
            subscribed.keys().copied().collect(),
        )]
    } else {
        subscribed
            .iter()
            .map(|(topic, members)| (members.clone(), vec![*topic]))
            .collect()
    };
    for (members, pool_topics) in pools {
        let partitions: Vec<(TopicId, i32)> = pool_topics
            .iter()
            .filter_map(|name| topics.get(name))
            .flat_map(|t| {
                let ready = assignable.get(&t.topic_id);
                (0..t.partitions)
                    .filter(move |p| ready.is_some_and(|r| r.contains(p)))
                    .map(move |p| (t.topic_id, p))
            })
            .collect();
        for (member, taken) in assign_pool(&members, &partitions, previous) {
            let assignment = result.entry(member.clone()).or_default();
            for (topic_id, partition) in taken {
                assignment.entry(topic_id).or_default().insert(partition);
            }
        }
    }
    result
}

/// One pool of the simple assignor: members, the pool's partitions, and what each held.
fn assign_pool<'a>(
    members: &[&'a String],
    partitions: &[(TopicId, i32)],
    previous: &BTreeMap<String, Assignment>,
) -> Vec<(&'a String, BTreeSet<(TopicId, i32)>)> {
    let (n, p) = (members.len(), partitions.len());
    if n == 0 || p == 0 {
        return members.iter().map(|m| (*m, BTreeSet::new())).collect();
    }
    let sharing = n.div_ceil(p);
    let places = sharing * p;
    let quota = |i: usize| (places * (i + 1)).div_ceil(n) - (places * i).div_ceil(n);
    let in_pool: BTreeSet<(TopicId, i32)> = partitions.iter().copied().collect();
    let mut held: Vec<BTreeSet<(TopicId, i32)>> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let kept: BTreeSet<(TopicId, i32)> = previous
                .get(*m)
                .into_iter()
                .flat_map(|a| {
                    a.iter()
                        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                })
                .filter(|tp| in_pool.contains(tp))
                .collect();
            kept.into_iter().take(quota(i)).collect()
        })
        .collect();
    let mut holders: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
    for set in held.iter_mut() {
        set.retain(|tp| {
            let count = holders.entry(*tp).or_default();
            *count += 1;
            *count <= sharing
        });
    }
    let mut next = 0;
    for tp in partitions {
        let mut holding = held.iter().filter(|s| s.contains(tp)).count();
        let mut tried = 0;
        while holding < sharing && tried < n {
            let i = next % n;
            next += 1;
            tried += 1;
            if held[i].len() < quota(i) && !held[i].contains(tp) {
                held[i].insert(*tp);
                holding += 1;
                tried = 0;
            }
        }
    }
    members.iter().copied().zip(held).collect()
}

fn wire_assignment(assignment: &Assignment) -> WireAssignment {
    WireAssignment {
        topic_partitions: assignment
            .iter()
            .map(|(topic_id, partitions)| WireTopic {
                topic_id: *topic_id,
                partitions: partitions.iter().copied().collect(),
            })
            .collect(),
    }
}

/// The partitions of `topic_id` in the group's target assignment.
fn targeted(group: &Group, topic_id: &TopicId) -> BTreeSet<i32> {
    group
        .target
        .values()
        .filter_map(|a| a.get(topic_id))
        .flatten()
        .copied()
        .collect()
}

fn state_partitions_record(group_id: &str, state: Option<&StatePartitions>) -> Rec {
    (
        RecordKey::ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataKey {
            group_id: group_id.to_string(),
        }),
        state.map(|s| RecordValue::ShareGroupStatePartitionMetadata(s.to_record())),
    )
}

fn encode_all(recs: &[Rec]) -> Vec<CoordinatorRecord> {
    recs.iter()
        .filter_map(|(k, v)| records::encode(k, v.as_ref()).ok())
        .collect()
}

fn group_epoch_record(group_id: &str, epoch_and_hash: Option<(i32, i64)>) -> Rec {
    (
        RecordKey::ShareGroupMetadata(ShareGroupMetadataKey {
            group_id: group_id.to_string(),
        }),
        epoch_and_hash.map(|(epoch, metadata_hash)| {
            RecordValue::ShareGroupMetadata(ShareGroupMetadataValue {
                epoch,
                metadata_hash,
            })
        }),
    )
}

fn target_epoch_record(group_id: &str, epoch: Option<i32>) -> Rec {
    (
        RecordKey::ShareGroupTargetAssignmentMetadata(ShareGroupTargetAssignmentMetadataKey {
            group_id: group_id.to_string(),
        }),
        epoch.map(|assignment_epoch| {
            RecordValue::ShareGroupTargetAssignmentMetadata(
                ShareGroupTargetAssignmentMetadataValue {
                    assignment_epoch,
                    assignment_timestamp: 0,
                },
            )
        }),
    )
}

fn member_record(group_id: &str, member_id: &str, member: Option<&Member>) -> Rec {
    (
        RecordKey::ShareGroupMemberMetadata(ShareGroupMemberMetadataKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        member.map(|m| {
            RecordValue::ShareGroupMemberMetadata(ShareGroupMemberMetadataValue {
                rack_id: m.rack_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed.clone(),
            })
        }),
    )
}

fn target_member_record(group_id: &str, member_id: &str, assignment: Option<&Assignment>) -> Rec {
    (
        RecordKey::ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        assignment.map(|a| {
            RecordValue::ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberValue {
                topic_partitions: a
                    .iter()
                    .map(|(topic_id, partitions)| {
                        share_group_target_assignment_member_value::TopicPartition {
                            topic_id: *topic_id,
                            partitions: partitions.iter().copied().collect(),
                        }
                    })
                    .collect(),
            })
        }),
    )
}

fn current_record(group_id: &str, member_id: &str, member: Option<&Member>) -> Rec {
    (
        RecordKey::ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        member.map(|m| {
            RecordValue::ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue {
                member_epoch: m.epoch,
                previous_member_epoch: m.previous_epoch,
                state: 0,
                assigned_partitions: m
                    .assigned
                    .iter()
                    .map(|(topic_id, partitions)| {
                        share_group_current_member_assignment_value::TopicPartitions {
                            topic_id: *topic_id,
                            partitions: partitions.iter().copied().collect(),
                        }
                    })
                    .collect(),
            })
        }),
    )
}

#[cfg(test)]
mod tests;
