//! Topic administration: CreateTopics, CreatePartitions and DeleteTopics, sent to any broker (a KRaft broker
//! forwards them to the active controller), each topic answered on its own.

use fjord_common::errors;
use fjord_protocol::messages::create_partitions_request::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use fjord_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use fjord_protocol::messages::delete_topics_request::{DeleteTopicState, DeleteTopicsRequest};
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};

use crate::client::Client;
use crate::error::ClientError;

/// A topic to create. -1 partitions or replication factor: the cluster's default
/// (`num.partitions`, `default.replication.factor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic configs by Kafka's names.
    pub configs: Vec<(String, String)>,
}

/// How long the broker may take to create or delete the topics before answering.
const TOPIC_TIMEOUT_MS: i32 = 30_000;

/// Each topic's outcome: `Ok` or its error, in request order.
pub type TopicOutcomes = Vec<(String, Result<(), ClientError>)>;

fn outcome(context: &str, code: i16, message: Option<String>) -> Result<(), ClientError> {
    if code == errors::NONE {
        Ok(())
    } else {
        Err(ClientError::kafka(context, code, message))
    }
}

impl Client {
    /// Creates `topics`; with `validate_only`, only checks that they could be created.
    pub async fn create_topics(
        &mut self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<TopicOutcomes, ClientError> {
        let request = CreateTopicsRequest {
            topics: topics
                .iter()
                .map(|t| CreatableTopic {
                    name: t.name.clone(),
                    num_partitions: t.partitions,
                    replication_factor: t.replication_factor,
                    assignments: Vec::new(),
                    configs: t
                        .configs
                        .iter()
                        .map(|(name, value)| CreatableTopicConfig {
                            name: name.clone(),
                            value: Some(value.clone()),
                        })
                        .collect(),
                })
                .collect(),
            timeout_ms: TOPIC_TIMEOUT_MS,
            validate_only,
        };
        let conn = self.any_conn().await?;
        let ResponseBody::CreateTopics(response) =
            conn.send(RequestBody::CreateTopics(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::CreateTopics));
        };
        Ok(topics
            .iter()
            .map(|t| {
                let answer = response.topics.iter().find(|r| r.name == t.name);
                let result = match answer {
                    Some(r) => outcome(
                        &format!("create topic {}", t.name),
                        r.error_code,
                        r.error_message.clone(),
                    ),
                    None => Err(ClientError::Malformed(format!(
                        "CreateTopics response: no entry for topic {}",
                        t.name
                    ))),
                };
                (t.name.clone(), result)
            })
            .collect())
    }

    /// Grows topic `name` to `count` partitions, the new ones placed by the controller.
    pub async fn create_partitions(&mut self, name: &str, count: i32) -> Result<(), ClientError> {
        let request = CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: name.to_string(),
                count,
                assignments: None,
            }],
            timeout_ms: TOPIC_TIMEOUT_MS,
            validate_only: false,
        };
        let conn = self.any_conn().await?;
        let ResponseBody::CreatePartitions(response) =
            conn.send(RequestBody::CreatePartitions(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::CreatePartitions));
        };
        match response.results.into_iter().find(|r| r.name == name) {
            Some(r) => outcome(
                &format!("add partitions to {name}"),
                r.error_code,
                r.error_message,
            ),
            None => Err(ClientError::Malformed(format!(
                "CreatePartitions response: no entry for topic {name}"
            ))),
        }
    }

    /// Deletes the topics named `names`.
    pub async fn delete_topics(&mut self, names: &[String]) -> Result<TopicOutcomes, ClientError> {
        let conn = self.any_conn().await?;
        let version =
            conn.version(ApiKey::DeleteTopics)
                .ok_or_else(|| ClientError::UnsupportedApi {
                    api: ApiKey::DeleteTopics.name(),
                    addr: conn.addr().to_string(),
                })?;
        // v6 names topics by name or id; earlier versions by name only.
        let request = if version >= 6 {
            DeleteTopicsRequest {
                topics: names
                    .iter()
                    .map(|name| DeleteTopicState {
                        name: Some(name.clone()),
                        ..Default::default()
                    })
                    .collect(),
                timeout_ms: TOPIC_TIMEOUT_MS,
                ..Default::default()
            }
        } else {
            DeleteTopicsRequest {
                topic_names: names.to_vec(),
                timeout_ms: TOPIC_TIMEOUT_MS,
                ..Default::default()
            }
        };
        let ResponseBody::DeleteTopics(response) = conn
            .send_at(version, RequestBody::DeleteTopics(request))
            .await?
        else {
            return Err(ClientError::unexpected(ApiKey::DeleteTopics));
        };
        Ok(names
            .iter()
            .map(|name| {
                let answer = response
                    .responses
                    .iter()
                    .find(|r| r.name.as_deref() == Some(name.as_str()));
                let result = match answer {
                    Some(r) => outcome(
                        &format!("delete topic {name}"),
                        r.error_code,
                        r.error_message.clone(),
                    ),
                    None => Err(ClientError::Malformed(format!(
                        "DeleteTopics response: no entry for topic {name}"
                    ))),
                };
                (name.clone(), result)
            })
            .collect())
    }
}
