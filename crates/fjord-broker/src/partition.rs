//! One partition's replication state on this broker, sans-IO: its role (leader or follower),
//! leader epoch, partition epoch, replicas and ISR as the metadata log last said, and the high
//! watermark, which nothing else decides. The shell (`replica::Partition`) reports what the log
//! did — appends, completed fsyncs — and writes the high watermark this answers into the log.
//!
//! Leader: the high watermark is the offset every ISR member has and that is durable here (in
//! fjord's default fsync mode the durable end; in page-cache mode the log end). With one replica
//! the ISR is this broker; followers' fetch positions join the minimum with ISR replication.
//! Follower: the leader's high watermark, capped at the local log end (ISR replication).

use fjord_common::{BrokerId, LeaderEpoch};

/// What the metadata log says about one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
}

/// This broker's part in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    /// Replicates from `leader` (`-1`: no leader elected).
    Follower {
        leader: BrokerId,
    },
}

/// A metadata change older than what the partition already applied: ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stale partition state: leader epoch {offered} (partition epoch {offered_partition}) after {current} ({current_partition})")]
pub struct StaleEpoch {
    pub offered: LeaderEpoch,
    pub offered_partition: i32,
    pub current: LeaderEpoch,
    pub current_partition: i32,
}

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    local: BrokerId,
    leadership: LeaderAndIsr,
    role: Role,
    /// The local log's end, as last reported.
    log_end_offset: i64,
    /// Below this the local log is durable (or, in page-cache mode, simply written).
    durable_end: i64,
    high_watermark: i64,
}

impl PartitionState {
    /// The state of a partition whose log ends at `log_end_offset`, durable below
    /// `durable_end`, with `high_watermark` as the log holds it (checkpointed or restored).
    pub fn new(
        local: BrokerId,
        leadership: LeaderAndIsr,
        log_end_offset: i64,
        durable_end: i64,
        high_watermark: i64,
    ) -> PartitionState {
        assert!(high_watermark <= log_end_offset, "HW ≤ LEO");
        assert!(durable_end <= log_end_offset, "durable end ≤ LEO");
        let role = role_of(local, &leadership);
        let mut state = PartitionState {
            local,
            leadership,
            role,
            log_end_offset,
            durable_end,
            high_watermark,
        };
        state.advance_high_watermark();
        state
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leadership.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.leadership.partition_epoch
    }

    pub fn leadership(&self) -> &LeaderAndIsr {
        &self.leadership
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// A new leader and ISR from the metadata log. Epochs never go back: an older one is
    /// refused. Returns the new high watermark if it moved.
    pub fn apply(&mut self, leadership: LeaderAndIsr) -> Result<Option<i64>, StaleEpoch> {
        let current = &self.leadership;
        if (leadership.leader_epoch, leadership.partition_epoch)
            < (current.leader_epoch, current.partition_epoch)
        {
            return Err(StaleEpoch {
                offered: leadership.leader_epoch,
                offered_partition: leadership.partition_epoch,
                current: current.leader_epoch,
                current_partition: current.partition_epoch,
            });
        }
        self.role = role_of(self.local, &leadership);
        self.leadership = leadership;
        Ok(self.advance_high_watermark())
    }

    /// The local log now ends at `log_end_offset`; `durable` when the append needs no fsync to
    /// count (page-cache mode). Returns the new high watermark if it moved.
    pub fn on_append(&mut self, log_end_offset: i64, durable: bool) -> Option<i64> {
        assert!(log_end_offset >= self.log_end_offset, "offsets only grow");
        self.log_end_offset = log_end_offset;
        if durable {
            self.durable_end = log_end_offset;
        }
        self.advance_high_watermark()
    }

    /// An fsync made the local log durable below `offset`. Returns the new high watermark if it
    /// moved.
    pub fn on_durable(&mut self, offset: i64) -> Option<i64> {
        let offset = offset.min(self.log_end_offset);
        if offset > self.durable_end {
            self.durable_end = offset;
        }
        self.advance_high_watermark()
    }

    /// The local log was truncated (or restarted) to end at `log_end_offset`: the durable end
    /// and high watermark come down with it, the only way they move back.
    pub fn on_truncate(&mut self, log_end_offset: i64) {
        self.log_end_offset = log_end_offset;
        self.durable_end = self.durable_end.min(log_end_offset);
        self.high_watermark = self.high_watermark.min(log_end_offset);
    }

    /// Raises the high watermark as far as the role allows; it never moves back here.
    fn advance_high_watermark(&mut self) -> Option<i64> {
        let candidate = match self.role {
            // Every ISR member must hold it; until followers replicate, the only replica whose
            // position is known is this one, and a leader whose ISR names others waits.
            Role::Leader if self.leadership.isr.iter().all(|&id| id == self.local) => {
                self.durable_end
            }
            Role::Leader | Role::Follower { .. } => return None,
        };
        if candidate > self.high_watermark {
            debug_assert!(candidate <= self.log_end_offset, "HW ≤ LEO");
            self.high_watermark = candidate;
            Some(candidate)
        } else {
            None
        }
    }
}

fn role_of(local: BrokerId, leadership: &LeaderAndIsr) -> Role {
    if leadership.leader == local {
        Role::Leader
    } else {
        Role::Follower {
            leader: leadership.leader,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn led(leader: BrokerId, epoch: LeaderEpoch, isr: &[BrokerId]) -> LeaderAndIsr {
        LeaderAndIsr {
            leader,
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: isr.to_vec(),
            isr: isr.to_vec(),
        }
    }

    #[test]
    fn a_single_replica_leader_exposes_what_is_durable() {
        let mut p = PartitionState::new(1, led(1, 0, &[1]), 10, 4, 4);
        assert_eq!(p.role(), Role::Leader);
        assert_eq!(p.high_watermark(), 4);
        // Appended, not yet fsynced: not visible.
        assert_eq!(p.on_append(20, false), None);
        assert_eq!(p.on_durable(15), Some(15));
        assert_eq!(p.on_durable(12), None, "the high watermark never goes back");
        // Beyond the log end is clamped.
        assert_eq!(p.on_durable(99), Some(20));
        // Page-cache mode: an append counts at once.
        assert_eq!(p.on_append(25, true), Some(25));
        assert_eq!(p.high_watermark(), 25);
    }

    #[test]
    fn a_restart_raises_a_stale_checkpointed_high_watermark_to_the_durable_end() {
        let p = PartitionState::new(1, led(1, 3, &[1]), 100, 100, 60);
        assert_eq!(p.high_watermark(), 100);
    }

    #[test]
    fn followers_and_leaders_waiting_on_their_isr_do_not_advance() {
        let mut follower = PartitionState::new(2, led(1, 0, &[1, 2]), 10, 10, 0);
        assert_eq!(follower.role(), Role::Follower { leader: 1 });
        assert_eq!(follower.on_durable(10), None);
        assert_eq!(follower.high_watermark(), 0);
        let mut leader = PartitionState::new(1, led(1, 0, &[1, 2]), 10, 10, 0);
        assert_eq!(leader.on_append(12, true), None);
        // The other replica leaves the ISR: what is here is committed.
        assert_eq!(leader.apply(led(1, 1, &[1])), Ok(Some(12)));
    }

    #[test]
    fn epochs_never_go_back() {
        let mut p = PartitionState::new(1, led(1, 5, &[1]), 0, 0, 0);
        assert!(p.apply(led(1, 4, &[1])).is_err());
        assert_eq!(p.leader_epoch(), 5);
        assert_eq!(p.apply(led(2, 6, &[2])), Ok(None));
        assert_eq!(p.role(), Role::Follower { leader: 2 });
        assert_eq!(p.leader_epoch(), 6);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Append(i64, bool),
        Durable(i64),
        Truncate(i64),
        Lead(BrokerId, LeaderEpoch, bool),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0i64..50, any::<bool>()).prop_map(|(n, d)| Step::Append(n, d)),
            (0i64..200).prop_map(Step::Durable),
            (0i64..200).prop_map(Step::Truncate),
            (1i32..3, 0i32..10, any::<bool>()).prop_map(|(l, e, alone)| Step::Lead(l, e, alone)),
        ]
    }

    proptest::proptest! {
        /// Whatever the log and the metadata log report, in any order: HW ≤ LEO, the high
        /// watermark moves back only by truncation, never past what is durable, and epochs
        /// never go back.
        #[test]
        fn invariants_hold_over_any_history(steps in proptest::collection::vec(step(), 0..60)) {
            let mut p = PartitionState::new(1, led(1, 0, &[1]), 0, 0, 0);
            let (mut leo, mut durable) = (0i64, 0i64);
            for step in steps {
                let (hw_before, epoch_before) = (p.high_watermark(), p.leader_epoch());
                match step {
                    Step::Append(n, d) => {
                        leo += n;
                        if d {
                            durable = leo;
                        }
                        p.on_append(leo, d);
                    }
                    Step::Durable(offset) => {
                        durable = durable.max(offset.min(leo));
                        p.on_durable(offset);
                    }
                    Step::Truncate(to) => {
                        leo = leo.min(to);
                        durable = durable.min(leo);
                        p.on_truncate(leo);
                        proptest::prop_assert!(p.high_watermark() <= leo);
                        continue;
                    }
                    Step::Lead(leader, epoch, alone) => {
                        let isr: &[BrokerId] = if alone { &[1] } else { &[1, 2] };
                        let _ = p.apply(led(leader, epoch, isr));
                    }
                }
                proptest::prop_assert!(p.high_watermark() >= hw_before);
                proptest::prop_assert!(p.high_watermark() <= durable);
                proptest::prop_assert!(p.high_watermark() <= leo);
                proptest::prop_assert!(p.leader_epoch() >= epoch_before);
            }
        }
    }

    #[test]
    fn truncation_is_the_only_way_down() {
        let mut p = PartitionState::new(1, led(1, 0, &[1]), 10, 10, 10);
        p.on_truncate(6);
        assert_eq!(p.high_watermark(), 6);
        assert_eq!(p.on_append(8, false), None);
        assert_eq!(p.on_durable(8), Some(8));
    }
}
