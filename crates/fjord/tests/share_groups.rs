//! Share groups (KIP-932) over the wire against the built binary: a share group's configs, a
//! member joining by ShareGroupHeartbeat, records acquired by ShareFetch and acknowledged by
//! ShareAcknowledge, and Kafka's answers to stale session epochs, members acknowledging what
//! they do not hold, and malformed acknowledgement batches.
#[macro_use]
mod common;

use common::{Client, TestBroker};
use fjord_protocol::messages::create_topics_request::CreateTopicsRequest;
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use fjord_protocol::messages::list_groups_request::ListGroupsRequest;
use fjord_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
    ShareAcknowledgeRequest,
};
use fjord_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic, ShareFetchRequest,
};
use fjord_protocol::messages::share_fetch_response::ShareFetchResponse;
use fjord_protocol::messages::share_group_describe_request::ShareGroupDescribeRequest;
use fjord_protocol::messages::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use fjord_protocol::{RequestBody, ResponseBody, Uuid};
use fjord_records::{BatchBuilder, Compression};

const NONE: i16 = 0;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const GROUP_RESOURCE: i8 = 32;
const GROUP: &str = "workers";

fn create_topic(client: &mut Client, name: &str) -> Uuid {
    let response = expect!(
        client.request(
            7,
            RequestBody::CreateTopics(CreateTopicsRequest {
                topics: vec![common::creatable_topic(name, 1, &[])],
                timeout_ms: 10_000,
                validate_only: false,
            }),
        ),
        CreateTopics
    );
    assert_eq!(response.topics[0].error_code, NONE, "{response:?}");
    response.topics[0].topic_id
}

fn produce(client: &mut Client, topic: &str, count: usize) {
    let mut builder = BatchBuilder::new(Compression::None);
    for i in 0..count {
        builder
            .append(
                1_700_000_000_000 + i as i64,
                None,
                Some(format!("r{i}").as_bytes()),
                &[],
            )
            .expect("append");
    }
    let (code, _) = common::produce_batch(client, topic, builder.build().expect("build").freeze());
    assert_eq!(code, NONE);
}

fn alter_group_config(client: &mut Client, name: &str, value: &str) -> i16 {
    let response = expect!(
        client.request(
            1,
            RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
                resources: vec![AlterConfigsResource {
                    resource_type: GROUP_RESOURCE,
                    resource_name: GROUP.to_string(),
                    configs: vec![AlterableConfig {
                        name: name.to_string(),
                        config_operation: 0,
                        value: Some(value.to_string()),
                    }],
                }],
                validate_only: false,
            }),
        ),
        IncrementalAlterConfigs
    );
    response.responses[0].error_code
}

fn heartbeat(client: &mut Client, member: &str, epoch: i32) -> (i16, i32, usize) {
    let response = expect!(
        client.request(
            1,
            RequestBody::ShareGroupHeartbeat(ShareGroupHeartbeatRequest {
                group_id: GROUP.to_string(),
                member_id: member.to_string(),
                member_epoch: epoch,
                rack_id: None,
                subscribed_topic_names: (epoch == 0).then(|| vec!["jobs".to_string()]),
            }),
        ),
        ShareGroupHeartbeat
    );
    let assigned = response.assignment.map_or(0, |a| {
        a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
    });
    (response.error_code, response.member_epoch, assigned)
}

/// Joins `member` and heartbeats until it is assigned a partition: the group coordinator
/// assigns a partition once the share coordinator initialized its state. The member's epoch.
fn joined(client: &mut Client, member: &str) -> i32 {
    let (code, mut epoch, mut assigned) = heartbeat(client, member, 0);
    assert_eq!(code, NONE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while assigned == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{member} never assigned"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (code, now, got) = heartbeat(client, member, epoch);
        assert_eq!(code, NONE);
        (epoch, assigned) = (now, got);
    }
    epoch
}

fn share_fetch(
    client: &mut Client,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: Vec<AcknowledgementBatch>,
) -> ShareFetchResponse {
    expect!(
        client.request(
            2,
            RequestBody::ShareFetch(ShareFetchRequest {
                group_id: Some(GROUP.to_string()),
                member_id: Some(member.to_string()),
                share_session_epoch: epoch,
                max_wait_ms: 500,
                min_bytes: 1,
                max_bytes: 1 << 20,
                max_records: 500,
                batch_size: 500,
                topics: vec![FetchTopic {
                    topic_id,
                    partitions: vec![FetchPartition {
                        partition_index: 0,
                        acknowledgement_batches: acks,
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            }),
        ),
        ShareFetch
    )
}

/// (first, last, delivery count) of each range a fetch acquired.
fn acquired(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect()
}

fn acknowledge(
    client: &mut Client,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    batches: &[(i64, i64, i8)],
) -> (i16, i16) {
    let response = expect!(
        client.request(
            2,
            RequestBody::ShareAcknowledge(ShareAcknowledgeRequest {
                group_id: Some(GROUP.to_string()),
                member_id: Some(member.to_string()),
                share_session_epoch: epoch,
                is_renew_ack: false,
                topics: vec![AcknowledgeTopic {
                    topic_id,
                    partitions: vec![AcknowledgePartition {
                        partition_index: 0,
                        acknowledgement_batches: batches
                            .iter()
                            .map(|&(first_offset, last_offset, ty)| AckBatch {
                                first_offset,
                                last_offset,
                                acknowledge_types: vec![ty],
                            })
                            .collect(),
                    }],
                }],
            }),
        ),
        ShareAcknowledge
    );
    let partition = response
        .responses
        .first()
        .and_then(|t| t.partitions.first());
    (response.error_code, partition.map_or(-2, |p| p.error_code))
}

#[test]
fn a_share_group_acquires_acknowledges_and_redelivers() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let topic_id = create_topic(&mut client, "jobs");
    produce(&mut client, "jobs", 10);

    // The group's configs: checked against the broker's bounds, described as the group's own.
    assert_eq!(
        alter_group_config(&mut client, "share.record.lock.duration.ms", "10"),
        INVALID_CONFIG
    );
    assert_eq!(
        alter_group_config(&mut client, "share.auto.offset.reset", "earliest"),
        NONE
    );
    let described = expect!(
        client.request(
            4,
            RequestBody::DescribeConfigs(DescribeConfigsRequest {
                resources: vec![DescribeConfigsResource {
                    resource_type: GROUP_RESOURCE,
                    resource_name: GROUP.to_string(),
                    configuration_keys: Some(vec!["share.auto.offset.reset".to_string()]),
                }],
                ..Default::default()
            }),
        ),
        DescribeConfigs
    );
    let entry = &described.results[0].configs[0];
    assert_eq!(
        (entry.value.as_deref(), entry.config_source),
        (Some("earliest"), 8)
    );

    // Two members; with one partition both are assigned it, once its state is initialized.
    let first = joined(&mut client, "member-a");
    assert!(joined(&mut client, "member-b") > first);

    // A session opens at epoch 0, without acknowledgements.
    let ack = |first, last, ty| AcknowledgementBatch {
        first_offset: first,
        last_offset: last,
        acknowledge_types: vec![ty],
    };
    let refused = share_fetch(&mut client, "member-a", 0, topic_id, vec![ack(0, 0, 1)]);
    assert_eq!(refused.error_code, INVALID_REQUEST);
    let first = share_fetch(&mut client, "member-a", 0, topic_id, vec![]);
    assert_eq!(first.error_code, NONE, "{first:?}");
    assert_eq!(acquired(&first), vec![(0, 9, 1)]);
    assert!(first.acquisition_lock_timeout_ms > 0);
    let records = first.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    assert!(
        !records.is_empty(),
        "the acquired records' batches come with them"
    );

    // Nothing left for member b; stale epochs and unknown sessions are refused.
    let empty = share_fetch(&mut client, "member-b", 0, topic_id, vec![]);
    assert_eq!((empty.error_code, acquired(&empty)), (NONE, vec![]));
    assert_eq!(
        share_fetch(&mut client, "member-b", 7, topic_id, vec![]).error_code,
        INVALID_SHARE_SESSION_EPOCH
    );
    assert_eq!(
        share_fetch(&mut client, "member-c", 1, topic_id, vec![]).error_code,
        SHARE_SESSION_NOT_FOUND
    );
    assert_eq!(
        acknowledge(&mut client, "member-c", 0, topic_id, &[]).0,
        INVALID_SHARE_SESSION_EPOCH
    );

    // Member b may not acknowledge what member a holds; overlapping batches are malformed.
    assert_eq!(
        acknowledge(&mut client, "member-b", 1, topic_id, &[(0, 4, 1)]),
        (NONE, INVALID_RECORD_STATE)
    );
    assert_eq!(
        acknowledge(
            &mut client,
            "member-a",
            1,
            topic_id,
            &[(0, 4, 1), (4, 6, 1)]
        ),
        (NONE, INVALID_REQUEST)
    );
    // Member a accepts 0-4 and releases 5-9: member b gets 5-9 on their second delivery.
    assert_eq!(
        acknowledge(
            &mut client,
            "member-a",
            2,
            topic_id,
            &[(0, 4, 1), (5, 9, 2)]
        ),
        (NONE, NONE)
    );
    let second = share_fetch(&mut client, "member-b", 2, topic_id, vec![]);
    assert_eq!(acquired(&second), vec![(5, 9, 2)]);
    // Closing b's session releases them; a gets them a third time, with a's piggy-backed ack.
    assert_eq!(
        acknowledge(&mut client, "member-b", -1, topic_id, &[]),
        (NONE, NONE)
    );
    let third = share_fetch(&mut client, "member-a", 3, topic_id, vec![]);
    assert_eq!(acquired(&third), vec![(5, 9, 3)]);
    let done = share_fetch(&mut client, "member-a", 4, topic_id, vec![ack(5, 9, 1)]);
    let partition = &done.responses[0].partitions[0];
    assert_eq!(
        (partition.acknowledge_error_code, acquired(&done)),
        (NONE, vec![])
    );

    // The group as Kafka's tools see it.
    let listed = expect!(
        client.request(5, RequestBody::ListGroups(ListGroupsRequest::default())),
        ListGroups
    );
    let group = listed
        .groups
        .iter()
        .find(|g| g.group_id == GROUP)
        .expect("listed");
    assert_eq!(
        (group.group_type.as_str(), group.group_state.as_str()),
        ("share", "Stable")
    );
    let described = expect!(
        client.request(
            1,
            RequestBody::ShareGroupDescribe(ShareGroupDescribeRequest {
                group_ids: vec![GROUP.to_string()],
                include_authorized_operations: false,
            }),
        ),
        ShareGroupDescribe
    );
    assert_eq!(described.groups[0].members.len(), 2);
    let classic = expect!(
        client.request(
            6,
            RequestBody::DescribeGroups(DescribeGroupsRequest {
                groups: vec![GROUP.to_string()],
                ..Default::default()
            }),
        ),
        DescribeGroups
    );
    assert_eq!(classic.groups[0].error_code, GROUP_ID_NOT_FOUND);
    let delete = |client: &mut Client| {
        expect!(
            client.request(
                2,
                RequestBody::DeleteGroups(DeleteGroupsRequest {
                    groups_names: vec![GROUP.to_string()],
                }),
            ),
            DeleteGroups
        )
        .results[0]
            .error_code
    };
    assert_eq!(delete(&mut client), NON_EMPTY_GROUP);
    assert_eq!(heartbeat(&mut client, "member-a", -1).0, NONE);
    assert_eq!(heartbeat(&mut client, "member-b", -1).0, NONE);
    assert_eq!(delete(&mut client), NONE);
}

#[test]
fn a_connection_closing_releases_what_its_sessions_held() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let topic_id = create_topic(&mut client, "jobs");
    produce(&mut client, "jobs", 5);
    assert_eq!(
        alter_group_config(&mut client, "share.auto.offset.reset", "earliest"),
        NONE
    );
    joined(&mut client, "member-a");
    let mut doomed = broker.connect();
    assert_eq!(
        acquired(&share_fetch(&mut doomed, "member-a", 0, topic_id, vec![])),
        vec![(0, 4, 1)]
    );
    drop(doomed);
    // The other connection's session gets them once the first is gone, well before the lock
    // (30 s) would expire.
    let started = std::time::Instant::now();
    let mut epoch = 0;
    let got = loop {
        let fetched = share_fetch(&mut client, "member-b", epoch, topic_id, vec![]);
        epoch += 1;
        let got = acquired(&fetched);
        if !got.is_empty() || started.elapsed() > std::time::Duration::from_secs(10) {
            break got;
        }
    };
    assert_eq!(got, vec![(0, 4, 2)]);
}

#[test]
fn acknowledgements_outlive_a_restart_of_the_leader() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let topic_id = create_topic(&mut client, "jobs");
    produce(&mut client, "jobs", 10);
    assert_eq!(
        alter_group_config(&mut client, "share.auto.offset.reset", "earliest"),
        NONE
    );
    joined(&mut client, "member-a");
    let fetched = share_fetch(&mut client, "member-a", 0, topic_id, vec![]);
    assert_eq!(acquired(&fetched), vec![(0, 9, 1)]);
    // 0-3 accepted, 4 rejected, 5 released; 6-9 still held when the broker goes down.
    let acks = [(0, 3, 1), (4, 4, 3), (5, 5, 2)];
    assert_eq!(
        acknowledge(&mut client, "member-a", 1, topic_id, &acks),
        (NONE, NONE)
    );

    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    joined(&mut client, "member-b");
    let fetched = share_fetch(&mut client, "member-b", 0, topic_id, vec![]);
    // The released record comes back delivered twice; those held were never persisted as
    // acquired, so they come back as first deliveries; nothing acknowledged comes back.
    assert_eq!(acquired(&fetched), vec![(5, 5, 2), (6, 9, 1)]);
}

mod share_coordinator {
    //! The share coordinator's RPCs between brokers (InitializeShareGroupState and the rest):
    //! found by FindCoordinator's share key, fenced by state and leader epochs, and durable on
    //! `__share_group_state` across a restart.
    use super::*;
    use fjord_protocol::messages::delete_share_group_state_request as delete;
    use fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
    use fjord_protocol::messages::initialize_share_group_state_request as init;
    use fjord_protocol::messages::read_share_group_state_request as read;
    use fjord_protocol::messages::read_share_group_state_response::ReadShareGroupStateResponse;
    use fjord_protocol::messages::read_share_group_state_summary_request as summary;
    use fjord_protocol::messages::write_share_group_state_request as write;

    const FENCED_LEADER_EPOCH: i16 = 74;
    const FENCED_STATE_EPOCH: i16 = 124;
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

    fn find(client: &mut Client, key: &str) -> i16 {
        let response = expect!(
            client.request(
                6,
                RequestBody::FindCoordinator(FindCoordinatorRequest {
                    key_type: 2,
                    coordinator_keys: vec![key.to_string()],
                    ..Default::default()
                }),
            ),
            FindCoordinator
        );
        response.coordinators[0].error_code
    }

    fn initialize(client: &mut Client, topic_id: Uuid, partition: i32, state_epoch: i32) -> i16 {
        let response = expect!(
            client.request(
                0,
                RequestBody::InitializeShareGroupState(init::InitializeShareGroupStateRequest {
                    group_id: GROUP.into(),
                    topics: vec![init::InitializeStateData {
                        topic_id,
                        partitions: vec![init::PartitionData {
                            partition,
                            state_epoch,
                            start_offset: 0,
                        }],
                    }],
                }),
            ),
            InitializeShareGroupState
        );
        response.results[0].partitions[0].error_code
    }

    fn read(client: &mut Client, topic_id: Uuid, leader_epoch: i32) -> ReadShareGroupStateResponse {
        expect!(
            client.request(
                0,
                RequestBody::ReadShareGroupState(read::ReadShareGroupStateRequest {
                    group_id: GROUP.into(),
                    topics: vec![read::ReadStateData {
                        topic_id,
                        partitions: vec![read::PartitionData {
                            partition: 0,
                            leader_epoch,
                        }],
                    }],
                }),
            ),
            ReadShareGroupState
        )
    }

    fn write(
        client: &mut Client,
        topic_id: Uuid,
        (state_epoch, leader_epoch): (i32, i32),
        batches: &[(i64, i64, i8, i16)],
    ) -> i16 {
        let response = expect!(
            client.request(
                1,
                RequestBody::WriteShareGroupState(write::WriteShareGroupStateRequest {
                    group_id: GROUP.into(),
                    topics: vec![write::WriteStateData {
                        topic_id,
                        partitions: vec![write::PartitionData {
                            partition: 0,
                            state_epoch,
                            leader_epoch,
                            start_offset: 0,
                            delivery_complete_count: 5,
                            state_batches: batches
                                .iter()
                                .map(|&(first, last, state, count)| write::StateBatch {
                                    first_offset: first,
                                    last_offset: last,
                                    delivery_state: state,
                                    delivery_count: count,
                                })
                                .collect(),
                        }],
                    }],
                }),
            ),
            WriteShareGroupState
        );
        response.results[0].partitions[0].error_code
    }

    fn batches(response: &ReadShareGroupStateResponse) -> Vec<(i64, i64, i8, i16)> {
        response.results[0].partitions[0]
            .state_batches
            .iter()
            .map(|b| {
                (
                    b.first_offset,
                    b.last_offset,
                    b.delivery_state,
                    b.delivery_count,
                )
            })
            .collect()
    }

    #[test]
    fn state_is_fenced_by_epochs_and_outlives_a_restart() {
        let mut broker = TestBroker::start();
        let mut client = broker.connect();
        let topic_id = create_topic(&mut client, "queue");
        assert_eq!(find(&mut client, &format!("{GROUP}:{topic_id}:0")), NONE);
        assert_eq!(find(&mut client, "not-a-share-key"), INVALID_REQUEST);

        // Nothing can be read or written before the group coordinator initializes the state.
        let response = read(&mut client, topic_id, 1);
        assert_eq!(
            response.results[0].partitions[0].error_code,
            INVALID_REQUEST
        );
        assert_eq!(initialize(&mut client, topic_id, 0, 2), NONE);
        assert_eq!(initialize(&mut client, topic_id, 0, 1), FENCED_STATE_EPOCH);
        assert_eq!(
            initialize(&mut client, topic_id, 5, 2),
            UNKNOWN_TOPIC_OR_PARTITION
        );

        // A leader reads (raising the leader epoch), then writes what its consumers did.
        let response = read(&mut client, topic_id, 3);
        let partition = &response.results[0].partitions[0];
        assert_eq!((partition.error_code, partition.start_offset), (NONE, 0));
        assert_eq!(write(&mut client, topic_id, (2, 3), &[(0, 9, 0, 1)]), NONE);
        assert_eq!(
            write(&mut client, topic_id, (2, 3), &[(0, 4, 2, 1), (5, 5, 0, 2)]),
            NONE
        );
        assert_eq!(
            write(&mut client, topic_id, (2, 2), &[(6, 6, 2, 1)]),
            FENCED_LEADER_EPOCH
        );
        assert_eq!(
            write(&mut client, topic_id, (1, 3), &[(6, 6, 2, 1)]),
            FENCED_STATE_EPOCH
        );
        assert_eq!(
            write(&mut client, topic_id, (2, 3), &[(6, 5, 2, 1)]),
            INVALID_REQUEST
        );
        let want = vec![(0, 4, 2, 1), (5, 5, 0, 2), (6, 9, 0, 1)];
        assert_eq!(batches(&read(&mut client, topic_id, 3)), want);

        // The state is on `__share_group_state`: a restarted broker loads it back, and the old
        // leader epoch stays fenced.
        broker.restart();
        let mut client = broker.connect();
        assert_eq!(find(&mut client, &format!("{GROUP}:{topic_id}:0")), NONE);
        assert_eq!(batches(&read(&mut client, topic_id, 4)), want);
        assert_eq!(
            write(&mut client, topic_id, (2, 3), &[(6, 6, 2, 1)]),
            FENCED_LEADER_EPOCH
        );
        let response = expect!(
            client.request(
                1,
                RequestBody::ReadShareGroupStateSummary(
                    summary::ReadShareGroupStateSummaryRequest {
                        group_id: GROUP.into(),
                        topics: vec![summary::ReadStateSummaryData {
                            topic_id,
                            partitions: vec![summary::PartitionData {
                                partition: 0,
                                leader_epoch: 0,
                            }],
                        }],
                    }
                ),
            ),
            ReadShareGroupStateSummary
        );
        let partition = &response.results[0].partitions[0];
        assert_eq!(
            (
                partition.start_offset,
                partition.leader_epoch,
                partition.state_epoch
            ),
            (0, 4, 2)
        );
        assert_eq!(partition.delivery_complete_count, 5);

        let response = expect!(
            client.request(
                0,
                RequestBody::DeleteShareGroupState(delete::DeleteShareGroupStateRequest {
                    group_id: GROUP.into(),
                    topics: vec![delete::DeleteStateData {
                        topic_id,
                        partitions: vec![delete::PartitionData { partition: 0 }],
                    }],
                }),
            ),
            DeleteShareGroupState
        );
        assert_eq!(response.results[0].partitions[0].error_code, NONE);
        let response = read(&mut client, topic_id, 4);
        assert_eq!(
            response.results[0].partitions[0].error_code,
            INVALID_REQUEST
        );
    }
}
