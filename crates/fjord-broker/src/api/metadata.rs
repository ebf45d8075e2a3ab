//! Metadata and DescribeCluster: topics, partitions and brokers as this broker's image has them,
//! each broker at its endpoint on the listener the request came in on.

use std::collections::BTreeMap;
use std::sync::Arc;

use fjord_common::errors;
use fjord_controller::plan;
use fjord_protocol::messages::describe_cluster_request::*;
use fjord_protocol::messages::describe_cluster_response::*;
use fjord_protocol::messages::metadata_request::*;
use fjord_protocol::messages::metadata_response::*;
use fjord_protocol::Uuid;

use crate::api::{Access, ClusterApi, InternalTopic, Node};
use fjord_metadata::acl::{AclOperation, ResourceType};

impl Node {
    /// Every registered broker's endpoint on `listener` (this broker's as `own`), with its
    /// rack, in id order; a broker without that listener is left out, as Kafka does.
    pub(crate) fn live_endpoints(
        &self,
        listener: &str,
        own: (String, i32),
    ) -> Vec<(i32, String, i32, Option<String>)> {
        self.broker_endpoints(listener, own, false)
            .into_iter()
            .map(|(id, host, port, rack, _)| (id, host, port, rack))
            .collect()
    }

    /// The registered brokers' endpoints on `listener` (this broker's is `own`), in id order,
    /// each with whether it is fenced; fenced brokers only with `fenced_too` (they are not alive
    /// to clients, as in Kafka's metadata cache).
    pub(crate) fn broker_endpoints(
        &self,
        listener: &str,
        own: (String, i32),
        fenced_too: bool,
    ) -> Vec<(i32, String, i32, Option<String>, bool)> {
        let image = self.image();
        let mut brokers: Vec<(i32, String, i32, Option<String>, bool)> = image
            .brokers()
            .filter(|b| b.broker_id != self.config.node_id && (fenced_too || !b.fenced))
            .filter_map(|b| {
                let endpoint = b.endpoints.iter().find(|e| e.name == listener)?;
                Some((
                    b.broker_id,
                    endpoint.host.clone(),
                    endpoint.port as i32,
                    b.rack.clone(),
                    b.fenced,
                ))
            })
            .collect();
        brokers.push((
            self.config.node_id,
            own.0,
            own.1,
            self.config.cluster.rack.clone(),
            false,
        ));
        brokers.sort_by_key(|b| b.0);
        brokers
    }
}

impl ClusterApi {
    /// Topics the principal may not describe are left out of an all-topics answer and refused
    /// TOPIC_AUTHORIZATION_FAILED when named; a missing topic is created only with CREATE on
    /// the cluster or on the topic (else refused the same).
    pub(crate) async fn metadata(
        self: Arc<Self>,
        request: MetadataRequest,
        version: i16,
        (listener, (host, port)): (String, (String, i32)),
        access: Access,
    ) -> MetadataResponse {
        let listener = listener.as_str();
        let mut response = MetadataResponse {
            brokers: self
                .node
                .live_endpoints(listener, (host, port))
                .into_iter()
                .map(|(node_id, host, port, rack)| MetadataResponseBroker {
                    node_id,
                    host,
                    port,
                    rack,
                })
                .collect(),
            cluster_id: Some(self.node.cluster_id.clone()),
            // As a KRaft broker answers: a live broker (this one), which forwards controller work.
            controller_id: self.node.config.node_id,
            cluster_authorized_operations: if (8..=10).contains(&version)
                && request.include_cluster_authorized_operations
            {
                access.cluster_operations()
            } else {
                i32::MIN
            },
            ..Default::default()
        };
        let with_operations = version >= 8 && request.include_topic_authorized_operations;
        // v0 asks for all topics with an empty list; later versions with null.
        let requested: Option<Vec<MetadataRequestTopic>> = match request.topics {
            Some(list) if list.is_empty() && version == 0 => None,
            other => other,
        };
        let auto_create = self.node.config.auto_create_topics_enable
            && (version < 4 || request.allow_auto_topic_creation);
        let image = self.node.image();
        let operations = |mut entry: MetadataResponseTopic| {
            if with_operations && entry.error_code != errors::TOPIC_AUTHORIZATION_FAILED {
                let name = entry.name.as_deref().unwrap_or_default();
                entry.topic_authorized_operations =
                    access.authorized_operations(ResourceType::Topic, name);
            }
            entry
        };
        let Some(requested) = requested else {
            let mut names: Vec<String> = image
                .topics()
                .map(|t| t.name.clone())
                .filter(|name| access.allows_topic(AclOperation::Describe, name))
                .collect();
            names.sort();
            response.topics = names
                .iter()
                .map(|n| operations(self.topic_metadata(&image, n)))
                .collect();
            return response;
        };
        let may_create = |name: &str| {
            access.allows_cluster(AclOperation::Create)
                || access.allows_topic(AclOperation::Create, name)
        };
        let auto_create = auto_create.then_some(&image);
        self.auto_create_topics(&requested, auto_create, &|name| {
            access.allows_topic(AclOperation::Describe, name) && may_create(name)
        })
        .await;
        let image = self.node.image();
        response.topics = requested
            .iter()
            .map(|topic| {
                let mut entry = self.requested_topic_metadata(&image, topic);
                let name = entry.name.clone().unwrap_or_default();
                let known = entry.error_code != errors::UNKNOWN_TOPIC_ID;
                let refused = known && !access.allows_topic(AclOperation::Describe, &name)
                    || (auto_create.is_some()
                        && entry.error_code == errors::UNKNOWN_TOPIC_OR_PARTITION
                        && !may_create(&name));
                if refused {
                    // Nothing about the topic is disclosed: not even whether it exists. A topic
                    // asked for by id keeps its id (ids are not secret), else it has none.
                    entry = MetadataResponseTopic {
                        error_code: errors::TOPIC_AUTHORIZATION_FAILED,
                        name: (topic.topic_id == Uuid::ZERO).then_some(name),
                        topic_id: topic.topic_id,
                        is_internal: false,
                        ..Default::default()
                    };
                }
                operations(entry)
            })
            .collect();
        response
    }

    /// Topics a Metadata request named that do not exist, created with the broker's defaults
    /// when `auto.create.topics.enable` allows it (`image`: the image they are missing from).
    async fn auto_create_topics(
        &self,
        requested: &[MetadataRequestTopic],
        image: Option<&Arc<fjord_metadata::MetadataImage>>,
        allowed: &(dyn Fn(&str) -> bool + Sync),
    ) {
        let Some(image) = image else {
            return;
        };
        let topics: Vec<InternalTopic> = requested
            .iter()
            .filter_map(|topic| topic.name.as_ref())
            .filter(|name| {
                image.topic(name).is_none()
                    && plan::validate_topic_name(name).is_ok()
                    && allowed(name)
            })
            .map(|name| InternalTopic {
                name: name.clone(),
                num_partitions: -1,
                replication_factor: -1,
                configs: BTreeMap::new(),
            })
            .collect();
        if topics.is_empty() {
            return;
        }
        for (name, error_code, message) in self.forwarder.create_internal_topics(topics).await {
            if error_code != errors::NONE && error_code != errors::TOPIC_ALREADY_EXISTS {
                tracing::warn!(topic = %name, error = errors::name(error_code), ?message, "auto-creation refused");
            }
        }
    }

    /// One named topic's entry. As Kafka: a non-zero topic id wins (clients send it with a null
    /// or an empty name); an unknown name no topic can have is INVALID_TOPIC_EXCEPTION.
    fn requested_topic_metadata(
        &self,
        image: &fjord_metadata::MetadataImage,
        topic: &MetadataRequestTopic,
    ) -> MetadataResponseTopic {
        let by_name = if topic.topic_id == Uuid::ZERO {
            topic.name.as_ref()
        } else {
            None
        };
        let Some(name) = by_name else {
            return match image.topic_by_id(&topic.topic_id) {
                Some(t) => self.topic_metadata(image, &t.name.clone()),
                None => MetadataResponseTopic {
                    error_code: errors::UNKNOWN_TOPIC_ID,
                    name: None,
                    topic_id: topic.topic_id,
                    ..Default::default()
                },
            };
        };
        let mut entry = self.topic_metadata(image, name);
        if entry.error_code == errors::UNKNOWN_TOPIC_OR_PARTITION
            && plan::validate_topic_name(name).is_err()
        {
            entry.error_code = errors::INVALID_TOPIC_EXCEPTION;
        }
        entry
    }

    pub(crate) fn topic_metadata(
        &self,
        image: &fjord_metadata::MetadataImage,
        name: &str,
    ) -> MetadataResponseTopic {
        let Some(topic) = image.topic(name) else {
            return MetadataResponseTopic {
                error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                name: Some(name.to_string()),
                ..Default::default()
            };
        };
        MetadataResponseTopic {
            error_code: errors::NONE,
            name: Some(topic.name.clone()),
            topic_id: topic.topic_id,
            is_internal: topic.name.starts_with("__"),
            partitions: topic
                .partitions
                .iter()
                .enumerate()
                .map(|(index, p)| MetadataResponsePartition {
                    error_code: if p.leader < 0 {
                        errors::LEADER_NOT_AVAILABLE
                    } else {
                        errors::NONE
                    },
                    partition_index: index as i32,
                    leader_id: p.leader,
                    leader_epoch: p.leader_epoch,
                    replica_nodes: p.replicas.clone(),
                    isr_nodes: p.isr.clone(),
                    // Replicas on brokers that are gone or fenced, as Kafka reports them.
                    offline_replicas: p
                        .replicas
                        .iter()
                        .copied()
                        .filter(|&id| image.broker(id).is_none_or(|b| b.fenced))
                        .collect(),
                })
                .collect(),
            topic_authorized_operations: i32::MIN,
        }
    }

    pub(crate) fn describe_cluster(
        &self,
        request: &DescribeClusterRequest,
        (listener, own): (&str, (String, i32)),
        access: &Access,
    ) -> DescribeClusterResponse {
        // Endpoint types as KIP-919 numbers them; a broker describes only brokers.
        const BROKER: i8 = 1;
        const CONTROLLER: i8 = 2;
        if request.endpoint_type != BROKER {
            let (error_code, message) = if request.endpoint_type == CONTROLLER {
                (
                    errors::MISMATCHED_ENDPOINT_TYPE,
                    "This is a broker endpoint; controllers are not described here.".to_string(),
                )
            } else {
                (
                    errors::UNSUPPORTED_ENDPOINT_TYPE,
                    format!("Unsupported endpoint type {}", request.endpoint_type),
                )
            };
            return DescribeClusterResponse {
                error_code,
                error_message: Some(message),
                ..Default::default()
            };
        }
        DescribeClusterResponse {
            error_code: errors::NONE,
            endpoint_type: 1,
            cluster_id: self.node.cluster_id.clone(),
            controller_id: self.node.config.node_id,
            // Fenced brokers too when asked (v2, KIP-1073), marked.
            brokers: self
                .node
                .broker_endpoints(listener, own, request.include_fenced_brokers)
                .into_iter()
                .map(
                    |(broker_id, host, port, rack, is_fenced)| DescribeClusterBroker {
                        broker_id,
                        host,
                        port,
                        rack,
                        is_fenced,
                    },
                )
                .collect(),
            cluster_authorized_operations: if request.include_cluster_authorized_operations {
                access.cluster_operations()
            } else {
                i32::MIN
            },
            ..Default::default()
        }
    }
}
