//! CreateAcls and DeleteAcls (`kafka-acls --add` / `--remove`): the controller checks each ACL
//! as Kafka's does, gives each new one a fresh id and commits an ACL record per change; an ACL
//! that already exists is answered as created without a second record. A deletion filter
//! removes every ACL it matches, all of a request's filters committed together.

use std::collections::BTreeSet;

use fjord_common::errors;
use fjord_common::TopicId;
use fjord_metadata::acl::{AclBinding, AclFilter, InvalidAcl, ResourceType, CLUSTER_NAME};
use fjord_metadata::{
    AccessControlEntryRecord, MetadataImage, MetadataRecord, RemoveAccessControlEntryRecord,
};
use fjord_protocol::messages::create_acls_request::CreateAclsRequest;
use fjord_protocol::messages::create_acls_response::{AclCreationResult, CreateAclsResponse};
use fjord_protocol::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use fjord_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse,
};
use fjord_protocol::messages::ResponseBody;

use crate::decision::Decision;

/// The most records one request may commit, as Kafka bounds a user's operation.
const MAX_RECORDS_PER_REQUEST: usize = 10_000;

/// The ACL records for `request` and one result per creation, in request order.
pub(crate) fn create_acls(
    image: &MetadataImage,
    request: &CreateAclsRequest,
    new_id: &mut dyn FnMut() -> TopicId,
) -> Decision {
    let mut records = Vec::new();
    let mut added: BTreeSet<AclBinding> = BTreeSet::new();
    let mut results = Vec::with_capacity(request.creations.len());
    for c in &request.creations {
        let acl = AclBinding::from_wire(
            c.resource_type,
            &c.resource_name,
            c.resource_pattern_type,
            &c.principal,
            &c.host,
            c.operation,
            c.permission_type,
        )
        .and_then(|acl| {
            if acl.resource_type == ResourceType::Cluster && acl.resource_name != CLUSTER_NAME {
                return Err(InvalidAcl(format!(
                    "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
                )));
            }
            Ok(acl)
        });
        let result = match acl {
            Err(invalid) => AclCreationResult {
                error_code: errors::INVALID_REQUEST,
                error_message: Some(invalid.0),
            },
            Ok(acl) => {
                if !image.acls().contains(&acl) && !added.contains(&acl) {
                    let mut id = new_id();
                    while image.acls().get(&id).is_some() {
                        id = new_id();
                    }
                    records.push(MetadataRecord::AccessControlEntry(
                        AccessControlEntryRecord::new(id, &acl),
                    ));
                    added.insert(acl);
                }
                AclCreationResult::default()
            }
        };
        results.push(result);
    }
    if records.len() > MAX_RECORDS_PER_REQUEST {
        return Decision::answer(create_acls_refused(
            request,
            errors::INVALID_REQUEST,
            Some(format!(
                "Cannot create more than {MAX_RECORDS_PER_REQUEST} acls in a single request"
            )),
        ));
    }
    Decision {
        records,
        response: ResponseBody::CreateAcls(CreateAclsResponse {
            results,
            ..Default::default()
        }),
    }
}

/// The removal records for every ACL `request`'s filters match, and what each filter matched.
pub(crate) fn delete_acls(image: &MetadataImage, request: &DeleteAclsRequest) -> Decision {
    let mut removed = BTreeSet::new();
    let mut filter_results = Vec::with_capacity(request.filters.len());
    for f in &request.filters {
        let result = match filter(f) {
            Err(invalid) => DeleteAclsFilterResult {
                error_code: errors::INVALID_REQUEST,
                error_message: Some(invalid.0),
                ..Default::default()
            },
            Ok(filter) => {
                let mut matching_acls = Vec::new();
                for (id, acl) in image.acls().iter().filter(|(_, acl)| filter.matches(acl)) {
                    removed.insert(*id);
                    matching_acls.push(matching(acl));
                }
                DeleteAclsFilterResult {
                    matching_acls,
                    ..Default::default()
                }
            }
        };
        filter_results.push(result);
    }
    if removed.len() > MAX_RECORDS_PER_REQUEST {
        let message = format!(
            "Cannot remove more than {MAX_RECORDS_PER_REQUEST} acls in a single delete operation."
        );
        return Decision::answer(delete_acls_refused(
            request,
            errors::INVALID_REQUEST,
            Some(message),
        ));
    }
    let records = removed
        .into_iter()
        .map(|id| MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id }))
        .collect();
    Decision {
        records,
        response: ResponseBody::DeleteAcls(DeleteAclsResponse {
            filter_results,
            ..Default::default()
        }),
    }
}

/// A DeleteAcls filter, or why it is refused.
fn filter(f: &DeleteAclsFilter) -> Result<AclFilter, InvalidAcl> {
    AclFilter::from_wire(
        f.resource_type_filter,
        f.resource_name_filter.as_deref(),
        f.pattern_type_filter,
        f.principal_filter.as_deref(),
        f.host_filter.as_deref(),
        f.operation,
        f.permission_type,
    )
}

fn matching(acl: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        resource_type: acl.resource_type.code(),
        resource_name: acl.resource_name.clone(),
        pattern_type: acl.pattern_type.code(),
        principal: acl.principal.clone(),
        host: acl.host.clone(),
        operation: acl.operation.code(),
        permission_type: acl.permission.code(),
        ..Default::default()
    }
}

/// Every creation of `request` refused with `error_code`.
pub(crate) fn create_acls_refused(
    request: &CreateAclsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    let result = AclCreationResult {
        error_code,
        error_message,
    };
    ResponseBody::CreateAcls(CreateAclsResponse {
        results: vec![result; request.creations.len()],
        ..Default::default()
    })
}

/// Every filter of `request` refused with `error_code`.
pub(crate) fn delete_acls_refused(
    request: &DeleteAclsRequest,
    error_code: i16,
    error_message: Option<String>,
) -> ResponseBody {
    let result = DeleteAclsFilterResult {
        error_code,
        error_message,
        ..Default::default()
    };
    ResponseBody::DeleteAcls(DeleteAclsResponse {
        filter_results: vec![result; request.filters.len()],
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Uuid;
    use fjord_metadata::MetadataDelta;
    use fjord_protocol::messages::create_acls_request::AclCreation;

    fn creation(name: &str, principal: &str, operation: i8) -> AclCreation {
        AclCreation {
            resource_type: 2,
            resource_name: name.into(),
            resource_pattern_type: 3,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission_type: 3,
        }
    }

    fn ids() -> impl FnMut() -> TopicId {
        let mut next = 0u8;
        move || {
            next += 1;
            Uuid([next; 16])
        }
    }

    fn commit(image: &MetadataImage, decision: &Decision) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for r in &decision.records {
            delta.apply(r).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    #[test]
    fn acls_are_created_once_and_invalid_ones_refused_alone() {
        let request = CreateAclsRequest {
            creations: vec![
                creation("orders", "User:alice", 3),
                creation("orders", "User:alice", 3),
                creation("orders", "alice", 3),
                creation("", "User:alice", 3),
                AclCreation {
                    resource_type: 4,
                    ..creation("my-cluster", "User:alice", 7)
                },
            ],
        };
        let mut new_id = ids();
        let decision = create_acls(&MetadataImage::empty(), &request, &mut new_id);
        assert_eq!(decision.records.len(), 1);
        let ResponseBody::CreateAcls(response) = &decision.response else {
            panic!("{:?}", decision.response)
        };
        let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
        let invalid = errors::INVALID_REQUEST;
        assert_eq!(codes, [0, 0, invalid, invalid, invalid]);
        let image = commit(&MetadataImage::empty(), &decision);
        // Created again: answered, nothing new to commit.
        assert!(create_acls(&image, &request, &mut new_id)
            .records
            .is_empty());
    }

    #[test]
    fn a_filter_deletes_every_acl_it_matches() {
        let request = CreateAclsRequest {
            creations: vec![
                creation("orders", "User:alice", 3),
                creation("orders", "User:bob", 4),
                creation("payments", "User:alice", 3),
            ],
        };
        let image = commit(
            &MetadataImage::empty(),
            &create_acls(&MetadataImage::empty(), &request, &mut ids()),
        );
        let delete = DeleteAclsRequest {
            filters: vec![
                DeleteAclsFilter {
                    resource_type_filter: 1,
                    resource_name_filter: None,
                    pattern_type_filter: 1,
                    principal_filter: Some("User:alice".into()),
                    host_filter: None,
                    operation: 1,
                    permission_type: 1,
                },
                DeleteAclsFilter {
                    resource_type_filter: 0,
                    ..Default::default()
                },
            ],
        };
        let decision = delete_acls(&image, &delete);
        let ResponseBody::DeleteAcls(response) = &decision.response else {
            panic!("{:?}", decision.response)
        };
        assert_eq!(response.filter_results[0].matching_acls.len(), 2);
        assert_eq!(
            response.filter_results[1].error_code,
            errors::INVALID_REQUEST
        );
        let image = commit(&image, &decision);
        let left: Vec<&str> = image
            .acls()
            .iter()
            .map(|(_, a)| a.principal.as_str())
            .collect();
        assert_eq!(left, ["User:bob"]);
    }
}
