//! The console's JSON API: each call is a handful of Kafka requests made as the acting
//! principal, shaped for one page of the app. The names of ACL enums come from fjord-metadata,
//! which holds Kafka's codes for them.

use std::collections::{BTreeMap, BTreeSet};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use fjord_client::{
    config_source_name, Client, ClientError, ConfigResource, ConsumerRecord, ListedOffset,
    OffsetSpec, PartitionMetadata, TopicMetadata,
};
use fjord_common::scram::ScramMechanism;
use fjord_common::{errors, TopicPartition};
use fjord_metadata::acl::{AclOperation, AclPermission, PatternType, ResourceType};
use serde_json::{json, Value};

use crate::TrafficSource;

/// Records a message browser call returns at most.
const MAX_RECORDS: usize = 500;
/// Records shown when the call does not say.
const DEFAULT_RECORDS: usize = 50;
/// Bytes of a key, value or header value sent to the browser; longer ones are cut.
const MAX_FIELD_BYTES: usize = 64 * 1024;
/// Bytes one Fetch reads.
const FETCH_BYTES: i32 = 1024 * 1024;
/// Fetches one partition's page may take.
const MAX_FETCHES: usize = 8;
/// Groups whose lag the group list computes; beyond this it lists them without lag.
const MAX_GROUPS_WITH_LAG: usize = 100;
/// Topic configs the topic list shows.
const LIST_CONFIGS: [&str; 2] = ["retention.ms", "cleanup.policy"];

/// An API call, parsed.
pub(crate) struct Call<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) params: &'a Params,
    pub(crate) body: &'a Bytes,
    pub(crate) traffic: &'a TrafficSource,
}

/// Why a call failed, with the HTTP status to answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    /// The client's connection failed: it is opened afresh for the next call.
    pub(crate) connection_lost: bool,
}

impl ApiError {
    fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            connection_lost: false,
        }
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> ApiError {
        let status = match error.kafka_code() {
            Some(
                errors::TOPIC_AUTHORIZATION_FAILED
                | errors::GROUP_AUTHORIZATION_FAILED
                | errors::CLUSTER_AUTHORIZATION_FAILED,
            ) => 403,
            Some(errors::UNKNOWN_TOPIC_OR_PARTITION | errors::GROUP_ID_NOT_FOUND) => 404,
            Some(_) => 409,
            None => 502,
        };
        let connection_lost = matches!(
            error,
            ClientError::Connect { .. }
                | ClientError::Io { .. }
                | ClientError::Timeout { .. }
                | ClientError::Closed(_)
                | ClientError::CorrelationMismatch { .. }
        );
        ApiError {
            status,
            message: error.to_string(),
            connection_lost,
        }
    }
}

type Answer = Result<Value, ApiError>;

/// A query string's parameters.
#[derive(Debug, Default)]
pub(crate) struct Params(BTreeMap<String, String>);

impl Params {
    pub(crate) fn parse(query: &str) -> Params {
        Params(
            form_urlencoded::parse(query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .ok_or_else(|| ApiError::new(400, format!("parameter {name} is missing")))
    }

    fn number(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| ApiError::new(400, format!("parameter {name} is not a number")))
            })
            .transpose()
    }
}

pub(crate) async fn route(client: &mut Client, call: Call<'_>) -> Answer {
    match (call.method, call.path) {
        ("GET", "/api/overview") => overview(client).await,
        ("GET", "/api/throughput") => Ok(throughput(call.traffic)),
        ("GET", "/api/topics") => topics(client).await,
        ("GET", "/api/topic") => topic(client, call.params.required("name")?).await,
        ("GET", "/api/messages") => messages(client, call.params).await,
        ("GET", "/api/groups") => groups(client).await,
        ("GET", "/api/group") => group(client, call.params.required("id")?).await,
        ("POST", "/api/group/reset") => {
            reset_offsets(client, call.params.required("id")?, call.body).await
        }
        ("GET", "/api/quorum") => quorum(client).await,
        ("GET", "/api/acls") => acls(client).await,
        ("GET", "/api/users") => users(client).await,
        (_, path) => Err(ApiError::new(404, format!("no API {path}"))),
    }
}

/// A section of a page that failed on its own: its error in place of its data.
fn or_error(result: Result<Value, ClientError>) -> Value {
    result.unwrap_or_else(|error| json!({ "error": error.to_string() }))
}

async fn overview(client: &mut Client) -> Answer {
    let cluster = client.describe_cluster().await?;
    let metadata = client.metadata(None).await?;
    let described_quorum = client.describe_quorum().await;
    // The active controller is the metadata quorum's leader: DescribeCluster names a random
    // live broker as the controller, as Kafka's brokers do since clients cannot reach it.
    let controller_id = match &described_quorum {
        Ok(q) => q.leader_id,
        Err(_) => cluster.controller_id,
    };
    let mut brokers = Vec::new();
    for broker in &cluster.brokers {
        let hosted = |p: &&PartitionMetadata| p.replicas.contains(&broker.node_id);
        let partitions = all_partitions(&metadata.topics).filter(hosted).count();
        let leaders = all_partitions(&metadata.topics)
            .filter(|p| p.leader_id == broker.node_id)
            .count();
        let log_dirs = or_error(client.describe_log_dirs(broker.node_id).await.map(|dirs| {
            dirs.iter()
                .map(|d| {
                    json!({
                        "path": d.path,
                        "error": (d.error_code != errors::NONE).then(|| errors::name(d.error_code)),
                        "total_bytes": d.total_bytes,
                        "usable_bytes": d.usable_bytes,
                        "size_bytes": d.partitions.iter().map(|(_, size)| size).sum::<i64>(),
                    })
                })
                .collect()
        }));
        let listeners = or_error(broker_listeners(client, broker.node_id).await);
        brokers.push(json!({
            "id": broker.node_id,
            "host": broker.host,
            "port": broker.port,
            "listeners": listeners,
            "rack": broker.rack,
            "controller": broker.node_id == controller_id,
            "partitions": partitions,
            "leaders": leaders,
            "log_dirs": log_dirs,
        }));
    }
    let partitions: Vec<&PartitionMetadata> = all_partitions(&metadata.topics).collect();
    let under_replicated = partitions
        .iter()
        .filter(|p| p.isr.len() < p.replicas.len())
        .count();
    let offline = partitions.iter().filter(|p| p.leader_id < 0).count();
    let quorum = or_error(described_quorum.map(|q| quorum_json(&q)));
    Ok(json!({
        "cluster_id": cluster.cluster_id,
        "controller_id": controller_id,
        "brokers": brokers,
        "topics": metadata.topics.len(),
        "partitions": partitions.len(),
        "under_replicated": under_replicated,
        "offline": offline,
        "quorum": quorum,
    }))
}

/// A broker's listeners as clients reach them: its `advertised.listeners`, else its
/// `listeners` (DescribeConfigs, which the broker itself answers).
async fn broker_listeners(client: &mut Client, broker: i32) -> Result<Value, ClientError> {
    let configs = client
        .describe_configs(&ConfigResource::Broker(broker))
        .await?;
    let value = |name: &str| {
        configs
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.value.clone())
            .filter(|v| !v.is_empty())
    };
    let listed = value("advertised.listeners")
        .or_else(|| value("listeners"))
        .unwrap_or_default();
    Ok(json!(listed
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()))
}

fn all_partitions(topics: &[TopicMetadata]) -> impl Iterator<Item = &PartitionMetadata> {
    topics.iter().flat_map(|t| t.partitions.iter())
}

fn throughput(traffic: &TrafficSource) -> Value {
    let totals = traffic();
    json!({
        "bytes_in": totals.bytes_in,
        "bytes_out": totals.bytes_out,
        "messages_in": totals.messages_in,
    })
}

async fn quorum(client: &mut Client) -> Answer {
    Ok(quorum_json(&client.describe_quorum().await?))
}

fn quorum_json(q: &fjord_client::QuorumDescription) -> Value {
    let replica = |r: &fjord_client::QuorumReplica| {
        json!({
            "id": r.node_id,
            "log_end_offset": r.log_end_offset,
            "lag": (q.high_watermark - r.log_end_offset).max(0),
            "last_fetch_timestamp": r.last_fetch_timestamp,
            "last_caught_up_timestamp": r.last_caught_up_timestamp,
        })
    };
    json!({
        "leader_id": q.leader_id,
        "leader_epoch": q.leader_epoch,
        "high_watermark": q.high_watermark,
        "voters": q.voters.iter().map(replica).collect::<Vec<_>>(),
        "observers": q.observers.iter().map(replica).collect::<Vec<_>>(),
    })
}

async fn acls(client: &mut Client) -> Answer {
    // A name for each code; a code this build does not know is shown as its number.
    fn name<T: std::fmt::Display>(code: i8, from_code: fn(i8) -> Option<T>) -> String {
        from_code(code).map_or_else(|| code.to_string(), |v| v.to_string())
    }
    let acls = client.describe_acls().await?;
    Ok(json!({
        "acls": acls.iter().map(|a| json!({
            "principal": a.principal,
            "host": a.host,
            "operation": name(a.operation, AclOperation::from_code),
            "permission": name(a.permission_type, AclPermission::from_code),
            "resource_type": name(a.resource_type, ResourceType::from_code),
            "resource_name": a.resource_name,
            "pattern_type": name(a.pattern_type, PatternType::from_code),
        })).collect::<Vec<_>>(),
    }))
}

async fn users(client: &mut Client) -> Answer {
    let users = client.describe_scram_users().await?;
    Ok(json!({
        "users": users.iter().map(|u| json!({
            "name": u.name,
            "credentials": u.credentials.iter().map(|(mechanism, iterations)| json!({
                "mechanism": ScramMechanism::from_code(*mechanism)
                    .map_or_else(|| mechanism.to_string(), |m| m.name().to_string()),
                "iterations": iterations,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    }))
}

/// Each partition's start and end offset, and its size on its leader.
struct PartitionFigures {
    start: BTreeMap<TopicPartition, ListedOffset>,
    end: BTreeMap<TopicPartition, ListedOffset>,
    size: BTreeMap<TopicPartition, i64>,
}

impl PartitionFigures {
    async fn of(client: &mut Client, topics: &[TopicMetadata]) -> Result<Self, ClientError> {
        let led: BTreeSet<TopicPartition> = topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.leader_id >= 0)
                    .map(|p| TopicPartition::new(t.name.clone(), p.partition))
            })
            .collect();
        let start = client.list_offsets(&led, OffsetSpec::Earliest).await?;
        let end = client.list_offsets(&led, OffsetSpec::Latest).await?;
        let leaders: BTreeMap<TopicPartition, i32> = topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        TopicPartition::new(t.name.clone(), p.partition),
                        p.leader_id,
                    )
                })
            })
            .collect();
        let mut size = BTreeMap::new();
        let nodes: BTreeSet<i32> = leaders.values().copied().filter(|l| *l >= 0).collect();
        for node in nodes {
            // Sizes need DESCRIBE on the cluster; without it they are left out.
            let Ok(dirs) = client.describe_log_dirs(node).await else {
                continue;
            };
            for (tp, bytes) in dirs.into_iter().flat_map(|d| d.partitions) {
                if leaders.get(&tp) == Some(&node) {
                    *size.entry(tp).or_insert(0) += bytes;
                }
            }
        }
        Ok(PartitionFigures { start, end, size })
    }

    fn offsets(&self, tp: &TopicPartition) -> (Option<i64>, Option<i64>) {
        (
            self.start.get(tp).map(|o| o.offset),
            self.end.get(tp).map(|o| o.offset),
        )
    }
}

async fn topics(client: &mut Client) -> Answer {
    let metadata = client.metadata(None).await?;
    let figures = PartitionFigures::of(client, &metadata.topics).await?;
    let names: Vec<String> = metadata.topics.iter().map(|t| t.name.clone()).collect();
    let configs = client
        .describe_topic_configs(&names, &LIST_CONFIGS)
        .await
        .unwrap_or_default();
    let mut rows = Vec::new();
    for t in &metadata.topics {
        let (mut messages, mut size) = (0i64, None::<i64>);
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.clone(), p.partition);
            if let (Some(start), Some(end)) = figures.offsets(&tp) {
                messages += (end - start).max(0);
            }
            if let Some(bytes) = figures.size.get(&tp) {
                size = Some(size.unwrap_or(0) + bytes);
            }
        }
        let config = |key: &str| {
            configs
                .get(&t.name)
                .and_then(|entries| entries.iter().find(|e| e.name == key))
                .and_then(|e| e.value.clone())
        };
        rows.push(json!({
            "name": t.name,
            "internal": t.is_internal,
            "partitions": t.partitions.len(),
            "replication_factor": t.partitions.iter().map(|p| p.replicas.len()).max().unwrap_or(0),
            "under_replicated": t.partitions.iter().filter(|p| p.isr.len() < p.replicas.len()).count(),
            "messages": messages,
            "size_bytes": size,
            "retention_ms": config("retention.ms"),
            "cleanup_policy": config("cleanup.policy"),
        }));
    }
    Ok(json!({ "topics": rows }))
}

/// The metadata of topic `name`, failing as Kafka answers for it.
async fn topic_metadata(client: &mut Client, name: &str) -> Result<TopicMetadata, ApiError> {
    let metadata = client.metadata(Some(&[name.to_string()])).await?;
    let topic = metadata
        .topics
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| ApiError::new(404, format!("no topic {name}")))?;
    if topic.error_code != errors::NONE {
        return Err(ClientError::kafka(format!("topic {name}"), topic.error_code, None).into());
    }
    Ok(topic)
}

async fn topic(client: &mut Client, name: &str) -> Answer {
    let topic = topic_metadata(client, name).await?;
    let figures = PartitionFigures::of(client, std::slice::from_ref(&topic)).await?;
    let partitions: Vec<Value> = topic
        .partitions
        .iter()
        .map(|p| {
            let tp = TopicPartition::new(name, p.partition);
            let (start, end) = figures.offsets(&tp);
            json!({
                "partition": p.partition,
                "leader": p.leader_id,
                "replicas": p.replicas,
                "isr": p.isr,
                "offline": p.offline,
                "start_offset": start,
                "end_offset": end,
                "size_bytes": figures.size.get(&tp),
            })
        })
        .collect();
    let configs = or_error(
        client
            .describe_configs(&ConfigResource::Topic(name.to_string()))
            .await
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        json!({
                            "name": e.name,
                            "value": if e.is_sensitive { None } else { e.value.clone() },
                            "source": config_source_name(e.source),
                            "sensitive": e.is_sensitive,
                            "read_only": e.read_only,
                        })
                    })
                    .collect()
            }),
    );
    Ok(json!({
        "name": topic.name,
        "topic_id": topic.topic_id.to_string(),
        "internal": topic.is_internal,
        "partitions": partitions,
        "configs": configs,
    }))
}

/// Where the message browser starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Beginning,
    /// The last records before the end.
    End,
    Offset(i64),
    Timestamp(i64),
}

impl Start {
    fn parse(params: &Params) -> Result<Start, ApiError> {
        match params.get("from").unwrap_or("beginning") {
            "beginning" => Ok(Start::Beginning),
            "end" => Ok(Start::End),
            "offset" => Ok(Start::Offset(
                params
                    .number("offset")?
                    .ok_or_else(|| ApiError::new(400, "give an offset"))?,
            )),
            "timestamp" => Ok(Start::Timestamp(
                params
                    .number("timestamp")?
                    .ok_or_else(|| ApiError::new(400, "give a timestamp"))?,
            )),
            other => Err(ApiError::new(
                400,
                format!("from={other} is not one of beginning, end, offset, timestamp"),
            )),
        }
    }
}

async fn messages(client: &mut Client, params: &Params) -> Answer {
    let name = params.required("topic")?;
    let from = Start::parse(params)?;
    let limit = params
        .number("limit")?
        .map_or(DEFAULT_RECORDS, |n| usize::try_from(n).unwrap_or(0))
        .clamp(1, MAX_RECORDS);
    let topic = topic_metadata(client, name).await?;
    let chosen: BTreeSet<TopicPartition> = match params.get("partition") {
        None | Some("all") => topic
            .partitions
            .iter()
            .map(|p| TopicPartition::new(name, p.partition))
            .collect(),
        Some(p) => {
            let p: i32 = p
                .parse()
                .map_err(|_| ApiError::new(400, "partition is not a number"))?;
            if !topic.partitions.iter().any(|q| q.partition == p) {
                return Err(ApiError::new(
                    404,
                    format!("topic {name} has no partition {p}"),
                ));
            }
            BTreeSet::from([TopicPartition::new(name, p)])
        }
    };
    let starts = start_offsets(client, &chosen, from, limit).await?;
    let mut records: Vec<(i32, ConsumerRecord)> = Vec::new();
    let mut ranges = Vec::new();
    for (tp, start) in starts {
        let (read, end) = read_partition(client, &tp, start, limit).await?;
        ranges.push(json!({ "partition": tp.partition, "from": start, "end": end }));
        records.extend(read.into_iter().map(|r| (tp.partition, r)));
    }
    if chosen.len() > 1 {
        records.sort_by_key(|(p, r)| (r.timestamp, *p, r.offset));
    }
    if from == Start::End {
        let cut = records.len().saturating_sub(limit);
        records.drain(..cut);
    } else {
        records.truncate(limit);
    }
    Ok(json!({
        "records": records.iter().map(|(p, r)| record_json(*p, r)).collect::<Vec<_>>(),
        "partitions": ranges,
    }))
}

/// The offset each partition is read from; partitions a timestamp lookup finds nothing in are
/// left out.
async fn start_offsets(
    client: &mut Client,
    chosen: &BTreeSet<TopicPartition>,
    from: Start,
    limit: usize,
) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
    let listed = |offsets: BTreeMap<TopicPartition, ListedOffset>| {
        offsets
            .into_iter()
            .filter(|(_, o)| o.offset >= 0)
            .map(|(tp, o)| (tp, o.offset))
            .collect::<BTreeMap<_, _>>()
    };
    Ok(match from {
        Start::Beginning => listed(client.list_offsets(chosen, OffsetSpec::Earliest).await?),
        Start::Timestamp(ts) => listed(
            client
                .list_offsets(chosen, OffsetSpec::Timestamp(ts))
                .await?,
        ),
        Start::Offset(offset) => chosen.iter().map(|tp| (tp.clone(), offset)).collect(),
        Start::End => {
            let earliest = listed(client.list_offsets(chosen, OffsetSpec::Earliest).await?);
            let latest = listed(client.list_offsets(chosen, OffsetSpec::Latest).await?);
            let back = i64::try_from(limit).unwrap_or(i64::MAX);
            latest
                .into_iter()
                .map(|(tp, end)| {
                    let start = earliest.get(&tp).copied().unwrap_or(0);
                    (tp, (end - back).max(start))
                })
                .collect()
        }
    })
}

/// Up to `limit` records of `tp` from `start`, and the partition's high watermark.
async fn read_partition(
    client: &mut Client,
    tp: &TopicPartition,
    start: i64,
    limit: usize,
) -> Result<(Vec<ConsumerRecord>, i64), ClientError> {
    let mut records = Vec::new();
    let mut offset = start;
    let mut end = start;
    for _ in 0..MAX_FETCHES {
        let fetched = match client.fetch(tp, offset, FETCH_BYTES).await {
            // Before the log start: read from the start, as a consumer resetting to earliest
            // does. Past the end: nothing more to read.
            Err(e) if e.kafka_code() == Some(errors::OFFSET_OUT_OF_RANGE) => {
                let tps = BTreeSet::from([tp.clone()]);
                let earliest = client.list_offsets(&tps, OffsetSpec::Earliest).await?;
                match earliest.get(tp) {
                    Some(o) if o.offset > offset => {
                        offset = o.offset;
                        continue;
                    }
                    _ => break,
                }
            }
            other => other?,
        };
        end = fetched.high_watermark;
        let Some(last) = fetched.records.last().map(|r| r.offset) else {
            break;
        };
        records.extend(fetched.records);
        offset = last + 1;
        if records.len() >= limit || offset >= end {
            break;
        }
    }
    records.truncate(limit);
    Ok((records, end))
}

fn bytes_json(bytes: &Option<Bytes>) -> Value {
    match bytes {
        None => Value::Null,
        Some(b) => json!({
            "size": b.len(),
            "base64": BASE64.encode(b.get(..MAX_FIELD_BYTES.min(b.len())).unwrap_or_default()),
        }),
    }
}

fn record_json(partition: i32, r: &ConsumerRecord) -> Value {
    json!({
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": bytes_json(&r.key),
        "value": bytes_json(&r.value),
        "headers": r.headers.iter().map(|(k, v)| json!({
            "key": String::from_utf8_lossy(k),
            "value": bytes_json(v),
        })).collect::<Vec<_>>(),
    })
}

/// Each group's committed offsets and the end offsets of the partitions they are for.
async fn lag_of(
    client: &mut Client,
    group_id: &str,
) -> Result<Vec<(TopicPartition, i64, Option<i64>)>, ClientError> {
    let committed = client.fetch_offsets(group_id).await?;
    let partitions: BTreeSet<TopicPartition> = committed.keys().cloned().collect();
    let ends = client
        .list_offsets(&partitions, OffsetSpec::Latest)
        .await
        .unwrap_or_default();
    Ok(committed
        .into_iter()
        .map(|(tp, c)| {
            let end = ends.get(&tp).map(|o| o.offset);
            (tp, c.offset, end)
        })
        .collect())
}

fn total_lag(rows: &[(TopicPartition, i64, Option<i64>)]) -> i64 {
    rows.iter()
        .filter_map(|(_, committed, end)| end.map(|end| (end - committed).max(0)))
        .sum()
}

async fn groups(client: &mut Client) -> Answer {
    let listed = client.list_groups().await?;
    // Members and committed offsets of the first groups; then the end offsets of every partition
    // they committed to, in one ListOffsets per leader for all of them.
    let mut described = Vec::new();
    for g in listed.iter().take(MAX_GROUPS_WITH_LAG) {
        let members = client
            .describe_group(&g.group_id)
            .await
            .ok()
            .map(|d| d.members.len());
        let committed = client.fetch_offsets(&g.group_id).await.ok();
        described.push((members, committed));
    }
    let partitions: BTreeSet<TopicPartition> = described
        .iter()
        .filter_map(|(_, committed)| committed.as_ref())
        .flat_map(|committed| committed.keys().cloned())
        .collect();
    let ends = client
        .list_offsets(&partitions, OffsetSpec::Latest)
        .await
        .unwrap_or_default();
    let mut rows = Vec::new();
    for (index, g) in listed.iter().enumerate() {
        let (members, lag) = match described.get(index) {
            Some((members, committed)) => {
                let lag = committed.as_ref().map(|committed| {
                    committed
                        .iter()
                        .filter_map(|(tp, c)| Some((ends.get(tp)?.offset - c.offset).max(0)))
                        .sum::<i64>()
                });
                (*members, lag)
            }
            None => (None, None),
        };
        rows.push(json!({
            "id": g.group_id,
            "state": g.state,
            "type": g.group_type,
            "protocol_type": g.protocol_type,
            "members": members,
            "lag": lag,
        }));
    }
    Ok(json!({ "groups": rows }))
}

async fn group(client: &mut Client, id: &str) -> Answer {
    let description = client.describe_group(id).await?;
    let lag = lag_of(client, id).await?;
    let owner: BTreeMap<&TopicPartition, &str> = description
        .members
        .iter()
        .flat_map(|m| {
            m.assignment
                .iter()
                .map(move |tp| (tp, m.client_id.as_str()))
        })
        .collect();
    let offsets: Vec<Value> = lag
        .iter()
        .map(|(tp, committed, end)| {
            json!({
                "topic": tp.topic,
                "partition": tp.partition,
                "committed": committed,
                "end_offset": end,
                "lag": end.map(|end| (end - committed).max(0)),
                "owner": owner.get(tp),
            })
        })
        .collect();
    Ok(json!({
        "id": description.group_id,
        "type": match description.kind {
            fjord_client::GroupKind::Classic => "classic",
            fjord_client::GroupKind::Consumer => "consumer",
        },
        "state": description.state,
        "protocol_type": description.protocol_type,
        "assignor": description.assignor,
        "coordinator": description.coordinator.node_id,
        "members": description.members.iter().map(|m| json!({
            "member_id": m.member_id,
            "instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "assignment": m.assignment.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "offsets": offsets,
        "total_lag": total_lag(&lag),
    }))
}

/// Moves a group's committed offsets, as `kafka-consumer-groups --reset-offsets --execute`
/// does: only while the group has no members (the coordinator refuses otherwise), for the
/// partitions of one topic or of every topic it has offsets for.
async fn reset_offsets(client: &mut Client, id: &str, body: &Bytes) -> Answer {
    let form: Value =
        serde_json::from_slice(body).map_err(|_| ApiError::new(400, "the reset is not JSON"))?;
    let spec = match form.get("to").and_then(Value::as_str) {
        Some("earliest") => OffsetSpec::Earliest,
        Some("latest") => OffsetSpec::Latest,
        Some("timestamp") => OffsetSpec::Timestamp(
            form.get("timestamp")
                .and_then(Value::as_i64)
                .ok_or_else(|| ApiError::new(400, "give a timestamp in ms"))?,
        ),
        _ => {
            return Err(ApiError::new(
                400,
                "to is one of earliest, latest, timestamp",
            ))
        }
    };
    let topic = form
        .get("topic")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let mut partitions: BTreeSet<TopicPartition> = client
        .fetch_offsets(id)
        .await?
        .into_keys()
        .filter(|tp| topic.is_none_or(|t| tp.topic == t))
        .collect();
    if let Some(topic) = topic {
        let metadata = topic_metadata(client, topic).await?;
        partitions.extend(
            metadata
                .partitions
                .iter()
                .map(|p| TopicPartition::new(topic, p.partition)),
        );
    }
    if partitions.is_empty() {
        return Err(ApiError::new(
            400,
            "the group has no offsets to reset; name a topic",
        ));
    }
    let mut targets = client.list_offsets(&partitions, spec).await?;
    if matches!(spec, OffsetSpec::Timestamp(_)) {
        // No record at or after the time: the end, as Kafka's reset by time does.
        let past: BTreeSet<TopicPartition> = targets
            .iter()
            .filter(|(_, o)| o.offset < 0)
            .map(|(tp, _)| tp.clone())
            .collect();
        targets.extend(client.list_offsets(&past, OffsetSpec::Latest).await?);
    }
    let offsets: BTreeMap<TopicPartition, i64> =
        targets.into_iter().map(|(tp, o)| (tp, o.offset)).collect();
    client.commit_offsets(id, &offsets).await?;
    Ok(json!({
        "offsets": offsets.iter().map(|(tp, o)| json!({
            "topic": tp.topic, "partition": tp.partition, "offset": o,
        })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_percent_decoded() {
        let params = Params::parse("id=my%20group&name=a.b&from=offset&offset=12&empty=");
        assert_eq!(params.get("id"), Some("my group"));
        assert_eq!(params.number("offset").unwrap(), Some(12));
        assert_eq!(params.get("empty"), None);
        assert!(params.required("missing").is_err());
        assert!(Params::parse("offset=x").number("offset").is_err());
    }

    #[test]
    fn the_browser_starts_where_asked() {
        assert_eq!(Start::parse(&Params::parse("")).unwrap(), Start::Beginning);
        assert_eq!(
            Start::parse(&Params::parse("from=timestamp&timestamp=5")).unwrap(),
            Start::Timestamp(5)
        );
        assert!(Start::parse(&Params::parse("from=offset")).is_err());
        assert!(Start::parse(&Params::parse("from=middle")).is_err());
    }

    #[test]
    fn long_fields_are_cut_but_keep_their_size() {
        let value = Some(Bytes::from(vec![b'a'; MAX_FIELD_BYTES + 10]));
        let json = bytes_json(&value);
        assert_eq!(json["size"], MAX_FIELD_BYTES + 10);
        let shown = BASE64.decode(json["base64"].as_str().unwrap()).unwrap();
        assert_eq!(shown.len(), MAX_FIELD_BYTES);
        assert_eq!(bytes_json(&None), Value::Null);
    }

    #[test]
    fn lag_counts_only_partitions_with_a_known_end() {
        let rows = vec![
            (TopicPartition::new("t", 0), 5, Some(10)),
            (TopicPartition::new("t", 1), 7, None),
            (TopicPartition::new("t", 2), 9, Some(8)),
        ];
        assert_eq!(total_lag(&rows), 5);
    }
}
