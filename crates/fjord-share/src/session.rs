//! Share sessions: which partitions a share consumer fetches from one broker, and the epoch its
//! requests must carry.
//!
//! A session is a (group, member) pair's. Epoch 0 opens it (replacing one the member had, whose
//! records the member keeps), -1 closes it (releasing them), and each request in between carries
//! the epoch the previous one left, which then moves on (1 follows `i32::MAX`). When the cache is
//! full, the session unused longest is evicted if it has been idle for the eviction time (its
//! records released), else the new one is refused with SHARE_SESSION_LIMIT_REACHED; a request for
//! a session that is gone gets SHARE_SESSION_NOT_FOUND. A session belongs to the connection that
//! opened it: that connection closing ends it (its records released).

use std::collections::{BTreeSet, HashMap};

use fjord_common::errors;
use fjord_common::Uuid;

/// Partitions one session may name at most: bounds what a client can make a session hold.
pub const MAX_SESSION_PARTITIONS: usize = 10_000;

/// A session's owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub group_id: String,
    pub member_id: String,
}

/// A partition of a session, by topic id.
pub type SessionPartition = (Uuid, i32);

#[derive(Debug)]
struct Session {
    /// The connection that opened it (the broker's own identifier).
    connection: u64,
    epoch: i32,
    partitions: BTreeSet<SessionPartition>,
    last_used_ms: i64,
}

/// What a request did to its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStep {
    /// The session (new or continued) and every partition it now has, to fetch from.
    Fetch(Vec<SessionPartition>),
    /// The session is closed; the partitions it had, whose acquired records the member no longer
    /// holds.
    Closed(Vec<SessionPartition>),
}

/// The share sessions of one broker, bounded in number (`group.share.max.share.sessions`).
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<SessionKey, Session>,
    max_sessions: usize,
    /// A session unused this long may be evicted to make room.
    eviction_ms: i64,
}

impl ShareSessions {
    pub fn new(max_sessions: usize, eviction_ms: i64) -> ShareSessions {
        ShareSessions {
            sessions: HashMap::new(),
            max_sessions,
            eviction_ms,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn set_max_sessions(&mut self, max_sessions: usize) {
        self.max_sessions = max_sessions;
    }

    /// A ShareFetch's effect on its session: `epoch` as the request carries it, `added` the
    /// partitions it names, `forgotten` those it drops. Refused with Kafka's error code. A
    /// session this evicts (an idle one) goes into `ended`: its member's acquired records on its
    /// partitions are to be released.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &mut self,
        key: &SessionKey,
        connection: u64,
        epoch: i32,
        added: &[SessionPartition],
        forgotten: &[SessionPartition],
        now_ms: i64,
        ended: &mut Vec<(SessionKey, Vec<SessionPartition>)>,
    ) -> Result<SessionStep, i16> {
        match epoch {
            0 => {
                if added.len() > MAX_SESSION_PARTITIONS {
                    return Err(errors::INVALID_REQUEST);
                }
                if self.sessions.remove(key).is_some() {
                    // Reopened: the member keeps what it acquired and may still acknowledge it.
                } else if self.sessions.len() >= self.max_sessions {
                    match self.evict_one(now_ms) {
                        Some(evicted) => ended.push(evicted),
                        None => return Err(errors::SHARE_SESSION_LIMIT_REACHED),
                    }
                }
                let partitions: BTreeSet<SessionPartition> = added.iter().copied().collect();
                let step = SessionStep::Fetch(partitions.iter().copied().collect());
                self.sessions.insert(
                    key.clone(),
                    Session {
                        connection,
                        epoch: 1,
                        partitions,
                        last_used_ms: now_ms,
                    },
                );
                Ok(step)
            }
            -1 => self.close(key),
            _ => {
                let session = self.current(key, epoch)?;
                if session.partitions.len() + added.len() > MAX_SESSION_PARTITIONS {
                    return Err(errors::INVALID_REQUEST);
                }
                // Added first, then forgotten, as Kafka does: a partition a request names only to
                // acknowledge records of it is forgotten in the same request.
                session.partitions.extend(added.iter().copied());
                for p in forgotten {
                    session.partitions.remove(p);
                }
                session.epoch = next_epoch(session.epoch);
                session.last_used_ms = now_ms;
                Ok(SessionStep::Fetch(
                    session.partitions.iter().copied().collect(),
                ))
            }
        }
    }

    /// A ShareAcknowledge's effect: it continues (moving the epoch on) or closes (-1) the
    /// session; epoch 0 is refused, as acknowledging needs a session.
    pub fn acknowledge(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        now_ms: i64,
    ) -> Result<SessionStep, i16> {
        match epoch {
            0 => Err(errors::INVALID_SHARE_SESSION_EPOCH),
            -1 => self.close(key),
            _ => {
                let session = self.current(key, epoch)?;
                session.epoch = next_epoch(session.epoch);
                session.last_used_ms = now_ms;
                Ok(SessionStep::Fetch(
                    session.partitions.iter().copied().collect(),
                ))
            }
        }
    }

    /// Ends the sessions `connection` opened (it closed): each one's key and partitions.
    pub fn connection_closed(
        &mut self,
        connection: u64,
    ) -> Vec<(SessionKey, Vec<SessionPartition>)> {
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let session = self.sessions.remove(&k)?;
                Some((k, session.partitions.into_iter().collect()))
            })
            .collect()
    }

    fn close(&mut self, key: &SessionKey) -> Result<SessionStep, i16> {
        match self.sessions.remove(key) {
            Some(session) => Ok(SessionStep::Closed(
                session.partitions.into_iter().collect(),
            )),
            None => Err(errors::SHARE_SESSION_NOT_FOUND),
        }
    }

    fn current(&mut self, key: &SessionKey, epoch: i32) -> Result<&mut Session, i16> {
        let session = self
            .sessions
            .get_mut(key)
            .ok_or(errors::SHARE_SESSION_NOT_FOUND)?;
        if session.epoch != epoch {
            return Err(errors::INVALID_SHARE_SESSION_EPOCH);
        }
        Ok(session)
    }

    /// Evicts the least recently used session idle for the eviction time, if there is one.
    fn evict_one(&mut self, now_ms: i64) -> Option<(SessionKey, Vec<SessionPartition>)> {
        let key = self
            .sessions
            .iter()
            .filter(|(_, s)| now_ms - s.last_used_ms >= self.eviction_ms)
            .min_by_key(|(_, s)| s.last_used_ms)
            .map(|(k, _)| k.clone())?;
        let session = self.sessions.remove(&key)?;
        Some((key, session.partitions.into_iter().collect()))
    }
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: &str) -> SessionKey {
        SessionKey {
            group_id: "g".into(),
            member_id: member.into(),
        }
    }

    const P0: SessionPartition = (Uuid::ZERO, 0);
    const P1: SessionPartition = (Uuid::ZERO, 1);

    #[test]
    fn epochs_open_continue_and_close() {
        let mut s = ShareSessions::new(10, 60_000);
        let mut replaced = Vec::new();
        assert_eq!(
            s.fetch(&key("a"), 1, 0, &[P0], &[], 0, &mut replaced),
            Ok(SessionStep::Fetch(vec![P0]))
        );
        assert_eq!(
            s.fetch(&key("a"), 1, 2, &[], &[], 0, &mut replaced),
            Err(errors::INVALID_SHARE_SESSION_EPOCH)
        );
        assert_eq!(
            s.fetch(&key("a"), 1, 1, &[P1], &[P0], 0, &mut replaced),
            Ok(SessionStep::Fetch(vec![P1]))
        );
        assert_eq!(
            s.acknowledge(&key("a"), 2, 0),
            Ok(SessionStep::Fetch(vec![P1]))
        );
        assert_eq!(
            s.acknowledge(&key("a"), -1, 0),
            Ok(SessionStep::Closed(vec![P1]))
        );
        assert_eq!(
            s.fetch(&key("a"), 1, 3, &[], &[], 0, &mut replaced),
            Err(errors::SHARE_SESSION_NOT_FOUND)
        );
        assert_eq!(
            s.acknowledge(&key("b"), 0, 0),
            Err(errors::INVALID_SHARE_SESSION_EPOCH)
        );
        assert!(replaced.is_empty());
    }

    #[test]
    fn a_partition_both_named_and_forgotten_is_forgotten() {
        let mut s = ShareSessions::new(10, 60_000);
        let mut ended = Vec::new();
        s.fetch(&key("a"), 1, 0, &[P0, P1], &[], 0, &mut ended).ok();
        assert_eq!(
            s.fetch(&key("a"), 1, 1, &[P1], &[P1], 0, &mut ended),
            Ok(SessionStep::Fetch(vec![P0]))
        );
    }

    #[test]
    fn reopening_replaces_the_old_session() {
        let mut s = ShareSessions::new(10, 60_000);
        let mut replaced = Vec::new();
        s.fetch(&key("a"), 1, 0, &[P0], &[], 0, &mut replaced).ok();
        s.fetch(&key("a"), 1, 0, &[P1], &[], 0, &mut replaced).ok();
        assert!(replaced.is_empty(), "a reopening member keeps its records");
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_full_cache_evicts_only_idle_sessions() {
        let mut s = ShareSessions::new(1, 1_000);
        let mut replaced = Vec::new();
        s.fetch(&key("a"), 1, 0, &[P0], &[], 0, &mut replaced).ok();
        assert_eq!(
            s.fetch(&key("b"), 1, 0, &[P0], &[], 500, &mut replaced),
            Err(errors::SHARE_SESSION_LIMIT_REACHED)
        );
        assert!(s
            .fetch(&key("b"), 1, 0, &[P0], &[], 1_000, &mut replaced)
            .is_ok());
        assert_eq!(replaced, vec![(key("a"), vec![P0])]);
        assert_eq!(
            s.fetch(&key("a"), 1, 1, &[], &[], 1_000, &mut replaced),
            Err(errors::SHARE_SESSION_NOT_FOUND)
        );
    }

    #[test]
    fn a_closing_connection_ends_the_sessions_it_opened() {
        let mut s = ShareSessions::new(10, 60_000);
        let mut ended = Vec::new();
        s.fetch(&key("a"), 7, 0, &[P0], &[], 0, &mut ended).ok();
        s.fetch(&key("b"), 8, 0, &[P1], &[], 0, &mut ended).ok();
        assert_eq!(s.connection_closed(7), vec![(key("a"), vec![P0])]);
        assert_eq!(s.len(), 1);
        assert!(s.connection_closed(7).is_empty());
    }

    #[test]
    fn a_session_names_a_bounded_number_of_partitions() {
        let mut s = ShareSessions::new(10, 60_000);
        let mut ended = Vec::new();
        let many: Vec<SessionPartition> = (0..MAX_SESSION_PARTITIONS as i32 + 1)
            .map(|p| (Uuid::ZERO, p))
            .collect();
        assert_eq!(
            s.fetch(&key("a"), 1, 0, &many, &[], 0, &mut ended),
            Err(errors::INVALID_REQUEST)
        );
        s.fetch(&key("a"), 1, 0, &many[..10], &[], 0, &mut ended)
            .ok();
        assert_eq!(
            s.fetch(&key("a"), 1, 1, &many[10..], &[], 0, &mut ended),
            Err(errors::INVALID_REQUEST)
        );
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(7), 8);
    }
}
