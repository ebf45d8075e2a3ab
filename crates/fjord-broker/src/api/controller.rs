//! The controller listener's network shell: raft RPCs between voters, and the Kafka APIs a
//! controller answers — ApiVersions and the controller requests brokers forward (and admin
//! tools may send with `--bootstrap-controller`), each handed to this node's `QuorumController`.
//! A node that is not the active controller answers them NOT_CONTROLLER.

use std::sync::Arc;

use bytes::Bytes;
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_protocol::{decode_request_header, ApiKey, Decoder, RequestBody, ResponseBody};
use fjord_quorum::{is_raft_frame, MetadataQuorum, QuorumController};

use fjord_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use fjord_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};

use crate::api::versions::{api_versions_error, api_versions_of};
use crate::api::{authz, encode_response, Access};
use crate::link::controller::FORWARDING_CLIENT_PREFIX;
use crate::net::{Dispatch, Reply, Response, Sequencing};
use fjord_common::{errors, Requester};
use fjord_metadata::acl::{AclOperation, Authorizer};
use fjord_protocol::messages::api_versions_response::ApiVersionsResponse;

/// The APIs and versions a controller listener answers.
pub const CONTROLLER_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 5),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 1, 2),
    (ApiKey::ControllerRegistration, 0, 0),
    (ApiKey::AddRaftVoter, 0, 1),
    (ApiKey::RemoveRaftVoter, 0, 0),
    // Forwarded by brokers: the cluster's ACLs, SCRAM credentials and client quotas.
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// Answers raft RPCs on any listener that carries them (a controller's controller listener, a
/// learner's inter-broker listener): only to a principal with CLUSTER_ACTION, as Kafka.
pub fn raft_reply(quorum: &Arc<MetadataQuorum>, frame: Bytes, access: &Access) -> Reply {
    if !access.allows_cluster(AclOperation::ClusterAction) {
        return Reply::Close(format!(
            "{} may not take part in the metadata quorum (CLUSTER_ACTION)",
            access.requester().principal
        ));
    }
    let quorum = quorum.clone();
    Reply::Later(Box::pin(async move {
        match quorum.handle_raft_frame(&frame).await {
            Some(body) => Response::Send(Bytes::from(body)),
            None => Response::Close("unreadable raft request".into()),
        }
    }))
}

pub struct ControllerDispatch {
    pub quorum: Arc<MetadataQuorum>,
    /// The ACLs' judge, as on the broker listeners: brokers reach a controller (and voters each
    /// other) as the principal of this listener, which needs CLUSTER_ACTION.
    pub authorizer: Option<Arc<Authorizer>>,
    pub controller: Arc<QuorumController>,
    pub cluster_id: String,
    /// The `kraft.version` ApiVersions reports: 1 for a dynamic quorum.
    pub kraft_version: i16,
}

impl ControllerDispatch {
    /// The answer to a request that is no controller work: ApiVersions, DescribeCluster.
    fn answer_here(&self, body: RequestBody, version: i16) -> ResponseBody {
        match body {
            RequestBody::DescribeCluster(r) => {
                ResponseBody::DescribeCluster(self.describe_cluster(&r))
            }
            RequestBody::ApiVersions(r) => {
                ResponseBody::ApiVersions(match api_versions_error(&r, version, None) {
                    errors::NONE => {
                        api_versions_of(CONTROLLER_APIS, errors::NONE, self.kraft_version)
                    }
                    code => ApiVersionsResponse {
                        error_code: code,
                        ..Default::default()
                    },
                })
            }
            _ => ResponseBody::ApiVersions(api_versions_of(
                CONTROLLER_APIS,
                errors::NONE,
                self.kraft_version,
            )),
        }
    }

    /// DescribeCluster on a controller listener describes the controllers (KIP-919's
    /// `--bootstrap-controller`): every voter on its controller listener, and the active one.
    fn describe_cluster(&self, request: &DescribeClusterRequest) -> DescribeClusterResponse {
        const CONTROLLER: i8 = 2;
        if request.endpoint_type != CONTROLLER {
            return DescribeClusterResponse {
                error_code: errors::MISMATCHED_ENDPOINT_TYPE,
                error_message: Some(
                    "This is a controller endpoint; brokers are not described here.".into(),
                ),
                endpoint_type: request.endpoint_type,
                ..Default::default()
            };
        }
        DescribeClusterResponse {
            error_code: errors::NONE,
            endpoint_type: CONTROLLER,
            cluster_id: self.cluster_id.clone(),
            controller_id: self
                .quorum
                .leader()
                .and_then(|l| i32::try_from(l).ok())
                .unwrap_or(-1),
            // The voters, as the quorum's membership records them.
            brokers: self
                .quorum
                .members()
                .into_iter()
                .filter(|m| m.voter)
                .filter_map(|m| {
                    let (host, port) = m.node.endpoint()?;
                    Some(DescribeClusterBroker {
                        broker_id: m.node_id as i32,
                        host,
                        port: i32::from(port),
                        rack: None,
                        is_fenced: false,
                    })
                })
                .collect(),
            cluster_authorized_operations: i32::MIN,
            ..Default::default()
        }
    }
}

impl Dispatch for ControllerDispatch {
    fn sequencing(&self, _frame: &Bytes) -> Sequencing {
        Sequencing::AfterAll
    }

    fn dispatch(&self, frame: Bytes, requester: &Arc<Requester>) -> Reply {
        let access = Access::new(
            self.authorizer.clone(),
            self.quorum.image(),
            requester.clone(),
        );
        if is_raft_frame(&frame) {
            return raft_reply(&self.quorum, frame, &access);
        }
        let mut input = Decoder::new(frame);
        let header = match decode_request_header(&mut input) {
            Ok(header) => header,
            Err(error) => return Reply::Close(format!("unreadable request header: {error}")),
        };
        let (correlation_id, version) = (header.correlation_id, header.request_api_version);
        let Some(api) = ApiKey::from_i16(header.request_api_key) else {
            return Reply::Close(format!("unknown API key {}", header.request_api_key));
        };
        let supported = CONTROLLER_APIS
            .iter()
            .find(|(key, _, _)| *key == api)
            .is_some_and(|(_, min, max)| (*min..=*max).contains(&version));
        if !supported {
            if api == ApiKey::ApiVersions {
                let body = ResponseBody::ApiVersions(api_versions_of(
                    CONTROLLER_APIS,
                    errors::UNSUPPORTED_VERSION,
                    self.kraft_version,
                ));
                return Reply::Now(encode_response(api, 0, correlation_id, &body));
            }
            return Reply::Close(format!(
                "{} v{version} is not served on a controller listener",
                api.name()
            ));
        }
        let body = match RequestBody::decode(api, &mut input, version) {
            Ok(body) => body,
            Err(error) => {
                return Reply::Close(format!("malformed {} v{version}: {error}", api.name()))
            }
        };
        match authz::refusal(&access, &body, version) {
            Some(authz::Refusal::Answer(refused)) => {
                return Reply::Now(encode_response(api, version, correlation_id, &refused))
            }
            Some(authz::Refusal::Close(reason)) => return Reply::Close(reason),
            None => {}
        }
        let mut api_request = match ControllerApi::from_body(body) {
            Ok(request) => request,
            Err(other) => {
                let body = self.answer_here(*other, version);
                return Reply::Now(encode_response(api, version, correlation_id, &body));
            }
        };
        // A forwarding broker names itself in its client id; anyone else speaks for no broker.
        let forwarder = header
            .client_id
            .as_deref()
            .and_then(|c| c.strip_prefix(FORWARDING_CLIENT_PREFIX))
            .and_then(|id| id.parse().ok())
            .unwrap_or(-1);
        let denied = authz::split_controller(&access, &mut api_request);
        let request = ControllerRequest::new(version, api_request, forwarder);
        let controller = self.controller.clone();
        Reply::Later(Box::pin(async move {
            let mut body = match controller.call(request.clone()).await {
                Ok(body) => body,
                Err(error) => error.response_to(&request),
            };
            denied.restore(&mut body);
            encode_response(api, version, correlation_id, &body)
        }))
    }
}
