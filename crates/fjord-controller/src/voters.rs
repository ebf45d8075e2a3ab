//! The members of a dynamic metadata quorum (KIP-853), changed on the active controller:
//! AddRaftVoter, RemoveRaftVoter (`kafka-metadata-quorum add-controller / remove-controller`,
//! or a controller with `controller.quorum.auto.join.enable`) and ControllerRegistration (a
//! controller that is not a member follows the log as a learner). They change the quorum's
//! membership, not the image, so they are checked here ([`voter_change`], sans-IO) and carried
//! out by the quorum (`fjord_quorum::QuorumController`) outside the controller's queue: a voter
//! catching up must not hold up the brokers' heartbeats. The answer once carried out is
//! [`voter_change_answer`], or [`crate::error_response`] for a failure.

use fjord_common::errors;
use fjord_config::BrokerConfig;
use fjord_metadata::{QuorumMember, QuorumNode};
use fjord_protocol::messages::add_raft_voter_request::AddRaftVoterRequest;
use fjord_protocol::messages::controller_registration_request::ControllerRegistrationRequest;
use fjord_protocol::messages::remove_raft_voter_request::RemoveRaftVoterRequest;

pub use crate::apis::voter_change_answer;
use crate::apis::ControllerApi;

/// What a request asks of the quorum's membership, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoterChange {
    Add {
        id: u64,
        node: QuorumNode,
    },
    Remove {
        id: u64,
    },
    /// A controller that is not a member yet follows the log as a learner.
    Learner {
        id: u64,
        node: QuorumNode,
    },
    /// Already so.
    Nothing,
}

/// Whether `api` changes the quorum's membership (and is therefore not decided on the image).
pub fn is_voter_change(api: &ControllerApi) -> bool {
    matches!(
        api,
        ControllerApi::AddRaftVoter(_)
            | ControllerApi::RemoveRaftVoter(_)
            | ControllerApi::ControllerRegistration(_)
    )
}

/// A refusal: the Kafka error and its message.
pub type Refusal = (i16, String);

/// Checks a membership request against this cluster and its current `members`, as Kafka's
/// leader does: the cluster id must be this one's, the quorum dynamic, the new voter reachable on
/// the controller listener and not a voter yet, the removed one a voter with that directory id.
pub fn voter_change(
    config: &BrokerConfig,
    cluster_id: &str,
    api: &ControllerApi,
    members: &[QuorumMember],
) -> Result<VoterChange, Refusal> {
    let listener = config
        .cluster
        .controller_listener_names
        .first()
        .map(String::as_str)
        .unwrap_or("CONTROLLER");
    match api {
        ControllerApi::AddRaftVoter(r) => {
            may_change_voters(config, cluster_id, &r.cluster_id, "adding")?;
            add_voter(r, members, listener)
        }
        ControllerApi::RemoveRaftVoter(r) => {
            may_change_voters(config, cluster_id, &r.cluster_id, "removing")?;
            remove_voter(r, members)
        }
        ControllerApi::ControllerRegistration(r) => register_controller(r, members, listener),
        _ => Ok(VoterChange::Nothing),
    }
}

/// Whether the voters may be changed (`what`: adding or removing) by a request naming the cluster
/// `theirs`: it must be this cluster, when named, and the quorum dynamic — a static quorum's
/// voters are fixed by `controller.quorum.voters`.
fn may_change_voters(
    config: &BrokerConfig,
    cluster_id: &str,
    theirs: &Option<String>,
    what: &str,
) -> Result<(), Refusal> {
    if let Some(id) = theirs.as_deref().filter(|id| *id != cluster_id) {
        return Err((
            errors::INCONSISTENT_CLUSTER_ID,
            format!(
                "The cluster id {id} in the request does not match this cluster's {cluster_id}"
            ),
        ));
    }
    if !config.cluster.voters.is_empty() {
        return Err((
            errors::UNSUPPORTED_VERSION,
            format!("Cluster doesn't support {what} voter because the kraft.version feature is 0: its voters are fixed by controller.quorum.voters"),
        ));
    }
    Ok(())
}

/// AddRaftVoter: a node that is not a voter yet, reached on its `listener` endpoint.
fn add_voter(
    r: &AddRaftVoterRequest,
    members: &[QuorumMember],
    listener: &str,
) -> Result<VoterChange, Refusal> {
    let id = node_id(r.voter_id, "voter")?;
    if voter(members, id).is_some() {
        return Err((
            errors::DUPLICATE_VOTER,
            format!(
                "The voter id for {id} is already part of the set of voters [{}].",
                voter_ids(members)
            ),
        ));
    }
    let endpoints = r.listeners.iter().map(|l| (&l.name, &l.host, l.port));
    Ok(VoterChange::Add {
        id,
        node: QuorumNode {
            addr: controller_endpoint(endpoints, listener)?,
            directory_id: Some(r.voter_directory_id),
            broker: false,
        },
    })
}

/// RemoveRaftVoter: a voter with that directory id (when the quorum knows it), not the last one.
fn remove_voter(
    r: &RemoveRaftVoterRequest,
    members: &[QuorumMember],
) -> Result<VoterChange, Refusal> {
    let found = u64::try_from(r.voter_id)
        .ok()
        .and_then(|id| voter(members, id))
        .filter(|m| {
            m.node
                .directory_id
                .is_none_or(|dir| dir == r.voter_directory_id)
        });
    let Some(member) = found else {
        return Err((
            errors::VOTER_NOT_FOUND,
            format!(
                "Cannot remove voter {}-{} from the set of voters [{}]",
                r.voter_id,
                r.voter_directory_id,
                voter_ids(members)
            ),
        ));
    };
    if members.iter().filter(|m| m.voter).count() == 1 {
        return Err((
            errors::INVALID_REQUEST,
            format!(
                "Cannot remove voter {}: it is the quorum's last voter",
                r.voter_id
            ),
        ));
    }
    Ok(VoterChange::Remove { id: member.node_id })
}

/// ControllerRegistration: a controller that is not a member follows the log as a learner,
/// reached on its `listener` endpoint; a voter stays as it is, a learner is reached where it now
/// says it listens.
fn register_controller(
    r: &ControllerRegistrationRequest,
    members: &[QuorumMember],
    listener: &str,
) -> Result<VoterChange, Refusal> {
    let id = node_id(r.controller_id, "controller")?;
    let endpoints = r.listeners.iter().map(|l| (&l.name, &l.host, l.port));
    let addr = controller_endpoint(endpoints, listener)?;
    let known = members
        .iter()
        .any(|m| m.node_id == id && (m.voter || m.node.addr == addr));
    if known {
        return Ok(VoterChange::Nothing);
    }
    Ok(VoterChange::Learner {
        id,
        node: QuorumNode::new(addr),
    })
}

/// A request's node id (`kind`: voter or controller) as the quorum numbers nodes.
fn node_id(id: i32, kind: &str) -> Result<u64, Refusal> {
    u64::try_from(id).map_err(|_| (errors::INVALID_REQUEST, format!("invalid {kind} id {id}")))
}

/// The voter `id` among `members`.
fn voter(members: &[QuorumMember], id: u64) -> Option<&QuorumMember> {
    members.iter().find(|m| m.node_id == id && m.voter)
}

/// The voters' ids, as Kafka lists them in a refusal.
fn voter_ids(members: &[QuorumMember]) -> String {
    members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.node_id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `host:port` of the listener named `listener` among a request's `endpoints` (name, host,
/// port): where the leader reaches that controller.
fn controller_endpoint<'a>(
    mut endpoints: impl Iterator<Item = (&'a String, &'a String, u16)>,
    listener: &str,
) -> Result<String, Refusal> {
    endpoints
        .find(|(name, _, _)| *name == listener)
        .map(|(_, host, port)| fjord_common::host_port(host, port))
        .ok_or_else(|| {
            (
                errors::INVALID_REQUEST,
                format!("Provided listeners do not contain a listener for {listener}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fjord_common::Uuid;
    use fjord_protocol::messages::add_raft_voter_request::{AddRaftVoterRequest, Listener};
    use fjord_protocol::messages::remove_raft_voter_request::RemoveRaftVoterRequest;

    use super::*;

    fn config(quorum: (&str, &str)) -> BrokerConfig {
        let props: BTreeMap<String, String> = [
            quorum,
            ("controller.listener.names", "CONTROLLER"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        BrokerConfig::from_properties(&props).unwrap().0
    }

    fn dynamic() -> BrokerConfig {
        config(("controller.quorum.bootstrap.servers", "127.0.0.1:9093"))
    }

    fn member(id: u64, voter: bool) -> QuorumMember {
        QuorumMember {
            node_id: id,
            node: QuorumNode {
                addr: format!("127.0.0.1:{}", 9000 + id),
                directory_id: Some(Uuid([id as u8; 16])),
                broker: false,
            },
            voter,
        }
    }

    fn add(id: i32, cluster: Option<&str>, listener: &str) -> ControllerApi {
        ControllerApi::AddRaftVoter(AddRaftVoterRequest {
            cluster_id: cluster.map(str::to_string),
            timeout_ms: 1000,
            voter_id: id,
            voter_directory_id: Uuid([id as u8; 16]),
            listeners: vec![Listener {
                name: listener.into(),
                host: "127.0.0.1".into(),
                port: 9500,
            }],
            ack_when_committed: true,
        })
    }

    fn remove(id: i32, dir: u8) -> ControllerApi {
        ControllerApi::RemoveRaftVoter(RemoveRaftVoterRequest {
            cluster_id: Some("c".into()),
            voter_id: id,
            voter_directory_id: Uuid([dir; 16]),
        })
    }

    fn refusal(result: Result<VoterChange, (i16, String)>) -> i16 {
        result.unwrap_err().0
    }

    #[test]
    fn voters_are_added_and_removed_only_as_kafkas_leader_allows() {
        let members = [member(1, true), member(2, true), member(3, false)];
        let check = |api: &ControllerApi| voter_change(&dynamic(), "c", api, &members);
        assert_eq!(
            check(&add(3, Some("c"), "CONTROLLER")).unwrap(),
            VoterChange::Add {
                id: 3,
                node: QuorumNode {
                    addr: "127.0.0.1:9500".into(),
                    directory_id: Some(Uuid([3; 16])),
                    broker: false,
                },
            }
        );
        assert_eq!(
            refusal(check(&add(3, Some("other"), "CONTROLLER"))),
            errors::INCONSISTENT_CLUSTER_ID
        );
        assert_eq!(
            refusal(check(&add(2, None, "CONTROLLER"))),
            errors::DUPLICATE_VOTER
        );
        assert_eq!(
            refusal(check(&add(3, None, "PLAINTEXT"))),
            errors::INVALID_REQUEST
        );
        assert_eq!(check(&remove(2, 2)).unwrap(), VoterChange::Remove { id: 2 });
        // Another directory id, or a learner, is not a voter to remove.
        assert_eq!(refusal(check(&remove(2, 9))), errors::VOTER_NOT_FOUND);
        assert_eq!(refusal(check(&remove(3, 3))), errors::VOTER_NOT_FOUND);
        // The last voter stays.
        let alone = [member(1, true)];
        assert_eq!(
            refusal(voter_change(&dynamic(), "c", &remove(1, 1), &alone)),
            errors::INVALID_REQUEST
        );
        // A static quorum's voters are fixed.
        let fixed = config(("controller.quorum.voters", "1@127.0.0.1:9093"));
        assert_eq!(
            refusal(voter_change(
                &fixed,
                "c",
                &add(3, None, "CONTROLLER"),
                &members
            )),
            errors::UNSUPPORTED_VERSION
        );
    }
}
