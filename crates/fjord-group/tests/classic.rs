//! The classic group protocol and committed offsets, driven through `GroupCoordinatorShard`
//! with a simulated clock. Every response is also encoded at its request's version.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::too_many_arguments
)]

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use fjord_common::errors::*;
use fjord_group::{
    ClientInfo, Effects, GroupConfig, GroupCoordinatorShard, GroupState, RequestId, TopicInfo,
    Topics,
};
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::heartbeat_request::HeartbeatRequest;
use fjord_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use fjord_protocol::messages::join_group_response::JoinGroupResponse;
use fjord_protocol::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use fjord_protocol::messages::list_groups_request::ListGroupsRequest;
use fjord_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use fjord_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use fjord_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use fjord_protocol::messages::sync_group_request::{SyncGroupRequest, SyncGroupRequestAssignment};
use fjord_protocol::messages::sync_group_response::SyncGroupResponse;
use fjord_protocol::{RequestBody, ResponseBody};

const G: &str = "g";
const JOIN_V: i16 = 9;

#[derive(Clone)]
enum Logged {
    /// A record, with the producer id of its transactional batch.
    Record(Option<i64>, fjord_group::CoordinatorRecord),
    /// A commit (true) or abort marker of a producer's transaction.
    Marker(i64, bool),
}

struct Harness {
    shard: GroupCoordinatorShard,
    now: i64,
    next_id: RequestId,
    topics: Topics,
    records: Vec<fjord_group::CoordinatorRecord>,
    /// The shard's partition as the broker writes it: each record with the transaction it was
    /// written in, and the markers that decided transactions.
    log: Vec<Logged>,
    /// Responses not yet taken by a test, by request id.
    responses: BTreeMap<RequestId, (i16, ResponseBody)>,
    versions: BTreeMap<RequestId, i16>,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(GroupConfig::default())
    }

    fn with_config(config: GroupConfig) -> Self {
        let mut by_name = BTreeMap::new();
        by_name.insert(
            "t".to_string(),
            TopicInfo {
                name: "t".into(),
                topic_id: fjord_common::Uuid([1; 16]),
                partitions: 4,
            },
        );
        by_name.insert(
            "u".to_string(),
            TopicInfo {
                name: "u".into(),
                topic_id: fjord_common::Uuid([2; 16]),
                partitions: 1,
            },
        );
        Harness {
            shard: GroupCoordinatorShard::new(config),
            now: 1_000_000,
            next_id: 1,
            topics: Topics { by_name },
            records: Vec::new(),
            log: Vec::new(),
            responses: BTreeMap::new(),
            versions: BTreeMap::new(),
        }
    }

    fn absorb(&mut self, fx: Effects) {
        let producer = fx.transaction.map(|t| t.producer_id);
        for record in &fx.records {
            self.log.push(Logged::Record(producer, record.clone()));
        }
        self.records.extend(fx.records);
        for (id, response) in fx.responses {
            let version = self.versions[&id];
            // Every response must be encodable at its request's version.
            let mut out = BytesMut::new();
            response
                .encode(&mut out, version)
                .unwrap_or_else(|e| panic!("{response:?} v{version}: {e}"));
            assert!(
                self.responses.insert(id, (version, response)).is_none(),
                "two responses for {id}"
            );
        }
    }

    fn send(&mut self, version: i16, request: RequestBody) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        self.versions.insert(id, version);
        let client = ClientInfo {
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            ..ClientInfo::default()
        };
        let fx = self
            .shard
            .handle_from(self.now, id, version, request, &self.topics, &client);
        self.absorb(fx);
        id
    }

    fn take(&mut self, id: RequestId) -> Option<ResponseBody> {
        self.responses.remove(&id).map(|(_, r)| r)
    }

    fn advance(&mut self, ms: i64) {
        let target = self.now + ms;
        while let Some(deadline) = self.shard.next_deadline().filter(|&d| d <= target) {
            self.now = deadline.max(self.now);
            let fx = self.shard.tick(self.now);
            self.absorb(fx);
            if self.shard.next_deadline() == Some(deadline) {
                break;
            }
        }
        self.now = target;
        let fx = self.shard.tick(self.now);
        self.absorb(fx);
    }

    fn join_req(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        protocols: &[(&str, &[u8])],
    ) -> RequestId {
        self.send(
            JOIN_V,
            RequestBody::JoinGroup(JoinGroupRequest {
                group_id: G.into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 30_000,
                member_id: member_id.into(),
                group_instance_id: instance.map(String::from),
                protocol_type: "consumer".into(),
                protocols: protocols
                    .iter()
                    .map(|(n, m)| JoinGroupRequestProtocol {
                        name: (*n).into(),
                        metadata: Bytes::copy_from_slice(m),
                    })
                    .collect(),
                reason: None,
            }),
        )
    }

    fn join(&mut self, member_id: &str) -> RequestId {
        self.join_req(member_id, None, &[("range", b"m")])
    }

    /// A dynamic member's first join: MEMBER_ID_REQUIRED, then the join with the id.
    fn new_member(&mut self) -> (String, RequestId) {
        let id = self.join("");
        let r = join_resp(self.take(id));
        assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
        assert!(r.member_id.starts_with("client-"));
        let req = self.join(&r.member_id);
        (r.member_id, req)
    }

    fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        assignments: &[(&str, &[u8])],
    ) -> RequestId {
        self.send(
            5,
            RequestBody::SyncGroup(SyncGroupRequest {
                group_id: G.into(),
                generation_id: generation,
                member_id: member_id.into(),
                group_instance_id: None,
                protocol_type: Some("consumer".into()),
                protocol_name: Some("range".into()),
                assignments: assignments
                    .iter()
                    .map(|(m, a)| SyncGroupRequestAssignment {
                        member_id: (*m).into(),
                        assignment: Bytes::copy_from_slice(a),
                    })
                    .collect(),
            }),
        )
    }

    fn heartbeat(&mut self, member_id: &str, generation: i32) -> i16 {
        let id = self.send(
            4,
            RequestBody::Heartbeat(HeartbeatRequest {
                group_id: G.into(),
                generation_id: generation,
                member_id: member_id.into(),
                group_instance_id: None,
            }),
        );
        match self.take(id) {
            Some(ResponseBody::Heartbeat(r)) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    fn commit(
        &mut self,
        version: i16,
        member_id: &str,
        generation: i32,
        topic: &str,
        partition: i32,
        offset: i64,
        metadata: &str,
    ) -> i16 {
        let id = self.send(
            version,
            RequestBody::OffsetCommit(OffsetCommitRequest {
                group_id: G.into(),
                generation_id_or_member_epoch: generation,
                member_id: member_id.into(),
                group_instance_id: None,
                retention_time_ms: -1,
                topics: vec![OffsetCommitRequestTopic {
                    name: topic.into(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: partition,
                        committed_offset: offset,
                        committed_leader_epoch: 3,
                        committed_metadata: Some(metadata.into()),
                    }],
                    ..Default::default()
                }],
            }),
        );
        match self.take(id) {
            Some(ResponseBody::OffsetCommit(r)) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// (topic, partition) → (offset, leader epoch, metadata) for every committed offset.
    fn fetch_all(&mut self) -> Vec<(String, i32, i64, i32, String)> {
        let id = self.send(
            7,
            RequestBody::OffsetFetch(OffsetFetchRequest {
                group_id: G.into(),
                topics: None,
                ..Default::default()
            }),
        );
        let Some(ResponseBody::OffsetFetch(r)) = self.take(id) else {
            panic!()
        };
        r.topics
            .into_iter()
            .flat_map(|t| {
                t.partitions.into_iter().map(move |p| {
                    (
                        t.name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.unwrap_or_default(),
                    )
                })
            })
            .collect()
    }

    fn describe(&mut self) -> fjord_protocol::messages::describe_groups_response::DescribedGroup {
        let id = self.send(
            5,
            RequestBody::DescribeGroups(DescribeGroupsRequest {
                groups: vec![G.into()],
                include_authorized_operations: false,
            }),
        );
        let Some(ResponseBody::DescribeGroups(mut r)) = self.take(id) else {
            panic!()
        };
        r.groups.remove(0)
    }

    fn state(&self) -> Option<GroupState> {
        self.shard.group_state(G)
    }

    /// One member through join (after the initial delay) and sync: returns its id.
    fn stable_single(&mut self) -> String {
        let (m, req) = self.new_member();
        assert_eq!(self.state(), Some(GroupState::PreparingRebalance));
        self.advance(3_000);
        let r = join_resp(self.take(req));
        assert_eq!(
            (r.error_code, r.generation_id, r.leader.as_str()),
            (NONE, 1, m.as_str())
        );
        let s = self.sync(&m, 1, &[(m.as_str(), b"a1")]);
        assert_eq!(sync_resp(self.take(s)).assignment.as_ref(), b"a1");
        assert_eq!(self.state(), Some(GroupState::Stable));
        m
    }
}

fn join_resp(r: Option<ResponseBody>) -> JoinGroupResponse {
    match r {
        Some(ResponseBody::JoinGroup(r)) => r,
        other => panic!("expected a JoinGroup response, got {other:?}"),
    }
}

fn sync_resp(r: Option<ResponseBody>) -> SyncGroupResponse {
    match r {
        Some(ResponseBody::SyncGroup(r)) => r,
        other => panic!("expected a SyncGroup response, got {other:?}"),
    }
}

#[test]
fn first_join_needs_a_member_id_then_waits_out_the_initial_delay() {
    let mut h = Harness::new();
    let (m, req) = h.new_member();
    assert!(h.take(req).is_none(), "parked during the initial delay");
    h.advance(2_999);
    assert!(h.take(req).is_none());
    h.advance(1);
    let r = join_resp(h.take(req));
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
    // Heartbeats are fine while the leader computes the assignment.
    assert_eq!(h.heartbeat(&m, 1), NONE);
    let s = h.sync(&m, 1, &[(m.as_str(), b"x")]);
    let s = sync_resp(h.take(s));
    assert_eq!(
        (s.error_code, s.protocol_name.as_deref()),
        (NONE, Some("range"))
    );
    assert_eq!(
        h.records.len(),
        1,
        "GroupMetadata written when the assignment completes"
    );
    assert_eq!(h.heartbeat(&m, 1), NONE);
    assert_eq!(h.heartbeat(&m, 0), ILLEGAL_GENERATION);
    assert_eq!(h.heartbeat("nobody", 1), UNKNOWN_MEMBER_ID);
}

#[test]
fn initial_delay_is_extended_while_members_arrive_but_bounded_by_the_rebalance_timeout() {
    let mut h = Harness::new();
    let (_, a) = h.new_member();
    let mut parked = vec![a];
    // A new member every 2.5 s keeps extending the 3 s delay; the 30 s rebalance timeout caps it.
    for _ in 0..20 {
        h.advance(2_500);
        if h.state() != Some(GroupState::PreparingRebalance) {
            break;
        }
        let (_, req) = h.new_member();
        parked.push(req);
    }
    assert_eq!(h.state(), Some(GroupState::CompletingRebalance));
    assert!(
        h.now - 1_000_000 <= 33_000,
        "completed within delay + rebalance timeout"
    );
    assert!(h.now - 1_000_000 > 3_000, "but later than a single delay");
    for req in parked {
        assert_eq!(join_resp(h.take(req)).error_code, NONE);
    }
}

#[test]
fn a_second_member_triggers_a_rebalance_seen_through_heartbeats() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let (b, b_req) = h.new_member();
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    assert!(h.take(b_req).is_none());
    assert_eq!(h.heartbeat(&a, 1), REBALANCE_IN_PROGRESS);
    // Commits of the old generation are still accepted while rebalancing (revocation).
    assert_eq!(h.commit(8, &a, 1, "t", 0, 5, ""), NONE);
    let a_req = h.join(&a);
    let ra = join_resp(h.take(a_req));
    let rb = join_resp(h.take(b_req));
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader, a);
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty());
    // The follower's sync waits for the leader's.
    let sb = h.sync(&b, 2, &[]);
    assert!(h.take(sb).is_none());
    assert_eq!(h.commit(8, &a, 2, "t", 0, 6, ""), REBALANCE_IN_PROGRESS);
    let sa = h.sync(&a, 2, &[(a.as_str(), b"A"), (b.as_str(), b"B")]);
    assert_eq!(sync_resp(h.take(sa)).assignment.as_ref(), b"A");
    assert_eq!(sync_resp(h.take(sb)).assignment.as_ref(), b"B");
    assert_eq!(h.state(), Some(GroupState::Stable));
    let d = h.describe();
    assert_eq!(
        (
            d.group_state.as_str(),
            d.protocol_data.as_str(),
            d.members.len()
        ),
        ("Stable", "range", 2)
    );
    assert_eq!(d.members[0].client_id, "client");
}

#[test]
fn session_expiry_removes_a_silent_member_and_empties_the_group() {
    let mut h = Harness::new();
    let m = h.stable_single();
    h.advance(9_000);
    assert_eq!(h.heartbeat(&m, 1), NONE);
    h.advance(9_999);
    assert_eq!(h.state(), Some(GroupState::Stable));
    h.advance(1);
    assert_eq!(h.state(), Some(GroupState::Empty));
    assert_eq!(h.heartbeat(&m, 1), UNKNOWN_MEMBER_ID);
    assert_eq!(h.describe().group_state, "Empty");
    // The empty generation is persisted: generation 2, no members.
    let last = h.records.last().unwrap().clone();
    let (_, value) = fjord_group::records::decode(&last).unwrap();
    let Some(fjord_group::records::RecordValue::GroupMetadata(v)) = value else {
        panic!()
    };
    assert_eq!((v.generation, v.members.len(), v.protocol), (2, 0, None));
}

#[test]
fn members_that_miss_the_rebalance_timeout_are_removed() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let (b, b_req) = h.new_member();
    // a keeps heartbeating but never rejoins.
    for _ in 0..3 {
        h.advance(9_000);
        assert_eq!(h.heartbeat(&a, 1), REBALANCE_IN_PROGRESS);
    }
    h.advance(3_000);
    let rb = join_resp(h.take(b_req));
    assert_eq!(
        (rb.error_code, rb.generation_id, rb.leader.as_str()),
        (NONE, 2, b.as_str())
    );
    assert_eq!(h.heartbeat(&a, 1), UNKNOWN_MEMBER_ID);
}

#[test]
fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
    let mut h = Harness::new();
    let (a, a_req) = h.new_member();
    let (b, b_req) = h.new_member();
    // The second arrival extended the initial delay once.
    h.advance(3_000);
    assert!(h.take(a_req).is_none());
    h.advance(3_000);
    assert_eq!(join_resp(h.take(a_req)).generation_id, 1);
    assert_eq!(join_resp(h.take(b_req)).generation_id, 1);
    // Nobody syncs; both keep heartbeating until the sync deadline passes.
    for _ in 0..4 {
        h.advance(7_000);
        h.heartbeat(&a, 1);
        h.heartbeat(&b, 1);
    }
    h.advance(3_000);
    assert_eq!(h.state(), Some(GroupState::Empty));
}

#[test]
fn each_generation_with_members_counts_one_rebalance() {
    let mut h = Harness::new();
    let a = h.stable_single();
    assert_eq!(h.shard.take_rebalances(), (1, 0, 0));
    assert_eq!(h.shard.take_rebalances(), (0, 0, 0), "taken once");
    let (_, b_req) = h.new_member();
    let a_req = h.join(&a);
    assert_eq!(join_resp(h.take(a_req)).generation_id, 2);
    join_resp(h.take(b_req));
    assert_eq!(h.shard.take_rebalances(), (1, 0, 0));
}

#[test]
fn leaving_members_answer_parked_requests_and_rebalance_the_rest() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let (b, b_req) = h.new_member();
    let a_req = h.join(&a);
    assert_eq!(join_resp(h.take(a_req)).generation_id, 2);
    join_resp(h.take(b_req));
    let sa = h.sync(&a, 2, &[(a.as_str(), b"A"), (b.as_str(), b"B")]);
    sync_resp(h.take(sa));
    let id = h.send(
        4,
        RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: G.into(),
            members: vec![
                MemberIdentity {
                    member_id: b.clone(),
                    group_instance_id: None,
                    reason: None,
                },
                MemberIdentity {
                    member_id: "ghost".into(),
                    group_instance_id: None,
                    reason: None,
                },
            ],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::LeaveGroup(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        r.members.iter().map(|m| m.error_code).collect::<Vec<_>>(),
        vec![NONE, UNKNOWN_MEMBER_ID]
    );
    assert_eq!(h.state(), Some(GroupState::PreparingRebalance));
    let a_req = h.join(&a);
    let ra = join_resp(h.take(a_req));
    assert_eq!((ra.generation_id, ra.members.len()), (3, 1));
    // v0-2: one member, error at the top level.
    let id = h.send(
        1,
        RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: G.into(),
            member_id: "ghost".into(),
            ..Default::default()
        }),
    );
    let Some(ResponseBody::LeaveGroup(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn static_member_replacement_keeps_its_assignment_and_fences_the_old_id() {
    let mut h = Harness::new();
    let req = h.join_req("", Some("i1"), &[("range", b"m")]);
    assert!(
        h.take(req).is_none(),
        "static members skip MEMBER_ID_REQUIRED"
    );
    h.advance(3_000);
    let r = join_resp(h.take(req));
    let old = r.member_id.clone();
    assert!(old.starts_with("i1-"));
    let s = h.sync(&old, 1, &[(old.as_str(), b"S")]);
    sync_resp(h.take(s));
    let records_before = h.records.len();
    // Restarted with the same instance id: a new member id, same generation, no rebalance.
    let req = h.join_req("", Some("i1"), &[("range", b"m")]);
    let r = join_resp(h.take(req));
    let new = r.member_id.clone();
    assert_ne!(new, old);
    assert_eq!(
        (r.error_code, r.generation_id, r.skip_assignment),
        (NONE, 1, true)
    );
    assert_eq!(h.state(), Some(GroupState::Stable));
    assert_eq!(
        h.records.len(),
        records_before + 1,
        "the new member id is persisted"
    );
    let s = h.sync(&new, 1, &[]);
    assert_eq!(sync_resp(h.take(s)).assignment.as_ref(), b"S");
    let id = h.send(
        4,
        RequestBody::Heartbeat(HeartbeatRequest {
            group_id: G.into(),
            generation_id: 1,
            member_id: old.clone(),
            group_instance_id: Some("i1".into()),
        }),
    );
    let Some(ResponseBody::Heartbeat(hb)) = h.take(id) else {
        panic!()
    };
    assert_eq!(hb.error_code, FENCED_INSTANCE_ID);
    // Leaving by instance id with a stale member id is fenced; with the current one it leaves.
    let leave = |member: &str| {
        RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: G.into(),
            members: vec![MemberIdentity {
                member_id: member.into(),
                group_instance_id: Some("i1".into()),
                reason: None,
            }],
            ..Default::default()
        })
    };
    let id = h.send(4, leave(&old));
    let Some(ResponseBody::LeaveGroup(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.members[0].error_code, FENCED_INSTANCE_ID);
    let id = h.send(4, leave(""));
    let Some(ResponseBody::LeaveGroup(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.members[0].error_code, NONE);
    assert_eq!(h.state(), Some(GroupState::Empty));
}

#[test]
fn join_errors() {
    let mut h = Harness::with_config(GroupConfig {
        group_max_size: 1,
        ..GroupConfig::default()
    });
    let bad_timeout = h.send(
        JOIN_V,
        RequestBody::JoinGroup(JoinGroupRequest {
            group_id: G.into(),
            session_timeout_ms: 1,
            protocol_type: "consumer".into(),
            ..Default::default()
        }),
    );
    assert_eq!(
        join_resp(h.take(bad_timeout)).error_code,
        INVALID_SESSION_TIMEOUT
    );
    let no_protocols = h.join_req("", None, &[]);
    assert_eq!(
        join_resp(h.take(no_protocols)).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(h.state(), None, "failed joins leave no group behind");
    let unknown = h.join("someone");
    assert_eq!(join_resp(h.take(unknown)).error_code, UNKNOWN_MEMBER_ID);
    let m = h.stable_single();
    let other = h.join_req("", None, &[("roundrobin", b"x")]);
    assert_eq!(join_resp(h.take(other)).error_code, GROUP_MAX_SIZE_REACHED);
    let mut h2 = Harness::new();
    h2.stable_single();
    let other = h2.join_req("", None, &[("roundrobin", b"x")]);
    assert_eq!(
        join_resp(h2.take(other)).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let big = vec![0u8; fjord_group::MAX_MEMBER_METADATA_BYTES + 1];
    let big = h2.join_req("", None, &[("range", &big)]);
    assert_eq!(join_resp(h2.take(big)).error_code, INVALID_REQUEST);
    // Old clients (v3) join without MEMBER_ID_REQUIRED.
    let mut h3 = Harness::new();
    let id = h3.send(
        3,
        RequestBody::JoinGroup(JoinGroupRequest {
            group_id: G.into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: Bytes::new(),
            }],
            ..Default::default()
        }),
    );
    h3.advance(3_000);
    assert_eq!(join_resp(h3.take(id)).error_code, NONE);
    let _ = m;
}

#[test]
fn pending_members_that_never_rejoin_expire() {
    let mut h = Harness::new();
    let id = h.join("");
    let member = join_resp(h.take(id)).member_id;
    h.advance(10_000);
    let again = h.join(&member);
    assert_eq!(join_resp(h.take(again)).error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn offset_commit_validation_and_fetch() {
    let mut h = Harness::new();
    // Simple consumer: no group yet, generation -1.
    assert_eq!(h.commit(8, "", -1, "t", 1, 42, "meta"), NONE);
    assert_eq!(
        h.commit(8, "", -1, "nope", 0, 1, ""),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        h.commit(8, "", -1, "t", 4, 1, ""),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(
        h.commit(8, "", -1, "t", 0, 1, &"x".repeat(4097)),
        OFFSET_METADATA_TOO_LARGE
    );
    assert_eq!(
        h.fetch_all(),
        vec![("t".to_string(), 1, 42, 3, "meta".to_string())]
    );
    let m = h.stable_single();
    assert_eq!(h.commit(8, &m, 1, "t", 0, 7, ""), NONE);
    assert_eq!(h.commit(8, &m, 2, "t", 0, 7, ""), ILLEGAL_GENERATION);
    assert_eq!(h.commit(8, "x", 1, "t", 0, 7, ""), UNKNOWN_MEMBER_ID);
    assert_eq!(
        h.commit(8, "", -1, "t", 0, 7, ""),
        UNKNOWN_MEMBER_ID,
        "simple commits need an empty group"
    );
    // A fetch of specific partitions answers -1 for partitions without a commit.
    let id = h.send(
        8,
        RequestBody::OffsetFetch(OffsetFetchRequest {
            groups: vec![
                fjord_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup {
                    group_id: G.into(),
                    topics: Some(vec![
                        fjord_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics {
                            name: "t".into(),
                            partition_indexes: vec![0, 3],
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::OffsetFetch(r)) = h.take(id) else {
        panic!()
    };
    let parts = &r.groups[0].topics[0].partitions;
    assert_eq!(
        (parts[0].committed_offset, parts[1].committed_offset),
        (7, -1)
    );
    // Unknown groups: v9 says GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION.
    let mut h2 = Harness::new();
    assert_eq!(h2.commit(9, "m", 1, "t", 0, 1, ""), GROUP_ID_NOT_FOUND);
    assert_eq!(h2.commit(8, "m", 1, "t", 0, 1, ""), ILLEGAL_GENERATION);
}

#[test]
fn replaying_the_shards_records_rebuilds_the_same_answers() {
    let mut h = Harness::new();
    assert_eq!(h.commit(8, "", -1, "u", 0, 9, "simple"), NONE);
    let a = h.stable_single();
    assert_eq!(h.commit(8, &a, 1, "t", 0, 10, "a"), NONE);
    assert_eq!(h.commit(8, &a, 1, "t", 0, 11, "b"), NONE);
    assert_eq!(h.commit(8, &a, 1, "t", 2, 20, ""), NONE);
    let fetched = h.fetch_all();
    let described = h.describe();
    let mut h2 = Harness::new();
    for r in &h.records {
        h2.shard.replay(r).unwrap();
    }
    assert_eq!(h2.fetch_all(), fetched);
    assert_eq!(h2.describe(), described);
    // The loaded member keeps its generation and must heartbeat within its session.
    assert_eq!(h2.heartbeat(&a, 1), NONE);
    h2.advance(10_000);
    assert_eq!(h2.state(), Some(GroupState::Empty));
    // Tombstones delete: a deleted group replays to nothing.
    let mut h3 = Harness::new();
    h3.commit(8, "", -1, "t", 0, 1, "");
    let id = h3.send(
        2,
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: vec![G.into()],
        }),
    );
    let Some(ResponseBody::DeleteGroups(r)) = h3.take(id) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, NONE);
    let mut h4 = Harness::new();
    for r in &h3.records {
        h4.shard.replay(r).unwrap();
    }
    assert_eq!(h4.state(), None);
    assert!(h4.fetch_all().is_empty());
}

#[test]
fn delete_groups_and_offsets() {
    let mut h = Harness::new();
    let id = h.send(
        2,
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: vec!["missing".into()],
        }),
    );
    let Some(ResponseBody::DeleteGroups(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, GROUP_ID_NOT_FOUND);
    let m = h.stable_single();
    h.commit(8, &m, 1, "t", 0, 1, "");
    h.commit(8, &m, 1, "u", 0, 1, "");
    let id = h.send(
        2,
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: vec![G.into()],
        }),
    );
    let Some(ResponseBody::DeleteGroups(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, NON_EMPTY_GROUP);
    let delete = |topic: &str| {
        RequestBody::OffsetDelete(OffsetDeleteRequest {
            group_id: G.into(),
            topics: vec![OffsetDeleteRequestTopic {
                name: topic.into(),
                partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
            }],
        })
    };
    // The member's metadata "m" is not a readable subscription: every topic counts as used.
    let id = h.send(0, delete("u"));
    let Some(ResponseBody::OffsetDelete(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    h.advance(10_000);
    assert_eq!(h.state(), Some(GroupState::Empty));
    let id = h.send(0, delete("u"));
    let Some(ResponseBody::OffsetDelete(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        (r.error_code, r.topics[0].partitions[0].error_code),
        (NONE, NONE)
    );
    assert_eq!(h.fetch_all().len(), 1);
}

#[test]
fn offset_delete_checks_the_subscription_of_a_consumer_group() {
    let mut h = Harness::new();
    // ConsumerProtocolSubscription v0 subscribing to "t".
    let sub: &[u8] = &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
    let (m, req) = {
        let id = h.join_req("", None, &[("range", sub)]);
        let member = join_resp(h.take(id)).member_id;
        let req = h.join_req(&member, None, &[("range", sub)]);
        (member, req)
    };
    h.advance(3_000);
    join_resp(h.take(req));
    let s = h.sync(&m, 1, &[(m.as_str(), b"")]);
    sync_resp(h.take(s));
    h.commit(8, &m, 1, "t", 0, 1, "");
    h.commit(8, &m, 1, "u", 0, 1, "");
    let id = h.send(
        0,
        RequestBody::OffsetDelete(OffsetDeleteRequest {
            group_id: G.into(),
            topics: vec![
                OffsetDeleteRequestTopic {
                    name: "t".into(),
                    partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
                },
                OffsetDeleteRequestTopic {
                    name: "u".into(),
                    partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
                },
            ],
        }),
    );
    let Some(ResponseBody::OffsetDelete(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    assert_eq!(r.topics[1].partitions[0].error_code, NONE);
    assert_eq!(h.fetch_all().len(), 1);
}

#[test]
fn offsets_of_empty_groups_expire_after_retention_and_the_group_goes() {
    let config = GroupConfig {
        offsets_retention_minutes: 1,
        offsets_retention_check_interval_ms: 1_000,
        ..GroupConfig::default()
    };
    let mut h = Harness::with_config(config);
    h.commit(8, "", -1, "t", 0, 1, "");
    h.advance(59_000);
    assert_eq!(h.fetch_all().len(), 1);
    h.advance(2_000);
    assert!(h.fetch_all().is_empty());
    assert_eq!(h.state(), None);
    let id = h.send(4, RequestBody::ListGroups(ListGroupsRequest::default()));
    let Some(ResponseBody::ListGroups(r)) = h.take(id) else {
        panic!()
    };
    assert!(r.groups.is_empty());
}

#[test]
fn list_groups_filters_by_state_and_type() {
    let mut h = Harness::new();
    h.stable_single();
    let list = |h: &mut Harness, states: &[&str], types: &[&str]| {
        let id = h.send(
            5,
            RequestBody::ListGroups(ListGroupsRequest {
                states_filter: states.iter().map(|s| s.to_string()).collect(),
                types_filter: types.iter().map(|s| s.to_string()).collect(),
            }),
        );
        let Some(ResponseBody::ListGroups(r)) = h.take(id) else {
            panic!()
        };
        r.groups
    };
    let all = list(&mut h, &[], &[]);
    assert_eq!(
        (
            all.len(),
            all[0].group_state.as_str(),
            all[0].group_type.as_str(),
            all[0].protocol_type.as_str()
        ),
        (1, "Stable", "classic", "consumer")
    );
    assert_eq!(list(&mut h, &["stable"], &[]).len(), 1);
    assert!(list(&mut h, &["Empty"], &[]).is_empty());
    assert!(list(&mut h, &[], &["consumer"]).is_empty());
    assert_eq!(list(&mut h, &[], &["Classic"]).len(), 1);
}

// ----- transactional offset commits (TxnOffsetCommit) -----------------------------------------

impl Harness {
    /// A TxnOffsetCommit of `producer_id` for `(topic, partition, offset)`s; answers each
    /// partition's error code.
    fn txn_commit(
        &mut self,
        producer_id: i64,
        member_id: &str,
        generation: i32,
        offsets: &[(&str, i32, i64)],
    ) -> Vec<i16> {
        use fjord_protocol::messages::txn_offset_commit_request::*;
        let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
        for &(topic, partition, offset) in offsets {
            let p = TxnOffsetCommitRequestPartition {
                partition_index: partition,
                committed_offset: offset,
                committed_leader_epoch: 2,
                committed_metadata: Some("txn".into()),
            };
            match topics.iter_mut().find(|t| t.name == topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(TxnOffsetCommitRequestTopic {
                    name: topic.into(),
                    partitions: vec![p],
                    ..Default::default()
                }),
            }
        }
        let id = self.send(
            3,
            RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
                transactional_id: "tx".into(),
                group_id: G.into(),
                producer_id,
                producer_epoch: 0,
                generation_id_or_member_epoch: generation,
                member_id: member_id.into(),
                group_instance_id: None,
                topics,
            }),
        );
        let Some(ResponseBody::TxnOffsetCommit(r)) = self.take(id) else {
            panic!()
        };
        r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect()
    }

    /// The producer's marker, as the broker hands it to the shard once it is in the log.
    fn marker(&mut self, producer_id: i64, commit: bool) {
        self.shard.complete_transaction(producer_id, commit);
        self.log.push(Logged::Marker(producer_id, commit));
    }

    /// OffsetFetch v8 of `(topic, partition)`s: (offset, error) each.
    fn fetch_stable(
        &mut self,
        partitions: &[(&str, i32)],
        require_stable: bool,
    ) -> Vec<(i64, i16)> {
        use fjord_protocol::messages::offset_fetch_request::*;
        let topics = partitions
            .iter()
            .map(|&(name, p)| OffsetFetchRequestTopics {
                name: name.into(),
                partition_indexes: vec![p],
                ..Default::default()
            })
            .collect();
        let id = self.send(
            8,
            RequestBody::OffsetFetch(OffsetFetchRequest {
                groups: vec![OffsetFetchRequestGroup {
                    group_id: G.into(),
                    topics: Some(topics),
                    ..Default::default()
                }],
                require_stable,
                ..Default::default()
            }),
        );
        let Some(ResponseBody::OffsetFetch(r)) = self.take(id) else {
            panic!()
        };
        r.groups[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.committed_offset, p.error_code))
            })
            .collect()
    }

    /// A shard loaded from this one's log.
    fn reloaded(&self) -> Harness {
        let mut h = Harness::new();
        for entry in &self.log {
            match entry {
                Logged::Record(None, r) => h.shard.replay(r).unwrap(),
                Logged::Record(Some(producer_id), r) => {
                    h.shard.replay_transactional(*producer_id, r).unwrap()
                }
                Logged::Marker(producer_id, commit) => {
                    h.shard.complete_transaction(*producer_id, *commit)
                }
            }
        }
        h.log = self.log.clone();
        h
    }
}

#[test]
fn transactional_offsets_are_pending_until_the_commit_marker() {
    let mut h = Harness::new();
    assert_eq!(h.commit(8, "", -1, "t", 0, 5, ""), NONE);
    assert_eq!(
        h.txn_commit(7, "", -1, &[("t", 0, 10), ("t", 1, 11)]),
        [NONE, NONE]
    );
    assert!(
        h.records.len() == 3 && matches!(h.log[1], Logged::Record(Some(7), _)),
        "the offsets are written as producer 7's transactional batch"
    );
    // Not yet committed: read_uncommitted consumers see the old offsets, stable fetches wait.
    let before = [(5, NONE), (-1, NONE)];
    assert_eq!(h.fetch_stable(&[("t", 0), ("t", 1)], false), before);
    let unstable = [(-1, UNSTABLE_OFFSET_COMMIT), (-1, UNSTABLE_OFFSET_COMMIT)];
    assert_eq!(h.fetch_stable(&[("t", 0), ("t", 1)], true), unstable);
    assert_eq!(h.fetch_stable(&[("t", 2)], true), [(-1, NONE)]);
    // Loading the partition mid-transaction finds the same.
    assert_eq!(
        h.reloaded().fetch_stable(&[("t", 0), ("t", 1)], true),
        unstable
    );
    h.marker(7, true);
    let after = [(10, NONE), (11, NONE)];
    assert_eq!(h.fetch_stable(&[("t", 0), ("t", 1)], true), after);
    assert_eq!(
        h.reloaded().fetch_stable(&[("t", 0), ("t", 1)], true),
        after
    );
    // The next transaction of the producer, aborted: nothing changes.
    assert_eq!(h.txn_commit(7, "", -1, &[("t", 0, 20)]), [NONE]);
    h.marker(7, false);
    assert_eq!(h.fetch_stable(&[("t", 0), ("t", 1)], true), after);
    assert_eq!(
        h.reloaded().fetch_stable(&[("t", 0), ("t", 1)], true),
        after
    );
}

#[test]
fn a_plain_commit_written_after_a_transactional_one_wins() {
    let mut h = Harness::new();
    assert_eq!(
        h.txn_commit(7, "", -1, &[("t", 0, 10), ("t", 1, 10)]),
        [NONE, NONE]
    );
    // Written after the transaction's offsets, before its marker.
    assert_eq!(h.commit(8, "", -1, "t", 0, 3, ""), NONE);
    h.marker(7, true);
    let expected = [(3, NONE), (10, NONE)];
    assert_eq!(h.fetch_stable(&[("t", 0), ("t", 1)], true), expected);
    assert_eq!(
        h.reloaded().fetch_stable(&[("t", 0), ("t", 1)], true),
        expected
    );
}

#[test]
fn transactional_offset_commits_are_checked_against_the_group() {
    let mut h = Harness::new();
    // No group: a generation names a group that does not exist.
    assert_eq!(
        h.txn_commit(7, "m", 1, &[("t", 0, 1)]),
        [ILLEGAL_GENERATION]
    );
    let m = h.stable_single();
    assert_eq!(h.txn_commit(7, &m, 2, &[("t", 0, 1)]), [ILLEGAL_GENERATION]);
    assert_eq!(h.txn_commit(7, "x", 1, &[("t", 0, 1)]), [UNKNOWN_MEMBER_ID]);
    assert_eq!(h.txn_commit(7, &m, 1, &[("t", 0, 1)]), [NONE]);
    // v0-v2 requests carry no member: accepted as Kafka accepts them.
    assert_eq!(h.txn_commit(8, "", -1, &[("t", 1, 1)]), [NONE]);
    let long = "x".repeat(4097);
    use fjord_protocol::messages::txn_offset_commit_request::*;
    let id = h.send(
        3,
        RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
            transactional_id: "tx".into(),
            group_id: G.into(),
            producer_id: 9,
            topics: vec![TxnOffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: 1,
                    committed_leader_epoch: -1,
                    committed_metadata: Some(long),
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::TxnOffsetCommit(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        OFFSET_METADATA_TOO_LARGE
    );
    let id = h.send(
        3,
        RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
            group_id: String::new(),
            topics: vec![TxnOffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![TxnOffsetCommitRequestPartition::default()],
                ..Default::default()
            }],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::TxnOffsetCommit(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, INVALID_GROUP_ID);
}

#[test]
fn deleting_a_group_drops_its_pending_offsets_and_retention_waits_for_the_transaction() {
    let mut h = Harness::with_config(GroupConfig {
        offsets_retention_minutes: 1,
        offsets_retention_check_interval_ms: 1_000,
        ..GroupConfig::default()
    });
    assert_eq!(h.commit(8, "", -1, "t", 0, 5, ""), NONE);
    assert_eq!(
        h.txn_commit(7, "", -1, &[("t", 0, 6), ("u", 0, 1)]),
        [NONE, NONE]
    );
    // Past retention: the offset a transaction is about to replace stays, and so does the group.
    h.advance(120_000);
    assert_eq!(h.state(), Some(GroupState::Empty));
    assert_eq!(h.fetch_stable(&[("t", 0)], false), [(5, NONE)]);
    h.marker(7, true);
    assert_eq!(
        h.fetch_stable(&[("t", 0), ("u", 0)], false),
        [(6, NONE), (1, NONE)]
    );
    // Deleting the group while another transaction is open tombstones its pending offsets too.
    assert_eq!(h.txn_commit(8, "", -1, &[("t", 3, 4)]), [NONE]);
    let id = h.send(
        2,
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: vec![G.into()],
        }),
    );
    let Some(ResponseBody::DeleteGroups(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, NONE);
    h.marker(8, true);
    let mut reloaded = h.reloaded();
    for shard in [&mut h, &mut reloaded] {
        assert_eq!(
            shard.fetch_stable(&[("t", 0), ("t", 3)], true),
            [(-1, NONE), (-1, NONE)]
        );
    }
}

#[test]
fn offsets_by_topic_id_answer_with_the_ids_and_unknown_ids_are_refused() {
    use fjord_protocol::messages::offset_fetch_request::*;
    use fjord_protocol::messages::txn_offset_commit_request::*;
    let (t_id, u_id, gone) = (
        fjord_common::Uuid([1; 16]),
        fjord_common::Uuid([2; 16]),
        fjord_common::Uuid([9; 16]),
    );
    let mut h = Harness::new();
    assert_eq!(h.commit(9, "", -1, "u", 0, 5, ""), NONE);
    // As the broker hands them over: names filled in from the ids, an unknown id nameless.
    let topic = |name: &str, topic_id| OffsetCommitRequestTopic {
        name: name.into(),
        topic_id,
        partitions: vec![OffsetCommitRequestPartition {
            partition_index: 1,
            committed_offset: 42,
            committed_leader_epoch: -1,
            committed_metadata: None,
        }],
    };
    let id = h.send(
        10,
        RequestBody::OffsetCommit(OffsetCommitRequest {
            group_id: G.into(),
            generation_id_or_member_epoch: -1,
            retention_time_ms: -1,
            topics: vec![topic("t", t_id), topic("", gone)],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::OffsetCommit(r)) = h.take(id) else {
        panic!()
    };
    let answered: Vec<_> = r
        .topics
        .iter()
        .map(|t| (t.topic_id, t.partitions[0].error_code))
        .collect();
    assert_eq!(answered, [(t_id, NONE), (gone, UNKNOWN_TOPIC_ID)]);

    let fetch = |h: &mut Harness, version, topics: Option<Vec<OffsetFetchRequestTopics>>| {
        let id = h.send(
            version,
            RequestBody::OffsetFetch(OffsetFetchRequest {
                groups: vec![OffsetFetchRequestGroup {
                    group_id: G.into(),
                    topics,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        );
        let Some(ResponseBody::OffsetFetch(r)) = h.take(id) else {
            panic!()
        };
        r.groups[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.clone(), t.topic_id, p.committed_offset, p.error_code))
            })
            .collect::<Vec<_>>()
    };
    let asked = vec![
        OffsetFetchRequestTopics {
            name: "t".into(),
            topic_id: t_id,
            partition_indexes: vec![1],
        },
        OffsetFetchRequestTopics {
            name: String::new(),
            topic_id: gone,
            partition_indexes: vec![0],
        },
    ];
    assert_eq!(
        fetch(&mut h, 10, Some(asked)),
        [
            ("t".to_string(), t_id, 42, NONE),
            (String::new(), gone, -1, UNKNOWN_TOPIC_ID)
        ]
    );
    // Fetching all: each topic with its id; one deleted since has no id and is left out
    // from v10, while v9 still names it.
    assert_eq!(
        fetch(&mut h, 10, None),
        [
            ("t".to_string(), t_id, 42, NONE),
            ("u".to_string(), u_id, 5, NONE)
        ]
    );
    h.topics.by_name.remove("u");
    assert_eq!(fetch(&mut h, 10, None), [("t".to_string(), t_id, 42, NONE)]);
    assert_eq!(fetch(&mut h, 9, None).len(), 2);

    let id = h.send(
        6,
        RequestBody::TxnOffsetCommit(TxnOffsetCommitRequest {
            transactional_id: "tx".into(),
            group_id: G.into(),
            producer_id: 9,
            generation_id_or_member_epoch: -1,
            topics: vec![TxnOffsetCommitRequestTopic {
                name: String::new(),
                topic_id: gone,
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: 1,
                    committed_leader_epoch: -1,
                    committed_metadata: None,
                }],
            }],
            ..Default::default()
        }),
    );
    let Some(ResponseBody::TxnOffsetCommit(r)) = h.take(id) else {
        panic!()
    };
    assert_eq!(
        (r.topics[0].topic_id, r.topics[0].partitions[0].error_code),
        (gone, UNKNOWN_TOPIC_ID)
    );
}
