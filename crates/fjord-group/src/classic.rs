//! One classic (JoinGroup/SyncGroup) group's in-memory state: members, generation, the
//! selected protocol, pending join and sync requests, and the group's timers as deadlines.
//! The protocol handlers that move it between states live in `shard`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::RequestId;

/// Kafka's classic group states, with the names DescribeGroups and ListGroups report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A parked request: its id and the version its response must be encoded in.
pub(crate) type Parked = (RequestId, i16);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<Parked>,
    pub awaiting_sync: Option<Parked>,
    /// Joined but not yet through a completed join phase: its session timer is the
    /// new-member join timeout and waiting does not count as a heartbeat.
    pub is_new: bool,
    /// When the member is expired unless it heartbeats; `None` when no timer is armed.
    pub heartbeat_deadline: Option<i64>,
}

impl Member {
    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    /// Whether a fired session timer leaves the member alone: members parked in a join or
    /// sync are covered by the rebalance timeouts instead.
    pub fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }

    pub fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// The join phase timer: the initial delay of a new group (extended while members keep
/// arriving, bounded by the rebalance timeout) or the rebalance timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinTimer {
    Initial { delay_ms: i64, remaining_ms: i64 },
    Rebalance,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassicGroup {
    pub group_id: String,
    pub state: GroupState,
    pub previous_state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id → member id of the static member holding it.
    pub static_members: BTreeMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with the deadline to rejoin by.
    pub pending_join: BTreeMap<String, i64>,
    /// Members that got a JoinGroup response of this generation but have not synced yet.
    pub pending_sync: BTreeSet<String>,
    /// A member joined during the initial delay, so the delay is extended once more.
    pub new_member_added: bool,
    pub join_deadline: Option<(i64, JoinTimer)>,
    /// (deadline, generation) by which every member must have sent SyncGroup.
    pub sync_deadline: Option<(i64, i32)>,
    pub current_state_timestamp: Option<i64>,
}

impl ClassicGroup {
    pub fn new(group_id: &str) -> Self {
        ClassicGroup {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_join: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
            join_deadline: None,
            sync_deadline: None,
            current_state_timestamp: None,
        }
    }

    pub fn transition(&mut self, state: GroupState, now_ms: i64) {
        self.previous_state = self.state;
        self.state = state;
        self.current_state_timestamp = Some(now_ms);
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    /// The largest rebalance timeout of the members: how long a join phase may take.
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    pub fn has_all_members_joined(&self) -> bool {
        self.pending_join.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub fn can_rebalance(&self) -> bool {
        matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        )
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> BTreeSet<&str> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return BTreeSet::new();
        };
        let mut common: BTreeSet<&str> = first.protocols.iter().map(|(n, _)| n.as_str()).collect();
        for m in members {
            common.retain(|name| m.protocols.iter().any(|(n, _)| n == name));
        }
        common
    }

    /// Whether a member with this protocol type and these protocols may join.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let common = self.candidate_protocols();
        protocols.iter().any(|(n, _)| common.contains(n.as_str()))
    }

    /// Each member votes for its most preferred protocol among those all members support;
    /// the most votes wins, ties going to the name that sorts first.
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(n.as_str()))
            {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    pub fn add_member(&mut self, member: Member, protocol_type: &str) {
        if self.members.is_empty() {
            self.protocol_type = Some(protocol_type.to_string());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.pending_join.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Drops a member; a departing leader is replaced by the first remaining member.
    pub fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        if self.members.is_empty() {
            self.protocol_type = None;
        }
        Some(member)
    }

    /// Moves the leadership to a member that rejoined when the leader has not. False when
    /// no member rejoined at all.
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join.is_some()) {
            Some(m) => {
                self.leader_id = Some(m.member_id.clone());
                true
            }
            None => false,
        }
    }

    /// Validates a member id (and instance id, for static members) as Kafka does for
    /// heartbeats, syncs and commits: an error code or `None`.
    pub fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Option<i16> {
        match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => Some(fjord_common::errors::UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => {
                    Some(fjord_common::errors::FENCED_INSTANCE_ID)
                }
                Some(_) => None,
            },
            None if !self.members.contains_key(member_id) => {
                Some(fjord_common::errors::UNKNOWN_MEMBER_ID)
            }
            None => None,
        }
    }

    /// The topics the members subscribe to, when every member uses the `consumer` protocol
    /// type with a readable subscription; `None` when unknown.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(crate::subscription::topics(m.metadata(protocol)?)?);
        }
        Some(topics)
    }
}
