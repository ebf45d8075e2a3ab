//! DescribeClientQuotas (`kafka-configs --entity-type users|clients|ips --describe`): answered
//! from this broker's image. (AlterClientQuotas goes to the controller; the quotas are enforced
//! by `crate::quota`.)

use fjord_common::errors;
use fjord_metadata::quota::QuotaFilter;
use fjord_protocol::messages::describe_client_quotas_request::DescribeClientQuotasRequest;
use fjord_protocol::messages::describe_client_quotas_response::{
    DescribeClientQuotasResponse, EntityData, EntryData, ValueData,
};

use crate::api::ClusterApi;

impl ClusterApi {
    /// The quotas of every entity `request`'s filter matches, or Kafka's error for a bad filter.
    pub(crate) fn describe_client_quotas(
        &self,
        request: &DescribeClientQuotasRequest,
    ) -> DescribeClientQuotasResponse {
        let components = request
            .components
            .iter()
            .map(|c| (c.entity_type.as_str(), c.match_type, c.r#match.as_deref()));
        let filter = match QuotaFilter::new(components, request.strict) {
            Ok(filter) => filter,
            Err(invalid) => {
                return DescribeClientQuotasResponse {
                    error_code: if invalid.unsupported {
                        errors::UNSUPPORTED_VERSION
                    } else {
                        errors::INVALID_REQUEST
                    },
                    error_message: Some(invalid.message),
                    entries: None,
                    ..Default::default()
                }
            }
        };
        let image = self.node.image();
        let entries = image
            .client_quotas()
            .iter()
            .filter(|(entity, _)| filter.matches(entity))
            .map(|(entity, quotas)| EntryData {
                entity: entity
                    .0
                    .iter()
                    .map(|(entity_type, entity_name)| EntityData {
                        entity_type: entity_type.clone(),
                        entity_name: entity_name.clone(),
                    })
                    .collect(),
                values: quotas
                    .iter()
                    .map(|(key, value)| ValueData {
                        key: key.clone(),
                        value: value.0,
                    })
                    .collect(),
            })
            .collect();
        DescribeClientQuotasResponse {
            entries: Some(entries),
            ..Default::default()
        }
    }
}
