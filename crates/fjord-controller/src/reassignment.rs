//! Partition reassignment (KIP-455), sans-IO: AlterPartitionReassignments and
//! ListPartitionReassignments (`kafka-reassign-partitions`).
//!
//! A reassignment to target replicas T of a partition whose replicas are R writes one
//! `PartitionChangeRecord`: replicas T followed by those of R it drops, adding T \ R, removing
//! R \ T. The brokers added start as followers and fetch; once every replica of T is in the ISR
//! (counting none of those being removed), the reassignment completes in the record that made
//! it so — replicas T, the ISR without the removed, adding and removing cleared, and a new
//! leader from T if the old one was removed. One that only drops or reorders replicas
//! completes at once. Cancelling (no target) goes back to the replicas before the
//! reassignment, dropping those it added from the ISR; if that would leave it empty, only a
//! topic allowing unclean elections may.

use fjord_common::errors;
use fjord_metadata::{
    MetadataImage, MetadataRecord, PartitionChangeRecord, PartitionImage, TopicImage, NO_LEADER,
};
use fjord_protocol::messages::alter_partition_reassignments_request::AlterPartitionReassignmentsRequest;
use fjord_protocol::messages::alter_partition_reassignments_response::{
    AlterPartitionReassignmentsResponse, ReassignablePartitionResponse, ReassignableTopicResponse,
};
use fjord_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsRequest;
use fjord_protocol::messages::list_partition_reassignments_response::{
    ListPartitionReassignmentsResponse, OngoingPartitionReassignment, OngoingTopicReassignment,
};
use fjord_protocol::ResponseBody;

use crate::decision::{Decision, Working};
use crate::membership::Unclean;

/// What a partition becomes once its reassignment completes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completed {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// A new leader when the old one is not among the target replicas in sync.
    pub leader: Option<i32>,
}

/// Whether the reassignment of `p` (replicas, adding, removing) completes with ISR `isr`: every
/// target replica is in the ISR, and some member is not being removed.
pub(crate) fn completes(
    image: &MetadataImage,
    p: &PartitionImage,
    replicas: &[i32],
    removing: &[i32],
    isr: &[i32],
) -> Option<Completed> {
    let target: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|r| !removing.contains(r))
        .collect();
    let new_isr: Vec<i32> = isr
        .iter()
        .copied()
        .filter(|r| !removing.contains(r))
        .collect();
    if target.is_empty() || new_isr.is_empty() || !target.iter().all(|r| new_isr.contains(r)) {
        return None;
    }
    let leader = new_leader(image, p, &target, &new_isr);
    Some(Completed {
        replicas: target,
        isr: new_isr,
        leader,
    })
}

/// A new leader for `p` when its leader is not in `isr` (or it has none): the first of `replicas`
/// in `isr` on an active broker, else NO_LEADER. None when the leader stays.
fn new_leader(
    image: &MetadataImage,
    p: &PartitionImage,
    replicas: &[i32],
    isr: &[i32],
) -> Option<i32> {
    if p.leader != NO_LEADER && isr.contains(&p.leader) {
        return None;
    }
    let active = |id: i32| image.broker(id).is_some_and(|b| b.is_active());
    Some(
        replicas
            .iter()
            .copied()
            .find(|&id| isr.contains(&id) && active(id))
            .unwrap_or(NO_LEADER),
    )
}

/// Decides AlterPartitionReassignments on `image`.
pub fn alter_partition_reassignments(
    image: &MetadataImage,
    request: &AlterPartitionReassignmentsRequest,
    unclean: Unclean,
) -> Decision {
    let mut working = Working::new(image);
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let outcome = reassign(
                    working.image(),
                    &topic.name,
                    p.partition_index,
                    p.replicas.as_deref(),
                    request.allow_replication_factor_change,
                    unclean,
                );
                let (error_code, error_message) = match outcome {
                    Ok(record) => {
                        working.add(record.into_iter().collect());
                        (errors::NONE, None)
                    }
                    Err((code, message)) => (code, Some(message)),
                };
                ReassignablePartitionResponse {
                    partition_index: p.partition_index,
                    error_code,
                    error_message,
                }
            })
            .collect();
        responses.push(ReassignableTopicResponse {
            name: topic.name.clone(),
            partitions,
        });
    }
    Decision {
        records: working.into_records(),
        response: ResponseBody::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
            responses,
            allow_replication_factor_change: request.allow_replication_factor_change,
            ..Default::default()
        }),
    }
}

type Refusal = (i16, String);

/// What a partition's reassignment fields become: replicas, ISR, a new leader if it changes, and
/// the replicas being added and removed (none once the reassignment is over).
struct Reassigned {
    replicas: Vec<i32>,
    isr: Vec<i32>,
    leader: Option<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

impl From<Completed> for Reassigned {
    fn from(done: Completed) -> Self {
        Reassigned {
            replicas: done.replicas,
            isr: done.isr,
            leader: done.leader,
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }
}

/// The record that starts (or completes, or cancels) one partition's reassignment; None when
/// nothing changes.
fn reassign(
    image: &MetadataImage,
    topic_name: &str,
    partition_id: i32,
    target: Option<&[i32]>,
    allow_replication_factor_change: bool,
    unclean: Unclean,
) -> Result<Option<MetadataRecord>, Refusal> {
    let (topic, p) = partition(image, topic_name, partition_id)?;
    let next = match target {
        None => cancel(image, topic_name, partition_id, p, unclean)?,
        Some(target) => {
            if !allow_replication_factor_change {
                keeps_replication_factor(p, target)?;
            }
            validate(image, target)?;
            start(image, p, target)
        }
    };
    Ok(change_record(topic, partition_id, p, next))
}

/// The topic and partition a reassignment names (UNKNOWN_TOPIC_OR_PARTITION if there is none).
fn partition<'a>(
    image: &'a MetadataImage,
    topic_name: &str,
    partition_id: i32,
) -> Result<(&'a TopicImage, &'a PartitionImage), Refusal> {
    let unknown = || {
        (
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no partition {topic_name}-{partition_id}"),
        )
    };
    let topic = image.topic(topic_name).ok_or_else(unknown)?;
    let p = usize::try_from(partition_id)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .ok_or_else(unknown)?;
    Ok((topic, p))
}

/// The record that takes partition `p` to `next`, carrying replicas and ISR only where they
/// change; None when nothing does.
fn change_record(
    topic: &TopicImage,
    partition_id: i32,
    p: &PartitionImage,
    next: Reassigned,
) -> Option<MetadataRecord> {
    let changed = next.replicas != p.replicas
        || next.isr != p.isr
        || next.leader.is_some()
        || next.adding != p.adding_replicas
        || next.removing != p.removing_replicas;
    changed.then(|| {
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id,
            topic_id: topic.topic_id,
            isr: (next.isr != p.isr).then_some(next.isr),
            leader: next.leader,
            replicas: (next.replicas != p.replicas).then_some(next.replicas),
            adding_replicas: Some(next.adding),
            removing_replicas: Some(next.removing),
        })
    })
}

/// Cancelling a reassignment: back to the replicas before it, the ones it added dropped from the
/// ISR. If that leaves the ISR empty, only a topic allowing unclean elections may: the first
/// original replica is then the ISR.
fn cancel(
    image: &MetadataImage,
    topic_name: &str,
    partition_id: i32,
    p: &PartitionImage,
    unclean: Unclean,
) -> Result<Reassigned, Refusal> {
    if !p.is_reassigning() {
        return Err((
            errors::NO_REASSIGNMENT_IN_PROGRESS,
            format!("no reassignment of {topic_name}-{partition_id} is in progress"),
        ));
    }
    let original: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding_replicas.contains(r))
        .collect();
    let mut isr: Vec<i32> = p
        .isr
        .iter()
        .copied()
        .filter(|r| !p.adding_replicas.contains(r))
        .collect();
    if isr.is_empty() {
        if !unclean(topic_name) {
            return Err((
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!("cancelling the reassignment of {topic_name}-{partition_id} would need an unclean leader election"),
            ));
        }
        isr = original.first().copied().into_iter().collect();
    }
    let leader = new_leader(image, p, &original, &isr);
    Ok(Reassigned {
        replicas: original,
        isr,
        leader,
        adding: Vec::new(),
        removing: Vec::new(),
    })
}

/// KIP-860: without `allow_replication_factor_change`, the target must keep the replication
/// factor the partition has, or is heading for when a reassignment is in progress (its replicas
/// without those being removed).
fn keeps_replication_factor(p: &PartitionImage, target: &[i32]) -> Result<(), Refusal> {
    let current = p
        .replicas
        .iter()
        .filter(|r| !p.removing_replicas.contains(r))
        .count();
    if current != target.len() {
        return Err((
            errors::INVALID_REPLICATION_FACTOR,
            format!(
                "The replication factor is changed from {current} to {}",
                target.len()
            ),
        ));
    }
    Ok(())
}

/// A reassignment to `target`, from the replicas as they are now (a reassignment in progress
/// included): replicas `target` then those it drops, adding and removing the difference — or,
/// when the ISR already holds every target replica, the reassignment completed at once.
fn start(image: &MetadataImage, p: &PartitionImage, target: &[i32]) -> Reassigned {
    let mut removing: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|id| !target.contains(id))
        .collect();
    removing.sort_unstable();
    let mut adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|id| !p.replicas.contains(id))
        .collect();
    adding.sort_unstable();
    let replicas: Vec<i32> = target
        .iter()
        .copied()
        .chain(removing.iter().copied())
        .collect();
    match completes(image, p, &replicas, &removing, &p.isr) {
        Some(done) => done.into(),
        None => Reassigned {
            replicas,
            isr: p.isr.clone(),
            leader: None,
            adding,
            removing,
        },
    }
}

/// A target assignment: replicas, distinct, each a registered broker (as for CreateTopics).
fn validate(image: &MetadataImage, target: &[i32]) -> Result<(), Refusal> {
    let registered: Vec<crate::placement::UsableBroker> = image
        .brokers()
        .map(|b| crate::placement::UsableBroker {
            id: b.broker_id,
            rack: b.rack.clone(),
            fenced: b.fenced,
        })
        .collect();
    crate::plan::check_assignment(target, &registered)
        .map_err(|refusal| (refusal.error_code, refusal.message))
}

/// Answers ListPartitionReassignments from `image`: the partitions asked for (every one, with no
/// topics given) that have a reassignment in progress.
pub fn list_partition_reassignments(
    image: &MetadataImage,
    request: &ListPartitionReassignmentsRequest,
) -> Decision {
    let ongoing = |p: &PartitionImage, partition_index: i32| OngoingPartitionReassignment {
        partition_index,
        replicas: p.replicas.clone(),
        adding_replicas: p.adding_replicas.clone(),
        removing_replicas: p.removing_replicas.clone(),
    };
    let mut topics = Vec::new();
    match &request.topics {
        None => {
            for topic in image.topics() {
                let partitions: Vec<_> = (0i32..)
                    .zip(&topic.partitions)
                    .filter(|(_, p)| p.is_reassigning())
                    .map(|(id, p)| ongoing(p, id))
                    .collect();
                if !partitions.is_empty() {
                    topics.push(OngoingTopicReassignment {
                        name: topic.name.clone(),
                        partitions,
                    });
                }
            }
        }
        Some(asked) => {
            for t in asked {
                let Some(topic) = image.topic(&t.name) else {
                    continue;
                };
                let partitions: Vec<_> = t
                    .partition_indexes
                    .iter()
                    .filter_map(|&id| {
                        let p = topic.partitions.get(usize::try_from(id).ok()?)?;
                        p.is_reassigning().then(|| ongoing(p, id))
                    })
                    .collect();
                if !partitions.is_empty() {
                    topics.push(OngoingTopicReassignment {
                        name: t.name.clone(),
                        partitions,
                    });
                }
            }
        }
    }
    Decision {
        records: Vec::new(),
        response: ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
            topics,
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Uuid;
    use fjord_metadata::{MetadataDelta, PartitionRecord, TopicRecord};
    use fjord_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };

    const T: Uuid = Uuid([5; 16]);

    /// Brokers 1..=4 registered and active; "t"-0 on 1,2,3 led by 1, all in sync.
    fn image() -> MetadataImage {
        let mut records = crate::testing::registered(1..=4, |_| 10, |_| false);
        records.push(MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: T,
        }));
        records.push(MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: T,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }));
        MetadataImage::from_records(1, &records).unwrap()
    }

    fn alter(image: &MetadataImage, replicas: Option<Vec<i32>>) -> (MetadataImage, i16) {
        alter_allowing(image, replicas, true)
    }

    fn alter_allowing(
        image: &MetadataImage,
        replicas: Option<Vec<i32>>,
        allow_replication_factor_change: bool,
    ) -> (MetadataImage, i16) {
        let request = AlterPartitionReassignmentsRequest {
            allow_replication_factor_change,
            timeout_ms: 1000,
            topics: vec![ReassignableTopic {
                name: "t".into(),
                partitions: vec![ReassignablePartition {
                    partition_index: 0,
                    replicas,
                }],
            }],
        };
        let d = alter_partition_reassignments(image, &request, &|_| false);
        let ResponseBody::AlterPartitionReassignments(r) = &d.response else {
            panic!()
        };
        (
            apply(image, &d.records),
            r.responses[0].partitions[0].error_code,
        )
    }

    fn apply(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for r in records {
            delta.apply(r).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    fn partition(image: &MetadataImage) -> PartitionImage {
        image.topic("t").unwrap().partitions[0].clone()
    }

    #[test]
    fn a_reassignment_that_may_not_change_the_replication_factor_keeps_it() {
        for target in [vec![1, 2], vec![1, 2, 3, 4]] {
            let (after, code) = alter_allowing(&image(), Some(target), false);
            assert_eq!(code, errors::INVALID_REPLICATION_FACTOR);
            assert_eq!(partition(&after), partition(&image()), "nothing written");
        }
        // A move keeping three replicas is let through; while it is in progress, the factor
        // compared is the one it heads for (three), not the four replicas it has for now.
        let (moving, code) = alter_allowing(&image(), Some(vec![2, 3, 4]), false);
        assert_eq!(code, errors::NONE);
        assert_eq!(partition(&moving).replicas.len(), 4);
        let (_, code) = alter_allowing(&moving, Some(vec![1, 2, 4]), false);
        assert_eq!(code, errors::NONE);
        let (_, code) = alter_allowing(&moving, Some(vec![1, 2, 3, 4]), false);
        assert_eq!(code, errors::INVALID_REPLICATION_FACTOR);
        // Cancelling changes no factor of its own: always allowed.
        let (_, code) = alter_allowing(&moving, None, false);
        assert_eq!(code, errors::NONE);
    }

    #[test]
    fn adding_a_replica_waits_for_it_in_the_isr_and_then_drops_the_removed_leader() {
        let (after, code) = alter(&image(), Some(vec![2, 3, 4]));
        assert_eq!(code, errors::NONE);
        let p = partition(&after);
        assert_eq!(p.replicas, vec![2, 3, 4, 1]);
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            p.leader, 1,
            "the leader stays until the reassignment completes"
        );
        // Not complete while 4 is out of the ISR.
        assert!(completes(&after, &p, &p.replicas, &p.removing_replicas, &[1, 2, 3]).is_none());
        let done = completes(&after, &p, &p.replicas, &p.removing_replicas, &[1, 2, 3, 4]).unwrap();
        assert_eq!(
            done,
            Completed {
                replicas: vec![2, 3, 4],
                isr: vec![2, 3, 4],
                leader: Some(2)
            }
        );
        let listed = list_partition_reassignments(
            &after,
            &ListPartitionReassignmentsRequest {
                timeout_ms: 1000,
                topics: None,
            },
        );
        let ResponseBody::ListPartitionReassignments(r) = &listed.response else {
            panic!()
        };
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].partitions[0].adding_replicas, vec![4]);
    }

    #[test]
    fn dropping_or_reordering_replicas_completes_at_once() {
        let (after, code) = alter(&image(), Some(vec![3, 2]));
        assert_eq!(code, errors::NONE);
        let p = partition(&after);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![3, 2], vec![2, 3], 3)
        );
        assert!(!p.is_reassigning());
        // The same target again changes nothing.
        let (again, code) = alter(&after, Some(vec![3, 2]));
        assert_eq!(code, errors::NONE);
        assert_eq!(partition(&again).partition_epoch, p.partition_epoch);
    }

    #[test]
    fn cancelling_goes_back_to_the_replicas_before() {
        let (started, _) = alter(&image(), Some(vec![2, 3, 4]));
        let (cancelled, code) = alter(&started, None);
        assert_eq!(code, errors::NONE);
        let p = partition(&cancelled);
        // The replicas before, in the order the reassignment left them (as Kafka's controller does).
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![2, 3, 1], vec![1, 2, 3], 1)
        );
        assert!(!p.is_reassigning());
        let (_, code) = alter(&cancelled, None);
        assert_eq!(code, errors::NO_REASSIGNMENT_IN_PROGRESS);
    }

    #[test]
    fn targets_must_be_distinct_registered_brokers() {
        for bad in [vec![], vec![1, 1], vec![1, 9]] {
            let (_, code) = alter(&image(), Some(bad.clone()));
            assert_eq!(code, errors::INVALID_REPLICA_ASSIGNMENT, "{bad:?}");
        }
    }
}
