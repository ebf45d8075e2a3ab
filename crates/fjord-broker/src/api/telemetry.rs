//! Client telemetry (KIP-714) on the wire: GetTelemetrySubscriptions and PushTelemetry, served
//! by `telemetry::ClientTelemetry` with the client's identity from its connection; and
//! ListConfigResources, which `kafka-client-metrics --list` reads the subscriptions' names
//! with. Telemetry needs no ACL (as in Kafka); ListConfigResources needs DESCRIBE_CONFIGS on the
//! cluster, checked before it gets here.

use fjord_common::{errors, now_ms};
use fjord_metadata::acl::AclOperation;
use fjord_metadata::{
    CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_CLIENT_METRICS, CONFIG_RESOURCE_TOPIC,
};
use fjord_protocol::messages::get_telemetry_subscriptions_request::GetTelemetrySubscriptionsRequest;
use fjord_protocol::messages::get_telemetry_subscriptions_response::GetTelemetrySubscriptionsResponse;
use fjord_protocol::messages::list_config_resources_request::ListConfigResourcesRequest;
use fjord_protocol::messages::list_config_resources_response::{
    ConfigResource, ListConfigResourcesResponse,
};
use fjord_protocol::messages::push_telemetry_request::PushTelemetryRequest;
use fjord_protocol::messages::push_telemetry_response::PushTelemetryResponse;

use crate::api::{Access, ClusterApi};
use fjord_telemetry::ClientIdentity;

/// Kafka's config resource types for broker loggers and groups, which ListConfigResources v1
/// lists too.
const CONFIG_RESOURCE_BROKER_LOGGER: i8 = 8;
const CONFIG_RESOURCE_GROUP: i8 = 32;

/// Who the client is, from its connection and request.
fn identity(access: &Access) -> ClientIdentity {
    let requester = access.requester();
    ClientIdentity {
        client_id: access.client_id().to_string(),
        software: requester
            .software()
            .map(|(name, version)| (name.to_string(), version.to_string())),
        address: requester.host().to_string(),
        port: requester.peer.port(),
        principal: requester.principal_text().to_string(),
    }
}

impl ClusterApi {
    pub(crate) fn get_telemetry_subscriptions(
        &self,
        request: &GetTelemetrySubscriptionsRequest,
        access: &Access,
    ) -> GetTelemetrySubscriptionsResponse {
        self.telemetry.follow(access.image().client_metrics());
        self.telemetry
            .subscriptions(request.client_instance_id, identity(access), now_ms())
    }

    pub(crate) fn push_telemetry(
        &self,
        request: &PushTelemetryRequest,
        access: &Access,
    ) -> PushTelemetryResponse {
        self.telemetry.follow(access.image().client_metrics());
        PushTelemetryResponse {
            throttle_time_ms: 0,
            error_code: self.telemetry.push(request, identity(access), now_ms()),
        }
    }

    /// The config resources of the types asked for (all it knows when none are): v0 knows only
    /// client-metrics subscriptions; a type it does not know is UNSUPPORTED_VERSION, as in Kafka.
    pub(crate) fn list_config_resources(
        &self,
        request: &ListConfigResourcesRequest,
        version: i16,
        access: &Access,
    ) -> ListConfigResourcesResponse {
        let known: &[i8] = if version == 0 {
            &[CONFIG_RESOURCE_CLIENT_METRICS]
        } else {
            &[
                CONFIG_RESOURCE_TOPIC,
                CONFIG_RESOURCE_BROKER,
                CONFIG_RESOURCE_BROKER_LOGGER,
                CONFIG_RESOURCE_CLIENT_METRICS,
                CONFIG_RESOURCE_GROUP,
            ]
        };
        let asked: &[i8] = if request.resource_types.is_empty() {
            known
        } else {
            &request.resource_types
        };
        if asked.iter().any(|t| !known.contains(t)) {
            return ListConfigResourcesResponse {
                error_code: errors::UNSUPPORTED_VERSION,
                ..Default::default()
            };
        }
        let image = access.image();
        let mut resources = Vec::new();
        let mut add = |resource_type: i8, names: Vec<String>| {
            resources.extend(names.into_iter().map(|resource_name| ConfigResource {
                resource_name,
                resource_type,
            }));
        };
        for &resource_type in asked {
            match resource_type {
                CONFIG_RESOURCE_TOPIC => add(
                    resource_type,
                    image
                        .topics()
                        .map(|t| t.name.clone())
                        .filter(|name| access.allows_topic(AclOperation::DescribeConfigs, name))
                        .collect(),
                ),
                CONFIG_RESOURCE_BROKER | CONFIG_RESOURCE_BROKER_LOGGER => add(
                    resource_type,
                    image.brokers().map(|b| b.broker_id.to_string()).collect(),
                ),
                CONFIG_RESOURCE_CLIENT_METRICS => add(
                    resource_type,
                    image.client_metrics().keys().cloned().collect(),
                ),
                // Groups' own configs are not kept: none to list.
                _ => {}
            }
        }
        ListConfigResourcesResponse {
            throttle_time_ms: 0,
            error_code: errors::NONE,
            config_resources: resources,
        }
    }
}
