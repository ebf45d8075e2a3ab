//! Config administration: DescribeConfigs and IncrementalAlterConfigs for topics and brokers. A
//! broker's own configs are asked of that broker (Kafka answers only for itself); a topic's of
//! any broker.

use std::collections::BTreeMap;

use fjord_common::errors;
use fjord_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use fjord_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use fjord_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};

use crate::client::Client;
use crate::connection::Connection;
use crate::error::ClientError;

/// What a config belongs to, with Kafka's resource type numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    Topic(String),
    Broker(i32),
}

impl ConfigResource {
    fn kind(&self) -> i8 {
        match self {
            ConfigResource::Topic(_) => 2,
            ConfigResource::Broker(_) => 4,
        }
    }

    fn name(&self) -> String {
        match self {
            ConfigResource::Topic(name) => name.clone(),
            ConfigResource::Broker(id) => id.to_string(),
        }
    }
}

/// One config as DescribeConfigs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// None for a sensitive value (a password) or one unset.
    pub value: Option<String>,
    /// Kafka's source number: 1 dynamic topic, 2 dynamic broker, 3 dynamic default broker,
    /// 4 static broker, 5 default, 6 dynamic broker logger.
    pub source: i8,
    pub is_sensitive: bool,
    pub read_only: bool,
}

/// Kafka's name for a config source number, as its tools print it.
pub fn config_source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

/// A change IncrementalAlterConfigs makes to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    Set(String),
    Delete,
}

impl Client {
    async fn conn_for(
        &mut self,
        resource: &ConfigResource,
    ) -> Result<&mut Connection, ClientError> {
        match resource {
            ConfigResource::Broker(id) => self.node_conn(*id).await,
            ConfigResource::Topic(_) => self.any_conn().await,
        }
    }

    /// Every config of `resource`, in the broker's order.
    pub async fn describe_configs(
        &mut self,
        resource: &ConfigResource,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: resource.kind(),
                resource_name: resource.name(),
                configuration_keys: None,
            }],
            include_synonyms: false,
            include_documentation: false,
        };
        let conn = self.conn_for(resource).await?;
        let ResponseBody::DescribeConfigs(response) =
            conn.send(RequestBody::DescribeConfigs(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeConfigs));
        };
        let result = response.results.into_iter().next().ok_or_else(|| {
            ClientError::Malformed("DescribeConfigs response: no result".to_string())
        })?;
        if result.error_code != errors::NONE {
            return Err(ClientError::kafka(
                format!("describe configs of {}", resource.name()),
                result.error_code,
                result.error_message,
            ));
        }
        Ok(result.configs.into_iter().map(entry).collect())
    }

    /// The configs named `keys` of each topic in `topics`, in one request; topics the broker
    /// answers with an error (absent, not authorized) are left out.
    pub async fn describe_topic_configs(
        &mut self,
        topics: &[String],
        keys: &[&str],
    ) -> Result<BTreeMap<String, Vec<ConfigEntry>>, ClientError> {
        let request = DescribeConfigsRequest {
            resources: topics
                .iter()
                .map(|name| DescribeConfigsResource {
                    resource_type: ConfigResource::Topic(String::new()).kind(),
                    resource_name: name.clone(),
                    configuration_keys: Some(keys.iter().map(|k| k.to_string()).collect()),
                })
                .collect(),
            include_synonyms: false,
            include_documentation: false,
        };
        let conn = self.any_conn().await?;
        let ResponseBody::DescribeConfigs(response) =
            conn.send(RequestBody::DescribeConfigs(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeConfigs));
        };
        Ok(response
            .results
            .into_iter()
            .filter(|r| r.error_code == errors::NONE)
            .map(|r| (r.resource_name, r.configs.into_iter().map(entry).collect()))
            .collect())
    }

    /// Sets or deletes keys of `resource` (IncrementalAlterConfigs), all or none.
    pub async fn alter_configs(
        &mut self,
        resource: &ConfigResource,
        changes: &[(String, ConfigChange)],
    ) -> Result<(), ClientError> {
        let request = IncrementalAlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: resource.kind(),
                resource_name: resource.name(),
                configs: changes
                    .iter()
                    .map(|(name, change)| match change {
                        ConfigChange::Set(value) => AlterableConfig {
                            name: name.clone(),
                            config_operation: 0,
                            value: Some(value.clone()),
                        },
                        ConfigChange::Delete => AlterableConfig {
                            name: name.clone(),
                            config_operation: 1,
                            value: None,
                        },
                    })
                    .collect(),
            }],
            validate_only: false,
        };
        let conn = self.conn_for(resource).await?;
        let ResponseBody::IncrementalAlterConfigs(response) = conn
            .send(RequestBody::IncrementalAlterConfigs(request))
            .await?
        else {
            return Err(ClientError::unexpected(ApiKey::IncrementalAlterConfigs));
        };
        match response.responses.into_iter().next() {
            Some(r) if r.error_code == errors::NONE => Ok(()),
            Some(r) => Err(ClientError::kafka(
                format!("alter configs of {}", resource.name()),
                r.error_code,
                r.error_message,
            )),
            None => Err(ClientError::Malformed(
                "IncrementalAlterConfigs response: no result".to_string(),
            )),
        }
    }
}

fn entry(c: DescribeConfigsResourceResult) -> ConfigEntry {
    ConfigEntry {
        name: c.name,
        value: c.value,
        source: c.config_source,
        is_sensitive: c.is_sensitive,
        read_only: c.read_only,
    }
}
