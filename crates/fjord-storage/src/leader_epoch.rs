//! The leader epoch cache of one partition: which leader epoch began at which offset, and its
//! `leader-epoch-checkpoint` file.
//!
//! The cache answers OffsetsForLeaderEpoch requests (how far a follower must truncate) and maps
//! offsets back to the epoch that wrote them. It is sans-IO; [`LeaderEpochCache::load`] and
//! [`LeaderEpochCache::write`] move it to and from disk in Kafka's checkpoint format
//! (version 0, then `epoch start_offset` lines).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io;
use std::path::Path;

use crate::checkpoint::{
    read_checkpoint_file, split_whitespace_fields, write_checkpoint_file, CheckpointError,
};

/// Name of the checkpoint file inside a partition directory.
pub const LEADER_EPOCH_CHECKPOINT_FILE_NAME: &str = "leader-epoch-checkpoint";
/// Version of the leader epoch checkpoint format.
pub const LEADER_EPOCH_CHECKPOINT_VERSION: i32 = 0;
/// Epoch reported when none is known.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Offset reported when none is known.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// One epoch and the offset of its first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// Errors loading a `leader-epoch-checkpoint` file.
#[derive(Debug, thiserror::Error)]
pub enum LeaderEpochError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("leader epoch checkpoint {path} holds a negative entry: epoch {epoch}, start offset {start_offset}")]
    NegativeEntry {
        path: std::path::PathBuf,
        epoch: i32,
        start_offset: i64,
    },
}

/// Ordered `(epoch, start_offset)` entries; both columns strictly increase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `epoch` begins at `start_offset`. Returns whether the cache changed (and so
    /// should be written out).
    ///
    /// Following Kafka: re-assigning the latest epoch is ignored unless it moves that epoch's start
    /// backwards; otherwise every entry whose epoch is at least `epoch`, or whose start offset is
    /// at least `start_offset`, is removed first so both columns stay monotonic. Negative values
    /// carry no epoch information (records written before epochs existed) and are ignored.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(latest) = self.entries.last() {
            if latest.epoch == epoch && latest.start_offset <= start_offset {
                return false;
            }
        }
        while self
            .entries
            .last()
            .is_some_and(|e| e.epoch >= epoch || e.start_offset >= start_offset)
        {
            self.entries.pop();
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        if let [.., before, last] = self.entries.as_slice() {
            assert!(
                before.epoch < last.epoch && before.start_offset < last.start_offset,
                "leader epochs never go back: {before:?} then {last:?}"
            );
        }
        true
    }

    /// The newest epoch, if any epoch is known.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// The epoch whose range contains `offset`: the last entry starting at or before it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }

    /// The answer to an OffsetsForLeaderEpoch request for `requested_epoch`: the largest known
    /// epoch not above it, and the offset where that epoch ended (the start of the next known
    /// epoch, or `log_end_offset` for the latest epoch).
    ///
    /// If the requested epoch predates every known epoch the requested epoch comes back with the
    /// first known start offset, because the older data is gone and the follower should truncate
    /// to where this log begins. An undefined or unknown-future epoch yields
    /// `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`.
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        if requested_epoch == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested_epoch) {
            return (requested_epoch, log_end_offset);
        }
        let higher_index = self.entries.partition_point(|e| e.epoch <= requested_epoch);
        let Some(higher) = self.entries.get(higher_index) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match higher_index
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
        {
            Some(floor) => (floor.epoch, higher.start_offset),
            None => (requested_epoch, higher.start_offset),
        }
    }

    /// Drops entries starting at or after `end_offset`, after the log is truncated to it.
    /// Returns whether the cache changed. A negative offset is ignored.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        if end_offset < 0 {
            return false;
        }
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Drops entries wholly before `start_offset` after the log start moves up to it. The epoch
    /// containing `start_offset` is kept, with its start moved to `start_offset`, so the cache
    /// still answers for every offset still in the log. Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let removed = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(last_removed) = removed.checked_sub(1).and_then(|i| self.entries.get(i)) else {
            return false;
        };
        let kept = EpochEntry {
            epoch: last_removed.epoch,
            start_offset,
        };
        self.entries.drain(..removed);
        self.entries.insert(0, kept);
        true
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Loads a `leader-epoch-checkpoint` file; a missing file gives an empty cache. Entries are
    /// re-assigned in order, so a file with non-monotonic entries loads the way Kafka would load
    /// it rather than failing.
    pub fn load(path: &Path) -> Result<Self, LeaderEpochError> {
        let raw = read_checkpoint_file(path, LEADER_EPOCH_CHECKPOINT_VERSION, parse_epoch_entry)?;
        let mut cache = Self::new();
        for entry in raw {
            if entry.epoch < 0 || entry.start_offset < 0 {
                return Err(LeaderEpochError::NegativeEntry {
                    path: path.to_path_buf(),
                    epoch: entry.epoch,
                    start_offset: entry.start_offset,
                });
            }
            cache.assign(entry.epoch, entry.start_offset);
        }
        Ok(cache)
    }

    /// Writes the cache to `path` atomically in Kafka's format.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        write_checkpoint_file(path, LEADER_EPOCH_CHECKPOINT_VERSION, &self.entries, |e| {
            format!("{} {}", e.epoch, e.start_offset)
        })
    }
}

fn parse_epoch_entry(line: &str) -> Option<EpochEntry> {
    match split_whitespace_fields(line).as_slice() {
        [epoch, start_offset] => Some(EpochEntry {
            epoch: epoch.parse().ok()?,
            start_offset: start_offset.parse().ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use std::fs;

    fn cache(pairs: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::new();
        for &(e, o) in pairs {
            assert!(c.assign(e, o));
        }
        c
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_appends_and_ignores_same_epoch() {
        let mut c = cache(&[(2, 6)]);
        assert!(!c.assign(2, 6));
        assert!(
            !c.assign(2, 10),
            "a later start for the same epoch is ignored"
        );
        assert_eq!(pairs(&c), vec![(2, 6)]);
        assert!(c.assign(3, 10));
        assert_eq!(pairs(&c), vec![(2, 6), (3, 10)]);
        assert_eq!(c.latest_epoch(), Some(3));
        assert_eq!(
            c.earliest_entry(),
            Some(EpochEntry {
                epoch: 2,
                start_offset: 6
            })
        );
    }

    #[test]
    fn assign_same_epoch_earlier_offset_replaces() {
        let mut c = cache(&[(1, 0), (2, 6)]);
        assert!(c.assign(2, 5));
        assert_eq!(pairs(&c), vec![(1, 0), (2, 5)]);
    }

    #[test]
    fn assign_removes_conflicting_entries() {
        // A newer epoch starting at an older offset: entries at or past that offset go.
        let mut c = cache(&[(1, 0), (2, 5), (3, 10)]);
        assert!(c.assign(4, 5));
        assert_eq!(pairs(&c), vec![(1, 0), (4, 5)]);

        // An older epoch: everything at or above it goes.
        let mut c = cache(&[(1, 0), (2, 5), (3, 10)]);
        assert!(c.assign(2, 12));
        assert_eq!(pairs(&c), vec![(1, 0), (2, 12)]);
    }

    #[test]
    fn assign_ignores_negative_values() {
        let mut c = LeaderEpochCache::new();
        assert!(!c.assign(-1, 0));
        assert!(!c.assign(0, -1));
        assert!(c.is_empty());
        assert_eq!(c.latest_epoch(), None);
    }

    #[test]
    fn epoch_for_offset() {
        let c = cache(&[(1, 5), (3, 10), (4, 20)]);
        let table = [
            (0, None),
            (4, None),
            (5, Some(1)),
            (9, Some(1)),
            (10, Some(3)),
            (19, Some(3)),
            (20, Some(4)),
            (1000, Some(4)),
        ];
        for (offset, expected) in table {
            assert_eq!(c.epoch_for_offset(offset), expected, "offset {offset}");
        }
        assert_eq!(LeaderEpochCache::new().epoch_for_offset(0), None);
    }

    #[test]
    fn end_offset_for_matches_kafka() {
        let c = cache(&[(2, 5), (4, 10), (6, 20)]);
        let leo = 30;
        let table = [
            (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
            (6, (6, leo)),
            (7, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
            (4, (4, 20)),
            (5, (4, 20)),
            (3, (2, 10)),
            (2, (2, 10)),
            (1, (1, 5)),
            (0, (0, 5)),
        ];
        for (requested, expected) in table {
            assert_eq!(
                c.end_offset_for(requested, leo),
                expected,
                "epoch {requested}"
            );
        }
        assert_eq!(
            LeaderEpochCache::new().end_offset_for(0, leo),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
    }

    #[test]
    fn truncate_from_end() {
        let mut c = cache(&[(1, 0), (2, 5), (3, 10)]);
        assert!(!c.truncate_from_end(11));
        assert!(!c.truncate_from_end(-1));
        assert!(c.truncate_from_end(10));
        assert_eq!(pairs(&c), vec![(1, 0), (2, 5)]);
        assert!(c.truncate_from_end(3));
        assert_eq!(pairs(&c), vec![(1, 0)]);
        assert!(c.truncate_from_end(0));
        assert!(c.is_empty());
    }

    #[test]
    fn truncate_from_start() {
        let mut c = cache(&[(1, 0), (2, 5), (3, 10)]);
        assert!(c.truncate_from_start(7));
        assert_eq!(pairs(&c), vec![(2, 7), (3, 10)]);
        assert!(
            c.truncate_from_start(10),
            "an entry at exactly the offset is rewritten"
        );
        assert_eq!(pairs(&c), vec![(3, 10)]);
        assert!(c.truncate_from_start(15));
        assert_eq!(pairs(&c), vec![(3, 15)]);

        let mut c = cache(&[(1, 5)]);
        assert!(!c.truncate_from_start(3));
        assert_eq!(pairs(&c), vec![(1, 5)]);
        assert!(!LeaderEpochCache::new().truncate_from_start(3));
    }

    #[test]
    fn file_round_trip_and_kafka_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE_NAME);
        let c = cache(&[(0, 0), (3, 120), (7, 5000)]);
        c.write(&path).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "0\n3\n0 0\n3 120\n7 5000\n"
        );
        assert_eq!(LeaderEpochCache::load(&path).unwrap(), c);
    }

    #[test]
    fn load_kafka_fixture_and_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE_NAME);
        assert!(LeaderEpochCache::load(&path).unwrap().is_empty());
        fs::write(&path, "0\n2\n4 0\n5 77\n").unwrap();
        assert_eq!(
            pairs(&LeaderEpochCache::load(&path).unwrap()),
            vec![(4, 0), (5, 77)]
        );
        // Non-monotonic entries are repaired the way assign repairs them.
        fs::write(&path, "0\n3\n1 0\n3 10\n2 20\n").unwrap();
        assert_eq!(
            pairs(&LeaderEpochCache::load(&path).unwrap()),
            vec![(1, 0), (2, 20)]
        );
    }

    #[test]
    fn load_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE_NAME);
        let cases: &[&str] = &[
            "0\n1\n4\n",
            "0\n1\n4 x\n",
            "0\n1\n4 0 1\n",
            "1\n0\n",
            "0\n2\n1 0\n",
        ];
        for contents in cases {
            fs::write(&path, contents).unwrap();
            assert!(
                matches!(
                    LeaderEpochCache::load(&path),
                    Err(LeaderEpochError::Checkpoint(_))
                ),
                "{contents:?}"
            );
        }
        fs::write(&path, "0\n1\n-1 0\n").unwrap();
        assert!(matches!(
            LeaderEpochCache::load(&path),
            Err(LeaderEpochError::NegativeEntry { epoch: -1, .. })
        ));
        fs::write(&path, "0\n1\n1 -5\n").unwrap();
        assert!(matches!(
            LeaderEpochCache::load(&path),
            Err(LeaderEpochError::NegativeEntry {
                start_offset: -5,
                ..
            })
        ));
    }

    proptest::proptest! {
        #[test]
        fn stays_monotonic_and_round_trips(
            ops in proptest::collection::vec((0u8..4, 0i32..20, 0i64..200), 0..60)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE_NAME);
            let mut c = LeaderEpochCache::new();
            for (op, epoch, offset) in ops {
                match op {
                    0 | 1 => { c.assign(epoch, offset); }
                    2 => { c.truncate_from_end(offset); }
                    _ => { c.truncate_from_start(offset); }
                }
                for pair in c.entries().windows(2) {
                    proptest::prop_assert!(pair[0].epoch < pair[1].epoch);
                    proptest::prop_assert!(pair[0].start_offset < pair[1].start_offset);
                }
            }
            c.write(&path).unwrap();
            proptest::prop_assert_eq!(LeaderEpochCache::load(&path).unwrap(), c);
        }
    }
}
