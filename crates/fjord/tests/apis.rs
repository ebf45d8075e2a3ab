//! Protocol conformance of every API fjord advertises, against the real binary: each API at its
//! lowest and highest advertised version and where Kafka's semantics change, asserting what a
//! Kafka broker answers (KafkaApis, ReplicaManager, UnifiedLog and the message schemas).
#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_broker::SUPPORTED_APIS;
use fjord_protocol::messages::api_versions_request::ApiVersionsRequest;
use fjord_protocol::messages::create_partitions_request::*;
use fjord_protocol::messages::create_partitions_response::*;
use fjord_protocol::messages::create_topics_request::*;
use fjord_protocol::messages::create_topics_response::*;
use fjord_protocol::messages::delete_records_request::*;
use fjord_protocol::messages::delete_records_response::*;
use fjord_protocol::messages::delete_topics_request::*;
use fjord_protocol::messages::delete_topics_response::*;
use fjord_protocol::messages::describe_cluster_request::*;
use fjord_protocol::messages::describe_configs_request::*;
use fjord_protocol::messages::describe_configs_response::*;
use fjord_protocol::messages::describe_log_dirs_request::*;
use fjord_protocol::messages::fetch_request::*;
use fjord_protocol::messages::fetch_response::*;
use fjord_protocol::messages::init_producer_id_request::*;
use fjord_protocol::messages::init_producer_id_response::*;
use fjord_protocol::messages::list_offsets_request::*;
use fjord_protocol::messages::list_offsets_response::*;
use fjord_protocol::messages::metadata_request::*;
use fjord_protocol::messages::metadata_response::*;
use fjord_protocol::messages::offset_for_leader_epoch_request::*;
use fjord_protocol::messages::produce_request::*;
use fjord_protocol::messages::produce_response::*;
use fjord_protocol::{ApiKey, RequestBody, ResponseBody, Uuid};
use fjord_records::header::attributes::TIMESTAMP_TYPE_LOG_APPEND;
use fjord_records::{BatchBuilder, BatchHeader, Compression};

// Kafka error codes asserted below.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_REQUIRED_ACKS: i16 = 21;
const UNSUPPORTED_VERSION: i16 = 35;
const POLICY_VIOLATION: i16 = 44;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const INVALID_RECORD: i16 = 87;
const UNKNOWN_TOPIC_ID: i16 = 100;
const INVALID_REGULAR_EXPRESSION: i16 = 128;
const REBOOTSTRAP_REQUIRED: i16 = 129;

// DescribeConfigs config sources.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

// ---- helpers ------------------------------------------------------------------------------

fn range(key: ApiKey) -> (i16, i16) {
    SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
        .unwrap_or_else(|| panic!("{} is not advertised", key.name()))
}

fn create_topics(
    client: &mut Client,
    version: i16,
    topics: Vec<CreatableTopic>,
    validate_only: bool,
) -> CreateTopicsResponse {
    expect!(
        client.request(
            version,
            RequestBody::CreateTopics(CreateTopicsRequest {
                topics,
                timeout_ms: 10_000,
                validate_only,
            }),
        ),
        CreateTopics
    )
}

fn topic(name: &str, partitions: i32, configs: &[(&str, &str)]) -> CreatableTopic {
    common::creatable_topic(name, partitions, configs)
}

/// Creates a topic at CreateTopics v7 and returns its id.
fn create(client: &mut Client, name: &str, partitions: i32, configs: &[(&str, &str)]) -> Uuid {
    let response = create_topics(client, 7, vec![topic(name, partitions, configs)], false);
    let result = &response.topics[0];
    assert_eq!(result.error_code, NONE, "create {name}: {result:?}");
    assert_ne!(result.topic_id, Uuid::ZERO);
    result.topic_id
}

/// Metadata for `topics` (None: all). Below v4 requests always allow auto-creation; from v4 on
/// this helper never does.
fn metadata(client: &mut Client, version: i16, topics: Option<&[&str]>) -> MetadataResponse {
    let request = MetadataRequest {
        topics: topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some(n.to_string()),
                })
                .collect()
        }),
        allow_auto_topic_creation: version < 4,
        ..Default::default()
    };
    expect!(
        client.request(version, RequestBody::Metadata(request)),
        Metadata
    )
}

/// One batch of `values`, the i-th record at `timestamp + i`.
fn batch(values: &[&str], timestamp: i64) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    for (i, v) in values.iter().enumerate() {
        builder
            .append(timestamp + i as i64, None, Some(v.as_bytes()), &[])
            .expect("append");
    }
    builder.build().expect("build").freeze()
}

/// One batch of records keyed by `keys` (compacted topics refuse null keys).
fn keyed_batch(keys: &[&str], timestamp: i64) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    for (i, k) in keys.iter().enumerate() {
        builder
            .append(timestamp + i as i64, Some(k.as_bytes()), Some(b"v"), &[])
            .expect("append");
    }
    builder.build().expect("build").freeze()
}

fn produce_request(acks: i16, topic: &str, partition: i32, records: Bytes) -> RequestBody {
    RequestBody::Produce(ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: topic.to_string(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(records),
            }],
            ..Default::default()
        }],
    })
}

/// Produces one batch and returns the partition's response.
fn produce(
    client: &mut Client,
    version: i16,
    acks: i16,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> PartitionProduceResponse {
    let mut request = produce_request(acks, topic, partition, records);
    // From v13 topics go by id (the name is not on the wire).
    let id = if version >= 13 {
        let id = topic_id(client, topic);
        if let RequestBody::Produce(r) = &mut request {
            r.topic_data[0].topic_id = id;
        }
        id
    } else {
        Uuid::ZERO
    };
    let response = expect!(client.request(version, request), Produce);
    assert_eq!(response.responses.len(), 1);
    if version >= 13 {
        assert_eq!(response.responses[0].topic_id, id);
    } else {
        assert_eq!(response.responses[0].name, topic);
    }
    response.responses[0].partition_responses[0].clone()
}

/// The id of topic `name`, from Metadata.
fn topic_id(client: &mut Client, name: &str) -> Uuid {
    let m = metadata(client, 12, Some(&[name]));
    assert_eq!(m.topics[0].error_code, NONE, "{m:?}");
    m.topics[0].topic_id
}

fn produce_ok(client: &mut Client, topic: &str, partition: i32, values: &[&str]) -> i64 {
    let r = produce(client, 11, -1, topic, partition, batch(values, 1_000));
    assert_eq!(r.error_code, NONE, "{r:?}");
    r.base_offset
}

/// A fetch of partitions by name (v < 13) or by id (v13+), no session.
fn fetch_request(parts: &[(&str, Uuid, i32, i64)], partition_max_bytes: i32) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (name, id, partition, offset) in parts {
        let p = FetchPartition {
            partition: *partition,
            fetch_offset: *offset,
            partition_max_bytes,
            ..Default::default()
        };
        match topics.last_mut() {
            Some(t) if t.topic == *name => t.partitions.push(p),
            _ => topics.push(FetchTopic {
                topic: name.to_string(),
                topic_id: *id,
                partitions: vec![p],
            }),
        }
    }
    FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        topics,
        ..Default::default()
    }
}

fn fetch(client: &mut Client, version: i16, request: FetchRequest) -> FetchResponse {
    expect!(client.request(version, RequestBody::Fetch(request)), Fetch)
}

/// The batches in a fetched records section: header and record values.
fn batches(records: &Option<Bytes>) -> Vec<(BatchHeader, Vec<String>)> {
    let Some(records) = records else {
        return Vec::new();
    };
    fjord_records::split_batches(records)
        .expect("whole batches")
        .into_iter()
        .map(|b| {
            let header = BatchHeader::parse(&b).expect("header");
            let values = fjord_records::records(&b, 1 << 20)
                .expect("records")
                .map(|r| {
                    let r = r.expect("record");
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).into_owned()
                })
                .collect();
            (header, values)
        })
        .collect()
}

/// Every value in a partition from offset 0, read in one fetch.
fn read_all(client: &mut Client, topic: &str, partition: i32) -> Vec<String> {
    read_partition_from(client, topic, partition, 0)
}

/// Every value of partition 0 from the batch holding `offset` on.
fn read_all_from(client: &mut Client, topic: &str, offset: i64) -> Vec<String> {
    read_partition_from(client, topic, 0, offset)
}

fn read_partition_from(
    client: &mut Client,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Vec<String> {
    let response = fetch(
        client,
        12,
        fetch_request(&[(topic, Uuid::ZERO, partition, offset)], 64 << 20),
    );
    let data = &response.responses[0].partitions[0];
    assert_eq!(data.error_code, NONE, "{data:?}");
    batches(&data.records)
        .into_iter()
        .flat_map(|(_, v)| v)
        .collect()
}

fn partition_of(response: &FetchResponse, topic_index: usize) -> &PartitionData {
    &response.responses[topic_index].partitions[0]
}

// ---- ApiVersions --------------------------------------------------------------------------

#[test]
fn api_versions_lowest_highest_and_unsupported() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let (min, max) = range(ApiKey::ApiVersions);
    for version in [min, max] {
        let r = expect!(
            client.request(
                version,
                RequestBody::ApiVersions(ApiVersionsRequest {
                    client_software_name: "fjord-test".into(),
                    client_software_version: "1".into(),
                    ..Default::default()
                }),
            ),
            ApiVersions
        );
        assert_eq!(r.error_code, NONE);
        let advertised: Vec<(i16, i16, i16)> = r
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        let expected: Vec<(i16, i16, i16)> = SUPPORTED_APIS
            .iter()
            .map(|(k, min, max)| (*k as i16, *min, *max))
            .collect();
        assert_eq!(advertised, expected, "v{version}");
        // Features are tagged fields of v3+.
        let finalized: Vec<(&str, i16, i16)> = r
            .finalized_features
            .iter()
            .map(|f| (f.name.as_str(), f.min_version_level, f.max_version_level))
            .collect();
        let supported: Vec<&str> = r
            .supported_features
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        if version >= 3 {
            assert_eq!(r.finalized_features_epoch, 0);
            assert_eq!(
                finalized,
                [
                    ("metadata.version", 25, 25),
                    ("transaction.version", 2, 2),
                    ("group.version", 1, 1),
                    ("share.version", 1, 1)
                ]
            );
            assert_eq!(
                supported,
                [
                    "metadata.version",
                    "kraft.version",
                    "transaction.version",
                    "group.version",
                    "share.version"
                ]
            );
        } else {
            assert!(finalized.is_empty() && supported.is_empty());
            assert_eq!(r.finalized_features_epoch, -1);
        }
    }
    // Its own fields checked as Kafka checks them: v5 names the cluster and node the client
    // means (KIP-1242), both or neither; another cluster or node is stale metadata.
    let md = metadata(&mut client, 12, Some(&[]));
    let cluster_id = md.cluster_id.clone();
    let node_id = md.brokers[0].node_id;
    let mut ask = |version: i16, name: &str, cluster: Option<&str>, node: i32| {
        let r = expect!(
            client.request(
                version,
                RequestBody::ApiVersions(ApiVersionsRequest {
                    client_software_name: name.into(),
                    client_software_version: "4.4.0".into(),
                    cluster_id: cluster.map(str::to_string),
                    node_id: node,
                }),
            ),
            ApiVersions
        );
        (r.error_code, r.api_keys.len())
    };
    let all = SUPPORTED_APIS.len();
    assert_eq!(
        ask(5, "apache-kafka-java", cluster_id.as_deref(), node_id),
        (NONE, all)
    );
    assert_eq!(ask(5, "apache-kafka-java", None, -1), (NONE, all));
    assert_eq!(
        ask(5, "apache-kafka-java", Some("another"), node_id),
        (REBOOTSTRAP_REQUIRED, 0)
    );
    assert_eq!(
        ask(5, "apache-kafka-java", cluster_id.as_deref(), node_id + 1),
        (REBOOTSTRAP_REQUIRED, 0)
    );
    assert_eq!(
        ask(5, "apache-kafka-java", cluster_id.as_deref(), -1),
        (INVALID_REQUEST, 0)
    );
    assert_eq!(
        ask(5, "apache-kafka-java", None, node_id),
        (INVALID_REQUEST, 0)
    );
    for bad in ["", "-kafka", "kafka client", "kafka."] {
        assert_eq!(ask(3, bad, None, -1), (INVALID_REQUEST, 0), "{bad:?}");
    }
    // Before v5 the cluster and node are not on the wire.
    assert_eq!(ask(4, "apache-kafka-java", None, -1), (NONE, all));
    // A version newer than the broker knows: a v0 response with UNSUPPORTED_VERSION and the
    // supported ranges, so the client can pick one (KIP-511).
    let mut frame = client
        .encode_request(
            ApiKey::ApiVersions,
            max,
            &RequestBody::ApiVersions(common::api_versions_request()),
        )
        .to_vec();
    frame[2..4].copy_from_slice(&(max + 1).to_be_bytes());
    client.send_raw(&frame).expect("send");
    let body = client.read_frame().expect("answer");
    let mut decoder = fjord_protocol::Decoder::new(body);
    let _header =
        <fjord_protocol::ResponseHeader as fjord_protocol::Decodable>::decode(&mut decoder, 0)
            .expect("header");
    let r = expect!(
        ResponseBody::decode(ApiKey::ApiVersions, &mut decoder, 0).expect("v0 body"),
        ApiVersions
    );
    assert_eq!(r.error_code, UNSUPPORTED_VERSION);
    assert_eq!(r.api_keys.len(), SUPPORTED_APIS.len());
}

// ---- Metadata -----------------------------------------------------------------------------

#[test]
fn metadata_all_topics_vs_named() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let a = create(&mut client, "meta-a", 2, &[]);
    create(&mut client, "meta-b", 1, &[]);
    let (min, max) = range(ApiKey::Metadata);
    assert_eq!(min, 0);
    // v0: an empty list means every topic.
    let all = metadata(&mut client, 0, Some(&[]));
    let names: Vec<_> = all.topics.iter().filter_map(|t| t.name.clone()).collect();
    assert_eq!(names, ["meta-a", "meta-b"]);
    for version in [1, max] {
        // v1+: null means every topic, an empty list none.
        let all = metadata(&mut client, version, None);
        assert_eq!(all.topics.len(), 2, "v{version}");
        let none = metadata(&mut client, version, Some(&[]));
        assert!(none.topics.is_empty(), "v{version}");
        let named = metadata(&mut client, version, Some(&["meta-a"]));
        assert_eq!(named.topics.len(), 1);
        let t = &named.topics[0];
        assert_eq!((t.error_code, t.name.as_deref()), (NONE, Some("meta-a")));
        assert_eq!(t.partitions.len(), 2);
        assert!(!t.is_internal);
        if version >= 10 {
            assert_eq!(t.topic_id, a, "v10+ carries topic ids");
        }
    }
    // v0 reports neither controller nor cluster id; v1 the controller, v2+ the cluster id.
    let v1 = metadata(&mut client, 1, Some(&[]));
    let v12 = metadata(&mut client, max, Some(&[]));
    assert_eq!(v1.brokers.len(), 1);
    let node = v1.brokers[0].node_id;
    assert_eq!(v1.brokers[0].port, i32::from(broker.addr.port()));
    assert_eq!(v1.controller_id, node);
    assert_eq!(v12.controller_id, node);
    let cluster_id = v12.cluster_id.clone().expect("cluster id");
    assert!(!cluster_id.is_empty());
    let cluster = expect!(
        client.request(
            1,
            RequestBody::DescribeCluster(DescribeClusterRequest {
                endpoint_type: 1,
                ..Default::default()
            })
        ),
        DescribeCluster
    );
    assert_eq!(cluster.cluster_id, cluster_id);
}

#[test]
fn metadata_partitions_leaders_epochs_and_ids() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let id = create(&mut client, "epochs", 3, &[]);
    let (_, max) = range(ApiKey::Metadata);
    for version in [0, 7, 9, 10, max] {
        let m = metadata(&mut client, version, Some(&["epochs"]));
        let node = m.brokers[0].node_id;
        let t = &m.topics[0];
        assert_eq!(t.error_code, NONE);
        let indexes: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
        assert_eq!(indexes, [0, 1, 2]);
        for p in &t.partitions {
            assert_eq!(p.error_code, NONE);
            assert_eq!(p.leader_id, node);
            assert_eq!(p.replica_nodes, [node]);
            assert_eq!(p.isr_nodes, [node]);
            if version >= 7 {
                assert!(p.leader_epoch >= 0, "v7+ leader epoch: {p:?}");
            } else {
                assert_eq!(p.leader_epoch, -1, "not on the wire before v7");
            }
        }
        if version >= 10 {
            assert_eq!(t.topic_id, id);
        } else {
            assert_eq!(t.topic_id, Uuid::ZERO, "not on the wire before v10");
        }
    }
    // v12 names topics by id; an unknown id answers UNKNOWN_TOPIC_ID with a null name.
    let by_id = expect!(
        client.request(
            max,
            RequestBody::Metadata(MetadataRequest {
                topics: Some(vec![
                    MetadataRequestTopic {
                        topic_id: id,
                        name: None,
                    },
                    MetadataRequestTopic {
                        topic_id: Uuid([7; 16]),
                        name: None,
                    },
                    // The Java consumer sends an id with an empty (not null) name: the id wins.
                    MetadataRequestTopic {
                        topic_id: id,
                        name: Some(String::new()),
                    },
                ]),
                allow_auto_topic_creation: false,
                ..Default::default()
            })
        ),
        Metadata
    );
    let found: Vec<_> = by_id.topics.iter().filter(|t| t.topic_id == id).collect();
    assert_eq!(found.len(), 2, "both requests for the id answered");
    for found in found {
        assert_eq!(
            (found.error_code, found.name.as_deref()),
            (NONE, Some("epochs"))
        );
    }
    let unknown = by_id
        .topics
        .iter()
        .find(|t| t.topic_id == Uuid([7; 16]))
        .expect("unknown id");
    assert_eq!(unknown.error_code, UNKNOWN_TOPIC_ID);
    assert_eq!(unknown.name, None);
}

#[test]
fn metadata_auto_creation() {
    let broker = TestBroker::start_with(&[("num.partitions", "2")]);
    let mut client = broker.connect();
    // Before v4 every Metadata request may auto-create.
    let m = metadata(&mut client, 3, Some(&["auto-v3"]));
    assert!(matches!(m.topics[0].error_code, NONE | 5), "{m:?}");
    // v4+ only when the client allows it.
    let refused = expect!(
        client.request(
            12,
            RequestBody::Metadata(MetadataRequest {
                topics: Some(vec![MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some("auto-no".into()),
                }]),
                allow_auto_topic_creation: false,
                ..Default::default()
            })
        ),
        Metadata
    );
    assert_eq!(refused.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let allowed = expect!(
        client.request(
            12,
            RequestBody::Metadata(MetadataRequest {
                topics: Some(vec![MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some("auto-yes".into()),
                }]),
                allow_auto_topic_creation: true,
                ..Default::default()
            })
        ),
        Metadata
    );
    assert!(matches!(allowed.topics[0].error_code, NONE | 5));
    // An invalid name is never created.
    let bad = metadata(&mut client, 3, Some(&["bad name!"]));
    assert_eq!(bad.topics[0].error_code, INVALID_TOPIC_EXCEPTION);
    // Auto-created topics get num.partitions partitions.
    let all = metadata(&mut client, 12, None);
    let mut names: Vec<(String, usize)> = all
        .topics
        .iter()
        .map(|t| (t.name.clone().unwrap_or_default(), t.partitions.len()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("auto-v3".to_string(), 2), ("auto-yes".to_string(), 2)]
    );

    // auto.create.topics.enable=false wins over the client.
    let off = TestBroker::start_with(&[("auto.create.topics.enable", "false")]);
    let mut client = off.connect();
    let m = metadata(&mut client, 3, Some(&["never"]));
    assert_eq!(m.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    assert!(metadata(&mut client, 12, None).topics.is_empty());
}

// ---- CreateTopics / DeleteTopics / CreatePartitions ---------------------------------------

#[test]
fn create_topics_defaults_assignments_and_configs() {
    let broker = TestBroker::start_with(&[("num.partitions", "3")]);
    let mut client = broker.connect();
    let (min, max) = range(ApiKey::CreateTopics);
    let node = metadata(&mut client, 1, Some(&[])).brokers[0].node_id;
    // Lowest version: explicit counts.
    let r = create_topics(&mut client, min, vec![topic("ct-min", 2, &[])], false);
    assert_eq!(r.topics[0].name, "ct-min");
    assert_eq!(r.topics[0].error_code, NONE);
    assert_eq!(
        metadata(&mut client, 1, Some(&["ct-min"])).topics[0]
            .partitions
            .len(),
        2
    );
    // v4+: -1/-1 take num.partitions and default.replication.factor.
    let mut defaults = topic("ct-defaults", -1, &[]);
    defaults.replication_factor = -1;
    let r = create_topics(&mut client, max, vec![defaults], false);
    let t = &r.topics[0];
    assert_eq!(t.error_code, NONE, "{t:?}");
    assert_eq!((t.num_partitions, t.replication_factor), (3, 1));
    assert_ne!(t.topic_id, Uuid::ZERO, "v7 returns the topic id");
    let m = metadata(&mut client, 12, Some(&["ct-defaults"]));
    assert_eq!(m.topics[0].topic_id, t.topic_id);
    assert_eq!(m.topics[0].partitions.len(), 3);
    // Explicit assignments: -1/-1 and one broker list per partition.
    let assigned = CreatableTopic {
        name: "ct-assigned".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: (0..2)
            .map(|i| CreatableReplicaAssignment {
                partition_index: i,
                broker_ids: vec![node],
            })
            .collect(),
        configs: Vec::new(),
    };
    let r = create_topics(&mut client, max, vec![assigned], false);
    let t = &r.topics[0];
    assert_eq!(t.error_code, NONE, "{t:?}");
    assert_eq!((t.num_partitions, t.replication_factor), (2, 1));
    let m = metadata(&mut client, 12, Some(&["ct-assigned"]));
    assert!(m.topics[0]
        .partitions
        .iter()
        .all(|p| p.replica_nodes == [node]));
    // Assignments naming a broker that does not exist.
    let bad = CreatableTopic {
        name: "ct-bad-assignment".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: vec![CreatableReplicaAssignment {
            partition_index: 0,
            broker_ids: vec![node + 100],
        }],
        configs: Vec::new(),
    };
    let r = create_topics(&mut client, max, vec![bad], false);
    assert_eq!(r.topics[0].error_code, INVALID_REPLICA_ASSIGNMENT);
    // v5+ echoes the effective configs with their sources.
    for version in [5, max] {
        let name = format!("ct-configs-{version}");
        let r = create_topics(
            &mut client,
            version,
            vec![topic(&name, 1, &[("retention.ms", "12345")])],
            false,
        );
        let t = &r.topics[0];
        assert_eq!(t.error_code, NONE);
        let configs = t.configs.as_ref().expect("configs echoed at v5+");
        let by_name: BTreeMap<&str, (&Option<String>, i8)> = configs
            .iter()
            .map(|c| (c.name.as_str(), (&c.value, c.config_source)))
            .collect();
        assert_eq!(
            by_name.get("retention.ms"),
            Some(&(&Some("12345".to_string()), DYNAMIC_TOPIC_CONFIG))
        );
        assert_eq!(
            by_name.get("cleanup.policy"),
            Some(&(&Some("delete".to_string()), DEFAULT_CONFIG))
        );
    }
    // Invalid config value.
    let r = create_topics(
        &mut client,
        max,
        vec![topic(
            "ct-bad-config",
            1,
            &[("cleanup.policy", "sometimes")],
        )],
        false,
    );
    assert_eq!(r.topics[0].error_code, 40, "INVALID_CONFIG");
}

#[test]
fn create_topics_validate_only_duplicates_and_existing() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let (min, max) = range(ApiKey::CreateTopics);
    for version in [min, max] {
        // validate_only answers as a creation would, and creates nothing.
        let name = format!("vo-{version}");
        let r = create_topics(&mut client, version, vec![topic(&name, 4, &[])], true);
        assert_eq!(r.topics[0].error_code, NONE);
        let m = metadata(&mut client, 12, Some(&[name.as_str()]));
        assert_eq!(m.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
        // Existing topic.
        let r = create_topics(&mut client, version, vec![topic(&name, 1, &[])], false);
        assert_eq!(r.topics[0].error_code, NONE);
        let r = create_topics(&mut client, version, vec![topic(&name, 1, &[])], false);
        assert_eq!(r.topics[0].error_code, TOPIC_ALREADY_EXISTS);
        assert!(r.topics[0].error_message.is_some());
        // The same name twice in one request: INVALID_REQUEST for that name, others proceed.
        let dup = format!("dup-{version}");
        let other = format!("other-{version}");
        let r = create_topics(
            &mut client,
            version,
            vec![
                topic(&dup, 1, &[]),
                topic(&other, 1, &[]),
                topic(&dup, 2, &[]),
            ],
            false,
        );
        let results: BTreeMap<&str, i16> = r
            .topics
            .iter()
            .map(|t| (t.name.as_str(), t.error_code))
            .collect();
        assert_eq!(
            results,
            BTreeMap::from([(dup.as_str(), INVALID_REQUEST), (other.as_str(), NONE)])
        );
        let m = metadata(&mut client, 12, Some(&[dup.as_str()]));
        assert_eq!(m.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    }
    // Zero partitions and an invalid name.
    let r = create_topics(
        &mut client,
        max,
        vec![topic("zero", 0, &[]), topic("bad/name", 1, &[])],
        false,
    );
    assert_eq!(r.topics[0].error_code, INVALID_PARTITIONS);
    assert_eq!(r.topics[1].error_code, INVALID_TOPIC_EXCEPTION);
}

fn delete_topics(
    client: &mut Client,
    version: i16,
    names: &[&str],
    ids: &[Uuid],
) -> DeleteTopicsResponse {
    let request = if version >= 6 {
        DeleteTopicsRequest {
            topics: names
                .iter()
                .map(|n| DeleteTopicState {
                    name: Some(n.to_string()),
                    topic_id: Uuid::ZERO,
                })
                .chain(ids.iter().map(|id| DeleteTopicState {
                    name: None,
                    topic_id: *id,
                }))
                .collect(),
            topic_names: Vec::new(),
            timeout_ms: 10_000,
        }
    } else {
        DeleteTopicsRequest {
            topics: Vec::new(),
            topic_names: names.iter().map(|n| n.to_string()).collect(),
            timeout_ms: 10_000,
        }
    };
    expect!(
        client.request(version, RequestBody::DeleteTopics(request)),
        DeleteTopics
    )
}

#[test]
fn delete_topics_by_name_and_by_id() {
    // Deleted dirs removed a second after they are renamed, not Kafka's default minute.
    let broker = TestBroker::start_with(&[("log.segment.delete.delay.ms", "1000")]);
    let mut client = broker.connect();
    let (min, max) = range(ApiKey::DeleteTopics);
    let first_id = create(&mut client, "del-name", 2, &[]);
    let by_id = create(&mut client, "del-id", 1, &[]);
    produce_ok(&mut client, "del-name", 0, &["x"]);
    let log_dir = broker.log_dir();
    assert!(log_dir.join("del-name-0").is_dir());
    assert!(log_dir.join("del-id-0").is_dir());

    let r = delete_topics(&mut client, min, &["del-name", "del-never"], &[]);
    let codes: BTreeMap<Option<String>, i16> = r
        .responses
        .iter()
        .map(|t| (t.name.clone(), t.error_code))
        .collect();
    assert_eq!(
        codes,
        BTreeMap::from([
            (Some("del-name".to_string()), NONE),
            (Some("del-never".to_string()), UNKNOWN_TOPIC_OR_PARTITION)
        ])
    );
    let r = delete_topics(&mut client, max, &[], &[by_id, Uuid([9; 16])]);
    let known = r
        .responses
        .iter()
        .find(|t| t.topic_id == by_id)
        .expect("known id");
    assert_eq!(known.error_code, NONE);
    assert_eq!(
        known.name.as_deref(),
        Some("del-id"),
        "the name is resolved"
    );
    let unknown = r
        .responses
        .iter()
        .find(|t| t.topic_id == Uuid([9; 16]))
        .expect("unknown id");
    assert_eq!(unknown.error_code, UNKNOWN_TOPIC_ID);

    // Gone from metadata, from the data dir (renamed `-delete` at once, removed after
    // log.segment.delete.delay.ms), and not fetchable.
    let m = metadata(&mut client, 12, None);
    assert!(m.topics.is_empty(), "{m:?}");
    for dir in ["del-name-0", "del-name-1", "del-id-0"] {
        assert!(!log_dir.join(dir).exists(), "{dir} still exists");
    }
    let leftovers = || -> Vec<String> {
        std::fs::read_dir(&log_dir)
            .expect("log dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("del-"))
            .collect()
    };
    let renamed = leftovers();
    assert!(
        renamed.len() == 3 && renamed.iter().all(|n| n.ends_with("-delete")),
        "{renamed:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !leftovers().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", leftovers());
        std::thread::sleep(Duration::from_millis(100));
    }
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("del-name", Uuid::ZERO, 0, 0)], 1024),
    );
    assert_eq!(partition_of(&f, 0).error_code, UNKNOWN_TOPIC_OR_PARTITION);

    // Re-created with the same name: a new id and an empty log.
    let second_id = create(&mut client, "del-name", 1, &[]);
    assert_ne!(second_id, first_id);
    assert!(read_all(&mut client, "del-name", 0).is_empty());
}

fn create_partitions(
    client: &mut Client,
    version: i16,
    name: &str,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
    validate_only: bool,
) -> CreatePartitionsTopicResult {
    let r = expect!(
        client.request(
            version,
            RequestBody::CreatePartitions(CreatePartitionsRequest {
                topics: vec![CreatePartitionsTopic {
                    name: name.to_string(),
                    count,
                    assignments: assignments.map(|a| a
                        .into_iter()
                        .map(|broker_ids| CreatePartitionsAssignment { broker_ids })
                        .collect()),
                }],
                timeout_ms: 10_000,
                validate_only,
            })
        ),
        CreatePartitions
    );
    assert_eq!(r.results.len(), 1);
    r.results[0].clone()
}

#[test]
fn create_partitions_growth_and_errors() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let (min, max) = range(ApiKey::CreatePartitions);
    let node = metadata(&mut client, 1, Some(&[])).brokers[0].node_id;
    create(&mut client, "grow", 1, &[]);
    let count = |client: &mut Client| {
        metadata(client, 1, Some(&["grow"])).topics[0]
            .partitions
            .len()
    };
    // validate_only changes nothing.
    let r = create_partitions(&mut client, min, "grow", 3, None, true);
    assert_eq!(r.error_code, NONE);
    assert_eq!(count(&mut client), 1);
    let r = create_partitions(&mut client, min, "grow", 3, None, false);
    assert_eq!(r.error_code, NONE, "{r:?}");
    assert_eq!(count(&mut client), 3);
    let r = create_partitions(&mut client, max, "grow", 4, Some(vec![vec![node]]), false);
    assert_eq!(r.error_code, NONE, "{r:?}");
    assert_eq!(count(&mut client), 4);
    // The new partitions take writes.
    assert_eq!(produce_ok(&mut client, "grow", 3, &["new"]), 0);
    // Errors: no growth, shrink, unknown topic, wrong assignment count, unknown broker.
    let r = create_partitions(&mut client, max, "grow", 4, None, false);
    assert_eq!(r.error_code, INVALID_PARTITIONS);
    assert!(r.error_message.is_some());
    let r = create_partitions(&mut client, max, "grow", 2, None, false);
    assert_eq!(r.error_code, INVALID_PARTITIONS);
    let r = create_partitions(&mut client, max, "no-such-topic", 2, None, false);
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let r = create_partitions(&mut client, max, "grow", 6, Some(vec![vec![node]]), false);
    assert_eq!(r.error_code, INVALID_REPLICA_ASSIGNMENT);
    let r = create_partitions(
        &mut client,
        max,
        "grow",
        5,
        Some(vec![vec![node + 100]]),
        false,
    );
    assert_eq!(r.error_code, INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(count(&mut client), 4);
}

// ---- Produce ------------------------------------------------------------------------------

#[test]
fn produce_acks_at_lowest_and_highest_versions() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "acks", 1, &[]);
    let (min, max) = range(ApiKey::Produce);
    let mut expected = Vec::new();
    let mut next_offset = 0;
    for version in [min, max] {
        for acks in [1, -1] {
            let value = format!("v{version}-acks{acks}");
            let r = produce(
                &mut client,
                version,
                acks,
                "acks",
                0,
                batch(&[&value, "b"], 1_000),
            );
            assert_eq!(r.error_code, NONE, "{r:?}");
            assert_eq!(r.base_offset, next_offset);
            assert_eq!(r.log_append_time_ms, -1, "CreateTime topic");
            if version >= 5 {
                assert_eq!(r.log_start_offset, 0);
            }
            next_offset += 2;
            expected.extend([value, "b".to_string()]);
        }
        // acks=0: no response at all; the next request's answer is the next frame.
        let value = format!("v{version}-acks0");
        let mut request = produce_request(0, "acks", 0, batch(&[&value], 1_000));
        if let RequestBody::Produce(r) = &mut request {
            r.topic_data[0].topic_id = topic_id(&mut client, "acks");
        }
        let frame = client.encode_request(ApiKey::Produce, version, &request);
        client.send_raw(&frame).expect("send");
        next_offset += 1;
        expected.push(value);
        let m = metadata(&mut client, 1, Some(&[]));
        assert_eq!(
            m.brokers.len(),
            1,
            "the frame after acks=0 is the metadata answer"
        );
    }
    assert_eq!(read_all(&mut client, "acks", 0), expected);
    // Invalid acks, unknown topic and unknown partition.
    let r = produce(&mut client, max, 2, "acks", 0, batch(&["x"], 1_000));
    assert_eq!(r.error_code, INVALID_REQUIRED_ACKS);
    let r = produce(&mut client, 12, -1, "acks-missing", 0, batch(&["x"], 1_000));
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    // From v13 a topic is named by its id: one not known is UNKNOWN_TOPIC_ID.
    let mut request = produce_request(-1, "", 0, batch(&["x"], 1_000));
    if let RequestBody::Produce(r) = &mut request {
        r.topic_data[0].topic_id = Uuid([9; 16]);
    }
    let response = expect!(client.request(13, request), Produce);
    assert_eq!(response.responses[0].topic_id, Uuid([9; 16]));
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        UNKNOWN_TOPIC_ID
    );
    let r = produce(&mut client, min, -1, "acks", 7, batch(&["x"], 1_000));
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(read_all(&mut client, "acks", 0).len(), expected.len());
}

#[test]
fn produce_record_errors_from_v8() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(
        &mut client,
        "compacted",
        1,
        &[("cleanup.policy", "compact")],
    );
    // A null key on a compacted topic: INVALID_RECORD, and from v8 the record's index.
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .append(1_000, Some(b"k"), Some(b"v"), &[])
        .expect("append");
    builder
        .append(1_001, None, Some(b"v"), &[])
        .expect("append");
    let keyless = builder.build().expect("build").freeze();
    let r = produce(&mut client, 8, -1, "compacted", 0, keyless.clone());
    assert_eq!(r.error_code, INVALID_RECORD);
    assert_eq!(r.base_offset, -1);
    assert_eq!(r.record_errors.len(), 1, "{r:?}");
    assert_eq!(r.record_errors[0].batch_index, 1);
    assert!(r.error_message.is_some());
    // Before v8 the response has no room for record errors.
    let r = produce(&mut client, 7, -1, "compacted", 0, keyless);
    assert_ne!(r.error_code, NONE);
    assert!(r.record_errors.is_empty());
    assert!(read_all(&mut client, "compacted", 0).is_empty());
}

#[test]
fn log_append_time_topic_rewrites_timestamps() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(
        &mut client,
        "lat",
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let r = produce(&mut client, 11, -1, "lat", 0, batch(&["a", "b"], 5));
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert_eq!(r.error_code, NONE);
    assert!(
        (before..=after).contains(&r.log_append_time_ms),
        "{before} <= {} <= {after}",
        r.log_append_time_ms
    );
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("lat", Uuid::ZERO, 0, 0)], 1 << 20),
    );
    let got = batches(&partition_of(&f, 0).records);
    assert_eq!(got.len(), 1);
    let header = &got[0].0;
    assert_ne!(header.attributes & TIMESTAMP_TYPE_LOG_APPEND, 0);
    assert_eq!(header.max_timestamp, r.log_append_time_ms);
    // Timestamp lookups see the append time, not the producer's.
    let l = list_offsets(&mut client, 8, "lat", 0, r.log_append_time_ms);
    assert_eq!((l.offset, l.timestamp), (0, r.log_append_time_ms));
}

// ---- Fetch --------------------------------------------------------------------------------

#[test]
fn fetch_lowest_highest_and_topic_ids_from_v13() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let id = create(&mut client, "f", 1, &[]);
    produce_ok(&mut client, "f", 0, &["a", "b", "c"]);
    let (min, max) = range(ApiKey::Fetch);
    for version in [min, 12] {
        let f = fetch(
            &mut client,
            version,
            fetch_request(&[("f", Uuid::ZERO, 0, 1)], 1 << 20),
        );
        assert_eq!(f.error_code, NONE);
        assert_eq!(f.responses[0].topic, "f");
        let p = partition_of(&f, 0);
        assert_eq!(p.error_code, NONE);
        assert_eq!(p.high_watermark, 3);
        assert_eq!(p.last_stable_offset, 3);
        if version >= 5 {
            assert_eq!(p.log_start_offset, 0);
        }
        // Offset 1 is inside the batch: the whole batch comes back.
        let got = batches(&p.records);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.base_offset, 0);
        assert_eq!(got[0].1, ["a", "b", "c"]);
    }
    for version in [13, max] {
        let f = fetch(
            &mut client,
            version,
            fetch_request(&[("", id, 0, 0)], 1 << 20),
        );
        assert_eq!(f.responses[0].topic_id, id);
        let p = partition_of(&f, 0);
        assert_eq!(p.error_code, NONE, "v{version}");
        assert_eq!(batches(&p.records)[0].1, ["a", "b", "c"]);
        // An id the broker does not know.
        let f = fetch(
            &mut client,
            version,
            fetch_request(&[("", Uuid([3; 16]), 0, 0)], 1 << 20),
        );
        assert_eq!(f.responses[0].topic_id, Uuid([3; 16]));
        assert_eq!(partition_of(&f, 0).error_code, UNKNOWN_TOPIC_ID);
    }
    // Past the log end: OFFSET_OUT_OF_RANGE; the log end itself: empty.
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("f", Uuid::ZERO, 0, 99)], 1024),
    );
    assert_eq!(partition_of(&f, 0).error_code, 1, "OFFSET_OUT_OF_RANGE");
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("f", Uuid::ZERO, 0, 3)], 1024),
    );
    assert_eq!(partition_of(&f, 0).error_code, NONE);
    assert!(batches(&partition_of(&f, 0).records).is_empty());
}

#[test]
fn fetch_long_polling() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "poll", 1, &[]);
    // Nothing arrives: the answer comes after max_wait, empty.
    let mut request = fetch_request(&[("poll", Uuid::ZERO, 0, 0)], 1 << 20);
    request.max_wait_ms = 400;
    request.min_bytes = 1;
    let start = Instant::now();
    let f = fetch(&mut client, 12, request.clone());
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(380), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(batches(&partition_of(&f, 0).records).is_empty());
    // A produce during the wait answers the fetch at once.
    request.max_wait_ms = 10_000;
    let addr = broker.addr;
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut client = Client::connect(addr);
        produce_ok(&mut client, "poll", 0, &["wake"]);
    });
    let start = Instant::now();
    let f = fetch(&mut client, 12, request);
    let waited = start.elapsed();
    producer.join().expect("producer");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(batches(&partition_of(&f, 0).records)[0].1, ["wake"]);
}

#[test]
fn fetch_size_limits_return_whole_batches() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "sizes", 2, &[]);
    let big = "x".repeat(1000);
    for i in 0..3 {
        produce_ok(&mut client, "sizes", 0, &[&big, &format!("p0-{i}")]);
        produce_ok(&mut client, "sizes", 1, &[&big, &format!("p1-{i}")]);
    }
    let one = fetch(
        &mut client,
        12,
        fetch_request(&[("sizes", Uuid::ZERO, 0, 0)], 1 << 20),
    );
    let all = batches(&partition_of(&one, 0).records);
    assert_eq!(all.len(), 3);
    let batch_len = partition_of(&one, 0)
        .records
        .as_ref()
        .map(|r| r.len() / 3)
        .unwrap_or(0);
    // partition_max_bytes smaller than a batch: the first batch anyway.
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("sizes", Uuid::ZERO, 0, 0)], 10),
    );
    assert_eq!(batches(&partition_of(&f, 0).records).len(), 1);
    // Room for two and a half batches: two.
    let f = fetch(
        &mut client,
        12,
        fetch_request(&[("sizes", Uuid::ZERO, 0, 0)], (batch_len * 5 / 2) as i32),
    );
    assert_eq!(batches(&partition_of(&f, 0).records).len(), 2);
    // Response max_bytes smaller than a batch: the first partition's first batch, nothing else.
    for version in [4, 12] {
        let mut request = fetch_request(
            &[("sizes", Uuid::ZERO, 0, 0), ("sizes", Uuid::ZERO, 1, 0)],
            1 << 20,
        );
        request.max_bytes = 10;
        let f = fetch(&mut client, version, request);
        let parts = &f.responses[0].partitions;
        assert_eq!(parts.len(), 2);
        assert_eq!(batches(&parts[0].records).len(), 1, "v{version}");
        assert!(batches(&parts[1].records).is_empty(), "v{version}");
        assert_eq!(parts[1].error_code, NONE);
        assert_eq!(parts[1].high_watermark, 6);
    }
}

fn session_fetch(
    client: &mut Client,
    session_id: i32,
    epoch: i32,
    parts: &[(i32, i64)],
    forget: &[i32],
) -> FetchResponse {
    let mut request = fetch_request(
        &parts
            .iter()
            .map(|(p, o)| ("sess", Uuid::ZERO, *p, *o))
            .collect::<Vec<_>>(),
        1 << 20,
    );
    request.session_id = session_id;
    request.session_epoch = epoch;
    if !forget.is_empty() {
        request.forgotten_topics_data = vec![ForgottenTopic {
            topic: "sess".into(),
            topic_id: Uuid::ZERO,
            partitions: forget.to_vec(),
        }];
    }
    fetch(client, 12, request)
}

fn partitions_in(response: &FetchResponse) -> Vec<i32> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
        .collect()
}

#[test]
fn incremental_fetch_sessions() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "sess", 2, &[]);
    produce_ok(&mut client, "sess", 0, &["a"]);
    // Epoch 0 without a session: a new session, every partition answered.
    let full = session_fetch(&mut client, 0, 0, &[(0, 0), (1, 0)], &[]);
    assert_eq!(full.error_code, NONE);
    let id = full.session_id;
    assert!(id > 0, "a session id is assigned");
    assert_eq!(partitions_in(&full), [0, 1]);
    // Epoch 1, nothing new: no partitions.
    let r = session_fetch(&mut client, id, 1, &[(0, 1)], &[]);
    assert_eq!((r.error_code, r.session_id), (NONE, id));
    assert!(partitions_in(&r).is_empty(), "{r:?}");
    // New data on partition 1 only.
    produce_ok(&mut client, "sess", 1, &["b"]);
    let r = session_fetch(&mut client, id, 2, &[], &[]);
    assert_eq!(partitions_in(&r), [1]);
    assert_eq!(batches(&partition_of(&r, 0).records)[0].1, ["b"]);
    // A wrong epoch and an unknown session id.
    let r = session_fetch(&mut client, id, 7, &[], &[]);
    assert_eq!(r.error_code, INVALID_FETCH_SESSION_EPOCH);
    assert!(r.responses.is_empty());
    let r = session_fetch(&mut client, id + 1000, 1, &[], &[]);
    assert_eq!(r.error_code, FETCH_SESSION_ID_NOT_FOUND);
    // The session survived the wrong epoch: epoch 3 is next. Forget partition 1 (moving on to
    // its offset 1), then data on it is not reported.
    let r = session_fetch(&mut client, id, 3, &[(1, 1)], &[1]);
    assert_eq!(r.error_code, NONE);
    assert!(partitions_in(&r).is_empty(), "{r:?}");
    produce_ok(&mut client, "sess", 1, &["c"]);
    produce_ok(&mut client, "sess", 0, &["d"]);
    let r = session_fetch(&mut client, id, 4, &[], &[]);
    assert_eq!(partitions_in(&r), [0]);
    // Epoch -1 closes the session; it is then unknown.
    let r = session_fetch(&mut client, id, -1, &[(0, 0)], &[]);
    assert_eq!((r.error_code, r.session_id), (NONE, 0));
    let r = session_fetch(&mut client, id, 5, &[], &[]);
    assert_eq!(r.error_code, FETCH_SESSION_ID_NOT_FOUND);
}

// ---- ListOffsets / OffsetForLeaderEpoch ---------------------------------------------------

fn list_offsets(
    client: &mut Client,
    version: i16,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    let r = expect!(
        client.request(
            version,
            RequestBody::ListOffsets(ListOffsetsRequest {
                replica_id: -1,
                isolation_level: 0,
                topics: vec![ListOffsetsTopic {
                    name: topic.to_string(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: partition,
                        current_leader_epoch: -1,
                        timestamp,
                    }],
                }],
                timeout_ms: 10_000,
            })
        ),
        ListOffsets
    );
    r.topics[0].partitions[0].clone()
}

#[test]
fn list_offsets_earliest_latest_timestamps_and_max() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "lo", 1, &[]);
    let (min, max) = range(ApiKey::ListOffsets);
    // Offsets 0..=2 at 1000, 2000, 3000; then one batch with 3 at 5000 and 4 at 4000.
    for ts in [1_000, 2_000, 3_000] {
        let r = produce(&mut client, 11, -1, "lo", 0, batch(&["x"], ts));
        assert_eq!(r.error_code, NONE);
    }
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .append(5_000, None, Some(b"y"), &[])
        .expect("append");
    builder
        .append(4_000, None, Some(b"z"), &[])
        .expect("append");
    let r = produce(
        &mut client,
        11,
        -1,
        "lo",
        0,
        builder.build().expect("build").freeze(),
    );
    assert_eq!(r.error_code, NONE);
    let epoch = metadata(&mut client, 12, Some(&["lo"])).topics[0].partitions[0].leader_epoch;
    for version in [min, max] {
        let at = |client: &mut Client, ts| {
            let r = list_offsets(client, version, "lo", 0, ts);
            assert_eq!(r.error_code, NONE, "v{version} ts {ts}: {r:?}");
            (r.offset, r.timestamp)
        };
        assert_eq!(at(&mut client, -2), (0, -1), "earliest");
        assert_eq!(at(&mut client, -1), (5, -1), "latest");
        // The first offset whose timestamp is at or after the target.
        assert_eq!(at(&mut client, 2_000), (1, 2_000));
        assert_eq!(at(&mut client, 2_500), (2, 3_000));
        assert_eq!(at(&mut client, 4_000), (3, 5_000));
        assert_eq!(at(&mut client, 6_000), (-1, -1), "after every record");
        let latest = list_offsets(&mut client, version, "lo", 0, -1);
        if version >= 4 {
            assert_eq!(latest.leader_epoch, epoch);
            assert_eq!(
                list_offsets(&mut client, version, "lo", 0, 2_000).leader_epoch,
                epoch
            );
        } else {
            assert_eq!(latest.leader_epoch, -1, "not on the wire before v4");
        }
    }
    // v7+: the record with the largest timestamp.
    for version in [7, max] {
        let r = list_offsets(&mut client, version, "lo", 0, -3);
        assert_eq!((r.error_code, r.offset, r.timestamp), (NONE, 3, 5_000));
    }
    // v9+ latest tiered (-5) and v11+ earliest pending upload (-6): with no tiered storage,
    // offset, timestamp and leader epoch -1, as Kafka answers without remote storage.
    for (version, ts) in [(9, -5), (max, -5), (11, -6), (max, -6)] {
        let r = list_offsets(&mut client, version, "lo", 0, ts);
        assert_eq!(
            (r.error_code, r.offset, r.timestamp, r.leader_epoch),
            (NONE, -1, -1, -1),
            "v{version} ts {ts}"
        );
    }
    // An empty partition: latest and earliest are 0, by timestamp nothing.
    create(&mut client, "lo-empty", 1, &[]);
    for (ts, offset) in [(-2, 0), (-1, 0), (1_000, -1)] {
        let r = list_offsets(&mut client, max, "lo-empty", 0, ts);
        assert_eq!((r.error_code, r.offset), (NONE, offset), "ts {ts}");
    }
    let r = list_offsets(&mut client, max, "lo-missing", 0, -1);
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
}

fn offset_for_epoch(
    client: &mut Client,
    version: i16,
    topic: &str,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> fjord_protocol::messages::offset_for_leader_epoch_response::EpochEndOffset {
    let r = expect!(
        client.request(
            version,
            RequestBody::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
                replica_id: -1,
                topics: vec![OffsetForLeaderTopic {
                    topic: topic.to_string(),
                    partitions: vec![OffsetForLeaderPartition {
                        partition: 0,
                        current_leader_epoch,
                        leader_epoch,
                    }],
                }],
            })
        ),
        OffsetForLeaderEpoch
    );
    r.topics[0].partitions[0].clone()
}

#[test]
fn offset_for_leader_epoch_current_and_unknown() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "ofle", 1, &[]);
    let epoch = metadata(&mut client, 12, Some(&["ofle"])).topics[0].partitions[0].leader_epoch;
    produce_ok(&mut client, "ofle", 0, &["a", "b", "c"]);
    let (min, max) = range(ApiKey::OffsetForLeaderEpoch);
    for version in [min, max] {
        // The current epoch ends at the log end offset.
        let r = offset_for_epoch(&mut client, version, "ofle", -1, epoch);
        assert_eq!(
            (r.error_code, r.leader_epoch, r.end_offset),
            (NONE, epoch, 3)
        );
        let r = offset_for_epoch(&mut client, version, "ofle", epoch, epoch);
        assert_eq!(
            (r.error_code, r.leader_epoch, r.end_offset),
            (NONE, epoch, 3)
        );
        // An epoch after every known one: undefined epoch and offset.
        let r = offset_for_epoch(&mut client, version, "ofle", -1, epoch + 5);
        assert_eq!((r.error_code, r.leader_epoch, r.end_offset), (NONE, -1, -1));
        // A client ahead of the leader's epoch.
        let r = offset_for_epoch(&mut client, version, "ofle", epoch + 1, epoch);
        assert_eq!(r.error_code, UNKNOWN_LEADER_EPOCH);
        let r = offset_for_epoch(&mut client, version, "ofle-missing", -1, 0);
        assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    }
}

// ---- InitProducerId / DescribeCluster / DescribeConfigs -----------------------------------

fn init_producer_id(
    client: &mut Client,
    version: i16,
    id: i64,
    epoch: i16,
) -> InitProducerIdResponse {
    expect!(
        client.request(
            version,
            RequestBody::InitProducerId(InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                producer_id: id,
                producer_epoch: epoch,
                ..Default::default()
            })
        ),
        InitProducerId
    )
}

#[test]
fn init_producer_id_unique_across_restarts() {
    let mut broker = TestBroker::start();
    let (min, max) = range(ApiKey::InitProducerId);
    let mut ids = Vec::new();
    let mut client = broker.connect();
    for version in [min, max, min, max] {
        let r = init_producer_id(&mut client, version, -1, -1);
        assert_eq!((r.error_code, r.producer_epoch), (NONE, 0));
        ids.push(r.producer_id);
    }
    // Without a transactional id, an existing id and epoch (v3+) still get a fresh id, as the
    // transaction coordinator hands out for every idempotent producer.
    let r = init_producer_id(&mut client, max, ids[0], 0);
    assert_eq!((r.error_code, r.producer_epoch), (NONE, 0));
    assert!(!ids.contains(&r.producer_id));
    ids.push(r.producer_id);
    for restart in 0..2 {
        if restart == 0 {
            broker.restart();
        } else {
            broker.kill9();
            broker.restart();
        }
        let mut client = broker.connect();
        let r = init_producer_id(&mut client, max, -1, -1);
        assert_eq!(r.error_code, NONE);
        ids.push(r.producer_id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn describe_cluster_lowest_and_highest() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let m = metadata(&mut client, 12, Some(&[]));
    let (min, max) = range(ApiKey::DescribeCluster);
    for version in [min, max] {
        let r = expect!(
            client.request(
                version,
                RequestBody::DescribeCluster(DescribeClusterRequest {
                    include_cluster_authorized_operations: false,
                    endpoint_type: 1,
                    ..Default::default()
                })
            ),
            DescribeCluster
        );
        assert_eq!(r.error_code, NONE);
        assert_eq!(Some(r.cluster_id.clone()), m.cluster_id);
        assert_eq!(r.controller_id, m.controller_id);
        assert_eq!(r.endpoint_type, 1);
        let brokers: Vec<(i32, i32)> = r.brokers.iter().map(|b| (b.broker_id, b.port)).collect();
        assert_eq!(
            brokers,
            [(m.brokers[0].node_id, i32::from(broker.addr.port()))]
        );
    }
    // v1 asks for an endpoint type: a broker answers only for brokers (1).
    for (endpoint_type, error) in [(2, 114), (9, 115)] {
        let r = expect!(
            client.request(
                max,
                RequestBody::DescribeCluster(DescribeClusterRequest {
                    include_cluster_authorized_operations: false,
                    endpoint_type,
                    ..Default::default()
                })
            ),
            DescribeCluster
        );
        assert_eq!(r.error_code, error, "endpoint type {endpoint_type}");
        assert!(r.brokers.is_empty());
    }
}

fn describe_configs(
    client: &mut Client,
    version: i16,
    resource_type: i8,
    name: &str,
    keys: Option<&[&str]>,
    include_synonyms: bool,
) -> DescribeConfigsResult {
    let r = expect!(
        client.request(
            version,
            RequestBody::DescribeConfigs(DescribeConfigsRequest {
                resources: vec![DescribeConfigsResource {
                    resource_type,
                    resource_name: name.to_string(),
                    configuration_keys: keys.map(|k| k.iter().map(|s| s.to_string()).collect()),
                }],
                include_synonyms,
                include_documentation: false,
            })
        ),
        DescribeConfigs
    );
    assert_eq!(r.results.len(), 1);
    r.results[0].clone()
}

#[test]
fn describe_configs_topic_and_broker() {
    let broker = TestBroker::start_with(&[("log.segment.bytes", "2097152")]);
    let mut client = broker.connect();
    create(&mut client, "dc", 1, &[("retention.ms", "7777")]);
    let node = metadata(&mut client, 1, Some(&[])).brokers[0]
        .node_id
        .to_string();
    let (min, max) = range(ApiKey::DescribeConfigs);
    for version in [min, max] {
        let all = describe_configs(&mut client, version, 2, "dc", None, false);
        assert_eq!(all.error_code, NONE);
        let by_name: BTreeMap<&str, &DescribeConfigsResourceResult> =
            all.configs.iter().map(|c| (c.name.as_str(), c)).collect();
        let entry = |name: &str| {
            let c = by_name
                .get(name)
                .unwrap_or_else(|| panic!("{name} missing"));
            (c.value.clone().unwrap_or_default(), c.config_source)
        };
        assert_eq!(entry("retention.ms"), ("7777".into(), DYNAMIC_TOPIC_CONFIG));
        assert_eq!(
            entry("segment.bytes"),
            ("2097152".into(), STATIC_BROKER_CONFIG)
        );
        assert_eq!(entry("cleanup.policy"), ("delete".into(), DEFAULT_CONFIG));
        assert_eq!(
            entry("max.message.bytes"),
            ("1048588".into(), DEFAULT_CONFIG)
        );
        assert!(all
            .configs
            .iter()
            .all(|c| c.value.is_some() && c.synonyms.is_empty()));
        if version >= 3 {
            let t = by_name.get("retention.ms").map(|c| c.config_type);
            assert_eq!(t, Some(5), "LONG");
        }
        // configuration_keys picks entries.
        let some = describe_configs(
            &mut client,
            version,
            2,
            "dc",
            Some(&["segment.bytes", "retention.ms"]),
            true,
        );
        let mut names: Vec<&str> = some.configs.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["retention.ms", "segment.bytes"]);
        // Synonyms, most specific first.
        for c in &some.configs {
            let synonyms: Vec<(String, Option<String>, i8)> = c
                .synonyms
                .iter()
                .map(|s| (s.name.clone(), s.value.clone(), s.source))
                .collect();
            if c.name == "segment.bytes" {
                assert_eq!(
                    synonyms,
                    [
                        (
                            "log.segment.bytes".into(),
                            Some("2097152".into()),
                            STATIC_BROKER_CONFIG
                        ),
                        (
                            "log.segment.bytes".into(),
                            Some("1073741824".into()),
                            DEFAULT_CONFIG
                        ),
                    ]
                );
            } else {
                assert_eq!(
                    synonyms.first(),
                    Some(&(
                        "retention.ms".into(),
                        Some("7777".into()),
                        DYNAMIC_TOPIC_CONFIG
                    ))
                );
                assert_eq!(synonyms.last().map(|s| s.2), Some(DEFAULT_CONFIG));
            }
        }
        let missing = describe_configs(&mut client, version, 2, "dc-missing", None, false);
        assert_eq!(missing.error_code, UNKNOWN_TOPIC_OR_PARTITION);
        // The broker resource, by this broker's id.
        let b = describe_configs(&mut client, version, 4, &node, None, false);
        assert_eq!(b.error_code, NONE);
        let segment = b
            .configs
            .iter()
            .find(|c| c.name == "log.segment.bytes")
            .expect("log.segment.bytes");
        assert_eq!(segment.value.as_deref(), Some("2097152"));
        assert_eq!(segment.config_source, STATIC_BROKER_CONFIG);
        let partitions = b
            .configs
            .iter()
            .find(|c| c.name == "num.partitions")
            .expect("num.partitions");
        assert_eq!(partitions.value.as_deref(), Some("1"));
        assert_eq!(partitions.config_source, DEFAULT_CONFIG);
        let filtered = describe_configs(
            &mut client,
            version,
            4,
            &node,
            Some(&["num.partitions"]),
            false,
        );
        assert_eq!(filtered.configs.len(), 1);
        let other = describe_configs(&mut client, version, 4, "12345", None, false);
        assert_eq!(other.error_code, INVALID_REQUEST);
    }
}

// ---- Restarts -----------------------------------------------------------------------------

#[test]
fn data_and_topics_survive_sigterm_and_kill9() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let ids = [
        create(&mut client, "keep-a", 2, &[]),
        create(&mut client, "keep-b", 1, &[("retention.ms", "99999999")]),
    ];
    let mut expected: BTreeMap<(&str, i32), Vec<String>> = BTreeMap::new();
    let mut write = |client: &mut Client, round: usize| {
        for (topic, partition) in [("keep-a", 0), ("keep-a", 1), ("keep-b", 0)] {
            for i in 0..5 {
                let value = format!("{topic}-{partition}-{round}-{i}");
                let r = produce(client, 11, -1, topic, partition, batch(&[&value], 1_000));
                assert_eq!(r.error_code, NONE);
                expected.entry((topic, partition)).or_default().push(value);
            }
        }
        expected.clone()
    };
    let check = |client: &mut Client, expected: &BTreeMap<(&str, i32), Vec<String>>| {
        let m = metadata(client, 12, None);
        let found: Vec<(Option<String>, Uuid, usize)> = m
            .topics
            .iter()
            .map(|t| (t.name.clone(), t.topic_id, t.partitions.len()))
            .collect();
        assert_eq!(
            found,
            [
                (Some("keep-a".to_string()), ids[0], 2),
                (Some("keep-b".to_string()), ids[1], 1)
            ]
        );
        for ((topic, partition), values) in expected {
            assert_eq!(
                &read_all(client, topic, *partition),
                values,
                "{topic}-{partition}"
            );
        }
        let c = describe_configs(client, 4, 2, "keep-b", Some(&["retention.ms"]), false);
        assert_eq!(c.configs[0].value.as_deref(), Some("99999999"));
    };
    let snapshot = write(&mut client, 0);
    broker.restart();
    let mut client = broker.connect();
    check(&mut client, &snapshot);
    let snapshot = write(&mut client, 1);
    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    check(&mut client, &snapshot);
    // Appends continue at the right offsets.
    assert_eq!(produce_ok(&mut client, "keep-b", 0, &["after"]), 10);
}

#[test]
fn idle_producers_expire() {
    let mut broker = TestBroker::start_with(&[
        ("producer.id.expiration.ms", "1500"),
        ("producer.id.expiration.check.interval.ms", "200"),
    ]);
    let mut client = broker.connect();
    create(&mut client, "expiry", 1, &[]);
    let producer_id = init_producer_id(&mut client, 4, -1, -1).producer_id;
    let idempotent = |sequence: i32| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        let mut builder = BatchBuilder::new(Compression::None).producer(producer_id, 0, sequence);
        builder.append(now, None, Some(b"v"), &[]).expect("append");
        builder.build().expect("build").freeze()
    };
    let send = |client: &mut Client, batch: Bytes| {
        let r = produce(client, 11, -1, "expiry", 0, batch);
        assert_eq!(r.error_code, NONE, "{r:?}");
        r.base_offset
    };
    let first = idempotent(0);
    assert_eq!(send(&mut client, first.clone()), 0);
    // A retry within producer.id.expiration.ms is a duplicate: answered with its offset, not stored.
    assert_eq!(send(&mut client, first.clone()), 0);
    assert_eq!(send(&mut client, idempotent(1)), 1);
    // Idle past it, the producer is forgotten: the same batch is now a new producer's first.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(send(&mut client, first.clone()), 2);
    // State loaded from the log at start expires at once: `first` (offset 2) is long idle.
    broker.restart();
    let mut client = broker.connect();
    assert_eq!(send(&mut client, first), 3);
}

// ---- DeleteRecords ------------------------------------------------------------------------

fn delete_records(
    client: &mut Client,
    version: i16,
    topic: &str,
    partition: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let r = expect!(
        client.request(
            version,
            RequestBody::DeleteRecords(DeleteRecordsRequest {
                topics: vec![DeleteRecordsTopic {
                    name: topic.to_string(),
                    partitions: vec![DeleteRecordsPartition {
                        partition_index: partition,
                        offset,
                    }],
                }],
                timeout_ms: 10_000,
            })
        ),
        DeleteRecords
    );
    assert_eq!(r.topics[0].name, topic);
    r.topics[0].partitions[0].clone()
}

fn log_files(broker: &TestBroker, topic: &str) -> usize {
    std::fs::read_dir(broker.log_dir().join(format!("{topic}-0")))
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count()
}

#[test]
fn delete_records_moves_the_log_start_offset() {
    let mut broker = TestBroker::start_with(&[("log.segment.delete.delay.ms", "0")]);
    let mut client = broker.connect();
    create(
        &mut client,
        "trim",
        1,
        &[("segment.bytes", "200"), ("file.delete.delay.ms", "0")],
    );
    for i in 0..30 {
        produce_ok(&mut client, "trim", 0, &[&format!("value-{i}")]);
    }
    let segments = log_files(&broker, "trim");
    assert!(segments > 5, "{segments} segments");
    for version in [0, 2] {
        let offset = 10 + version as i64;
        let r = delete_records(&mut client, version, "trim", 0, offset);
        assert_eq!(
            (r.error_code, r.low_watermark),
            (NONE, offset),
            "v{version}"
        );
        assert_eq!(list_offsets(&mut client, 7, "trim", 0, -2).offset, offset);
    }
    // Whole segments below the log start are gone; below it a fetch is out of range.
    assert!(log_files(&broker, "trim") < segments);
    let response = fetch(
        &mut client,
        12,
        fetch_request(&[("trim", Uuid::ZERO, 0, 5)], 1 << 20),
    );
    assert_eq!(partition_of(&response, 0).error_code, OFFSET_OUT_OF_RANGE);
    assert_eq!(partition_of(&response, 0).log_start_offset, 12);
    assert_eq!(read_all_from(&mut client, "trim", 12)[0], "value-12");
    // Never back; -1 means the high watermark; beyond it is out of range.
    let r = delete_records(&mut client, 2, "trim", 0, 3);
    assert_eq!((r.error_code, r.low_watermark), (NONE, 12));
    let r = delete_records(&mut client, 2, "trim", 0, 31);
    assert_eq!((r.error_code, r.low_watermark), (OFFSET_OUT_OF_RANGE, -1));
    let r = delete_records(&mut client, 2, "trim", 0, -5);
    assert_eq!(r.error_code, OFFSET_OUT_OF_RANGE);
    let r = delete_records(&mut client, 2, "nosuch", 0, 1);
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let r = delete_records(&mut client, 2, "trim", 0, 20);
    assert_eq!((r.error_code, r.low_watermark), (NONE, 20));
    // The log start survives a crash: it was checkpointed before the answer.
    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    assert_eq!(list_offsets(&mut client, 7, "trim", 0, -2).offset, 20);
    assert_eq!(read_all_from(&mut client, "trim", 20)[0], "value-20");
    let r = delete_records(&mut client, 1, "trim", 0, -1);
    assert_eq!((r.error_code, r.low_watermark), (NONE, 30));
    assert_eq!(list_offsets(&mut client, 7, "trim", 0, -2).offset, 30);
    assert_eq!(produce_ok(&mut client, "trim", 0, &["after"]), 30);
    // A compact-only topic refuses it (compact,delete does not).
    create(
        &mut client,
        "trim-compact",
        1,
        &[("cleanup.policy", "compact")],
    );
    create(
        &mut client,
        "trim-both",
        1,
        &[("cleanup.policy", "compact,delete")],
    );
    for topic in ["trim-compact", "trim-both"] {
        let r = produce(&mut client, 11, -1, topic, 0, keyed_batch(&["k"], 1_000));
        assert_eq!(r.error_code, NONE, "{r:?}");
    }
    let r = delete_records(&mut client, 2, "trim-compact", 0, 1);
    assert_eq!((r.error_code, r.low_watermark), (POLICY_VIOLATION, -1));
    let r = delete_records(&mut client, 2, "trim-both", 0, 1);
    assert_eq!((r.error_code, r.low_watermark), (NONE, 1));
}

#[test]
fn describe_log_dirs_sizes_and_filters() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "dirs-a", 2, &[]);
    create(&mut client, "dirs-b", 1, &[]);
    for i in 0..10 {
        produce_ok(&mut client, "dirs-a", 1, &[&format!("value-{i}")]);
    }
    let describe =
        |client: &mut Client, version: i16, topics: Option<Vec<DescribableLogDirTopic>>| {
            expect!(
                client.request(
                    version,
                    RequestBody::DescribeLogDirs(DescribeLogDirsRequest { topics })
                ),
                DescribeLogDirs
            )
        };
    for version in [1, 4] {
        let r = describe(&mut client, version, None);
        assert_eq!(r.results.len(), 1);
        let dir = &r.results[0];
        assert_eq!(dir.error_code, NONE);
        let expected = std::fs::canonicalize(broker.log_dir()).expect("log dir");
        assert_eq!(
            std::fs::canonicalize(&dir.log_dir).expect("reported dir"),
            expected
        );
        let sizes: BTreeMap<(String, i32), i64> = dir
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| ((t.name.clone(), p.partition_index), p.partition_size))
            })
            .collect();
        assert_eq!(sizes.get(&("dirs-a".to_string(), 0)), Some(&0));
        assert!(sizes[&("dirs-a".to_string(), 1)] > 10 * 60, "{sizes:?}");
        assert_eq!(sizes.get(&("dirs-b".to_string(), 0)), Some(&0));
        assert!(dir
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .all(|p| p.offset_lag == 0 && !p.is_future_key));
        if version >= 4 {
            assert!(
                dir.total_bytes > 0 && dir.usable_bytes > 0 && dir.usable_bytes <= dir.total_bytes
            );
        }
    }
    // Only the partitions asked for; unknown ones are left out.
    let r = describe(
        &mut client,
        4,
        Some(vec![
            DescribableLogDirTopic {
                topic: "dirs-a".into(),
                partitions: vec![1, 7],
            },
            DescribableLogDirTopic {
                topic: "nosuch".into(),
                partitions: vec![0],
            },
        ]),
    );
    let listed: Vec<(String, i32)> = r.results[0]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.clone(), p.partition_index))
        })
        .collect();
    assert_eq!(listed, vec![("dirs-a".to_string(), 1)]);
}

// ---- AlterConfigs and IncrementalAlterConfigs ------------------------------------------------

/// (config name, operation, value)
type ConfigOp<'a> = (&'a str, i8, Option<&'a str>);

fn incremental_alter(
    client: &mut Client,
    version: i16,
    resources: Vec<(i8, &str, Vec<ConfigOp>)>,
    validate_only: bool,
) -> Vec<(i16, String, Option<String>)> {
    use fjord_protocol::messages::incremental_alter_configs_request::*;
    let request = IncrementalAlterConfigsRequest {
        resources: resources
            .into_iter()
            .map(|(resource_type, name, configs)| AlterConfigsResource {
                resource_type,
                resource_name: name.to_string(),
                configs: configs
                    .into_iter()
                    .map(|(name, op, value)| AlterableConfig {
                        name: name.to_string(),
                        config_operation: op,
                        value: value.map(str::to_string),
                    })
                    .collect(),
            })
            .collect(),
        validate_only,
    };
    expect!(
        client.request(version, RequestBody::IncrementalAlterConfigs(request)),
        IncrementalAlterConfigs
    )
    .responses
    .into_iter()
    .map(|r| (r.error_code, r.resource_name, r.error_message))
    .collect()
}

fn topic_config_value(client: &mut Client, topic: &str, name: &str) -> (Option<String>, i8) {
    let c = describe_configs(client, 4, 2, topic, Some(&[name]), false);
    (c.configs[0].value.clone(), c.configs[0].config_source)
}

/// A synonym as (name, value, source).
type Synonym = (String, Option<String>, i8);

/// (value, source, synonyms, read-only) of one config of a resource.
fn config_entry(
    client: &mut Client,
    resource_type: i8,
    resource: &str,
    name: &str,
) -> Option<(Option<String>, i8, Vec<Synonym>, bool)> {
    let c = describe_configs(client, 4, resource_type, resource, Some(&[name]), true);
    assert_eq!(c.error_code, NONE, "{c:?}");
    c.configs.first().map(|e| {
        (
            e.value.clone(),
            e.config_source,
            e.synonyms
                .iter()
                .map(|s| (s.name.clone(), s.value.clone(), s.source))
                .collect(),
            e.read_only,
        )
    })
}

#[test]
fn broker_configs_per_broker_and_cluster_default() {
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    const DYNAMIC_BROKER: i8 = 2;
    const DYNAMIC_DEFAULT: i8 = 3;
    let s = |v: &str| Some(v.to_string());
    let mut broker = TestBroker::start_with(&[("log.retention.check.interval.ms", "1000")]);
    let mut client = broker.connect();
    create(&mut client, "bdyn", 1, &[("segment.bytes", "1024")]);
    let (value, source, synonyms, read_only) =
        config_entry(&mut client, 4, "1", "log.retention.ms").unwrap();
    assert_eq!((value, source, read_only), (None, DEFAULT_CONFIG, false));
    assert_eq!(synonyms, vec![]);

    let r = incremental_alter(
        &mut client,
        1,
        vec![
            (
                4,
                "",
                vec![
                    ("log.retention.ms", SET, Some("2000")),
                    ("log.cleaner.threads", SET, Some("2")),
                ],
            ),
            (4, "1", vec![("log.retention.ms", SET, Some("1000"))]),
        ],
        false,
    );
    assert!(r.iter().all(|(c, _, _)| *c == NONE), "{r:?}");
    let expected_synonyms = vec![
        ("log.retention.ms".to_string(), s("1000"), DYNAMIC_BROKER),
        ("log.retention.ms".to_string(), s("2000"), DYNAMIC_DEFAULT),
        ("log.retention.hours".to_string(), s("168"), DEFAULT_CONFIG),
    ];
    let check = |client: &mut Client| {
        let (value, source, synonyms, _) =
            config_entry(client, 4, "1", "log.retention.ms").unwrap();
        assert_eq!((value, source), (s("1000"), DYNAMIC_BROKER));
        assert_eq!(synonyms, expected_synonyms);
        // The cluster default lists only what is set for every broker.
        let defaults = describe_configs(client, 4, 4, "", None, true);
        let names: Vec<(&str, Option<&str>, i8)> = defaults
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_deref(), c.config_source))
            .collect();
        assert_eq!(
            names,
            vec![
                ("log.cleaner.threads", Some("2"), DYNAMIC_DEFAULT),
                ("log.retention.ms", Some("2000"), DYNAMIC_DEFAULT)
            ]
        );
        // A topic without an override inherits it, with the same synonyms after its own.
        let (value, source, synonyms, _) = config_entry(client, 2, "bdyn", "retention.ms").unwrap();
        assert_eq!((value, source), (s("1000"), DYNAMIC_BROKER));
        assert_eq!(synonyms, expected_synonyms);
    };
    check(&mut client);

    // Applied live: one-second retention (the static default keeps a week) trims the topic.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for i in 0..5 {
        let r = produce(
            &mut client,
            11,
            -1,
            "bdyn",
            0,
            batch(&["x".repeat(600).as_str()], now + i),
        );
        assert_eq!(r.error_code, NONE);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while list_offsets(&mut client, 7, "bdyn", 0, -2).offset == 0 {
        assert!(Instant::now() < deadline, "dynamic retention never applied");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The cleaner restarted with two threads.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !broker.log().contains("log cleaner reconfigured") {
        assert!(
            Instant::now() < deadline,
            "the cleaner was not reconfigured"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Durable: the same after a restart.
    broker.restart();
    let mut client = broker.connect();
    check(&mut client);

    // Refusals, as Kafka words them; unknown keys are stored, as Kafka stores them.
    let r = incremental_alter(
        &mut client,
        1,
        vec![
            (4, "1", vec![("broker.id", SET, Some("5"))]),
            (4, "", vec![("log.retention.ms", SET, Some("abc"))]),
            (4, "2", vec![("log.retention.ms", SET, Some("1"))]),
        ],
        false,
    );
    assert_eq!(r[0].0, INVALID_REQUEST);
    assert_eq!(
        r[0].2.as_deref(),
        Some("Cannot update these configs dynamically: [broker.id]")
    );
    assert_eq!(r[1].0, INVALID_REQUEST);
    assert!(
        r[1].2
            .as_deref()
            .unwrap_or("")
            .starts_with("Invalid value abc for configuration log.retention.ms"),
        "{r:?}"
    );
    assert_eq!(r[2].0, INVALID_REQUEST);
    assert_eq!(
        r[2].2.as_deref(),
        Some("Unexpected broker id, expected 1, but received 2")
    );
    let r = incremental_alter(
        &mut client,
        1,
        vec![(
            4,
            "",
            vec![("log.cleaner.dedupe.buffer.size", SET, Some("16"))],
        )],
        false,
    );
    assert_eq!(
        r[0].0, INVALID_REQUEST,
        "a key map without room for one key: {r:?}"
    );
    let r = incremental_alter(
        &mut client,
        1,
        vec![(4, "1", vec![("no.such.key", SET, Some("1"))])],
        false,
    );
    assert_eq!(r[0].0, NONE);
    let (value, source, _, _) = config_entry(&mut client, 4, "1", "no.such.key").unwrap();
    assert_eq!((value, source), (None, DYNAMIC_BROKER));

    // Deleting the per-broker value uncovers the cluster default.
    let r = incremental_alter(
        &mut client,
        1,
        vec![(4, "1", vec![("log.retention.ms", DELETE, None)])],
        false,
    );
    assert_eq!(r[0].0, NONE);
    let (value, source, synonyms, _) =
        config_entry(&mut client, 2, "bdyn", "retention.ms").unwrap();
    assert_eq!((value, source), (s("2000"), DYNAMIC_DEFAULT));
    assert_eq!(synonyms.len(), 2);
}

#[test]
fn alter_configs_change_topics_live_and_durably() {
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    const APPEND: i8 = 2;
    const SUBTRACT: i8 = 3;
    let mut broker = TestBroker::start_with(&[("log.retention.check.interval.ms", "1000")]);
    let mut client = broker.connect();
    create(&mut client, "alter", 1, &[("retention.ms", "86400000")]);
    for version in [0, 1] {
        // validate_only changes nothing.
        let r = incremental_alter(
            &mut client,
            version,
            vec![(2, "alter", vec![("retention.ms", SET, Some("1234"))])],
            true,
        );
        assert_eq!(r, vec![(NONE, "alter".to_string(), None)]);
        assert_eq!(
            topic_config_value(&mut client, "alter", "retention.ms")
                .0
                .as_deref(),
            Some("86400000")
        );
    }
    let r = incremental_alter(
        &mut client,
        1,
        vec![(
            2,
            "alter",
            vec![
                ("max.message.bytes", SET, Some("2048")),
                ("cleanup.policy", APPEND, Some("compact")),
                ("retention.ms", DELETE, None),
            ],
        )],
        false,
    );
    assert_eq!(r, vec![(NONE, "alter".to_string(), None)]);
    assert_eq!(
        topic_config_value(&mut client, "alter", "max.message.bytes"),
        (Some("2048".into()), DYNAMIC_TOPIC_CONFIG)
    );
    assert_eq!(
        topic_config_value(&mut client, "alter", "cleanup.policy"),
        (Some("delete,compact".into()), DYNAMIC_TOPIC_CONFIG)
    );
    assert_eq!(
        topic_config_value(&mut client, "alter", "retention.ms"),
        (Some("604800000".into()), DEFAULT_CONFIG)
    );
    // Applied to the open log at once: a 4 KiB record is now too large.
    let big = "x".repeat(4096);
    let r = produce(&mut client, 11, -1, "alter", 0, batch(&[&big], 1_000));
    assert_eq!(r.error_code, 10, "MESSAGE_TOO_LARGE: {r:?}");
    let r = incremental_alter(
        &mut client,
        1,
        vec![(
            2,
            "alter",
            vec![("cleanup.policy", SUBTRACT, Some("delete"))],
        )],
        false,
    );
    assert_eq!(r[0].0, NONE);
    assert_eq!(
        topic_config_value(&mut client, "alter", "cleanup.policy")
            .0
            .as_deref(),
        Some("compact")
    );
    // Refusals, each for its own resource.
    let r = incremental_alter(
        &mut client,
        1,
        vec![
            (2, "nosuch", vec![("retention.ms", SET, Some("1"))]),
            (2, "alter", vec![("no.such.config", SET, Some("1"))]),
            (4, "1", vec![("broker.id", SET, Some("5"))]),
            (9, "x", vec![]),
        ],
        false,
    );
    let codes: Vec<i16> = r.iter().map(|(c, _, _)| *c).collect();
    assert_eq!(
        codes,
        vec![
            UNKNOWN_TOPIC_OR_PARTITION,
            INVALID_CONFIG,
            INVALID_REQUEST,
            INVALID_REQUEST
        ]
    );
    for bad in [
        vec![("retention.ms", SET, Some("soon"))],
        vec![("retention.ms", APPEND, Some("1"))],
    ] {
        let r = incremental_alter(&mut client, 1, vec![(2, "alter", bad)], false);
        assert_eq!(r[0].0, INVALID_CONFIG);
    }
    let r = incremental_alter(
        &mut client,
        1,
        vec![(
            2,
            "alter",
            vec![
                ("retention.ms", SET, Some("1")),
                ("retention.ms", DELETE, None),
            ],
        )],
        false,
    );
    assert_eq!(r[0].0, INVALID_REQUEST, "duplicate keys");
    // The legacy AlterConfigs replaces the whole set: max.message.bytes and cleanup.policy go.
    {
        use fjord_protocol::messages::alter_configs_request::*;
        let r = expect!(
            client.request(
                2,
                RequestBody::AlterConfigs(AlterConfigsRequest {
                    resources: vec![AlterConfigsResource {
                        resource_type: 2,
                        resource_name: "alter".into(),
                        configs: vec![AlterableConfig {
                            name: "segment.bytes".into(),
                            value: Some("4096".into())
                        }],
                    }],
                    validate_only: false,
                })
            ),
            AlterConfigs
        );
        assert_eq!(r.responses[0].error_code, NONE, "{r:?}");
    }
    assert_eq!(
        topic_config_value(&mut client, "alter", "segment.bytes"),
        (Some("4096".into()), DYNAMIC_TOPIC_CONFIG)
    );
    assert_eq!(
        topic_config_value(&mut client, "alter", "max.message.bytes").1,
        DEFAULT_CONFIG
    );
    assert_eq!(
        topic_config_value(&mut client, "alter", "cleanup.policy")
            .0
            .as_deref(),
        Some("delete")
    );
    // Durable: after a crash the changes are still there.
    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    assert_eq!(
        topic_config_value(&mut client, "alter", "segment.bytes")
            .0
            .as_deref(),
        Some("4096")
    );
    assert_eq!(
        topic_config_value(&mut client, "alter", "max.message.bytes").1,
        DEFAULT_CONFIG
    );
}

// ---- Every version ------------------------------------------------------------------------

/// DescribeTopicPartitions (KIP-966): topics in name order, paged by partition count with a
/// cursor, unknown topics named, a cursor outside the topics refused.
#[test]
fn describe_topic_partitions_pages_with_a_cursor() {
    use fjord_protocol::messages::describe_topic_partitions_request::{
        Cursor, DescribeTopicPartitionsRequest, TopicRequest,
    };
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "dtp-b", 3, &[]);
    create(&mut client, "dtp-a", 2, &[]);
    create(&mut client, "dtp-c", 1, &[]);
    let mut describe = |topics: &[&str], limit: i32, cursor: Option<(&str, i32)>| {
        let r = expect!(
            client.request(
                0,
                RequestBody::DescribeTopicPartitions(DescribeTopicPartitionsRequest {
                    topics: topics
                        .iter()
                        .map(|t| TopicRequest {
                            name: t.to_string(),
                        })
                        .collect(),
                    response_partition_limit: limit,
                    cursor: cursor.map(|(t, p)| Cursor {
                        topic_name: t.into(),
                        partition_index: p,
                    }),
                }),
            ),
            DescribeTopicPartitions
        );
        let topics: Vec<(i16, String, Vec<i32>)> = r
            .topics
            .iter()
            .map(|t| {
                let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.error_code, t.name.clone().unwrap_or_default(), partitions)
            })
            .collect();
        let next = r.next_cursor.map(|c| (c.topic_name, c.partition_index));
        (topics, next)
    };
    let named = ["dtp-c", "dtp-b", "dtp-a", "dtp-missing"];
    // Three partitions a page: dtp-a whole, dtp-b's first, then the cursor into dtp-b.
    let (topics, next) = describe(&named, 3, None);
    assert_eq!(
        topics,
        [
            (NONE, "dtp-a".to_string(), vec![0, 1]),
            (NONE, "dtp-b".to_string(), vec![0])
        ]
    );
    assert_eq!(next, Some(("dtp-b".to_string(), 1)));
    let (topics, next) = describe(&named, 3, Some(("dtp-b", 1)));
    assert_eq!(
        topics,
        [
            (NONE, "dtp-b".to_string(), vec![1, 2]),
            (NONE, "dtp-c".to_string(), vec![0])
        ]
    );
    // The page is full with one topic left: it starts the next page.
    assert_eq!(next, Some(("dtp-missing".to_string(), 0)));
    let (topics, next) = describe(&named, 3, Some(("dtp-missing", 0)));
    assert_eq!(
        topics,
        [(
            UNKNOWN_TOPIC_OR_PARTITION,
            "dtp-missing".to_string(),
            vec![]
        )]
    );
    assert_eq!(next, None);
    // A name no topic can have is invalid rather than unknown, as in Kafka.
    let (topics, _) = describe(&["bad/name"], 10, None);
    assert_eq!(
        topics,
        [(INVALID_TOPIC_EXCEPTION, "bad/name".to_string(), vec![])]
    );
    // No topics named: every topic, unknown ones cannot be; the limit at least one partition.
    let (topics, _) = describe(&[], 2000, None);
    let names: Vec<&str> = topics.iter().map(|t| t.1.as_str()).collect();
    assert_eq!(names, ["dtp-a", "dtp-b", "dtp-c"]);
    let (topics, next) = describe(&[], 0, None);
    assert_eq!(topics, [(NONE, "dtp-a".to_string(), vec![0])]);
    assert_eq!(next, Some(("dtp-a".to_string(), 1)));
    // A cursor naming a topic not asked for is refused.
    let (topics, _) = describe(&["dtp-a"], 10, Some(("dtp-b", 0)));
    assert_eq!(topics, [(INVALID_REQUEST, "dtp-a".to_string(), vec![])]);
}

/// ListTransactions v2 (KIP-1152): a transactional id pattern must be a regular expression.
#[test]
fn list_transactions_pattern_must_be_a_regular_expression() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    let mut list = |pattern: &str| {
        let r = expect!(
            client.request(
                2,
                RequestBody::ListTransactions(
                    fjord_protocol::messages::list_transactions_request::ListTransactionsRequest {
                        duration_filter: -1,
                        transactional_id_pattern: Some(pattern.into()),
                        ..Default::default()
                    },
                ),
            ),
            ListTransactions
        );
        (r.error_code, r.transaction_states.len())
    };
    assert_eq!(list("(unclosed"), (INVALID_REGULAR_EXPRESSION, 0));
    assert_eq!(list("tool-.*"), (NONE, 0));
    assert_eq!(list(""), (NONE, 0), "empty: no filter");
}

/// Every advertised version of every API gets an answer that decodes at that version: a response
/// the broker cannot encode would otherwise leave the client waiting.
#[test]
fn every_advertised_version_answers() {
    let broker = TestBroker::start();
    let mut client = broker.connect();
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let id = create(&mut client, "every", 1, &[]);
    produce_ok(&mut client, "every", 0, &["a", "b"]);
    let node = metadata(&mut client, 1, Some(&[])).brokers[0].node_id;
    for (api, min, max) in SUPPORTED_APIS {
        for version in *min..=*max {
            let fresh = format!("every-{}-{version}", api.name());
            let body = match api {
                ApiKey::Produce => produce_request(1, "every", 0, batch(&["v"], 1_000)),
                ApiKey::Fetch => {
                    let name = if version >= 13 { "" } else { "every" };
                    let mut request = fetch_request(&[(name, id, 0, 0)], 1 << 20);
                    if version >= 7 {
                        request.session_epoch = 0;
                    }
                    RequestBody::Fetch(request)
                }
                ApiKey::ListOffsets => RequestBody::ListOffsets(ListOffsetsRequest {
                    replica_id: -1,
                    isolation_level: 0,
                    topics: vec![ListOffsetsTopic {
                        name: "every".into(),
                        partitions: [-2, -1, 1_000]
                            .into_iter()
                            .map(|timestamp| ListOffsetsPartition {
                                partition_index: 0,
                                current_leader_epoch: -1,
                                timestamp,
                            })
                            .collect(),
                    }],
                    timeout_ms: 1_000,
                }),
                ApiKey::IncrementalAlterConfigs => {
                    use fjord_protocol::messages::incremental_alter_configs_request::*;
                    RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
                        resources: vec![AlterConfigsResource {
                            resource_type: 2,
                            resource_name: "every".into(),
                            configs: vec![AlterableConfig {
                                name: "retention.ms".into(),
                                config_operation: 0,
                                value: Some("1000000".into()),
                            }],
                        }],
                        validate_only: true,
                    })
                }
                ApiKey::AlterConfigs => {
                    use fjord_protocol::messages::alter_configs_request::*;
                    RequestBody::AlterConfigs(AlterConfigsRequest {
                        resources: vec![AlterConfigsResource {
                            resource_type: 2,
                            resource_name: "every".into(),
                            configs: vec![AlterableConfig {
                                name: "retention.ms".into(),
                                value: Some("1000000".into()),
                            }],
                        }],
                        validate_only: true,
                    })
                }
                ApiKey::DescribeLogDirs => RequestBody::DescribeLogDirs(DescribeLogDirsRequest {
                    topics: None,
                }),
                ApiKey::DescribeQuorum => {
                    use fjord_protocol::messages::describe_quorum_request::*;
                    RequestBody::DescribeQuorum(DescribeQuorumRequest {
                        topics: vec![TopicData {
                            topic_name: "__cluster_metadata".into(),
                            partitions: vec![PartitionData { partition_index: 0 }],
                        }],
                    })
                }
                ApiKey::AlterReplicaLogDirs => RequestBody::AlterReplicaLogDirs(
                    fjord_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDirsRequest {
                        dirs: vec![fjord_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDir {
                            path: "/no/such/log/dir".into(),
                            topics: vec![fjord_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDirTopic {
                                name: "every".into(),
                                partitions: vec![0],
                            }],
                        }],
                    },
                ),
                ApiKey::DeleteRecords => RequestBody::DeleteRecords(DeleteRecordsRequest {
                    topics: vec![DeleteRecordsTopic {
                        name: "every".into(),
                        partitions: vec![DeleteRecordsPartition {
                            partition_index: 0,
                            offset: 0,
                        }],
                    }],
                    timeout_ms: 1_000,
                }),
                ApiKey::Metadata => RequestBody::Metadata(MetadataRequest {
                    topics: Some(vec![MetadataRequestTopic {
                        topic_id: Uuid::ZERO,
                        name: Some("every".into()),
                    }]),
                    allow_auto_topic_creation: true,
                    ..Default::default()
                }),
                ApiKey::ApiVersions => RequestBody::ApiVersions(common::api_versions_request()),
                ApiKey::CreateTopics => RequestBody::CreateTopics(CreateTopicsRequest {
                    topics: vec![topic(&fresh, 1, &[("retention.ms", "1000000")])],
                    timeout_ms: 1_000,
                    validate_only: false,
                }),
                ApiKey::DeleteTopics => {
                    create(&mut client, &fresh, 1, &[]);
                    if version >= 6 {
                        RequestBody::DeleteTopics(DeleteTopicsRequest {
                            topics: vec![DeleteTopicState {
                                name: Some(fresh.clone()),
                                topic_id: Uuid::ZERO,
                            }],
                            topic_names: Vec::new(),
                            timeout_ms: 1_000,
                        })
                    } else {
                        RequestBody::DeleteTopics(DeleteTopicsRequest {
                            topics: Vec::new(),
                            topic_names: vec![fresh.clone()],
                            timeout_ms: 1_000,
                        })
                    }
                }
                ApiKey::InitProducerId => RequestBody::InitProducerId(InitProducerIdRequest {
                    transactional_id: None,
                    transaction_timeout_ms: 60_000,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                }),
                ApiKey::OffsetForLeaderEpoch => {
                    RequestBody::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest {
                        replica_id: -1,
                        topics: vec![OffsetForLeaderTopic {
                            topic: "every".into(),
                            partitions: vec![OffsetForLeaderPartition {
                                partition: 0,
                                current_leader_epoch: -1,
                                leader_epoch: 0,
                            }],
                        }],
                    })
                }
                ApiKey::DescribeConfigs => RequestBody::DescribeConfigs(DescribeConfigsRequest {
                    resources: vec![
                        DescribeConfigsResource {
                            resource_type: 2,
                            resource_name: "every".into(),
                            configuration_keys: None,
                        },
                        DescribeConfigsResource {
                            resource_type: 4,
                            resource_name: node.to_string(),
                            configuration_keys: None,
                        },
                    ],
                    include_synonyms: true,
                    include_documentation: version >= 3,
                }),
                ApiKey::CreatePartitions => {
                    create(&mut client, &fresh, 1, &[]);
                    RequestBody::CreatePartitions(CreatePartitionsRequest {
                        topics: vec![CreatePartitionsTopic {
                            name: fresh.clone(),
                            count: 2,
                            assignments: None,
                        }],
                        timeout_ms: 1_000,
                        validate_only: false,
                    })
                }
                ApiKey::DescribeCluster => RequestBody::DescribeCluster(DescribeClusterRequest {
                    include_cluster_authorized_operations: false,
                    endpoint_type: 1,
                    ..Default::default()
                }),
                ApiKey::FindCoordinator => {
                    RequestBody::FindCoordinator(fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest {
                        key: if version < 4 { "every-group".into() } else { String::new() },
                        key_type: 0,
                        coordinator_keys: if version >= 4 { vec!["every-group".into()] } else { Vec::new() },
                    })
                }
                // Unknown members get an immediate error, so no request waits for a rebalance.
                ApiKey::JoinGroup => RequestBody::JoinGroup(fjord_protocol::messages::join_group_request::JoinGroupRequest {
                    group_id: "every-group".into(),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 10_000,
                    member_id: "unknown-member".into(),
                    protocol_type: "consumer".into(),
                    protocols: vec![fjord_protocol::messages::join_group_request::JoinGroupRequestProtocol {
                        name: "range".into(),
                        metadata: Bytes::from_static(b"\0\0\0\0\0\0"),
                    }],
                    ..Default::default()
                }),
                ApiKey::SyncGroup => RequestBody::SyncGroup(fjord_protocol::messages::sync_group_request::SyncGroupRequest {
                    group_id: "every-group".into(),
                    generation_id: 1,
                    member_id: "unknown-member".into(),
                    protocol_type: (version >= 5).then(|| "consumer".to_string()),
                    protocol_name: (version >= 5).then(|| "range".to_string()),
                    ..Default::default()
                }),
                ApiKey::Heartbeat => RequestBody::Heartbeat(fjord_protocol::messages::heartbeat_request::HeartbeatRequest {
                    group_id: "every-group".into(),
                    generation_id: 1,
                    member_id: "unknown-member".into(),
                    group_instance_id: None,
                }),
                ApiKey::LeaveGroup => RequestBody::LeaveGroup(fjord_protocol::messages::leave_group_request::LeaveGroupRequest {
                    group_id: "every-group".into(),
                    member_id: if version < 3 { "unknown-member".into() } else { String::new() },
                    members: if version >= 3 {
                        vec![fjord_protocol::messages::leave_group_request::MemberIdentity {
                            member_id: "unknown-member".into(),
                            ..Default::default()
                        }]
                    } else {
                        Vec::new()
                    },
                }),
                ApiKey::OffsetCommit => RequestBody::OffsetCommit(fjord_protocol::messages::offset_commit_request::OffsetCommitRequest {
                    group_id: format!("every-simple-{version}"),
                    generation_id_or_member_epoch: -1,
                    member_id: String::new(),
                    retention_time_ms: -1,
                    topics: vec![fjord_protocol::messages::offset_commit_request::OffsetCommitRequestTopic {
                        name: "every".into(),
                        partitions: vec![fjord_protocol::messages::offset_commit_request::OffsetCommitRequestPartition {
                            partition_index: 0,
                            committed_offset: 1,
                            committed_leader_epoch: -1,
                            committed_metadata: Some("m".into()),
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ApiKey::OffsetFetch => {
                    use fjord_protocol::messages::offset_fetch_request::*;
                    RequestBody::OffsetFetch(if version >= 8 {
                        OffsetFetchRequest {
                            groups: vec![OffsetFetchRequestGroup {
                                group_id: "every-simple-2".into(),
                                member_id: None,
                                member_epoch: -1,
                                topics: None,
                            }],
                            ..Default::default()
                        }
                    } else {
                        OffsetFetchRequest {
                            group_id: "every-simple-2".into(),
                            topics: Some(vec![OffsetFetchRequestTopic {
                                name: "every".into(),
                                partition_indexes: vec![0],
                            }]),
                            ..Default::default()
                        }
                    })
                }
                ApiKey::ListGroups => RequestBody::ListGroups(Default::default()),
                ApiKey::DescribeGroups => RequestBody::DescribeGroups(fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest {
                    groups: vec!["every-simple-2".into(), "no-such-group".into()],
                    include_authorized_operations: false,
                }),
                ApiKey::DeleteGroups => RequestBody::DeleteGroups(fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest {
                    groups_names: vec!["no-such-group".into()],
                }),
                ApiKey::OffsetDelete => RequestBody::OffsetDelete(fjord_protocol::messages::offset_delete_request::OffsetDeleteRequest {
                    group_id: "every-simple-2".into(),
                    topics: vec![fjord_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic {
                        name: "every".into(),
                        partitions: vec![fjord_protocol::messages::offset_delete_request::OffsetDeleteRequestPartition {
                            partition_index: 0,
                        }],
                    }],
                }),
                ApiKey::ConsumerGroupHeartbeat => RequestBody::ConsumerGroupHeartbeat(
                    fjord_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest {
                        group_id: format!("every-cg-{version}"),
                        member_id: format!("every-member-{version}"),
                        member_epoch: 0,
                        rebalance_timeout_ms: 10_000,
                        subscribed_topic_names: Some(vec!["every".into()]),
                        topic_partitions: Some(Vec::new()),
                        ..Default::default()
                    },
                ),
                ApiKey::ConsumerGroupDescribe => RequestBody::ConsumerGroupDescribe(
                    fjord_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest {
                        group_ids: vec!["every-cg-0".into(), "no-such-group".into()],
                        include_authorized_operations: false,
                    },
                ),
                ApiKey::ElectLeaders => RequestBody::ElectLeaders(
                    fjord_protocol::messages::elect_leaders_request::ElectLeadersRequest {
                        election_type: 0,
                        topic_partitions: Some(vec![
                            fjord_protocol::messages::elect_leaders_request::TopicPartitions {
                                topic: "every".into(),
                                partitions: vec![0],
                            },
                        ]),
                        timeout_ms: 1_000,
                    },
                ),
                ApiKey::AlterPartitionReassignments => RequestBody::AlterPartitionReassignments(
                    fjord_protocol::messages::AlterPartitionReassignmentsRequest {
                        timeout_ms: 1_000,
                        topics: vec![
                            fjord_protocol::messages::alter_partition_reassignments_request::ReassignableTopic {
                                name: "every".into(),
                                partitions: vec![
                                    // Cancelling where nothing is in progress changes nothing.
                                    fjord_protocol::messages::alter_partition_reassignments_request::ReassignablePartition {
                                        partition_index: 0,
                                        replicas: None,
                                    },
                                ],
                            },
                        ],
                        ..Default::default()
                    },
                ),
                ApiKey::ListPartitionReassignments => RequestBody::ListPartitionReassignments(
                    fjord_protocol::messages::ListPartitionReassignmentsRequest {
                        timeout_ms: 1_000,
                        topics: None,
                    },
                ),
                ApiKey::WriteTxnMarkers => RequestBody::WriteTxnMarkers(marker_request(
                    4242,
                    0,
                    false,
                    0,
                    "every",
                    &[0],
                )),
                ApiKey::AddPartitionsToTxn => {
                    use fjord_protocol::messages::add_partitions_to_txn_request::*;
                    let topics = vec![AddPartitionsToTxnTopic {
                        name: "every".into(),
                        partitions: vec![0],
                    }];
                    RequestBody::AddPartitionsToTxn(if version <= 3 {
                        AddPartitionsToTxnRequest {
                            v3_and_below_transactional_id: "every-txn".into(),
                            v3_and_below_producer_id: 4242,
                            v3_and_below_producer_epoch: 0,
                            v3_and_below_topics: topics,
                            ..Default::default()
                        }
                    } else {
                        AddPartitionsToTxnRequest {
                            transactions: vec![AddPartitionsToTxnTransaction {
                                transactional_id: "every-txn".into(),
                                producer_id: 4242,
                                producer_epoch: 0,
                                verify_only: true,
                                topics,
                            }],
                            ..Default::default()
                        }
                    })
                }
                ApiKey::AddOffsetsToTxn => RequestBody::AddOffsetsToTxn(
                    fjord_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest {
                        transactional_id: "every-txn".into(),
                        producer_id: 4242,
                        producer_epoch: 0,
                        group_id: "every-group".into(),
                    },
                ),
                ApiKey::TxnOffsetCommit => RequestBody::TxnOffsetCommit(
                    fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest {
                        transactional_id: "every-txn".into(),
                        group_id: "every-group".into(),
                        producer_id: 4242,
                        producer_epoch: 0,
                        topics: vec![
                            fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic {
                                name: "every".into(),
                                partitions: vec![fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestPartition {
                                    partition_index: 0,
                                    committed_offset: 1,
                                    committed_leader_epoch: -1,
                                    committed_metadata: None,
                                }],
                                ..Default::default()
                            },
                        ],
                        ..Default::default()
                    },
                ),
                ApiKey::DescribeTransactions => RequestBody::DescribeTransactions(
                    fjord_protocol::messages::describe_transactions_request::DescribeTransactionsRequest {
                        transactional_ids: vec!["every-txn".into()],
                    },
                ),
                ApiKey::ListTransactions => RequestBody::ListTransactions(
                    fjord_protocol::messages::list_transactions_request::ListTransactionsRequest {
                        state_filters: vec!["Ongoing".into(), "Nonsense".into()],
                        duration_filter: -1,
                        ..Default::default()
                    },
                ),
                ApiKey::DescribeProducers => RequestBody::DescribeProducers(
                    fjord_protocol::messages::describe_producers_request::DescribeProducersRequest {
                        topics: vec![
                            fjord_protocol::messages::describe_producers_request::TopicRequest {
                                name: "every".into(),
                                partition_indexes: vec![0, 7],
                            },
                        ],
                    },
                ),
                ApiKey::EndTxn => RequestBody::EndTxn(
                    fjord_protocol::messages::end_txn_request::EndTxnRequest {
                        transactional_id: "every-txn".into(),
                        producer_id: 4242,
                        producer_epoch: 0,
                        committed: true,
                    },
                ),
                ApiKey::DescribeTopicPartitions => RequestBody::DescribeTopicPartitions(
                    fjord_protocol::messages::describe_topic_partitions_request::DescribeTopicPartitionsRequest {
                        topics: vec![
                            fjord_protocol::messages::describe_topic_partitions_request::TopicRequest {
                                name: "every".into(),
                            },
                        ],
                        response_partition_limit: 2000,
                        cursor: None,
                    },
                ),
                ApiKey::DescribeUserScramCredentials => RequestBody::DescribeUserScramCredentials(
                    fjord_protocol::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest {
                        users: None,
                    },
                ),
                ApiKey::AlterUserScramCredentials => RequestBody::AlterUserScramCredentials(
                    fjord_protocol::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest {
                        deletions: vec![],
                        upsertions: vec![
                            fjord_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion {
                                name: "every".into(),
                                mechanism: 1,
                                iterations: 4096,
                                salt: bytes::Bytes::from_static(b"salt"),
                                salted_password: bytes::Bytes::from_static(b"salted"),
                            },
                        ],
                    },
                ),
                // Without an authorizer: answered SECURITY_DISABLED.
                ApiKey::DescribeAcls => RequestBody::DescribeAcls(Default::default()),
                ApiKey::CreateAcls => RequestBody::CreateAcls(
                    fjord_protocol::messages::create_acls_request::CreateAclsRequest {
                        creations: vec![fjord_protocol::messages::create_acls_request::AclCreation {
                            resource_type: 2,
                            resource_name: "every".into(),
                            resource_pattern_type: 3,
                            principal: "User:every".into(),
                            host: "*".into(),
                            operation: 3,
                            permission_type: 3,
                        }],
                    },
                ),
                ApiKey::DeleteAcls => RequestBody::DeleteAcls(
                    fjord_protocol::messages::delete_acls_request::DeleteAclsRequest {
                        filters: vec![Default::default()],
                    },
                ),
                ApiKey::DescribeClientQuotas => RequestBody::DescribeClientQuotas(
                    fjord_protocol::messages::describe_client_quotas_request::DescribeClientQuotasRequest {
                        components: Vec::new(),
                        strict: false,
                    },
                ),
                ApiKey::AlterClientQuotas => RequestBody::AlterClientQuotas(
                    fjord_protocol::messages::alter_client_quotas_request::AlterClientQuotasRequest {
                        entries: Vec::new(),
                        validate_only: true,
                    },
                ),
                // On a PLAINTEXT listener: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
                ApiKey::CreateDelegationToken => RequestBody::CreateDelegationToken(Default::default()),
                ApiKey::RenewDelegationToken => RequestBody::RenewDelegationToken(Default::default()),
                ApiKey::ExpireDelegationToken => RequestBody::ExpireDelegationToken(Default::default()),
                ApiKey::DescribeDelegationToken => {
                    RequestBody::DescribeDelegationToken(Default::default())
                }
                // On a listener without SASL: answered ILLEGAL_SASL_STATE.
                ApiKey::SaslHandshake => RequestBody::SaslHandshake(
                    fjord_protocol::messages::sasl_handshake_request::SaslHandshakeRequest {
                        mechanism: "PLAIN".into(),
                    },
                ),
                ApiKey::SaslAuthenticate => RequestBody::SaslAuthenticate(
                    fjord_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest {
                        auth_bytes: bytes::Bytes::new(),
                    },
                ),
                // A new client instance: told the (empty) subscription set.
                ApiKey::GetTelemetrySubscriptions => {
                    RequestBody::GetTelemetrySubscriptions(Default::default())
                }
                // The zero instance id: INVALID_REQUEST.
                ApiKey::PushTelemetry => RequestBody::PushTelemetry(Default::default()),
                ApiKey::ListConfigResources => RequestBody::ListConfigResources(Default::default()),
                // An empty member id: INVALID_REQUEST.
                ApiKey::ShareGroupHeartbeat => RequestBody::ShareGroupHeartbeat(
                    fjord_protocol::messages::share_group_heartbeat_request::ShareGroupHeartbeatRequest {
                        group_id: "every".into(),
                        ..Default::default()
                    },
                ),
                ApiKey::ShareGroupDescribe => RequestBody::ShareGroupDescribe(
                    fjord_protocol::messages::share_group_describe_request::ShareGroupDescribeRequest {
                        group_ids: vec!["every".into()],
                        include_authorized_operations: false,
                    },
                ),
                // No group id: INVALID_REQUEST.
                ApiKey::ShareFetch => RequestBody::ShareFetch(Default::default()),
                ApiKey::ShareAcknowledge => RequestBody::ShareAcknowledge(Default::default()),
                // Empty: nothing to answer for.
                ApiKey::InitializeShareGroupState => {
                    RequestBody::InitializeShareGroupState(Default::default())
                }
                ApiKey::ReadShareGroupState => RequestBody::ReadShareGroupState(Default::default()),
                ApiKey::WriteShareGroupState => {
                    RequestBody::WriteShareGroupState(Default::default())
                }
                ApiKey::DeleteShareGroupState => {
                    RequestBody::DeleteShareGroupState(Default::default())
                }
                ApiKey::ReadShareGroupStateSummary => {
                    RequestBody::ReadShareGroupStateSummary(Default::default())
                }
                other => panic!("no request built for {}", other.name()),
            };
            let frame = client.encode_request(*api, version, &body);
            client.send_raw(&frame).expect("send");
            let answer = client
                .read_frame()
                .unwrap_or_else(|e| panic!("{} v{version} got no answer: {e}", api.name()));
            let mut decoder = fjord_protocol::Decoder::new(answer);
            <fjord_protocol::ResponseHeader as fjord_protocol::Decodable>::decode(
                &mut decoder,
                fjord_protocol::response_header_version(*api, version),
            )
            .expect("response header");
            let response = ResponseBody::decode(*api, &mut decoder, version)
                .unwrap_or_else(|e| panic!("{} v{version}: {e}", api.name()));
            assert_eq!(response.api_key(), *api);
        }
    }
}

fn marker_request(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    topic: &str,
    partitions: &[i32],
) -> fjord_protocol::messages::write_txn_markers_request::WriteTxnMarkersRequest {
    use fjord_protocol::messages::write_txn_markers_request::*;
    WriteTxnMarkersRequest {
        markers: vec![WritableTxnMarker {
            producer_id,
            producer_epoch,
            transaction_result: commit,
            topics: vec![WritableTxnMarkerTopic {
                name: topic.into(),
                partition_indexes: partitions.to_vec(),
            }],
            coordinator_epoch,
            ..Default::default()
        }],
    }
}

/// Each partition's error code in a WriteTxnMarkers answer, in request order.
fn write_markers(
    client: &mut Client,
    request: fjord_protocol::messages::write_txn_markers_request::WriteTxnMarkersRequest,
) -> Vec<i16> {
    match client.request(1, RequestBody::WriteTxnMarkers(request)) {
        ResponseBody::WriteTxnMarkers(r) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn write_txn_markers_end_transactions_and_read_committed_fetches_name_the_aborted() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let id = create(&mut client, "markers", 1, &[]);
    produce_ok(&mut client, "markers", 0, &["a"]);
    // An abort and a commit marker for two producers; a partition this broker lacks.
    let abort = write_markers(
        &mut client,
        marker_request(77, 0, false, 5, "markers", &[0]),
    );
    assert_eq!(abort, vec![NONE]);
    let commit = write_markers(&mut client, marker_request(78, 0, true, 5, "markers", &[0]));
    assert_eq!(commit, vec![NONE]);
    let unknown = write_markers(&mut client, marker_request(77, 0, false, 5, "nope", &[0]));
    assert_eq!(unknown, vec![UNKNOWN_TOPIC_OR_PARTITION]);
    // Fenced: an older coordinator, an older producer epoch.
    let fenced = write_markers(
        &mut client,
        marker_request(77, 0, false, 4, "markers", &[0]),
    );
    assert_eq!(fenced, vec![52]);
    write_markers(
        &mut client,
        marker_request(77, 3, false, 5, "markers", &[0]),
    );
    let old_epoch = write_markers(
        &mut client,
        marker_request(77, 2, false, 5, "markers", &[0]),
    );
    assert_eq!(old_epoch, vec![47]);

    let read = |client: &mut Client, isolation: i8| {
        let mut request = fetch_request(&[("markers", id, 0, 0)], 1 << 20);
        request.isolation_level = isolation;
        match client.request(12, RequestBody::Fetch(request)) {
            ResponseBody::Fetch(r) => r.responses[0].partitions[0].clone(),
            other => panic!("unexpected {other:?}"),
        }
    };
    let committed = read(&mut client, 1);
    assert_eq!(committed.error_code, NONE);
    assert_eq!(committed.last_stable_offset, committed.high_watermark);
    assert_eq!(committed.high_watermark, 4, "one record and three markers");
    let aborted: Vec<(i64, i64)> = committed
        .aborted_transactions
        .iter()
        .flatten()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    assert_eq!(aborted, vec![(77, 1), (77, 3)]);
    let uncommitted = read(&mut client, 0);
    assert_eq!(uncommitted.aborted_transactions.iter().flatten().count(), 0);

    // The index is on disk: a crash and restart answer the same.
    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    let again = read(&mut client, 1);
    let after: Vec<(i64, i64)> = again
        .aborted_transactions
        .iter()
        .flatten()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    assert_eq!(after, aborted);
}

#[test]
fn offset_for_leader_epoch_on_an_empty_partition() {
    // A new leader records where its epoch starts, so the answer exists before any append.
    let broker = TestBroker::start();
    let mut client = broker.connect();
    create(&mut client, "ofle-empty", 1, &[]);
    let r = offset_for_epoch(&mut client, 4, "ofle-empty", -1, 0);
    assert_eq!((r.error_code, r.leader_epoch, r.end_offset), (NONE, 0, 0));
}

#[test]
fn topic_configs_not_acted_upon_are_named_in_warnings() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create(
        &mut client,
        "ignored",
        1,
        &[("preallocate", "true"), ("retention.ms", "1000000")],
    );
    let warnings = |broker: &TestBroker| {
        broker
            .log()
            .lines()
            .filter(|l| l.contains("not acted upon") && l.contains("topic=ignored"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let seen = warnings(&broker);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("key=\"preallocate\"") || seen[0].contains("key=preallocate"),
        "{seen:?}"
    );
    // Named again at start.
    broker.restart();
    assert_eq!(warnings(&broker).len(), 2, "{}", broker.log());
}
