//! Broker membership, sans-IO: the brokers' heartbeat sessions on the active controller, the
//! broker states a heartbeat moves between (Kafka's fenced → unfenced → controlled shutdown →
//! shut down), and the partition leader elections each move causes. Time is passed in.
//!
//! Sessions live only in the active controller's memory, as in KRaft: a controller that becomes
//! active gives every unfenced broker a fresh session ([`BrokerSessions::activate`]), so a
//! failover never fences a live broker.

use std::collections::HashMap;

use fjord_common::errors;
use fjord_metadata::{
    BrokerRegistrationChangeRecord, MetadataImage, MetadataRecord, PartitionChangeRecord, NO_LEADER,
};
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_heartbeat_response::BrokerHeartbeatResponse;
use fjord_protocol::messages::ResponseBody;

use crate::decision::Decision;

/// One broker's session: the registration (epoch) it belongs to, when it was last heard from and
/// how far it had applied the metadata log then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Session {
    broker_epoch: i64,
    last_contact_ms: i64,
    /// The metadata offset of its last heartbeat; -1 before one.
    metadata_offset: i64,
    /// In controlled shutdown with nothing left to lead: the image offset by which its
    /// leadership had moved away. It is let go once every active broker has applied that far.
    shutdown_offset: Option<u64>,
}

/// The heartbeat sessions of the registered brokers, on the active controller.
#[derive(Debug, Clone)]
pub struct BrokerSessions {
    session_timeout_ms: i64,
    sessions: HashMap<i32, Session>,
}

impl BrokerSessions {
    pub fn new(session_timeout_ms: i64) -> Self {
        BrokerSessions {
            session_timeout_ms,
            sessions: HashMap::new(),
        }
    }

    /// This controller became active at `now_ms`: every unfenced broker gets a whole session
    /// from now (it may have heartbeated to the previous controller a moment ago).
    pub fn activate(&mut self, image: &MetadataImage, now_ms: i64) {
        self.sessions = image
            .brokers()
            .filter(|b| !b.fenced)
            .map(|b| {
                (
                    b.broker_id,
                    Session {
                        broker_epoch: b.broker_epoch,
                        last_contact_ms: now_ms,
                        metadata_offset: -1,
                        shutdown_offset: None,
                    },
                )
            })
            .collect();
    }

    /// Whether the broker `broker_id` as `image` registers it is alive: unfenced and heard from
    /// within the session timeout. A second process registering that id is refused meanwhile.
    pub fn has_valid_session(&self, image: &MetadataImage, broker_id: i32, now_ms: i64) -> bool {
        let Some(registration) = image.broker(broker_id) else {
            return false;
        };
        !registration.fenced
            && self.sessions.get(&broker_id).is_some_and(|s| {
                s.broker_epoch == registration.broker_epoch
                    && now_ms - s.last_contact_ms <= self.session_timeout_ms
            })
    }

    fn touch(&mut self, broker_id: i32, broker_epoch: i64, now_ms: i64, metadata_offset: i64) {
        let session = self.sessions.entry(broker_id).or_insert(Session {
            broker_epoch,
            last_contact_ms: now_ms,
            metadata_offset,
            shutdown_offset: None,
        });
        if session.broker_epoch != broker_epoch {
            session.broker_epoch = broker_epoch;
            session.shutdown_offset = None;
        }
        session.last_contact_ms = now_ms;
        session.metadata_offset = metadata_offset;
    }

    /// A registration starts the broker's session (it is fenced until it heartbeats caught up).
    pub fn registered(&mut self, broker_id: i32, broker_epoch: i64, now_ms: i64) {
        self.touch(broker_id, broker_epoch, now_ms, -1);
    }

    /// Whether every active broker but `broker_id` (unfenced, not shutting down) has reported
    /// applying the metadata log up to `offset`: then they all know where `broker_id`'s
    /// leadership went, and it may go (Kafka's lowest active offset).
    fn others_applied(&self, image: &MetadataImage, broker_id: i32, offset: u64) -> bool {
        image
            .brokers()
            .filter(|b| b.broker_id != broker_id && !b.fenced && !b.in_controlled_shutdown)
            .all(|b| {
                self.sessions.get(&b.broker_id).is_some_and(|s| {
                    s.broker_epoch == b.broker_epoch
                        && u64::try_from(s.metadata_offset).is_ok_and(|o| o >= offset)
                })
            })
    }

    /// The offset `broker_id`, in controlled shutdown and leading nothing, waits for the others
    /// to apply: the image's when this is first seen.
    fn shutdown_offset(&mut self, image: &MetadataImage, broker_id: i32) -> u64 {
        match self.sessions.get_mut(&broker_id) {
            Some(s) => *s.shutdown_offset.get_or_insert(image.offset()),
            None => image.offset(),
        }
    }

    /// The unfenced broker whose session expired longest ago, if any: fenced one at a time, so
    /// that each fencing's elections see the previous one's.
    pub fn stale_broker(&self, image: &MetadataImage, now_ms: i64) -> Option<i32> {
        image
            .brokers()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let last = self
                    .sessions
                    .get(&b.broker_id)
                    .filter(|s| s.broker_epoch == b.broker_epoch)
                    .map_or(i64::MIN, |s| s.last_contact_ms);
                (now_ms.saturating_sub(last) > self.session_timeout_ms)
                    .then_some((last, b.broker_id))
            })
            .min()
            .map(|(_, id)| id)
    }

    /// The milliseconds until the next session of an unfenced broker could expire (at most the
    /// session timeout).
    pub fn next_expiry_in(&self, image: &MetadataImage, now_ms: i64) -> i64 {
        image
            .brokers()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                self.sessions
                    .get(&b.broker_id)
                    .filter(|s| s.broker_epoch == b.broker_epoch)
            })
            .map(|s| s.last_contact_ms + self.session_timeout_ms - now_ms)
            .min()
            .unwrap_or(self.session_timeout_ms)
            .clamp(0, self.session_timeout_ms)
    }

    /// A fenced broker has no session until it heartbeats again.
    pub fn fenced(&mut self, broker_id: i32) {
        self.sessions.remove(&broker_id);
    }
}

/// Where a broker is in its lifecycle, as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerState {
    Fenced,
    Unfenced,
    ControlledShutdown,
    /// Granted its shutdown: fenced, nothing left to lead.
    ShutdownNow,
}

/// Answers a heartbeat: the broker's next state, the records that move it there (with the
/// elections that follow), and the response. Kafka's rules: a fenced broker is unfenced once it
/// asks to be and has applied the metadata log up to its own registration; a broker asking to
/// shut down first has its leadership moved, and is told to go once it leads nothing and every
/// other active broker has applied the metadata log that far (so clients asking any of them
/// find the new leaders rather than the broker that is going).
pub fn heartbeat(
    image: &MetadataImage,
    sessions: &mut BrokerSessions,
    request: &BrokerHeartbeatRequest,
    now_ms: i64,
    unclean: Unclean,
) -> Decision {
    let refuse = |error_code| Decision::answer(heartbeat_refused(error_code));
    let Some(registration) = image.broker(request.broker_id) else {
        return refuse(errors::BROKER_ID_NOT_REGISTERED);
    };
    if registration.broker_epoch != request.broker_epoch {
        // A heartbeat of an earlier incarnation (a process that was replaced): fenced off.
        return refuse(errors::STALE_BROKER_EPOCH);
    }
    let caught_up = request.current_metadata_offset >= registration.registered_at as i64;
    let current = match (registration.fenced, registration.in_controlled_shutdown) {
        (true, _) => BrokerState::Fenced,
        (false, true) => BrokerState::ControlledShutdown,
        (false, false) => BrokerState::Unfenced,
    };
    let leads = |image: &MetadataImage| leads_any(image, request.broker_id);
    // The heartbeat is this broker's contact, whatever it leads to.
    sessions.touch(
        request.broker_id,
        request.broker_epoch,
        now_ms,
        request.current_metadata_offset,
    );
    let next = match current {
        BrokerState::Fenced if request.want_shut_down => BrokerState::ShutdownNow,
        BrokerState::Fenced if !request.want_fence && caught_up => BrokerState::Unfenced,
        BrokerState::Fenced => BrokerState::Fenced,
        BrokerState::Unfenced if request.want_fence && request.want_shut_down => {
            BrokerState::ShutdownNow
        }
        BrokerState::Unfenced if request.want_fence => BrokerState::Fenced,
        BrokerState::Unfenced if request.want_shut_down && leads(image) => {
            BrokerState::ControlledShutdown
        }
        BrokerState::Unfenced if request.want_shut_down => BrokerState::ShutdownNow,
        BrokerState::Unfenced => BrokerState::Unfenced,
        BrokerState::ControlledShutdown if leads(image) => BrokerState::ControlledShutdown,
        BrokerState::ControlledShutdown => {
            let moved_by = sessions.shutdown_offset(image, request.broker_id);
            if sessions.others_applied(image, request.broker_id, moved_by) {
                BrokerState::ShutdownNow
            } else {
                BrokerState::ControlledShutdown
            }
        }
        BrokerState::ShutdownNow => BrokerState::ShutdownNow,
    };
    let change = |fenced: Option<bool>, in_controlled_shutdown: Option<bool>| {
        MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id: request.broker_id,
            broker_epoch: request.broker_epoch,
            fenced,
            in_controlled_shutdown,
        })
    };
    let records = match (current, next) {
        (a, b) if a == b => Vec::new(),
        (_, BrokerState::Fenced | BrokerState::ShutdownNow) => {
            fence(image, request.broker_id, unclean)
        }
        (_, BrokerState::Unfenced) => {
            with_elections(image, change(Some(false), None), NO_LEADER, true, unclean)
        }
        (_, BrokerState::ControlledShutdown) => with_elections(
            image,
            change(None, Some(true)),
            request.broker_id,
            false,
            unclean,
        ),
    };
    Decision {
        records,
        response: ResponseBody::BrokerHeartbeat(BrokerHeartbeatResponse {
            error_code: errors::NONE,
            is_caught_up: caught_up,
            is_fenced: matches!(next, BrokerState::Fenced | BrokerState::ShutdownNow),
            should_shut_down: next == BrokerState::ShutdownNow,
            ..Default::default()
        }),
    }
}

/// A heartbeat refused: the broker is told it is fenced, and nothing changes.
pub(crate) fn heartbeat_refused(error_code: i16) -> ResponseBody {
    ResponseBody::BrokerHeartbeat(BrokerHeartbeatResponse {
        error_code,
        is_fenced: true,
        ..Default::default()
    })
}

/// The records that fence `broker_id`: it leaves every ISR it is in (unless it is the last
/// member, which stays so that the partition comes back with it) and every partition it led gets
/// a new leader, or none.
pub fn fence(image: &MetadataImage, broker_id: i32, unclean: Unclean) -> Vec<MetadataRecord> {
    let Some(registration) = image.broker(broker_id) else {
        return Vec::new();
    };
    let fenced = MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
        broker_id,
        broker_epoch: registration.broker_epoch,
        fenced: Some(true),
        in_controlled_shutdown: Some(false),
    });
    with_elections(image, fenced, broker_id, false, unclean)
}

/// The records of a registration: the broker registers fenced, and if an earlier incarnation
/// still led partitions (it was never fenced), they get new leaders or none.
pub fn register(
    image: &MetadataImage,
    record: fjord_metadata::RegisterBrokerRecord,
    unclean: Unclean,
) -> Vec<MetadataRecord> {
    let broker_id = record.broker_id;
    with_elections(
        image,
        MetadataRecord::RegisterBroker(record),
        broker_id,
        false,
        unclean,
    )
}

/// Whether a topic (by name) allows unclean leader election (`unclean.leader.election.enable`,
/// resolved as the topic's config is).
pub type Unclean<'a> = &'a dyn Fn(&str) -> bool;

/// Unclean elections for every leaderless partition whose topic allows them: the first active
/// replica, in replica order, leads alone (ISR: itself). What only the old ISR had is lost, as
/// Kafka documents.
pub fn elect_unclean_leaders(image: &MetadataImage, unclean: Unclean) -> Vec<MetadataRecord> {
    let active = |id: i32| image.broker(id).is_some_and(|b| b.is_active());
    let mut records = Vec::new();
    for topic in image.topics() {
        let leaderless = topic.partitions.iter().any(|p| p.leader == NO_LEADER);
        if !leaderless || !unclean(&topic.name) {
            continue;
        }
        for (partition_id, partition) in (0i32..).zip(&topic.partitions) {
            if partition.leader != NO_LEADER {
                continue;
            }
            if let Some(leader) = partition.replicas.iter().copied().find(|&id| active(id)) {
                tracing::warn!(topic = %topic.name, partition = partition_id, leader,
                    "unclean leader election: records only the old ISR had are lost");
                records.push(MetadataRecord::PartitionChange(PartitionChangeRecord {
                    partition_id,
                    topic_id: topic.topic_id,
                    isr: Some(vec![leader]),
                    leader: Some(leader),
                    replicas: None,
                    adding_replicas: None,
                    removing_replicas: None,
                }));
            }
        }
    }
    records
}

/// `change` to a broker's registration, then the partition changes it causes on the image it
/// leaves: `leaving` (or [`NO_LEADER`] for none) drops out of ISRs and leadership; with
/// `elect_leaderless`, partitions without a leader get one if an ISR member is now active. With
/// no active ISR member, a topic that allows it (`unclean`) gets an unclean election.
fn with_elections(
    image: &MetadataImage,
    change: MetadataRecord,
    leaving: i32,
    elect_leaderless: bool,
    unclean: Unclean,
) -> Vec<MetadataRecord> {
    let mut delta = fjord_metadata::MetadataDelta::new(image);
    if delta.apply(&change).is_err() {
        return Vec::new();
    }
    let after = delta.finish(image.offset());
    let active = |id: i32| id != leaving && after.broker(id).is_some_and(|b| b.is_active());
    let mut records = vec![change];
    for topic in after.topics() {
        for (partition_id, partition) in (0i32..).zip(&topic.partitions) {
            let mut isr: Vec<i32> = if partition.isr.contains(&leaving) && partition.isr.len() > 1 {
                partition
                    .isr
                    .iter()
                    .copied()
                    .filter(|&id| id != leaving)
                    .collect()
            } else {
                partition.isr.clone()
            };
            let needs_leader = partition.leader == leaving
                || (partition.leader == NO_LEADER && elect_leaderless)
                || (partition.leader != NO_LEADER && !active(partition.leader));
            let leader = if needs_leader {
                // The first live in-sync replica, in replica order.
                let clean = partition
                    .replicas
                    .iter()
                    .copied()
                    .find(|&id| isr.contains(&id) && active(id));
                let elected = match clean {
                    Some(id) => id,
                    None => match partition.replicas.iter().copied().find(|&id| active(id)) {
                        Some(id) if unclean(&topic.name) => {
                            tracing::warn!(topic = %topic.name, partition = partition_id, leader = id,
                                "unclean leader election: records only the old ISR had are lost");
                            isr = vec![id];
                            id
                        }
                        _ => NO_LEADER,
                    },
                };
                (elected != partition.leader).then_some(elected)
            } else {
                None
            };
            if leader.is_some() || isr != partition.isr {
                records.push(MetadataRecord::PartitionChange(PartitionChangeRecord {
                    partition_id,
                    topic_id: topic.topic_id,
                    isr: (isr != partition.isr).then_some(isr),
                    leader,
                    replicas: None,
                    adding_replicas: None,
                    removing_replicas: None,
                }));
            }
        }
    }
    records
}

/// Whether `broker_id` leads any partition.
fn leads_any(image: &MetadataImage, broker_id: i32) -> bool {
    image
        .topics()
        .any(|t| t.partitions.iter().any(|p| p.leader == broker_id))
}

#[cfg(test)]
mod tests {
    use fjord_metadata::{PartitionRecord, RegisterBrokerRecord, TopicRecord, Uuid};

    use super::*;

    const T: Uuid = Uuid([1; 16]);

    /// Brokers 1..=3 registered and unfenced; one topic whose partitions have the given
    /// replicas (ISR: all of them, leader: the first).
    fn image(partitions: &[&[i32]]) -> MetadataImage {
        let mut records = Vec::new();
        for id in 1..=3 {
            records.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: Uuid([id as u8; 16]),
                broker_epoch: 1,
                endpoints: Vec::new(),
                rack: None,
                fenced: false,
                in_controlled_shutdown: false,
            }));
        }
        records.push(MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: T,
        }));
        for (partition_id, replicas) in (0i32..).zip(partitions) {
            records.push(MetadataRecord::Partition(PartitionRecord {
                partition_id,
                topic_id: T,
                replicas: replicas.to_vec(),
                isr: replicas.to_vec(),
                leader: replicas[0],
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            }));
        }
        MetadataImage::from_records(1, &records).unwrap()
    }

    fn apply(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = fjord_metadata::MetadataDelta::new(image);
        for record in records {
            delta.apply(record).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    fn state(image: &MetadataImage) -> Vec<(i32, Vec<i32>, i32)> {
        image
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .map(|p| (p.leader, p.isr.clone(), p.leader_epoch))
            .collect()
    }

    #[test]
    fn fencing_elects_the_first_live_isr_member_in_replica_order() {
        let before = image(&[&[1, 2, 3], &[2, 1, 3], &[1]]);
        let after = apply(&before, &fence(&before, 1, &|_| false));
        assert!(after.broker(1).unwrap().fenced);
        assert_eq!(
            state(&after),
            vec![
                (2, vec![2, 3], 1),
                // Led elsewhere: only the ISR shrinks, the leader epoch stays.
                (2, vec![2, 3], 0),
                // The last ISR member stays; no leader until it returns.
                (-1, vec![1], 1),
            ]
        );
        // Fencing 2 as well: partition 0 goes to 3, the first live ISR member.
        let after = apply(&after, &fence(&after, 2, &|_| false));
        assert_eq!(state(&after)[0], (3, vec![3], 2));
    }

    #[test]
    fn an_unclean_election_happens_only_where_the_topic_allows_it() {
        // Partition 0: ISR [1] only (2 and 3 fell out). Broker 1 is fenced.
        let mut before = image(&[&[1, 2, 3]]);
        before = apply(
            &before,
            &[MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: T,
                isr: Some(vec![1]),
                leader: None,
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            })],
        );
        let clean = apply(&before, &fence(&before, 1, &|_| false));
        assert_eq!(state(&clean)[0].0, -1, "offline: no live ISR member");
        assert!(elect_unclean_leaders(&clean, &|_| false).is_empty());
        let unclean = apply(&before, &fence(&before, 1, &|t| t == "t"));
        assert_eq!(state(&unclean)[0].0, 2);
        assert_eq!(state(&unclean)[0].1, vec![2], "it leads alone");
        // Allowed later (a config change): the periodic check elects the same way.
        let later = apply(&clean, &elect_unclean_leaders(&clean, &|_| true));
        assert_eq!(
            (state(&later)[0].0, state(&later)[0].1.clone()),
            (2, vec![2])
        );
    }

    #[test]
    fn an_unfenced_broker_leads_the_leaderless_partitions_it_is_in_sync_for() {
        let before = image(&[&[1], &[2]]);
        let fenced = apply(&before, &fence(&before, 1, &|_| false));
        let mut sessions = BrokerSessions::new(9000);
        sessions.activate(&fenced, 0);
        let request = BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: 1,
            current_metadata_offset: fenced.offset() as i64,
            ..Default::default()
        };
        let decision = heartbeat(&fenced, &mut sessions, &request, 4000, &|_| false);
        let back = apply(&fenced, &decision.records);
        assert!(back.broker(1).unwrap().is_active());
        assert_eq!(state(&back), vec![(1, vec![1], 2), (2, vec![2], 0)]);
        assert!(sessions.has_valid_session(&back, 1, 13_000));
        assert!(!sessions.has_valid_session(&back, 1, 13_001));
        // Brokers 2 and 3 were last heard of at activation: 2 goes first, then 3, then 1.
        assert_eq!(sessions.stale_broker(&back, 9001), Some(2));
        assert_eq!(sessions.next_expiry_in(&back, 8000), 1000);
    }

    fn beat(broker_id: i32, offset: u64, want_shut_down: bool) -> BrokerHeartbeatRequest {
        BrokerHeartbeatRequest {
            broker_id,
            broker_epoch: 1,
            current_metadata_offset: offset as i64,
            want_shut_down,
            ..Default::default()
        }
    }

    fn told_to_shut_down(decision: &Decision) -> bool {
        let ResponseBody::BrokerHeartbeat(r) = &decision.response else {
            panic!("not a BrokerHeartbeat answer")
        };
        r.should_shut_down
    }

    #[test]
    fn a_broker_in_controlled_shutdown_goes_once_the_others_know_its_leadership_moved() {
        let image = image(&[&[1, 2, 3], &[2, 1, 3]]);
        let mut sessions = BrokerSessions::new(9000);
        let asked = heartbeat(
            &image,
            &mut sessions,
            &beat(1, image.offset(), true),
            0,
            &|_| false,
        );
        assert!(!told_to_shut_down(&asked));
        let moved = apply(&image, &asked.records);
        assert_eq!(state(&moved)[0].0, 2, "its leadership moved");
        // It leads nothing now, but brokers 2 and 3 have not applied the move.
        let again = heartbeat(
            &moved,
            &mut sessions,
            &beat(1, moved.offset(), true),
            10,
            &|_| false,
        );
        assert!(again.records.is_empty() && !told_to_shut_down(&again));
        for id in [2, 3] {
            heartbeat(
                &moved,
                &mut sessions,
                &beat(id, moved.offset() - 1, false),
                20,
                &|_| false,
            );
        }
        let again = heartbeat(
            &moved,
            &mut sessions,
            &beat(1, moved.offset(), true),
            30,
            &|_| false,
        );
        assert!(
            !told_to_shut_down(&again),
            "the others are one offset behind"
        );
        heartbeat(
            &moved,
            &mut sessions,
            &beat(2, moved.offset(), false),
            40,
            &|_| false,
        );
        let again = heartbeat(
            &moved,
            &mut sessions,
            &beat(1, moved.offset(), true),
            50,
            &|_| false,
        );
        assert!(!told_to_shut_down(&again), "broker 3 is still behind");
        heartbeat(
            &moved,
            &mut sessions,
            &beat(3, moved.offset(), false),
            60,
            &|_| false,
        );
        let gone = heartbeat(
            &moved,
            &mut sessions,
            &beat(1, moved.offset(), true),
            70,
            &|_| false,
        );
        assert!(told_to_shut_down(&gone));
        assert!(apply(&moved, &gone.records).broker(1).unwrap().fenced);
    }

    #[test]
    fn a_broker_behind_its_registration_stays_fenced() {
        let mut before = image(&[&[1]]);
        before = apply(&before, &fence(&before, 1, &|_| false));
        let registered_at = before.broker(1).unwrap().registered_at as i64;
        let request = BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: 1,
            current_metadata_offset: registered_at - 1,
            ..Default::default()
        };
        let decision = heartbeat(
            &before,
            &mut BrokerSessions::new(9000),
            &request,
            0,
            &|_| false,
        );
        assert!(decision.records.is_empty());
        let ResponseBody::BrokerHeartbeat(r) = decision.response else {
            panic!("not a BrokerHeartbeat answer")
        };
        assert!(r.is_fenced && !r.is_caught_up);
    }
}
