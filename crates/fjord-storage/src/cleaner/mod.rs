//! The log cleaner: compaction of logs whose `cleanup.policy` includes `compact`.
//!
//! `log.cleaner.threads` background threads each take the dirtiest log (largest share of
//! dirty bytes, or overdue by `max.compaction.lag.ms`), run a [`pass`] over it, and record
//! where the clean part now ends in the log dir's `cleaner-offset-checkpoint`, Kafka's file.
//! Each thread's key map is bounded by its share of `log.cleaner.dedupe.buffer.size`; a dirty
//! section with more keys is cleaned over several passes. A log whose pass fails is left alone
//! until the next start, as Kafka marks it uncleanable.

pub mod offset_map;
pub mod pass;
pub mod throttle;
pub mod txn;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::checkpoint::{read_offset_checkpoint, write_offset_checkpoint};
use crate::error::{IoResultExt, StorageError};
use fjord_common::{lock, TopicPartition};

use crate::log::{CleanableLog, Log};
use crate::log_manager::PartitionLogs;
use offset_map::OffsetMap;
use pass::{clean_log, PassIo, PassOutcome};
use throttle::Throttler;

pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// The broker's `log.cleaner.*` settings; `Default` gives Kafka's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// log.cleaner.enable
    pub enable: bool,
    /// log.cleaner.threads
    pub threads: usize,
    /// log.cleaner.dedupe.buffer.size: the key maps of all threads together.
    pub dedupe_buffer_size: u64,
    /// log.cleaner.io.buffer.load.factor
    pub dedupe_buffer_load_factor: f64,
    /// log.cleaner.io.buffer.size: read and write buffers of all threads together.
    pub io_buffer_size: usize,
    /// log.cleaner.io.max.bytes.per.second
    pub io_max_bytes_per_second: f64,
    /// log.cleaner.backoff.ms: the sleep when no log needs cleaning.
    pub backoff_ms: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            enable: true,
            threads: 1,
            dedupe_buffer_size: 128 * 1024 * 1024,
            dedupe_buffer_load_factor: 0.9,
            io_buffer_size: 512 * 1024,
            io_max_bytes_per_second: f64::MAX,
            backoff_ms: 15_000,
        }
    }
}

/// Where the logs come from: every log dir with its partition logs, asked afresh each round.
pub type LogSource = dyn Fn() -> Vec<(PathBuf, PartitionLogs)> + Send + Sync;

/// What one generation of cleaner threads shares (a reconfiguration starts a new one).
struct Shared {
    config: CleanerConfig,
    source: Arc<LogSource>,
    state: Arc<Mutex<State>>,
    wake: Condvar,
    stop: AtomicBool,
    throttler: Throttler,
}

#[derive(Default)]
struct State {
    /// Per log dir: the first dirty offset of each log, as in its checkpoint file.
    checkpoints: HashMap<PathBuf, BTreeMap<TopicPartition, i64>>,
    in_progress: HashSet<TopicPartition>,
    uncleanable: HashSet<TopicPartition>,
    /// What the completed passes did; tests and operators watch it move.
    totals: CleanerTotals,
}

/// What the cleaner has done since the broker started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanerTotals {
    /// Completed passes.
    pub passes: u64,
    /// Bytes of the segments the passes read.
    pub bytes_read: u64,
    /// Bytes of the cleaned segments they wrote.
    pub bytes_written: u64,
    /// Time the passes took, in ms.
    pub elapsed_ms: u64,
    /// Logs whose cleaning failed, not cleaned again until a restart.
    pub uncleanable: u64,
}

/// One log chosen for a pass.
struct Job {
    dir: PathBuf,
    tp: TopicPartition,
    log: Arc<Mutex<Log>>,
    /// The log's own directory when the pass began; a log moved to another log dir since
    /// (AlterReplicaLogDirs) voids the pass.
    partition_dir: PathBuf,
    cleanable: CleanableLog,
}

/// The running cleaner; [`LogCleaner::shutdown`] stops its threads.
pub struct LogCleaner {
    running: Mutex<(Arc<Shared>, Vec<JoinHandle<()>>)>,
}

impl LogCleaner {
    /// Loads each dir's checkpoint and starts the threads (none when disabled).
    pub fn start(
        config: CleanerConfig,
        log_dirs: &[PathBuf],
        source: Box<LogSource>,
    ) -> Result<LogCleaner, StorageError> {
        let mut state = State::default();
        for dir in log_dirs {
            let path = dir.join(CLEANER_OFFSET_CHECKPOINT_FILE);
            let entries = read_offset_checkpoint(&path)?
                .into_iter()
                .map(|(topic, partition, offset)| (TopicPartition { topic, partition }, offset))
                .collect();
            state.checkpoints.insert(dir.clone(), entries);
        }
        let running = spawn(config, Arc::from(source), Arc::new(Mutex::new(state)))?;
        Ok(LogCleaner {
            running: Mutex::new(running),
        })
    }

    /// Applies new settings (dynamic broker configs changed), as Kafka does: the threads stop,
    /// each before its next swap, and new ones start with the new settings. The checkpoints and
    /// the logs marked uncleanable carry over.
    pub fn reconfigure(&self, config: CleanerConfig) -> Result<(), StorageError> {
        let mut running = lock(&self.running);
        if running.0.config == config {
            return Ok(());
        }
        let (source, state) = (Arc::clone(&running.0.source), Arc::clone(&running.0.state));
        stop(&mut running);
        *running = spawn(config, source, state)?;
        Ok(())
    }

    pub fn config(&self) -> CleanerConfig {
        lock(&self.running).0.config.clone()
    }

    /// Asks idle threads to look for work now (a topic's configs changed).
    pub fn wake(&self) {
        lock(&self.running).0.wake.notify_all();
    }

    /// Completed passes since start.
    pub fn passes(&self) -> u64 {
        self.totals().passes
    }

    /// What the cleaner has done since start.
    pub fn totals(&self) -> CleanerTotals {
        let state = lock(&self.running).0.state.clone();
        let state = lock(&state);
        CleanerTotals {
            uncleanable: state.uncleanable.len() as u64,
            ..state.totals
        }
    }

    /// Stops the threads; a pass under way is abandoned before its next swap, which loses
    /// nothing (the next start cleans from the last checkpoint).
    pub fn shutdown(&self) {
        stop(&mut lock(&self.running));
    }
}

impl Drop for LogCleaner {
    fn drop(&mut self) {
        stop(&mut lock(&self.running));
    }
}

fn spawn(
    config: CleanerConfig,
    source: Arc<LogSource>,
    state: Arc<Mutex<State>>,
) -> Result<(Arc<Shared>, Vec<JoinHandle<()>>), StorageError> {
    let shared = Arc::new(Shared {
        throttler: Throttler::new(config.io_max_bytes_per_second),
        config,
        source,
        state,
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
    });
    let threads = if shared.config.enable {
        (0..shared.config.threads)
            .map(|id| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("log-cleaner-{id}"))
                    .spawn(move || run(&shared, id))
                    .at(Path::new("log cleaner thread"))
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    Ok((shared, threads))
}

fn stop(running: &mut (Arc<Shared>, Vec<JoinHandle<()>>)) {
    let shared = &running.0;
    shared.stop.store(true, Ordering::Relaxed);
    {
        let _state = lock(&shared.state);
        shared.wake.notify_all();
    }
    for thread in running.1.drain(..) {
        let _ = thread.join();
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn run(shared: &Shared, id: usize) {
    let config = &shared.config;
    let threads = config.threads.max(1) as u64;
    let map_bytes = config.dedupe_buffer_size / threads;
    let io_buffer_bytes = (config.io_buffer_size / threads as usize / 2).max(64 * 1024);
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(job) = grab_filthiest(shared) else {
            let state = lock(&shared.state);
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let _ = shared
                .wake
                .wait_timeout(state, Duration::from_millis(config.backoff_ms.max(1)));
            continue;
        };
        // The map lives for one pass: an idle cleaner holds no memory.
        let mut map = OffsetMap::new(map_bytes, config.dedupe_buffer_load_factor);
        let io = PassIo {
            map: &mut map,
            throttler: &shared.throttler,
            io_buffer_bytes,
            stop: &shared.stop,
        };
        let result = clean_log(&job.log, &job.cleanable, io, now_ms());
        let mut state = lock(&shared.state);
        state.in_progress.remove(&job.tp);
        match result {
            Ok(PassOutcome::Cleaned { end_offset, stats }) => {
                let totals = &mut state.totals;
                totals.passes += 1;
                totals.bytes_read += stats.bytes_read;
                totals.bytes_written += stats.bytes_written;
                totals.elapsed_ms += stats.elapsed_ms;
                let mb = stats.bytes_read as f64 / 1e6;
                let seconds = (stats.elapsed_ms.max(1) as f64) / 1000.0;
                tracing::info!(
                    cleaner = id,
                    tp = %job.tp,
                    first_dirty = job.cleanable.first_dirty_offset,
                    end_offset,
                    dirty_ratio = job.cleanable.cleanable_ratio(),
                    bytes_read = stats.bytes_read,
                    bytes_written = stats.bytes_written,
                    records_read = stats.records_read,
                    records_kept = stats.records_kept,
                    keys_mapped = stats.keys_mapped,
                    map_memory_bytes = stats.map_memory_bytes,
                    map_utilization = stats.map_utilization,
                    segments = %format!("{} -> {}", stats.segments_read, stats.segments_written),
                    elapsed_ms = stats.elapsed_ms,
                    mb_per_sec = mb / seconds,
                    "log cleaned"
                );
                let entries = state.checkpoints.entry(job.dir.clone()).or_default();
                entries.insert(job.tp.clone(), end_offset);
                let snapshot = entries.clone();
                drop(state);
                write_checkpoint(shared, &job.dir, snapshot);
            }
            Ok(PassOutcome::Aborted) => {
                tracing::debug!(tp = %job.tp, "cleaning pass abandoned: the log changed or the cleaner is stopping");
            }
            Err(error) if lock(&job.log).dir() != job.partition_dir => {
                tracing::debug!(tp = %job.tp, %error, "cleaning pass abandoned: the log moved to another log dir");
            }
            Err(error) => {
                tracing::warn!(tp = %job.tp, %error, "cleaning failed; the log is not cleaned again until restart");
                state.uncleanable.insert(job.tp);
            }
        }
    }
}

/// Picks the log that needs cleaning most and marks it in progress.
fn grab_filthiest(shared: &Shared) -> Option<Job> {
    let now = now_ms();
    let dirs = (shared.source)();
    let mut reset = Vec::new();
    let mut best: Option<Job> = None;
    {
        let state = lock(&shared.state);
        for (dir, logs) in &dirs {
            let checkpoints = state.checkpoints.get(dir);
            for (tp, log) in logs {
                if state.in_progress.contains(tp) || state.uncleanable.contains(tp) {
                    continue;
                }
                let checkpoint = checkpoints.and_then(|c| c.get(tp)).copied();
                let (cleanable, partition_dir) = {
                    let log = lock(log);
                    (log.cleanable(checkpoint, now), log.dir().to_path_buf())
                };
                let Some(cleanable) = cleanable else {
                    continue;
                };
                if cleanable.reset_checkpoint {
                    reset.push((dir.clone(), tp.clone(), cleanable.first_dirty_offset));
                }
                if cleanable.clean_bytes + cleanable.cleanable_bytes == 0
                    || !cleanable.needs_cleaning()
                {
                    continue;
                }
                let dirtier = best
                    .as_ref()
                    .is_none_or(|b| cleanable.cleanable_ratio() > b.cleanable.cleanable_ratio());
                if dirtier {
                    best = Some(Job {
                        dir: dir.clone(),
                        tp: tp.clone(),
                        log: Arc::clone(log),
                        partition_dir,
                        cleanable,
                    });
                }
            }
        }
    }
    let mut state = lock(&shared.state);
    let mut touched = Vec::new();
    for (dir, tp, offset) in reset {
        state
            .checkpoints
            .entry(dir.clone())
            .or_default()
            .insert(tp, offset);
        touched.push(dir);
    }
    let job = best.filter(|job| state.in_progress.insert(job.tp.clone()));
    let snapshots: Vec<_> = touched
        .into_iter()
        .filter_map(|dir| Some((dir.clone(), state.checkpoints.get(&dir)?.clone())))
        .collect();
    drop(state);
    for (dir, entries) in snapshots {
        write_checkpoint(shared, &dir, entries);
    }
    job
}

/// Rewrites a dir's `cleaner-offset-checkpoint`, keeping only logs that still exist there.
fn write_checkpoint(shared: &Shared, dir: &Path, entries: BTreeMap<TopicPartition, i64>) {
    let live: HashSet<TopicPartition> = (shared.source)()
        .into_iter()
        .filter(|(d, _)| d == dir)
        .flat_map(|(_, logs)| logs.into_iter().map(|(tp, _)| tp))
        .collect();
    let lines: Vec<(String, i32, i64)> = entries
        .into_iter()
        .filter(|(tp, _)| live.contains(tp))
        .map(|(tp, offset)| (tp.topic, tp.partition, offset))
        .collect();
    let path = dir.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    if let Err(error) = write_offset_checkpoint(&path, &lines) {
        tracing::warn!(path = %path.display(), %error, "cannot write the cleaner checkpoint");
    }
}
