//! The raft state machine of the metadata quorum: applies committed entries to
//! the [`MetadataImage`], publishes each new image, and keeps the snapshot.
//!
//! A snapshot is the list of records that rebuilds the image (as KRaft snapshots
//! are), stored in `snapshot` as one frame replaced atomically. Loading one
//! replays the records through [`MetadataDelta`], so a snapshot is held to the
//! same invariants as the log.

// `StorageError` is openraft's type, imposed by the storage traits; boxing it in
// our helpers would only add conversions back at every trait method.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fjord_metadata::{MetadataDelta, MetadataImage, MetadataRecord};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::MetadataError;
use crate::frame;
use crate::types::{
    ApplyResult, Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

const SNAPSHOT_FILE: &str = "snapshot";

/// The snapshot data sent to (and received from) other voters.
#[derive(Serialize, Deserialize)]
struct SnapshotData {
    records: Vec<MetadataRecord>,
}

/// The contents of the `snapshot` file.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    records: Vec<MetadataRecord>,
}

struct StoredSnapshot {
    meta: SnapshotMeta,
    records: Arc<Vec<MetadataRecord>>,
}

impl StoredSnapshot {
    fn to_snapshot(&self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let data = serde_json::to_vec(&SnapshotData {
            records: self.records.to_vec(),
        })
        .map_err(|e| {
            StorageIOError::read_snapshot(Some(self.meta.signature()), AnyError::new(&e))
        })?;
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

struct SmState {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    image: Arc<MetadataImage>,
    snapshot: Option<StoredSnapshot>,
}

struct Shared {
    dir: PathBuf,
    state: Mutex<SmState>,
    image_tx: watch::Sender<Arc<MetadataImage>>,
    /// Bytes of records applied since the stored snapshot, which decides when the next one is
    /// taken (`metadata.log.max.record.bytes.between.snapshots`).
    bytes_since_snapshot: Arc<AtomicU64>,
}

impl Shared {
    fn lock(&self) -> Result<MutexGuard<'_, SmState>, StorageError> {
        self.state.lock().map_err(|_| {
            StorageIOError::read_state_machine(AnyError::error("state machine lock poisoned"))
                .into()
        })
    }

    /// Persists a snapshot unless a newer one is already stored, and returns
    /// whether it was stored.
    fn store_snapshot(
        &self,
        state: &mut SmState,
        meta: SnapshotMeta,
        records: Vec<MetadataRecord>,
    ) -> Result<bool, StorageError> {
        if let Some(existing) = &state.snapshot {
            if existing.meta.last_log_id >= meta.last_log_id {
                return Ok(false);
            }
        }
        let signature = meta.signature();
        let err = |e: std::io::Error| -> StorageError {
            StorageIOError::write_snapshot(Some(signature.clone()), AnyError::new(&e)).into()
        };
        let file = SnapshotFile { meta, records };
        let json = serde_json::to_vec(&file).map_err(|e| err(std::io::Error::other(e)))?;
        let bytes = frame::encode(&json).map_err(err)?;
        frame::write_atomic(&self.dir, SNAPSHOT_FILE, &bytes).map_err(err)?;
        state.snapshot = Some(StoredSnapshot {
            meta: file.meta,
            records: Arc::new(file.records),
        });
        Ok(true)
    }
}

/// The state machine handed to openraft.
pub(crate) struct StateMachine {
    shared: Arc<Shared>,
}

impl StateMachine {
    /// Opens the state machine under `dir`, starting from the stored snapshot if
    /// any; returns it with a receiver of every image it publishes.
    pub(crate) fn open(
        dir: &Path,
    ) -> Result<(Self, watch::Receiver<Arc<MetadataImage>>), MetadataError> {
        let path = dir.join(SNAPSHOT_FILE);
        let corrupt = |reason: String| MetadataError::Corrupt {
            path: path.clone(),
            reason,
        };
        let mut state = SmState {
            last_applied: None,
            membership: StoredMembership::default(),
            image: Arc::new(MetadataImage::empty()),
            snapshot: None,
        };
        if let Some(bytes) = frame::read_optional(&path).map_err(|e| MetadataError::io(&path, e))? {
            // Written atomically, so any damage is corruption rather than a torn write.
            let payload =
                frame::decode_single(&bytes).ok_or_else(|| corrupt("bad frame".into()))?;
            let file: SnapshotFile =
                serde_json::from_slice(payload).map_err(|e| corrupt(e.to_string()))?;
            let offset = file.meta.last_log_id.map_or(0, |id| id.index);
            let image = MetadataImage::from_records(offset, &file.records)
                .map_err(|e| corrupt(e.to_string()))?;
            state.last_applied = file.meta.last_log_id;
            state.membership = file.meta.last_membership.clone();
            state.image = Arc::new(image);
            state.snapshot = Some(StoredSnapshot {
                meta: file.meta,
                records: Arc::new(file.records),
            });
        }
        let (image_tx, image_rx) = watch::channel(state.image.clone());
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
            image_tx,
            bytes_since_snapshot: Arc::new(AtomicU64::new(0)),
        });
        Ok((Self { shared }, image_rx))
    }

    /// The count of record bytes applied since the stored snapshot, kept up to date as entries
    /// are applied and snapshots stored.
    pub(crate) fn bytes_since_snapshot(&self) -> Arc<AtomicU64> {
        self.shared.bytes_since_snapshot.clone()
    }
}

/// The size of `records` as the log stores them.
fn encoded_len(records: &[MetadataRecord]) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing plain data into a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut count, records);
    count.0
}

/// Builds a snapshot of the state as it was when the builder was made.
pub(crate) struct SnapshotBuilder {
    shared: Arc<Shared>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    image: Arc<MetadataImage>,
    /// The bytes applied up to `last_applied`, which the snapshot covers once stored.
    covered_bytes: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let snapshot_id = match self.last_applied {
            Some(id) => format!("{}-{}", id.leader_id, id.index),
            None => "empty".to_owned(),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let records = self.image.to_records();
        let mut state = self.shared.lock()?;
        if self.shared.store_snapshot(&mut state, meta, records)? {
            self.shared
                .bytes_since_snapshot
                .fetch_sub(self.covered_bytes, Ordering::Relaxed);
        }
        // Whether this one or a newer one is stored, report what is stored now.
        match &state.snapshot {
            Some(stored) => stored.to_snapshot(),
            None => Err(StorageIOError::write_snapshot(
                None,
                AnyError::error("snapshot vanished after being stored"),
            )
            .into()),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.shared.lock()?;
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut state = self.shared.lock()?;
        let mut image = state.image.clone();
        let mut results = Vec::new();
        let mut applied_bytes = 0;
        for entry in entries {
            let log_id = entry.log_id;
            state.last_applied = Some(log_id);
            let result = match entry.payload {
                EntryPayload::Blank => Ok(()),
                EntryPayload::Membership(membership) => {
                    state.membership = StoredMembership::new(Some(log_id), membership);
                    Ok(())
                }
                EntryPayload::Normal(proposal) => {
                    applied_bytes += encoded_len(&proposal.records);
                    let mut delta = MetadataDelta::new(&image);
                    match proposal.records.iter().try_for_each(|r| delta.apply(r)) {
                        Ok(()) => {
                            image = Arc::new(delta.finish(log_id.index));
                            Ok(())
                        }
                        Err(e) => {
                            // The entry is committed regardless; every voter rejects it
                            // the same way because the image it applies to is the same.
                            tracing::warn!(offset = log_id.index, error = %e, "metadata proposal rejected");
                            Err(e)
                        }
                    }
                }
            };
            results.push(result);
        }
        if let Some(last) = state.last_applied {
            if image.offset() != last.index {
                image = Arc::new(MetadataDelta::new(&image).finish(last.index));
            }
        }
        state.image = image.clone();
        // Counted under the lock, so that a snapshot builder made now covers exactly these.
        self.shared
            .bytes_since_snapshot
            .fetch_add(applied_bytes, Ordering::Relaxed);
        drop(state);
        self.shared.image_tx.send_replace(image);
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // A poisoned lock means an earlier panic; build from an empty state, which
        // openraft will then fail to use rather than us panicking here too.
        let (last_applied, membership, image, covered_bytes) = match self.shared.lock() {
            Ok(state) => (
                state.last_applied,
                state.membership.clone(),
                state.image.clone(),
                self.shared.bytes_since_snapshot.load(Ordering::Relaxed),
            ),
            Err(_) => (
                None,
                StoredMembership::default(),
                Arc::new(MetadataImage::empty()),
                0,
            ),
        };
        SnapshotBuilder {
            shared: self.shared.clone(),
            last_applied,
            membership,
            image,
            covered_bytes,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bad = |reason: String| -> StorageError {
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(reason)).into()
        };
        let data: SnapshotData =
            serde_json::from_slice(snapshot.get_ref()).map_err(|e| bad(e.to_string()))?;
        let offset = meta.last_log_id.map_or(0, |id| id.index);
        let image = Arc::new(
            MetadataImage::from_records(offset, &data.records).map_err(|e| bad(e.to_string()))?,
        );
        let mut state = self.shared.lock()?;
        self.shared
            .store_snapshot(&mut state, meta.clone(), data.records)?;
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        state.image = image.clone();
        // Everything applied here before is replaced by the snapshot.
        self.shared.bytes_since_snapshot.store(0, Ordering::Relaxed);
        drop(state);
        self.shared.image_tx.send_replace(image);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let state = self.shared.lock()?;
        state
            .snapshot
            .as_ref()
            .map(StoredSnapshot::to_snapshot)
            .transpose()
    }
}
