//! DescribeConfigs: topic and broker configs with their sources and synonyms, as Kafka lists them.

use fjord_common::errors;
use fjord_config::{
    broker_config_keys, broker_config_kind, broker_key_synonyms, is_dynamic_broker_key,
    ConfigSource, DynamicBrokerConfig, TOPIC_CONFIGS,
};
use fjord_protocol::messages::describe_configs_request::*;
use fjord_protocol::messages::describe_configs_response::*;

use crate::api::Broker;

impl Broker {
    pub(crate) fn describe_configs(
        &self,
        request: &DescribeConfigsRequest,
    ) -> DescribeConfigsResponse {
        const TOPIC: i8 = 2;
        const BROKER: i8 = 4;
        let image = self.quorum.image();
        let dynamic = DynamicBrokerConfig::from_image(&image, self.config.node_id);
        let mut results = Vec::new();
        for resource in &request.resources {
            let wanted = |name: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| k == name))
            };
            let mut result = DescribeConfigsResult {
                resource_type: resource.resource_type,
                resource_name: resource.resource_name.clone(),
                ..Default::default()
            };
            match resource.resource_type {
                TOPIC => {
                    if image.topic(&resource.resource_name).is_none() {
                        result.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                        result.error_message =
                            Some(format!("Topic {} does not exist", resource.resource_name));
                    } else {
                        let config = self.replicas.topic_config(&image, &resource.resource_name);
                        for (name, value, source) in config.entries() {
                            if !wanted(name) {
                                continue;
                            }
                            let def = TOPIC_CONFIGS.iter().find(|d| d.name == name);
                            let mut synonyms = Vec::new();
                            if request.include_synonyms {
                                if source == ConfigSource::DynamicTopic {
                                    synonyms.push(synonym(name, value, source));
                                }
                                let names = def
                                    .and_then(|d| d.broker_synonym)
                                    .map(broker_key_synonyms)
                                    .unwrap_or_default();
                                for (n, v, s) in self.config.synonyms(&dynamic, &names) {
                                    synonyms.push(synonym(&n, &v, s));
                                }
                            }
                            result.configs.push(DescribeConfigsResourceResult {
                                name: name.to_string(),
                                value: Some(value.to_string()),
                                read_only: false,
                                config_source: source as i8,
                                is_sensitive: false,
                                synonyms,
                                config_type: def.map(|d| d.kind as i8).unwrap_or(0),
                                documentation: None,
                            });
                        }
                    }
                }
                BROKER if resource.resource_name.is_empty() => {
                    // The cluster-wide default: only what is set dynamically for every broker.
                    for (name, value) in &dynamic.default {
                        if !wanted(name) {
                            continue;
                        }
                        let source = ConfigSource::DynamicDefaultBroker;
                        result.configs.push(broker_entry(
                            name,
                            Some(value.clone()),
                            source,
                            if request.include_synonyms {
                                vec![synonym(name, value, source)]
                            } else {
                                Vec::new()
                            },
                        ));
                    }
                }
                BROKER => {
                    if resource.resource_name != self.config.node_id.to_string() {
                        result.error_code = errors::INVALID_REQUEST;
                        result.error_message = Some(format!(
                            "Unexpected broker id, expected {}, but received {}",
                            self.config.node_id, resource.resource_name
                        ));
                    } else {
                        for (name, _) in broker_config_keys() {
                            if !wanted(name) {
                                continue;
                            }
                            // As Kafka lists them: this key's synonyms from its own name on.
                            let all = self.config.synonyms(&dynamic, &broker_key_synonyms(name));
                            let own: Vec<_> =
                                all.into_iter().skip_while(|(n, _, _)| n != name).collect();
                            let (value, source) = match own.first() {
                                Some((_, v, s)) => (Some(v.clone()), *s),
                                None => (None, ConfigSource::Default),
                            };
                            let synonyms = if request.include_synonyms {
                                own.iter().map(|(n, v, s)| synonym(n, v, *s)).collect()
                            } else {
                                Vec::new()
                            };
                            result
                                .configs
                                .push(broker_entry(name, value, source, synonyms));
                        }
                        // Keys fjord does not know but stored dynamically, as Kafka keeps them.
                        for name in dynamic
                            .node
                            .keys()
                            .filter(|k| broker_config_kind(k).is_none())
                        {
                            if wanted(name) {
                                let mut entry = broker_entry(
                                    name,
                                    None,
                                    ConfigSource::DynamicBroker,
                                    Vec::new(),
                                );
                                entry.is_sensitive = true;
                                result.configs.push(entry);
                            }
                        }
                    }
                }
                other => {
                    result.error_code = errors::INVALID_REQUEST;
                    result.error_message = Some(format!("Unsupported resource type {other}"));
                }
            }
            results.push(result);
        }
        DescribeConfigsResponse {
            results,
            ..Default::default()
        }
    }
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym {
        name: name.to_string(),
        value: Some(value.to_string()),
        source: source as i8,
    }
}

/// A broker config's DescribeConfigs entry; read-only unless it can change on a running broker.
fn broker_entry(
    name: &str,
    value: Option<String>,
    source: ConfigSource,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult {
        name: name.to_string(),
        value,
        read_only: !is_dynamic_broker_key(name),
        config_source: source as i8,
        is_sensitive: false,
        synonyms,
        config_type: broker_config_kind(name).map_or(0, |k| k as i8),
        documentation: None,
    }
}
