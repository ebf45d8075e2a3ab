//! Group membership at its edges. Many members joining one group at once: every member gets
//! Kafka's answer, the group stays within group.max.size, and the broker's memory stays bounded.
//! A member waiting in a rebalance when the broker stops is told to find the coordinator anew.
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use fjord_protocol::messages::join_group_response::JoinGroupResponse;
use fjord_protocol::{ApiKey, Decodable, Decoder, RequestBody, ResponseBody, ResponseHeader};

const MEMBER_ID_REQUIRED: i16 = 79;
const GROUP_MAX_SIZE_REACHED: i16 = 81;
const NOT_COORDINATOR: i16 = 16;
const JOIN_VERSION: i16 = 5;

fn rss_kib(broker: &TestBroker) -> u64 {
    let pid = broker.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn join(group: &str, member_id: &str) -> RequestBody {
    RequestBody::JoinGroup(JoinGroupRequest {
        group_id: group.to_string(),
        session_timeout_ms: 30_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.to_string(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            // A plausible subscription-sized blob, so memory per member is realistic.
            metadata: Bytes::from(vec![7u8; 256]),
        }],
        ..Default::default()
    })
}

fn read_join(client: &mut Client, broker: &TestBroker) -> JoinGroupResponse {
    let frame = client.read_frame().unwrap_or_else(|e| {
        let log = broker.log();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "no join response ({e}); broker log tail:\n{}",
            tail.join("\n")
        )
    });
    let mut decoder = Decoder::new(frame);
    ResponseHeader::decode(
        &mut decoder,
        fjord_protocol::response_header_version(ApiKey::JoinGroup, JOIN_VERSION),
    )
    .expect("header");
    match ResponseBody::decode(ApiKey::JoinGroup, &mut decoder, JOIN_VERSION).expect("body") {
        ResponseBody::JoinGroup(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// Every member asks for a member id, then joins with it; all joins are sent before any answer
/// is read, within the group's initial rebalance delay.
fn join_all(broker: &TestBroker, group: &str, members: usize) -> Vec<JoinGroupResponse> {
    let mut clients: Vec<Client> = (0..members).map(|_| broker.connect()).collect();
    let mut ids = Vec::with_capacity(members);
    for client in clients.iter_mut() {
        let frame = client.encode_request(ApiKey::JoinGroup, JOIN_VERSION, &join(group, ""));
        client.send_raw(&frame).expect("send");
    }
    for client in clients.iter_mut() {
        let response = read_join(client, broker);
        assert_eq!(response.error_code, MEMBER_ID_REQUIRED, "{response:?}");
        ids.push(response.member_id);
    }
    for (client, id) in clients.iter_mut().zip(&ids) {
        let frame = client.encode_request(ApiKey::JoinGroup, JOIN_VERSION, &join(group, id));
        client.send_raw(&frame).expect("send");
    }
    clients
        .iter_mut()
        .map(|c| {
            c.stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .expect("timeout");
            read_join(c, broker)
        })
        .collect()
}

fn described_members(broker: &TestBroker, group: &str) -> usize {
    let mut client = broker.connect();
    match client.request(
        5,
        RequestBody::DescribeGroups(DescribeGroupsRequest {
            groups: vec![group.to_string()],
            include_authorized_operations: false,
        }),
    ) {
        ResponseBody::DescribeGroups(r) => r.groups[0].members.len(),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_thousand_members_join_one_group_at_once() {
    let broker = TestBroker::start_with(&[("group.initial.rebalance.delay.ms", "3000")]);
    let before = rss_kib(&broker);
    let responses = join_all(&broker, "crowd", 1000);
    let generations: std::collections::BTreeSet<i32> =
        responses.iter().map(|r| r.generation_id).collect();
    assert!(
        responses.iter().all(|r| r.error_code == 0),
        "every member joins"
    );
    assert_eq!(
        generations.len(),
        1,
        "one generation for everyone: {generations:?}"
    );
    let leaders: Vec<&JoinGroupResponse> = responses
        .iter()
        .filter(|r| r.leader == r.member_id)
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    assert_eq!(
        leaders[0].members.len(),
        1000,
        "the leader sees every member"
    );
    assert!(responses
        .iter()
        .filter(|r| r.leader != r.member_id)
        .all(|r| r.members.is_empty()));
    assert_eq!(described_members(&broker, "crowd"), 1000);
    let grown = rss_kib(&broker).saturating_sub(before);
    assert!(
        grown < 200 * 1024,
        "broker RSS grew by {grown} KiB for 1000 members"
    );
}

#[test]
fn group_max_size_bounds_a_crowd() {
    let broker = TestBroker::start_with(&[
        ("group.initial.rebalance.delay.ms", "3000"),
        ("group.max.size", "100"),
    ]);
    let responses = join_all(&broker, "bounded", 300);
    let joined = responses.iter().filter(|r| r.error_code == 0).count();
    let refused = responses
        .iter()
        .filter(|r| r.error_code == GROUP_MAX_SIZE_REACHED)
        .count();
    assert_eq!(joined, 100, "exactly group.max.size members join");
    assert_eq!(refused, 200, "the rest get GROUP_MAX_SIZE_REACHED");
    assert_eq!(described_members(&broker, "bounded"), 100);
}

/// Joins `group` as a new member: asks for a member id, then joins with it. Returns the client,
/// with the second JoinGroup sent and its answer not read yet, and the member id.
fn start_join(broker: &TestBroker, group: &str) -> (Client, String) {
    let mut client = broker.connect();
    let frame = client.encode_request(ApiKey::JoinGroup, JOIN_VERSION, &join(group, ""));
    client.send_raw(&frame).expect("send");
    let response = read_join(&mut client, broker);
    assert_eq!(response.error_code, MEMBER_ID_REQUIRED, "{response:?}");
    let frame = client.encode_request(
        ApiKey::JoinGroup,
        JOIN_VERSION,
        &join(group, &response.member_id),
    );
    client.send_raw(&frame).expect("send");
    (client, response.member_id)
}

#[test]
fn a_member_waiting_in_a_rebalance_is_sent_to_find_the_coordinator_when_the_broker_stops() {
    let mut broker = TestBroker::start_with(&[("group.initial.rebalance.delay.ms", "0")]);
    let (mut first, _) = start_join(&broker, "waiting");
    let joined = read_join(&mut first, &broker);
    assert_eq!(
        (joined.error_code, joined.generation_id),
        (0, 1),
        "{joined:?}"
    );
    // A second member starts a rebalance that waits for the first one to join again, which it
    // never does: its JoinGroup is parked for the rebalance timeout (30 s).
    let (mut second, _) = start_join(&broker, "waiting");
    std::thread::sleep(Duration::from_millis(300));
    let pid = broker.child.as_ref().expect("running").id();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    // Answered, not dropped with the connection, and long before the rebalance could end.
    second
        .stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let answer = read_join(&mut second, &broker);
    assert_eq!(answer.error_code, NOT_COORDINATOR, "{answer:?}");
    broker.stop();
}
