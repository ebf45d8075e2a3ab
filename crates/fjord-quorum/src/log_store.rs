//! The durable raft log and vote of the metadata quorum.
//!
//! Files in the metadata directory:
//! - `raft.log`: append-only frames (see [`crate::frame`]), each a JSON
//!   [`LogFrame`]. A purge rewrites the file, starting it with a `Purged` frame
//!   that remembers the last purged log id.
//! - `vote`: one frame holding the current vote, replaced atomically.
//!
//! Every entry is fsync'd before openraft is told it is flushed, so a committed
//! entry survives any crash. A tail torn by a crash (incomplete or failing its
//! checksum) is cut off on open; it can only hold entries that were never
//! reported flushed.
//!
//! The whole retained log is also kept in memory: snapshots bound it to a few
//! thousand entries, and reads (replication, replay) then never touch the disk.
//! File I/O runs inline on the calling task; metadata writes are small and rare.

// `StorageError` is openraft's type, imposed by the storage traits; boxing it in
// our helpers would only add conversions back at every trait method.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, RaftLogId, RaftLogReader, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

use crate::error::MetadataError;
use crate::frame::{self, Frames};
use crate::types::{Entry, LogId, StorageError, TypeConfig};

pub(crate) const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote";

/// One frame of `raft.log`.
#[derive(Serialize, Deserialize)]
enum LogFrame {
    /// Every entry up to and including this id was purged (covered by a snapshot).
    Purged(LogId),
    Entry(Entry),
}

struct LogInner {
    dir: PathBuf,
    /// `raft.log`, opened for appending.
    file: File,
    file_len: u64,
    entries: BTreeMap<u64, Entry>,
    /// Byte position of each entry's frame in `raft.log`, for truncation.
    positions: BTreeMap<u64, u64>,
    last_purged: Option<LogId>,
    vote: Option<Vote<u64>>,
}

/// The raft log store; clones share the same log (a clone is also the log reader).
#[derive(Clone)]
pub(crate) struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

fn write_err(e: std::io::Error) -> StorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

fn corrupt(path: &Path, reason: impl Into<String>) -> MetadataError {
    MetadataError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

impl LogStore {
    /// Opens (or creates) the log under `dir`, cutting off a torn tail.
    pub(crate) fn open(dir: &Path) -> Result<Self, MetadataError> {
        let log_path = dir.join(LOG_FILE);
        let bytes = frame::read_optional(&log_path)
            .map_err(|e| MetadataError::io(&log_path, e))?
            .unwrap_or_default();

        let mut entries = BTreeMap::new();
        let mut positions = BTreeMap::new();
        let mut last_purged: Option<LogId> = None;
        let mut frames = Frames::new(&bytes);
        for f in frames.by_ref() {
            // A frame that passed its checksum but does not decode is not a torn
            // write; refusing it is safer than guessing what the log held.
            let decoded: LogFrame = serde_json::from_slice(f.payload)
                .map_err(|e| corrupt(&log_path, format!("frame at byte {}: {e}", f.position)))?;
            match decoded {
                LogFrame::Purged(id) => {
                    entries.retain(|&index, _| index > id.index);
                    positions.retain(|&index, _| index > id.index);
                    last_purged = Some(id);
                }
                LogFrame::Entry(entry) => {
                    let index = entry.get_log_id().index;
                    let expected = entries
                        .keys()
                        .next_back()
                        .map(|last| last + 1)
                        .or(last_purged.map(|p| p.index + 1));
                    if expected.is_some_and(|e| e != index) {
                        return Err(corrupt(
                            &log_path,
                            format!(
                                "entry {index} at byte {} does not follow {expected:?}",
                                f.position
                            ),
                        ));
                    }
                    positions.insert(index, f.position as u64);
                    entries.insert(index, entry);
                }
            }
        }
        let valid_len = frames.valid_len() as u64;

        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| MetadataError::io(&log_path, e))?;
        if valid_len < bytes.len() as u64 {
            tracing::warn!(
                path = %log_path.display(),
                valid_len,
                file_len = bytes.len(),
                "truncating torn tail of the metadata log"
            );
            file.set_len(valid_len)
                .and_then(|()| file.sync_all())
                .map_err(|e| MetadataError::io(&log_path, e))?;
        }
        // Make the file's directory entry durable in case it was just created.
        frame::sync_dir(dir).map_err(|e| MetadataError::io(dir, e))?;

        let vote_path = dir.join(VOTE_FILE);
        let vote =
            match frame::read_optional(&vote_path).map_err(|e| MetadataError::io(&vote_path, e))? {
                None => None,
                Some(bytes) => {
                    // The vote file is replaced atomically, so it is never torn.
                    let payload = frame::decode_single(&bytes)
                        .ok_or_else(|| corrupt(&vote_path, "bad frame"))?;
                    Some(
                        serde_json::from_slice(payload)
                            .map_err(|e| corrupt(&vote_path, e.to_string()))?,
                    )
                }
            };

        Ok(Self {
            inner: Arc::new(Mutex::new(LogInner {
                dir: dir.to_path_buf(),
                file,
                file_len: valid_len,
                entries,
                positions,
                last_purged,
                vote,
            })),
        })
    }

    /// The size of `raft.log` in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.inner.lock().map_or(0, |inner| inner.file_len)
    }

    fn lock(&self) -> Result<MutexGuard<'_, LogInner>, StorageError> {
        self.inner.lock().map_err(|_| {
            StorageIOError::read_logs(AnyError::error("log store lock poisoned")).into()
        })
    }
}

impl LogInner {
    fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(self.last_purged)
    }

    /// Rewrites `raft.log` to hold only the purge marker and the retained entries.
    fn rewrite(&mut self) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        let mut positions = BTreeMap::new();
        if let Some(id) = self.last_purged {
            bytes.extend(frame::encode(&json(&LogFrame::Purged(id))?)?);
        }
        for (index, entry) in &self.entries {
            positions.insert(*index, bytes.len() as u64);
            bytes.extend(frame::encode(&json(&LogFrame::Entry(entry.clone()))?)?);
        }
        frame::write_atomic(&self.dir, LOG_FILE, &bytes)?;
        // The old handle still points at the replaced file.
        self.file = OpenOptions::new()
            .append(true)
            .open(self.dir.join(LOG_FILE))?;
        self.file_len = bytes.len() as u64;
        self.positions = positions;
        Ok(())
    }
}

fn json(value: &impl Serialize) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(std::io::Error::other)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let inner = self.lock()?;
        // BTreeMap::range panics on inverted bounds; answer those with nothing.
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        let Some(start) = start else {
            return Ok(Vec::new());
        };
        let entries: Vec<Entry> = match end {
            Some(end) if end <= start => Vec::new(),
            Some(end) => inner
                .entries
                .range(start..end)
                .map(|(_, e)| e.clone())
                .collect(),
            None => inner
                .entries
                .range(start..)
                .map(|(_, e)| e.clone())
                .collect(),
        };
        // Entries are sent on from the first one asked for. If that one was purged meanwhile
        // (a snapshot covers it), what is left would reach a follower as if it came right
        // after the entries it has: answer nothing (openraft then sends a heartbeat), never
        // entries after a gap. openraft keeps entries in flight from being purged, so this
        // guards a leader whose idea of a follower's log is wrong; see the workspace's
        // `loosen-follower-log-revert`.
        if entries
            .first()
            .is_some_and(|e| e.get_log_id().index != start)
        {
            return Ok(Vec::new());
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let inner = self.lock()?;
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: inner.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let mut inner = self.lock()?;
        let write = |dir: &Path| -> std::io::Result<()> {
            let bytes = frame::encode(&json(vote)?)?;
            frame::write_atomic(dir, VOTE_FILE, &bytes)
        };
        write(&inner.dir).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        Ok(self.lock()?.vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut inner = self.lock()?;
        let mut bytes = Vec::new();
        let mut positions = Vec::new();
        let mut next_index = inner.last_log_id().map(|id| id.index + 1);
        let entries: Vec<Entry> = entries.into_iter().collect();
        for entry in &entries {
            let index = entry.get_log_id().index;
            if next_index.is_some_and(|n| n != index) {
                return Err(StorageIOError::write_log_entry(
                    *entry.get_log_id(),
                    AnyError::error(format!("append of {index} does not follow {next_index:?}")),
                )
                .into());
            }
            next_index = Some(index + 1);
            positions.push((index, inner.file_len + bytes.len() as u64));
            let payload = json(&LogFrame::Entry(entry.clone())).map_err(write_err)?;
            bytes.extend(frame::encode(&payload).map_err(write_err)?);
        }
        let result = inner
            .file
            .write_all(&bytes)
            .and_then(|()| inner.file.sync_data());
        if let Err(e) = result {
            // Drop whatever part reached the file so the next append starts clean.
            let len = inner.file_len;
            let _ = inner.file.set_len(len);
            let err = StorageIOError::write_logs(AnyError::new(&e)).into();
            callback.log_io_completed(Err(e));
            return Err(err);
        }
        inner.file_len += bytes.len() as u64;
        for ((index, position), entry) in positions.into_iter().zip(entries) {
            inner.positions.insert(index, position);
            inner.entries.insert(index, entry);
        }
        drop(inner);
        // Only now is the entry durable; openraft may count it toward a commit.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.lock()?;
        let Some(&position) = inner.positions.get(&log_id.index) else {
            return Ok(());
        };
        inner
            .file
            .set_len(position)
            .and_then(|()| inner.file.sync_data())
            .map_err(write_err)?;
        inner.file_len = position;
        inner.entries.split_off(&log_id.index);
        inner.positions.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.lock()?;
        if inner.last_purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        inner.rewrite().map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::types::Proposal;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposal { records: vec![] }),
        }
    }

    /// Appends through `LogInner` directly: `LogFlushed` cannot be built outside openraft.
    fn append(store: &LogStore, entries: &[Entry]) {
        let mut inner = store.inner.lock().unwrap();
        for e in entries {
            inner.entries.insert(e.log_id.index, e.clone());
        }
        inner.rewrite().unwrap();
    }

    #[tokio::test]
    async fn purge_and_truncate_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        append(&store, &(1..=6).map(entry).collect::<Vec<_>>());
        store.purge(entry(2).log_id).await.unwrap();
        store.truncate(entry(5).log_id).await.unwrap();
        drop(store);

        let mut store = LogStore::open(dir.path()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(entry(2).log_id));
        assert_eq!(state.last_log_id, Some(entry(4).log_id));
        let got = store.try_get_log_entries(3..100).await.unwrap();
        assert_eq!(got, vec![entry(3), entry(4)]);
        // A range starting at a purged entry gets nothing, never the entries after a gap.
        assert!(store.try_get_log_entries(0..100).await.unwrap().is_empty());
        let inverted = (Bound::Included(5), Bound::Excluded(3));
        assert!(store
            .try_get_log_entries(inverted)
            .await
            .unwrap()
            .is_empty());

        // Purging everything keeps the last purged id as the last log id.
        store.purge(entry(4).log_id).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(entry(4).log_id));
        assert!(store.try_get_log_entries(..).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn vote_is_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), None);
        let vote = Vote::new_committed(3, 1);
        store.save_vote(&vote).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
    }

    #[tokio::test]
    async fn torn_or_zero_filled_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        append(&store, &[entry(1), entry(2)]);
        drop(store);
        let path = dir.path().join(LOG_FILE);
        let intact = std::fs::metadata(&path).unwrap().len();
        for tail in [
            vec![0u8; 64],
            vec![0, 0, 0, 9, 1, 2],
            b"\xff\xff\xff\xffjunk".to_vec(),
        ] {
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend(&tail);
            std::fs::write(&path, bytes).unwrap();
            let mut store = LogStore::open(dir.path()).unwrap();
            let state = store.get_log_state().await.unwrap();
            assert_eq!(state.last_log_id, Some(entry(2).log_id));
            assert_eq!(std::fs::metadata(&path).unwrap().len(), intact);
        }
    }

    #[test]
    fn corrupt_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(VOTE_FILE), b"garbage").unwrap();
        assert!(matches!(
            LogStore::open(dir.path()),
            Err(MetadataError::Corrupt { .. })
        ));
        std::fs::remove_file(dir.path().join(VOTE_FILE)).unwrap();
        // A checksummed frame that is not a log frame.
        std::fs::write(dir.path().join(LOG_FILE), frame::encode(b"{}").unwrap()).unwrap();
        assert!(matches!(
            LogStore::open(dir.path()),
            Err(MetadataError::Corrupt { .. })
        ));
        // Entries out of sequence.
        let mut bytes = Vec::new();
        for index in [1, 3] {
            bytes.extend(frame::encode(&json(&LogFrame::Entry(entry(index))).unwrap()).unwrap());
        }
        std::fs::write(dir.path().join(LOG_FILE), bytes).unwrap();
        assert!(matches!(
            LogStore::open(dir.path()),
            Err(MetadataError::Corrupt { .. })
        ));
    }
}
