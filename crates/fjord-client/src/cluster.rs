//! The calls that describe a cluster beyond its metadata: brokers with their racks
//! (DescribeCluster), the metadata quorum (DescribeQuorum), a broker's log dirs
//! (DescribeLogDirs), and reading records from one partition (Fetch) as a consumer does.

use bytes::Bytes;
use fjord_common::{errors, TopicPartition};
use fjord_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use fjord_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use fjord_protocol::messages::describe_quorum_request::{
    DescribeQuorumRequest, PartitionData as QuorumPartition, TopicData as QuorumTopic,
};
use fjord_protocol::messages::describe_quorum_response::ReplicaState;
use fjord_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};
use fjord_records::BatchHeader;

use crate::client::Client;
use crate::error::ClientError;

/// A broker as DescribeCluster describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerDescription {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The cluster as DescribeCluster describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: String,
    /// The controller brokers name to clients (-1: none known).
    pub controller_id: i32,
    pub brokers: Vec<BrokerDescription>,
}

/// One member of the metadata quorum as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumReplica {
    pub node_id: i32,
    pub log_end_offset: i64,
    /// Milliseconds since the epoch; -1 when unknown.
    pub last_fetch_timestamp: i64,
    pub last_caught_up_timestamp: i64,
}

/// The metadata quorum (the `__cluster_metadata` log) as DescribeQuorum describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
}

/// One log dir of a broker, with what its partitions hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirDescription {
    pub path: String,
    /// Non-zero when the dir is offline (KAFKA_STORAGE_ERROR).
    pub error_code: i16,
    /// The volume's size and free space in bytes; -1 when the broker does not say.
    pub total_bytes: i64,
    pub usable_bytes: i64,
    pub partitions: Vec<(TopicPartition, i64)>,
}

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub offset: i64,
    /// Milliseconds since the epoch: the producer's time, or the broker's for log append time.
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// What one Fetch read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecords {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Data records from the offset asked for, in offset order; control records are left out.
    pub records: Vec<ConsumerRecord>,
}

/// The newest Fetch version this client reads: later versions name topics by id only.
const FETCH_BY_NAME_MAX_VERSION: i16 = 12;
/// The most a compressed batch may expand to when read.
const MAX_DECOMPRESSED: usize = 64 * 1024 * 1024;

impl Client {
    /// The cluster id, controller and brokers with their racks.
    pub async fn describe_cluster(&mut self) -> Result<ClusterDescription, ClientError> {
        let conn = self.any_conn().await?;
        let request = DescribeClusterRequest {
            include_cluster_authorized_operations: false,
            endpoint_type: 1,
            include_fenced_brokers: false,
        };
        let ResponseBody::DescribeCluster(response) =
            conn.send(RequestBody::DescribeCluster(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeCluster));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeCluster",
                response.error_code,
                response.error_message,
            ));
        }
        Ok(ClusterDescription {
            cluster_id: response.cluster_id,
            controller_id: response.controller_id,
            brokers: response
                .brokers
                .into_iter()
                .map(|b| BrokerDescription {
                    node_id: b.broker_id,
                    host: b.host,
                    port: b.port,
                    rack: b.rack,
                })
                .collect(),
        })
    }

    /// The metadata quorum's leader, epoch, high watermark, voters and observers.
    pub async fn describe_quorum(&mut self) -> Result<QuorumDescription, ClientError> {
        let conn = self.any_conn().await?;
        let request = DescribeQuorumRequest {
            topics: vec![QuorumTopic {
                topic_name: "__cluster_metadata".to_string(),
                partitions: vec![QuorumPartition { partition_index: 0 }],
            }],
        };
        let ResponseBody::DescribeQuorum(response) =
            conn.send(RequestBody::DescribeQuorum(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeQuorum));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeQuorum",
                response.error_code,
                response.error_message,
            ));
        }
        let partition = response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| ClientError::Malformed("DescribeQuorum: no partition".to_string()))?;
        if partition.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeQuorum",
                partition.error_code,
                partition.error_message,
            ));
        }
        let replica = |r: ReplicaState| QuorumReplica {
            node_id: r.replica_id,
            log_end_offset: r.log_end_offset,
            last_fetch_timestamp: r.last_fetch_timestamp,
            last_caught_up_timestamp: r.last_caught_up_timestamp,
        };
        Ok(QuorumDescription {
            leader_id: partition.leader_id,
            leader_epoch: partition.leader_epoch,
            high_watermark: partition.high_watermark,
            voters: partition.current_voters.into_iter().map(replica).collect(),
            observers: partition.observers.into_iter().map(replica).collect(),
        })
    }

    /// Broker `node_id`'s log dirs, with the size of each partition replica in them.
    pub async fn describe_log_dirs(
        &mut self,
        node_id: i32,
    ) -> Result<Vec<LogDirDescription>, ClientError> {
        let conn = self.node_conn(node_id).await?;
        let ResponseBody::DescribeLogDirs(response) = conn
            .send(RequestBody::DescribeLogDirs(DescribeLogDirsRequest {
                topics: None,
            }))
            .await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeLogDirs));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeLogDirs",
                response.error_code,
                None,
            ));
        }
        Ok(response
            .results
            .into_iter()
            .map(|dir| LogDirDescription {
                path: dir.log_dir,
                error_code: dir.error_code,
                total_bytes: dir.total_bytes,
                usable_bytes: dir.usable_bytes,
                partitions: dir
                    .topics
                    .into_iter()
                    .flat_map(|t| {
                        t.partitions.into_iter().map(move |p| {
                            (
                                TopicPartition::new(t.name.clone(), p.partition_index),
                                p.partition_size,
                            )
                        })
                    })
                    .collect(),
            })
            .collect())
    }

    /// Reads up to `max_bytes` of `tp` from `offset` on its leader (read_uncommitted, no wait).
    pub async fn fetch(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        max_bytes: i32,
    ) -> Result<FetchedRecords, ClientError> {
        let leader = self.leader_of(tp).await?;
        let conn = self.node_conn(leader).await?;
        let version = conn
            .version(ApiKey::Fetch)
            .filter(|v| *v >= 4)
            .ok_or_else(|| ClientError::UnsupportedApi {
                api: "Fetch v4+",
                addr: conn.addr().to_string(),
            })?
            .min(FETCH_BY_NAME_MAX_VERSION);
        let request = FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: tp.topic.clone(),
                partitions: vec![FetchPartition {
                    partition: tp.partition,
                    fetch_offset: offset,
                    partition_max_bytes: max_bytes,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::Fetch(response) =
            conn.send_at(version, RequestBody::Fetch(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::Fetch));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka("Fetch", response.error_code, None));
        }
        let partition = response
            .responses
            .into_iter()
            .filter(|t| t.topic == tp.topic)
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == tp.partition)
            .ok_or_else(|| ClientError::Malformed(format!("Fetch: no answer for {tp}")))?;
        if partition.error_code != errors::NONE {
            return Err(ClientError::kafka(
                format!("Fetch for {tp}"),
                partition.error_code,
                None,
            ));
        }
        let records = match partition.records {
            Some(bytes) => decode_records(&bytes, offset)?,
            None => Vec::new(),
        };
        Ok(FetchedRecords {
            log_start_offset: partition.log_start_offset,
            high_watermark: partition.high_watermark,
            records,
        })
    }

    /// The leader of `tp`, from fresh metadata.
    async fn leader_of(&mut self, tp: &TopicPartition) -> Result<i32, ClientError> {
        let asked = std::collections::BTreeSet::from([tp.clone()]);
        let (by_leader, retry_code) = self.partitions_by_leader(&asked).await?;
        by_leader.into_keys().next().ok_or_else(|| {
            ClientError::kafka(
                format!("partition {tp}"),
                retry_code.unwrap_or(errors::LEADER_NOT_AVAILABLE),
                None,
            )
        })
    }
}

/// The data records at or after `from` in a Fetch answer's record batches. A partial batch at
/// the end (the answer's size limit cut it) is left out, as consumers leave it.
fn decode_records(bytes: &Bytes, from: i64) -> Result<Vec<ConsumerRecord>, ClientError> {
    let malformed = |e: fjord_records::RecordsError| ClientError::Malformed(format!("Fetch: {e}"));
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let rest = bytes.slice(pos..);
        let Ok(header) = BatchHeader::parse(&rest) else {
            break;
        };
        let total = header.total_len();
        if total > rest.len() {
            break;
        }
        pos += total;
        if header.is_control() {
            continue;
        }
        let batch = rest.slice(..total);
        for record in
            fjord_records::validate::records(&batch, MAX_DECOMPRESSED).map_err(malformed)?
        {
            let record = record.map_err(malformed)?;
            let offset = header.base_offset + i64::from(record.offset_delta);
            if offset < from {
                continue;
            }
            let timestamp = if header.is_log_append_time() {
                header.max_timestamp
            } else {
                header.base_timestamp + record.timestamp_delta
            };
            out.push(ConsumerRecord {
                offset,
                timestamp,
                key: record.key,
                value: record.value,
                headers: record
                    .headers
                    .into_iter()
                    .map(|h| (h.key, h.value))
                    .collect(),
            });
        }
    }
    Ok(out)
}
