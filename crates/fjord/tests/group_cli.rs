//! `fjord group` against the real binary: list, describe with lag, every reset mode (dry run
//! and --execute), the refusals for groups with members, and delete, checked against what
//! Kafka's `kafka-consumer-groups` prints.
#[macro_use]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_client::consumer_protocol::{Assignment, Subscription, TopicPartitions};
use fjord_protocol::messages::create_topics_request::*;
use fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use fjord_protocol::messages::join_group_request::*;
use fjord_protocol::messages::offset_commit_request::*;
use fjord_protocol::messages::offset_fetch_request::*;
use fjord_protocol::messages::produce_request::*;
use fjord_protocol::messages::sync_group_request::*;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_records::{BatchBuilder, Compression};

fn start() -> TestBroker {
    TestBroker::start_with(&[("group.initial.rebalance.delay.ms", "0")])
}

/// Runs `fjord group ARGS` against `broker`; returns (exit code, stdout, stderr).
fn fjord(broker: &TestBroker, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .arg("group")
        .arg("--bootstrap-server")
        .arg(broker.addr.to_string())
        .args(args)
        .output()
        .expect("run fjord group");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fjord_ok(broker: &TestBroker, args: &[&str]) -> String {
    let (code, stdout, stderr) = fjord(broker, args);
    assert_eq!(
        code, 0,
        "fjord group {args:?}: stdout {stdout} stderr {stderr}"
    );
    stdout
}

/// The whitespace-separated cells of each non-empty output line.
fn table(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn create_topic(client: &mut Client, name: &str, partitions: i32) {
    let response = expect!(
        client.request(
            7,
            RequestBody::CreateTopics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: name.to_string(),
                    num_partitions: partitions,
                    replication_factor: 1,
                    assignments: Vec::new(),
                    configs: Vec::new(),
                }],
                timeout_ms: 10_000,
                validate_only: false,
            }),
        ),
        CreateTopics
    );
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

/// Appends `count` records to a partition, the i-th with timestamp 1000 + i.
fn produce(client: &mut Client, topic: &str, partition: i32, count: usize) {
    let mut builder = BatchBuilder::new(Compression::None);
    for i in 0..count {
        builder
            .append(1_000 + i as i64, None, Some(b"v"), &[])
            .expect("append");
    }
    let records = builder.build().expect("build").freeze();
    let response = expect!(
        client.request(
            11,
            RequestBody::Produce(ProduceRequest {
                transactional_id: None,
                acks: -1,
                timeout_ms: 10_000,
                topic_data: vec![TopicProduceData {
                    name: topic.to_string(),
                    partition_data: vec![PartitionProduceData {
                        index: partition,
                        records: Some(records),
                    }],
                    ..Default::default()
                }],
            }),
        ),
        Produce
    );
    assert_eq!(
        response.responses[0].partition_responses[0].error_code, 0,
        "{response:?}"
    );
}

/// Waits until the group's coordinator is available (__consumer_offsets is created on first use).
fn await_coordinator(client: &mut Client, group: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = expect!(
            client.request(
                3,
                RequestBody::FindCoordinator(FindCoordinatorRequest {
                    key: group.to_string(),
                    key_type: 0,
                    coordinator_keys: Vec::new(),
                }),
            ),
            FindCoordinator
        );
        if response.error_code == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no coordinator: {response:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn commit(
    client: &mut Client,
    group: &str,
    generation: i32,
    member: &str,
    offsets: &[(&str, i32, i64)],
) {
    let response = expect!(
        client.request(
            8,
            RequestBody::OffsetCommit(OffsetCommitRequest {
                group_id: group.to_string(),
                generation_id_or_member_epoch: generation,
                member_id: member.to_string(),
                group_instance_id: None,
                retention_time_ms: -1,
                topics: offsets
                    .iter()
                    .map(|(t, p, o)| OffsetCommitRequestTopic {
                        name: t.to_string(),
                        partitions: vec![OffsetCommitRequestPartition {
                            partition_index: *p,
                            committed_offset: *o,
                            committed_leader_epoch: -1,
                            committed_metadata: Some(String::new()),
                        }],
                        ..Default::default()
                    })
                    .collect(),
            }),
        ),
        OffsetCommit
    );
    for t in &response.topics {
        for p in &t.partitions {
            assert_eq!(p.error_code, 0, "{response:?}");
        }
    }
}

/// The group's committed offset of every listed partition (-1: none).
fn committed(client: &mut Client, group: &str, parts: &[(&str, i32)]) -> Vec<i64> {
    let response = expect!(
        client.request(
            7,
            RequestBody::OffsetFetch(OffsetFetchRequest {
                group_id: group.to_string(),
                topics: None,
                groups: Vec::new(),
                require_stable: false,
            }),
        ),
        OffsetFetch
    );
    assert_eq!(response.error_code, 0, "{response:?}");
    parts
        .iter()
        .map(|(t, p)| {
            response
                .topics
                .iter()
                .filter(|x| x.name == *t)
                .flat_map(|x| x.partitions.iter())
                .find(|x| x.partition_index == *p)
                .map_or(-1, |x| x.committed_offset)
        })
        .collect()
}

/// A broker with topic "orders": partition 0 holds 5 records, partition 1 holds 3, and group
/// "g1" committed 2 and 1 without ever having members.
fn seeded() -> (TestBroker, Client) {
    let broker = start();
    let mut client = broker.connect();
    create_topic(&mut client, "orders", 2);
    produce(&mut client, "orders", 0, 5);
    produce(&mut client, "orders", 1, 3);
    await_coordinator(&mut client, "g1");
    commit(
        &mut client,
        "g1",
        -1,
        "",
        &[("orders", 0, 2), ("orders", 1, 1)],
    );
    (broker, client)
}

const HEADER: [&str; 9] = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
];

#[test]
fn list_and_describe_an_empty_group_with_lag() {
    let (broker, _client) = seeded();
    let groups = fjord_ok(&broker, &["list"]);
    assert_eq!(groups.lines().collect::<Vec<_>>(), vec!["g1"]);

    let (code, stdout, stderr) = fjord(&broker, &["describe", "g1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("Consumer group 'g1' has no active members."),
        "{stderr}"
    );
    assert!(stdout.starts_with("\nGROUP "), "{stdout:?}");
    assert_eq!(
        table(&stdout),
        vec![
            HEADER.to_vec(),
            vec!["g1", "orders", "0", "2", "5", "3", "-", "-", "-"],
            vec!["g1", "orders", "1", "1", "3", "2", "-", "-", "-"],
        ]
    );
}

#[test]
fn reset_offsets_every_mode_dry_run_and_execute() {
    let (broker, mut client) = seeded();
    let parts = [("orders", 0), ("orders", 1)];
    let plan = |rows: &[(&str, i32, i64)]| {
        let mut t = vec![vec!["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()];
        for (topic, p, o) in rows {
            t.push(vec![
                "g1".to_string(),
                topic.to_string(),
                p.to_string(),
                o.to_string(),
            ]);
        }
        t
    };

    // The default is a dry run: the plan is printed and nothing changes.
    let out = fjord_ok(&broker, &["reset-offsets", "g1", "--to-earliest"]);
    assert_eq!(table(&out), plan(&[("orders", 0, 0), ("orders", 1, 0)]));
    let out = fjord_ok(
        &broker,
        &["reset-offsets", "g1", "--to-latest", "--dry-run"],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 5), ("orders", 1, 3)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![2, 1]);

    let out = fjord_ok(
        &broker,
        &["reset-offsets", "g1", "--to-latest", "--execute"],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 5), ("orders", 1, 3)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![5, 3]);

    let out = fjord_ok(
        &broker,
        &["reset-offsets", "g1", "--to-earliest", "--execute"],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 0), ("orders", 1, 0)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![0, 0]);

    // --topic TOPIC:PARTITIONS limits the reset; the other partition keeps its offset.
    let out = fjord_ok(
        &broker,
        &[
            "reset-offsets",
            "g1",
            "--to-offset",
            "4",
            "--topic",
            "orders:0",
            "--execute",
        ],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 4)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![4, 0]);

    // Offsets beyond the log are clamped to its end, with a warning.
    let (code, out, err) = fjord(
        &broker,
        &[
            "reset-offsets",
            "g1",
            "--to-offset",
            "99",
            "--topic",
            "orders",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(table(&out), plan(&[("orders", 0, 5), ("orders", 1, 3)]));
    assert!(err.contains("is higher than latest offset"), "{err}");

    // --shift-by moves from the committed offsets and clamps to [start, end].
    let out = fjord_ok(
        &broker,
        &["reset-offsets", "g1", "--shift-by", "2", "--execute"],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 5), ("orders", 1, 2)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![5, 2]);
    let out = fjord_ok(
        &broker,
        &["reset-offsets", "g1", "--shift-by", "-3", "--execute"],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 2), ("orders", 1, 0)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![2, 0]);

    // Records are stamped 1000 + i ms; partition 1 has nothing at or after 1004 ms, so it
    // falls back to its log end.
    let out = fjord_ok(
        &broker,
        &[
            "reset-offsets",
            "g1",
            "--to-datetime",
            "1970-01-01T00:00:01.004",
            "--execute",
        ],
    );
    assert_eq!(
        table(&out).get(1..),
        plan(&[("orders", 0, 4), ("orders", 1, 3)]).get(1..)
    );
    assert_eq!(committed(&mut client, "g1", &parts), vec![4, 3]);
    let out = fjord_ok(
        &broker,
        &[
            "reset-offsets",
            "g1",
            "--to-datetime",
            "1970-01-01T01:00:01.001+01:00",
            "--execute",
        ],
    );
    assert_eq!(table(&out), plan(&[("orders", 0, 1), ("orders", 1, 1)]));
    assert_eq!(committed(&mut client, "g1", &parts), vec![1, 1]);

    // A bad datetime or no target is an error with exit code 1 and nothing changes.
    let (code, _, err) = fjord(
        &broker,
        &[
            "reset-offsets",
            "g1",
            "--to-datetime",
            "yesterday",
            "--execute",
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("cannot parse datetime"), "{err}");
    let (code, _, _) = fjord(&broker, &["reset-offsets", "g1"]);
    assert_ne!(code, 0);
    assert_eq!(committed(&mut client, "g1", &parts), vec![1, 1]);
}

#[test]
fn delete_removes_the_group_and_its_offsets() {
    let (broker, mut client) = seeded();
    let out = fjord_ok(&broker, &["delete", "g1"]);
    assert_eq!(
        out.trim(),
        "Deletion of requested consumer groups ('g1') was successful."
    );
    assert_eq!(fjord_ok(&broker, &["list"]), "");
    assert_eq!(committed(&mut client, "g1", &[("orders", 0)]), vec![-1]);

    let (code, _, err) = fjord(&broker, &["describe", "g1"]);
    assert_eq!(code, 1);
    assert!(err.contains("Consumer group 'g1' does not exist."), "{err}");
    let (code, _, err) = fjord(&broker, &["delete", "g1"]);
    assert_eq!(code, 1);
    assert!(err.contains("GROUP_ID_NOT_FOUND"), "{err}");
}

/// Joins "g2" as its only member with the consumer protocol, assigns both partitions of
/// "orders" to itself and returns the member id and generation.
fn join_and_sync(client: &mut Client, group: &str) -> (String, i32) {
    let subscription = Subscription {
        topics: vec!["orders".to_string()],
        ..Subscription::default()
    };
    let join = |client: &mut Client, member_id: &str| {
        expect!(
            client.request(
                7,
                RequestBody::JoinGroup(JoinGroupRequest {
                    group_id: group.to_string(),
                    session_timeout_ms: 60_000,
                    rebalance_timeout_ms: 60_000,
                    member_id: member_id.to_string(),
                    group_instance_id: None,
                    protocol_type: "consumer".to_string(),
                    protocols: vec![JoinGroupRequestProtocol {
                        name: "range".to_string(),
                        metadata: subscription.encode(3).expect("subscription"),
                    }],
                    reason: None,
                }),
            ),
            JoinGroup
        )
    };
    // KIP-394: the first join is answered with MEMBER_ID_REQUIRED and the id to use.
    let first = join(client, "");
    assert_eq!(first.error_code, 79, "{first:?}");
    let joined = join(client, &first.member_id);
    assert_eq!(joined.error_code, 0, "{joined:?}");
    assert_eq!(joined.leader, joined.member_id);
    let assignment = Assignment {
        assigned_partitions: vec![TopicPartitions {
            topic: "orders".to_string(),
            partitions: vec![0, 1],
        }],
        user_data: None,
    };
    let synced = expect!(
        client.request(
            5,
            RequestBody::SyncGroup(SyncGroupRequest {
                group_id: group.to_string(),
                generation_id: joined.generation_id,
                member_id: joined.member_id.clone(),
                group_instance_id: None,
                protocol_type: Some("consumer".to_string()),
                protocol_name: Some("range".to_string()),
                assignments: vec![SyncGroupRequestAssignment {
                    member_id: joined.member_id.clone(),
                    assignment: assignment.encode(3).expect("assignment"),
                }],
            }),
        ),
        SyncGroup
    );
    assert_eq!(synced.error_code, 0, "{synced:?}");
    assert_eq!(
        Assignment::decode(Bytes::clone(&synced.assignment)).expect("decode"),
        assignment
    );
    (joined.member_id, joined.generation_id)
}

#[test]
fn describe_a_stable_classic_group_and_refuse_reset_and_delete() {
    let (broker, mut client) = seeded();
    await_coordinator(&mut client, "g2");
    let (member_id, generation) = join_and_sync(&mut client, "g2");
    commit(
        &mut client,
        "g2",
        generation,
        &member_id,
        &[("orders", 0, 4)],
    );

    let groups = fjord_ok(&broker, &["list"]);
    assert_eq!(groups.lines().collect::<Vec<_>>(), vec!["g1", "g2"]);

    let (code, stdout, stderr) = fjord(&broker, &["describe", "g2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("no active members"), "{stderr}");
    let rows = table(&stdout);
    assert_eq!(rows[0], HEADER.to_vec());
    assert_eq!(rows.len(), 3, "{stdout}");
    // Partition 1 is assigned but has no committed offset: no current offset and no lag.
    for (row, expected) in rows[1..].iter().zip([
        ["g2", "orders", "0", "4", "5", "1"],
        ["g2", "orders", "1", "-", "3", "-"],
    ]) {
        assert_eq!(&row[..6], &expected[..], "{stdout}");
        assert_eq!(row[6], member_id);
        assert!(row[7].contains("127.0.0.1"), "{stdout}");
        assert_eq!(row[8], "fjord-test");
    }

    let (code, _, err) = fjord(
        &broker,
        &["reset-offsets", "g2", "--to-earliest", "--execute"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("Assignments can only be reset if the group 'g2' is inactive, but the current state is Stable."),
        "{err}"
    );
    assert_eq!(committed(&mut client, "g2", &[("orders", 0)]), vec![4]);

    let (code, _, err) = fjord(&broker, &["delete", "g2"]);
    assert_eq!(code, 1);
    assert!(err.contains("NON_EMPTY_GROUP"), "{err}");
}

#[test]
fn unreachable_broker_is_an_error() {
    let broker = start();
    let addr = broker.addr.to_string();
    drop(broker);
    let out = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args(["group", "list", "--bootstrap-server", &addr])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}
