//! DescribeTopicPartitions (KIP-966), what Kafka 4.x's admin client describes topics with: the
//! topics' partitions as Metadata gives them, sorted by name and paged — at most
//! `ResponsePartitionLimit` partitions (capped by `max.request.partition.size.limit`) per
//! answer, the next page starting at the cursor the answer ends with. fjord keeps no eligible
//! leader replicas (KIP-966's ELR), so those lists are empty.

use fjord_metadata::MetadataImage;
use fjord_protocol::messages::describe_topic_partitions_request::DescribeTopicPartitionsRequest;
use fjord_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponse, DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
};

use crate::api::{Access, ClusterApi};
use fjord_common::errors;
use fjord_metadata::acl::{AclOperation, ResourceType};
use fjord_protocol::messages::metadata_response::MetadataResponseTopic;

impl ClusterApi {
    /// A topic the principal may not describe is left out of a listing of all topics and
    /// refused TOPIC_AUTHORIZATION_FAILED when named.
    pub(crate) fn describe_topic_partitions(
        &self,
        request: &DescribeTopicPartitionsRequest,
        access: &Access,
    ) -> DescribeTopicPartitionsResponse {
        let image = self.node.image();
        let broker_limit = self.node.config.max_request_partition_size_limit();
        let limit = request.response_partition_limit.min(broker_limit).max(1);
        match page(&image, request, limit, |name| {
            if !access.allows_topic(AclOperation::Describe, name) {
                return MetadataResponseTopic {
                    error_code: errors::TOPIC_AUTHORIZATION_FAILED,
                    name: Some(name.to_string()),
                    topic_authorized_operations: i32::MIN,
                    ..Default::default()
                };
            }
            let mut topic = self.topic_metadata(&image, name);
            topic.topic_authorized_operations =
                access.authorized_operations(ResourceType::Topic, name);
            topic
        }) {
            Ok(response) => response,
            // As Kafka answers a request it refuses: every topic asked for, with the error.
            Err(code) => DescribeTopicPartitionsResponse {
                topics: request
                    .topics
                    .iter()
                    .map(|t| DescribeTopicPartitionsResponseTopic {
                        error_code: code,
                        name: Some(t.name.clone()),
                        topic_authorized_operations: i32::MIN,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }
}

/// One page of the answer: the topics asked for (every topic when none are named) from the
/// cursor on, in name order, with at most `limit` partitions; `describe` gives a topic as
/// Metadata would. INVALID_REQUEST for a cursor outside the topics asked for.
fn page(
    image: &MetadataImage,
    request: &DescribeTopicPartitionsRequest,
    limit: i32,
    describe: impl Fn(&str) -> MetadataResponseTopic,
) -> Result<DescribeTopicPartitionsResponse, i16> {
    let from = request
        .cursor
        .as_ref()
        .map_or("", |c| c.topic_name.as_str());
    let all = request.topics.is_empty();
    let mut names: Vec<String> = if all {
        image.topics().map(|t| t.name.clone()).collect()
    } else {
        request.topics.iter().map(|t| t.name.clone()).collect()
    };
    names.retain(|n| n.as_str() >= from);
    names.sort();
    names.dedup();
    if let Some(cursor) = &request.cursor {
        if !names.contains(&cursor.topic_name) || cursor.partition_index < 0 {
            return Err(errors::INVALID_REQUEST);
        }
    }
    let mut response = DescribeTopicPartitionsResponse::default();
    let mut remaining = limit;
    for name in names {
        if remaining <= 0 {
            response.next_cursor = Some(Cursor {
                topic_name: name,
                partition_index: 0,
            });
            break;
        }
        let topic = describe(&name);
        if topic.error_code != errors::NONE {
            // Every topic asked for: unknown ones are answered as such (a listing of all
            // topics leaves them out).
            if !all {
                response.topics.push(refused_topic(name, &topic));
            }
            continue;
        }
        let start = match &request.cursor {
            Some(c) if c.topic_name == name => c.partition_index,
            _ => 0,
        };
        let (entry, next) = topic_page(name.clone(), topic, start, remaining);
        let taken = entry.partitions.len();
        response.topics.push(entry);
        if let Some(partition_index) = next {
            response.next_cursor = Some(Cursor {
                topic_name: name,
                partition_index,
            });
            break;
        }
        remaining -= i32::try_from(taken).unwrap_or(i32::MAX);
    }
    Ok(response)
}

/// A topic asked for that cannot be described: a name no topic can have is invalid (Kafka's
/// `Topic.validate`), else the error the image gave.
fn refused_topic(
    name: String,
    topic: &MetadataResponseTopic,
) -> DescribeTopicPartitionsResponseTopic {
    let error_code = match topic.error_code {
        errors::UNKNOWN_TOPIC_OR_PARTITION
            if fjord_controller::plan::validate_topic_name(&name).is_err() =>
        {
            errors::INVALID_TOPIC_EXCEPTION
        }
        code => code,
    };
    DescribeTopicPartitionsResponseTopic {
        error_code,
        name: Some(name),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        topic_authorized_operations: topic.topic_authorized_operations,
        ..Default::default()
    }
}

/// A topic's partitions from index `start`, at most `remaining` of them; the index of the
/// first left out, if any (where the next page starts).
fn topic_page(
    name: String,
    topic: MetadataResponseTopic,
    start: i32,
    remaining: i32,
) -> (DescribeTopicPartitionsResponseTopic, Option<i32>) {
    let partitions: Vec<_> = topic
        .partitions
        .into_iter()
        .filter(|p| p.partition_index >= start)
        .collect();
    let taken = partitions
        .len()
        .min(usize::try_from(remaining).unwrap_or(0));
    let next = partitions.get(taken).map(|p| p.partition_index);
    let entry = DescribeTopicPartitionsResponseTopic {
        error_code: errors::NONE,
        name: Some(name),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        partitions: partitions
            .into_iter()
            .take(taken)
            .map(|p| DescribeTopicPartitionsResponsePartition {
                error_code: p.error_code,
                partition_index: p.partition_index,
                leader_id: p.leader_id,
                leader_epoch: p.leader_epoch,
                replica_nodes: p.replica_nodes,
                isr_nodes: p.isr_nodes,
                eligible_leader_replicas: Some(Vec::new()),
                last_known_elr: Some(Vec::new()),
                offline_replicas: p.offline_replicas,
            })
            .collect(),
        topic_authorized_operations: topic.topic_authorized_operations,
    };
    (entry, next)
}
