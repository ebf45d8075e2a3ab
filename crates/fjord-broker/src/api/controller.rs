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
use crate::link::controller::{ENVELOPE_VERSION, FORWARDING_CLIENT_PREFIX};
use crate::link::envelope;
use crate::net::{Dispatch, Reply, Response, Sequencing};
use fjord_common::{errors, Requester};
use fjord_metadata::acl::{AclOperation, Authorizer};
use fjord_protocol::messages::api_versions_response::ApiVersionsResponse;
use fjord_protocol::messages::envelope_response::EnvelopeResponse;

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
    (ApiKey::CreateDelegationToken, 1, 3),
    (ApiKey::RenewDelegationToken, 1, 2),
    (ApiKey::ExpireDelegationToken, 1, 2),
    // A client's request a broker forwards comes in an Envelope naming the client.
    (ApiKey::Envelope, 0, 0),
];

/// The requests an Envelope may carry: every controller request a broker takes from clients
/// and forwards (the quorum's admin requests too), never the brokers' own (registration,
/// heartbeats, AlterPartition, producer ids).
const FORWARDED_APIS: &[ApiKey] = &[
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::ElectLeaders,
    ApiKey::AlterPartitionReassignments,
    ApiKey::ListPartitionReassignments,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AlterConfigs,
    ApiKey::AlterUserScramCredentials,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::AlterClientQuotas,
    ApiKey::CreateDelegationToken,
    ApiKey::RenewDelegationToken,
    ApiKey::ExpireDelegationToken,
    ApiKey::DescribeQuorum,
    ApiKey::AddRaftVoter,
    ApiKey::RemoveRaftVoter,
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
        let client_id = header.client_id.as_deref();
        let answer = match body {
            RequestBody::Envelope(envelope) => {
                return self.open_envelope(envelope, &access, correlation_id)
            }
            body => self.answer(body, version, client_id, &access),
        };
        match answer {
            Answer::Now(body) => Reply::Now(encode_response(api, version, correlation_id, &body)),
            Answer::Later(future) => Reply::Later(Box::pin(async move {
                encode_response(api, version, correlation_id, &future.await)
            })),
            Answer::Close(reason) => Reply::Close(reason),
        }
    }
}

/// A controller listener's answer to one request.
enum Answer {
    Now(ResponseBody),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = ResponseBody> + Send>>),
    Close(String),
}

impl ControllerDispatch {
    /// The answer to `body` from `access`'s requester: the connection's, or the client an
    /// Envelope names.
    fn answer(
        &self,
        body: RequestBody,
        version: i16,
        client_id: Option<&str>,
        access: &Access,
    ) -> Answer {
        match authz::refusal(access, &body, version) {
            Some(authz::Refusal::Answer(refused)) => return Answer::Now(refused),
            Some(authz::Refusal::Close(reason)) => return Answer::Close(reason),
            None => {}
        }
        let mut api_request = match ControllerApi::from_body(body) {
            Ok(request) => request,
            Err(other) => return Answer::Now(self.answer_here(*other, version)),
        };
        if let Some(refused) = crate::api::tokens::refusal(access, &api_request, version) {
            return Answer::Now(refused);
        }
        // A forwarding broker names itself in its client id; anyone else speaks for no broker.
        let forwarder = client_id
            .and_then(|c| c.strip_prefix(FORWARDING_CLIENT_PREFIX))
            .and_then(|id| id.parse().ok())
            .unwrap_or(-1);
        let denied = authz::split_controller(access, &mut api_request);
        // Token requests are decided for whoever asks.
        let client = Some(access.requester().clone());
        let request = ControllerRequest::new(version, api_request, forwarder).on_behalf_of(client);
        let controller = self.controller.clone();
        Answer::Later(Box::pin(async move {
            let mut body = match controller.call(request.clone()).await {
                Ok(body) => body,
                Err(error) => error.response_to(&request),
            };
            denied.restore(&mut body);
            body
        }))
    }

    /// An Envelope (a broker forwarding a client's request): only from a principal with
    /// CLUSTER_ACTION, as Kafka; the request inside is judged and decided as its client's.
    fn open_envelope(
        &self,
        envelope: fjord_protocol::messages::envelope_request::EnvelopeRequest,
        access: &Access,
        correlation_id: i32,
    ) -> Reply {
        let sealed = |response: EnvelopeResponse| {
            Reply::Now(encode_response(
                ApiKey::Envelope,
                ENVELOPE_VERSION,
                correlation_id,
                &ResponseBody::Envelope(response),
            ))
        };
        if !access.allows_cluster(AclOperation::ClusterAction) {
            return sealed(EnvelopeResponse {
                response_data: None,
                error_code: errors::CLUSTER_AUTHORIZATION_FAILED,
            });
        }
        let (header, body, client) = match envelope::open(envelope) {
            Ok(opened) => opened,
            Err(reason) => {
                tracing::warn!(%reason, "unreadable Envelope");
                return sealed(EnvelopeResponse {
                    response_data: None,
                    error_code: errors::INVALID_REQUEST,
                });
            }
        };
        let api = body.api_key();
        let version = header.request_api_version;
        let served = CONTROLLER_APIS
            .iter()
            .any(|(key, min, max)| *key == api && (*min..=*max).contains(&version));
        if !served || !FORWARDED_APIS.contains(&api) {
            return sealed(EnvelopeResponse {
                response_data: None,
                error_code: errors::INVALID_REQUEST,
            });
        }
        let inner = Access::new(
            self.authorizer.clone(),
            self.quorum.image(),
            Arc::new(client),
        );
        let inner_id = header.correlation_id;
        let seal = move |body: &ResponseBody| -> Response {
            match encode_response(api, version, inner_id, body) {
                Response::Send(bytes) => encode_response(
                    ApiKey::Envelope,
                    ENVELOPE_VERSION,
                    correlation_id,
                    &ResponseBody::Envelope(envelope::seal(bytes)),
                ),
                other => other,
            }
        };
        match self.answer(body, version, header.client_id.as_deref(), &inner) {
            Answer::Now(body) => Reply::Now(seal(&body)),
            Answer::Later(future) => Reply::Later(Box::pin(async move { seal(&future.await) })),
            Answer::Close(reason) => Reply::Close(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker forwards every controller request its clients may send in an Envelope: the
    /// controller must open each (a request it refused would fail for every client but the
    /// active controller's own).
    #[test]
    fn every_controller_request_a_broker_serves_clients_may_come_in_an_envelope() {
        // Answered by the broker itself, never forwarded.
        let own = [
            ApiKey::ApiVersions,
            ApiKey::DescribeCluster,
            ApiKey::Envelope,
        ];
        for (api, _, _) in crate::api::versions::SUPPORTED_APIS {
            let controller_serves = CONTROLLER_APIS.iter().any(|(a, _, _)| a == api);
            if controller_serves && !own.contains(api) {
                assert!(
                    FORWARDED_APIS.contains(api),
                    "{api:?} is forwarded but refused in an Envelope"
                );
            }
        }
    }
}
