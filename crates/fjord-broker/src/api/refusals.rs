//! Requests refused whole, shaped as their handlers answer (the group APIs' refusals are
//! `fjord_group::refusal`, the controller's `fjord_controller::error_response`): every entry
//! carries the error where the response has entries, else the response does.

use fjord_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use fjord_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use fjord_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use fjord_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult, AlterReplicaLogDirsResponse,
};
use fjord_protocol::messages::describe_acls_response::DescribeAclsResponse;
use fjord_protocol::messages::describe_client_quotas_response::DescribeClientQuotasResponse;
use fjord_protocol::messages::describe_log_dirs_response::DescribeLogDirsResponse;
use fjord_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResponse;
use fjord_protocol::messages::end_txn_response::EndTxnResponse;
use fjord_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use fjord_protocol::messages::list_config_resources_response::ListConfigResourcesResponse;
use fjord_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use fjord_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
};
use fjord_protocol::{RequestBody, ResponseBody};

/// `body` refused with `code` (and, where the response has one, `message`); None for an API
/// refused whole nowhere.
pub(crate) fn refused(
    body: &RequestBody,
    version: i16,
    code: i16,
    text: &str,
) -> Option<ResponseBody> {
    let message = Some(text.to_string());
    Some(match body {
        RequestBody::Produce(r) => ResponseBody::Produce(ProduceResponse {
            responses: r
                .topic_data
                .iter()
                .map(|t| TopicProduceResponse {
                    name: t.name.clone(),
                    topic_id: t.topic_id,
                    partition_responses: t
                        .partition_data
                        .iter()
                        .map(|p| PartitionProduceResponse {
                            index: p.index,
                            error_code: code,
                            base_offset: -1,
                            log_append_time_ms: -1,
                            log_start_offset: -1,
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect(),
            ..Default::default()
        }),
        RequestBody::DescribeLogDirs(_) => ResponseBody::DescribeLogDirs(DescribeLogDirsResponse {
            error_code: code,
            ..Default::default()
        }),
        RequestBody::AlterReplicaLogDirs(r) => {
            ResponseBody::AlterReplicaLogDirs(AlterReplicaLogDirsResponse {
                results: r
                    .dirs
                    .iter()
                    .flat_map(|d| &d.topics)
                    .map(|t| AlterReplicaLogDirTopicResult {
                        topic_name: t.name.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|&partition_index| AlterReplicaLogDirPartitionResult {
                                partition_index,
                                error_code: code,
                            })
                            .collect(),
                    })
                    .collect(),
                ..Default::default()
            })
        }
        RequestBody::DescribeUserScramCredentials(_) => {
            ResponseBody::DescribeUserScramCredentials(DescribeUserScramCredentialsResponse {
                error_code: code,
                error_message: message,
                ..Default::default()
            })
        }
        RequestBody::DescribeClientQuotas(_) => {
            ResponseBody::DescribeClientQuotas(DescribeClientQuotasResponse {
                error_code: code,
                error_message: message,
                entries: None,
                ..Default::default()
            })
        }
        RequestBody::DescribeAcls(_) => ResponseBody::DescribeAcls(DescribeAclsResponse {
            error_code: code,
            error_message: message,
            ..Default::default()
        }),
        RequestBody::ListConfigResources(_) => {
            ResponseBody::ListConfigResources(ListConfigResourcesResponse {
                error_code: code,
                ..Default::default()
            })
        }
        _ => {
            return refused_txn(body, version, code)
                .or_else(|| crate::api::share_state::refused_whole(body, code, text))
        }
    })
}

/// A transaction API refused whole (its producer's or the brokers' markers).
fn refused_txn(body: &RequestBody, version: i16, code: i16) -> Option<ResponseBody> {
    Some(match body {
        RequestBody::InitProducerId(_) => ResponseBody::InitProducerId(InitProducerIdResponse {
            error_code: code,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        }),
        RequestBody::AddPartitionsToTxn(r) if version < 4 => {
            ResponseBody::AddPartitionsToTxn(AddPartitionsToTxnResponse {
                results_by_topic_v3_and_below: by_topic(&r.v3_and_below_topics, |_| code),
                ..Default::default()
            })
        }
        RequestBody::AddPartitionsToTxn(_) => {
            ResponseBody::AddPartitionsToTxn(AddPartitionsToTxnResponse {
                error_code: code,
                ..Default::default()
            })
        }
        RequestBody::AddOffsetsToTxn(_) => ResponseBody::AddOffsetsToTxn(AddOffsetsToTxnResponse {
            error_code: code,
            ..Default::default()
        }),
        RequestBody::EndTxn(_) => ResponseBody::EndTxn(EndTxnResponse {
            error_code: code,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        }),
        RequestBody::WriteTxnMarkers(r) => ResponseBody::WriteTxnMarkers(WriteTxnMarkersResponse {
            markers: r
                .markers
                .iter()
                .map(|m| WritableTxnMarkerResult {
                    producer_id: m.producer_id,
                    topics: m
                        .topics
                        .iter()
                        .map(|t| WritableTxnMarkerTopicResult {
                            name: t.name.clone(),
                            partitions: t
                                .partition_indexes
                                .iter()
                                .map(|&partition_index| WritableTxnMarkerPartitionResult {
                                    partition_index,
                                    error_code: code,
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        }),
        _ => return None,
    })
}

/// A producer's AddPartitionsToTxn (v3 and below) answered by topic, each topic's partitions
/// with the code `code_of` gives the topic.
pub(crate) fn by_topic(
    topics: &[AddPartitionsToTxnTopic],
    code_of: impl Fn(&AddPartitionsToTxnTopic) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| AddPartitionsToTxnTopicResult {
            name: t.name.clone(),
            results_by_partition: t
                .partitions
                .iter()
                .map(|&partition_index| AddPartitionsToTxnPartitionResult {
                    partition_index,
                    partition_error_code: code_of(t),
                })
                .collect(),
        })
        .collect()
}
