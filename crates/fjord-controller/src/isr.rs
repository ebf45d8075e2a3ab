//! AlterPartition: a partition's leader asks to shrink or expand its ISR, and the controller's
//! view is the truth. The request names the leader epoch and partition epoch the leader last
//! saw; a request made on anything older is refused (FENCED_LEADER_EPOCH,
//! INVALID_UPDATE_VERSION), so a deposed leader, or a change raced by another, cannot take
//! effect. The new ISR must hold the leader and only replicas, each a broker that is
//! registered, unfenced and not shutting down, at the broker epoch the leader saw it fetch
//! with (KIP-903; INELIGIBLE_REPLICA otherwise). An accepted change is one
//! `PartitionChangeRecord` (the partition epoch moves by one) and is answered with the
//! partition's new state.

use fjord_common::errors;
use fjord_metadata::{
    MetadataImage, MetadataRecord, PartitionChangeRecord, PartitionImage, TopicImage,
};
use fjord_protocol::messages::alter_partition_request::{
    AlterPartitionRequest, PartitionData as RequestPartition,
};
use fjord_protocol::messages::alter_partition_response::{
    AlterPartitionResponse, PartitionData, TopicData,
};
use fjord_protocol::ResponseBody;

use crate::decision::Decision;
use crate::reassignment::Completed;

/// Decides an AlterPartition request at `version` on `image`.
pub fn alter_partition(
    image: &MetadataImage,
    request: &AlterPartitionRequest,
    version: i16,
) -> Decision {
    let registered = image
        .broker(request.broker_id)
        .is_some_and(|b| b.broker_epoch == request.broker_epoch);
    if !registered {
        return Decision::answer(alter_partition_refused(errors::STALE_BROKER_EPOCH));
    }
    let mut records = Vec::new();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let found = image.topic_by_id(&topic.topic_id);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| match found {
                Some(found) => alter_one(image, request.broker_id, version, found, p, &mut records),
                None => refused(p.partition_index, errors::UNKNOWN_TOPIC_ID),
            })
            .collect();
        topics.push(TopicData {
            topic_id: topic.topic_id,
            partitions,
        });
    }
    Decision {
        records,
        response: ResponseBody::AlterPartition(AlterPartitionResponse {
            error_code: errors::NONE,
            topics,
            ..Default::default()
        }),
    }
}

/// AlterPartition refused as a whole (a requester not at its current broker epoch): no
/// partitions answered.
pub(crate) fn alter_partition_refused(error_code: i16) -> ResponseBody {
    ResponseBody::AlterPartition(AlterPartitionResponse {
        error_code,
        ..Default::default()
    })
}

/// One partition's ISR change from `requester`, decided on `topic`: the answer, and the record an
/// accepted change takes, added to `records`. A reassignment whose target replicas are then all
/// in sync completes in that record; if that removes the requester, it is answered as no longer
/// the leader.
fn alter_one(
    image: &MetadataImage,
    requester: i32,
    version: i16,
    topic: &TopicImage,
    p: &RequestPartition,
    records: &mut Vec<MetadataRecord>,
) -> PartitionData {
    let current = usize::try_from(p.partition_index)
        .ok()
        .and_then(|i| topic.partitions.get(i));
    let Some(current) = current else {
        return refused(p.partition_index, errors::UNKNOWN_TOPIC_OR_PARTITION);
    };
    let new_isr = requested_isr(p, version);
    if let Err(code) = check(image, requester, current, p, &new_isr) {
        return refused(p.partition_index, code);
    }
    let isr: Vec<i32> = new_isr.iter().map(|(id, _)| *id).collect();
    // A reassignment whose target replicas are now all in sync completes here.
    let completed = current
        .is_reassigning()
        .then(|| {
            crate::reassignment::completes(
                image,
                current,
                &current.replicas,
                &current.removing_replicas,
                &isr,
            )
        })
        .flatten();
    let (isr, partition_epoch) = match completed {
        Some(done) => {
            records.push(isr_change(topic, p.partition_index, &done.isr, Some(&done)));
            if done.leader.is_some() {
                // The requester was removed: it leads no more.
                let code = if version > 1 {
                    errors::NEW_LEADER_ELECTED
                } else {
                    errors::FENCED_LEADER_EPOCH
                };
                return refused(p.partition_index, code);
            }
            (done.isr, current.partition_epoch + 1)
        }
        None if isr != current.isr => {
            records.push(isr_change(topic, p.partition_index, &isr, None));
            (isr, current.partition_epoch + 1)
        }
        None => (isr, current.partition_epoch),
    };
    PartitionData {
        partition_index: p.partition_index,
        error_code: errors::NONE,
        leader_id: current.leader,
        leader_epoch: current.leader_epoch,
        isr,
        leader_recovery_state: 0,
        partition_epoch,
    }
}

/// The record of an accepted ISR change: the new ISR and, when it completes a reassignment, the
/// target replicas, the new leader if the old one was removed, and nothing left to add or remove.
fn isr_change(
    topic: &TopicImage,
    partition_id: i32,
    isr: &[i32],
    completed: Option<&Completed>,
) -> MetadataRecord {
    MetadataRecord::PartitionChange(PartitionChangeRecord {
        partition_id,
        topic_id: topic.topic_id,
        isr: Some(isr.to_vec()),
        leader: completed.and_then(|c| c.leader),
        replicas: completed.map(|c| c.replicas.clone()),
        adding_replicas: completed.map(|_| Vec::new()),
        removing_replicas: completed.map(|_| Vec::new()),
    })
}

/// The new ISR with each member's broker epoch (-1: not given, before v3).
fn requested_isr(p: &RequestPartition, version: i16) -> Vec<(i32, i64)> {
    if version >= 3 {
        p.new_isr_with_epochs
            .iter()
            .map(|b| (b.broker_id, b.broker_epoch))
            .collect()
    } else {
        p.new_isr.iter().map(|id| (*id, -1)).collect()
    }
}

fn check(
    image: &MetadataImage,
    requester: i32,
    current: &PartitionImage,
    p: &RequestPartition,
    new_isr: &[(i32, i64)],
) -> Result<(), i16> {
    // The controller behind the leader's view (it has not applied what the leader saw).
    if p.leader_epoch > current.leader_epoch || p.partition_epoch > current.partition_epoch {
        return Err(errors::NOT_CONTROLLER);
    }
    if p.leader_epoch < current.leader_epoch {
        return Err(errors::FENCED_LEADER_EPOCH);
    }
    if p.partition_epoch < current.partition_epoch {
        return Err(errors::INVALID_UPDATE_VERSION);
    }
    if current.leader != requester {
        return Err(errors::INVALID_REQUEST);
    }
    if p.leader_recovery_state != 0 {
        return Err(errors::INVALID_REQUEST);
    }
    let mut seen = Vec::with_capacity(new_isr.len());
    for &(id, _) in new_isr {
        if seen.contains(&id) || !current.replicas.contains(&id) {
            return Err(errors::INVALID_REQUEST);
        }
        seen.push(id);
    }
    if !seen.contains(&current.leader) {
        return Err(errors::INVALID_REQUEST);
    }
    for &(id, epoch) in new_isr {
        // Every member: a live broker, at the broker epoch the leader saw it fetch with (a
        // broker that restarted since, perhaps on an empty disk, is not taken in).
        let eligible = image.broker(id).is_some_and(|b| {
            !b.fenced && !b.in_controlled_shutdown && (epoch == -1 || epoch == b.broker_epoch)
        });
        if !eligible {
            return Err(errors::INELIGIBLE_REPLICA);
        }
    }
    Ok(())
}

fn refused(partition_index: i32, error_code: i16) -> PartitionData {
    PartitionData {
        partition_index,
        error_code,
        leader_id: -1,
        leader_epoch: -1,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Uuid;
    use fjord_metadata::{MetadataDelta, PartitionRecord, TopicRecord};
    use fjord_protocol::messages::alter_partition_request::{
        BrokerState, TopicData as RequestTopic,
    };

    const T: Uuid = Uuid([9; 16]);

    fn image() -> MetadataImage {
        let mut records = crate::testing::registered(1..=3, |id| i64::from(id) * 10, |id| id == 3);
        records.push(MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: T,
        }));
        records.push(MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: T,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 7,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }));
        MetadataImage::from_records(1, &records).unwrap()
    }

    fn request(
        broker: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: &[(i32, i64)],
    ) -> AlterPartitionRequest {
        AlterPartitionRequest {
            broker_id: broker,
            broker_epoch: i64::from(broker) * 10,
            topics: vec![RequestTopic {
                topic_id: T,
                partitions: vec![RequestPartition {
                    partition_index: 0,
                    leader_epoch,
                    partition_epoch,
                    new_isr_with_epochs: isr
                        .iter()
                        .map(|&(broker_id, broker_epoch)| BrokerState {
                            broker_id,
                            broker_epoch,
                        })
                        .collect(),
                    ..Default::default()
                }],
            }],
        }
    }

    fn outcome(decision: &Decision) -> &PartitionData {
        let ResponseBody::AlterPartition(r) = &decision.response else {
            panic!("{:?}", decision.response)
        };
        &r.topics[0].partitions[0]
    }

    #[test]
    fn a_leader_shrinks_its_isr_and_the_partition_epoch_moves() {
        let image = image();
        let d = alter_partition(&image, &request(1, 4, 7, &[(1, 10)]), 3);
        assert_eq!(outcome(&d).error_code, errors::NONE);
        assert_eq!(outcome(&d).isr, vec![1]);
        assert_eq!(outcome(&d).partition_epoch, 8);
        let mut delta = MetadataDelta::new(&image);
        for r in &d.records {
            delta.apply(r).unwrap();
        }
        let after = delta.finish(2);
        let p = &after.topic("t").unwrap().partitions[0];
        assert_eq!(
            (p.isr.clone(), p.partition_epoch, p.leader_epoch),
            (vec![1], 8, 4)
        );
    }

    #[test]
    fn stale_or_foreign_requests_are_refused() {
        let image = image();
        let code = |r: AlterPartitionRequest| outcome(&alter_partition(&image, &r, 3)).error_code;
        assert_eq!(
            code(request(1, 3, 7, &[(1, 10)])),
            errors::FENCED_LEADER_EPOCH
        );
        assert_eq!(
            code(request(1, 4, 6, &[(1, 10)])),
            errors::INVALID_UPDATE_VERSION
        );
        assert_eq!(code(request(1, 5, 7, &[(1, 10)])), errors::NOT_CONTROLLER);
        assert_eq!(
            code(request(2, 4, 7, &[(2, 20)])),
            errors::INVALID_REQUEST,
            "not the leader"
        );
        assert_eq!(
            code(request(1, 4, 7, &[(2, 20)])),
            errors::INVALID_REQUEST,
            "without the leader"
        );
        assert_eq!(
            code(request(1, 4, 7, &[(1, 10), (4, 40)])),
            errors::INVALID_REQUEST,
            "not a replica"
        );
        // Broker 3 is fenced; broker 2 joins only at the epoch it fetched with.
        assert_eq!(
            code(request(1, 4, 7, &[(1, 10), (2, 20), (3, 30)])),
            errors::INELIGIBLE_REPLICA
        );
        let mut stale = request(1, 4, 7, &[(1, 10)]);
        stale.broker_epoch = 9;
        let ResponseBody::AlterPartition(r) = alter_partition(&image, &stale, 3).response else {
            panic!()
        };
        assert_eq!(r.error_code, errors::STALE_BROKER_EPOCH);
    }

    #[test]
    fn an_unchanged_isr_writes_nothing() {
        let d = alter_partition(&image(), &request(1, 4, 7, &[(1, 10), (2, 20)]), 3);
        assert!(d.records.is_empty());
        assert_eq!(outcome(&d).partition_epoch, 7);
    }
}
