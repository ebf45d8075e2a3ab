//! The set of partition logs under the configured log directories (`log.dirs`).
//!
//! The log manager owns loading every `<topic>-<partition>` directory at startup (recovering
//! after an unclean shutdown), placing new partitions, deleting partitions, and the per-dir
//! files Kafka keeps beside them: `recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `replication-offset-checkpoint` and the clean shutdown marker
//! `.kafka_cleanshutdown`.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fjord_common::{lock, TopicId, TopicPartition};

use crate::checkpoint::{read_offset_checkpoint, write_offset_checkpoint};
use crate::error::{IoResultExt, StorageError};
use crate::future_log::{
    catch_up_locked, catch_up_round, parse_future_dir_name, FUTURE_DIR_SUFFIX,
};
use crate::lock_order::{lock_log, lock_map};
use crate::log::{sync_dir, Log, LogConfig, RecoveryStats};
use crate::partition_metadata::{read_partition_metadata, write_partition_metadata};

pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Suffix of partition directories whose deletion is under way.
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Suffix of partition directories set aside and kept: a log found at start-up that the
/// metadata no longer gives this broker (Kafka's stray logs, which it never deletes itself).
pub const STRAY_DIR_SUFFIX: &str = "-stray";

/// What [`LogManager::open`] did. Elapsed time is left to the caller to measure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupReport {
    pub partitions_loaded: usize,
    /// Partitions that needed recovery (unclean shutdown or damaged files).
    pub partitions_recovered: usize,
    pub bytes_truncated: u64,
    /// `-delete` directories found, queued for removal (after `log.segment.delete.delay.ms`).
    pub deletions_queued: usize,
    /// `-stray` directories found and left alone.
    pub stray_dirs: usize,
    /// Log dirs that had the clean shutdown marker.
    pub clean_dirs: usize,
    /// Moves to another log dir that resume (a future log beside its current one).
    pub moves_resumed: usize,
    /// Future logs that had caught up and replaced their current log when the broker stopped
    /// mid-swap: finished now.
    pub moves_completed: usize,
}

/// What one [`LogManager::advance_move`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveStep {
    /// The move is over: swapped in, or nothing left to move.
    pub finished: bool,
    /// Bytes read from the current log (the swap's last catch-up not counted).
    pub bytes_copied: u64,
}

/// One round of copying into a future log.
struct MoveRound {
    /// The future log holds everything the current log held when the round looked.
    caught_up: bool,
    /// Bytes read from the current log.
    bytes_copied: u64,
    /// The future log copied into: the swap goes ahead only while it is still the partition's.
    future: Arc<Mutex<Log>>,
}

struct ManagedLog {
    dir_index: usize,
    log: Arc<Mutex<Log>>,
}

/// Owns all partition logs. See the module docs.
///
/// Lock order (see `lock_order`): a log (a current log before its future log), then
/// `offline_dirs`, then `logs`, then `futures`; never a log under a map's lock.
pub struct LogManager {
    log_dirs: Vec<PathBuf>,
    default_config: LogConfig,
    logs: Mutex<BTreeMap<TopicPartition, ManagedLog>>,
    /// Future logs: copies under way into another log dir (see `future_log`).
    futures: Mutex<BTreeMap<TopicPartition, ManagedLog>>,
    /// Indexes into `log_dirs` of the dirs taken offline after an I/O failure.
    offline_dirs: Mutex<Vec<usize>>,
    /// `-delete` dirs and when each is removed: deletion waits out `file.delete.delay.ms` (as
    /// Kafka's does), so that the metadata change deleting a partition never waits for a
    /// recursive removal, and a reader still holding the log's files is not cut short.
    pending_deletions: Mutex<Vec<PendingDeletion>>,
}

/// A partition dir renamed `-delete`, to be removed once `due_ms` has passed.
#[derive(Debug)]
struct PendingDeletion {
    dir: PathBuf,
    due_ms: i64,
}

/// Why a partition's log leaves this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retire {
    /// The partition was deleted or moved away: its dir is renamed `-delete` and removed later.
    Delete,
    /// Found at start-up on a broker the metadata no longer gives it to: renamed `-stray` and
    /// kept, for an operator to look at (Kafka does the same rather than delete data itself).
    Stray,
}

fn checkpoint_map(path: &Path) -> Result<BTreeMap<TopicPartition, i64>, StorageError> {
    Ok(read_offset_checkpoint(path)?
        .into_iter()
        .map(|(topic, partition, offset)| (TopicPartition { topic, partition }, offset))
        .collect())
}

/// What [`LogManager::open`] gathers from the log dirs, one dir after the other, before the
/// manager exists.
#[derive(Default)]
struct LoadedLogs {
    logs: BTreeMap<TopicPartition, ManagedLog>,
    pending_deletions: Vec<PendingDeletion>,
    /// Loaded after every dir's partition logs, as each resumes (or finishes) the move of one.
    futures: Vec<FoundFuture>,
    /// Every dir's checkpointed log start and high watermark: a future log promoted at
    /// start-up takes its partition's from the dir it moved out of.
    carried: BTreeMap<TopicPartition, (i64, Option<i64>)>,
}

/// A future log's dir found at start-up.
struct FoundFuture {
    dir_index: usize,
    tp: TopicPartition,
    path: PathBuf,
    /// Its log dir had the clean shutdown marker.
    clean: bool,
}

/// The offsets a log dir's checkpoint files hold for its partitions.
struct DirCheckpoints {
    recovery_points: BTreeMap<TopicPartition, i64>,
    log_starts: BTreeMap<TopicPartition, i64>,
    high_watermarks: BTreeMap<TopicPartition, i64>,
}

impl DirCheckpoints {
    /// Reads the recovery point, log start and replication offset checkpoints of `log_dir`; a
    /// missing file reads as empty.
    fn read(log_dir: &Path) -> Result<DirCheckpoints, StorageError> {
        Ok(DirCheckpoints {
            recovery_points: checkpoint_map(&log_dir.join(RECOVERY_POINT_CHECKPOINT_FILE))?,
            log_starts: checkpoint_map(&log_dir.join(LOG_START_OFFSET_CHECKPOINT_FILE))?,
            high_watermarks: checkpoint_map(&log_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE))?,
        })
    }
}

impl LoadedLogs {
    /// Loads one log dir: reads its checkpoints, opens its partitions' logs in parallel
    /// (recovering them if the dir was not shut down cleanly), then removes its clean shutdown
    /// marker, since from then on a crash must trigger recovery again.
    fn load_dir(
        &mut self,
        dir_index: usize,
        log_dir: &Path,
        config: &LogConfig,
        now_ms: i64,
        report: &mut StartupReport,
    ) -> Result<(), StorageError> {
        std::fs::create_dir_all(log_dir).at(log_dir)?;
        let marker = log_dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.exists();
        if clean {
            report.clean_dirs += 1;
        }
        let checkpoints = DirCheckpoints::read(log_dir)?;
        self.carry(&checkpoints);
        let to_open = self.scan_dir(dir_index, log_dir, clean, config, now_ms, report)?;
        let opened = crate::parallel::map(to_open, crate::parallel::DISK_THREADS, |(tp, path)| {
            load_log(tp, &path, &checkpoints, config, clean, now_ms)
        });
        for result in opened {
            let (tp, log, stats) = result?;
            report.partitions_loaded += 1;
            if stats.needed_recovery {
                report.partitions_recovered += 1;
            }
            report.bytes_truncated += stats.bytes_truncated;
            self.logs.insert(
                tp,
                ManagedLog {
                    dir_index,
                    log: Arc::new(Mutex::new(log)),
                },
            );
        }
        // From here on the dir is live: a crash must trigger recovery again.
        if clean {
            std::fs::remove_file(&marker).at(&marker)?;
        }
        Ok(())
    }

    /// Keeps the highest log start and high watermark any dir checkpointed for a partition.
    fn carry(&mut self, checkpoints: &DirCheckpoints) {
        for (tp, &log_start) in &checkpoints.log_starts {
            let entry = self.carried.entry(tp.clone()).or_insert((0, None));
            entry.0 = entry.0.max(log_start);
        }
        for (tp, &hw) in &checkpoints.high_watermarks {
            let entry = self.carried.entry(tp.clone()).or_insert((0, None));
            entry.1 = Some(entry.1.map_or(hw, |known: i64| known.max(hw)));
        }
    }

    /// Sorts a log dir's subdirectories, in name order: `-delete` dirs are queued for removal,
    /// `-stray` dirs and the metadata log are left alone, future logs are kept for later, and
    /// the partition logs are returned to be opened. A partition found in two log dirs fails
    /// the start-up.
    fn scan_dir(
        &mut self,
        dir_index: usize,
        log_dir: &Path,
        clean: bool,
        config: &LogConfig,
        now_ms: i64,
        report: &mut StartupReport,
    ) -> Result<Vec<(TopicPartition, PathBuf)>, StorageError> {
        let mut entries: Vec<_> = std::fs::read_dir(log_dir)
            .at(log_dir)?
            .collect::<Result<_, _>>()
            .at(log_dir)?;
        entries.sort_by_key(|e| e.file_name());
        let mut to_open = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for entry in entries {
            let path = entry.path();
            if !entry.file_type().at(&path)?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name.ends_with(DELETE_DIR_SUFFIX) {
                self.pending_deletions.push(PendingDeletion {
                    dir: path,
                    due_ms: now_ms.saturating_add(config.file_delete_delay_ms),
                });
                report.deletions_queued += 1;
                continue;
            }
            if name.ends_with(STRAY_DIR_SUFFIX) {
                tracing::warn!(path = %path.display(), "a stray partition log set aside earlier is left in place, not loaded (remove it when no longer needed)");
                report.stray_dirs += 1;
                continue;
            }
            // The metadata log (KRaft's name for it) is not a partition log.
            if name == METADATA_LOG_DIR_NAME {
                continue;
            }
            if let Some(tp) = parse_future_dir_name(&name) {
                self.futures.push(FoundFuture {
                    dir_index,
                    tp,
                    path,
                    clean,
                });
                continue;
            }
            let Some(tp) = TopicPartition::from_dir_name(&name) else {
                continue;
            };
            if self.logs.contains_key(&tp) || !seen.insert(tp.clone()) {
                return Err(StorageError::InvalidPartitionDir(format!(
                    "{} (the partition exists in more than one log dir)",
                    path.display()
                )));
            }
            to_open.push((tp, path));
        }
        Ok(to_open)
    }
}

/// Opens one partition's log at start-up from its dir's checkpointed recovery point, log start
/// and high watermark.
fn load_log(
    tp: TopicPartition,
    path: &Path,
    checkpoints: &DirCheckpoints,
    config: &LogConfig,
    clean: bool,
    now_ms: i64,
) -> Result<(TopicPartition, Log, RecoveryStats), StorageError> {
    let topic_id = read_partition_metadata(path)?;
    let (mut log, stats) = Log::open(
        path,
        tp.clone(),
        topic_id,
        config.clone(),
        checkpoints.recovery_points.get(&tp).copied().unwrap_or(0),
        checkpoints.log_starts.get(&tp).copied().unwrap_or(0),
        clean,
        now_ms,
    )?;
    if let Some(&hw) = checkpoints.high_watermarks.get(&tp) {
        log.restore_high_watermark(hw);
    }
    Ok((tp, log, stats))
}

/// Partition logs with their names.
pub type PartitionLogs = Vec<(TopicPartition, Arc<Mutex<Log>>)>;

/// Written and synced in a future log's dir just before the swap's commit point: only a future
/// log carrying it may replace a partition's log at start-up.
pub const MOVE_COMMITTED_FILE: &str = ".move-committed";

fn remove_commit_marker(dir: &Path) {
    let marker = dir.join(MOVE_COMMITTED_FILE);
    if let Err(error) = std::fs::remove_file(&marker) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %marker.display(), %error, "cannot remove a moved log's commit marker");
        }
    }
}

/// Directory of the cluster metadata log inside a log dir; skipped when loading partitions.
pub const METADATA_LOG_DIR_NAME: &str = "__cluster_metadata-0";

impl LogManager {
    /// Loads every partition under `log_dirs`. See the module docs.
    pub fn open(
        log_dirs: &[PathBuf],
        default_config: LogConfig,
        now_ms: i64,
    ) -> Result<(LogManager, StartupReport), StorageError> {
        if log_dirs.is_empty() {
            return Err(StorageError::NoLogDirs);
        }
        let mut report = StartupReport::default();
        let mut loaded = LoadedLogs::default();
        for (dir_index, log_dir) in log_dirs.iter().enumerate() {
            loaded.load_dir(dir_index, log_dir, &default_config, now_ms, &mut report)?;
        }
        let manager = LogManager {
            log_dirs: log_dirs.to_vec(),
            default_config,
            logs: Mutex::new(loaded.logs),
            futures: Mutex::new(BTreeMap::new()),
            offline_dirs: Mutex::new(Vec::new()),
            pending_deletions: Mutex::new(loaded.pending_deletions),
        };
        for FoundFuture {
            dir_index,
            tp,
            path,
            clean,
        } in loaded.futures
        {
            let carried = loaded.carried.get(&tp).copied().unwrap_or((0, None));
            manager.load_future(dir_index, tp, &path, clean, carried, now_ms, &mut report)?;
        }
        Ok((manager, report))
    }

    /// A future log found at start-up. Beside its current log it resumes copying. Alone, it is
    /// the survivor of a swap the broker stopped in if it carries the commit marker (written and
    /// synced just before the current log's dir is renamed for deletion): it becomes the
    /// partition's log, with the log start and high watermark the old dir checkpointed. A future
    /// log alone without the marker is an unfinished copy whose original is not in `log.dirs`:
    /// it is left on disk, untouched, and reported.
    #[allow(clippy::too_many_arguments)]
    fn load_future(
        &self,
        dir_index: usize,
        tp: TopicPartition,
        path: &Path,
        clean: bool,
        (log_start, high_watermark): (i64, Option<i64>),
        now_ms: i64,
        report: &mut StartupReport,
    ) -> Result<(), StorageError> {
        // Start-up: nothing else runs yet, so what is looked up here still holds below.
        let (current, has_future) = {
            let logs = lock_map(&self.logs);
            let futures = lock_map(&self.futures);
            let current = logs.get(&tp).map(|m| (m.dir_index, Arc::clone(&m.log)));
            (current, futures.contains_key(&tp))
        };
        let committed = path.join(MOVE_COMMITTED_FILE).exists();
        let current_dir = current.as_ref().map(|(index, _)| *index);
        if current_dir.is_none() && !committed {
            tracing::error!(%tp, path = %path.display(), "an unfinished copy of a partition whose log is in none of log.dirs: left in place, not loaded");
            return Ok(());
        }
        if has_future || current_dir == Some(dir_index) {
            // A second copy, or one in the dir the log already lives in: nothing to resume.
            tracing::warn!(path = %path.display(), "removing a redundant future log");
            return std::fs::remove_dir_all(path).at(path);
        }
        let topic_id = read_partition_metadata(path)?;
        match current {
            Some((_, current)) => {
                let mut current = lock_log(&current);
                let config = current.config().clone();
                let (log, _) = Log::open(path, tp.clone(), topic_id, config, 0, 0, false, now_ms)?;
                current.set_moving(true);
                drop(current);
                lock_map(&self.futures).insert(
                    tp,
                    ManagedLog {
                        dir_index,
                        log: Arc::new(Mutex::new(log)),
                    },
                );
                report.moves_resumed += 1;
            }
            None => {
                let log_dir = &self.log_dirs[dir_index];
                let final_dir = log_dir.join(tp.dir_name());
                std::fs::rename(path, &final_dir).at(path)?;
                sync_dir(log_dir)?;
                remove_commit_marker(&final_dir);
                let (mut log, _) = Log::open(
                    &final_dir,
                    tp.clone(),
                    topic_id,
                    self.default_config.clone(),
                    0,
                    log_start,
                    clean,
                    now_ms,
                )?;
                if let Some(hw) = high_watermark {
                    log.restore_high_watermark(hw);
                }
                lock_map(&self.logs).insert(
                    tp,
                    ManagedLog {
                        dir_index,
                        log: Arc::new(Mutex::new(log)),
                    },
                );
                report.moves_completed += 1;
                report.partitions_loaded += 1;
            }
        }
        Ok(())
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Mutex<Log>>> {
        lock_map(&self.logs).get(tp).map(|m| Arc::clone(&m.log))
    }

    /// The log of `tp`, created in the log dir holding the fewest partitions if it does not
    /// exist yet.
    pub fn create_log(
        &self,
        tp: TopicPartition,
        topic_id: TopicId,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<Arc<Mutex<Log>>, StorageError> {
        let offline = lock_map(&self.offline_dirs).clone();
        let mut logs = lock_map(&self.logs);
        if let Some(existing) = logs.get(&tp) {
            return Ok(Arc::clone(&existing.log));
        }
        let mut counts = vec![0usize; self.log_dirs.len()];
        for managed in logs.values() {
            if let Some(count) = counts.get_mut(managed.dir_index) {
                *count += 1;
            }
        }
        let dir_index = counts
            .iter()
            .enumerate()
            .filter(|(i, _)| !offline.contains(i))
            .min_by_key(|(i, count)| (**count, *i))
            .map(|(i, _)| i)
            .ok_or_else(|| StorageError::LogDirOffline(self.log_dirs[0].clone()))?;
        let log_dir = self
            .log_dirs
            .get(dir_index)
            .ok_or(StorageError::NoLogDirs)?;
        let dir = log_dir.join(tp.dir_name());
        std::fs::create_dir_all(&dir).at(&dir)?;
        write_partition_metadata(&dir, &topic_id).at(&dir)?;
        let (log, _) = Log::open(&dir, tp.clone(), Some(topic_id), config, 0, 0, true, now_ms)?;
        let log = Arc::new(Mutex::new(log));
        logs.insert(
            tp,
            ManagedLog {
                dir_index,
                log: Arc::clone(&log),
            },
        );
        Ok(log)
    }

    /// Stops the log of `tp` (and drops a move of it under way) and renames its directory
    /// `<topic>-<partition>.<32 hex digits>-delete` or `-stray` (see [`Retire`]), the parent
    /// synced. A `-delete` dir is removed once `file.delete.delay.ms` has passed
    /// ([`Self::take_due_deletions`]), or after the next start's if the broker stops first.
    pub fn retire_log(
        &self,
        tp: &TopicPartition,
        retire: Retire,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let (current, future) = {
            let mut logs = lock_map(&self.logs);
            let future = lock_map(&self.futures).remove(tp);
            (logs.remove(tp), future)
        };
        // The future log goes first: one left alone would be taken for a finished move.
        if let Some(future) = future {
            discard_future(&future)?;
        }
        let Some(managed) = current else {
            return Ok(());
        };
        let mut log = lock_log(&managed.log);
        log.mark_closed();
        let dir = log.dir().to_path_buf();
        let parent = dir.parent().unwrap_or(Path::new(".")).to_path_buf();
        let suffix = match retire {
            Retire::Delete => DELETE_DIR_SUFFIX,
            Retire::Stray => STRAY_DIR_SUFFIX,
        };
        let renamed = parent.join(retired_dir_name(tp, suffix));
        std::fs::rename(&dir, &renamed).at(&dir)?;
        drop(log);
        // Durable before the broker goes on as if the log were gone.
        sync_dir(&parent)?;
        match retire {
            Retire::Delete => self.schedule_deletion(renamed, now_ms),
            Retire::Stray => {
                tracing::warn!(%tp, path = %renamed.display(), "a log the metadata no longer gives this broker is set aside, not deleted");
            }
        }
        Ok(())
    }

    fn schedule_deletion(&self, dir: PathBuf, now_ms: i64) {
        lock(&self.pending_deletions).push(PendingDeletion {
            dir,
            due_ms: now_ms.saturating_add(self.default_config.file_delete_delay_ms),
        });
    }

    /// The `-delete` dirs whose delay has passed, taken off the queue: the caller removes them
    /// with [`remove_retired_dirs`], off any lock.
    pub fn take_due_deletions(&self, now_ms: i64) -> Vec<PathBuf> {
        let mut pending = lock(&self.pending_deletions);
        let (due, waiting): (Vec<_>, Vec<_>) = pending.drain(..).partition(|p| p.due_ms <= now_ms);
        *pending = waiting;
        due.into_iter().map(|p| p.dir).collect()
    }

    /// Writes the recovery point, log start and high watermark checkpoints of every log dir.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        let snapshot: Vec<(usize, TopicPartition, Arc<Mutex<Log>>)> = lock_map(&self.logs)
            .iter()
            .map(|(tp, m)| (m.dir_index, tp.clone(), Arc::clone(&m.log)))
            .collect();
        let dirs = self.log_dirs.len();
        let mut recovery_points = vec![Vec::new(); dirs];
        let mut log_starts = vec![Vec::new(); dirs];
        let mut high_watermarks = vec![Vec::new(); dirs];
        for (dir_index, tp, log) in snapshot {
            let log = lock_log(&log);
            let (Some(rp), Some(ls), Some(hw)) = (
                recovery_points.get_mut(dir_index),
                log_starts.get_mut(dir_index),
                high_watermarks.get_mut(dir_index),
            ) else {
                continue;
            };
            rp.push((tp.topic.clone(), tp.partition, log.recovery_point()));
            ls.push((tp.topic.clone(), tp.partition, log.log_start_offset()));
            hw.push((tp.topic, tp.partition, log.high_watermark()));
        }
        let offline = lock_map(&self.offline_dirs).clone();
        for (i, log_dir) in self.log_dirs.iter().enumerate() {
            if offline.contains(&i) {
                continue;
            }
            for (file, entries) in [
                (RECOVERY_POINT_CHECKPOINT_FILE, &recovery_points),
                (LOG_START_OFFSET_CHECKPOINT_FILE, &log_starts),
                (REPLICATION_OFFSET_CHECKPOINT_FILE, &high_watermarks),
            ] {
                let path = log_dir.join(file);
                let entries = entries.get(i).map_or(&[][..], Vec::as_slice);
                write_offset_checkpoint(&path, entries).at(&path)?;
            }
        }
        Ok(())
    }

    /// Closes every log (flushing it), writes the checkpoints and then the clean shutdown
    /// marker in each log dir, so the next start skips recovery.
    pub fn shutdown(&self) -> Result<(), StorageError> {
        for (_, log) in self.all_logs() {
            lock_log(&log).close()?;
        }
        self.checkpoint()?;
        let offline = lock_map(&self.offline_dirs).clone();
        for (i, log_dir) in self.log_dirs.iter().enumerate() {
            if offline.contains(&i) {
                // Not clean: the next start recovers what the failure may have torn.
                continue;
            }
            let marker = log_dir.join(CLEAN_SHUTDOWN_FILE);
            File::create(&marker)
                .and_then(|f| f.sync_all())
                .at(&marker)?;
            File::open(log_dir).and_then(|d| d.sync_all()).at(log_dir)?;
        }
        Ok(())
    }

    /// Takes the log dir holding `log_path` (a partition dir) offline after a write or fsync
    /// failed there, as Kafka does: every log in it stops taking writes and serving reads (their
    /// partitions answer KAFKA_STORAGE_ERROR), no new partition is placed there, and its
    /// checkpoints are no longer written. After an fsync error the page cache may have dropped
    /// the data, so nothing written there can be trusted until a restart recovers it. Returns
    /// whether every log dir is now offline.
    pub fn take_dir_offline(&self, log_path: &Path, error: &str) -> bool {
        let Some(dir_index) = self
            .log_dirs
            .iter()
            .position(|dir| log_path.starts_with(dir))
        else {
            return false;
        };
        {
            let mut offline = lock_map(&self.offline_dirs);
            if offline.contains(&dir_index) {
                return offline.len() == self.log_dirs.len();
            }
            // From here no log is placed or swapped into the dir.
            offline.push(dir_index);
        }
        let in_dir = |map: &BTreeMap<TopicPartition, ManagedLog>| -> Vec<Arc<Mutex<Log>>> {
            map.values()
                .filter(|m| m.dir_index == dir_index)
                .map(|m| Arc::clone(&m.log))
                .collect()
        };
        let current = in_dir(&lock_map(&self.logs));
        // A move into the failed dir stops at its next step.
        let futures = in_dir(&lock_map(&self.futures));
        for log in current.iter().chain(&futures) {
            lock_log(log).mark_offline();
        }
        tracing::error!(
            log_dir = %self.log_dirs[dir_index].display(),
            partitions = current.len(),
            error,
            "LOG DIR OFFLINE: a write or fsync failed; its partitions answer KAFKA_STORAGE_ERROR \
             until the disk is fixed and the broker restarted"
        );
        lock_map(&self.offline_dirs).len() == self.log_dirs.len()
    }

    /// Whether the log dir at `log_dirs[index]` was taken offline.
    pub fn is_dir_offline(&self, dir: &Path) -> bool {
        let offline = lock_map(&self.offline_dirs);
        self.log_dirs
            .iter()
            .position(|d| d == dir)
            .is_some_and(|i| offline.contains(&i))
    }

    /// AlterReplicaLogDirs for one partition: starts moving its log into `dest` (one of
    /// `log.dirs`, compared as absolute paths), where a future log copies it while appends go
    /// on; the partition owning the log drives the copy ([`LogManager::advance_move`]). Moving to
    /// the dir the log is in cancels a move under way; asking again for the same destination
    /// changes nothing.
    pub fn alter_log_dir(
        &self,
        tp: &TopicPartition,
        dest: &Path,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let wanted = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
        let dest_index = self
            .log_dirs
            .iter()
            .position(|dir| std::path::absolute(dir).is_ok_and(|dir| dir == wanted))
            .ok_or_else(|| StorageError::LogDirNotFound(dest.to_path_buf()))?;
        let dest_dir = &self.log_dirs[dest_index];
        if lock_map(&self.offline_dirs).contains(&dest_index) {
            return Err(StorageError::LogDirOffline(dest_dir.clone()));
        }
        let no_log = || StorageError::NoSuchLog(tp.to_string());
        let (current_index, current) = lock_map(&self.logs)
            .get(tp)
            .map(|m| (m.dir_index, Arc::clone(&m.log)))
            .ok_or_else(no_log)?;
        // Held throughout: two AlterReplicaLogDirs for one partition take turns.
        let mut current_log = lock_log(&current);
        let previous = {
            let logs = lock_map(&self.logs);
            let mut futures = lock_map(&self.futures);
            if !logs.get(tp).is_some_and(|m| Arc::ptr_eq(&m.log, &current)) {
                return Err(no_log());
            }
            if futures.get(tp).is_some_and(|f| f.dir_index == dest_index) {
                return Ok(());
            }
            futures.remove(tp)
        };
        if let Some(previous) = previous {
            discard_future(&previous)?;
        }
        if current_log.is_offline() {
            return Err(StorageError::LogDirOffline(current_log.dir().to_path_buf()));
        }
        if current_index == dest_index {
            current_log.set_moving(false);
            return Ok(());
        }
        let dir = dest_dir.join(format!(
            "{}.{}{FUTURE_DIR_SUFFIX}",
            tp.dir_name(),
            random_hex_id()
        ));
        std::fs::create_dir_all(&dir).at(&dir)?;
        if let Some(topic_id) = current_log.topic_id() {
            write_partition_metadata(&dir, &topic_id).at(&dir)?;
        }
        sync_dir(dest_dir)?;
        let (future, _) = Log::open(
            &dir,
            tp.clone(),
            current_log.topic_id(),
            current_log.config().clone(),
            0,
            current_log.log_start_offset(),
            true,
            now_ms,
        )?;
        let future = ManagedLog {
            dir_index: dest_index,
            log: Arc::new(Mutex::new(future)),
        };
        {
            // The partition may have been deleted meanwhile: no future log is left without
            // its current one.
            let logs = lock_map(&self.logs);
            let mut futures = lock_map(&self.futures);
            if logs.get(tp).is_some_and(|m| Arc::ptr_eq(&m.log, &current)) {
                futures.insert(tp.clone(), future);
            } else {
                drop((logs, futures));
                discard_future(&future)?;
                return Err(no_log());
            }
        }
        current_log.set_moving(true);
        tracing::info!(%tp, from = %current_log.dir().display(), to = %dest_dir.display(), "moving a partition to another log dir");
        Ok(())
    }

    /// The partitions whose log is being moved to another log dir.
    pub fn moving_partitions(&self) -> Vec<TopicPartition> {
        lock_map(&self.futures).keys().cloned().collect()
    }

    /// Future logs (moves under way) by the log dir they are in, in `log.dirs` order.
    pub fn future_logs_by_dir(&self) -> Vec<(PathBuf, PartitionLogs)> {
        self.by_dir(&lock_map(&self.futures))
    }

    /// One step of the move of `tp`, whose current log is `log` (compared, never locked here):
    /// copies up to `max_bytes` into its future log and, once that has caught up, swaps it in.
    /// `lock` locks the current log the way its owner does; the partition owning the log drives
    /// the steps. On an error the caller calls [`LogManager::abort_move`].
    pub fn advance_move<G: DerefMut<Target = Log>>(
        &self,
        tp: &TopicPartition,
        log: &Arc<Mutex<Log>>,
        lock: impl Fn() -> G,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<MoveStep, StorageError> {
        let Some(round) = self.copy_round(tp, log, lock(), max_bytes, now_ms)? else {
            return Ok(MoveStep {
                finished: true,
                bytes_copied: 0,
            });
        };
        let bytes_copied = round.bytes_copied;
        let finished = round.caught_up
            && self.complete_move(tp, log, &mut lock(), round, max_bytes, now_ms)?;
        if finished {
            // Both dirs' checkpoints now say where the log is, so a crash keeps its log start
            // and high watermark (and the old dir's stops naming it).
            if let Err(error) = self.checkpoint() {
                tracing::warn!(%error, "cannot checkpoint the log dirs after a move");
            }
        }
        Ok(MoveStep {
            finished,
            bytes_copied,
        })
    }

    /// One round of the move of `tp`, its current log locked by the caller (`current`,
    /// released once the batches to copy are picked): copies up to `max_bytes` into its future
    /// log. None: no move of this log is under way.
    fn copy_round<G: Deref<Target = Log>>(
        &self,
        tp: &TopicPartition,
        log: &Arc<Mutex<Log>>,
        current: G,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<Option<MoveRound>, StorageError> {
        let future = {
            let logs = lock_map(&self.logs);
            let futures = lock_map(&self.futures);
            if !logs.get(tp).is_some_and(|m| Arc::ptr_eq(&m.log, log)) {
                return Ok(None);
            }
            futures.get(tp).map(|m| Arc::clone(&m.log))
        };
        let Some(future) = future else {
            return Ok(None);
        };
        let (caught_up, bytes_copied) = catch_up_round(current, &future, max_bytes, now_ms)?;
        Ok(Some(MoveRound {
            caught_up,
            bytes_copied,
            future,
        }))
    }

    /// The swap, under the current log's lock (`current_log`, locked by the caller): the last batches are copied and the future log synced and closed, the commit
    /// marker written in its dir and both dirs synced; the current log's dir is renamed
    /// `-delete` (the commit point: a restart from here on finishes the swap); the future dir is
    /// renamed to the partition's name; the log reopened from there replaces the current one in
    /// place, so every holder of the partition's log carries on with it. Returns whether the
    /// move is over; false, changing nothing, when the round's future log is no longer the
    /// partition's (another AlterReplicaLogDirs came meanwhile).
    fn complete_move(
        &self,
        tp: &TopicPartition,
        log: &Arc<Mutex<Log>>,
        current_log: &mut Log,
        round: MoveRound,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<bool, StorageError> {
        let mut future_log = lock_log(&round.future);
        // Held throughout: no dir goes offline mid-swap.
        let offline = lock_map(&self.offline_dirs);
        let mut logs = lock_map(&self.logs);
        let mut futures = lock_map(&self.futures);
        let (Some(current), Some(future)) = (logs.get(tp), futures.get(tp)) else {
            return Ok(true);
        };
        if !Arc::ptr_eq(&current.log, log) {
            return Ok(true);
        }
        if !Arc::ptr_eq(&future.log, &round.future) {
            return Ok(false);
        }
        let (source_index, dest_index) = (current.dir_index, future.dir_index);
        for (index, log) in [(source_index, &*current_log), (dest_index, &*future_log)] {
            if offline.contains(&index) || log.is_offline() {
                return Err(StorageError::LogDirOffline(self.log_dirs[index].clone()));
            }
        }
        catch_up_locked(current_log, &mut future_log, max_bytes, now_ms)?;
        debug_assert_eq!(future_log.log_end_offset(), current_log.log_end_offset());
        future_log.close()?;
        let future_dir = future_log.dir().to_path_buf();
        let marker = future_dir.join(MOVE_COMMITTED_FILE);
        File::create(&marker)
            .and_then(|f| f.sync_all())
            .at(&marker)?;
        sync_dir(&future_dir)?;
        let dest_dir = &self.log_dirs[dest_index];
        // The future dir's own entry must be durable before the original goes.
        sync_dir(dest_dir)?;
        let current_dir = current_log.dir().to_path_buf();
        let current_parent = current_dir.parent().unwrap_or(Path::new(".")).to_path_buf();
        let doomed = current_parent.join(retired_dir_name(tp, DELETE_DIR_SUFFIX));
        std::fs::rename(&current_dir, &doomed).at(&current_dir)?;
        // Committed: the future log is the partition's log now, whatever fails below.
        let final_dir = dest_dir.join(tp.dir_name());
        let reopened = (|| {
            sync_dir(&current_parent)?;
            std::fs::rename(&future_dir, &final_dir).at(&future_dir)?;
            sync_dir(dest_dir)?;
            remove_commit_marker(&final_dir);
            let (mut moved, _) = Log::open(
                &final_dir,
                tp.clone(),
                current_log.topic_id(),
                current_log.config().clone(),
                future_log.log_end_offset(),
                current_log.log_start_offset(),
                true,
                now_ms,
            )?;
            moved.restore_high_watermark(current_log.high_watermark());
            if let Some(epoch) = current_log.latest_epoch() {
                // An epoch begun at the log end with nothing appended yet is in no batch.
                moved.become_leader(epoch)?;
            }
            Ok::<_, StorageError>(moved)
        })();
        futures.remove(tp);
        let moved = match reopened {
            Ok(moved) => moved,
            Err(error) => {
                // Neither copy can be served from here; a restart finds the future dir (renamed
                // or not, with its commit marker) and makes it the partition's log.
                current_log.mark_offline();
                tracing::error!(%tp, %error, "a moved log could not be reopened; its partition is offline until restart");
                return Err(error);
            }
        };
        debug_assert_eq!(moved.log_end_offset(), current_log.log_end_offset());
        let mut replaced = std::mem::replace(current_log, moved);
        replaced.mark_closed();
        drop(replaced);
        if let Some(current) = logs.get_mut(tp) {
            current.dir_index = dest_index;
        }
        drop((futures, logs, offline, future_log));
        tracing::info!(%tp, to = %final_dir.display(), "partition moved to another log dir");
        self.schedule_deletion(doomed, now_ms);
        Ok(true)
    }

    /// Gives up the move of `tp` (its step failed, or the partition went away), its current
    /// log locked by the caller (`current`): the future log and its dir are removed and the
    /// current log is cleaned again.
    pub fn abort_move(&self, tp: &TopicPartition, current: &mut Log) -> Result<(), StorageError> {
        let future = lock_map(&self.futures).remove(tp);
        current.set_moving(false);
        match future {
            Some(future) => discard_future(&future),
            None => Ok(()),
        }
    }

    pub fn all_logs(&self) -> PartitionLogs {
        lock_map(&self.logs)
            .iter()
            .map(|(tp, m)| (tp.clone(), Arc::clone(&m.log)))
            .collect()
    }

    /// Every partition log grouped by the log dir holding it, in `log.dirs` order (empty dirs
    /// included).
    pub fn logs_by_dir(&self) -> Vec<(PathBuf, PartitionLogs)> {
        self.by_dir(&lock_map(&self.logs))
    }

    fn by_dir(&self, logs: &BTreeMap<TopicPartition, ManagedLog>) -> Vec<(PathBuf, PartitionLogs)> {
        let mut dirs: Vec<(PathBuf, PartitionLogs)> = self
            .log_dirs
            .iter()
            .map(|dir| (dir.clone(), Vec::new()))
            .collect();
        for (tp, managed) in logs {
            if let Some((_, logs)) = dirs.get_mut(managed.dir_index) {
                logs.push((tp.clone(), Arc::clone(&managed.log)));
            }
        }
        dirs
    }

    pub fn log_dirs(&self) -> &[PathBuf] {
        &self.log_dirs
    }

    pub fn default_config(&self) -> &LogConfig {
        &self.default_config
    }
}

/// Closes a future log and removes its directory.
fn discard_future(future: &ManagedLog) -> Result<(), StorageError> {
    let mut log = lock_log(&future.log);
    log.mark_closed();
    let dir = log.dir().to_path_buf();
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).at(&dir),
        _ => Ok(()),
    }
}

/// Removes dirs [`LogManager::take_due_deletions`] handed out; one that cannot be removed is
/// left (the next start queues it again). Returns how many went.
pub fn remove_retired_dirs(dirs: Vec<PathBuf>) -> usize {
    let mut removed = 0;
    for dir in dirs {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => removed += 1,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %dir.display(), %error, "cannot remove a deleted partition's dir")
            }
        }
    }
    removed
}

/// A retired partition dir's name as Kafka gives it: `<topic>-<partition>.<32 hex
/// digits><suffix>`, the topic cut short so that the name fits in 255 bytes.
fn retired_dir_name(tp: &TopicPartition, suffix: &str) -> String {
    let tail = format!("-{}.{}{suffix}", tp.partition, random_hex_id());
    let mut keep = tp.topic.len().min(255usize.saturating_sub(tail.len()));
    while !tp.topic.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{tail}", &tp.topic[..keep])
}

/// 16 random bytes as 32 lowercase hex digits, for `-delete` directory names. The standard
/// library's randomly keyed hasher is the entropy source; uniqueness is all that matters here.
fn random_hex_id() -> String {
    let mut out = String::with_capacity(32);
    for _ in 0..2 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0);
        for byte in hasher.finish().to_be_bytes() {
            out.push_str(&format!("{byte:02x}"));
        }
    }
    out
}
