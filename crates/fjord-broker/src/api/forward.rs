//! Controller work a client sent this broker (CreateTopics, DeleteTopics, CreatePartitions,
//! config changes) and topics the broker needs itself go to the active controller through the
//! `ControllerLink`; once answered, this broker's partitions follow the image it produced.

use std::collections::BTreeMap;

use std::sync::Arc;

use fjord_common::{now_ms, Requester};
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use fjord_protocol::ResponseBody;

use crate::api::Forwarder;
use fjord_common::errors;
use fjord_common::errors::KafkaError;
use fjord_config::InternalTopicSettings;

/// A topic the broker itself needs (an auto-created topic, `__consumer_offsets`).
pub(crate) struct InternalTopic {
    pub name: String,
    /// -1: the controller's `num.partitions`.
    pub num_partitions: i32,
    /// -1: the controller's `default.replication.factor`.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The CreateTopics version the broker's own creations are made at.
const CREATE_TOPICS_VERSION: i16 = 7;

impl Forwarder {
    /// Sends `api` (a request at `version`) to the active controller and returns its answer;
    /// when the controller cannot be reached or cannot commit, every entry carries the error.
    /// Once the answer is in, this broker's partitions follow the image it produced.
    pub(crate) async fn forward(&self, version: i16, api: ControllerApi) -> ResponseBody {
        self.forward_for(version, api, None).await
    }

    /// [`Self::forward`], the request made for `client` when given (a client's request, not the
    /// broker's own): it goes to a controller on another node in an Envelope naming the client.
    pub(crate) async fn forward_for(
        &self,
        version: i16,
        api: ControllerApi,
        client: Option<Arc<Requester>>,
    ) -> ResponseBody {
        let request =
            ControllerRequest::new(version, api, self.node.config.node_id).on_behalf_of(client);
        match self.controller.call(request.clone()).await {
            Ok(response) => {
                if let Err(error) = self.replicas.apply_image(&self.node.image(), now_ms()) {
                    tracing::error!(%error, "cannot apply a metadata change");
                }
                response
            }
            Err(error) => {
                tracing::warn!(api = request.api.api_key().name(), %error, "controller request failed");
                error.response_to(&request)
            }
        }
    }

    /// Creates topics on this broker's own behalf; answers each topic's error code and message
    /// (TOPIC_ALREADY_EXISTS included: someone else created it first).
    pub(crate) async fn create_internal_topics(
        &self,
        topics: Vec<InternalTopic>,
    ) -> Vec<(String, i16, Option<String>)> {
        let request = CreateTopicsRequest {
            topics: topics
                .into_iter()
                .map(|t| CreatableTopic {
                    name: t.name,
                    num_partitions: t.num_partitions,
                    replication_factor: t.replication_factor,
                    assignments: Vec::new(),
                    configs: t
                        .configs
                        .into_iter()
                        .map(|(name, value)| CreatableTopicConfig {
                            name,
                            value: Some(value),
                        })
                        .collect(),
                })
                .collect(),
            timeout_ms: 30_000,
            validate_only: false,
        };
        let names: Vec<String> = request.topics.iter().map(|t| t.name.clone()).collect();
        match self
            .forward(CREATE_TOPICS_VERSION, ControllerApi::CreateTopics(request))
            .await
        {
            ResponseBody::CreateTopics(response) => response
                .topics
                .into_iter()
                .map(|t| (t.name, t.error_code, t.error_message))
                .collect(),
            other => {
                let message = format!("the controller answered {}", other.api_key().name());
                tracing::error!(%message, "wrong answer to CreateTopics");
                names
                    .into_iter()
                    .map(|n| {
                        (
                            n,
                            fjord_common::errors::UNKNOWN_SERVER_ERROR,
                            Some(message.clone()),
                        )
                    })
                    .collect()
            }
        }
    }

    /// Creates a coordinator's internal topic if it is missing. As Kafka, a cluster creates it
    /// with the configured replication factor (default 3), which fails (the
    /// coordinator is not available) until that many brokers are up. A bare node alone is the
    /// one exception: it would never have enough, so it takes one replica.
    pub(crate) async fn ensure_internal_topic(
        &self,
        name: &str,
        settings: InternalTopicSettings,
    ) -> Result<(), KafkaError> {
        if self.node.image().topic(name).is_some() {
            return Ok(());
        }
        let wanted_rf = i16::try_from(settings.replication_factor).unwrap_or(i16::MAX);
        let alone = self.node.config.cluster.voters.is_empty()
            && self.node.config.cluster.bootstrap_servers.is_empty();
        let replication_factor = if alone && wanted_rf > 1 {
            tracing::info!(
                wanted_rf,
                "{name} gets one replica per partition on a node alone"
            );
            1
        } else {
            wanted_rf
        };
        let topic = InternalTopic {
            name: name.to_string(),
            num_partitions: settings.num_partitions,
            replication_factor,
            configs: settings.configs,
        };
        for (_, error_code, message) in self.create_internal_topics(vec![topic]).await {
            // Kafka's FindCoordinator answers a coordinator whose topic cannot be made
            // COORDINATOR_NOT_AVAILABLE.
            if error_code != errors::NONE && error_code != errors::TOPIC_ALREADY_EXISTS {
                return Err(KafkaError::new(
                    errors::COORDINATOR_NOT_AVAILABLE,
                    format!(
                        "cannot create {name}: {} {}",
                        errors::name(error_code),
                        message.unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(())
    }
}
