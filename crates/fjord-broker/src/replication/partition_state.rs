//! One partition's replication state on this broker, sans-IO: its role (leader or follower),
//! leader epoch, partition epoch, replicas and ISR as the metadata log last said, and how far the
//! high watermark may go, which nothing else decides. The high watermark itself has one home, the
//! partition's `Log` (it bounds reads, retention and the checkpoint, as in Kafka): the shell
//! (`replication::Partition`) reports what the log did — appends, completed fsyncs, follower
//! fetches — and raises the log's high watermark to [`PartitionState::high_watermark_bound`]; the
//! log never lowers it but by truncation.
//!
//! Leader: the bound is the offset every ISR member has: the minimum of this broker's durable end
//! (in fjord's default fsync mode; in page-cache mode the log end) and each other ISR member's
//! position, which is the fetch offset of its last fetch. A follower fetches from its durable end
//! (it syncs what it appended before fetching again), so in fsync mode a record below the high
//! watermark is on the disk of every ISR member. A follower the leader has not heard from since
//! it became leader has no position, so the high watermark stays where it is.
//! Follower: the leader's high watermark, capped at what is durable locally.

use std::collections::BTreeMap;

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

/// What a leader knows of one follower, from its fetches (Kafka's remote replica state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The fetch offset of its last fetch (-1: none since this broker became leader).
    pub log_end_offset: i64,
    /// When it last had everything this leader had (the ISR's lag clock).
    pub last_caught_up_ms: i64,
    /// This leader's log end and the time at its previous fetch.
    last_fetch_leader_log_end: i64,
    last_fetch_ms: i64,
    /// The broker epoch it fetched with (-1: unknown); a new one (the broker restarted,
    /// perhaps with an empty disk) forgets its position (KIP-903).
    pub broker_epoch: i64,
}

/// A fetch from a broker that holds no replica of the partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker {0} is not a replica of this partition")]
pub struct NotAReplica(pub BrokerId);

/// See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    local: BrokerId,
    leadership: LeaderAndIsr,
    role: Role,
    /// Leader only: every other replica's position.
    followers: BTreeMap<BrokerId, FollowerState>,
    /// Leader only: the ISR asked of the controller and not answered yet. Until it is, the
    /// high watermark counts the members of both (Kafka's maximal ISR): an expansion only
    /// takes effect once committed, a shrink only once it is.
    pending_isr: Option<Vec<BrokerId>>,
    /// The pending change's outcome is unknown (no answer): it is asked again as it is.
    resend_pending: bool,
    /// The local log's end, as last reported.
    log_end_offset: i64,
    /// Below this the local log is durable (or, in page-cache mode, simply written).
    durable_end: i64,
    /// Follower only: the high watermark the leader last announced (-1: none yet).
    leader_high_watermark: i64,
}

impl PartitionState {
    /// The state of a partition whose log ends at `log_end_offset`, durable below
    /// `durable_end`.
    pub fn new(
        local: BrokerId,
        leadership: LeaderAndIsr,
        log_end_offset: i64,
        durable_end: i64,
        now_ms: i64,
    ) -> PartitionState {
        assert!(durable_end <= log_end_offset, "durable end ≤ LEO");
        let role = role_of(local, &leadership);
        let mut state = PartitionState {
            local,
            leadership,
            role,
            followers: BTreeMap::new(),
            pending_isr: None,
            resend_pending: false,
            log_end_offset,
            durable_end,
            leader_high_watermark: -1,
        };
        state.reset_followers(now_ms);
        state
    }

    /// A new leadership starts every follower unknown; the ISR members count as caught up now,
    /// so the lag clock starts at the election, as in Kafka.
    fn reset_followers(&mut self, now_ms: i64) {
        self.followers.clear();
        self.pending_isr = None;
        self.resend_pending = false;
        if self.role != Role::Leader {
            return;
        }
        for &id in &self.leadership.replicas {
            if id != self.local {
                self.followers.insert(
                    id,
                    FollowerState {
                        log_end_offset: -1,
                        last_caught_up_ms: if self.leadership.isr.contains(&id) {
                            now_ms
                        } else {
                            0
                        },
                        last_fetch_leader_log_end: -1,
                        last_fetch_ms: now_ms,
                        broker_epoch: -1,
                    },
                );
            }
        }
    }

    /// The follower states a leader tracks (empty on a follower).
    pub fn followers(&self) -> &BTreeMap<BrokerId, FollowerState> {
        &self.followers
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// The replica a consumer in `client_rack` should read `fetch_offset` from, as Kafka's
    /// rack-aware selector picks it (KIP-392): None for this leader (it is in that rack, or no
    /// in-sync follower there has the offset), else the in-sync follower in the rack that is
    /// furthest along, the one caught up most recently on a tie.
    pub fn preferred_read_replica(
        &self,
        fetch_offset: i64,
        client_rack: &str,
        rack_of: impl Fn(BrokerId) -> Option<String>,
    ) -> Option<BrokerId> {
        let in_rack = |id: BrokerId| rack_of(id).is_some_and(|r| r == client_rack);
        if self.role != Role::Leader || client_rack.is_empty() || in_rack(self.local) {
            return None;
        }
        self.followers
            .iter()
            .filter(|(id, f)| {
                self.leadership.isr.contains(id)
                    && f.log_end_offset >= fetch_offset
                    && in_rack(**id)
            })
            .max_by_key(|(_, f)| (f.log_end_offset, f.last_caught_up_ms))
            .map(|(id, _)| *id)
    }

    /// A leader heard a fetch from follower `replica` at `fetch_offset`: everything below it is
    /// on that follower (durable there in fsync mode).
    pub fn on_follower_fetch(
        &mut self,
        replica: BrokerId,
        fetch_offset: i64,
        broker_epoch: i64,
        now_ms: i64,
    ) -> Result<(), NotAReplica> {
        let leader_log_end = self.log_end_offset;
        let Some(follower) = self.followers.get_mut(&replica) else {
            return Err(NotAReplica(replica));
        };
        if broker_epoch != follower.broker_epoch {
            // Another incarnation of that broker: what the last one had proves nothing.
            follower.broker_epoch = broker_epoch;
            follower.last_fetch_leader_log_end = -1;
        }
        // Kafka's lag rule: caught up now if it reached this log end; else caught up at the
        // previous fetch if it reached the log end of then.
        if fetch_offset >= leader_log_end {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= follower.last_fetch_leader_log_end {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(follower.last_fetch_ms);
        }
        follower.last_fetch_leader_log_end = leader_log_end;
        follower.last_fetch_ms = now_ms;
        // A follower ahead of this leader (a divergent tail it has yet to truncate) holds no
        // more of this log than its end.
        follower.log_end_offset = fetch_offset.min(leader_log_end);
        Ok(())
    }

    /// Leader: the ISR change due now, if any and none is pending — Kafka's rules. A member
    /// that has not caught up for `lag_time_max_ms` leaves; a replica joins once it has reached
    /// the log's `high_watermark` and the start of this leader's epoch (`epoch_start_offset`) and
    /// `eligible` says its broker may (registered, unfenced, not shutting down). The new ISR
    /// keeps replica order. The change stays pending until `apply` brings its outcome, or
    /// `isr_change_done`.
    pub fn propose_isr_change(
        &mut self,
        now_ms: i64,
        lag_time_max_ms: i64,
        epoch_start_offset: i64,
        high_watermark: i64,
        eligible: impl Fn(BrokerId) -> bool,
    ) -> Option<Vec<BrokerId>> {
        if self.role != Role::Leader {
            return None;
        }
        if let Some(pending) = &self.pending_isr {
            // Unanswered: it may have committed, so the same change is asked again, never
            // another (the metadata log settles it either way).
            return std::mem::take(&mut self.resend_pending).then(|| pending.clone());
        }
        let isr = &self.leadership.isr;
        let in_sync = |id: BrokerId| -> bool {
            if id == self.local {
                return true;
            }
            let Some(f) = self.followers.get(&id) else {
                return false;
            };
            if isr.contains(&id) {
                f.log_end_offset >= self.log_end_offset
                    || now_ms.saturating_sub(f.last_caught_up_ms) <= lag_time_max_ms
            } else {
                f.log_end_offset >= high_watermark
                    && f.log_end_offset >= epoch_start_offset
                    && eligible(id)
            }
        };
        let proposed: Vec<BrokerId> = self
            .leadership
            .replicas
            .iter()
            .copied()
            .filter(|&id| in_sync(id))
            .collect();
        let same = proposed.len() == isr.len() && proposed.iter().all(|id| isr.contains(id));
        if same {
            return None;
        }
        self.pending_isr = Some(proposed.clone());
        Some(proposed)
    }

    /// The controller refused the pending ISR change (it was not committed): the next check may
    /// propose again.
    pub fn isr_change_done(&mut self) {
        self.pending_isr = None;
        self.resend_pending = false;
    }

    /// The pending ISR change got no answer (the controller unreachable, the commit timed out):
    /// it may have committed, so it stays pending — the high watermark keeps counting both
    /// ISRs — and is asked again.
    pub fn isr_change_unknown(&mut self) {
        self.resend_pending = self.pending_isr.is_some();
    }

    pub fn pending_isr(&self) -> Option<&[BrokerId]> {
        self.pending_isr.as_deref()
    }

    /// A follower learned the leader's high watermark from a fetch response.
    pub fn on_leader_high_watermark(&mut self, leader_high_watermark: i64) {
        if matches!(self.role, Role::Follower { .. }) {
            self.leader_high_watermark = self.leader_high_watermark.max(leader_high_watermark);
        }
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

    pub fn durable_end(&self) -> i64 {
        self.durable_end
    }

    /// A new leader and ISR from the metadata log. Epochs never go back: an older one is
    /// refused.
    pub fn apply(&mut self, leadership: LeaderAndIsr, now_ms: i64) -> Result<(), StaleEpoch> {
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
        let new_leadership = leadership.leader_epoch != current.leader_epoch;
        let previous_epoch = current.leader_epoch;
        if leadership.partition_epoch != current.partition_epoch {
            // Whatever was pending was decided (this is its outcome) or overtaken.
            self.pending_isr = None;
            self.resend_pending = false;
        }
        let was = self.role;
        self.role = role_of(self.local, &leadership);
        self.leadership = leadership;
        assert!(
            self.leadership.leader_epoch >= previous_epoch,
            "leader epochs never go back"
        );
        if new_leadership || was != self.role {
            self.reset_followers(now_ms);
            // A new leader's high watermark comes from its own fetch answers.
            self.leader_high_watermark = -1;
        } else {
            // Same leadership, new ISR or replicas: known positions stay, new replicas start
            // unknown, removed ones go.
            let replicas = &self.leadership.replicas;
            self.followers.retain(|id, _| replicas.contains(id));
            for &id in replicas {
                if id != self.local && self.role == Role::Leader {
                    self.followers.entry(id).or_insert(FollowerState {
                        log_end_offset: -1,
                        last_caught_up_ms: 0,
                        last_fetch_leader_log_end: -1,
                        last_fetch_ms: now_ms,
                        broker_epoch: -1,
                    });
                }
            }
        }
        Ok(())
    }

    /// The local log now ends at `log_end_offset`; `durable` when the append needs no fsync to
    /// count (page-cache mode).
    pub fn on_append(&mut self, log_end_offset: i64, durable: bool) {
        assert!(log_end_offset >= self.log_end_offset, "offsets only grow");
        self.log_end_offset = log_end_offset;
        if durable {
            self.durable_end = log_end_offset;
        }
    }

    /// An fsync made the local log durable below `offset`.
    pub fn on_durable(&mut self, offset: i64) {
        let offset = offset.min(self.log_end_offset);
        if offset > self.durable_end {
            self.durable_end = offset;
        }
    }

    /// The local log was truncated (or restarted) to end at `log_end_offset`: the durable end
    /// comes down with it (and the log's high watermark, the only way it moves back).
    pub fn on_truncate(&mut self, log_end_offset: i64) {
        // A leader never truncates its log: its high watermark never moves back while it leads.
        assert!(
            matches!(self.role, Role::Follower { .. }),
            "the HW never moves back within a leadership: a leader truncated its log"
        );
        self.log_end_offset = log_end_offset;
        self.durable_end = self.durable_end.min(log_end_offset);
    }

    /// How far the high watermark may go now (see the module docs); the log raises its own to
    /// this and never lowers it here. -1 when nothing is known yet (a follower unheard of).
    pub fn high_watermark_bound(&self) -> i64 {
        let bound = match self.role {
            // Every ISR member must hold it: this broker durably, each other member as far as
            // its last fetch (unknown: nothing yet).
            Role::Leader => self
                .leadership
                .isr
                .iter()
                .chain(self.pending_isr.iter().flatten())
                .filter(|&&id| id != self.local)
                .map(|id| self.followers.get(id).map_or(-1, |f| f.log_end_offset))
                .fold(self.durable_end, i64::min),
            Role::Follower { .. } => self.leader_high_watermark.min(self.durable_end),
        };
        assert!(bound <= self.log_end_offset, "HW ≤ LEO");
        bound
    }
}

/// What a leader answers a follower's fetch at `fetch_offset` whose last fetched batch was of
/// `last_fetched_epoch` (-1: none), in Kafka's order: below the log start is out of range; then a
/// divergence (KIP-320: `end_offset_for_epoch` gives the largest epoch here at most the
/// follower's and where it ends; older than the follower's, or ending before its fetch offset,
/// the logs diverged there); only then past the log end is out of range. So a follower holding a
/// tail of an old epoch past a new leader's end truncates that tail alone, never back to a high
/// watermark that may be stale on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetch {
    Read,
    Diverged { epoch: LeaderEpoch, end_offset: i64 },
    OutOfRange,
}

pub fn check_follower_fetch(
    fetch_offset: i64,
    last_fetched_epoch: LeaderEpoch,
    log_start_offset: i64,
    log_end_offset: i64,
    end_offset_for_epoch: impl Fn(LeaderEpoch) -> (LeaderEpoch, i64),
) -> FollowerFetch {
    if fetch_offset < log_start_offset {
        return FollowerFetch::OutOfRange;
    }
    if last_fetched_epoch >= 0 {
        let (epoch, end_offset) = end_offset_for_epoch(last_fetched_epoch);
        // (-1, -1), an epoch newer than any here, cannot be told on the wire (it is the
        // field's default): the fetch offset then decides (out of range past the log end).
        if epoch >= 0 && (epoch < last_fetched_epoch || end_offset < fetch_offset) {
            return FollowerFetch::Diverged { epoch, end_offset };
        }
    }
    if fetch_offset > log_end_offset {
        return FollowerFetch::OutOfRange;
    }
    FollowerFetch::Read
}

/// Where a follower truncates when its leader answers that their logs diverged (KIP-320): the
/// leader's largest epoch at most the follower's last fetched one is `diverging_epoch`, ending
/// at `diverging_end` on the leader. `local` is this log's own answer for that epoch
/// (`end_offset_for_epoch`), `log_end` its end. When this log knows the epoch the two agree
/// up to the smaller end; when it only knows older ones it truncates to where its largest
/// older epoch ends, and the next fetch, with that epoch, checks again; when it knows none,
/// to the leader's end. Never past the log end.
pub fn divergence_truncation(
    diverging_epoch: LeaderEpoch,
    diverging_end: i64,
    local: (LeaderEpoch, i64),
    log_end: i64,
) -> i64 {
    let (local_epoch, local_end) = local;
    let to = if local_epoch == diverging_epoch {
        diverging_end.min(local_end)
    } else if local_epoch >= 0 && local_end >= 0 {
        local_end
    } else {
        diverging_end
    };
    to.min(log_end).max(0)
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

    fn led_isr(
        leader: BrokerId,
        epoch: LeaderEpoch,
        partition_epoch: i32,
        replicas: &[BrokerId],
        isr: &[BrokerId],
    ) -> LeaderAndIsr {
        LeaderAndIsr {
            leader,
            leader_epoch: epoch,
            partition_epoch,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
        }
    }

    fn led(leader: BrokerId, epoch: LeaderEpoch, isr: &[BrokerId]) -> LeaderAndIsr {
        LeaderAndIsr {
            leader,
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: isr.to_vec(),
            isr: isr.to_vec(),
        }
    }

    /// The state with the high watermark its log would hold: raised to the state's bound after
    /// each event, never lowered but by truncation (`Log::raise_high_watermark`).
    struct Replica {
        state: PartitionState,
        hw: i64,
    }

    impl Replica {
        fn new(
            local: BrokerId,
            leadership: LeaderAndIsr,
            log_end_offset: i64,
            durable_end: i64,
            hw: i64,
            now_ms: i64,
        ) -> Replica {
            let state = PartitionState::new(local, leadership, log_end_offset, durable_end, now_ms);
            let mut replica = Replica { state, hw };
            replica.raise();
            replica
        }

        /// Raises the high watermark to the bound; returns it if it moved.
        fn raise(&mut self) -> Option<i64> {
            let bound = self.state.high_watermark_bound();
            (bound > self.hw).then(|| {
                self.hw = bound;
                bound
            })
        }

        fn on_append(&mut self, log_end_offset: i64, durable: bool) -> Option<i64> {
            self.state.on_append(log_end_offset, durable);
            self.raise()
        }

        fn on_durable(&mut self, offset: i64) -> Option<i64> {
            self.state.on_durable(offset);
            self.raise()
        }

        fn on_follower_fetch(
            &mut self,
            replica: BrokerId,
            fetch_offset: i64,
            broker_epoch: i64,
            now_ms: i64,
        ) -> Result<Option<i64>, NotAReplica> {
            self.state
                .on_follower_fetch(replica, fetch_offset, broker_epoch, now_ms)?;
            Ok(self.raise())
        }

        fn on_leader_high_watermark(&mut self, hw: i64) -> Option<i64> {
            self.state.on_leader_high_watermark(hw);
            self.raise()
        }

        fn apply(
            &mut self,
            leadership: LeaderAndIsr,
            now_ms: i64,
        ) -> Result<Option<i64>, StaleEpoch> {
            self.state.apply(leadership, now_ms)?;
            Ok(self.raise())
        }

        fn on_truncate(&mut self, log_end_offset: i64) {
            self.state.on_truncate(log_end_offset);
            self.hw = self.hw.min(log_end_offset);
        }

        fn propose_isr_change(
            &mut self,
            now_ms: i64,
            lag_time_max_ms: i64,
            epoch_start_offset: i64,
            eligible: impl Fn(BrokerId) -> bool,
        ) -> Option<Vec<BrokerId>> {
            self.state.propose_isr_change(
                now_ms,
                lag_time_max_ms,
                epoch_start_offset,
                self.hw,
                eligible,
            )
        }

        fn high_watermark(&self) -> i64 {
            self.hw
        }
    }

    impl std::ops::Deref for Replica {
        type Target = PartitionState;

        fn deref(&self) -> &PartitionState {
            &self.state
        }
    }

    impl std::ops::DerefMut for Replica {
        fn deref_mut(&mut self) -> &mut PartitionState {
            &mut self.state
        }
    }

    #[test]
    fn a_single_replica_leader_exposes_what_is_durable() {
        let mut p = Replica::new(1, led(1, 0, &[1]), 10, 4, 4, 0);
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
    fn consumers_are_sent_to_the_in_sync_follower_in_their_rack_furthest_along() {
        // Leader 1 in rack a; 2 and 3 in rack b, 4 in rack b but out of the ISR.
        let racks = |id: BrokerId| Some(if id == 1 { "a" } else { "b" }.to_string());
        let mut p = Replica::new(1, led_isr(1, 0, 0, &[1, 2, 3, 4], &[1, 2, 3]), 10, 10, 0, 0);
        for (id, offset) in [(2, 8), (3, 10), (4, 10)] {
            p.on_follower_fetch(id, offset, -1, 1).unwrap();
        }
        assert_eq!(p.preferred_read_replica(5, "b", racks), Some(3));
        // Only replicas that have the offset.
        assert_eq!(p.preferred_read_replica(10, "b", racks), Some(3));
        assert_eq!(p.preferred_read_replica(11, "b", racks), None);
        // The leader's own rack, an unknown rack, no rack: the leader serves.
        assert_eq!(p.preferred_read_replica(5, "a", racks), None);
        assert_eq!(p.preferred_read_replica(5, "c", racks), None);
        assert_eq!(p.preferred_read_replica(5, "", racks), None);
        // Followers send nobody anywhere.
        let f = Replica::new(2, led_isr(1, 0, 0, &[1, 2, 3], &[1, 2, 3]), 10, 10, 0, 0);
        assert_eq!(f.preferred_read_replica(5, "b", racks), None);
    }

    #[test]
    fn a_follower_past_a_new_leaders_end_hears_of_the_divergence_not_out_of_range() {
        // The leader: epoch 0 ends at 46, epoch 1 from there to its end at 48.
        let epochs = |e: LeaderEpoch| if e >= 1 { (1, 48) } else { (0, 46) };
        // A follower with one more entry of epoch 0 (offsets 0..47), past what the leader kept.
        assert_eq!(
            check_follower_fetch(47, 0, 0, 46, epochs),
            FollowerFetch::Diverged {
                epoch: 0,
                end_offset: 46
            }
        );
        assert_eq!(
            check_follower_fetch(46, 0, 0, 48, epochs),
            FollowerFetch::Read
        );
        // Past the end in the leader's own epoch: that epoch ends at the leader's end.
        assert_eq!(
            check_follower_fetch(49, 1, 0, 48, epochs),
            FollowerFetch::Diverged {
                epoch: 1,
                end_offset: 48
            }
        );
        assert_eq!(
            check_follower_fetch(3, 0, 5, 48, epochs),
            FollowerFetch::OutOfRange
        );
        // No epoch to go by: past the end is out of range.
        assert_eq!(
            check_follower_fetch(47, -1, 0, 46, epochs),
            FollowerFetch::OutOfRange
        );
    }

    #[test]
    fn a_restart_raises_a_stale_checkpointed_high_watermark_to_the_durable_end() {
        let p = Replica::new(1, led(1, 3, &[1]), 100, 100, 60, 0);
        assert_eq!(p.high_watermark(), 100);
        assert_eq!(p.high_watermark_bound(), 100);
    }

    #[test]
    fn followers_and_leaders_waiting_on_their_isr_do_not_advance() {
        let mut follower = Replica::new(2, led(1, 0, &[1, 2]), 10, 10, 0, 0);
        assert_eq!(follower.role(), Role::Follower { leader: 1 });
        assert_eq!(follower.on_durable(10), None);
        assert_eq!(follower.high_watermark(), 0);
        let mut leader = Replica::new(1, led(1, 0, &[1, 2]), 10, 10, 0, 0);
        assert_eq!(leader.on_append(12, true), None);
        // The other replica leaves the ISR: what is here is committed.
        assert_eq!(leader.apply(led(1, 1, &[1]), 0), Ok(Some(12)));
    }

    #[test]
    fn epochs_never_go_back() {
        let mut p = Replica::new(1, led(1, 5, &[1]), 0, 0, 0, 0);
        assert!(p.apply(led(1, 4, &[1]), 0).is_err());
        assert_eq!(p.leader_epoch(), 5);
        assert_eq!(p.apply(led(2, 6, &[2]), 0), Ok(None));
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
            let mut p = Replica::new(1, led(1, 0, &[1]), 0, 0, 0, 0);
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
                    // Only a follower truncates (a leader's log only grows).
                    Step::Truncate(_) if p.role() == Role::Leader => continue,
                    Step::Truncate(to) => {
                        leo = leo.min(to);
                        durable = durable.min(leo);
                        p.on_truncate(leo);
                        proptest::prop_assert!(p.high_watermark() <= leo);
                        continue;
                    }
                    Step::Lead(leader, epoch, alone) => {
                        let isr: &[BrokerId] = if alone { &[1] } else { &[1, 2] };
                        let _ = p.apply(led(leader, epoch, isr), 0);
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
    fn a_leaders_high_watermark_is_the_least_position_in_its_isr() {
        let mut leader = Replica::new(1, led(1, 0, &[1, 2, 3]), 0, 0, 0, 0);
        assert_eq!(leader.on_append(10, true), None, "followers unknown");
        assert_eq!(leader.on_follower_fetch(2, 6, -1, 1), Ok(None));
        assert_eq!(leader.on_follower_fetch(3, 4, -1, 1), Ok(Some(4)));
        assert_eq!(leader.on_follower_fetch(3, 10, -1, 2), Ok(Some(6)));
        assert_eq!(leader.on_follower_fetch(2, 10, -1, 2), Ok(Some(10)));
        assert_eq!(
            leader.on_follower_fetch(4, 10, -1, 2),
            Err(NotAReplica(4)),
            "not a replica"
        );
        // A follower out of the ISR does not hold it back.
        assert_eq!(
            leader.apply(led_isr(1, 0, 1, &[1, 2, 3], &[1, 2]), 3),
            Ok(None)
        );
        assert_eq!(leader.on_append(12, true), None);
        assert_eq!(leader.on_follower_fetch(2, 12, -1, 4), Ok(Some(12)));
        // A follower ahead (a divergent tail) counts only up to this log's end.
        assert_eq!(leader.on_follower_fetch(3, 99, -1, 5), Ok(None));
        assert_eq!(leader.followers()[&3].log_end_offset, 12);
    }

    #[test]
    fn in_fsync_mode_the_leader_waits_for_its_own_disk_too() {
        let mut leader = Replica::new(1, led(1, 0, &[1, 2]), 0, 0, 0, 0);
        assert_eq!(leader.on_append(10, false), None);
        assert_eq!(leader.on_follower_fetch(2, 10, -1, 1), Ok(None));
        assert_eq!(leader.on_durable(10), Some(10));
    }

    #[test]
    fn the_lag_clock_follows_kafkas_caught_up_rule() {
        let mut leader = Replica::new(1, led(1, 0, &[1, 2]), 0, 0, 0, 0);
        leader.on_append(10, true);
        leader.on_follower_fetch(2, 5, -1, 100).unwrap();
        assert_eq!(leader.followers()[&2].last_caught_up_ms, 0, "behind");
        leader.on_append(20, true);
        // Reached the log end of its previous fetch: caught up as of then.
        leader.on_follower_fetch(2, 10, -1, 200).unwrap();
        assert_eq!(leader.followers()[&2].last_caught_up_ms, 100);
        leader.on_follower_fetch(2, 20, -1, 300).unwrap();
        assert_eq!(leader.followers()[&2].last_caught_up_ms, 300);
    }

    #[test]
    fn a_new_leadership_forgets_follower_positions() {
        let mut p = Replica::new(1, led(1, 0, &[1, 2]), 10, 10, 0, 0);
        p.on_follower_fetch(2, 10, -1, 1).unwrap();
        assert_eq!(p.high_watermark(), 10);
        p.on_append(15, true);
        assert_eq!(p.apply(led(1, 1, &[1, 2]), 2), Ok(None));
        assert_eq!(p.followers()[&2].log_end_offset, -1);
        assert_eq!(p.on_follower_fetch(2, 15, -1, 3), Ok(Some(15)));
    }

    #[test]
    fn a_followers_high_watermark_is_the_leaders_capped_at_its_durable_end() {
        let mut f = Replica::new(2, led(1, 0, &[1, 2]), 0, 0, 0, 0);
        f.on_append(10, false);
        assert_eq!(f.on_leader_high_watermark(8), None, "not durable here");
        // The leader's high watermark is kept: the fsync alone lets it through.
        assert_eq!(f.on_durable(10), Some(8));
        assert_eq!(f.on_leader_high_watermark(8), None);
        assert_eq!(f.on_leader_high_watermark(20), Some(10));
        assert_eq!(f.on_leader_high_watermark(5), None, "never back");
        assert!(f.followers().is_empty());
    }

    #[test]
    fn a_divergent_tail_is_cut_where_the_epochs_part() {
        // Same epoch on both: the smaller end.
        assert_eq!(divergence_truncation(3, 40, (3, 55), 60), 40);
        assert_eq!(divergence_truncation(3, 70, (3, 55), 60), 55);
        // Only older epochs here: to where the largest of them ends, then ask again.
        assert_eq!(divergence_truncation(3, 40, (2, 30), 60), 30);
        // No epoch here at all: to the leader's end, never past this log's.
        assert_eq!(divergence_truncation(3, 40, (-1, -1), 60), 40);
        assert_eq!(divergence_truncation(3, 40, (-1, -1), 20), 20);
    }

    #[test]
    fn a_lagging_member_leaves_the_isr_and_a_caught_up_replica_joins() {
        let all = |_| true;
        let mut p = Replica::new(1, led_isr(1, 2, 5, &[1, 2, 3], &[1, 2]), 0, 0, 0, 1000);
        p.on_append(10, true);
        // Broker 2 was caught up at the election (1000): in sync until 1000 + lag.
        assert_eq!(p.propose_isr_change(1500, 1000, 0, all), None);
        // Broker 3 reaches the high watermark (0) and the epoch start: it joins.
        p.on_follower_fetch(3, 10, -1, 1600).unwrap();
        assert_eq!(
            p.propose_isr_change(1600, 1000, 0, all),
            Some(vec![1, 2, 3])
        );
        assert_eq!(p.pending_isr(), Some(&[1, 2, 3][..]));
        assert_eq!(
            p.propose_isr_change(1700, 1000, 0, all),
            None,
            "one at a time"
        );
        // Pending, the high watermark counts broker 3 too (the maximal ISR).
        p.on_follower_fetch(2, 10, -1, 1700).unwrap();
        assert_eq!(p.high_watermark(), 10);
        // Committed: the controller's answer is applied.
        assert_eq!(
            p.apply(led_isr(1, 2, 6, &[1, 2, 3], &[1, 2, 3]), 1800),
            Ok(None)
        );
        assert_eq!(p.pending_isr(), None);
        // Broker 2 falls behind for longer than the lag: it leaves.
        p.on_append(20, true);
        p.on_follower_fetch(3, 20, -1, 2900).unwrap();
        assert_eq!(p.propose_isr_change(2900, 1000, 0, all), Some(vec![1, 3]));
        p.isr_change_done();
        // A fenced broker, or one that has not reached this leader's epoch, does not join.
        let mut p = Replica::new(1, led_isr(1, 2, 5, &[1, 2], &[1]), 10, 10, 10, 0);
        p.on_follower_fetch(2, 10, -1, 1).unwrap();
        assert_eq!(p.propose_isr_change(1, 1000, 0, |_| false), None);
        assert_eq!(p.propose_isr_change(1, 1000, 11, all), None);
        assert_eq!(p.propose_isr_change(1, 1000, 10, all), Some(vec![1, 2]));
    }

    #[test]
    fn an_unanswered_isr_change_stays_pending_and_is_asked_again_unchanged() {
        let all = |_| true;
        let mut p = Replica::new(1, led_isr(1, 0, 0, &[1, 2], &[1]), 10, 10, 10, 0);
        p.on_follower_fetch(2, 10, 7, 1).unwrap();
        assert_eq!(p.propose_isr_change(1, 1000, 0, all), Some(vec![1, 2]));
        // No answer: it may have committed. The maximal ISR holds, and the same change goes
        // again once, whatever the followers do meanwhile.
        p.isr_change_unknown();
        p.on_append(20, true);
        assert_eq!(p.high_watermark(), 10, "broker 2 still counts");
        assert_eq!(p.propose_isr_change(2, 1000, 0, all), Some(vec![1, 2]));
        assert_eq!(p.propose_isr_change(3, 1000, 0, all), None);
        // The metadata log brings the outcome.
        assert_eq!(p.apply(led_isr(1, 0, 1, &[1, 2], &[1, 2]), 4), Ok(None));
        assert_eq!(p.pending_isr(), None);
    }

    #[test]
    fn a_follower_under_a_new_broker_epoch_starts_its_lag_afresh() {
        let mut p = Replica::new(1, led_isr(1, 0, 0, &[1, 2], &[1, 2]), 10, 10, 10, 0);
        p.on_follower_fetch(2, 10, 7, 100).unwrap();
        assert_eq!(p.followers()[&2].broker_epoch, 7);
        p.on_append(20, true);
        // Restarted (epoch 9), behind: not caught up as of its predecessor's last fetch.
        p.on_follower_fetch(2, 12, 9, 200).unwrap();
        assert_eq!(p.followers()[&2].broker_epoch, 9);
        assert_eq!(p.followers()[&2].last_caught_up_ms, 100);
    }

    #[test]
    fn truncation_is_the_only_way_down() {
        // A follower of broker 2 truncates its divergent tail, then leads.
        let mut p = Replica::new(1, led(2, 0, &[1, 2]), 10, 10, 10, 0);
        p.on_truncate(6);
        assert_eq!(p.high_watermark(), 6);
        assert_eq!(p.apply(led(1, 1, &[1]), 0), Ok(None));
        assert_eq!(p.on_append(8, false), None);
        assert_eq!(p.on_durable(8), Some(8));
    }

    #[test]
    #[should_panic(expected = "a leader truncated its log")]
    fn a_leader_truncating_its_log_is_a_bug() {
        let mut p = Replica::new(1, led(1, 0, &[1]), 10, 10, 10, 0);
        p.on_truncate(6);
    }
}
