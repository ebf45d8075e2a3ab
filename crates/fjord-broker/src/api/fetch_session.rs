//! Incremental fetch sessions (KIP-227), sans-IO.
//!
//! A client that opens a session sends its full partition list once; later requests carry only
//! what changed, and responses carry only partitions with news (records, a moved high watermark
//! or log start, an error). The cache is bounded: when full, new sessions are refused (the
//! client then fetches without a session, which is always correct).

use std::collections::{BTreeMap, HashMap};

use fjord_common::errors;

/// Most sessions kept at once (Kafka's max.incremental.fetch.session.cache.slots default).
pub const MAX_SESSIONS: usize = 1000;
/// Most partitions one session may track; bounds memory per session.
pub const MAX_PARTITIONS_PER_SESSION: usize = 100_000;

pub const INITIAL_EPOCH: i32 = 0;
pub const FINAL_EPOCH: i32 = -1;

/// What the client asked for one partition, and what the broker last told it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionPartition {
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    /// (high watermark, log start offset) last sent; None before the first response.
    pub last_sent: Option<(i64, i64)>,
}

#[derive(Debug)]
struct Session {
    next_epoch: i32,
    partitions: BTreeMap<(String, i32), SessionPartition>,
    last_used_ms: i64,
}

#[derive(Debug, Default)]
pub struct FetchSessionCache {
    sessions: HashMap<i32, Session>,
    next_id: i32,
}

/// How to treat one fetch request.
#[derive(Debug, PartialEq)]
pub enum SessionDecision {
    /// Fetch the request's partitions with no session (session id 0 in the response).
    Sessionless,
    /// A new session was created; answer every partition, with this id.
    Full { session_id: i32 },
    /// An existing session: answer with news only. The partitions to fetch are the session's.
    Incremental {
        session_id: i32,
        partitions: Vec<((String, i32), SessionPartition)>,
    },
    /// Answer with this top-level error.
    Error(i16),
}

pub struct RequestedPartition {
    pub topic: String,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
}

impl FetchSessionCache {
    /// Decides how a request is served. `partitions` and `forgotten` come from the request.
    pub fn begin(
        &mut self,
        session_id: i32,
        epoch: i32,
        partitions: &[RequestedPartition],
        forgotten: &[(String, i32)],
        now_ms: i64,
    ) -> SessionDecision {
        if session_id == 0 {
            if epoch == FINAL_EPOCH {
                return SessionDecision::Sessionless;
            }
            if epoch != INITIAL_EPOCH {
                return SessionDecision::Error(errors::INVALID_FETCH_SESSION_EPOCH);
            }
            return self.create(partitions, now_ms);
        }
        if epoch == FINAL_EPOCH {
            self.sessions.remove(&session_id);
            return SessionDecision::Sessionless;
        }
        if epoch == INITIAL_EPOCH {
            // A client may close one session and open another in one request.
            self.sessions.remove(&session_id);
            return self.create(partitions, now_ms);
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return SessionDecision::Error(errors::FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.next_epoch != epoch {
            return SessionDecision::Error(errors::INVALID_FETCH_SESSION_EPOCH);
        }
        for p in partitions {
            let key = (p.topic.clone(), p.partition);
            let last_sent = session.partitions.get(&key).and_then(|s| s.last_sent);
            if session.partitions.len() >= MAX_PARTITIONS_PER_SESSION
                && !session.partitions.contains_key(&key)
            {
                continue;
            }
            session.partitions.insert(
                key,
                SessionPartition {
                    fetch_offset: p.fetch_offset,
                    partition_max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                    last_sent,
                },
            );
        }
        // After the updates, as Kafka does: a partition both sent and forgotten is forgotten.
        for key in forgotten {
            session.partitions.remove(key);
        }
        session.next_epoch = next_epoch(session.next_epoch);
        session.last_used_ms = now_ms;
        SessionDecision::Incremental {
            session_id,
            partitions: session
                .partitions
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    fn create(&mut self, partitions: &[RequestedPartition], now_ms: i64) -> SessionDecision {
        if partitions.len() > MAX_PARTITIONS_PER_SESSION {
            return SessionDecision::Sessionless;
        }
        if self.sessions.len() >= MAX_SESSIONS && !self.evict_oldest() {
            return SessionDecision::Sessionless;
        }
        let session_id = self.allocate_id();
        let map = partitions
            .iter()
            .map(|p| {
                (
                    (p.topic.clone(), p.partition),
                    SessionPartition {
                        fetch_offset: p.fetch_offset,
                        partition_max_bytes: p.partition_max_bytes,
                        current_leader_epoch: p.current_leader_epoch,
                        last_sent: None,
                    },
                )
            })
            .collect();
        self.sessions.insert(
            session_id,
            Session {
                next_epoch: 1,
                partitions: map,
                last_used_ms: now_ms,
            },
        );
        SessionDecision::Full { session_id }
    }

    /// Records what a response told the client about one partition. Returns whether the
    /// partition belongs in an incremental response (news since the last one).
    pub fn record_sent(
        &mut self,
        session_id: i32,
        key: &(String, i32),
        high_watermark: i64,
        log_start_offset: i64,
        has_records: bool,
        error: bool,
    ) -> bool {
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return true;
        };
        let Some(partition) = session.partitions.get_mut(key) else {
            return true;
        };
        let now = (high_watermark, log_start_offset);
        let changed = partition.last_sent != Some(now);
        partition.last_sent = Some(now);
        has_records || error || changed
    }

    /// Sessions unused for longer than `idle_ms` are dropped.
    pub fn expire(&mut self, now_ms: i64, idle_ms: i64) {
        self.sessions
            .retain(|_, s| now_ms - s.last_used_ms <= idle_ms);
    }

    fn evict_oldest(&mut self) -> bool {
        let oldest = self
            .sessions
            .iter()
            .min_by_key(|(_, s)| s.last_used_ms)
            .map(|(id, _)| *id);
        match oldest {
            Some(id) => self.sessions.remove(&id).is_some(),
            None => false,
        }
    }

    fn allocate_id(&mut self) -> i32 {
        loop {
            self.next_id = if self.next_id >= i32::MAX - 1 {
                1
            } else {
                self.next_id + 1
            };
            if !self.sessions.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.len()
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

    fn p(topic: &str, partition: i32, offset: i64) -> RequestedPartition {
        RequestedPartition {
            topic: topic.into(),
            partition,
            fetch_offset: offset,
            partition_max_bytes: 1024,
            current_leader_epoch: -1,
        }
    }

    #[test]
    fn full_then_incremental() {
        let mut cache = FetchSessionCache::default();
        let SessionDecision::Full { session_id } =
            cache.begin(0, 0, &[p("t", 0, 0), p("t", 1, 0)], &[], 0)
        else {
            panic!("expected a new session")
        };
        assert!(cache.record_sent(session_id, &("t".into(), 0), 5, 0, true, false));
        assert!(cache.record_sent(session_id, &("t".into(), 1), 0, 0, false, false));
        // Epoch 1: only partition 0 moved.
        let SessionDecision::Incremental { partitions, .. } =
            cache.begin(session_id, 1, &[p("t", 0, 5)], &[], 1)
        else {
            panic!("expected incremental")
        };
        assert_eq!(partitions.len(), 2);
        assert_eq!(partitions[0].1.fetch_offset, 5);
        assert!(
            !cache.record_sent(session_id, &("t".into(), 1), 0, 0, false, false),
            "no news for partition 1"
        );
        // Forgetting a partition removes it.
        let SessionDecision::Incremental { partitions, .. } =
            cache.begin(session_id, 2, &[], &[("t".into(), 1)], 2)
        else {
            panic!("expected incremental")
        };
        assert_eq!(partitions.len(), 1);
    }

    #[test]
    fn wrong_epoch_and_unknown_session() {
        let mut cache = FetchSessionCache::default();
        let SessionDecision::Full { session_id } = cache.begin(0, 0, &[p("t", 0, 0)], &[], 0)
        else {
            panic!()
        };
        assert_eq!(
            cache.begin(session_id, 5, &[], &[], 0),
            SessionDecision::Error(errors::INVALID_FETCH_SESSION_EPOCH)
        );
        assert_eq!(
            cache.begin(session_id + 100, 1, &[], &[], 0),
            SessionDecision::Error(errors::FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(
            cache.begin(session_id, FINAL_EPOCH, &[], &[], 0),
            SessionDecision::Sessionless
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn cache_is_bounded() {
        let mut cache = FetchSessionCache::default();
        for i in 0..(MAX_SESSIONS + 10) {
            let _ = cache.begin(0, 0, &[p("t", 0, 0)], &[], i as i64);
        }
        assert_eq!(cache.len(), MAX_SESSIONS);
        cache.expire(10_000_000, 1);
        assert_eq!(cache.len(), 0);
    }
}
