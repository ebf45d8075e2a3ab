//! Leader elections asked for, and the preferred-leader balance.
//!
//! ElectLeaders (`kafka-leader-election`) asks, per partition or for every partition, for a
//! preferred election (the first replica leads again, if it is an in-sync replica on an active
//! broker) or an unclean one (a leaderless partition gets the first active in-sync replica,
//! else the first active replica alone, losing what only the old ISR had). A partition that
//! already has what was asked for answers ELECTION_NOT_NEEDED; with every partition asked for,
//! those are left out of the answer, as Kafka's controller leaves them out.
//!
//! With `auto.leader.rebalance.enable`, the active controller checks every
//! `leader.imbalance.check.interval.seconds`: a broker that is the preferred replica of more
//! partitions led elsewhere than `leader.imbalance.per.broker.percentage` percent of those it
//! is preferred for gets each of them back where it is in sync.

use fjord_common::errors;
use fjord_metadata::{
    MetadataImage, MetadataRecord, PartitionChangeRecord, PartitionImage, TopicImage, NO_LEADER,
};
use fjord_protocol::messages::elect_leaders_request::ElectLeadersRequest;
use fjord_protocol::messages::elect_leaders_response::{
    ElectLeadersResponse, PartitionResult, ReplicaElectionResult,
};
use fjord_protocol::ResponseBody;

use crate::decision::{Decision, Working};

/// ElectLeaders' election types, as Kafka numbers them.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// Decides an ElectLeaders request at `version` (v0 knows only preferred elections).
pub fn elect_leaders(
    image: &MetadataImage,
    request: &ElectLeadersRequest,
    version: i16,
) -> Decision {
    let election = if version == 0 {
        PREFERRED
    } else {
        request.election_type
    };
    if election != PREFERRED && election != UNCLEAN {
        return Decision::answer(elect_leaders_refused(errors::INVALID_REQUEST));
    }
    let mut working = Working::new(image);
    let mut results = Vec::new();
    match &request.topic_partitions {
        Some(topics) => {
            for topic in topics {
                let partition_result = topic
                    .partitions
                    .iter()
                    .map(|&id| elect_one(&mut working, &topic.topic, id, election))
                    .collect();
                results.push(ReplicaElectionResult {
                    topic: topic.topic.clone(),
                    partition_result,
                });
            }
        }
        None => {
            let names: Vec<String> = image.topics().map(|t| t.name.clone()).collect();
            for name in names {
                let count = image.topic(&name).map_or(0, |t| t.partitions.len());
                let partition_result = (0..count as i32)
                    .map(|id| elect_one(&mut working, &name, id, election))
                    .filter(|r| r.error_code != errors::ELECTION_NOT_NEEDED)
                    .collect();
                results.push(ReplicaElectionResult {
                    topic: name,
                    partition_result,
                });
            }
        }
    }
    Decision {
        records: working.into_records(),
        response: ResponseBody::ElectLeaders(ElectLeadersResponse {
            replica_election_results: results,
            ..Default::default()
        }),
    }
}

/// ElectLeaders refused as a whole: no partition elected.
pub(crate) fn elect_leaders_refused(error_code: i16) -> ResponseBody {
    ResponseBody::ElectLeaders(ElectLeadersResponse {
        error_code,
        ..Default::default()
    })
}

fn elect_one(
    working: &mut Working,
    topic: &str,
    partition_id: i32,
    election: i8,
) -> PartitionResult {
    let outcome = match working.image().topic(topic) {
        None => Err((
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("no such topic as {topic}"),
        )),
        Some(t) => match usize::try_from(partition_id)
            .ok()
            .and_then(|i| t.partitions.get(i))
        {
            None => Err((
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                format!("no such partition as {topic}-{partition_id}"),
            )),
            Some(p) => {
                let image = working.image();
                let leader = if election == PREFERRED {
                    preferred_leader(image, p)
                } else {
                    unclean_leader(image, p)
                };
                leader.map(|(leader, isr)| change(t, partition_id, leader, isr))
            }
        },
    };
    let (error_code, error_message) = match outcome {
        Ok(record) => {
            working.add(vec![record]);
            (errors::NONE, None)
        }
        Err((code, message)) => (code, Some(message)),
    };
    PartitionResult {
        partition_id,
        error_code,
        error_message,
    }
}

/// Whether broker `id` may lead `p` now: an in-sync replica on an unfenced broker that is not
/// shutting down.
fn may_lead(image: &MetadataImage, p: &PartitionImage, id: i32) -> bool {
    p.isr.contains(&id) && image.broker(id).is_some_and(|b| b.is_active())
}

type Elected = Result<(i32, Option<Vec<i32>>), (i16, String)>;

/// A preferred election: the first replica, if it may lead. A leaderless partition whose
/// preferred replica may not gets the first replica that may, as Kafka's controller does.
fn preferred_leader(image: &MetadataImage, p: &PartitionImage) -> Elected {
    let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
    if p.leader == preferred {
        return Err((
            errors::ELECTION_NOT_NEEDED,
            "the preferred replica leads".into(),
        ));
    }
    if may_lead(image, p, preferred) {
        return Ok((preferred, None));
    }
    if p.leader == NO_LEADER {
        if let Some(id) = p
            .replicas
            .iter()
            .copied()
            .find(|&id| may_lead(image, p, id))
        {
            return Ok((id, None));
        }
    }
    Err((
        errors::PREFERRED_LEADER_NOT_AVAILABLE,
        format!("preferred replica {preferred} is not an active in-sync replica"),
    ))
}

/// An unclean election: only for a leaderless partition; the first in-sync replica that may
/// lead, else the first active replica, alone in the ISR.
fn unclean_leader(image: &MetadataImage, p: &PartitionImage) -> Elected {
    if p.leader != NO_LEADER {
        return Err((
            errors::ELECTION_NOT_NEEDED,
            "the partition has a leader".into(),
        ));
    }
    if let Some(id) = p
        .replicas
        .iter()
        .copied()
        .find(|&id| may_lead(image, p, id))
    {
        return Ok((id, None));
    }
    let active = |id: i32| image.broker(id).is_some_and(|b| b.is_active());
    match p.replicas.iter().copied().find(|&id| active(id)) {
        Some(id) => {
            tracing::warn!(
                leader = id,
                "unclean leader election asked for: records only the old ISR had are lost"
            );
            Ok((id, Some(vec![id])))
        }
        None => Err((
            errors::ELIGIBLE_LEADERS_NOT_AVAILABLE,
            "no replica is on an active broker".into(),
        )),
    }
}

fn change(
    topic: &TopicImage,
    partition_id: i32,
    leader: i32,
    isr: Option<Vec<i32>>,
) -> MetadataRecord {
    MetadataRecord::PartitionChange(PartitionChangeRecord {
        partition_id,
        topic_id: topic.topic_id,
        isr,
        leader: Some(leader),
        replicas: None,
        adding_replicas: None,
        removing_replicas: None,
    })
}

/// The preferred elections the leader balance makes on `image`: for each broker whose share of
/// partitions it prefers but does not lead is above `imbalance_percentage`, every such partition
/// it may lead goes back to it.
pub fn balance_leaders(image: &MetadataImage, imbalance_percentage: i64) -> Vec<MetadataRecord> {
    use std::collections::BTreeMap;
    /// The partitions one broker is the preferred replica of, and those led elsewhere.
    #[derive(Default)]
    struct Preferred<'a> {
        total: i64,
        elsewhere: Vec<(&'a TopicImage, i32, &'a PartitionImage)>,
    }
    let mut by_broker: BTreeMap<i32, Preferred> = BTreeMap::new();
    for topic in image.topics() {
        for (id, p) in (0i32..).zip(&topic.partitions) {
            let Some(&first) = p.replicas.first() else {
                continue;
            };
            let entry = by_broker.entry(first).or_default();
            entry.total += 1;
            if p.leader != first {
                entry.elsewhere.push((topic, id, p));
            }
        }
    }
    let mut records = Vec::new();
    for (broker, preferred) in by_broker {
        // Above the allowed share: elsewhere / total > percentage / 100.
        let share = (preferred.elsewhere.len() as i64).saturating_mul(100);
        if share <= imbalance_percentage.saturating_mul(preferred.total) {
            continue;
        }
        for (topic, id, p) in preferred.elsewhere {
            if may_lead(image, p, broker) {
                records.push(change(topic, id, broker, None));
            }
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Uuid;
    use fjord_metadata::{PartitionRecord, TopicRecord};
    use fjord_protocol::messages::elect_leaders_request::TopicPartitions;

    const T: Uuid = Uuid([7; 16]);

    /// Brokers 1..=3 (broker 3 fenced); topic "t": partition 0 led by 2 (prefers 1, ISR 1,2),
    /// partition 1 led by its preferred 2, partition 2 leaderless (ISR 3, replicas 3,2),
    /// partition 3 led by 2 (prefers 3, fenced).
    fn image() -> MetadataImage {
        let mut records = crate::testing::registered(1..=3, |_| 10, |id| id == 3);
        records.push(MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: T,
        }));
        for (id, replicas, isr, leader) in [
            (0, vec![1, 2], vec![1, 2], 2),
            (1, vec![2, 1], vec![1, 2], 2),
            (2, vec![3, 2], vec![3], NO_LEADER),
            (3, vec![3, 2], vec![2, 3], 2),
        ] {
            records.push(MetadataRecord::Partition(PartitionRecord {
                partition_id: id,
                topic_id: T,
                replicas,
                isr,
                leader,
                leader_epoch: 1,
                partition_epoch: 1,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            }));
        }
        MetadataImage::from_records(1, &records).unwrap()
    }

    fn request(election_type: i8, partitions: Option<Vec<i32>>) -> ElectLeadersRequest {
        ElectLeadersRequest {
            election_type,
            topic_partitions: partitions.map(|partitions| {
                vec![TopicPartitions {
                    topic: "t".into(),
                    partitions,
                }]
            }),
            timeout_ms: 60000,
        }
    }

    fn results(decision: &Decision) -> Vec<(i32, i16)> {
        let ResponseBody::ElectLeaders(r) = &decision.response else {
            panic!("{:?}", decision.response)
        };
        r.replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(|p| (p.partition_id, p.error_code))
            })
            .collect()
    }

    fn leaders(decision: &Decision) -> Vec<(i32, i32, Option<Vec<i32>>)> {
        decision
            .records
            .iter()
            .map(|r| match r {
                MetadataRecord::PartitionChange(c) => {
                    (c.partition_id, c.leader.unwrap(), c.isr.clone())
                }
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn preferred_elections_move_leadership_to_the_first_replica_when_it_may_lead() {
        let d = elect_leaders(&image(), &request(PREFERRED, Some(vec![0, 1, 2, 3, 9])), 2);
        assert_eq!(
            results(&d),
            vec![
                (0, errors::NONE),
                (1, errors::ELECTION_NOT_NEEDED),
                // Leaderless, and no in-sync replica may lead.
                (2, errors::PREFERRED_LEADER_NOT_AVAILABLE),
                // The preferred replica's broker is fenced.
                (3, errors::PREFERRED_LEADER_NOT_AVAILABLE),
                (9, errors::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
        assert_eq!(leaders(&d), vec![(0, 1, None)]);
    }

    #[test]
    fn asking_for_every_partition_leaves_out_those_that_need_nothing() {
        let d = elect_leaders(&image(), &request(PREFERRED, None), 2);
        assert_eq!(
            results(&d),
            vec![
                (0, errors::NONE),
                (2, errors::PREFERRED_LEADER_NOT_AVAILABLE),
                (3, errors::PREFERRED_LEADER_NOT_AVAILABLE)
            ]
        );
    }

    #[test]
    fn unclean_elections_are_for_leaderless_partitions_and_may_pick_an_out_of_sync_replica() {
        let d = elect_leaders(&image(), &request(UNCLEAN, Some(vec![0, 2])), 2);
        assert_eq!(
            results(&d),
            vec![(0, errors::ELECTION_NOT_NEEDED), (2, errors::NONE)]
        );
        // Broker 3, the only ISR member, is fenced: broker 2 leads alone.
        assert_eq!(leaders(&d), vec![(2, 2, Some(vec![2]))]);
    }

    #[test]
    fn version_0_elects_preferred_leaders_and_unknown_types_are_refused() {
        let d = elect_leaders(&image(), &request(UNCLEAN, Some(vec![0])), 0);
        assert_eq!(leaders(&d), vec![(0, 1, None)]);
        let d = elect_leaders(&image(), &request(5, Some(vec![0])), 2);
        let ResponseBody::ElectLeaders(r) = &d.response else {
            panic!()
        };
        assert_eq!(r.error_code, errors::INVALID_REQUEST);
        assert!(d.records.is_empty());
    }

    #[test]
    fn the_balance_moves_leadership_back_only_past_the_allowed_share() {
        // Broker 1 is preferred for partition 0 alone and does not lead it: 100%.
        assert_eq!(balance_leaders(&image(), 10).len(), 1);
        assert_eq!(balance_leaders(&image(), 100).len(), 0);
        // Broker 3 is preferred for two partitions led elsewhere but is fenced: nothing moves.
        let records = balance_leaders(&image(), 0);
        assert_eq!(records.len(), 1);
        let MetadataRecord::PartitionChange(c) = &records[0] else {
            panic!()
        };
        assert_eq!((c.partition_id, c.leader), (0, Some(1)));
    }
}
