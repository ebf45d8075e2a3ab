//! Group commit: one round of fsyncs covers every append that arrived while the previous round ran.
//!
//! Produce handlers append to their partitions' logs (page cache only) and then hand the flusher
//! every partition they wrote, with the offset each must be durable below, as one request. The
//! flusher drains every waiting request, takes a flush ticket per distinct log under its lock,
//! fsyncs the tickets side by side outside the locks, then advances each log's recovery point and
//! high watermark and answers the waiters. Under load many produce requests — across connections
//! and partitions — share each round.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fjord_common::errors::{KafkaError, KAFKA_STORAGE_ERROR};
use fjord_storage::log::Log;
use fjord_storage::parallel;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;

/// A flush that did not make its records durable: they are not acknowledged.
fn storage_error(message: &str) -> KafkaError {
    KafkaError::new(KAFKA_STORAGE_ERROR, message)
}

/// Bound on queued flush requests; producers wait for room rather than queue without limit.
pub const FLUSH_QUEUE_CAPACITY: usize = 4096;

/// A round this slow, or a waiter that queued this long before its round, is logged at debug
/// level: acknowledgements wait for it (a healthy SSD fsyncs in well under a millisecond).
const SLOW_ROUND: Duration = Duration::from_millis(10);
/// From this long a round is logged as a warning: the disk is stalling.
const STALLED_ROUND: Duration = Duration::from_secs(1);

/// What a flush makes durable: a log, and who hears how far (a partition, whose high watermark
/// may follow).
pub trait Durable: Send + Sync {
    fn log(&self) -> &Arc<Mutex<Log>>;
    /// `log` (locked by the caller) is durable below `offset`.
    fn made_durable(&self, log: &mut Log, offset: i64);
}

/// Something to make durable and the offset below which it must be.
pub type FlushTarget = (Arc<dyn Durable>, i64);

/// What a waiter hands the flusher: every target of one produce request, so that one round
/// covers them all.
struct FlushRequest {
    targets: Vec<FlushTarget>,
    /// One result per target, in order.
    done: oneshot::Sender<Vec<Result<(), KafkaError>>>,
    queued_at: Instant,
}

#[derive(Clone)]
pub struct FlusherHandle {
    sender: mpsc::Sender<FlushRequest>,
}

impl FlusherHandle {
    /// Waits until `target` is durable below `up_to_offset`.
    pub async fn flush(
        &self,
        target: Arc<dyn Durable>,
        up_to_offset: i64,
    ) -> Result<(), KafkaError> {
        self.flush_all(vec![(target, up_to_offset)])
            .await
            .pop()
            .unwrap_or_else(|| Err(storage_error("flusher answered nothing")))
    }

    /// Waits until every target is durable; one result per target, in order. The targets travel
    /// as one request, so a produce request to many partitions waits for one round, not one
    /// round per partition.
    pub async fn flush_all(&self, targets: Vec<FlushTarget>) -> Vec<Result<(), KafkaError>> {
        let count = targets.len();
        // Rounds that started after these appends already covered them.
        if targets
            .iter()
            .all(|(target, up_to_offset)| already_durable(target.log(), *up_to_offset))
        {
            return vec![Ok(()); count];
        }
        let (done, wait) = oneshot::channel();
        let request = FlushRequest {
            targets,
            done,
            queued_at: Instant::now(),
        };
        if self.sender.send(request).await.is_err() {
            return vec![Err(storage_error("broker is shutting down")); count];
        }
        match wait.await {
            Ok(results) if results.len() == count => results,
            _ => vec![Err(storage_error("flusher stopped")); count],
        }
    }
}

/// Starts the flusher. The flusher is one thread of its own (with helper threads for a round's
/// fsyncs) that answers the waiters itself: no task hand-offs between a finished fsync and the next one, which on a busy
/// machine cost more than the fsync.
/// Called with the partition dir and the error when an fsync fails: the log dir must go offline.
pub type StorageFailure = Arc<dyn Fn(&std::path::Path, &str) + Send + Sync>;

pub fn start(
    on_failure: StorageFailure,
    metrics: Arc<Metrics>,
) -> (FlusherHandle, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = mpsc::channel::<FlushRequest>(FLUSH_QUEUE_CAPACITY);
    let task = tokio::task::spawn_blocking(move || {
        while let Some(first) = receiver.blocking_recv() {
            let mut round = vec![first];
            while let Ok(more) = receiver.try_recv() {
                round.push(more);
            }
            run_round(round, &on_failure, &metrics);
        }
    });
    (FlusherHandle { sender }, task)
}

/// Whether `log` is durable below `up_to_offset`: the recovery point only moves past what a
/// completed flush covered.
fn already_durable(log: &Mutex<Log>, up_to_offset: i64) -> bool {
    log.lock()
        .map(|guard| guard.recovery_point() >= up_to_offset)
        .unwrap_or(false)
}

/// One group commit: a ticket per distinct log, the tickets fsynced side by side (the disk
/// overlaps concurrent writes and cache flushes, and a journaling filesystem folds them into
/// shared commits, so several logs cost little more than one), then every waiter answered.
fn run_round(round: Vec<FlushRequest>, on_failure: &StorageFailure, metrics: &Metrics) {
    let started = Instant::now();
    // One ticket per distinct log, keyed by the Arc's address, covering its furthest target.
    let mut logs: HashMap<usize, (Arc<dyn Durable>, i64)> = HashMap::new();
    for (target, up_to_offset) in round.iter().flat_map(|request| &request.targets) {
        let entry = logs
            .entry(log_key(target.log()))
            .or_insert_with(|| (target.clone(), *up_to_offset));
        entry.1 = entry.1.max(*up_to_offset);
    }
    let mut results: HashMap<usize, Result<(), KafkaError>> = HashMap::new();
    let mut tickets = Vec::new();
    for (key, (target, furthest)) in logs {
        // Targets that queued while the previous round ran may all be covered by it already.
        if already_durable(target.log(), furthest) {
            results.insert(key, Ok(()));
            continue;
        }
        let ticket = match target.log().lock() {
            Ok(guard) if guard.is_offline() => {
                results.insert(key, Err(storage_error("the log dir is offline")));
                continue;
            }
            Ok(guard) => guard.prepare_flush(),
            Err(_) => {
                results.insert(key, Err(storage_error("log lock poisoned")));
                continue;
            }
        };
        tickets.push((key, target, ticket));
    }
    let synced = tickets.len();
    let syncing = Instant::now();
    let outcomes = parallel::map(tickets, parallel::DISK_THREADS, |(key, target, ticket)| {
        let outcome = ticket
            .sync()
            .map_err(|e| KafkaError::new(e.kafka_error_code(), e.to_string()));
        (key, target, ticket, outcome)
    });
    for (key, target, ticket, outcome) in outcomes {
        if let Err(error) = &outcome {
            // Linux may drop the failed pages from the cache: a later fsync could succeed
            // without them. The high watermark stays, and the dir goes offline.
            on_failure(ticket.dir(), &error.message);
        }
        if outcome.is_ok() {
            if let Some(log_dir) = ticket.dir().parent() {
                metrics.storage.synced_in(log_dir);
            }
            if let Ok(mut guard) = target.log().lock() {
                let durable = guard.complete_flush(&ticket);
                target.made_durable(&mut guard, durable);
            }
        }
        results.insert(key, outcome);
    }
    if synced > 0 {
        metrics.storage.flushed(synced, syncing.elapsed());
    }
    log_if_slow(&round, started, synced);
    for request in round {
        // A flush covers everything appended before its ticket, so an earlier offset is covered too.
        let answers = request
            .targets
            .iter()
            .map(|(target, _)| {
                results
                    .get(&log_key(target.log()))
                    .cloned()
                    .unwrap_or_else(|| Err(storage_error("fsync did not run")))
            })
            .collect();
        let _ = request.done.send(answers);
    }
}

fn log_key(log: &Arc<Mutex<Log>>) -> usize {
    Arc::as_ptr(log) as usize
}

/// Logs a round that kept its waiters long: its own fsyncs (`round_ms`, lock waits included) or the
/// oldest waiter's queueing before it began (`queued_ms`: the rounds before, or a flusher thread
/// that did not get a core).
fn log_if_slow(round: &[FlushRequest], started: Instant, logs: usize) {
    let took = started.elapsed();
    let queued = round
        .iter()
        .map(|r| started.saturating_duration_since(r.queued_at))
        .max()
        .unwrap_or_default();
    if took < SLOW_ROUND && queued < SLOW_ROUND {
        return;
    }
    let round_ms = took.as_millis() as u64;
    let queued_ms = queued.as_millis() as u64;
    let waiters = round.len();
    if took >= STALLED_ROUND {
        tracing::warn!(
            round_ms,
            queued_ms,
            logs,
            waiters,
            "slow fsync: acknowledgements wait for the disk"
        );
    } else {
        tracing::debug!(round_ms, queued_ms, logs, waiters, "slow flush round");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::TopicPartition;
    use fjord_records::{BatchBuilder, Compression};
    use fjord_storage::LogConfig;

    /// A bare log whose high watermark follows what is durable.
    struct Bare(Arc<Mutex<Log>>);

    impl Durable for Bare {
        fn log(&self) -> &Arc<Mutex<Log>> {
            &self.0
        }

        fn made_durable(&self, log: &mut Log, offset: i64) {
            log.raise_high_watermark(offset);
        }
    }

    fn target(log: &Arc<Mutex<Log>>) -> Arc<dyn Durable> {
        Arc::new(Bare(log.clone()))
    }

    fn open_log(dir: &std::path::Path, partition: i32) -> Arc<Mutex<Log>> {
        let tp = TopicPartition::new("events", partition);
        let (log, _) = Log::open(
            &dir.join(format!("events-{partition}")),
            tp,
            None,
            LogConfig::default(),
            0,
            0,
            true,
            1_000,
        )
        .unwrap();
        Arc::new(Mutex::new(log))
    }

    /// Appends `records` one-record batches; returns the log end offset.
    fn append(log: &Mutex<Log>, records: usize) -> i64 {
        let mut log = log.lock().unwrap();
        for _ in 0..records {
            let mut builder = BatchBuilder::new(Compression::None);
            builder.append(1_000, None, Some(b"value"), &[]).unwrap();
            log.append_as_leader(vec![builder.build().unwrap()], 0, 1_000)
                .unwrap();
        }
        log.log_end_offset()
    }

    #[tokio::test]
    async fn one_request_makes_every_partition_durable_and_answers_each() {
        let dir = tempfile::tempdir().unwrap();
        let (flusher, task) = start(Arc::new(|_: &std::path::Path, _: &str| {}), Metrics::new());
        let logs: Vec<_> = (0..5).map(|p| open_log(dir.path(), p)).collect();
        let mut targets = Vec::new();
        for (i, log) in logs.iter().enumerate() {
            let end = append(log, i + 1);
            targets.push((target(log), end));
        }
        // The same log twice (two batches of one request) is one ticket covering both.
        targets.push((target(&logs[0]), 1));
        let results = flusher.flush_all(targets).await;
        assert_eq!(results.len(), 6);
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        for (i, log) in logs.iter().enumerate() {
            let log = log.lock().unwrap();
            assert_eq!(log.recovery_point(), i as i64 + 1, "partition {i}");
            assert_eq!(log.high_watermark(), i as i64 + 1, "partition {i}");
        }
        // Already durable: answered without a round.
        let again = flusher.flush_all(vec![(target(&logs[4]), 5)]).await;
        assert_eq!(again, vec![Ok(())]);
        assert_eq!(flusher.flush_all(Vec::new()).await, Vec::new());
        drop(flusher);
        task.await.unwrap();
    }
}
