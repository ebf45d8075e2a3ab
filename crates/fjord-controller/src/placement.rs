//! Replica placement for new partitions, as Kafka's KRaft controller places them (its striped
//! placer): replicas go to racks in turn, and to the brokers of a rack in turn, each from a
//! random starting point; every partition starts one rack further, which stripes leaders and
//! followers over the cluster. Unfenced brokers are used before fenced ones, and a leader is never
//! fenced. Once as many partitions as there are unfenced brokers are placed, the order of racks
//! and brokers is shuffled so the same sets do not repeat.
//!
//! Sans-IO and deterministic: the randomness is a seed the caller passes (from the new topic's
//! random id), so a placement can be replayed in tests.

use fjord_common::errors;

use crate::refusal::{refuse, Refusal};

/// A broker that can take replicas: registered and not shutting down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    pub id: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

impl UsableBroker {
    /// An unfenced broker without a rack.
    pub fn live(id: i32) -> Self {
        UsableBroker {
            id,
            rack: None,
            fenced: false,
        }
    }
}

/// splitmix64: a small, well-mixed, seeded generator for the placement's few random choices (and
/// for simulations that must replay from a seed).
pub struct Seeded(pub u64);

impl Seeded {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform-enough index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// Brokers taken in turn from a random start; each new round (epoch) starts one further.
#[derive(Debug, Default)]
struct Turns {
    brokers: Vec<i32>,
    taken: usize,
    offset: usize,
    epoch: usize,
}

impl Turns {
    fn initialize(&mut self, random: &mut Seeded) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = random.below(self.brokers.len());
        }
    }

    /// The next broker of round `epoch`, or None once every one was taken in this round.
    fn next(&mut self, epoch: usize) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.epoch != epoch {
            self.epoch = epoch;
            self.taken = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.taken >= self.brokers.len() {
            return None;
        }
        let broker = self
            .brokers
            .get((self.taken + self.offset) % self.brokers.len())
            .copied();
        self.taken += 1;
        broker
    }
}

#[derive(Debug, Default)]
struct Rack {
    unfenced: Turns,
    fenced: Turns,
}

impl Rack {
    fn next(&mut self, epoch: usize) -> Option<i32> {
        self.unfenced
            .next(epoch)
            .or_else(|| self.fenced.next(epoch))
    }
}

/// Places replicas for partition after partition of one request.
pub struct Placer {
    random: Seeded,
    /// Racks in name order (no rack first), each with its brokers.
    racks: Vec<Rack>,
    total: usize,
    unfenced: usize,
    epoch: usize,
    offset: usize,
}

impl Placer {
    pub fn new(brokers: &[UsableBroker], seed: u64) -> Self {
        let mut random = Seeded(seed);
        let mut names: Vec<Option<&str>> = brokers.iter().map(|b| b.rack.as_deref()).collect();
        names.sort_unstable();
        names.dedup();
        let mut racks: Vec<Rack> = names.iter().map(|_| Rack::default()).collect();
        for broker in brokers {
            let Some(rack) = names
                .binary_search(&broker.rack.as_deref())
                .ok()
                .and_then(|index| racks.get_mut(index))
            else {
                continue;
            };
            if broker.fenced {
                rack.fenced.brokers.push(broker.id);
            } else {
                rack.unfenced.brokers.push(broker.id);
            }
        }
        for rack in &mut racks {
            rack.unfenced.initialize(&mut random);
            rack.fenced.initialize(&mut random);
        }
        let offset = if racks.is_empty() {
            0
        } else {
            random.below(racks.len())
        };
        Placer {
            random,
            racks,
            total: brokers.len(),
            unfenced: brokers.iter().filter(|b| !b.fenced).count(),
            epoch: 0,
            offset,
        }
    }

    /// The replicas of the next partition, leader first.
    pub fn place(&mut self, replication_factor: usize) -> Result<Vec<i32>, Refusal> {
        if replication_factor == 0 {
            return Err(refuse(
                errors::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        if replication_factor > self.total {
            return Err(refuse(
                errors::INVALID_REPLICATION_FACTOR,
                format!(
                    "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered.",
                    self.total
                ),
            ));
        }
        if self.unfenced == 0 {
            return Err(refuse(
                errors::INVALID_REPLICATION_FACTOR,
                "Unable to replicate the partition: All brokers are currently fenced.",
            ));
        }
        if self.epoch == self.unfenced && self.unfenced > 1 {
            self.shuffle();
            self.epoch = 0;
        }
        if self.offset >= self.racks.len() {
            self.offset = 0;
        }
        let racks = self.racks.len();
        let mut replicas = Vec::with_capacity(replication_factor);
        // The leader: the first unfenced broker from the starting rack on.
        // There is an unfenced broker, so some rack has one this round.
        let mut leader_rack = self.offset;
        for _ in 0..racks {
            let next = self
                .racks
                .get_mut(leader_rack)
                .and_then(|r| r.unfenced.next(self.epoch));
            if let Some(broker) = next {
                replicas.push(broker);
                break;
            }
            leader_rack = (leader_rack + 1) % racks;
        }
        // Followers: racks in turn from the starting rack, skipping the leader's once.
        // Each round offers every broker once and there are at least as many as replicas, so
        // this ends; the bound only guards the arithmetic.
        let mut skip = Some(leader_rack);
        let mut rack = self.offset;
        let mut visits = 0;
        while replicas.len() < replication_factor && visits <= 2 * self.total * racks {
            visits += 1;
            let here = rack;
            rack = (rack + 1) % racks;
            if skip == Some(here) {
                skip = None;
                continue;
            }
            if let Some(broker) = self.racks.get_mut(here).and_then(|r| r.next(self.epoch)) {
                replicas.push(broker);
            }
        }
        assert_eq!(replicas.len(), replication_factor, "a replica per slot");
        self.epoch += 1;
        self.offset += 1;
        Ok(replicas)
    }

    fn shuffle(&mut self) {
        self.random.shuffle(&mut self.racks);
        for rack in &mut self.racks {
            self.random.shuffle(&mut rack.unfenced.brokers);
            self.random.shuffle(&mut rack.fenced.brokers);
        }
    }
}

/// A placement seed from a topic id and the partition count it grows from.
pub fn seed(topic_id: &fjord_common::TopicId, first_partition: i32) -> u64 {
    let bytes = topic_id.0;
    let (high, low) = bytes.split_at(8);
    let word = |b: &[u8]| b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
    word(high) ^ word(low).rotate_left(17) ^ (first_partition as u64).wrapping_mul(0x9E37_79B9)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn racked(id: i32, rack: &str) -> UsableBroker {
        UsableBroker {
            id,
            rack: Some(rack.to_string()),
            fenced: false,
        }
    }

    #[test]
    fn replicas_of_a_partition_are_on_distinct_brokers_and_racks() {
        let brokers: Vec<UsableBroker> = (0..9)
            .map(|id| racked(id, ["a", "b", "c"][id as usize % 3]))
            .collect();
        for seed in 0..50 {
            let mut placer = Placer::new(&brokers, seed);
            let mut leaders = BTreeMap::new();
            let mut replicas_of = BTreeMap::new();
            for _ in 0..90 {
                let replicas = placer.place(3).unwrap();
                for id in &replicas {
                    *replicas_of.entry(*id).or_insert(0) += 1;
                }
                let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
                assert_eq!(distinct.len(), 3, "{replicas:?}");
                let racks: BTreeSet<i32> = replicas.iter().map(|id| id % 3).collect();
                assert_eq!(racks.len(), 3, "one replica per rack: {replicas:?}");
                *leaders.entry(replicas[0]).or_insert(0) += 1;
            }
            // Leaders spread over the racks evenly, replicas over the brokers evenly.
            let mut by_rack = [0; 3];
            for (id, n) in &leaders {
                by_rack[*id as usize % 3] += n;
            }
            assert_eq!(by_rack, [30; 3], "seed {seed}: {leaders:?}");
            assert!(
                replicas_of.values().all(|&n| n == 30),
                "seed {seed}: {replicas_of:?}"
            );
        }
    }

    #[test]
    fn without_racks_partitions_stripe_over_the_brokers() {
        let brokers: Vec<UsableBroker> = (1..=3).map(UsableBroker::live).collect();
        let mut placer = Placer::new(&brokers, 7);
        let placed: Vec<Vec<i32>> = (0..3).map(|_| placer.place(2).unwrap()).collect();
        let leaders: BTreeSet<i32> = placed.iter().map(|r| r[0]).collect();
        assert_eq!(leaders.len(), 3, "{placed:?}");
        for replicas in &placed {
            assert_ne!(replicas[0], replicas[1]);
        }
    }

    #[test]
    fn leaders_are_never_fenced_and_too_few_brokers_are_refused() {
        let mut brokers: Vec<UsableBroker> = (1..=3).map(UsableBroker::live).collect();
        brokers[0].fenced = true;
        brokers[1].fenced = true;
        let mut placer = Placer::new(&brokers, 3);
        for _ in 0..10 {
            let replicas = placer.place(3).unwrap();
            assert_eq!(replicas[0], 3, "{replicas:?}");
        }
        let err = Placer::new(&brokers, 3).place(4).unwrap_err();
        assert_eq!(err.error_code, errors::INVALID_REPLICATION_FACTOR);
        assert!(
            err.message.contains("only 3 broker(s) are registered"),
            "{}",
            err.message
        );
        brokers[2].fenced = true;
        let err = Placer::new(&brokers, 3).place(1).unwrap_err();
        assert!(err.message.contains("fenced"), "{}", err.message);
    }
}
