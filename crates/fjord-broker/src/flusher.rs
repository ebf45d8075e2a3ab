//! Group commit: one fsync covers every append that arrived while the previous fsync ran.
//!
//! Produce handlers append to a partition's log (page cache only) and then ask the flusher to make
//! the log durable up to the offset they wrote. The flusher drains every waiting request, takes a
//! flush ticket per distinct partition under its lock, fsyncs outside the lock on its own thread,
//! then advances each log's recovery point and high watermark and wakes the waiters. Under load
//! many produce requests — across connections and partitions — share each fsync.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fjord_storage::log::Log;
use tokio::sync::{mpsc, oneshot, watch};

/// Bound on queued flush requests; producers wait for room rather than queue without limit.
pub const FLUSH_QUEUE_CAPACITY: usize = 4096;

pub struct FlushRequest {
    pub log: Arc<Mutex<Log>>,
    /// Durable up to here (exclusive) is what the waiter needs.
    pub up_to_offset: i64,
    pub done: oneshot::Sender<Result<(), String>>,
}

#[derive(Clone)]
pub struct FlusherHandle {
    sender: mpsc::Sender<FlushRequest>,
}

impl FlusherHandle {
    /// Waits until `log` is durable up to `up_to_offset`.
    pub async fn flush(&self, log: Arc<Mutex<Log>>, up_to_offset: i64) -> Result<(), String> {
        // A round that started after this append already covered it.
        if already_durable(&log, up_to_offset) {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        self.sender
            .send(FlushRequest {
                log,
                up_to_offset,
                done,
            })
            .await
            .map_err(|_| "broker is shutting down".to_string())?;
        wait.await.map_err(|_| "flusher stopped".to_string())?
    }
}

/// Starts the flusher. `high_watermark_moved` is bumped after each round so long-polling
/// fetches re-check. The flusher is one thread of its own that fsyncs and then answers the
/// waiters itself: no task hand-offs between a finished fsync and the next one, which on a busy
/// machine cost more than the fsync.
pub fn start(
    high_watermark_moved: Arc<watch::Sender<u64>>,
) -> (FlusherHandle, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = mpsc::channel::<FlushRequest>(FLUSH_QUEUE_CAPACITY);
    let task = tokio::task::spawn_blocking(move || {
        while let Some(first) = receiver.blocking_recv() {
            let mut round = vec![first];
            while let Ok(more) = receiver.try_recv() {
                round.push(more);
            }
            run_round(round);
            high_watermark_moved.send_modify(|v| *v = v.wrapping_add(1));
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

/// One group commit: a ticket per distinct log, fsynced in turn (on ext4 the first fsync's
/// journal commit already carries the others' metadata), then every waiter answered.
fn run_round(round: Vec<FlushRequest>) {
    // One ticket per distinct log, keyed by the Arc's address, covering its furthest request.
    let mut logs: HashMap<usize, (Arc<Mutex<Log>>, i64)> = HashMap::new();
    for request in &round {
        let entry = logs
            .entry(Arc::as_ptr(&request.log) as usize)
            .or_insert_with(|| (request.log.clone(), request.up_to_offset));
        entry.1 = entry.1.max(request.up_to_offset);
    }
    let mut results: HashMap<usize, Result<(), String>> = HashMap::new();
    for (key, (log, furthest)) in logs {
        // Requests that queued while the previous round ran may all be covered by it already.
        if already_durable(&log, furthest) {
            results.insert(key, Ok(()));
            continue;
        }
        let ticket = match log.lock() {
            Ok(guard) => guard.prepare_flush(),
            Err(_) => {
                results.insert(key, Err("log lock poisoned".to_string()));
                continue;
            }
        };
        let outcome = ticket.sync().map_err(|e| e.to_string());
        if outcome.is_ok() {
            if let Ok(mut guard) = log.lock() {
                let durable = guard.complete_flush(&ticket);
                if durable > guard.high_watermark() {
                    guard.set_high_watermark(durable);
                }
            }
        }
        results.insert(key, outcome);
    }
    for request in round {
        let key = Arc::as_ptr(&request.log) as usize;
        let outcome = results
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Err("fsync did not run".to_string()));
        // A flush covers everything appended before its ticket, so an earlier offset is covered too.
        let _ = request.done.send(outcome);
    }
}
