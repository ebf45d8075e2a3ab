//! The leader's side of ISR changes: every `CHECK_INTERVAL` each partition this broker leads is
//! asked whether its ISR should shrink (a member not caught up for `replica.lag.time.max.ms`)
//! or expand (a replica that reached the high watermark and this leader's epoch), as Kafka's
//! leaders do; the changes go to the active controller in one AlterPartition, with the leader
//! and partition epochs they were made under. The controller's answer — its view is the truth —
//! is applied at once; the metadata log brings the same to every other broker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, TopicId};
use fjord_config::BrokerConfig;
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_protocol::messages::alter_partition_request::{
    AlterPartitionRequest, BrokerState, PartitionData, TopicData,
};
use fjord_protocol::messages::alter_partition_response;
use fjord_protocol::ResponseBody;
use fjord_quorum::MetadataQuorum;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::link::controller::ControllerLink;
use crate::replication::partition_state::LeaderAndIsr;
use crate::replication::{IsrAnswer, Partition, ReplicaManager};
use fjord_common::now_ms;

/// How often a leader looks at its followers (Kafka checks for shrinking every half lag time;
/// expansion it notices on each fetch).
const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// AlterPartition v3: the new ISR with each member's broker epoch (KIP-903), topics by id.
const ALTER_PARTITION_VERSION: i16 = 3;

pub fn start(
    replicas: Arc<ReplicaManager>,
    quorum: Arc<MetadataQuorum>,
    link: Arc<ControllerLink>,
    config: Arc<BrokerConfig>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let lag_time_max_ms = config.replication().lag_time_max_ms;
        while !*shutdown.borrow() {
            tokio::select! {
                _ = tokio::time::sleep(CHECK_INTERVAL) => {}
                _ = shutdown.changed() => break,
            }
            check(&replicas, &quorum, &link, lag_time_max_ms).await;
        }
    })
}

/// An ISR change a leader proposes, with the leadership it was made under.
type Proposal = (Arc<Partition>, LeaderAndIsr);

/// One check of every led partition, and the changes due sent in one request.
async fn check(
    replicas: &ReplicaManager,
    quorum: &MetadataQuorum,
    link: &ControllerLink,
    lag_time_max_ms: i64,
) {
    let image = quorum.image();
    let local = replicas.node_id();
    let Some(broker_epoch) = image.broker(local).map(|b| b.broker_epoch) else {
        return;
    };
    let eligible = |id: i32| {
        image
            .broker(id)
            .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
    };
    let now = now_ms();
    let mut proposed: Vec<Proposal> = Vec::new();
    // Each proposal's ISR size before it: the metadata log may bring the change before the
    // controller's answer does.
    let mut sizes_before = Vec::new();
    for partition in replicas.all() {
        if !partition.is_leader() {
            continue;
        }
        let before = partition.isr_and_replica_count().0.len();
        if let Some(change) = partition.propose_isr_change(now, lag_time_max_ms, eligible) {
            tracing::info!(tp = %partition.tp, isr = ?change.isr, "asking the controller to change the ISR");
            proposed.push((partition, change));
            sizes_before.push(before);
        }
    }
    if proposed.is_empty() {
        return;
    }
    let request = ControllerRequest::new(
        ALTER_PARTITION_VERSION,
        ControllerApi::AlterPartition(AlterPartitionRequest {
            broker_id: local,
            broker_epoch,
            topics: alter_partition_topics(&proposed, local, broker_epoch),
        }),
        local,
    );
    let (mut answers, otherwise) = answers_of(link.call(request).await, &proposed);
    let now = now_ms();
    for ((partition, _), before) in proposed.iter().zip(sizes_before) {
        let answer = answers
            .remove(&(partition.topic_id, partition.tp.partition))
            .unwrap_or(match otherwise {
                IsrAnswer::Refused => IsrAnswer::Refused,
                _ => IsrAnswer::Unknown,
            });
        if let IsrAnswer::Committed(leadership) = &answer {
            let counter = &replicas.metrics().replication;
            match leadership.isr.len().cmp(&before) {
                std::cmp::Ordering::Less => counter.isr_shrinks.inc(),
                std::cmp::Ordering::Greater => counter.isr_expands.inc(),
                std::cmp::Ordering::Equal => 0,
            };
        }
        partition.isr_change_answered(answer, now);
    }
}

/// The proposals as AlterPartition's topics: each new ISR member at the broker epoch it
/// fetched with (KIP-903), so a broker that restarted since is not taken in on its
/// predecessor's position.
fn alter_partition_topics(proposed: &[Proposal], local: i32, broker_epoch: i64) -> Vec<TopicData> {
    let mut topics: Vec<TopicData> = Vec::new();
    for (partition, change) in proposed {
        let entry = PartitionData {
            partition_index: partition.tp.partition,
            leader_epoch: change.leader_epoch,
            partition_epoch: change.partition_epoch,
            new_isr_with_epochs: change
                .isr
                .iter()
                .map(|&broker_id| BrokerState {
                    broker_id,
                    broker_epoch: if broker_id == local {
                        broker_epoch
                    } else {
                        partition.follower_broker_epoch(broker_id)
                    },
                })
                .collect(),
            ..Default::default()
        };
        match topics.iter_mut().find(|t| t.topic_id == partition.topic_id) {
            Some(t) => t.partitions.push(entry),
            None => topics.push(TopicData {
                topic_id: partition.topic_id,
                partitions: vec![entry],
            }),
        }
    }
    topics
}

/// What the controller's answer says of each proposal, and of those it does not answer for:
/// without an answer the outcome is unknown (a commit that timed out may still land); a stale
/// broker epoch refuses them all.
fn answers_of(
    answer: Result<ResponseBody, fjord_controller::ControllerError>,
    proposed: &[Proposal],
) -> (HashMap<(TopicId, i32), IsrAnswer>, IsrAnswer) {
    let mut answers = HashMap::new();
    match answer {
        Ok(ResponseBody::AlterPartition(r)) if r.error_code == errors::NONE => {
            for topic in &r.topics {
                for p in &topic.partitions {
                    let Some((asked_of, asked)) = proposed.iter().find(|(q, _)| {
                        q.topic_id == topic.topic_id && q.tp.partition == p.partition_index
                    }) else {
                        continue;
                    };
                    if p.error_code != errors::NONE {
                        tracing::info!(tp = %asked_of.tp,
                            error = errors::name(p.error_code), "the controller refused an ISR change");
                    }
                    answers.insert((topic.topic_id, p.partition_index), answer_for(p, asked));
                }
            }
        }
        Ok(ResponseBody::AlterPartition(r)) => {
            tracing::warn!(
                error = errors::name(r.error_code),
                "the controller refused the ISR changes"
            );
            if r.error_code == errors::STALE_BROKER_EPOCH {
                return (answers, IsrAnswer::Refused);
            }
        }
        Ok(_) => tracing::warn!("the controller answered AlterPartition with another API"),
        Err(error) => tracing::warn!(%error, "ISR changes not answered; asking again"),
    }
    (answers, IsrAnswer::Unknown)
}

/// One partition's outcome in the controller's AlterPartition answer.
fn answer_for(p: &alter_partition_response::PartitionData, asked: &LeaderAndIsr) -> IsrAnswer {
    match p.error_code {
        errors::NONE => IsrAnswer::Committed(LeaderAndIsr {
            leader: p.leader_id,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: asked.replicas.clone(),
            isr: p.isr.clone(),
        }),
        errors::NOT_CONTROLLER | errors::REQUEST_TIMED_OUT => IsrAnswer::Unknown,
        // A reassignment that completed without this broker among the replicas elected another
        // leader.
        errors::INVALID_UPDATE_VERSION
        | errors::NEW_LEADER_ELECTED
        | errors::FENCED_LEADER_EPOCH
        | errors::UNKNOWN_TOPIC_ID
        | errors::UNKNOWN_TOPIC_OR_PARTITION => IsrAnswer::AwaitMetadata,
        _ => IsrAnswer::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::partition::tests::test_partition;
    use fjord_common::TopicPartition;
    use fjord_protocol::messages::alter_partition_response::{
        AlterPartitionResponse, PartitionData as Answered, TopicData as AnsweredTopic,
    };

    fn leadership(isr: &[i32]) -> LeaderAndIsr {
        LeaderAndIsr {
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 7,
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
        }
    }

    fn proposal(dir: &std::path::Path, index: i32, isr: &[i32]) -> Proposal {
        let partition = test_partition(
            dir,
            TopicPartition::new("t", index),
            false,
            1,
            leadership(&[1, 2, 3]),
        );
        (partition, leadership(isr))
    }

    #[test]
    fn proposals_go_in_one_request_each_member_at_its_broker_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let proposed = vec![
            proposal(dir.path(), 0, &[1, 2]),
            proposal(dir.path(), 1, &[1]),
        ];
        let topics = alter_partition_topics(&proposed, 1, 42);
        // Both partitions are of one topic (its id).
        assert_eq!(topics.len(), 1);
        let partitions = &topics[0].partitions;
        assert_eq!(partitions.len(), 2);
        assert_eq!(
            (partitions[0].leader_epoch, partitions[0].partition_epoch),
            (4, 7)
        );
        let members: Vec<(i32, i64)> = partitions[0]
            .new_isr_with_epochs
            .iter()
            .map(|m| (m.broker_id, m.broker_epoch))
            .collect();
        // The leader at its own epoch; a follower it has not heard fetch at -1 (unknown).
        assert_eq!(members, [(1, 42), (2, -1)]);
    }

    #[test]
    fn each_answer_says_what_becomes_of_its_proposal() {
        let dir = tempfile::tempdir().unwrap();
        let proposed = vec![
            proposal(dir.path(), 0, &[1, 2]),
            proposal(dir.path(), 1, &[1]),
            proposal(dir.path(), 2, &[1]),
        ];
        let topic_id = proposed[0].0.topic_id;
        let answered = |partition_index, error_code, isr: Vec<i32>| Answered {
            partition_index,
            error_code,
            leader_id: 1,
            leader_epoch: 4,
            partition_epoch: 8,
            isr,
            ..Default::default()
        };
        let response = AlterPartitionResponse {
            error_code: errors::NONE,
            topics: vec![AnsweredTopic {
                topic_id,
                partitions: vec![
                    answered(0, errors::NONE, vec![1, 2]),
                    answered(1, errors::FENCED_LEADER_EPOCH, vec![]),
                ],
            }],
            ..Default::default()
        };
        let (answers, otherwise) =
            answers_of(Ok(ResponseBody::AlterPartition(response)), &proposed);
        match &answers[&(topic_id, 0)] {
            IsrAnswer::Committed(now) => {
                assert_eq!((now.isr.clone(), now.partition_epoch), (vec![1, 2], 8));
                assert_eq!(now.replicas, vec![1, 2, 3], "the replicas asked under");
            }
            _ => panic!("a committed change"),
        }
        assert!(matches!(answers[&(topic_id, 1)], IsrAnswer::AwaitMetadata));
        // Not answered for: unknown, asked again.
        assert!(!answers.contains_key(&(topic_id, 2)));
        assert!(matches!(otherwise, IsrAnswer::Unknown));
        // A stale broker epoch refuses every proposal; no answer at all leaves them unknown.
        let stale = AlterPartitionResponse {
            error_code: errors::STALE_BROKER_EPOCH,
            ..Default::default()
        };
        let (answers, otherwise) = answers_of(Ok(ResponseBody::AlterPartition(stale)), &proposed);
        assert!(answers.is_empty() && matches!(otherwise, IsrAnswer::Refused));
        let lost = Err(fjord_controller::ControllerError::NotController { leader: None });
        let (answers, otherwise) = answers_of(lost, &proposed);
        assert!(answers.is_empty() && matches!(otherwise, IsrAnswer::Unknown));
    }
}
