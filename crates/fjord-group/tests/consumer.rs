//! KIP-848 consumer groups inside `GroupCoordinatorShard`, next to classic groups, with a
//! simulated clock: heartbeats, offsets validated by member epoch, listing, describing,
//! deleting, group-id conflicts between the two kinds, timers and replay. Every response is
//! also encoded at its request's version.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use fjord_common::errors::*;
use fjord_group::records::{self, RecordKey};
use fjord_group::{
    ClientInfo, CoordinatorRecord, Effects, GroupConfig, GroupCoordinatorShard, GroupState,
    RequestId, TopicInfo, Topics,
};
use fjord_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use fjord_protocol::messages::consumer_group_describe_response::DescribedGroup;
use fjord_protocol::messages::consumer_group_heartbeat_request::{
    self as hb_request, ConsumerGroupHeartbeatRequest,
};
use fjord_protocol::messages::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use fjord_protocol::messages::list_groups_request::ListGroupsRequest;
use fjord_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use fjord_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use fjord_protocol::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopic,
};
use fjord_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use fjord_protocol::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use fjord_protocol::{RequestBody, ResponseBody, Uuid};

const STALE_MEMBER_EPOCH: i16 = 113;
const T_ID: Uuid = Uuid([1; 16]);

struct Harness {
    shard: GroupCoordinatorShard,
    now: i64,
    next_id: RequestId,
    topics: Topics,
    records: Vec<CoordinatorRecord>,
}

impl Harness {
    fn new() -> Self {
        let mut by_name = BTreeMap::new();
        for (name, id, partitions) in [("t", T_ID, 4), ("u", Uuid([2; 16]), 1)] {
            by_name.insert(
                name.to_string(),
                TopicInfo {
                    name: name.into(),
                    topic_id: id,
                    partitions,
                },
            );
        }
        Harness {
            shard: GroupCoordinatorShard::new(GroupConfig::default()),
            now: 1_000_000,
            next_id: 1,
            topics: Topics { by_name },
            records: Vec::new(),
        }
    }

    /// A fresh shard loaded from every record this one wrote.
    fn replayed(&self) -> Harness {
        let mut other = Harness::new();
        other.now = self.now;
        for r in &self.records {
            other.shard.replay(r).unwrap();
        }
        other.records = self.records.clone();
        other
    }

    fn absorb(&mut self, fx: Effects, version: i16) -> Vec<ResponseBody> {
        self.records.extend(fx.records);
        fx.responses
            .into_iter()
            .map(|(_, response)| {
                let mut out = BytesMut::new();
                response
                    .encode(&mut out, version)
                    .unwrap_or_else(|e| panic!("{response:?} v{version}: {e}"));
                response
            })
            .collect()
    }

    /// Sends a request that is answered at once, and returns the answer and the records.
    fn send(
        &mut self,
        version: i16,
        request: RequestBody,
    ) -> (ResponseBody, Vec<CoordinatorRecord>) {
        let (mut responses, records) = self.send_any(version, request);
        assert_eq!(responses.len(), 1, "{responses:?}");
        (responses.remove(0), records)
    }

    /// Sends a request that may be parked: every response it released, and the records.
    fn send_any(
        &mut self,
        version: i16,
        request: RequestBody,
    ) -> (Vec<ResponseBody>, Vec<CoordinatorRecord>) {
        let id = self.next_id;
        self.next_id += 1;
        let client = ClientInfo {
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            ..ClientInfo::default()
        };
        let fx = self
            .shard
            .handle_from(self.now, id, version, request, &self.topics, &client);
        let records = fx.records.clone();
        (self.absorb(fx, version), records)
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
        let fx = self.shard.tick(self.now);
        self.absorb(fx, 0);
    }

    fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        epoch: i32,
        owned: Option<Vec<i32>>,
    ) -> (ConsumerGroupHeartbeatResponse, Vec<CoordinatorRecord>) {
        let joining = epoch == 0;
        let request = ConsumerGroupHeartbeatRequest {
            group_id: group.into(),
            member_id: member_id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if joining { 30_000 } else { -1 },
            subscribed_topic_names: joining.then(|| vec!["t".to_string()]),
            topic_partitions: owned.map(|ps| {
                if ps.is_empty() {
                    Vec::new()
                } else {
                    vec![hb_request::TopicPartitions {
                        topic_id: T_ID,
                        partitions: ps,
                    }]
                }
            }),
            ..Default::default()
        };
        match self.send(0, RequestBody::ConsumerGroupHeartbeat(request)) {
            (ResponseBody::ConsumerGroupHeartbeat(r), records) => (r, records),
            other => panic!("{other:?}"),
        }
    }

    /// A member joins `group` subscribed to "t" and acknowledges its assignment.
    fn join_consumer(&mut self, group: &str) -> (String, i32, Vec<i32>) {
        let (r, _) = self.heartbeat(group, "", 0, Some(Vec::new()));
        assert_eq!(r.error_code, NONE, "{r:?}");
        let member = r.member_id.clone().unwrap();
        let owned: Vec<i32> = r
            .assignment
            .map(|a| {
                a.topic_partitions
                    .into_iter()
                    .flat_map(|tp| tp.partitions)
                    .collect()
            })
            .unwrap_or_default();
        let (r2, _) = self.heartbeat(group, &member, r.member_epoch, Some(owned.clone()));
        assert_eq!(r2.error_code, NONE, "{r2:?}");
        (member, r2.member_epoch, owned)
    }

    fn commit(&mut self, version: i16, group: &str, member: &str, epoch: i32, offset: i64) -> i16 {
        let request = OffsetCommitRequest {
            group_id: group.into(),
            generation_id_or_member_epoch: epoch,
            member_id: member.into(),
            retention_time_ms: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: offset,
                    committed_leader_epoch: 3,
                    committed_metadata: Some("m".into()),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        match self.send(version, RequestBody::OffsetCommit(request)) {
            (ResponseBody::OffsetCommit(r), _) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn fetch(&mut self, group: &str, member: Option<&str>, epoch: i32) -> OffsetFetchResponseGroup {
        let request = OffsetFetchRequest {
            groups: vec![OffsetFetchRequestGroup {
                group_id: group.into(),
                member_id: member.map(String::from),
                member_epoch: epoch,
                topics: None,
            }],
            ..Default::default()
        };
        match self.send(9, RequestBody::OffsetFetch(request)) {
            (ResponseBody::OffsetFetch(mut r), _) => r.groups.remove(0),
            other => panic!("{other:?}"),
        }
    }

    /// The committed offset of t-0 through OffsetFetch v7 (no member fields).
    fn committed_v7(&mut self, group: &str) -> i64 {
        let request = OffsetFetchRequest {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "t".into(),
                partition_indexes: vec![0],
            }]),
            ..Default::default()
        };
        match self.send(7, RequestBody::OffsetFetch(request)) {
            (ResponseBody::OffsetFetch(r), _) => r.topics[0].partitions[0].committed_offset,
            other => panic!("{other:?}"),
        }
    }

    fn list(&mut self, states: &[&str], types: &[&str]) -> Vec<(String, String, String, String)> {
        let request = ListGroupsRequest {
            states_filter: states.iter().map(|s| s.to_string()).collect(),
            types_filter: types.iter().map(|s| s.to_string()).collect(),
        };
        match self.send(5, RequestBody::ListGroups(request)) {
            (ResponseBody::ListGroups(r), _) => r
                .groups
                .into_iter()
                .map(|g| (g.group_id, g.group_state, g.group_type, g.protocol_type))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn describe_consumer(&mut self, ids: &[&str]) -> Vec<DescribedGroup> {
        let request = ConsumerGroupDescribeRequest {
            group_ids: ids.iter().map(|s| s.to_string()).collect(),
            include_authorized_operations: false,
        };
        match self.send(0, RequestBody::ConsumerGroupDescribe(request)) {
            (ResponseBody::ConsumerGroupDescribe(r), _) => r.groups,
            other => panic!("{other:?}"),
        }
    }

    fn delete(&mut self, id: &str) -> (i16, Vec<CoordinatorRecord>) {
        let request = DeleteGroupsRequest {
            groups_names: vec![id.into()],
        };
        match self.send(2, RequestBody::DeleteGroups(request)) {
            (ResponseBody::DeleteGroups(r), records) => (r.results[0].error_code, records),
            other => panic!("{other:?}"),
        }
    }

    /// A classic JoinGroup; a parked join reads as error code -1.
    fn classic_join(
        &mut self,
        group: &str,
        member_id: &str,
    ) -> (i16, String, Vec<CoordinatorRecord>) {
        let request = JoinGroupRequest {
            group_id: group.into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            member_id: member_id.into(),
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: Bytes::from_static(b"m"),
            }],
            ..Default::default()
        };
        match self.send_any(9, RequestBody::JoinGroup(request)) {
            (responses, records) if responses.is_empty() => (-1, member_id.into(), records),
            (mut responses, records) => match responses.remove(0) {
                ResponseBody::JoinGroup(r) => (r.error_code, r.member_id, records),
                other => panic!("{other:?}"),
            },
        }
    }
}

fn keys(records: &[CoordinatorRecord]) -> Vec<(String, bool)> {
    records
        .iter()
        .map(|r| {
            let (key, value) = records::decode(r).unwrap();
            let kind = match key {
                RecordKey::OffsetCommit(_) => "OffsetCommit",
                RecordKey::GroupMetadata(_) => "GroupMetadata",
                RecordKey::ConsumerGroupMetadata(_) => "ConsumerGroupMetadata",
                RecordKey::ConsumerGroupPartitionMetadata(_) => "PartitionMetadata",
                RecordKey::ConsumerGroupMemberMetadata(_) => "MemberMetadata",
                RecordKey::ConsumerGroupTargetAssignmentMetadata(_) => "TargetMetadata",
                RecordKey::ConsumerGroupTargetAssignmentMember(_) => "TargetMember",
                RecordKey::ConsumerGroupCurrentMemberAssignment(_) => "CurrentAssignment",
                _ => "ShareGroup",
            };
            (kind.to_string(), value.is_some())
        })
        .collect()
}

#[test]
fn each_new_target_assignment_counts_one_rebalance() {
    let mut h = Harness::new();
    h.join_consumer("cg");
    assert_eq!(h.shard.take_rebalances(), (0, 1, 0));
    h.join_consumer("cg");
    assert_eq!(h.shard.take_rebalances(), (0, 1, 0));
    assert_eq!(h.shard.take_rebalances(), (0, 0, 0), "taken once");
}

#[test]
fn a_consumer_group_joins_and_commits_and_fetches_with_its_member_epoch() {
    let mut h = Harness::new();
    let (member, epoch, owned) = h.join_consumer("cg");
    assert_eq!(owned, vec![0, 1, 2, 3]);
    assert_eq!(h.shard.consumer_group_state("cg"), Some("Stable"));
    assert_eq!(h.shard.group_state("cg"), None);

    assert_eq!(h.commit(9, "cg", &member, epoch, 42), NONE);
    assert_eq!(
        h.commit(9, "cg", &member, epoch + 1, 43),
        STALE_MEMBER_EPOCH
    );
    assert_eq!(h.commit(9, "cg", "stranger", epoch, 43), UNKNOWN_MEMBER_ID);
    // A consumer-protocol member must use OffsetCommit v9+.
    assert_eq!(h.commit(8, "cg", &member, epoch, 43), UNSUPPORTED_VERSION);
    // Group-less commits are refused while the group has members.
    assert_eq!(h.commit(9, "cg", "", -1, 43), UNKNOWN_MEMBER_ID);
    assert_eq!(h.committed_v7("cg"), 42);

    let g = h.fetch("cg", Some(&member), epoch);
    assert_eq!(g.error_code, NONE);
    assert_eq!(g.topics[0].partitions[0].committed_offset, 42);
    assert_eq!(g.topics[0].partitions[0].committed_leader_epoch, 3);
    assert_eq!(
        h.fetch("cg", Some(&member), epoch + 5).error_code,
        STALE_MEMBER_EPOCH
    );
    assert!(h.fetch("cg", Some(&member), epoch + 5).topics.is_empty());
    assert_eq!(
        h.fetch("cg", Some("stranger"), epoch).error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(h.fetch("cg", None, -1).error_code, NONE);

    // Once the member leaves, an admin (epoch -1) may commit at any version.
    let (r, _) = h.heartbeat("cg", &member, -1, None);
    assert_eq!(r.error_code, NONE);
    assert_eq!(h.shard.consumer_group_state("cg"), Some("Empty"));
    assert_eq!(h.commit(2, "cg", "", -1, 7), NONE);
    assert_eq!(h.committed_v7("cg"), 7);
}

#[test]
fn list_groups_shows_both_kinds_with_state_and_type_filters() {
    let mut h = Harness::new();
    assert_eq!(h.commit(9, "simple", "", -1, 1), NONE);
    h.join_consumer("cg");
    let all = h.list(&[], &[]);
    assert_eq!(
        all,
        vec![
            (
                "cg".into(),
                "Stable".into(),
                "consumer".into(),
                "consumer".into()
            ),
            (
                "simple".into(),
                "Empty".into(),
                "classic".into(),
                String::new()
            ),
        ]
    );
    assert_eq!(h.list(&[], &["Consumer"]).len(), 1);
    assert_eq!(h.list(&[], &["consumer"])[0].0, "cg");
    assert_eq!(h.list(&[], &["classic"])[0].0, "simple");
    assert_eq!(h.list(&[], &["classic", "consumer"]).len(), 2);
    assert!(h.list(&[], &["share"]).is_empty());
    assert_eq!(h.list(&[" stable "], &[])[0].0, "cg");
    assert_eq!(h.list(&["EMPTY"], &[])[0].0, "simple");
    assert!(h.list(&["empty"], &["consumer"]).is_empty());
    assert!(h.list(&["Assigning"], &[]).is_empty());
}

#[test]
fn describing_consumer_and_classic_groups() {
    let mut h = Harness::new();
    assert_eq!(h.commit(9, "simple", "", -1, 1), NONE);
    let (member, epoch, _) = h.join_consumer("cg");
    let d = h.describe_consumer(&["cg", "simple", "nope", ""]);
    assert_eq!(d[0].error_code, NONE);
    assert_eq!(d[0].group_state, "Stable");
    assert_eq!(d[0].assignor_name, "uniform");
    assert_eq!(d[0].members.len(), 1);
    assert_eq!(d[0].members[0].member_id, member);
    assert_eq!(d[0].members[0].member_epoch, epoch);
    assert_eq!(d[0].members[0].client_id, "client");
    assert_eq!(
        d[0].members[0].assignment.topic_partitions[0].topic_name,
        "t"
    );
    // A classic group is not a consumer group.
    assert_eq!(d[1].error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(d[2].error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(d[3].error_code, INVALID_GROUP_ID);

    // DescribeGroups knows only classic groups: a consumer group reads as Dead.
    let request = DescribeGroupsRequest {
        groups: vec!["cg".into(), "simple".into()],
        include_authorized_operations: false,
    };
    let (ResponseBody::DescribeGroups(r), _) = h.send(5, RequestBody::DescribeGroups(request))
    else {
        panic!()
    };
    assert_eq!(r.groups[0].error_code, NONE);
    assert_eq!(r.groups[0].group_state, "Dead");
    assert!(r.groups[0].members.is_empty());
    assert_eq!(r.groups[1].group_state, "Empty");
    // From v6 (KIP-1043) it is refused GROUP_ID_NOT_FOUND, as an unknown group is, with Kafka's
    // messages; a classic group is described as before.
    let request = DescribeGroupsRequest {
        groups: vec!["cg".into(), "simple".into(), "nope".into()],
        include_authorized_operations: false,
    };
    let (ResponseBody::DescribeGroups(r), _) = h.send(6, RequestBody::DescribeGroups(request))
    else {
        panic!()
    };
    let seen: Vec<(i16, Option<&str>, &str)> = r
        .groups
        .iter()
        .map(|g| {
            (
                g.error_code,
                g.error_message.as_deref(),
                g.group_state.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                GROUP_ID_NOT_FOUND,
                Some("Group cg is not a classic group."),
                "Dead"
            ),
            (NONE, None, "Empty"),
            (GROUP_ID_NOT_FOUND, Some("Group nope not found."), "Dead"),
        ]
    );
    // ConsumerGroupDescribe v1 (KIP-1099) says each member speaks the consumer protocol.
    assert_eq!(d[0].members[0].member_type, 1);
}

#[test]
fn deleting_a_consumer_group_deletes_its_offsets_too() {
    let mut h = Harness::new();
    let (member, epoch, _) = h.join_consumer("cg");
    assert_eq!(h.commit(9, "cg", &member, epoch, 42), NONE);
    assert_eq!(h.delete("cg").0, NON_EMPTY_GROUP);
    h.heartbeat("cg", &member, -1, None);
    let (code, records) = h.delete("cg");
    assert_eq!(code, NONE);
    let kinds = keys(&records);
    assert_eq!(kinds[0], ("OffsetCommit".to_string(), false));
    assert_eq!(
        kinds.last().unwrap(),
        &("ConsumerGroupMetadata".to_string(), false)
    );
    assert!(kinds.iter().all(|(_, value)| !value));
    assert_eq!(h.committed_v7("cg"), -1);
    assert!(h.list(&[], &[]).is_empty());
    assert_eq!(
        h.describe_consumer(&["cg"])[0].error_code,
        GROUP_ID_NOT_FOUND
    );
    assert_eq!(h.delete("cg").0, GROUP_ID_NOT_FOUND);
    // The id is free for a new consumer group.
    h.join_consumer("cg");
    assert_eq!(h.shard.consumer_group_state("cg"), Some("Stable"));
}

#[test]
fn group_id_conflicts_between_classic_and_consumer_groups() {
    let mut h = Harness::new();

    // A classic join to a consumer group with members.
    let (member, _, _) = h.join_consumer("cg");
    let (code, _, records) = h.classic_join("cg", "");
    assert_eq!(code, INCONSISTENT_GROUP_PROTOCOL);
    assert!(records.is_empty());

    // A consumer-protocol heartbeat to a classic group with members.
    let (code, id, _) = h.classic_join("classic", "");
    assert_eq!(code, MEMBER_ID_REQUIRED);
    assert_eq!(h.classic_join("classic", &id).0, -1);
    assert_eq!(
        h.shard.group_state("classic"),
        Some(GroupState::PreparingRebalance)
    );
    let (r, records) = h.heartbeat("classic", "", 0, Some(Vec::new()));
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND);
    assert!(records.is_empty());
    let (r, _) = h.heartbeat("classic", "m", 3, Some(Vec::new()));
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND);
    // Malformed heartbeats are INVALID_REQUEST whatever the group.
    let (r, _) = h.heartbeat("classic", "", 3, None);
    assert_eq!(r.error_code, INVALID_REQUEST);

    // An empty classic group gives way to a consumer group; its offsets stay.
    assert_eq!(h.commit(9, "simple", "", -1, 11), NONE);
    let (r, records) = h.heartbeat("simple", "", 0, Some(Vec::new()));
    assert_eq!(r.error_code, NONE);
    assert_eq!(keys(&records)[0], ("GroupMetadata".to_string(), false));
    assert_eq!(h.shard.group_state("simple"), None);
    assert_eq!(h.shard.consumer_group_state("simple"), Some("Stable"));
    assert_eq!(h.committed_v7("simple"), 11);

    // An empty consumer group gives way to a classic group; its offsets stay.
    let (r, _) = h.heartbeat("cg", &member, -1, None);
    assert_eq!(r.error_code, NONE);
    assert_eq!(h.commit(9, "cg", "", -1, 5), NONE);
    assert_eq!(h.classic_join("cg", "someone").0, UNKNOWN_MEMBER_ID);
    assert!(h.shard.consumer_group_state("cg").is_some());
    let (code, _, records) = h.classic_join("cg", "");
    assert_eq!(code, MEMBER_ID_REQUIRED);
    assert!(keys(&records).contains(&("ConsumerGroupMetadata".to_string(), false)));
    assert_eq!(h.shard.consumer_group_state("cg"), None);
    assert_eq!(h.shard.group_state("cg"), Some(GroupState::Empty));
    assert_eq!(h.committed_v7("cg"), 5);

    // The log says the same (the classic group still in its first join is not in the log
    // yet, as in Kafka).
    let mut loaded = h.replayed();
    assert_eq!(
        loaded.list(&["Empty", "Stable"], &[]),
        h.list(&["Empty", "Stable"], &[])
    );
    assert_eq!(loaded.list(&[], &[]).len(), 2);
    assert_eq!(loaded.committed_v7("cg"), 5);
    assert_eq!(loaded.committed_v7("simple"), 11);
}

#[test]
fn offset_delete_respects_the_consumer_groups_subscriptions() {
    let mut h = Harness::new();
    let (member, epoch, _) = h.join_consumer("cg");
    assert_eq!(h.commit(9, "cg", &member, epoch, 42), NONE);
    let request = OffsetDeleteRequest {
        group_id: "cg".into(),
        topics: ["t", "u"]
            .iter()
            .map(|t| OffsetDeleteRequestTopic {
                name: (*t).into(),
                partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
            })
            .collect(),
    };
    let (ResponseBody::OffsetDelete(r), _) = h.send(0, RequestBody::OffsetDelete(request)) else {
        panic!()
    };
    assert_eq!(r.error_code, NONE);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    assert_eq!(r.topics[1].partitions[0].error_code, NONE);
    assert_eq!(h.committed_v7("cg"), 42);
}

#[test]
fn silent_members_expire_and_empty_groups_lose_offsets_after_retention() {
    let mut h = Harness::new();
    let (member, epoch, _) = h.join_consumer("cg");
    assert_eq!(h.commit(9, "cg", &member, epoch, 42), NONE);
    let deadline = h.shard.next_deadline().unwrap();
    assert!(deadline <= h.now + 45_000, "{deadline}");
    h.advance(44_000);
    assert_eq!(h.shard.consumer_group_state("cg"), Some("Stable"));
    h.advance(2_000);
    assert_eq!(h.shard.consumer_group_state("cg"), Some("Empty"));
    let (r, _) = h.heartbeat("cg", &member, epoch, None);
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);

    // offsets.retention.minutes after the commit, the offsets go, then the empty group.
    let retention = GroupConfig::default().offsets_retention_ms();
    h.advance(retention);
    assert_eq!(h.committed_v7("cg"), -1);
    assert_eq!(h.shard.consumer_group_state("cg"), None);
    assert!(h.list(&[], &[]).is_empty());
}

#[test]
fn replaying_the_shards_records_gives_the_same_answers_and_rearms_timers() {
    let mut h = Harness::new();
    assert_eq!(h.commit(9, "simple", "", -1, 1), NONE);
    let (code, id, _) = h.classic_join("classic", "");
    assert_eq!(code, MEMBER_ID_REQUIRED);
    h.classic_join("classic", &id);
    h.advance(3_000);
    // The classic group is persisted when its leader's assignment is in.
    let sync = SyncGroupRequest {
        group_id: "classic".into(),
        generation_id: 1,
        member_id: id.clone(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: id.clone(),
            assignment: Bytes::from_static(b"a"),
        }],
        ..Default::default()
    };
    let (ResponseBody::SyncGroup(r), _) = h.send(5, RequestBody::SyncGroup(sync)) else {
        panic!()
    };
    assert_eq!(r.error_code, NONE);
    assert_eq!(h.shard.group_state("classic"), Some(GroupState::Stable));
    let (a, epoch_a, _) = h.join_consumer("cg");
    let (r, _) = h.heartbeat("cg", "", 0, Some(Vec::new()));
    let b = r.member_id.unwrap();
    // Member a gives up what moves to b; b then takes it.
    let (ra, _) = h.heartbeat("cg", &a, epoch_a, Some(vec![0, 1, 2, 3]));
    let kept: Vec<i32> = ra
        .assignment
        .map(|x| {
            x.topic_partitions
                .into_iter()
                .flat_map(|t| t.partitions)
                .collect()
        })
        .unwrap_or_else(|| vec![0, 1, 2, 3]);
    h.heartbeat("cg", &a, ra.member_epoch, Some(kept));
    let (rb, _) = h.heartbeat("cg", &b, r.member_epoch, Some(Vec::new()));
    assert_eq!(rb.error_code, NONE);
    assert_eq!(h.commit(9, "cg", &b, rb.member_epoch, 9), NONE);

    let mut loaded = h.replayed();
    assert_eq!(loaded.list(&[], &[]), h.list(&[], &[]));
    assert_eq!(
        loaded.describe_consumer(&["cg", "classic"]),
        h.describe_consumer(&["cg", "classic"])
    );
    assert_eq!(
        loaded.fetch("cg", Some(&b), rb.member_epoch),
        h.fetch("cg", Some(&b), rb.member_epoch)
    );
    assert_eq!(loaded.committed_v7("simple"), 1);
    assert_eq!(
        loaded.shard.group_state("classic"),
        h.shard.group_state("classic")
    );

    // The loaded members heartbeat on; a silent one expires a session after loading.
    let (r, _) = loaded.heartbeat("cg", &b, rb.member_epoch, None);
    assert_eq!(r.error_code, NONE);
    for _ in 0..5 {
        loaded.advance(10_000);
        let (r, _) = loaded.heartbeat("cg", &b, rb.member_epoch, None);
        assert_eq!(r.error_code, NONE, "{r:?}");
    }
    let d = loaded.describe_consumer(&["cg"]);
    assert_eq!(d[0].members.len(), 1);
    assert_eq!(d[0].members[0].member_id, b);
}
