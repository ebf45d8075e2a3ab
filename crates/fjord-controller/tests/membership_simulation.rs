//! A deterministic simulation of the controller with a handful of brokers, on a simulated clock: brokers register,
//! heartbeat (on time, late, or not at all while paused), restart as new incarnations, start twice with one id and
//! shut down; topics are created; the active controller fails over (a new one starts with fresh sessions). Every
//! decision commits at once (the quorum itself is tested elsewhere). After every commit the invariants are checked:
//! leader epochs only grow, every leader is an in-sync replica on an active broker, an ISR is never empty and is
//! drawn from the replicas, a broker that heartbeats on time is never fenced, one that stays silent past its session
//! is, and no node id has two live incarnations.
//!
//! `FJORD_SIM_SEEDS` sets how many seeds run (default 300; the long mode is `FJORD_SIM_SEEDS=20000`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use fjord_common::{errors, TopicId, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::{Controller, ControllerApi, ControllerRequest};
use fjord_metadata::{MetadataDelta, MetadataImage, NO_LEADER};
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_registration_request::{BrokerRegistrationRequest, Listener};
use fjord_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use fjord_protocol::ResponseBody;

const SESSION_MS: i64 = 9000;
const HEARTBEAT_MS: i64 = 2000;
const BROKERS: i32 = 4;

/// The simulation's randomness: the placement's own seeded generator.
struct Rng(fjord_controller::placement::Seeded);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n as usize) as u64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One broker process as the controller sees it through its requests.
struct Process {
    id: i32,
    incarnation: Uuid,
    epoch: Option<i64>,
    paused: bool,
    next_heartbeat_ms: i64,
    /// When it last had an answered heartbeat (None: not since it registered).
    last_heartbeat_ms: Option<i64>,
}

struct Sim {
    rng: Rng,
    now: i64,
    image: MetadataImage,
    controller: Controller,
    config: Arc<BrokerConfig>,
    processes: Vec<Process>,
    next_id: u8,
    topics: usize,
    /// When the current controller became active: every unfenced broker's session started then.
    activated_at: i64,
    /// Highest leader epoch seen per (topic id, partition).
    epochs: HashMap<(TopicId, usize), i32>,
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
        Sim {
            rng: Rng(fjord_controller::placement::Seeded(seed)),
            now: 0,
            image: MetadataImage::empty(),
            controller: Controller::new(config.clone(), "sim".into()),
            config,
            processes: Vec::new(),
            next_id: 1,
            topics: 0,
            activated_at: 0,
            epochs: HashMap::new(),
        }
    }

    fn fresh_uuid(&mut self) -> Uuid {
        self.next_id = self.next_id.wrapping_add(1);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.rng.next().to_le_bytes());
        bytes[15] = self.next_id;
        Uuid(bytes)
    }

    fn decide(&mut self, api: ControllerApi) -> ResponseBody {
        let mut ids = [self.fresh_uuid()].into_iter();
        let mut topic_id = move || -> TopicId { ids.next().unwrap_or(Uuid([3; 16])) };
        let request = ControllerRequest::new(0, api, -1);
        let decision = self
            .controller
            .decide(&self.image, &request, self.now, &mut topic_id);
        self.commit(&decision.records);
        decision.response
    }

    fn commit(&mut self, records: &[fjord_metadata::MetadataRecord]) {
        if records.is_empty() {
            return;
        }
        let mut delta = MetadataDelta::new(&self.image);
        for record in records {
            delta.apply(record).expect("the controller's records apply");
        }
        self.image = delta.finish(self.image.offset() + 1);
        self.check();
    }

    fn start(&mut self, id: i32) {
        let incarnation = self.fresh_uuid();
        self.processes.push(Process {
            id,
            incarnation,
            epoch: None,
            paused: false,
            next_heartbeat_ms: self.now,
            last_heartbeat_ms: None,
        });
    }

    fn register(&mut self, index: usize) {
        let (id, incarnation) = (self.processes[index].id, self.processes[index].incarnation);
        let live_other = self.processes.iter().any(|p| {
            p.id == id
                && p.incarnation != incarnation
                && !p.paused
                && p.last_heartbeat_ms
                    .is_some_and(|t| self.now - t < SESSION_MS - HEARTBEAT_MS)
                && self
                    .image
                    .broker(id)
                    .is_some_and(|b| !b.fenced && Some(b.broker_epoch) == p.epoch)
        });
        let response = self.decide(ControllerApi::BrokerRegistration(
            BrokerRegistrationRequest {
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
            },
        ));
        let ResponseBody::BrokerRegistration(r) = response else {
            panic!("not a registration answer")
        };
        if live_other {
            // Another incarnation of this id heartbeats on time: never two live ones.
            assert_eq!(
                r.error_code,
                errors::DUPLICATE_BROKER_REGISTRATION,
                "a second live broker {id}"
            );
        }
        if r.error_code == errors::NONE {
            self.processes[index].epoch = Some(r.broker_epoch);
            self.processes[index].last_heartbeat_ms = Some(self.now);
        }
    }

    fn heartbeat(&mut self, index: usize, want_shut_down: bool) {
        let Some(epoch) = self.processes[index].epoch else {
            return self.register(index);
        };
        let id = self.processes[index].id;
        let response = self.decide(ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: self.image.offset() as i64,
            want_shut_down,
            ..Default::default()
        }));
        let ResponseBody::BrokerHeartbeat(r) = response else {
            panic!("not a heartbeat answer")
        };
        match r.error_code {
            errors::NONE => {
                self.processes[index].last_heartbeat_ms = Some(self.now);
                // Always caught up here: a heartbeat that does not ask to go is unfenced.
                assert!(
                    want_shut_down || r.should_shut_down || !r.is_fenced,
                    "broker {id} still fenced after a heartbeat"
                );
                if r.should_shut_down {
                    assert!(!leads_any(&self.image, id), "told to go while leading");
                    self.processes.remove(index);
                }
            }
            // Replaced by a newer incarnation: this process stops.
            errors::STALE_BROKER_EPOCH | errors::BROKER_ID_NOT_REGISTERED => {
                self.processes.remove(index);
            }
            other => panic!("heartbeat answered {other}"),
        }
    }

    fn create_topic(&mut self) {
        self.topics += 1;
        let name = format!("t{}", self.topics);
        let num_partitions = 1 + self.rng.below(4) as i32;
        self.decide(ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name,
                num_partitions,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 0,
            validate_only: false,
        }));
    }

    fn step(&mut self) {
        self.now += 1 + self.rng.below(700) as i64;
        match self.rng.below(100) {
            0..=2 if self.processes.len() < 7 => {
                // A new process: a fresh id, a restart, or a duplicate of a live one.
                let id = 1 + self.rng.below(BROKERS as u64) as i32;
                if self.rng.chance(50) {
                    let killed: Vec<usize> = (0..self.processes.len())
                        .filter(|&i| self.processes[i].id == id)
                        .collect();
                    for i in killed.into_iter().rev() {
                        self.processes.remove(i);
                    }
                }
                self.start(id);
            }
            3..=5 if !self.processes.is_empty() => {
                let i = self.rng.below(self.processes.len() as u64) as usize;
                self.processes[i].paused = !self.processes[i].paused;
            }
            6 if !self.processes.is_empty() => {
                let i = self.rng.below(self.processes.len() as u64) as usize;
                if !self.processes[i].paused {
                    self.heartbeat(i, true);
                }
            }
            7..=9 => self.create_topic(),
            10 => {
                // Controller failover: the new active controller knows only the log.
                self.controller = Controller::new(self.config.clone(), "sim".into());
                self.controller.activate(&self.image, self.now);
                self.activated_at = self.now;
            }
            _ => {}
        }
        // Heartbeats that are due, sometimes a little late but within the session.
        for i in (0..self.processes.len()).rev() {
            let Some(p) = self.processes.get(i) else {
                continue;
            };
            if !p.paused && p.next_heartbeat_ms <= self.now {
                let late = self.rng.below(1500) as i64;
                if let Some(p) = self.processes.get_mut(i) {
                    p.next_heartbeat_ms = self.now + HEARTBEAT_MS + late;
                }
                self.heartbeat(i, false);
            }
        }
        // The controller's session timer.
        while let Some((id, records)) = self.controller.fence_stale_broker(&self.image, self.now) {
            let epoch = self.image.broker(id).map(|b| b.broker_epoch);
            // Only a broker that went silent (paused, killed) past its session is fenced.
            let on_time = self.processes.iter().any(|p| {
                p.id == id
                    && p.epoch == epoch
                    && !p.paused
                    && p.last_heartbeat_ms
                        .is_some_and(|t| self.now - t <= SESSION_MS)
            });
            assert!(!on_time, "broker {id} fenced while heartbeating on time");
            self.commit(&records);
        }
        self.check_sessions();
    }

    /// Invariants of the image, after every commit.
    fn check(&mut self) {
        for topic in self.image.topics() {
            for (index, p) in topic.partitions.iter().enumerate() {
                assert!(!p.isr.is_empty(), "{}-{index}: empty ISR", topic.name);
                assert!(
                    p.isr.iter().all(|r| p.replicas.contains(r)),
                    "ISR outside the replicas"
                );
                if p.leader != NO_LEADER {
                    assert!(
                        p.isr.contains(&p.leader),
                        "{}-{index}: leader {} not in sync",
                        topic.name,
                        p.leader
                    );
                    let broker = self.image.broker(p.leader).expect("leader registered");
                    assert!(
                        broker.is_active(),
                        "{}-{index}: leader {} fenced or shutting down",
                        topic.name,
                        p.leader
                    );
                }
                let seen = self
                    .epochs
                    .entry((topic.topic_id, index))
                    .or_insert(p.leader_epoch);
                assert!(p.leader_epoch >= *seen, "leader epoch went back");
                *seen = p.leader_epoch;
            }
        }
    }

    /// One silent past its session (and a tick) is fenced.
    fn check_sessions(&self) {
        for p in &self.processes {
            let (Some(epoch), Some(last)) = (p.epoch, p.last_heartbeat_ms) else {
                continue;
            };
            let Some(b) = self.image.broker(p.id) else {
                continue;
            };
            let since = last.max(self.activated_at);
            if b.broker_epoch == epoch && self.now - since > SESSION_MS + 1 {
                assert!(
                    b.fenced,
                    "broker {} silent for {} ms but not fenced",
                    p.id,
                    self.now - since
                );
            }
        }
    }
}

fn leads_any(image: &MetadataImage, id: i32) -> bool {
    image
        .topics()
        .any(|t| t.partitions.iter().any(|p| p.leader == id))
}

#[test]
fn membership_holds_its_invariants_over_many_seeds() {
    let seeds: u64 = std::env::var("FJORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..seeds {
        let mut sim = Sim::new(seed);
        for id in 1..=BROKERS {
            sim.start(id);
        }
        for _ in 0..400 {
            sim.step();
        }
    }
}
