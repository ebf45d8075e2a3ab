//! A deterministic simulation of one partition replicated on three brokers, on a simulated clock and a seeded
//! scheduler. The real parts: each replica's `PartitionState` (roles, high watermark, ISR proposals), the leader
//! epoch cache, the leader's check of a follower's fetch (`check_follower_fetch`) and the follower's truncation
//! rule (`divergence_truncation`), and the real controller deciding
//! registrations, heartbeats, fencing with its elections, and AlterPartition. Modelled: the log (entries tagged
//! with the leader epoch that wrote them, a durable prefix), the network (fetch requests and answers delivered
//! late, in any order, or lost), metadata reaching each broker late. Faults: kill -9 (the unsynced tail is lost, the
//! broker comes back as a new incarnation), pauses past the session, lost messages.
//!
//! Checked after every step: HW ≤ LEO; a replica's high watermark never goes back within one leader epoch of one
//! incarnation; whatever any replica's high watermark covers is the committed history (the same entries, at the
//! same offsets, for every replica and every leader after); an ISR member never truncates committed entries it
//! holds. At the end, healed and quiet, every replica holds the same log and the leader's high watermark is its log
//! end.
//!
//! `FJORD_SIM_SEEDS` sets how many seeds run (default 200; the long mode is `FJORD_SIM_SEEDS=20000`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use fjord_broker::partition_state::{
    check_follower_fetch, divergence_truncation, FollowerFetch, LeaderAndIsr, PartitionState, Role,
};
use fjord_common::{errors, TopicId, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::{Controller, ControllerApi, ControllerRequest};
use fjord_metadata::{MetadataDelta, MetadataImage, MetadataRecord};
use fjord_protocol::messages::alter_partition_request::{
    AlterPartitionRequest, BrokerState, PartitionData, TopicData,
};
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_registration_request::{BrokerRegistrationRequest, Listener};
use fjord_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use fjord_protocol::ResponseBody;
use fjord_storage::leader_epoch::LeaderEpochCache;

const SESSION_MS: i64 = 6000;
const HEARTBEAT_MS: i64 = 1000;
const LAG_MS: i64 = 3000;
const FETCH_TIMEOUT_MS: i64 = 2000;
const BROKERS: [i32; 3] = [1, 2, 3];
const TOPIC: &str = "sim";

/// One log entry: the leader epoch that wrote it and a value unique in the run.
type Entry = (i32, u64);

struct Broker {
    id: i32,
    up: bool,
    paused: bool,
    incarnation: Uuid,
    /// Its registered broker epoch (None: not registered since it started).
    epoch: Option<i64>,
    next_heartbeat_ms: i64,
    log: Vec<Entry>,
    durable: usize,
    epochs: LeaderEpochCache,
    /// None until the partition's metadata first reaches this incarnation.
    state: Option<PartitionState>,
    /// The log's high watermark: raised to the state's bound after each event (as
    /// `Log::raise_high_watermark`), lowered only by truncation.
    hw: i64,
    /// The last high watermark seen per leader epoch, this incarnation.
    hw_seen: HashMap<i32, i64>,
    /// When its fetch in flight was sent: a fetcher has one at a time (another after a timeout).
    fetch_sent_ms: Option<i64>,
}

impl Broker {
    fn leo(&self) -> i64 {
        self.log.len() as i64
    }

    /// The log raises its high watermark to what the state allows; never lowers it here.
    fn raise_hw(&mut self) {
        if let Some(state) = &self.state {
            self.hw = self.hw.max(state.high_watermark_bound());
        }
    }

    fn truncate(&mut self, to: i64) {
        let to = to.clamp(0, self.leo()) as usize;
        self.log.truncate(to);
        self.hw = self.hw.min(to as i64);
        self.durable = self.durable.min(to);
        self.epochs.truncate_from_end(to as i64);
        if let Some(state) = &mut self.state {
            state.on_truncate(to as i64);
        }
    }

    fn serving(&self) -> bool {
        self.up && !self.paused
    }
}

/// A follower's fetch on its way to the leader, or the answer on its way back.
enum Message {
    Fetch {
        from: i32,
        incarnation: Uuid,
        leader: i32,
        leader_epoch: i32,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        broker_epoch: i64,
    },
    Answer {
        to: i32,
        incarnation: Uuid,
        leader_epoch: i32,
        fetch_offset: i64,
        outcome: FetchOutcome,
    },
}

enum FetchOutcome {
    Records {
        entries: Vec<Entry>,
        high_watermark: i64,
    },
    Diverged {
        epoch: i32,
        end_offset: i64,
    },
    OutOfRange {
        high_watermark: i64,
    },
}

struct Sim {
    rng: fjord_controller::placement::Seeded,
    now: i64,
    image: MetadataImage,
    controller: Controller,
    topic_id: TopicId,
    brokers: Vec<Broker>,
    network: Vec<Message>,
    next_value: u64,
    /// The committed history: every entry some high watermark has covered.
    committed: Vec<Entry>,
    uuids: u8,
    /// Divergent tails cut, and crashes: what the run exercised.
    truncations: u64,
    crashes: u64,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let props: BTreeMap<String, String> = [
            ("broker.session.timeout.ms", SESSION_MS.to_string()),
            ("broker.heartbeat.interval.ms", HEARTBEAT_MS.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let (config, _) = BrokerConfig::from_properties(&props).unwrap();
        let config = Arc::new(config);
        let mut sim = Sim {
            rng: fjord_controller::placement::Seeded(seed),
            now: 0,
            image: MetadataImage::empty(),
            controller: Controller::new(config, "sim".into()),
            topic_id: Uuid([7; 16]),
            brokers: Vec::new(),
            network: Vec::new(),
            next_value: 0,
            committed: Vec::new(),
            uuids: 0,
            truncations: 0,
            crashes: 0,
        };
        for id in BROKERS {
            let incarnation = sim.fresh_uuid();
            sim.brokers.push(Broker {
                id,
                up: true,
                paused: false,
                incarnation,
                epoch: None,
                next_heartbeat_ms: 0,
                log: Vec::new(),
                durable: 0,
                epochs: LeaderEpochCache::new(),
                state: None,
                hw_seen: HashMap::new(),
                hw: 0,
                fetch_sent_ms: None,
            });
        }
        for i in 0..BROKERS.len() {
            sim.heartbeat(i);
            sim.heartbeat(i);
        }
        let topic_id = sim.topic_id;
        let mut ids = [topic_id].into_iter();
        let request = ControllerRequest::new(
            7,
            ControllerApi::CreateTopics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: TOPIC.into(),
                    num_partitions: 1,
                    replication_factor: 3,
                    ..Default::default()
                }],
                timeout_ms: 0,
                validate_only: false,
            }),
            -1,
        );
        let decision = sim
            .controller
            .decide(&sim.image, &request, 0, &mut || ids.next().unwrap());
        sim.commit(&decision.records);
        assert!(sim.partition().is_some(), "the topic was created");
        sim
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n as usize) as u64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn fresh_uuid(&mut self) -> Uuid {
        self.uuids = self.uuids.wrapping_add(1);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        bytes[15] = self.uuids;
        Uuid(bytes)
    }

    fn decide(&mut self, api: ControllerApi, version: i16) -> ResponseBody {
        let request = ControllerRequest::new(version, api, -1);
        let decision = self
            .controller
            .decide(&self.image, &request, self.now, &mut || Uuid([9; 16]));
        self.commit(&decision.records);
        decision.response
    }

    fn commit(&mut self, records: &[MetadataRecord]) {
        if records.is_empty() {
            return;
        }
        let mut delta = MetadataDelta::new(&self.image);
        for record in records {
            delta.apply(record).expect("the controller's records apply");
        }
        self.image = delta.finish(self.image.offset() + 1);
    }

    fn partition(&self) -> Option<LeaderAndIsr> {
        let p = self.image.topic(TOPIC)?.partitions.first()?;
        Some(LeaderAndIsr {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
        })
    }

    fn heartbeat(&mut self, i: usize) {
        let (id, incarnation) = (self.brokers[i].id, self.brokers[i].incarnation);
        match self.brokers[i].epoch {
            None => {
                let response = self.decide(
                    ControllerApi::BrokerRegistration(BrokerRegistrationRequest {
                        broker_id: id,
                        cluster_id: "sim".into(),
                        incarnation_id: incarnation,
                        listeners: vec![Listener {
                            name: "PLAINTEXT".into(),
                            host: "sim".into(),
                            port: 9092,
                            security_protocol: 0,
                        }],
                        previous_broker_epoch: -1,
                        ..Default::default()
                    }),
                    4,
                );
                if let ResponseBody::BrokerRegistration(r) = response {
                    if r.error_code == errors::NONE {
                        self.brokers[i].epoch = Some(r.broker_epoch);
                    }
                }
            }
            Some(epoch) => {
                let response = self.decide(
                    ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
                        broker_id: id,
                        broker_epoch: epoch,
                        current_metadata_offset: self.image.offset() as i64,
                        ..Default::default()
                    }),
                    1,
                );
                if let ResponseBody::BrokerHeartbeat(r) = response {
                    if r.error_code == errors::STALE_BROKER_EPOCH {
                        self.brokers[i].epoch = None;
                    }
                }
            }
        }
        self.brokers[i].next_heartbeat_ms = self.now + HEARTBEAT_MS;
    }

    /// The partition's metadata reaches broker `i` (the latest image).
    fn deliver_metadata(&mut self, i: usize) {
        let Some(lai) = self.partition() else { return };
        let now = self.now;
        // As a broker starts: it takes part only once its registration is in the image and the
        // controller has unfenced it (the registration itself moved its leadership away).
        let b = &self.brokers[i];
        let registered = b.epoch.is_some_and(|epoch| {
            self.image
                .broker(b.id)
                .is_some_and(|r| r.broker_epoch == epoch && r.is_active())
        });
        if b.state.is_none() && !registered {
            return;
        }
        let b = &mut self.brokers[i];
        match &mut b.state {
            None => {
                b.state = Some(PartitionState::new(
                    b.id,
                    lai.clone(),
                    b.log.len() as i64,
                    b.durable as i64,
                    now,
                ));
            }
            Some(state) => {
                let _ = state.apply(lai.clone(), now);
            }
        }
        b.raise_hw();
        if lai.leader == b.id {
            // A new leader epoch starts at this log's end.
            b.epochs.assign(lai.leader_epoch, b.log.len() as i64);
        }
        let id = b.id;
        self.trace(format!("metadata to b{id}: {lai:?}"));
    }

    fn leader_index(&self) -> Option<usize> {
        self.brokers
            .iter()
            .position(|b| b.serving() && b.state.as_ref().is_some_and(|s| s.role() == Role::Leader))
    }

    fn produce(&mut self) {
        let Some(i) = self.leader_index() else { return };
        let n = 1 + self.below(4) as usize;
        let b = &mut self.brokers[i];
        let state = b.state.as_mut().unwrap();
        let epoch = state.leader_epoch();
        for _ in 0..n {
            b.log.push((epoch, self.next_value));
            self.next_value += 1;
        }
        state.on_append(b.log.len() as i64, false);
        b.raise_hw();
        let (id, leo) = (b.id, b.log.len());
        self.trace(format!("produce {n} at b{id} epoch {epoch} -> leo {leo}"));
    }

    fn fsync(&mut self, i: usize) {
        let b = &mut self.brokers[i];
        b.durable = b.log.len();
        if let Some(state) = &mut b.state {
            state.on_durable(b.durable as i64);
        }
        b.raise_hw();
    }

    /// A follower syncs what it appended, then fetches from its log end.
    fn send_fetch(&mut self, i: usize) {
        if self.brokers[i]
            .fetch_sent_ms
            .is_some_and(|t| self.now - t < FETCH_TIMEOUT_MS)
        {
            return;
        }
        self.fsync(i);
        let now = self.now;
        let b = &mut self.brokers[i];
        b.fetch_sent_ms = Some(now);
        let b = &self.brokers[i];
        let Some(state) = &b.state else { return };
        let Role::Follower { leader } = state.role() else {
            return;
        };
        if leader < 0 {
            return;
        }
        let Some(epoch) = b.epoch else { return };
        self.network.push(Message::Fetch {
            from: b.id,
            incarnation: b.incarnation,
            leader,
            leader_epoch: state.leader_epoch(),
            fetch_offset: b.leo(),
            last_fetched_epoch: b.log.last().map_or(-1, |e| e.0),
            broker_epoch: epoch,
        });
    }

    fn index_of(&self, id: i32) -> usize {
        self.brokers.iter().position(|b| b.id == id).unwrap()
    }

    fn deliver(&mut self, message: Message) {
        match message {
            Message::Fetch {
                from,
                incarnation,
                leader,
                leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                broker_epoch,
            } => {
                let li = self.index_of(leader);
                let now = self.now;
                let l = &mut self.brokers[li];
                let refused = !l.serving()
                    || l.state.as_ref().is_none_or(|s| {
                        s.role() != Role::Leader || s.leader_epoch() != leader_epoch
                    });
                if refused {
                    // Unanswered, or FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER: the follower asks
                    // again (at once when it heard the refusal).
                    if l.serving() {
                        let fi = self.index_of(from);
                        if self.brokers[fi].incarnation == incarnation {
                            self.brokers[fi].fetch_sent_ms = None;
                        }
                    }
                    return;
                }
                let l = &mut self.brokers[li];
                let state = l.state.as_mut().unwrap();
                let leo = l.log.len() as i64;
                let epochs = &l.epochs;
                let check = check_follower_fetch(fetch_offset, last_fetched_epoch, 0, leo, |e| {
                    epochs.end_offset_for(e, leo)
                });
                let outcome = match check {
                    FollowerFetch::OutOfRange => FetchOutcome::OutOfRange {
                        high_watermark: l.hw,
                    },
                    FollowerFetch::Diverged { epoch, end_offset } => {
                        FetchOutcome::Diverged { epoch, end_offset }
                    }
                    FollowerFetch::Read => {
                        let _ = state.on_follower_fetch(from, fetch_offset, broker_epoch, now);
                        l.raise_hw();
                        let end = (fetch_offset as usize + 50).min(l.log.len());
                        FetchOutcome::Records {
                            entries: l.log[fetch_offset as usize..end].to_vec(),
                            high_watermark: l.hw,
                        }
                    }
                };
                self.network.push(Message::Answer {
                    to: from,
                    incarnation,
                    leader_epoch,
                    fetch_offset,
                    outcome,
                });
            }
            Message::Answer {
                to,
                incarnation,
                leader_epoch,
                fetch_offset,
                outcome,
            } => {
                let fi = self.index_of(to);
                let in_isr = self.partition().is_some_and(|p| p.isr.contains(&to));
                let committed = self.committed.len() as i64;
                let f = &mut self.brokers[fi];
                if f.incarnation == incarnation {
                    f.fetch_sent_ms = None;
                }
                // A new incarnation, another leader epoch or a moved log end: not this answer's.
                if !f.serving() || f.incarnation != incarnation || f.leo() != fetch_offset {
                    return;
                }
                let Some(state) = &f.state else { return };
                if state.leader_epoch() != leader_epoch
                    || !matches!(state.role(), Role::Follower { .. })
                {
                    return;
                }
                let truncate_to = match outcome {
                    FetchOutcome::OutOfRange { high_watermark } => {
                        Some(high_watermark.max(f.hw).min(f.leo()))
                    }
                    FetchOutcome::Diverged { epoch, end_offset } => {
                        let local = f.epochs.end_offset_for(epoch, f.leo());
                        Some(divergence_truncation(epoch, end_offset, local, f.leo()))
                    }
                    FetchOutcome::Records {
                        entries,
                        high_watermark,
                    } => {
                        for entry in entries {
                            f.epochs.assign(entry.0, f.log.len() as i64);
                            f.log.push(entry);
                        }
                        let state = f.state.as_mut().unwrap();
                        state.on_append(f.log.len() as i64, false);
                        state.on_leader_high_watermark(high_watermark);
                        f.raise_hw();
                        None
                    }
                };
                if let Some(to_offset) = truncate_to {
                    if in_isr {
                        assert!(
                            to_offset >= committed.min(f.leo()),
                            "in-sync replica {to} truncated committed entries: to {to_offset}, committed {committed}"
                        );
                    }
                    if to_offset < f.leo() {
                        self.truncations += 1;
                    }
                    let from = f.leo();
                    f.truncate(to_offset);
                    self.trace(format!("b{to} truncated {from} -> {to_offset}"));
                } else {
                    self.trace(format!("b{to} appended from {fetch_offset}"));
                }
            }
        }
    }

    /// The leader's ISR check, answered by the controller at once.
    fn isr_check(&mut self) {
        let Some(li) = self.leader_index() else {
            return;
        };
        let now = self.now;
        let image = self.image.clone();
        let eligible = |id: i32| image.broker(id).is_some_and(|b| b.is_active());
        let l = &mut self.brokers[li];
        let Some(epoch) = l.epoch else { return };
        let state = l.state.as_mut().unwrap();
        let start = l
            .epochs
            .latest_entry()
            .filter(|e| e.epoch == state.leader_epoch())
            .map_or(i64::MAX, |e| e.start_offset);
        let Some(isr) = state.propose_isr_change(now, LAG_MS, start, l.hw, eligible) else {
            return;
        };
        let (leader_epoch, partition_epoch) = (state.leader_epoch(), state.partition_epoch());
        let members: Vec<BrokerState> = isr
            .iter()
            .map(|&id| BrokerState {
                broker_id: id,
                broker_epoch: if id == l.id {
                    epoch
                } else {
                    state.followers().get(&id).map_or(-1, |f| f.broker_epoch)
                },
            })
            .collect();
        let id = l.id;
        let topic_id = self.topic_id;
        let response = self.decide(
            ControllerApi::AlterPartition(AlterPartitionRequest {
                broker_id: id,
                broker_epoch: epoch,
                topics: vec![TopicData {
                    topic_id,
                    partitions: vec![PartitionData {
                        partition_index: 0,
                        leader_epoch,
                        partition_epoch,
                        new_isr_with_epochs: members,
                        ..Default::default()
                    }],
                }],
            }),
            3,
        );
        let b = &mut self.brokers[li];
        let state = b.state.as_mut().unwrap();
        match response {
            ResponseBody::AlterPartition(r) if r.error_code == errors::NONE => {
                let p = &r.topics[0].partitions[0];
                if p.error_code == errors::NONE {
                    let lai = LeaderAndIsr {
                        leader: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        partition_epoch: p.partition_epoch,
                        replicas: BROKERS.to_vec(),
                        isr: p.isr.clone(),
                    };
                    let _ = state.apply(lai, now);
                } else {
                    state.isr_change_done();
                }
            }
            _ => state.isr_change_done(),
        }
        b.raise_hw();
    }

    fn crash(&mut self, i: usize) {
        self.trace(format!("crash b{}", BROKERS[i]));
        self.crashes += 1;
        let incarnation = self.fresh_uuid();
        let b = &mut self.brokers[i];
        b.up = false;
        b.paused = false;
        // What was not synced is gone.
        let durable = b.durable as i64;
        b.log.truncate(b.durable);
        b.epochs.truncate_from_end(durable);
        b.state = None;
        b.hw = 0;
        b.epoch = None;
        b.incarnation = incarnation;
        b.hw_seen.clear();
        b.fetch_sent_ms = None;
        self.network.retain(|m| match m {
            Message::Fetch { from, .. } => *from != BROKERS[i],
            Message::Answer { to, .. } => *to != BROKERS[i],
        });
    }

    fn step(&mut self, faults: bool) {
        self.now += 1 + self.below(300) as i64;
        for i in 0..self.brokers.len() {
            if self.brokers[i].serving() && self.now >= self.brokers[i].next_heartbeat_ms {
                self.heartbeat(i);
            }
        }
        while let Some((_, records)) = self.controller.fence_stale_broker(&self.image, self.now) {
            self.commit(&records);
        }
        let i = self.below(self.brokers.len() as u64) as usize;
        match self.below(100) {
            0..=19 => self.produce(),
            20..=34 if self.brokers[i].serving() => self.deliver_metadata(i),
            35..=54 if self.brokers[i].serving() => self.send_fetch(i),
            55..=74 if !self.network.is_empty() => {
                // Any message in flight, not only the oldest.
                let m = self.below(self.network.len() as u64) as usize;
                let message = self.network.swap_remove(m);
                if faults && self.chance(3) {
                    return; // lost
                }
                self.deliver(message);
            }
            75..=84 => self.isr_check(),
            85..=89 if self.brokers[i].serving() => self.fsync(i),
            90..=91 if faults && self.brokers.iter().all(|b| b.up) => self.crash(i),
            92..=94 if !self.brokers[i].up => {
                self.brokers[i].up = true;
                self.brokers[i].next_heartbeat_ms = self.now;
            }
            95 if faults && self.brokers[i].up => self.brokers[i].paused = true,
            96..=98 => self.brokers[i].paused = false,
            _ => {}
        }
        self.check();
    }

    fn trace(&self, what: String) {
        if std::env::var("FJORD_SIM_TRACE").is_ok() {
            let p = self.partition();
            eprintln!(
                "t={} {what} | image {:?} | {}",
                self.now,
                p.map(|p| (p.leader, p.leader_epoch, p.isr)),
                self.brokers
                    .iter()
                    .map(|b| format!(
                        "b{} up={} p={} leo={} dur={} {:?}",
                        b.id,
                        b.up,
                        b.paused,
                        b.leo(),
                        b.durable,
                        b.state.as_ref().map(|s| (s.role(), s.leader_epoch(), b.hw))
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
    }

    fn check(&mut self) {
        for b in &mut self.brokers {
            let Some(state) = &b.state else { continue };
            let hw = b.hw;
            assert!(
                hw <= b.log.len() as i64,
                "broker {}: HW {hw} above LEO {}",
                b.id,
                b.log.len()
            );
            let last = b.hw_seen.entry(state.leader_epoch()).or_insert(hw);
            assert!(
                hw >= *last,
                "broker {}: HW went back from {last} to {hw} in epoch {}",
                b.id,
                state.leader_epoch()
            );
            *last = hw;
            for offset in 0..hw as usize {
                match self.committed.get(offset) {
                    Some(entry) => assert_eq!(
                        &b.log[offset], entry,
                        "broker {}: offset {offset} below its HW {hw} is not the committed entry",
                        b.id
                    ),
                    None => self.committed.push(b.log[offset]),
                }
            }
        }
    }

    /// Everything back up and quiet: the replicas converge on one log, all of it committed.
    fn heal(&mut self) {
        for b in &mut self.brokers {
            b.up = true;
            b.paused = false;
        }
        for _ in 0..3000 {
            self.now += 50;
            for i in 0..self.brokers.len() {
                if self.now >= self.brokers[i].next_heartbeat_ms {
                    self.heartbeat(i);
                }
                self.deliver_metadata(i);
                self.send_fetch(i);
            }
            while let Some((_, records)) = self.controller.fence_stale_broker(&self.image, self.now)
            {
                self.commit(&records);
            }
            for message in std::mem::take(&mut self.network) {
                self.deliver(message);
            }
            for message in std::mem::take(&mut self.network) {
                self.deliver(message);
            }
            self.isr_check();
            self.check();
        }
        let p = self.partition().unwrap();
        assert!(p.leader > 0, "no leader after healing: {p:?}");
        assert_eq!(p.isr.len(), 3, "not every replica back in sync: {p:?}");
        let leader = &self.brokers[self.index_of(p.leader)];
        let hw = leader.hw;
        assert_eq!(hw, leader.leo(), "the leader's log not all committed");
        for b in &self.brokers {
            assert_eq!(
                b.log, leader.log,
                "broker {} holds another log than the leader {}",
                b.id, leader.id
            );
        }
        assert!(self.committed.len() as i64 <= hw);
    }
}

#[test]
fn replication_keeps_committed_entries_through_crashes_pauses_and_a_lossy_network() {
    let seeds: u64 = std::env::var("FJORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let (mut committed, mut truncations, mut crashes) = (0usize, 0u64, 0u64);
    for seed in 0..seeds {
        if std::env::var("FJORD_SIM_SEED").is_ok_and(|s| s != seed.to_string()) {
            continue;
        }
        eprintln!("seed {seed}");
        let mut sim = Sim::new(seed);
        for _ in 0..1500 {
            sim.step(true);
        }
        sim.heal();
        committed += sim.committed.len();
        truncations += sim.truncations;
        crashes += sim.crashes;
    }
    // The workload committed entries, brokers crashed and divergent tails were cut (a simulation where none
    // of that happens checks nothing).
    assert!(
        committed as u64 > seeds * 20,
        "only {committed} entries committed over {seeds} seeds"
    );
    assert!(
        crashes >= seeds && truncations * 10 >= seeds,
        "{crashes} crashes, {truncations} truncations"
    );
    println!("{seeds} seeds: {committed} entries committed, {crashes} crashes, {truncations} divergent tails cut");
}
