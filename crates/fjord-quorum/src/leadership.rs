//! The quorum's leader changes and elections as this node saw them, for metrics (KRaft's
//! raft-metrics `election-latency` and the controller's leader changes). A plain tracker fed
//! each (term, leader) raft reports, with the time passed in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What this node saw since it first knew a leader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeadershipStats {
    /// Times the (term, leader) it knew changed to another.
    pub leader_changes: u64,
    /// Times it went without a leader (the leader lost, an election under way) and then knew
    /// one again.
    pub elections: u64,
    /// How long those periods without a leader lasted, summed.
    pub election_time: Duration,
    /// How long the last one lasted.
    pub last_election_time: Duration,
}

#[derive(Debug, Default)]
struct Tracker {
    /// The (term, leader) last known; None before the first.
    known: Option<(u64, u64)>,
    /// Since when no leader is known, once one was.
    leaderless_since: Option<Duration>,
    stats: LeadershipStats,
}

impl Tracker {
    /// Raft reports `leader` in `term` at `now` (time since any fixed origin).
    fn observe(&mut self, term: u64, leader: Option<u64>, now: Duration) {
        let Some(leader) = leader else {
            if self.known.is_some() && self.leaderless_since.is_none() {
                self.leaderless_since = Some(now);
            }
            return;
        };
        match self.known {
            Some(known) if known == (term, leader) => {}
            None => self.known = Some((term, leader)),
            Some((known_term, _)) => {
                assert!(term >= known_term, "the quorum's term went back");
                self.known = Some((term, leader));
                self.stats.leader_changes += 1;
            }
        }
        if let Some(since) = self.leaderless_since.take() {
            let took = now.saturating_sub(since);
            self.stats.elections += 1;
            self.stats.election_time += took;
            self.stats.last_election_time = took;
        }
    }
}

/// Shared between the task that watches raft and the quorum's readers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leadership {
    inner: Arc<Mutex<Tracker>>,
}

impl Leadership {
    pub(crate) fn observe(&self, term: u64, leader: Option<u64>, now: Duration) {
        fjord_common::lock(&self.inner).observe(term, leader, now);
    }

    pub(crate) fn stats(&self) -> LeadershipStats {
        fjord_common::lock(&self.inner).stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_lost_leader_and_the_next_one_make_an_election_and_a_change() {
        let mut t = Tracker::default();
        // Start-up: no leader known yet is not an election this node saw end.
        t.observe(0, None, at(0));
        t.observe(1, Some(1), at(500));
        t.observe(1, Some(1), at(900));
        assert_eq!(t.stats, LeadershipStats::default());
        t.observe(2, None, at(1_000));
        t.observe(2, None, at(1_100));
        t.observe(2, Some(3), at(1_250));
        assert_eq!(
            t.stats,
            LeadershipStats {
                leader_changes: 1,
                elections: 1,
                election_time: at(250),
                last_election_time: at(250),
            }
        );
        // A new term learnt without a leaderless moment between: a change, no election seen.
        t.observe(3, Some(2), at(2_000));
        t.observe(4, None, at(3_000));
        t.observe(4, Some(2), at(3_040));
        assert_eq!(t.stats.leader_changes, 3);
        assert_eq!(t.stats.elections, 2);
        assert_eq!(t.stats.election_time, at(290));
        assert_eq!(t.stats.last_election_time, at(40));
    }
}
