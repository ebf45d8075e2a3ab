//! A segment's `.txnindex`: the transactions aborted by markers in that segment, in Kafka's
//! format — 34-byte entries of `version: i16 (0) | producer_id: i64 | first_offset: i64 |
//! last_offset: i64 | last_stable_offset: i64`, in marker order. read_committed fetches read it
//! to tell consumers which producers' records to drop. The file exists only once a segment has
//! an entry.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoResultExt, StorageError};

pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
const ENTRY_LEN: usize = 34;
const VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The abort marker's offset.
    pub last_offset: i64,
    /// The last stable offset once it was aborted: no transaction completing later began below.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    fn decode(entry: &[u8; ENTRY_LEN]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&entry[at..at + 8]);
            i64::from_be_bytes(b)
        };
        let txn = AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        };
        let sane = i16::from_be_bytes([entry[0], entry[1]]) == VERSION
            && txn.producer_id >= 0
            && 0 <= txn.first_offset
            && txn.first_offset <= txn.last_offset;
        sane.then_some(txn)
    }
}

#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
    /// Open once written to (or loaded with entries), for appends and syncs.
    file: Option<Arc<File>>,
    /// Written since it was loaded or last synced.
    dirty: bool,
}

impl TxnIndex {
    /// An index with no entries and no file yet.
    pub fn empty(path: PathBuf) -> Self {
        TxnIndex {
            path,
            entries: Vec::new(),
            file: None,
            dirty: false,
        }
    }

    /// Loads `path` if it exists. Entries are kept up to the first one that is torn or not
    /// sane; the rest is cut off (a crash mid-append; the log's replay writes it again).
    pub fn open(path: PathBuf) -> Result<Self, StorageError> {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::empty(path)),
            Err(e) => return Err(e).at(&path),
        };
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_LEN);
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let Ok(chunk) = <&[u8; ENTRY_LEN]>::try_from(chunk) else {
                break;
            };
            match AbortedTxn::decode(chunk) {
                Some(txn) => entries.push(txn),
                None => break,
            }
        }
        let mut index = Self::empty(path);
        index.entries = entries;
        if index.entries.len() * ENTRY_LEN != bytes.len() {
            tracing::warn!(path = %index.path.display(), "cutting a damaged transaction index tail");
            index.rewrite_len()?;
        }
        Ok(index)
    }

    fn file(&mut self) -> Result<Arc<File>, StorageError> {
        if let Some(file) = &self.file {
            return Ok(file.clone());
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .at(&self.path)?;
        let file = Arc::new(file);
        self.file = Some(file.clone());
        Ok(file)
    }

    pub fn append(&mut self, txn: AbortedTxn) -> Result<(), StorageError> {
        debug_assert!(
            self.entries
                .last()
                .is_none_or(|last| last.last_offset < txn.last_offset),
            "markers only move forward"
        );
        let file = self.file()?;
        (&*file).write_all(&txn.encode()).at(&self.path)?;
        self.entries.push(txn);
        self.dirty = true;
        Ok(())
    }

    /// Drops the entries of markers at or above `offset` (the log is cut there).
    pub fn truncate_from(&mut self, offset: i64) -> Result<(), StorageError> {
        let keep = self.entries.partition_point(|t| t.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.rewrite_len()
    }

    fn rewrite_len(&mut self) -> Result<(), StorageError> {
        let len = (self.entries.len() * ENTRY_LEN) as u64;
        if len == 0 && self.file.is_none() && !self.path.exists() {
            return Ok(());
        }
        let file = self.file()?;
        file.set_len(len).at(&self.path)?;
        self.dirty = true;
        Ok(())
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Adopts `entries` from the segments a cleaned segment replaces.
    pub fn extend(&mut self, entries: &[AbortedTxn]) -> Result<(), StorageError> {
        for txn in entries {
            self.append(*txn)?;
        }
        Ok(())
    }

    /// The file, if it was written since it was loaded: a flush must sync it.
    pub fn written_file(&self) -> Option<&Arc<File>> {
        self.file.as_ref().filter(|_| self.dirty)
    }

    /// Closes the descriptor until the next write.
    pub fn release_file(&mut self) {
        self.file = None;
        self.dirty = false;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn set_path(&mut self, path: PathBuf) {
        self.path = path;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer_id: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn entries_round_trip_truncate_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut index = TxnIndex::open(path.clone()).unwrap();
        assert!(!path.exists(), "no file until an entry");
        for (i, last) in [3, 7, 12].into_iter().enumerate() {
            index.append(txn(i as i64, last - 2, last)).unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * 34);
        let reopened = TxnIndex::open(path.clone()).unwrap();
        assert_eq!(reopened.entries(), index.entries());

        index.truncate_from(7).unwrap();
        assert_eq!(index.entries(), &[txn(0, 1, 3)]);
        assert_eq!(TxnIndex::open(path.clone()).unwrap().entries().len(), 1);

        // A torn entry, then garbage: the sane prefix stays.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&txn(5, 20, 21).encode()[..10]);
        std::fs::write(&path, &bytes).unwrap();
        let cut = TxnIndex::open(path.clone()).unwrap();
        assert_eq!(cut.entries(), &[txn(0, 1, 3)]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 34);
        let mut bad = txn(6, 30, 31).encode();
        bad[0] = 9;
        std::fs::write(&path, bad).unwrap();
        assert!(TxnIndex::open(path).unwrap().entries().is_empty());
    }
}
