//! KIP-848 consumer groups of one coordinator shard: ConsumerGroupHeartbeat (join, leave,
//! subscription changes, server-side target assignment and per-member revoke-then-assign
//! reconciliation), ConsumerGroupDescribe, session and rebalance timeouts, and the
//! `__consumer_offsets` records that persist all of it.
//!
//! Every state change is made by applying a record: a handler validates first, then emits
//! records one at a time, each applied to the state as it is emitted. Replaying the same
//! records on load therefore rebuilds exactly the same groups. Timers are not persisted; a
//! loaded shard re-arms them with [`ConsumerGroups::on_loaded`].
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fjord_common::pattern::Regex;
use fjord_protocol::messages::consumer_group_describe_response::{
    self as describe, DescribedGroup,
};
use fjord_protocol::messages::consumer_group_heartbeat_request::{
    self as hb_request, ConsumerGroupHeartbeatRequest,
};
use fjord_protocol::messages::consumer_group_heartbeat_response::{
    self as hb_response, ConsumerGroupHeartbeatResponse,
};
use fjord_protocol::Uuid;

use crate::assignor::{Assignment, MemberSpec, ServerAssignor, TopicId};
use crate::records::{
    self, consumer_group_current_member_assignment_value as current_value,
    consumer_group_partition_metadata_value as partition_value,
    consumer_group_target_assignment_member_value as target_value,
    ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue, ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue, RecordKey, RecordValue,
};
use crate::{CoordinatorRecord, Topics};

use fjord_common::errors::*;

/// Member epoch of a member leaving the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// Member epoch of a static member leaving temporarily; it keeps its partitions until its
/// session expires or its instance id rejoins.
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// Record strings are i16-length-prefixed; longer ids could not be persisted.
const MAX_STRING_BYTES: usize = i16::MAX as usize;
/// Compiled regexes kept between heartbeats; dropped wholesale when full.
const REGEX_CACHE_ENTRIES: usize = 1024;

/// The `group.consumer.*` broker settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// group.consumer.session.timeout.ms
    pub session_timeout_ms: i32,
    /// group.consumer.heartbeat.interval.ms
    pub heartbeat_interval_ms: i32,
    /// group.consumer.max.size
    pub max_size: usize,
    /// group.consumer.assignors; the first is the default.
    pub assignors: Vec<ServerAssignor>,
    /// group.consumer.min.session.timeout.ms
    pub min_session_timeout_ms: i32,
    /// group.consumer.max.session.timeout.ms
    pub max_session_timeout_ms: i32,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![ServerAssignor::Uniform, ServerAssignor::Range],
            min_session_timeout_ms: 45_000,
            max_session_timeout_ms: 60_000,
        }
    }
}

/// Who sent a heartbeat, as shown by ConsumerGroupDescribe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_host: String,
}

/// Where a member is in reconciling its current assignment towards its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Owns its whole target assignment (or all of it that is free).
    Stable,
    /// Must first stop consuming partitions moving to others.
    UnrevokedPartitions,
    /// Waits for partitions still owned by other members.
    UnreleasedPartitions,
    /// A state written by a newer coordinator; the member is made to rejoin.
    Unknown,
}

impl MemberState {
    fn to_record(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
            MemberState::Unknown => 127,
        }
    }

    fn from_record(v: i8) -> MemberState {
        match v {
            0 => MemberState::Stable,
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    member_id: String,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    subscribed_topic_names: BTreeSet<String>,
    subscribed_topic_regex: Option<String>,
    rebalance_timeout_ms: i32,
    server_assignor: Option<String>,
    member_epoch: i32,
    previous_member_epoch: i32,
    state: MemberState,
    assigned: Assignment,
    pending_revocation: Assignment,
    /// The member epoch at which each partition it holds (assigned or pending revocation) was
    /// assigned to it (KIP-1251). Entries for partitions it no longer holds mean nothing;
    /// [`Member::assignment_epoch`] is the way to read them.
    assignment_epochs: BTreeMap<(TopicId, i32), i32>,
}

impl Member {
    fn new(member_id: String) -> Member {
        Member {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            rebalance_timeout_ms: -1,
            server_assignor: None,
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            assignment_epochs: BTreeMap::new(),
        }
    }

    /// The epoch at which `partition` of `topic_id` was assigned to this member, if it holds
    /// it. A partition read from a record without epochs counts as assigned at the member's
    /// epoch, which accepts commits exactly as before KIP-1251.
    fn assignment_epoch(&self, topic_id: &TopicId, partition: i32) -> Option<i32> {
        let holds = |a: &Assignment| a.get(topic_id).is_some_and(|ps| ps.contains(&partition));
        if !holds(&self.assigned) && !holds(&self.pending_revocation) {
            return None;
        }
        Some(
            self.assignment_epochs
                .get(&(*topic_id, partition))
                .copied()
                .unwrap_or(self.member_epoch),
        )
    }

    fn is_reconciled_to(&self, assignment_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == assignment_epoch
    }

    fn metadata_value(&self) -> ConsumerGroupMemberMetadataValue {
        ConsumerGroupMemberMetadataValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.iter().cloned().collect(),
            subscribed_topic_regex: self.subscribed_topic_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            server_assignor: self.server_assignor.clone(),
            ..Default::default()
        }
    }

    fn current_value(&self) -> ConsumerGroupCurrentMemberAssignmentValue {
        let to_record = |a: &Assignment| {
            a.iter()
                .map(|(t, ps)| current_value::TopicPartitions {
                    topic_id: *t,
                    partitions: ps.iter().copied().collect(),
                    assignment_epochs: Some(
                        ps.iter()
                            .map(|p| self.assignment_epoch(t, *p).unwrap_or(self.member_epoch))
                            .collect(),
                    ),
                })
                .collect()
        };
        ConsumerGroupCurrentMemberAssignmentValue {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: self.state.to_record(),
            assigned_partitions: to_record(&self.assigned),
            partitions_pending_revocation: to_record(&self.pending_revocation),
        }
    }

    /// Topic names this member subscribes to among `universe` (by name or by regex).
    fn subscribed_in<'a>(
        &self,
        universe: impl Iterator<Item = &'a String>,
        regexes: &mut RegexCache,
    ) -> BTreeSet<String> {
        let regex = self
            .subscribed_topic_regex
            .as_deref()
            .and_then(|p| regexes.get(p));
        universe
            .filter(|name| {
                self.subscribed_topic_names.contains(*name)
                    || regex.as_ref().is_some_and(|r| r.is_match(name))
            })
            .cloned()
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TopicMeta {
    topic_id: TopicId,
    num_partitions: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Group {
    group_epoch: i32,
    /// The subscribed topics that exist, by name, as last persisted.
    subscription_metadata: BTreeMap<String, TopicMeta>,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    target: BTreeMap<String, Assignment>,
    /// Instance id to member id.
    static_members: BTreeMap<String, String>,
    /// Which member's current assignment (assigned or pending revocation) holds a partition;
    /// derived from `members`.
    owners: BTreeMap<(TopicId, i32), String>,
}

impl Group {
    fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn set_current(&mut self, member: Member) {
        if let Some(old) = self.members.get(&member.member_id) {
            for (t, ps) in old.assigned.iter().chain(old.pending_revocation.iter()) {
                for p in ps {
                    if self.owners.get(&(*t, *p)) == Some(&old.member_id) {
                        self.owners.remove(&(*t, *p));
                    }
                }
            }
        }
        for (t, ps) in member
            .assigned
            .iter()
            .chain(member.pending_revocation.iter())
        {
            for p in ps {
                self.owners.insert((*t, *p), member.member_id.clone());
            }
        }
        self.members.insert(member.member_id.clone(), member);
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(mut m) = self.members.get(member_id).cloned() {
            m.assigned.clear();
            m.pending_revocation.clear();
            self.set_current(m);
        }
        if let Some(m) = self.members.remove(member_id) {
            if let Some(i) = &m.instance_id {
                if self.static_members.get(i).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(i);
                }
            }
        }
    }

    /// A ConsumerGroupPartitionMetadata record: the subscribed topics that exist, as persisted
    /// (a tombstone clears them; a value of another type changes nothing).
    fn replay_partition_metadata(&mut self, value: Option<&RecordValue>) {
        self.subscription_metadata = match value {
            Some(RecordValue::ConsumerGroupPartitionMetadata(v)) => v
                .topics
                .iter()
                .map(|t| {
                    (
                        t.topic_name.clone(),
                        TopicMeta {
                            topic_id: t.topic_id,
                            num_partitions: t.num_partitions,
                        },
                    )
                })
                .collect(),
            Some(_) => return,
            None => BTreeMap::new(),
        };
    }

    /// A ConsumerGroupMemberMetadata record: creates or updates the member's subscription and
    /// client details, keeping the instance id index in step (a member that changed its
    /// instance id no longer owns the old one).
    fn replay_member_metadata(&mut self, member_id: &str, v: &ConsumerGroupMemberMetadataValue) {
        let mut m = self
            .members
            .get(member_id)
            .cloned()
            .unwrap_or_else(|| Member::new(member_id.to_string()));
        if let Some(old) = &m.instance_id {
            if self.static_members.get(old).map(String::as_str) == Some(member_id) {
                self.static_members.remove(old);
            }
        }
        m.instance_id = v.instance_id.clone();
        m.rack_id = v.rack_id.clone();
        m.client_id = v.client_id.clone();
        m.client_host = v.client_host.clone();
        m.subscribed_topic_names = v.subscribed_topic_names.iter().cloned().collect();
        m.subscribed_topic_regex = v.subscribed_topic_regex.clone();
        m.rebalance_timeout_ms = v.rebalance_timeout_ms;
        m.server_assignor = v.server_assignor.clone();
        if let Some(i) = &m.instance_id {
            self.static_members.insert(i.clone(), member_id.to_string());
        }
        self.set_current(m);
    }

    /// A ConsumerGroupTargetAssignmentMetadata record: the epoch of the target assignment (-1
    /// once deleted; a value of another type changes nothing).
    fn replay_target_assignment_metadata(&mut self, value: Option<&RecordValue>) {
        match value {
            Some(RecordValue::ConsumerGroupTargetAssignmentMetadata(v)) => {
                self.assignment_epoch = v.assignment_epoch;
            }
            Some(_) => {}
            None => self.assignment_epoch = -1,
        }
    }

    /// A ConsumerGroupTargetAssignmentMember record: one member's target assignment (a
    /// tombstone deletes it; a value of another type changes nothing).
    fn replay_target_assignment_member(&mut self, member_id: &str, value: Option<&RecordValue>) {
        match value {
            Some(RecordValue::ConsumerGroupTargetAssignmentMember(v)) => {
                let mut a = Assignment::new();
                for tp in &v.topic_partitions {
                    a.entry(tp.topic_id)
                        .or_default()
                        .extend(tp.partitions.iter().copied());
                }
                self.target.insert(member_id.to_string(), a);
            }
            Some(_) => {}
            None => {
                self.target.remove(member_id);
            }
        }
    }

    /// A ConsumerGroupCurrentMemberAssignment record of a known member: its epochs, state and
    /// the partitions it holds. A tombstone leaves the member holding nothing at epoch -1 (its
    /// metadata tombstone removes it); a value of another type changes nothing.
    fn replay_current_member_assignment(&mut self, member_id: &str, value: Option<&RecordValue>) {
        let Some(mut m) = self.members.get(member_id).cloned() else {
            return;
        };
        match value {
            Some(RecordValue::ConsumerGroupCurrentMemberAssignment(v)) => {
                let mut epochs = BTreeMap::new();
                m.assigned = current_partitions_from_record(&v.assigned_partitions, &mut epochs);
                m.pending_revocation =
                    current_partitions_from_record(&v.partitions_pending_revocation, &mut epochs);
                m.assignment_epochs = epochs;
                m.member_epoch = v.member_epoch;
                m.previous_member_epoch = v.previous_member_epoch;
                m.state = MemberState::from_record(v.state);
            }
            Some(_) => return,
            None => {
                m.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
                m.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
                m.assigned.clear();
                m.pending_revocation.clear();
            }
        }
        self.set_current(m);
    }
}

/// Compiled topic regexes by pattern; `None` for patterns that do not compile.
#[derive(Debug, Default, Clone)]
struct RegexCache {
    compiled: HashMap<String, Option<Regex>>,
}

impl RegexCache {
    fn get(&mut self, pattern: &str) -> Option<Regex> {
        if let Some(r) = self.compiled.get(pattern) {
            return r.clone();
        }
        if self.compiled.len() >= REGEX_CACHE_ENTRIES {
            self.compiled.clear();
        }
        let r = fjord_common::pattern::whole_match(pattern).ok();
        self.compiled.insert(pattern.to_string(), r.clone());
        r
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Timers {
    session: Option<i64>,
    /// The member epoch the member must leave, and by when.
    rebalance: Option<(i32, i64)>,
}

type Rec = (RecordKey, Option<RecordValue>);

/// A heartbeat that is answered with an error and changes nothing.
struct Reject(i16, String);

fn reject<T>(code: i16, message: impl Into<String>) -> Result<T, Reject> {
    Err(Reject(code, message.into()))
}

/// All KIP-848 consumer groups of one shard.
#[derive(Debug, Clone)]
pub struct ConsumerGroups {
    config: ConsumerGroupConfig,
    groups: BTreeMap<String, Group>,
    timers: BTreeMap<(String, String), Timers>,
    regexes: RegexCache,
    /// Feeds generated member ids (protocol v0 clients leave them to the coordinator).
    id_counter: u64,
    /// Target assignments computed since the last [`ConsumerGroups::take_rebalances`].
    rebalances: u64,
}

impl ConsumerGroups {
    pub fn new(mut config: ConsumerGroupConfig) -> Self {
        if config.assignors.is_empty() {
            config.assignors = ConsumerGroupConfig::default().assignors;
        }
        let (lo, hi) = (
            config.min_session_timeout_ms,
            config
                .max_session_timeout_ms
                .max(config.min_session_timeout_ms),
        );
        config.session_timeout_ms = config.session_timeout_ms.clamp(lo, hi);
        ConsumerGroups {
            config,
            groups: BTreeMap::new(),
            timers: BTreeMap::new(),
            regexes: RegexCache::default(),
            id_counter: 0,
            rebalances: 0,
        }
    }

    pub fn contains(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// Every group with its state name as Kafka reports it ("Empty", "Assigning",
    /// "Reconciling", "Stable").
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.groups
            .iter()
            .map(|(id, g)| (id.clone(), g.state()))
            .collect()
    }

    pub fn group_state(&self, group_id: &str) -> Option<&'static str> {
        self.groups.get(group_id).map(Group::state)
    }

    /// The target assignments computed since the last call.
    pub fn take_rebalances(&mut self) -> u64 {
        std::mem::take(&mut self.rebalances)
    }

    /// Every group with its state name and member count.
    pub fn summaries(&self) -> Vec<(String, &'static str, usize)> {
        self.groups
            .iter()
            .map(|(id, g)| (id.clone(), g.state(), g.members.len()))
            .collect()
    }

    /// True when the group exists and has no members (its offsets may then expire).
    pub fn is_empty(&self, group_id: &str) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.members.is_empty())
    }

    /// OffsetCommit by a KIP-848 group: the member epoch plays the generation's role. Commits
    /// with a negative epoch (admin clients, `assign()` users) are accepted only while the group
    /// has no members.
    ///
    /// A commit with an epoch older than the member's is still the member's own when it holds
    /// every committed partition since that epoch or earlier (KIP-1251's assignment epochs):
    /// an epoch bump that did not move those partitions does not fence commits already on
    /// their way. `partitions` are the committed ones, by topic id (`None`: a topic that
    /// does not exist, which no member holds).
    pub fn validate_offset_commit(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
        partitions: impl IntoIterator<Item = (Option<TopicId>, i32)>,
    ) -> Result<(), i16> {
        let group = self.groups.get(group_id).ok_or(GROUP_ID_NOT_FOUND)?;
        if member_epoch < 0 && group.members.is_empty() {
            return Ok(());
        }
        let member = group.members.get(member_id).ok_or(UNKNOWN_MEMBER_ID)?;
        if member_epoch == member.member_epoch {
            return Ok(());
        }
        if member_epoch > member.member_epoch {
            return Err(STALE_MEMBER_EPOCH);
        }
        for (topic_id, partition) in partitions {
            let assigned_at = topic_id.and_then(|t| member.assignment_epoch(&t, partition));
            if assigned_at.is_none_or(|epoch| epoch > member_epoch) {
                return Err(STALE_MEMBER_EPOCH);
            }
        }
        Ok(())
    }

    /// OffsetFetch naming a member (v9+): the member must exist with that epoch. Fetches
    /// without a member id and with a negative epoch are always accepted.
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), i16> {
        let group = self.groups.get(group_id).ok_or(GROUP_ID_NOT_FOUND)?;
        let Some(member_id) = member_id else {
            return if member_epoch < 0 {
                Ok(())
            } else {
                Err(UNKNOWN_MEMBER_ID)
            };
        };
        let member = group.members.get(member_id).ok_or(UNKNOWN_MEMBER_ID)?;
        if member.member_epoch != member_epoch {
            return Err(STALE_MEMBER_EPOCH);
        }
        Ok(())
    }

    /// Whether a member of the group follows `topic`, by name or through its regex: such
    /// offsets are neither expired nor deletable with OffsetDelete.
    pub fn is_subscribed_to_topic(&mut self, group_id: &str, topic: &str) -> bool {
        let Some(group) = self.groups.get(group_id) else {
            return false;
        };
        let name = topic.to_string();
        group.members.values().any(|m| {
            !m.subscribed_in(std::iter::once(&name), &mut self.regexes)
                .is_empty()
        })
    }

    /// The checks ConsumerGroupHeartbeat makes before looking at any group, so a caller that
    /// must refuse the group id still answers malformed requests as Kafka does.
    pub fn validate_heartbeat(
        &self,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(), (i16, String)> {
        validate_request(request, &self.config).map_err(|Reject(code, message)| (code, message))
    }

    /// DeleteGroups: only an empty group may go. Returns the tombstones that delete it, already
    /// applied.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Vec<CoordinatorRecord>, i16> {
        let group = self.groups.get(group_id).ok_or(GROUP_ID_NOT_FOUND)?;
        if !group.members.is_empty() {
            return Err(NON_EMPTY_GROUP);
        }
        let mut out = Vec::new();
        self.emit(&mut out, target_epoch_record(group_id, None));
        self.emit(&mut out, partition_metadata_record(group_id, None));
        self.emit(&mut out, group_epoch_record(group_id, None));
        Ok(encode_all(&out))
    }

    /// Arms the session timeout of every loaded member, and the rebalance timeout of members
    /// that still have partitions to revoke, as Kafka does when a coordinator shard loads.
    pub fn on_loaded(&mut self, now_ms: i64) {
        let session = self.session_deadline(now_ms);
        for (group_id, group) in &self.groups {
            for member in group.members.values() {
                let timers = self
                    .timers
                    .entry((group_id.clone(), member.member_id.clone()))
                    .or_default();
                timers.session = Some(session);
                if let Some(rebalance) = rebalance_deadline(member, now_ms) {
                    timers.rebalance = Some(rebalance);
                }
            }
        }
    }

    /// The earliest time `tick` has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers
            .values()
            .flat_map(|t| [t.session, t.rebalance.map(|(_, d)| d)])
            .flatten()
            .min()
    }

    /// Expires sessions and rebalance timeouts due at `now_ms`: such members are fenced
    /// (removed, group epoch bumped).
    pub fn tick(&mut self, now_ms: i64) -> Vec<CoordinatorRecord> {
        let mut expired = Vec::new();
        for ((group_id, member_id), t) in &self.timers {
            let session = t.session.is_some_and(|d| d <= now_ms);
            let rebalance = t.rebalance.filter(|&(_, d)| d <= now_ms);
            if session || rebalance.is_some() {
                expired.push((
                    group_id.clone(),
                    member_id.clone(),
                    session,
                    rebalance.map(|(e, _)| e),
                ));
            }
        }
        let mut out = Vec::new();
        for (group_id, member_id, session, rebalance_epoch) in expired {
            let epoch = self
                .groups
                .get(&group_id)
                .and_then(|g| g.members.get(&member_id))
                .map(|m| m.member_epoch);
            let fence = match epoch {
                None => false,
                Some(e) => session || rebalance_epoch == Some(e),
            };
            let key = (group_id.clone(), member_id.clone());
            if fence {
                self.fence_member(&mut out, &group_id, &member_id);
            } else if epoch.is_none() {
                self.timers.remove(&key);
            } else if let Some(t) = self.timers.get_mut(&key) {
                // The member moved on from the epoch the rebalance timeout was watching.
                t.rebalance = None;
            }
        }
        encode_all(&out)
    }

    /// ConsumerGroupHeartbeat without client details (describe shows empty client id/host for
    /// members that only ever came through here).
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        request: &ConsumerGroupHeartbeatRequest,
        topics: &Topics,
    ) -> (ConsumerGroupHeartbeatResponse, Vec<CoordinatorRecord>) {
        self.heartbeat_from(now_ms, None, request, topics)
    }

    /// ConsumerGroupHeartbeat. The records must be appended to the shard's partition before the
    /// response is sent; the state already reflects them.
    pub fn heartbeat_from(
        &mut self,
        now_ms: i64,
        client: Option<&ClientInfo>,
        request: &ConsumerGroupHeartbeatRequest,
        topics: &Topics,
    ) -> (ConsumerGroupHeartbeatResponse, Vec<CoordinatorRecord>) {
        let mut out = Vec::new();
        let result = match validate_request(request, &self.config) {
            Err(r) => Err(r),
            Ok(()) if request.member_epoch < 0 => self.leave(&mut out, request),
            Ok(()) => self.member_heartbeat(&mut out, now_ms, client, request, topics),
        };
        match result {
            Ok(response) => (response, encode_all(&out)),
            Err(Reject(code, message)) => (
                ConsumerGroupHeartbeatResponse {
                    error_code: code,
                    error_message: Some(message),
                    ..Default::default()
                },
                Vec::new(),
            ),
        }
    }

    /// ConsumerGroupDescribe for the groups of this shard; unknown ids get GROUP_ID_NOT_FOUND.
    pub fn describe(&self, group_ids: &[String], topics: &Topics) -> Vec<DescribedGroup> {
        group_ids
            .iter()
            .map(|group_id| match self.groups.get(group_id) {
                None => DescribedGroup {
                    error_code: GROUP_ID_NOT_FOUND,
                    error_message: Some(format!("Group {group_id} not found.")),
                    group_id: group_id.clone(),
                    ..Default::default()
                },
                Some(g) => DescribedGroup {
                    error_code: NONE,
                    error_message: None,
                    group_id: group_id.clone(),
                    group_state: g.state().to_string(),
                    group_epoch: g.group_epoch,
                    assignment_epoch: g.assignment_epoch,
                    assignor_name: self.preferred_assignor(g).name().to_string(),
                    members: g
                        .members
                        .values()
                        .map(|m| describe::Member {
                            member_id: m.member_id.clone(),
                            instance_id: m.instance_id.clone(),
                            rack_id: m.rack_id.clone(),
                            member_epoch: m.member_epoch,
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            subscribed_topic_names: m
                                .subscribed_topic_names
                                .iter()
                                .cloned()
                                .collect(),
                            subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                            // ConsumerGroupDescribe v1 (KIP-1099): every member of a fjord
                            // consumer group speaks the consumer protocol (1; 0 is a classic
                            // member in a consumer group, which fjord does not host).
                            member_type: 1,
                            assignment: describe_assignment(&m.assigned, topics),
                            target_assignment: describe_assignment(
                                g.target.get(&m.member_id).unwrap_or(&Assignment::new()),
                                topics,
                            ),
                        })
                        .collect(),
                    authorized_operations: i32::MIN,
                },
            })
            .collect()
    }

    /// Applies one `__consumer_offsets` record of a KIP-848 group; other record types and
    /// records inconsistent with the state are ignored.
    pub fn replay(&mut self, key: &RecordKey, value: Option<&RecordValue>) {
        match (key, value) {
            (RecordKey::ConsumerGroupMetadata(k), None) => {
                self.groups.remove(&k.group_id);
                self.timers.retain(|(g, _), _| g != &k.group_id);
            }
            (RecordKey::ConsumerGroupMetadata(k), Some(RecordValue::ConsumerGroupMetadata(v))) => {
                self.groups
                    .entry(k.group_id.clone())
                    .or_default()
                    .group_epoch = v.epoch;
            }
            (RecordKey::ConsumerGroupPartitionMetadata(k), v) => {
                if let Some(g) = self.groups.get_mut(&k.group_id) {
                    g.replay_partition_metadata(v);
                }
            }
            (RecordKey::ConsumerGroupMemberMetadata(k), None) => {
                if let Some(g) = self.groups.get_mut(&k.group_id) {
                    g.remove_member(&k.member_id);
                }
                self.timers
                    .remove(&(k.group_id.clone(), k.member_id.clone()));
            }
            (
                RecordKey::ConsumerGroupMemberMetadata(k),
                Some(RecordValue::ConsumerGroupMemberMetadata(v)),
            ) => {
                let g = self.groups.entry(k.group_id.clone()).or_default();
                g.replay_member_metadata(&k.member_id, v);
            }
            (RecordKey::ConsumerGroupTargetAssignmentMetadata(k), v) => {
                if let Some(g) = self.groups.get_mut(&k.group_id) {
                    g.replay_target_assignment_metadata(v);
                }
            }
            (RecordKey::ConsumerGroupTargetAssignmentMember(k), v) => {
                if let Some(g) = self.groups.get_mut(&k.group_id) {
                    g.replay_target_assignment_member(&k.member_id, v);
                }
            }
            (RecordKey::ConsumerGroupCurrentMemberAssignment(k), v) => {
                if let Some(g) = self.groups.get_mut(&k.group_id) {
                    g.replay_current_member_assignment(&k.member_id, v);
                }
            }
            _ => {}
        }
    }

    /// Applies a record to the state and queues it for the log.
    fn emit(&mut self, out: &mut Vec<Rec>, rec: Rec) {
        self.replay(&rec.0, rec.1.as_ref());
        out.push(rec);
    }

    fn preferred_assignor(&self, group: &Group) -> ServerAssignor {
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        for m in group.members.values() {
            if let Some(i) = m
                .server_assignor
                .as_deref()
                .and_then(|n| self.config.assignors.iter().position(|a| a.name() == n))
            {
                *counts.entry(i).or_default() += 1;
            }
        }
        // Most used wins; on a tie, the one listed first in the config.
        counts
            .iter()
            .max_by_key(|&(&i, &c)| (c, std::cmp::Reverse(i)))
            .and_then(|(&i, _)| self.config.assignors.get(i))
            .or(self.config.assignors.first())
            .copied()
            .unwrap_or(ServerAssignor::Uniform)
    }

    fn generate_member_id(&mut self, now_ms: i64, group_id: &str) -> String {
        loop {
            self.id_counter = self.id_counter.wrapping_add(1);
            let a = splitmix(self.id_counter ^ (now_ms as u64).rotate_left(32));
            let b = splitmix(a ^ self.id_counter);
            let mut bytes = [0u8; 16];
            for (d, s) in bytes
                .iter_mut()
                .zip(a.to_be_bytes().into_iter().chain(b.to_be_bytes()))
            {
                *d = s;
            }
            let id = Uuid(bytes).to_string();
            let taken = self
                .groups
                .get(group_id)
                .is_some_and(|g| g.members.contains_key(&id));
            if !taken {
                return id;
            }
        }
    }

    /// The group's subscribed topics that exist in `universe`, as subscription metadata.
    fn subscription_metadata(
        regexes: &mut RegexCache,
        group: &Group,
        universe: &BTreeMap<String, TopicMeta>,
    ) -> BTreeMap<String, TopicMeta> {
        let mut names = BTreeSet::new();
        for m in group.members.values() {
            names.extend(m.subscribed_in(universe.keys(), regexes));
        }
        names
            .into_iter()
            .filter_map(|n| universe.get(&n).map(|t| (n, *t)))
            .collect()
    }

    /// Removes a member and bumps the group epoch: leave, session expiry, rebalance timeout.
    fn fence_member(&mut self, out: &mut Vec<Rec>, group_id: &str, member_id: &str) {
        self.emit(out, current_record(group_id, member_id, None));
        self.emit(out, target_member_record(group_id, member_id, None));
        self.emit(out, member_record(group_id, member_id, None));
        if let Some(group) = self.groups.get(group_id) {
            // Topics only the departed member followed leave the subscription metadata.
            let universe = group.subscription_metadata.clone();
            self.update_subscription_metadata(out, group_id, &universe);
            self.bump_group_epoch(out, group_id);
        }
        self.timers
            .remove(&(group_id.to_string(), member_id.to_string()));
    }

    fn leave(
        &mut self,
        out: &mut Vec<Rec>,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse, Reject> {
        let group_id = &request.group_id;
        let member_id = &request.member_id;
        let Some(group) = self.groups.get(group_id) else {
            return reject(
                UNKNOWN_MEMBER_ID,
                format!("Consumer group {group_id} not found."),
            );
        };
        let response = ConsumerGroupHeartbeatResponse {
            member_id: Some(member_id.clone()),
            member_epoch: request.member_epoch,
            ..Default::default()
        };
        match &request.instance_id {
            None => {
                if !group.members.contains_key(member_id) {
                    return reject(UNKNOWN_MEMBER_ID, format!("Member {member_id} is unknown."));
                }
                self.fence_member(out, group_id, member_id);
            }
            Some(instance_id) => {
                let Some(current) = group
                    .static_members
                    .get(instance_id)
                    .and_then(|id| group.members.get(id))
                else {
                    return reject(
                        UNKNOWN_MEMBER_ID,
                        format!("Instance id {instance_id} is unknown."),
                    );
                };
                if &current.member_id != member_id {
                    return reject(
                        FENCED_INSTANCE_ID,
                        format!(
                            "Static member {member_id} with instance id {instance_id} was fenced by member {}.",
                            current.member_id
                        ),
                    );
                }
                if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                    // The static member keeps its partitions until its session expires or its
                    // instance rejoins; it stops revoking anything.
                    let mut left = current.clone();
                    left.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    left.pending_revocation.clear();
                    self.emit(
                        out,
                        current_record(group_id, member_id, Some(left.current_value())),
                    );
                } else {
                    self.fence_member(out, group_id, member_id);
                }
            }
        }
        Ok(response)
    }

    /// ConsumerGroupHeartbeat of a member joining (epoch 0) or staying (its epoch), step by
    /// step as Kafka's coordinator takes it: every check first, then the membership and
    /// subscription, the target assignment when the group epoch moved past it, the member's
    /// reconciliation towards its target, its timeouts, and the response.
    fn member_heartbeat(
        &mut self,
        out: &mut Vec<Rec>,
        now_ms: i64,
        client: Option<&ClientInfo>,
        request: &ConsumerGroupHeartbeatRequest,
        topics: &Topics,
    ) -> Result<ConsumerGroupHeartbeatResponse, Reject> {
        let group_id = &request.group_id;
        if request.member_epoch != 0 && !self.groups.contains_key(group_id) {
            return reject(
                UNKNOWN_MEMBER_ID,
                format!("Consumer group {group_id} not found."),
            );
        }
        let member_id = if request.member_id.is_empty() {
            self.generate_member_id(now_ms, group_id)
        } else {
            request.member_id.clone()
        };

        // Validation: nothing below changes state until every check has passed.
        let admitted = self.admit_member(&member_id, client, request)?;

        // 1. Membership and subscription.
        if let Some(departed) = &admitted.replaced {
            self.replace_static_member(out, group_id, departed, &admitted.member);
        }
        let subscription_changed = self.update_member(out, group_id, &admitted);
        let metadata_changed =
            self.update_subscription_metadata(out, group_id, &topic_metadata(topics));
        if subscription_changed || metadata_changed {
            self.bump_group_epoch(out, group_id);
        }

        // 2. Target assignment, when the group epoch moved past it.
        self.maybe_update_target_assignment(out, group_id);

        // 3. Reconcile this member towards its target.
        let (current, reconciled) = self.reconciled_member(group_id, &member_id, request)?;
        let key = (group_id.clone(), member_id.clone());
        if reconciled != current {
            self.emit(
                out,
                current_record(group_id, &member_id, Some(reconciled.current_value())),
            );
            self.timers.entry(key.clone()).or_default().rebalance =
                rebalance_deadline(&reconciled, now_ms);
        }
        let session = self.session_deadline(now_ms);
        self.timers.entry(key).or_default().session = Some(session);

        Ok(self.heartbeat_response(member_id, &admitted.member, &reconciled, request))
    }

    /// The checks of a joining or staying member's heartbeat, which must all pass before
    /// anything changes: the group has room for a new member, the member (or the static member
    /// it replaces) and its epoch are valid, a member in a state unknown to this coordinator
    /// owns no partitions, and a newly subscribed regex compiles. Returns the member with the
    /// request's fields applied.
    fn admit_member(
        &mut self,
        member_id: &str,
        client: Option<&ClientInfo>,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<AdmittedMember, Reject> {
        let empty = Group::default();
        let group = self.groups.get(&request.group_id).unwrap_or(&empty);
        if !group.members.contains_key(member_id) && group.members.len() >= self.config.max_size {
            return reject(
                GROUP_MAX_SIZE_REACHED,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    self.config.max_size
                ),
            );
        }
        let (member, replaced) = resolve_member(group, member_id, request)?;
        if member.state == MemberState::Unknown
            && request
                .topic_partitions
                .as_ref()
                .is_none_or(|o| !o.is_empty())
        {
            return reject(
                FENCED_MEMBER_EPOCH,
                "The member's state is unknown to this coordinator; it must release its partitions and rejoin.",
            );
        }
        let updated = updated_member(&member, client, request);
        if let Some(regex) = &updated.subscribed_topic_regex {
            if member.subscribed_topic_regex.as_ref() != Some(regex)
                && self.regexes.get(regex).is_none()
            {
                return reject(
                    INVALID_REGULAR_EXPRESSION,
                    format!("SubscribedTopicRegex {regex} is not a valid regular expression."),
                );
            }
        }
        Ok(AdmittedMember {
            member,
            updated,
            replaced,
        })
    }

    /// A static member rejoining under a new member id takes the departed member's place:
    /// the departed one's records are deleted and the new member is written with the departed
    /// one's target and current assignment (read before they are deleted), so it keeps its
    /// partitions without a rebalance.
    fn replace_static_member(
        &mut self,
        out: &mut Vec<Rec>,
        group_id: &str,
        departed: &Member,
        member: &Member,
    ) {
        let target = self
            .groups
            .get(group_id)
            .and_then(|g| g.target.get(&departed.member_id))
            .cloned()
            .unwrap_or_default();
        self.emit(out, current_record(group_id, &departed.member_id, None));
        self.emit(
            out,
            target_member_record(group_id, &departed.member_id, None),
        );
        self.emit(out, member_record(group_id, &departed.member_id, None));
        self.emit(
            out,
            member_record(group_id, &member.member_id, Some(member.metadata_value())),
        );
        self.emit(
            out,
            target_member_record(group_id, &member.member_id, Some(&target)),
        );
        self.emit(
            out,
            current_record(group_id, &member.member_id, Some(member.current_value())),
        );
        self.timers
            .remove(&(group_id.to_string(), departed.member_id.clone()));
    }

    /// Writes the member's metadata when the heartbeat changed it. Returns whether its
    /// subscription (topic names or regex) changed, which bumps the group epoch.
    fn update_member(
        &mut self,
        out: &mut Vec<Rec>,
        group_id: &str,
        admitted: &AdmittedMember,
    ) -> bool {
        let (member, updated) = (&admitted.member, &admitted.updated);
        let unchanged = self
            .groups
            .get(group_id)
            .and_then(|g| g.members.get(&updated.member_id))
            .is_some_and(|existing| existing == updated);
        if unchanged {
            return false;
        }
        self.emit(
            out,
            member_record(group_id, &updated.member_id, Some(updated.metadata_value())),
        );
        member.subscribed_topic_names != updated.subscribed_topic_names
            || member.subscribed_topic_regex != updated.subscribed_topic_regex
    }

    /// Writes the group's subscription metadata (its members' subscribed topics that exist in
    /// `universe`) when it changed. Returns whether it did, which bumps the group epoch.
    fn update_subscription_metadata(
        &mut self,
        out: &mut Vec<Rec>,
        group_id: &str,
        universe: &BTreeMap<String, TopicMeta>,
    ) -> bool {
        let Some(group) = self.groups.get(group_id) else {
            return false;
        };
        let metadata = Self::subscription_metadata(&mut self.regexes, group, universe);
        if metadata == group.subscription_metadata {
            return false;
        }
        self.emit(out, partition_metadata_record(group_id, Some(&metadata)));
        true
    }

    /// Bumps the group epoch: the target assignment is then computed anew.
    fn bump_group_epoch(&mut self, out: &mut Vec<Rec>, group_id: &str) {
        let epoch = self.groups.get(group_id).map_or(0, |g| g.group_epoch);
        self.emit(
            out,
            group_epoch_record(group_id, Some(epoch.saturating_add(1))),
        );
    }

    /// When the group epoch is ahead of the target assignment's, computes the new target with
    /// the group's preferred assignor and writes the targets that changed, then the new
    /// assignment epoch.
    fn maybe_update_target_assignment(&mut self, out: &mut Vec<Rec>, group_id: &str) {
        let Some(g) = self.groups.get(group_id) else {
            return;
        };
        if g.group_epoch <= g.assignment_epoch {
            return;
        }
        let new_epoch = g.group_epoch;
        self.rebalances += 1;
        let assignor = self.preferred_assignor(g);
        let changes = compute_target(&mut self.regexes, g, assignor);
        for (id, a) in changes {
            self.emit(out, target_member_record(group_id, &id, Some(&a)));
        }
        self.emit(out, target_epoch_record(group_id, Some(new_epoch)));
    }

    /// The member as it stands and as one reconciliation step towards its target takes it
    /// (unchanged when it is already reconciled to the assignment epoch).
    fn reconciled_member(
        &self,
        group_id: &str,
        member_id: &str,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> Result<(Member, Member), Reject> {
        let Some(g) = self.groups.get(group_id) else {
            return reject(UNKNOWN_MEMBER_ID, "The group vanished.");
        };
        let Some(current) = g.members.get(member_id).cloned() else {
            return reject(UNKNOWN_MEMBER_ID, format!("Member {member_id} is unknown."));
        };
        if current.is_reconciled_to(g.assignment_epoch) {
            return Ok((current.clone(), current));
        }
        let target = g.target.get(member_id).cloned().unwrap_or_default();
        let reconciled = reconcile(
            &current,
            g.assignment_epoch,
            &target,
            &g.owners,
            request.topic_partitions.as_deref(),
        );
        Ok((current, reconciled))
    }

    /// When a member's session expires unless it heartbeats again.
    fn session_deadline(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.config.session_timeout_ms.into())
    }

    /// The heartbeat's answer: the member's id and epoch, and its assignment when the client
    /// joined or sent a full request (it may have lost track of it) or when the assignment
    /// changed; otherwise none, and the client keeps the one it has.
    fn heartbeat_response(
        &self,
        member_id: String,
        member: &Member,
        reconciled: &Member,
        request: &ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        let full_request = request.member_epoch == 0
            || (request.rebalance_timeout_ms != -1
                && (request.subscribed_topic_names.is_some()
                    || request.subscribed_topic_regex.is_some())
                && request.topic_partitions.is_some());
        let assignment = (full_request || reconciled.assigned != member.assigned).then(|| {
            hb_response::Assignment {
                topic_partitions: reconciled
                    .assigned
                    .iter()
                    .map(|(t, ps)| hb_response::TopicPartitions {
                        topic_id: *t,
                        partitions: ps.iter().copied().collect(),
                    })
                    .collect(),
            }
        });
        ConsumerGroupHeartbeatResponse {
            member_id: Some(member_id),
            member_epoch: reconciled.member_epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignment,
            ..Default::default()
        }
    }
}

/// The member a heartbeat is for, once every check has passed.
struct AdmittedMember {
    /// The member as the group knew it, or new, or taking over a departed static member's
    /// assignment at epoch 0.
    member: Member,
    /// `member` with the request's fields applied.
    updated: Member,
    /// A departed static member whose instance id `member` takes over.
    replaced: Option<Member>,
}

/// The member with the fields a heartbeat sets applied (fields left out keep their value; an
/// empty regex unsubscribes from it). The client's id and host come from the request header.
fn updated_member(
    member: &Member,
    client: Option<&ClientInfo>,
    request: &ConsumerGroupHeartbeatRequest,
) -> Member {
    let mut updated = member.clone();
    if let Some(i) = &request.instance_id {
        updated.instance_id = Some(i.clone());
    }
    if let Some(r) = &request.rack_id {
        updated.rack_id = Some(r.clone());
    }
    if request.rebalance_timeout_ms != -1 {
        updated.rebalance_timeout_ms = request.rebalance_timeout_ms;
    }
    if let Some(a) = &request.server_assignor {
        updated.server_assignor = Some(a.clone());
    }
    if let Some(names) = &request.subscribed_topic_names {
        updated.subscribed_topic_names = names.iter().cloned().collect();
    }
    if let Some(regex) = &request.subscribed_topic_regex {
        updated.subscribed_topic_regex = (!regex.is_empty()).then(|| regex.clone());
    }
    if let Some(c) = client {
        updated.client_id = c.client_id.clone();
        updated.client_host = c.client_host.clone();
    }
    updated
}

/// Every existing topic as subscription metadata: what members' subscriptions are matched
/// against.
fn topic_metadata(topics: &Topics) -> BTreeMap<String, TopicMeta> {
    topics
        .by_name
        .values()
        .map(|t| {
            (
                t.name.clone(),
                TopicMeta {
                    topic_id: t.topic_id,
                    num_partitions: t.partitions,
                },
            )
        })
        .collect()
}

/// The rebalance timeout a member's reconciliation arms: a member that must revoke partitions
/// is fenced unless it does so within its rebalance timeout (at this epoch).
fn rebalance_deadline(member: &Member, now_ms: i64) -> Option<(i32, i64)> {
    (member.state == MemberState::UnrevokedPartitions).then(|| {
        (
            member.member_epoch,
            now_ms.saturating_add(member.rebalance_timeout_ms.max(0).into()),
        )
    })
}

/// The new target of every member whose target changes.
fn compute_target(
    regexes: &mut RegexCache,
    g: &Group,
    assignor: ServerAssignor,
) -> Vec<(String, Assignment)> {
    let universe = g.subscription_metadata.clone();
    let ids: BTreeMap<&String, TopicId> = universe.iter().map(|(n, t)| (n, t.topic_id)).collect();
    let specs: Vec<MemberSpec> = g
        .members
        .values()
        .map(|m| MemberSpec {
            member_id: m.member_id.clone(),
            instance_id: m.instance_id.clone(),
            subscribed_topics: m
                .subscribed_in(universe.keys(), regexes)
                .iter()
                .filter_map(|n| ids.get(n).copied())
                .collect(),
            previous: g.target.get(&m.member_id).cloned().unwrap_or_default(),
        })
        .collect();
    let partitions: BTreeMap<TopicId, i32> = universe
        .values()
        .map(|t| (t.topic_id, t.num_partitions))
        .collect();
    assignor
        .assign(&specs, &partitions)
        .into_iter()
        .filter(|(id, a)| g.target.get(id) != Some(a))
        .collect()
}

/// Finds (or creates) the member a heartbeat is for, checking its epoch. The second value is a
/// departed static member whose instance id the new member takes over.
fn resolve_member(
    group: &Group,
    member_id: &str,
    request: &ConsumerGroupHeartbeatRequest,
) -> Result<(Member, Option<Member>), Reject> {
    let joining = request.member_epoch == 0;
    let owned = request.topic_partitions.as_deref();
    match &request.instance_id {
        None => match group.members.get(member_id) {
            Some(m) => {
                check_member_epoch(m, request.member_epoch, owned)?;
                Ok((m.clone(), None))
            }
            None if joining => Ok((Member::new(member_id.to_string()), None)),
            None => reject(UNKNOWN_MEMBER_ID, format!("Member {member_id} is unknown.")),
        },
        Some(instance_id) => {
            let existing = group
                .static_members
                .get(instance_id)
                .and_then(|id| group.members.get(id));
            match (existing, joining) {
                (None, true) => Ok((
                    group
                        .members
                        .get(member_id)
                        .cloned()
                        .unwrap_or_else(|| Member::new(member_id.to_string())),
                    None,
                )),
                (None, false) => reject(
                    UNKNOWN_MEMBER_ID,
                    format!("Instance id {instance_id} is unknown."),
                ),
                (Some(old), true) => {
                    if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                        return reject(
                            UNRELEASED_INSTANCE_ID,
                            format!(
                                "Static member {member_id} with instance id {instance_id} cannot join the group because the instance id is owned by {} member.",
                                old.member_id
                            ),
                        );
                    }
                    // The new member takes over the departed one's assignment from epoch 0.
                    let mut new = old.clone();
                    new.member_id = member_id.to_string();
                    new.member_epoch = 0;
                    new.previous_member_epoch = 0;
                    Ok((new, Some(old.clone())))
                }
                (Some(old), false) => {
                    if old.member_id != member_id {
                        return reject(
                            FENCED_INSTANCE_ID,
                            format!(
                                "Static member {member_id} with instance id {instance_id} was fenced by member {}.",
                                old.member_id
                            ),
                        );
                    }
                    check_member_epoch(old, request.member_epoch, owned)?;
                    Ok((old.clone(), None))
                }
            }
        }
    }
}

/// A member may heartbeat with its current epoch, or with its previous one when it owns no
/// more than its current assignment (the response that bumped its epoch was lost).
fn check_member_epoch(
    member: &Member,
    received: i32,
    owned: Option<&[hb_request::TopicPartitions]>,
) -> Result<(), Reject> {
    if received > member.member_epoch {
        return reject(
            FENCED_MEMBER_EPOCH,
            format!(
                "Member epoch {received} is ahead of the coordinator's {}; the member must release its partitions and rejoin.",
                member.member_epoch
            ),
        );
    }
    if received < member.member_epoch {
        let subset = owned.is_none_or(|owned| {
            owned.iter().all(|tp| {
                let held = member.assigned.get(&tp.topic_id);
                tp.partitions
                    .iter()
                    .all(|p| held.is_some_and(|h| h.contains(p)))
            })
        });
        if received != member.previous_member_epoch || !subset {
            return reject(
                FENCED_MEMBER_EPOCH,
                format!(
                    "Member epoch {received} is behind the coordinator's {}; the member must release its partitions and rejoin.",
                    member.member_epoch
                ),
            );
        }
    }
    Ok(())
}

/// The checks of a heartbeat's own fields, made before any group is looked at: ids present and
/// not empty, strings a record can hold, the fields its member epoch requires, and an assignor
/// this coordinator offers.
fn validate_request(
    request: &ConsumerGroupHeartbeatRequest,
    config: &ConsumerGroupConfig,
) -> Result<(), Reject> {
    let invalid = |m: &str| reject(INVALID_REQUEST, m);
    if request.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if request.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if request.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    let strings = [
        Some(&request.group_id),
        Some(&request.member_id),
        request.instance_id.as_ref(),
        request.rack_id.as_ref(),
        request.subscribed_topic_regex.as_ref(),
        request.server_assignor.as_ref(),
    ];
    let too_long = strings.iter().flatten().any(|s| s.len() > MAX_STRING_BYTES)
        || request
            .subscribed_topic_names
            .iter()
            .flatten()
            .any(|s| s.len() > MAX_STRING_BYTES);
    if too_long {
        return invalid("A string field is longer than a record can hold.");
    }
    validate_member_epoch(request)?;
    if let Some(a) = &request.server_assignor {
        if !config.assignors.iter().any(|c| c.name() == a) {
            let supported: Vec<&str> = config.assignors.iter().map(|c| c.name()).collect();
            return reject(
                UNSUPPORTED_ASSIGNOR,
                format!(
                    "ServerAssignor {a} is not supported. Supported assignors: {}.",
                    supported.join(", ")
                ),
            );
        }
    }
    Ok(())
}

/// The fields a heartbeat must carry for its member epoch: a member (re-)joining (0) gives its
/// rebalance timeout and a subscription and reports that it owns no partitions, a static
/// member leaving temporarily (-2) names itself and its instance, and any other member names
/// itself. Other negative epochs are invalid.
fn validate_member_epoch(request: &ConsumerGroupHeartbeatRequest) -> Result<(), Reject> {
    let invalid = |m: &str| reject(INVALID_REQUEST, m);
    match request.member_epoch {
        e if e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH => {
            if request.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
        }
        0 => {
            if request.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if !request
                .topic_partitions
                .as_ref()
                .is_some_and(|tps| tps.is_empty())
            {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            let names = request
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            let regex = request
                .subscribed_topic_regex
                .as_ref()
                .is_some_and(|r| !r.is_empty());
            if !names && !regex {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
        }
        LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
            if request.member_id.is_empty() {
                return invalid("MemberId can't be empty.");
            }
            if request.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        }
        _ => return invalid("MemberEpoch is invalid."),
    }
    Ok(())
}

/// One reconciliation step of a member towards its target: keep what stays, ask to revoke
/// what goes, and only then hand out new partitions that no other member still holds.
fn reconcile(
    member: &Member,
    target_epoch: i32,
    target: &Assignment,
    owners: &BTreeMap<(TopicId, i32), String>,
    owned: Option<&[hb_request::TopicPartitions]>,
) -> Member {
    // Whether the client still reports any of `revoking` (or said nothing about what it owns).
    let still_owns = |revoking: &Assignment| match owned {
        None => true,
        Some(owned) => owned.iter().any(|tp| {
            revoking
                .get(&tp.topic_id)
                .is_some_and(|r| tp.partitions.iter().any(|p| r.contains(p)))
        }),
    };
    match member.state {
        MemberState::Stable => {
            if member.member_epoch == target_epoch {
                return member.clone();
            }
            next_assignment(
                member,
                member.member_epoch,
                target_epoch,
                target,
                owners,
                &still_owns,
            )
        }
        MemberState::UnrevokedPartitions => {
            if still_owns(&member.pending_revocation) {
                return member.clone();
            }
            // More to revoke keeps the epoch (Kafka 4.4): a client whose answer was lost sends
            // the same heartbeat again, at this epoch, with partitions it still owns.
            next_assignment(
                member,
                member.member_epoch,
                target_epoch,
                target,
                owners,
                &still_owns,
            )
        }
        MemberState::UnreleasedPartitions => next_assignment(
            member,
            member.member_epoch,
            target_epoch,
            target,
            owners,
            &still_owns,
        ),
        // Only reached when the client owns nothing (others are fenced before reconciling),
        // so the member starts over at the target epoch.
        MemberState::Unknown => next_assignment(
            member,
            target_epoch,
            target_epoch,
            target,
            owners,
            &still_owns,
        ),
    }
}

fn next_assignment(
    member: &Member,
    member_epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owners: &BTreeMap<(TopicId, i32), String>,
    still_owns: &dyn Fn(&Assignment) -> bool,
) -> Member {
    let mut assigned = Assignment::new();
    let mut revoking = Assignment::new();
    let mut adding = Assignment::new();
    let mut unreleased = false;
    let topics: BTreeSet<TopicId> = target
        .keys()
        .chain(member.assigned.keys())
        .copied()
        .collect();
    for t in topics {
        let empty = BTreeSet::new();
        let want = target.get(&t).unwrap_or(&empty);
        let have = member.assigned.get(&t).unwrap_or(&empty);
        let keep: BTreeSet<i32> = have.intersection(want).copied().collect();
        let revoke: BTreeSet<i32> = have.difference(&keep).copied().collect();
        let mut add = BTreeSet::new();
        let pending = member.pending_revocation.get(&t);
        for &p in want.difference(&keep) {
            // A partition this member itself is still revoking is no other member's: it may
            // come back to it at once.
            let own = pending.is_some_and(|ps| ps.contains(&p));
            if owners.contains_key(&(t, p)) && !own {
                unreleased = true;
            } else {
                add.insert(p);
            }
        }
        if !keep.is_empty() {
            assigned.insert(t, keep);
        }
        if !revoke.is_empty() {
            revoking.insert(t, revoke);
        }
        if !add.is_empty() {
            adding.insert(t, add);
        }
    }
    let mut next = member.clone();
    // Kept and revoking partitions keep the epoch they were assigned at.
    next.assignment_epochs = assigned
        .iter()
        .chain(revoking.iter())
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .map(|(t, p)| {
            let epoch = member
                .assignment_epoch(&t, p)
                .unwrap_or(member.member_epoch);
            ((t, p), epoch)
        })
        .collect();
    if !revoking.is_empty() && still_owns(&revoking) {
        // Revoke first; the member keeps its epoch until the client confirms.
        next.state = MemberState::UnrevokedPartitions;
        set_epoch(&mut next, member_epoch);
        next.assigned = assigned;
        next.pending_revocation = revoking;
        return next;
    }
    for (t, ps) in adding {
        for p in &ps {
            next.assignment_epochs.insert((t, *p), target_epoch);
        }
        assigned.entry(t).or_default().extend(ps);
    }
    next.state = if unreleased {
        MemberState::UnreleasedPartitions
    } else {
        MemberState::Stable
    };
    set_epoch(&mut next, target_epoch);
    next.assigned = assigned;
    next.pending_revocation = Assignment::new();
    next
}

/// The previous epoch only moves when the epoch does.
fn set_epoch(member: &mut Member, epoch: i32) {
    if member.member_epoch != epoch {
        member.previous_member_epoch = member.member_epoch;
        member.member_epoch = epoch;
    }
}

/// The partitions of a current assignment record, adding the epoch each was assigned at to
/// `epochs` (KIP-1251). Epochs of another length than the partitions' are ignored: those
/// partitions count as assigned at the member epoch.
fn current_partitions_from_record(
    tps: &[current_value::TopicPartitions],
    epochs: &mut BTreeMap<(TopicId, i32), i32>,
) -> Assignment {
    let mut a = Assignment::new();
    for tp in tps {
        a.entry(tp.topic_id)
            .or_default()
            .extend(tp.partitions.iter().copied());
        let Some(e) = &tp.assignment_epochs else {
            continue;
        };
        if e.len() == tp.partitions.len() {
            for (p, epoch) in tp.partitions.iter().zip(e) {
                epochs.insert((tp.topic_id, *p), *epoch);
            }
        }
    }
    a
}

fn describe_assignment(a: &Assignment, topics: &Topics) -> describe::Assignment {
    describe::Assignment {
        topic_partitions: a
            .iter()
            .filter_map(|(t, ps)| {
                topics.by_id(t).map(|info| describe::TopicPartitions {
                    topic_id: *t,
                    topic_name: info.name.clone(),
                    partitions: ps.iter().copied().collect(),
                })
            })
            .collect(),
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Strings were bounded when the request was validated, so encoding does not fail in practice;
/// a record that could not be written is left out rather than aborting the shard.
fn encode_all(recs: &[Rec]) -> Vec<CoordinatorRecord> {
    recs.iter()
        .filter_map(|(k, v)| records::encode(k, v.as_ref()).ok())
        .collect()
}

fn group_epoch_record(group_id: &str, epoch: Option<i32>) -> Rec {
    (
        RecordKey::ConsumerGroupMetadata(ConsumerGroupMetadataKey {
            group_id: group_id.to_string(),
        }),
        epoch.map(|epoch| RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue { epoch })),
    )
}

fn partition_metadata_record(
    group_id: &str,
    metadata: Option<&BTreeMap<String, TopicMeta>>,
) -> Rec {
    (
        RecordKey::ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataKey {
            group_id: group_id.to_string(),
        }),
        metadata.map(|m| {
            RecordValue::ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataValue {
                topics: m
                    .iter()
                    .map(|(name, t)| partition_value::TopicMetadata {
                        topic_id: t.topic_id,
                        topic_name: name.clone(),
                        num_partitions: t.num_partitions,
                        partition_metadata: Vec::new(),
                    })
                    .collect(),
            })
        }),
    )
}

fn member_record(
    group_id: &str,
    member_id: &str,
    value: Option<ConsumerGroupMemberMetadataValue>,
) -> Rec {
    (
        RecordKey::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        value.map(RecordValue::ConsumerGroupMemberMetadata),
    )
}

fn target_member_record(group_id: &str, member_id: &str, a: Option<&Assignment>) -> Rec {
    (
        RecordKey::ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        a.map(|a| {
            RecordValue::ConsumerGroupTargetAssignmentMember(
                ConsumerGroupTargetAssignmentMemberValue {
                    topic_partitions: a
                        .iter()
                        .map(|(t, ps)| target_value::TopicPartition {
                            topic_id: *t,
                            partitions: ps.iter().copied().collect(),
                        })
                        .collect(),
                },
            )
        }),
    )
}

fn target_epoch_record(group_id: &str, epoch: Option<i32>) -> Rec {
    (
        RecordKey::ConsumerGroupTargetAssignmentMetadata(
            ConsumerGroupTargetAssignmentMetadataKey {
                group_id: group_id.to_string(),
            },
        ),
        epoch.map(|assignment_epoch| {
            RecordValue::ConsumerGroupTargetAssignmentMetadata(
                ConsumerGroupTargetAssignmentMetadataValue { assignment_epoch },
            )
        }),
    )
}

fn current_record(
    group_id: &str,
    member_id: &str,
    value: Option<ConsumerGroupCurrentMemberAssignmentValue>,
) -> Rec {
    (
        RecordKey::ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentKey {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }),
        value.map(RecordValue::ConsumerGroupCurrentMemberAssignment),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::TopicInfo;

    fn topics(list: &[(&str, u8, i32)]) -> Topics {
        Topics {
            by_name: list
                .iter()
                .map(|&(n, id, p)| {
                    (
                        n.to_string(),
                        TopicInfo {
                            name: n.to_string(),
                            topic_id: Uuid([id; 16]),
                            partitions: p,
                        },
                    )
                })
                .collect(),
        }
    }

    /// A simulated client: sends what it owns, adopts what the coordinator returns.
    #[derive(Debug, Clone)]
    struct Client {
        id: String,
        epoch: i32,
        owned: Assignment,
    }

    impl Client {
        fn new(id: &str) -> Client {
            Client {
                id: id.to_string(),
                epoch: 0,
                owned: Assignment::new(),
            }
        }

        fn request(&self, group: &str, names: &[&str]) -> ConsumerGroupHeartbeatRequest {
            ConsumerGroupHeartbeatRequest {
                group_id: group.to_string(),
                member_id: self.id.clone(),
                member_epoch: self.epoch,
                rebalance_timeout_ms: 30_000,
                subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
                topic_partitions: Some(
                    self.owned
                        .iter()
                        .map(|(t, ps)| hb_request::TopicPartitions {
                            topic_id: *t,
                            partitions: ps.iter().copied().collect(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }
        }

        fn adopt(&mut self, r: &ConsumerGroupHeartbeatResponse) {
            assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
            self.epoch = r.member_epoch;
            if let Some(a) = &r.assignment {
                self.owned = a
                    .topic_partitions
                    .iter()
                    .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                    .collect();
            }
        }
    }

    fn beat(
        groups: &mut ConsumerGroups,
        log: &mut Vec<CoordinatorRecord>,
        now: i64,
        c: &mut Client,
        t: &Topics,
    ) -> ConsumerGroupHeartbeatResponse {
        let (r, recs) = groups.heartbeat(now, &c.request("g", &["t"]), t);
        log.extend(recs);
        c.adopt(&r);
        r
    }

    fn rebuild(log: &[CoordinatorRecord]) -> ConsumerGroups {
        let mut g = ConsumerGroups::new(ConsumerGroupConfig::default());
        for rec in log {
            let (k, v) = records::decode(rec).unwrap();
            g.replay(&k, v.as_ref());
        }
        g
    }

    /// No partition is held by two members' current assignments.
    fn assert_single_owner(groups: &ConsumerGroups) {
        for g in groups.groups.values() {
            let mut seen = BTreeSet::new();
            for m in g.members.values() {
                for (t, ps) in m.assigned.iter().chain(m.pending_revocation.iter()) {
                    for p in ps {
                        assert!(seen.insert((*t, *p)), "partition {p} owned twice");
                    }
                }
            }
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn three_members_join_reconcile_and_leave() {
        let t = topics(&[("t", 1, 6)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        let r = beat(&mut groups, &mut log, 0, &mut a, &t);
        assert_eq!((r.member_epoch, r.heartbeat_interval_ms), (1, 5000));
        assert_eq!(count(&a.owned), 6);
        assert_eq!(groups.group_state("g"), Some("Stable"));

        let mut b = Client::new("b");
        beat(&mut groups, &mut log, 10, &mut b, &t);
        // b waits: a must first give up three partitions.
        assert_eq!(count(&b.owned), 0);
        assert_eq!(groups.group_state("g"), Some("Reconciling"));
        beat(&mut groups, &mut log, 20, &mut a, &t);
        assert_eq!(count(&a.owned), 3);
        assert_eq!(
            a.epoch, 1,
            "epoch stays until the revocation is acknowledged"
        );
        assert_single_owner(&groups);
        beat(&mut groups, &mut log, 30, &mut a, &t);
        assert_eq!(a.epoch, 2);
        beat(&mut groups, &mut log, 40, &mut b, &t);
        assert_eq!((b.epoch, count(&b.owned)), (2, 3));
        assert_eq!(groups.group_state("g"), Some("Stable"));

        let mut c = Client::new("c");
        let mut clients = [a, b];
        beat(&mut groups, &mut log, 50, &mut c, &t);
        for _ in 0..3 {
            for cl in clients.iter_mut() {
                beat(&mut groups, &mut log, 60, cl, &t);
                assert_single_owner(&groups);
            }
            beat(&mut groups, &mut log, 60, &mut c, &t);
            assert_single_owner(&groups);
        }
        assert_eq!(groups.group_state("g"), Some("Stable"));
        for cl in clients.iter().chain([&c]) {
            assert_eq!(count(&cl.owned), 2);
        }

        // c leaves; the others pick up its partitions.
        let mut leave = c.request("g", &["t"]);
        leave.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
        let (r, recs) = groups.heartbeat(70, &leave, &t);
        log.extend(recs);
        assert_eq!((r.error_code, r.member_epoch), (NONE, -1));
        for _ in 0..2 {
            for cl in clients.iter_mut() {
                beat(&mut groups, &mut log, 80, cl, &t);
            }
        }
        assert_eq!(count(&clients[0].owned) + count(&clients[1].owned), 6);
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    /// A member acknowledging one revocation while the target moved again is asked to revoke
    /// more at the same epoch (as Kafka 4.4 does), so when the answer is lost and the client
    /// sends the same heartbeat again, with the partitions it still owns, it is answered again,
    /// not fenced: fenced, it would drop its partitions without committing (OnPartitionsLost)
    /// and their next owner would read records again.
    #[test]
    fn a_lost_answer_during_a_second_revocation_round_is_not_fenced() {
        let t = topics(&[("t", 1, 6)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        beat(&mut groups, &mut log, 0, &mut a, &t);
        assert_eq!((a.epoch, count(&a.owned)), (1, 6));
        let mut b = Client::new("b");
        beat(&mut groups, &mut log, 10, &mut b, &t);
        // a is asked to give up three partitions, keeping its epoch until it does.
        beat(&mut groups, &mut log, 20, &mut a, &t);
        assert_eq!((a.epoch, count(&a.owned)), (1, 3));
        // c joins: a's target shrinks again, to two partitions.
        let mut c = Client::new("c");
        beat(&mut groups, &mut log, 30, &mut c, &t);
        // a acknowledges the first revocation and is asked for another; the answer is lost.
        let ack = a.request("g", &["t"]);
        let (first, recs) = groups.heartbeat(40, &ack, &t);
        log.extend(recs);
        assert_eq!(first.error_code, NONE, "{:?}", first.error_message);
        assert_eq!(first.member_epoch, 1, "revoking again keeps the epoch");
        // The same heartbeat again: answered as the first was.
        let (again, recs) = groups.heartbeat(50, &ack, &t);
        log.extend(recs);
        assert_eq!(again.error_code, NONE, "{:?}", again.error_message);
        a.adopt(&again);
        assert_eq!((a.epoch, count(&a.owned)), (1, 2));
        assert_single_owner(&groups);
        // Everyone converges, two partitions each, no partition ever held twice.
        let mut clients = [a, b, c];
        for round in 0..4 {
            for cl in clients.iter_mut() {
                beat(&mut groups, &mut log, 60 + round, cl, &t);
                assert_single_owner(&groups);
            }
        }
        assert_eq!(groups.group_state("g"), Some("Stable"));
        for cl in &clients {
            assert_eq!(count(&cl.owned), 2);
        }
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    /// A partition the member was revoking and whose target gives it back is no other member's:
    /// once the revocation is acknowledged it comes back at once, not a heartbeat later.
    #[test]
    fn a_partition_being_revoked_comes_back_to_its_member_at_once() {
        let t = topics(&[("t", 1, 4)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        beat(&mut groups, &mut log, 0, &mut a, &t);
        let mut b = Client::new("b");
        beat(&mut groups, &mut log, 10, &mut b, &t);
        beat(&mut groups, &mut log, 20, &mut a, &t);
        assert_eq!(count(&a.owned), 2, "revoking two");
        // b leaves before a acknowledges: a's target is every partition again.
        let mut leave = b.request("g", &["t"]);
        leave.member_epoch = LEAVE_GROUP_MEMBER_EPOCH;
        let (r, recs) = groups.heartbeat(30, &leave, &t);
        log.extend(recs);
        assert_eq!(r.error_code, NONE);
        beat(&mut groups, &mut log, 40, &mut a, &t);
        assert_eq!(count(&a.owned), 4);
        assert_eq!(groups.group_state("g"), Some("Stable"));
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    #[test]
    fn stale_and_future_epochs_are_fenced() {
        let t = topics(&[("t", 1, 2)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        beat(&mut groups, &mut log, 0, &mut a, &t);
        let mut ahead = a.request("g", &["t"]);
        ahead.member_epoch = 7;
        let (r, recs) = groups.heartbeat(1, &ahead, &t);
        assert_eq!(r.error_code, FENCED_MEMBER_EPOCH);
        assert!(recs.is_empty());
        let mut unknown = Client::new("zzz");
        unknown.epoch = 3;
        let (r, _) = groups.heartbeat(1, &unknown.request("g", &["t"]), &t);
        assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
        let (r, _) = groups.heartbeat(1, &unknown.request("nope", &["t"]), &t);
        assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
        // A rejoin at epoch 0 with the previous epoch and nothing owned is accepted.
        let mut rejoin = Client::new("a");
        let r = beat(&mut groups, &mut log, 2, &mut rejoin, &t);
        assert_eq!(r.member_epoch, 1);
        let t0 = [(Some(Uuid([1; 16])), 0)];
        assert_eq!(groups.validate_offset_commit("g", "a", 1, t0), Ok(()));
        // Partition 0 was assigned at epoch 1: a commit from epoch 0 is a zombie's.
        assert_eq!(
            groups.validate_offset_commit("g", "a", 0, t0),
            Err(STALE_MEMBER_EPOCH)
        );
        assert_eq!(
            groups.validate_offset_commit("g", "a", 2, t0),
            Err(STALE_MEMBER_EPOCH)
        );
        assert_eq!(
            groups.validate_offset_commit("g", "x", 1, t0),
            Err(UNKNOWN_MEMBER_ID)
        );
    }

    /// KIP-1251: an epoch bump that leaves a partition with its member does not fence that
    /// member's commits of it made at the older epoch; partitions it gained at the new epoch,
    /// lost, or never had are still fenced. The epochs survive a reload from the records.
    #[test]
    fn commits_from_an_older_epoch_are_accepted_for_partitions_held_since() {
        let t = topics(&[("t", 1, 4)]);
        let id = Uuid([1; 16]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        beat(&mut groups, &mut log, 0, &mut a, &t);
        assert_eq!((a.epoch, count(&a.owned)), (1, 4));
        // b joins: a revokes two partitions, then both reach the new epoch.
        let mut b = Client::new("b");
        for now in 1..4 {
            beat(&mut groups, &mut log, now, &mut a, &t);
            beat(&mut groups, &mut log, now, &mut b, &t);
        }
        assert_eq!(groups.group_state("g"), Some("Stable"));
        assert!(a.epoch > 1 && count(&a.owned) == 2 && count(&b.owned) == 2);
        let kept: Vec<(Option<TopicId>, i32)> =
            a.owned[&id].iter().map(|p| (Some(id), *p)).collect();
        let lost: Vec<(Option<TopicId>, i32)> =
            b.owned[&id].iter().map(|p| (Some(id), *p)).collect();
        for g in [&groups, &rebuild(&log)] {
            assert_eq!(g.validate_offset_commit("g", "a", 1, kept.clone()), Ok(()));
            assert_eq!(
                g.validate_offset_commit("g", "a", 1, lost.clone()),
                Err(STALE_MEMBER_EPOCH)
            );
            assert_eq!(
                g.validate_offset_commit("g", "a", 1, [(None, 0)]),
                Err(STALE_MEMBER_EPOCH)
            );
            // b got its partitions at its first epoch, which is the current one.
            assert_eq!(
                g.validate_offset_commit("g", "b", b.epoch - 1, lost.clone()),
                Err(STALE_MEMBER_EPOCH)
            );
            assert_eq!(
                g.validate_offset_commit("g", "b", b.epoch, lost.clone()),
                Ok(())
            );
        }
    }

    #[test]
    fn invalid_requests_change_nothing() {
        let t = topics(&[("t", 1, 2)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let base = Client::new("a").request("g", &["t"]);
        let cases: Vec<(ConsumerGroupHeartbeatRequest, i16)> = vec![
            (
                ConsumerGroupHeartbeatRequest {
                    group_id: String::new(),
                    ..base.clone()
                },
                INVALID_REQUEST,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    rebalance_timeout_ms: -1,
                    ..base.clone()
                },
                INVALID_REQUEST,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    topic_partitions: None,
                    ..base.clone()
                },
                INVALID_REQUEST,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    subscribed_topic_names: None,
                    ..base.clone()
                },
                INVALID_REQUEST,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    member_epoch: -3,
                    ..base.clone()
                },
                INVALID_REQUEST,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    server_assignor: Some("sticky".into()),
                    ..base.clone()
                },
                UNSUPPORTED_ASSIGNOR,
            ),
            (
                ConsumerGroupHeartbeatRequest {
                    subscribed_topic_regex: Some("(".into()),
                    ..base.clone()
                },
                INVALID_REGULAR_EXPRESSION,
            ),
        ];
        for (req, code) in cases {
            let (r, recs) = groups.heartbeat(0, &req, &t);
            assert_eq!(r.error_code, code, "{req:?}");
            assert!(recs.is_empty());
        }
        assert!(!groups.contains("g"));
    }

    #[test]
    fn session_expiry_removes_member_and_bumps_epoch() {
        let t = topics(&[("t", 1, 4)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let (mut a, mut b) = (Client::new("a"), Client::new("b"));
        beat(&mut groups, &mut log, 0, &mut a, &t);
        beat(&mut groups, &mut log, 0, &mut b, &t);
        assert_eq!(groups.next_deadline(), Some(45_000));
        beat(&mut groups, &mut log, 40_000, &mut a, &t);
        assert!(groups.tick(44_999).is_empty());
        let recs = groups.tick(45_000);
        assert!(!recs.is_empty());
        log.extend(recs);
        let g = &groups.groups["g"];
        assert!(!g.members.contains_key("b"));
        let epoch = g.group_epoch;
        beat(&mut groups, &mut log, 41_000, &mut a, &t);
        beat(&mut groups, &mut log, 41_000, &mut a, &t);
        assert_eq!((a.epoch, count(&a.owned)), (epoch, 4));
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    #[test]
    fn member_that_never_revokes_is_fenced_after_rebalance_timeout() {
        let t = topics(&[("t", 1, 4)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let (mut a, mut b) = (Client::new("a"), Client::new("b"));
        beat(&mut groups, &mut log, 0, &mut a, &t);
        beat(&mut groups, &mut log, 0, &mut b, &t);
        // a is told to revoke but keeps reporting everything it had.
        let stubborn = a.request("g", &["t"]);
        let (r, recs) = groups.heartbeat(100, &stubborn, &t);
        log.extend(recs);
        assert_eq!(
            count(
                &r.assignment
                    .unwrap()
                    .topic_partitions
                    .iter()
                    .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                    .collect()
            ),
            2
        );
        assert_eq!(
            groups.groups["g"].members["a"].state,
            MemberState::UnrevokedPartitions
        );
        let (_, recs) = groups.heartbeat(20_000, &stubborn, &t);
        log.extend(recs);
        assert_eq!(groups.next_deadline(), Some(30_100));
        log.extend(groups.tick(30_100));
        assert!(!groups.groups["g"].members.contains_key("a"));
        beat(&mut groups, &mut log, 30_200, &mut b, &t);
        beat(&mut groups, &mut log, 30_300, &mut b, &t);
        assert_eq!(count(&b.owned), 4);
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    #[test]
    fn regex_subscription_follows_new_topics() {
        let mut t = topics(&[("orders-1", 1, 2), ("other", 2, 2)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        let mut req = a.request("g", &[]);
        req.subscribed_topic_names = None;
        req.subscribed_topic_regex = Some("orders-.*".into());
        let (r, recs) = groups.heartbeat(0, &req, &t);
        log.extend(recs);
        a.adopt(&r);
        assert_eq!(a.owned.keys().collect::<Vec<_>>(), vec![&Uuid([1u8; 16])]);
        t = topics(&[("orders-1", 1, 2), ("other", 2, 2), ("orders-2", 3, 1)]);
        let mut next = a.request("g", &[]);
        next.subscribed_topic_names = None;
        let (r, recs) = groups.heartbeat(10, &next, &t);
        log.extend(recs);
        a.adopt(&r);
        assert_eq!(count(&a.owned), 3);
        assert_eq!(a.epoch, 2);
        assert_eq!(rebuild(&log).groups, groups.groups);
        let d = groups.describe(&["g".into(), "h".into()], &t);
        assert_eq!(
            d[0].members[0].subscribed_topic_regex.as_deref(),
            Some("orders-.*")
        );
        assert_eq!(d[0].members[0].assignment.topic_partitions.len(), 2);
        assert_eq!(d[1].error_code, GROUP_ID_NOT_FOUND);
    }

    #[test]
    fn static_member_leaves_and_rejoins_with_its_partitions() {
        let t = topics(&[("t", 1, 2)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        let mut req = a.request("g", &["t"]);
        req.instance_id = Some("i".into());
        let (r, recs) = groups.heartbeat(0, &req, &t);
        log.extend(recs);
        a.adopt(&r);
        let mut leave = a.request("g", &["t"]);
        leave.instance_id = Some("i".into());
        leave.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
        let (r, recs) = groups.heartbeat(5, &leave, &t);
        log.extend(recs);
        assert_eq!(r.member_epoch, -2);
        let mut a2 = Client::new("a2");
        let mut join = a2.request("g", &["t"]);
        join.instance_id = Some("i".into());
        let (r, recs) = groups.heartbeat(10, &join, &t);
        log.extend(recs);
        a2.adopt(&r);
        assert_eq!(count(&a2.owned), 2);
        assert_eq!(a2.epoch, 1, "no rebalance for a static member coming back");
        assert!(!groups.groups["g"].members.contains_key("a"));
        // The old incarnation is fenced by the new one.
        let mut stale = a.request("g", &["t"]);
        stale.instance_id = Some("i".into());
        stale.member_epoch = 1;
        assert_eq!(
            groups.heartbeat(11, &stale, &t).0.error_code,
            FENCED_INSTANCE_ID
        );
        // A second member with the same instance id cannot join while it is in use.
        let mut dup = Client::new("a3").request("g", &["t"]);
        dup.instance_id = Some("i".into());
        assert_eq!(
            groups.heartbeat(12, &dup, &t).0.error_code,
            UNRELEASED_INSTANCE_ID
        );
        assert_eq!(rebuild(&log).groups, groups.groups);
    }

    #[test]
    fn empty_group_can_be_deleted_and_tombstones_replay() {
        let t = topics(&[("t", 1, 2)]);
        let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
        let mut log = Vec::new();
        let mut a = Client::new("a");
        beat(&mut groups, &mut log, 0, &mut a, &t);
        assert_eq!(groups.delete_group("g"), Err(NON_EMPTY_GROUP));
        let mut leave = a.request("g", &["t"]);
        leave.member_epoch = -1;
        log.extend(groups.heartbeat(1, &leave, &t).1);
        assert_eq!(groups.list(), vec![("g".to_string(), "Empty")]);
        assert!(groups.is_empty("g"));
        log.extend(groups.delete_group("g").unwrap());
        assert!(!groups.contains("g"));
        assert!(rebuild(&log).groups.is_empty());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Join(usize),
            Beat(usize),
            Leave(usize),
            Advance(i64),
            AddPartitions,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                1 => (0usize..4).prop_map(Op::Join),
                4 => (0usize..4).prop_map(Op::Beat),
                1 => (0usize..4).prop_map(Op::Leave),
                1 => (1i64..40_000).prop_map(Op::Advance),
                1 => Just(Op::AddPartitions),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn a_partition_never_has_two_owners(ops in proptest::collection::vec(op(), 1..80),
                                                range in any::<bool>()) {
                let mut t = topics(&[("t", 1, 5), ("u", 2, 3)]);
                let mut groups = ConsumerGroups::new(ConsumerGroupConfig::default());
                let mut log = Vec::new();
                let mut clients: Vec<Option<Client>> = vec![None, None, None, None];
                let mut now = 0i64;
                for op in ops {
                    match op {
                        Op::Join(i) | Op::Beat(i) => {
                            let c = clients[i].get_or_insert_with(|| Client::new(&format!("m{i}")));
                            if matches!(op, Op::Join(_)) { c.epoch = 0; c.owned.clear(); }
                            let mut req = c.request("g", &["t", "u"]);
                            if range { req.server_assignor = Some("range".into()); }
                            let (r, recs) = groups.heartbeat(now, &req, &t);
                            log.extend(recs);
                            if r.error_code == NONE {
                                c.adopt(&r);
                            } else {
                                // Fenced or unknown: the client drops everything and rejoins.
                                prop_assert!(r.error_code == FENCED_MEMBER_EPOCH || r.error_code == UNKNOWN_MEMBER_ID);
                                *c = Client::new(&format!("m{i}"));
                            }
                        }
                        Op::Leave(i) => {
                            if let Some(c) = clients[i].take() {
                                let mut req = c.request("g", &["t", "u"]);
                                req.member_epoch = -1;
                                log.extend(groups.heartbeat(now, &req, &t).1);
                            }
                        }
                        Op::Advance(ms) => {
                            now += ms;
                            log.extend(groups.tick(now));
                        }
                        Op::AddPartitions => {
                            t = topics(&[("t", 1, 7), ("u", 2, 3)]);
                        }
                    }
                    assert_single_owner(&groups);
                    // What clients believe they own never overlaps either.
                    let mut seen = BTreeSet::new();
                    for c in clients.iter().flatten() {
                        let m = groups.groups.get("g").and_then(|g| g.members.get(&c.id));
                        if m.is_none() { continue; }
                        for (tp, ps) in &c.owned {
                            for p in ps { prop_assert!(seen.insert((*tp, *p))); }
                        }
                    }
                }
                prop_assert_eq!(&rebuild(&log).groups, &groups.groups);
            }
        }
    }
}
