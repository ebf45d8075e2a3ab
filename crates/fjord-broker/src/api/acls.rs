//! DescribeAcls (`kafka-acls --list`): answered from this broker's image, the ACLs grouped by
//! resource pattern. (CreateAcls and DeleteAcls go to the controller.)

use std::collections::BTreeMap;

use fjord_common::errors;
use fjord_metadata::acl::{AclBinding, AclFilter};
use fjord_protocol::messages::describe_acls_request::DescribeAclsRequest;
use fjord_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource, DescribeAclsResponse,
};

use crate::api::ClusterApi;

impl ClusterApi {
    /// The ACLs `request`'s filter matches; SECURITY_DISABLED without an authorizer, as Kafka.
    pub(crate) fn describe_acls(&self, request: &DescribeAclsRequest) -> DescribeAclsResponse {
        if !self.node.has_authorizer() {
            return DescribeAclsResponse {
                error_code: errors::SECURITY_DISABLED,
                error_message: Some("No Authorizer is configured on the broker".to_string()),
                ..Default::default()
            };
        }
        let filter = AclFilter::from_wire(
            request.resource_type_filter,
            request.resource_name_filter.as_deref(),
            request.pattern_type_filter,
            request.principal_filter.as_deref(),
            request.host_filter.as_deref(),
            request.operation,
            request.permission_type,
        );
        match filter {
            Ok(filter) => {
                let image = self.node.image();
                described(
                    image
                        .acls()
                        .iter()
                        .map(|(_, acl)| acl)
                        .filter(|acl| filter.matches(acl)),
                )
            }
            Err(invalid) => DescribeAclsResponse {
                error_code: errors::INVALID_REQUEST,
                error_message: Some(invalid.0),
                ..Default::default()
            },
        }
    }
}

/// `acls` grouped by resource pattern, as the response carries them.
fn described<'a>(acls: impl Iterator<Item = &'a AclBinding>) -> DescribeAclsResponse {
    let mut by_pattern: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in acls {
        let key = (
            acl.resource_type.code(),
            acl.resource_name.as_str(),
            acl.pattern_type.code(),
        );
        by_pattern.entry(key).or_default().push(AclDescription {
            principal: acl.principal.clone(),
            host: acl.host.clone(),
            operation: acl.operation.code(),
            permission_type: acl.permission.code(),
        });
    }
    DescribeAclsResponse {
        resources: by_pattern
            .into_iter()
            .map(
                |((resource_type, name, pattern_type), acls)| DescribeAclsResource {
                    resource_type,
                    resource_name: name.to_string(),
                    pattern_type,
                    acls,
                },
            )
            .collect(),
        ..Default::default()
    }
}
