//! DescribeConfigs: topic, broker, client-metrics and group configs with their sources and synonyms,
//! as Kafka lists them.

use fjord_common::errors;
use fjord_config::client_metrics::CLIENT_METRICS_CONFIGS;
use fjord_config::{
    broker_config_keys, broker_config_kind, broker_key_synonyms, is_dynamic_broker_key,
    ConfigSource, ConfigType, DynamicBrokerConfig, TOPIC_CONFIGS,
};
use fjord_protocol::messages::describe_configs_request::*;
use fjord_protocol::messages::describe_configs_response::*;

use crate::api::{authz, Access, ClusterApi};

/// Resource types as DescribeConfigs numbers them.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

/// What one resource of a DescribeConfigs asks for: which keys, and whether with synonyms.
struct Asked<'a> {
    keys: Option<&'a Vec<String>>,
    include_synonyms: bool,
}

impl Asked<'_> {
    /// Whether key `name` is asked for: all keys when none are named.
    fn wants(&self, name: &str) -> bool {
        self.keys
            .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| k == name))
    }
}

impl ClusterApi {
    /// DescribeConfigs: each resource's entries, or its error.
    /// A resource the principal may not describe the configs of (DESCRIBE_CONFIGS on the
    /// topic, or the cluster for a broker) is refused with Kafka's authorization error.
    pub(crate) fn describe_configs(
        &self,
        request: &DescribeConfigsRequest,
        access: &Access,
    ) -> DescribeConfigsResponse {
        let image = self.node.image();
        let (node, default) = image.broker_config_layers(self.node.config.node_id);
        let dynamic = DynamicBrokerConfig::new(node, default);
        let mut results = Vec::new();
        for resource in &request.resources {
            let asked = Asked {
                keys: resource.configuration_keys.as_ref(),
                include_synonyms: request.include_synonyms,
            };
            let name = &resource.resource_name;
            let refused = authz::may_describe_config(access, resource.resource_type, name);
            let described = match resource.resource_type {
                _ if let Some(code) = refused => Err((code, authz::message(code).to_string())),
                TOPIC if image.topic(name).is_none() => Err((
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("Topic {name} does not exist"),
                )),
                TOPIC => Ok(self.topic_entries(&image, &dynamic, name, &asked)),
                BROKER if name.is_empty() => Ok(default_broker_entries(&dynamic, &asked)),
                BROKER if *name != self.node.config.node_id.to_string() => Err((
                    errors::INVALID_REQUEST,
                    format!(
                        "Unexpected broker id, expected {}, but received {name}",
                        self.node.config.node_id
                    ),
                )),
                BROKER => Ok(self.broker_entries(&dynamic, &asked)),
                CLIENT_METRICS if name.is_empty() => Err((
                    errors::INVALID_REQUEST,
                    "Subscription name can't be empty".to_string(),
                )),
                // A subscription never set is described with the defaults, as Kafka does.
                CLIENT_METRICS => Ok(client_metrics_entries(
                    image.client_metrics().get(name),
                    &asked,
                )),
                GROUP if name.is_empty() => Err((
                    errors::INVALID_REQUEST,
                    "Group name can't be empty".to_string(),
                )),
                // A group need not exist to be described: its configs are the defaults.
                GROUP => Ok(group_entries(
                    image.group_configs().get(name),
                    &self.node.config.share_groups(),
                    &asked,
                )),
                other => Err((
                    errors::INVALID_REQUEST,
                    format!("Unsupported resource type {other}"),
                )),
            };
            let mut result = DescribeConfigsResult {
                resource_type: resource.resource_type,
                resource_name: name.clone(),
                ..Default::default()
            };
            match described {
                Ok(configs) => result.configs = configs,
                Err((code, message)) => {
                    result.error_code = code;
                    result.error_message = Some(message);
                }
            }
            results.push(result);
        }
        DescribeConfigsResponse {
            results,
            ..Default::default()
        }
    }

    /// A topic's configs with their sources; synonyms: the topic's own override, then the
    /// broker keys its default comes from.
    fn topic_entries(
        &self,
        image: &fjord_metadata::MetadataImage,
        dynamic: &DynamicBrokerConfig,
        topic: &str,
        asked: &Asked<'_>,
    ) -> Vec<DescribeConfigsResourceResult> {
        let config = self.replicas.topic_config(image, topic);
        let mut entries = Vec::new();
        for (name, value, source) in config.entries() {
            if !asked.wants(name) {
                continue;
            }
            let def = TOPIC_CONFIGS.iter().find(|d| d.name == name);
            let mut synonyms = Vec::new();
            if asked.include_synonyms {
                if source == ConfigSource::DynamicTopic {
                    synonyms.push(synonym(name, value, source));
                }
                let names = def
                    .and_then(|d| d.broker_synonym)
                    .map(broker_key_synonyms)
                    .unwrap_or_default();
                for (n, v, s) in self.node.config.synonyms(dynamic, &names) {
                    synonyms.push(synonym(&n, &v, s));
                }
            }
            entries.push(DescribeConfigsResourceResult {
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
        entries
    }

    /// This broker's configs, each with its synonyms from its own name on (as Kafka lists
    /// them), and the keys fjord does not know but holds dynamically (as Kafka keeps them).
    fn broker_entries(
        &self,
        dynamic: &DynamicBrokerConfig,
        asked: &Asked<'_>,
    ) -> Vec<DescribeConfigsResourceResult> {
        let mut entries = Vec::new();
        for (name, _) in broker_config_keys() {
            if !asked.wants(name) {
                continue;
            }
            let all = self
                .node
                .config
                .synonyms(dynamic, &broker_key_synonyms(name));
            let own: Vec<_> = all.into_iter().skip_while(|(n, _, _)| n != name).collect();
            let (value, source) = match own.first() {
                Some((_, v, s)) => (Some(v.clone()), *s),
                None => (None, ConfigSource::Default),
            };
            let synonyms = if asked.include_synonyms {
                own.iter().map(|(n, v, s)| synonym(n, v, *s)).collect()
            } else {
                Vec::new()
            };
            entries.push(broker_entry(name, value, source, synonyms));
        }
        let unknown = dynamic
            .node
            .keys()
            .filter(|k| broker_config_kind(k).is_none());
        for name in unknown.filter(|name| asked.wants(name)) {
            let mut entry = broker_entry(name, None, ConfigSource::DynamicBroker, Vec::new());
            entry.is_sensitive = true;
            entries.push(entry);
        }
        entries
    }
}

/// The cluster-wide broker default: only what is set dynamically for every broker.
fn default_broker_entries(
    dynamic: &DynamicBrokerConfig,
    asked: &Asked<'_>,
) -> Vec<DescribeConfigsResourceResult> {
    let source = ConfigSource::DynamicDefaultBroker;
    dynamic
        .default
        .iter()
        .filter(|(name, _)| asked.wants(name))
        .map(|(name, value)| {
            let synonyms = if asked.include_synonyms {
                vec![synonym(name, value, source)]
            } else {
                Vec::new()
            };
            broker_entry(name, Some(value.clone()), source, synonyms)
        })
        .collect()
}

/// A client-metrics subscription's three keys: what it sets, else the defaults.
fn client_metrics_entries(
    set: Option<&std::collections::BTreeMap<String, String>>,
    asked: &Asked<'_>,
) -> Vec<DescribeConfigsResourceResult> {
    CLIENT_METRICS_CONFIGS
        .iter()
        .filter(|(name, _, _)| asked.wants(name))
        .map(
            |&(name, kind, default)| match set.and_then(|s| s.get(name)) {
                Some(value) => plain_entry(
                    name,
                    kind,
                    value.clone(),
                    ConfigSource::ClientMetrics,
                    asked,
                ),
                None => plain_entry(
                    name,
                    kind,
                    default.to_string(),
                    ConfigSource::Default,
                    asked,
                ),
            },
        )
        .collect()
}

/// The entry of a config with no broker synonyms: its one synonym is itself.
fn plain_entry(
    name: &str,
    kind: ConfigType,
    value: String,
    source: ConfigSource,
    asked: &Asked<'_>,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult {
        name: name.to_string(),
        synonyms: if asked.include_synonyms {
            vec![synonym(name, &value, source)]
        } else {
            Vec::new()
        },
        value: Some(value),
        read_only: false,
        config_source: source as i8,
        is_sensitive: false,
        config_type: kind as i8,
        documentation: None,
    }
}

/// A group's configs: its own values, else the broker's defaults (`DEFAULT_CONFIG`, as Kafka
/// describes them).
fn group_entries(
    own: Option<&std::collections::BTreeMap<String, String>>,
    defaults: &fjord_config::group_configs::ShareGroupDefaults,
    asked: &Asked<'_>,
) -> Vec<DescribeConfigsResourceResult> {
    fjord_config::group_configs::entries(own, defaults)
        .into_iter()
        .filter(|(name, ..)| asked.wants(name))
        .map(|(name, kind, value, is_own)| {
            let source = if is_own {
                ConfigSource::Group
            } else {
                ConfigSource::Default
            };
            plain_entry(name, kind, value, source, asked)
        })
        .collect()
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym {
        name: name.to_string(),
        value: Some(value.to_string()),
        source: source as i8,
    }
}

/// A broker config's DescribeConfigs entry; read-only unless it can change on a running broker.
/// A password (a key, a keystore's password) is sensitive: described without its value, in
/// its synonyms too, as Kafka describes it.
fn broker_entry(
    name: &str,
    value: Option<String>,
    source: ConfigSource,
    mut synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    let kind = broker_config_kind(name);
    let is_sensitive = kind == Some(ConfigType::Password);
    if is_sensitive {
        for synonym in &mut synonyms {
            synonym.value = None;
        }
    }
    DescribeConfigsResourceResult {
        name: name.to_string(),
        value: value.filter(|_| !is_sensitive),
        read_only: !is_dynamic_broker_key(name),
        config_source: source as i8,
        is_sensitive,
        synonyms,
        config_type: kind.map_or(0, |k| k as i8),
        documentation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_described_without_its_value() {
        let entry = |name: &str| {
            let synonyms = vec![synonym(name, "secret", ConfigSource::StaticBroker)];
            broker_entry(
                name,
                Some("secret".into()),
                ConfigSource::StaticBroker,
                synonyms,
            )
        };
        let key = entry("ssl.key.password");
        assert!(key.is_sensitive && key.value.is_none());
        assert_eq!(key.synonyms[0].value, None);
        let location = entry("ssl.keystore.location");
        assert!(!location.is_sensitive);
        assert_eq!(location.value.as_deref(), Some("secret"));
    }
}
