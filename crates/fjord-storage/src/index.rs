//! The sparse per-segment indexes: the offset index (`.index`) and the time index (`.timeindex`).
//!
//! On-disk formats are Kafka's. An offset index entry is 8 bytes: the offset relative to the
//! segment's base offset (u32 BE) and the byte position of a batch in the `.log` file (u32 BE).
//! A time index entry is 12 bytes: a timestamp (i64 BE) and a relative offset (u32 BE).
//!
//! Unlike Kafka, fjord never preallocates index files: each file always holds exactly its valid
//! entries, so `kafka-dump-log` and a restarted broker both see `len / entry_size` entries. The
//! entries are also kept in memory, so lookups are binary searches over a `Vec` and writes are
//! positional appends at the end of the file.
//!
//! Indexes are derived data. [`OffsetIndex::open`] and [`TimeIndex::open`] sanity-check what
//! they load and report [`StorageError::Corrupt`], upon which the segment rebuilds them from the
//! log.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoResultExt, StorageError};

pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;

/// An offset and the byte position in the segment's `.log` file to start scanning from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A timestamp and the offset at which the segment first reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// An index file's descriptor, opened on the first write. An index that is only read (every
/// sealed segment after a restart, every new segment before its first entry) holds none, so a
/// broker needs about one descriptor per segment at rest — its `.log` — rather than three.
#[derive(Debug, Default)]
struct WriteHandle(Option<Arc<File>>);

impl WriteHandle {
    fn get(&mut self, path: &Path) -> Result<&Arc<File>, StorageError> {
        match &mut self.0 {
            Some(file) => Ok(file),
            slot => Ok(slot.insert(Arc::new(open_rw(path, false)?))),
        }
    }

    /// Closes the descriptor; the next write reopens it. Only for an index whose writes have
    /// been synced.
    fn release(&mut self) {
        self.0 = None;
    }

    /// The open descriptor, if the index was written since it was loaded or created: only
    /// then can it hold data a flush must sync.
    fn written(&self) -> Option<&Arc<File>> {
        self.0.as_ref()
    }
}

fn open_rw(path: &Path, truncate: bool) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
        .at(path)
}

/// Reads a whole index file, refusing sizes that are not a whole number of entries or exceed
/// the configured maximum (a larger file cannot have been written by fjord or Kafka).
fn read_index_file(
    file: &File,
    path: &Path,
    entry_size: usize,
    max_bytes: usize,
) -> Result<Vec<u8>, StorageError> {
    let len = file.metadata().at(path)?.len();
    if len % entry_size as u64 != 0 {
        return Err(StorageError::corrupt(
            path,
            format!("index length {len} is not a multiple of {entry_size}"),
        ));
    }
    if len > max_bytes as u64 {
        return Err(StorageError::corrupt(
            path,
            format!("index length {len} exceeds the maximum {max_bytes}"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0).at(path)?;
    Ok(buf)
}

fn relative(base_offset: i64, offset: i64, path: &Path) -> Result<u32, StorageError> {
    u32::try_from(offset - base_offset).map_err(|_| {
        StorageError::corrupt(
            path,
            format!("offset {offset} is not representable relative to base {base_offset}"),
        )
    })
}

/// Maps offsets to byte positions in one segment's `.log` file.
#[derive(Debug)]
pub struct OffsetIndex {
    path: PathBuf,
    file: WriteHandle,
    base_offset: i64,
    max_entries: usize,
    /// (relative offset, position), strictly ascending in offset, non-decreasing in position.
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    /// Creates an empty index, discarding whatever the file held.
    pub fn create(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u64,
    ) -> Result<Self, StorageError> {
        open_rw(path, true)?;
        Ok(OffsetIndex {
            path: path.to_path_buf(),
            file: WriteHandle::default(),
            base_offset,
            max_entries: max_entries(max_index_bytes, OFFSET_INDEX_ENTRY_SIZE),
            entries: Vec::new(),
        })
    }

    /// Loads an existing index. `log_size` is the size of the segment's `.log` file: an entry
    /// pointing past it means the index does not describe this log.
    pub fn open(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u64,
        log_size: u64,
    ) -> Result<Self, StorageError> {
        let file = OpenOptions::new().read(true).open(path).at(path)?;
        let max_entries = max_entries(max_index_bytes, OFFSET_INDEX_ENTRY_SIZE);
        let buf = read_index_file(
            &file,
            path,
            OFFSET_INDEX_ENTRY_SIZE,
            max_entries * OFFSET_INDEX_ENTRY_SIZE,
        )?;
        let mut entries: Vec<(u32, u32)> = Vec::with_capacity(buf.len() / OFFSET_INDEX_ENTRY_SIZE);
        for chunk in buf.chunks_exact(OFFSET_INDEX_ENTRY_SIZE) {
            let rel = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let pos = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            if let Some(&(last_rel, last_pos)) = entries.last() {
                if rel <= last_rel || pos < last_pos {
                    return Err(StorageError::corrupt(
                        path,
                        "offset index entries do not ascend",
                    ));
                }
            }
            if u64::from(pos) >= log_size || rel > i32::MAX as u32 {
                return Err(StorageError::corrupt(
                    path,
                    "offset index entry outside the segment",
                ));
            }
            entries.push((rel, pos));
        }
        Ok(OffsetIndex {
            path: path.to_path_buf(),
            file: WriteHandle::default(),
            base_offset,
            max_entries,
            entries,
        })
    }

    /// Adds an entry. Offsets must strictly ascend; a violation is a bug in the caller.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<(), StorageError> {
        let rel = relative(self.base_offset, offset, &self.path)?;
        if let Some(&(last_rel, last_pos)) = self.entries.last() {
            if rel <= last_rel || position < last_pos {
                return Err(StorageError::corrupt(
                    &self.path,
                    format!("index entry ({offset}, {position}) does not ascend"),
                ));
            }
        }
        if self.is_full() {
            return Err(StorageError::corrupt(&self.path, "offset index is full"));
        }
        let mut entry = [0u8; OFFSET_INDEX_ENTRY_SIZE];
        entry[..4].copy_from_slice(&rel.to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        let at = (self.entries.len() * OFFSET_INDEX_ENTRY_SIZE) as u64;
        self.file
            .get(&self.path)?
            .write_all_at(&entry, at)
            .at(&self.path)?;
        self.entries.push((rel, position));
        Ok(())
    }

    /// The entry with the largest offset at or below `target`, or (base offset, 0) when there
    /// is none: scanning the log from the returned position reaches `target` if it exists.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let start = OffsetPosition {
            offset: self.base_offset,
            position: 0,
        };
        if target < self.base_offset {
            return start;
        }
        let n = self
            .entries
            .partition_point(|&(rel, _)| self.base_offset + i64::from(rel) <= target);
        match n.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(&(rel, position)) => OffsetPosition {
                offset: self.base_offset + i64::from(rel),
                position,
            },
            None => start,
        }
    }

    /// Drops every entry whose offset is `offset` or larger.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        let keep = self
            .entries
            .partition_point(|&(rel, _)| self.base_offset + i64::from(rel) < offset);
        self.truncate_entries(keep)
    }

    /// Drops every entry that points at `position` or beyond.
    pub fn truncate_to_position(&mut self, position: u32) -> Result<(), StorageError> {
        let keep = self.entries.partition_point(|&(_, pos)| pos < position);
        self.truncate_entries(keep)
    }

    fn truncate_entries(&mut self, keep: usize) -> Result<(), StorageError> {
        self.entries.truncate(keep);
        self.file
            .get(&self.path)?
            .set_len((keep * OFFSET_INDEX_ENTRY_SIZE) as u64)
            .at(&self.path)
    }

    /// Removes all entries.
    pub fn reset(&mut self) -> Result<(), StorageError> {
        self.truncate_entries(0)
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last entry, if any.
    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.entries.last().map(|&(rel, position)| OffsetPosition {
            offset: self.base_offset + i64::from(rel),
            position,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor to sync, if the index was written since it was loaded or created.
    pub(crate) fn written_file(&self) -> Option<&Arc<File>> {
        self.file.written()
    }

    /// Closes the descriptor after a sync (see [`WriteHandle`]).
    pub(crate) fn release_file(&mut self) {
        self.file.release();
    }

    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.path = path;
    }
}

/// Maps timestamps to the first offset at which a segment reached them.
#[derive(Debug)]
pub struct TimeIndex {
    path: PathBuf,
    file: WriteHandle,
    base_offset: i64,
    max_entries: usize,
    /// (timestamp, relative offset), timestamps strictly ascending, offsets non-decreasing.
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    /// Creates an empty index, discarding whatever the file held.
    pub fn create(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u64,
    ) -> Result<Self, StorageError> {
        open_rw(path, true)?;
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file: WriteHandle::default(),
            base_offset,
            max_entries: max_entries(max_index_bytes, TIME_INDEX_ENTRY_SIZE),
            entries: Vec::new(),
        })
    }

    /// Loads an existing index; `next_offset` bounds the offsets it may mention.
    pub fn open(
        path: &Path,
        base_offset: i64,
        max_index_bytes: u64,
        next_offset: i64,
    ) -> Result<Self, StorageError> {
        let file = OpenOptions::new().read(true).open(path).at(path)?;
        let max_entries = max_entries(max_index_bytes, TIME_INDEX_ENTRY_SIZE);
        let buf = read_index_file(
            &file,
            path,
            TIME_INDEX_ENTRY_SIZE,
            max_entries * TIME_INDEX_ENTRY_SIZE,
        )?;
        let mut entries: Vec<(i64, u32)> = Vec::with_capacity(buf.len() / TIME_INDEX_ENTRY_SIZE);
        for chunk in buf.chunks_exact(TIME_INDEX_ENTRY_SIZE) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&chunk[..8]);
            let ts = i64::from_be_bytes(ts);
            let rel = u32::from_be_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]);
            if let Some(&(last_ts, last_rel)) = entries.last() {
                if ts <= last_ts || rel < last_rel {
                    return Err(StorageError::corrupt(
                        path,
                        "time index entries do not ascend",
                    ));
                }
            }
            if base_offset + i64::from(rel) >= next_offset.max(base_offset + 1) {
                return Err(StorageError::corrupt(
                    path,
                    "time index entry outside the segment",
                ));
            }
            entries.push((ts, rel));
        }
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file: WriteHandle::default(),
            base_offset,
            max_entries,
            entries,
        })
    }

    /// Adds an entry if `timestamp` is larger than the last one; as in Kafka, entries record
    /// the running maximum timestamp, so smaller ones carry no information.
    /// `skip_full_check` lets the final entry of a segment being rolled or closed go in.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: i64,
        skip_full_check: bool,
    ) -> Result<(), StorageError> {
        let rel = relative(self.base_offset, offset, &self.path)?;
        if let Some(&(last_ts, last_rel)) = self.entries.last() {
            if timestamp <= last_ts {
                return Ok(());
            }
            if rel < last_rel {
                return Err(StorageError::corrupt(
                    &self.path,
                    format!("time index offset {offset} goes backwards"),
                ));
            }
        }
        if !skip_full_check && self.is_full() {
            return Err(StorageError::corrupt(&self.path, "time index is full"));
        }
        let mut entry = [0u8; TIME_INDEX_ENTRY_SIZE];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&rel.to_be_bytes());
        let at = (self.entries.len() * TIME_INDEX_ENTRY_SIZE) as u64;
        self.file
            .get(&self.path)?
            .write_all_at(&entry, at)
            .at(&self.path)?;
        self.entries.push((timestamp, rel));
        Ok(())
    }

    /// The entry with the largest timestamp at or below `target`, or (-1, base offset) when
    /// there is none: the first batch reaching `target` is at or after the returned offset.
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        let n = self.entries.partition_point(|&(ts, _)| ts <= target);
        match n.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(&(timestamp, rel)) => TimestampOffset {
                timestamp,
                offset: self.base_offset + i64::from(rel),
            },
            None => TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            },
        }
    }

    /// Drops every entry whose offset is `offset` or larger.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        let keep = self
            .entries
            .partition_point(|&(_, rel)| self.base_offset + i64::from(rel) < offset);
        self.entries.truncate(keep);
        self.file
            .get(&self.path)?
            .set_len((keep * TIME_INDEX_ENTRY_SIZE) as u64)
            .at(&self.path)
    }

    /// Removes all entries.
    pub fn reset(&mut self) -> Result<(), StorageError> {
        self.truncate_to(i64::MIN)
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        self.entries
            .last()
            .map(|&(timestamp, rel)| TimestampOffset {
                timestamp,
                offset: self.base_offset + i64::from(rel),
            })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor to sync, if the index was written since it was loaded or created.
    pub(crate) fn written_file(&self) -> Option<&Arc<File>> {
        self.file.written()
    }

    /// Closes the descriptor after a sync (see [`WriteHandle`]).
    pub(crate) fn release_file(&mut self) {
        self.file.release();
    }

    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.path = path;
    }
}

/// Kafka rounds the configured index size down to whole entries; at least one entry fits so
/// that a tiny setting still lets a segment index its first batch.
fn max_entries(max_index_bytes: u64, entry_size: usize) -> usize {
    let n = usize::try_from(max_index_bytes / entry_size as u64).unwrap_or(usize::MAX);
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset_index(dir: &Path, base: i64) -> OffsetIndex {
        OffsetIndex::create(&dir.join("0.index"), base, 1024).unwrap()
    }

    #[test]
    fn descriptors_are_opened_by_the_first_write_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = offset_index(dir.path(), 0);
        assert!(
            idx.written_file().is_none(),
            "a new index holds no descriptor"
        );
        idx.append(5, 100).unwrap();
        assert!(idx.written_file().is_some());
        let reopened = OffsetIndex::open(&dir.path().join("0.index"), 0, 1024, 200).unwrap();
        assert!(
            reopened.written_file().is_none(),
            "a loaded index holds no descriptor"
        );
        assert_eq!(reopened.lookup(7).offset, 5);

        let mut time = TimeIndex::create(&dir.path().join("0.timeindex"), 0, 1024).unwrap();
        assert!(time.written_file().is_none());
        time.maybe_append(1_000, 3, false).unwrap();
        assert!(time.written_file().is_some());
        time.release_file();
        time.maybe_append(2_000, 4, false).unwrap();
        let reopened = TimeIndex::open(&dir.path().join("0.timeindex"), 0, 1024, 10).unwrap();
        assert_eq!(reopened.len(), 2, "a write after release reopens the file");
    }

    #[test]
    fn offset_lookup_edges() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = offset_index(dir.path(), 100);
        // Empty index: every lookup starts at the segment's beginning.
        assert_eq!(
            idx.lookup(50),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(1000),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        idx.append(110, 400).unwrap();
        idx.append(120, 800).unwrap();
        idx.append(135, 1200).unwrap();
        assert_eq!(
            idx.lookup(99),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(109),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(110),
            OffsetPosition {
                offset: 110,
                position: 400
            }
        );
        assert_eq!(
            idx.lookup(119),
            OffsetPosition {
                offset: 110,
                position: 400
            }
        );
        assert_eq!(
            idx.lookup(120),
            OffsetPosition {
                offset: 120,
                position: 800
            }
        );
        assert_eq!(
            idx.lookup(134),
            OffsetPosition {
                offset: 120,
                position: 800
            }
        );
        assert_eq!(
            idx.lookup(135),
            OffsetPosition {
                offset: 135,
                position: 1200
            }
        );
        assert_eq!(
            idx.lookup(i64::MAX),
            OffsetPosition {
                offset: 135,
                position: 1200
            }
        );
    }

    #[test]
    fn offset_index_refuses_non_ascending_and_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = offset_index(dir.path(), 0);
        idx.append(5, 10).unwrap();
        assert!(idx.append(5, 20).is_err());
        assert!(idx.append(4, 20).is_err());
        assert!(idx.append(6, 9).is_err());
        assert!(idx.append(-1, 30).is_err());
        assert!(idx.append(1 << 33, 30).is_err());
        assert_eq!(idx.len(), 1);
    }

    #[test]
    fn offset_index_round_trips_and_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = OffsetIndex::create(&path, 7, 1024).unwrap();
        for i in 1..=10 {
            idx.append(7 + i * 3, (i * 100) as u32).unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 80);
        let reopened = OffsetIndex::open(&path, 7, 1024, 10_000).unwrap();
        assert_eq!(reopened.len(), 10);
        assert_eq!(
            reopened.lookup(20),
            OffsetPosition {
                offset: 19,
                position: 400
            }
        );
        // The log is shorter than the last entry's position: the index is stale.
        assert!(OffsetIndex::open(&path, 7, 1024, 1000).is_err());
        idx.truncate_to(19).unwrap();
        assert_eq!(idx.len(), 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 24);
        idx.truncate_to_position(200).unwrap();
        assert_eq!(idx.len(), 1);
        // Appends continue after truncation.
        idx.append(12, 150).unwrap();
        assert_eq!(
            idx.lookup(100),
            OffsetPosition {
                offset: 12,
                position: 150
            }
        );
    }

    #[test]
    fn offset_index_open_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        std::fs::write(&path, [0u8; 7]).unwrap();
        assert!(OffsetIndex::open(&path, 0, 1024, 100).is_err());
        // Kafka-style zero preallocation repeats entry (0, 0): not ascending.
        std::fs::write(&path, [0u8; 16]).unwrap();
        assert!(OffsetIndex::open(&path, 0, 1024, 100).is_err());
        std::fs::write(&path, [0u8; 2048]).unwrap();
        assert!(OffsetIndex::open(&path, 0, 1024, 100).is_err());
        std::fs::write(&path, [0u8; 8]).unwrap();
        assert_eq!(OffsetIndex::open(&path, 0, 1024, 100).unwrap().len(), 1);
    }

    #[test]
    fn offset_index_fills_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::create(&dir.path().join("0.index"), 0, 20).unwrap();
        idx.append(1, 1).unwrap();
        assert!(!idx.is_full());
        idx.append(2, 2).unwrap();
        assert!(idx.is_full());
        assert!(idx.append(3, 3).is_err());
    }

    #[test]
    fn time_lookup_edges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.timeindex");
        let mut idx = TimeIndex::create(&path, 50, 1024).unwrap();
        assert_eq!(
            idx.lookup(5),
            TimestampOffset {
                timestamp: -1,
                offset: 50
            }
        );
        idx.maybe_append(1000, 55, false).unwrap();
        idx.maybe_append(1000, 58, false).unwrap(); // not larger: ignored
        idx.maybe_append(900, 59, false).unwrap(); // smaller: ignored
        idx.maybe_append(2000, 60, false).unwrap();
        idx.maybe_append(3000, 70, false).unwrap();
        assert_eq!(idx.len(), 3);
        assert!(idx.maybe_append(4000, 65, false).is_err());
        assert_eq!(
            idx.lookup(999),
            TimestampOffset {
                timestamp: -1,
                offset: 50
            }
        );
        assert_eq!(
            idx.lookup(1000),
            TimestampOffset {
                timestamp: 1000,
                offset: 55
            }
        );
        assert_eq!(
            idx.lookup(1999),
            TimestampOffset {
                timestamp: 1000,
                offset: 55
            }
        );
        assert_eq!(
            idx.lookup(2500),
            TimestampOffset {
                timestamp: 2000,
                offset: 60
            }
        );
        assert_eq!(
            idx.lookup(i64::MAX),
            TimestampOffset {
                timestamp: 3000,
                offset: 70
            }
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 36);
        let reopened = TimeIndex::open(&path, 50, 1024, 71).unwrap();
        assert_eq!(
            reopened.last_entry(),
            Some(TimestampOffset {
                timestamp: 3000,
                offset: 70
            })
        );
        assert!(TimeIndex::open(&path, 50, 1024, 70).is_err());
        idx.truncate_to(60).unwrap();
        assert_eq!(idx.len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 12);
    }
}
