//! IncrementalAlterConfigs and AlterConfigs: dynamic topic and broker configs (one broker's, or
//! the cluster-wide default), decided by `plan::plan_alter_*_configs` into config records; each
//! broker applies them when its image changes (to its open logs' settings and its log cleaner).

use fjord_protocol::messages::alter_configs_request::AlterConfigsRequest;
use fjord_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse as LegacyResult, AlterConfigsResponse,
};
use fjord_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use fjord_protocol::messages::incremental_alter_configs_response::*;

use fjord_common::errors;
use fjord_config::DynamicBrokerConfig;
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::ResponseBody;

use crate::apis::{answer, committed_unless, Controller};
use crate::decision::Decision;
use crate::plan::{self, ConfigChange, Refusal};

/// One resource's answer: its type, its name, and whether its changes were accepted.
type Outcome = (i8, String, Result<(), Refusal>);

/// Config resource types, as Kafka numbers them.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

/// One resource of an alter request: its changes, or why the request shape is refused.
struct Alteration {
    resource_type: i8,
    resource_name: String,
    changes: Result<Vec<(String, ConfigChange)>, Refusal>,
}

fn invalid_request(message: impl Into<String>) -> Refusal {
    Refusal {
        error_code: errors::INVALID_REQUEST,
        message: message.into(),
    }
}

fn null_value(name: &str) -> Refusal {
    invalid_request(format!("Null value not supported for : {name}"))
}

impl Controller {
    pub(crate) fn incremental_alter_configs(
        &self,
        image: &MetadataImage,
        request: &IncrementalAlterConfigsRequest,
        requester: i32,
    ) -> Decision {
        let alterations = request
            .resources
            .iter()
            .cloned()
            .map(|resource| Alteration {
                resource_type: resource.resource_type,
                resource_name: resource.resource_name,
                changes: resource
                    .configs
                    .into_iter()
                    .map(|c| {
                        let change = match (c.config_operation, c.value) {
                            (1, _) => ConfigChange::Delete,
                            (0, Some(v)) => ConfigChange::Set(v),
                            (2, Some(v)) => ConfigChange::Append(v),
                            (3, Some(v)) => ConfigChange::Subtract(v),
                            (0..=3, None) => return Err(null_value(&c.name)),
                            (op, _) => {
                                return Err(invalid_request(format!(
                                    "Unknown config operation {op} for {}",
                                    c.name
                                )))
                            }
                        };
                        Ok((c.name, change))
                    })
                    .collect(),
            })
            .collect();
        let (records, outcomes) = self.alter_configs_of(image, requester, alterations, false);
        let responses = outcomes
            .into_iter()
            .map(|(resource_type, resource_name, outcome)| {
                let (error_code, error_message) = answer(outcome);
                AlterConfigsResourceResponse {
                    error_code,
                    error_message,
                    resource_type,
                    resource_name,
                }
            })
            .collect();
        Decision {
            records: committed_unless(request.validate_only, records),
            response: ResponseBody::IncrementalAlterConfigs(IncrementalAlterConfigsResponse {
                responses,
                ..Default::default()
            }),
        }
    }

    /// The legacy AlterConfigs: each resource's dynamic configs become exactly the given set.
    pub(crate) fn alter_configs(
        &self,
        image: &MetadataImage,
        request: &AlterConfigsRequest,
        requester: i32,
    ) -> Decision {
        let alterations = request
            .resources
            .iter()
            .cloned()
            .map(|resource| Alteration {
                resource_type: resource.resource_type,
                resource_name: resource.resource_name,
                changes: resource
                    .configs
                    .into_iter()
                    .map(|c| match c.value {
                        Some(v) => Ok((c.name, ConfigChange::Set(v))),
                        None => Err(null_value(&c.name)),
                    })
                    .collect(),
            })
            .collect();
        let (records, outcomes) = self.alter_configs_of(image, requester, alterations, true);
        let responses = outcomes
            .into_iter()
            .map(|(resource_type, resource_name, outcome)| {
                let (error_code, error_message) = answer(outcome);
                LegacyResult {
                    error_code,
                    error_message,
                    resource_type,
                    resource_name,
                }
            })
            .collect();
        Decision {
            records: committed_unless(request.validate_only, records),
            response: ResponseBody::AlterConfigs(AlterConfigsResponse {
                responses,
                ..Default::default()
            }),
        }
    }

    /// Decides every resource on one image; the records of all of them are committed together.
    /// Answers in request order. A broker resource is the requesting broker's (`--entity-name`,
    /// which the admin client sends to that broker) or the cluster-wide default.
    fn alter_configs_of(
        &self,
        image: &MetadataImage,
        requester: i32,
        alterations: Vec<Alteration>,
        replace: bool,
    ) -> (Vec<fjord_metadata::MetadataRecord>, Vec<Outcome>) {
        let mut records = Vec::new();
        let mut outcomes = Vec::with_capacity(alterations.len());
        for (index, alteration) in alterations.iter().enumerate() {
            let duplicate = alterations.iter().enumerate().any(|(other, a)| {
                other != index
                    && a.resource_type == alteration.resource_type
                    && a.resource_name == alteration.resource_name
            });
            let outcome = if duplicate {
                Err(invalid_request(format!(
                    "Error due to duplicate resource {}",
                    alteration.resource_name
                )))
            } else {
                match (&alteration.changes, alteration.resource_type) {
                    (Err(refusal), _) => Err(refusal.clone()),
                    (Ok(changes), TOPIC) => plan::plan_alter_topic_configs(
                        image,
                        &alteration.resource_name,
                        changes,
                        replace,
                    )
                    .map(|planned| records.extend(planned)),
                    (Ok(changes), BROKER) => {
                        let node_id = requester;
                        let name = &alteration.resource_name;
                        plan::plan_alter_broker_configs(
                            image,
                            node_id,
                            name,
                            changes,
                            replace,
                            |after| {
                                let (node, default) = image.broker_config_layers(node_id);
                                let mut dynamic = DynamicBrokerConfig::new(node, default);
                                let layer = if name.is_empty() {
                                    &mut dynamic.default
                                } else {
                                    &mut dynamic.node
                                };
                                *layer = after.clone();
                                self.config
                                    .merged_settings(&dynamic)
                                    .cleaner_config()
                                    .map(drop)
                                    .map_err(|e| e.to_string())
                            },
                        )
                        .map(|planned| records.extend(planned))
                    }
                    (Ok(changes), CLIENT_METRICS) => plan::plan_alter_client_metrics(
                        image,
                        &alteration.resource_name,
                        changes,
                        replace,
                    )
                    .map(|planned| records.extend(planned)),
                    (Ok(changes), GROUP) => plan::plan_alter_group_configs(
                        image,
                        &alteration.resource_name,
                        changes,
                        replace,
                        &self.config.share_groups(),
                    )
                    .map(|planned| records.extend(planned)),
                    (Ok(_), BROKER_LOGGER) => Err(invalid_request(
                        "Altering broker logger levels is not supported by this broker",
                    )),
                    (Ok(_), other) => {
                        Err(invalid_request(format!("Unexpected resource type {other}")))
                    }
                }
            };
            outcomes.push(outcome);
        }
        let outcomes = alterations
            .into_iter()
            .zip(outcomes)
            .map(|(a, outcome)| (a.resource_type, a.resource_name, outcome))
            .collect();
        (records, outcomes)
    }
}
