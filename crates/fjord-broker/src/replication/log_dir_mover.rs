//! The thread that moves partition logs between log dirs (AlterReplicaLogDirs), as Kafka's
//! ReplicaAlterLogDirsThread does: it asks each partition whose log is moving for a step
//! (`Partition::advance_move`, under the partition's own lock) until each future log has caught
//! up and taken its current log's place. Moves found at start-up (a restart mid-copy) resume
//! here too, once their partition is hosted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fjord_common::lock;
use fjord_storage::cleaner::throttle::Throttler;
use fjord_storage::StorageError;

use crate::replication::ReplicaManager;
use fjord_common::now_ms;

/// Bytes copied per step of one move: moves take turns at this grain.
const STEP_BYTES: usize = 1024 * 1024;
/// How long the idle thread sleeps before looking again without being woken.
const IDLE_WAIT: Duration = Duration::from_secs(1);

struct Shared {
    woken: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    /// `replica.alter.log.dirs.io.max.bytes.per.second`, over all moves.
    throttler: Mutex<Arc<Throttler>>,
}

/// The running mover; [`LogDirMover::shutdown`] stops it after the step under way.
pub struct LogDirMover {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LogDirMover {
    pub fn start(
        replicas: Arc<ReplicaManager>,
        max_bytes_per_second: f64,
    ) -> std::io::Result<LogDirMover> {
        let shared = Arc::new(Shared {
            woken: Mutex::new(false),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            throttler: Mutex::new(Arc::new(Throttler::new(max_bytes_per_second))),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("log-dir-mover".into())
                .spawn(move || run(&replicas, &shared))?
        };
        Ok(LogDirMover {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A new `replica.alter.log.dirs.io.max.bytes.per.second` (dynamic broker config).
    pub fn set_max_bytes_per_second(&self, max_bytes_per_second: f64) {
        *lock(&self.shared.throttler) = Arc::new(Throttler::new(max_bytes_per_second));
    }

    /// A move was asked for: start on it now rather than at the next idle wake-up.
    pub fn wake(&self) {
        *lock(&self.shared.woken) = true;
        self.shared.wake.notify_one();
    }

    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.wake();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn run(replicas: &ReplicaManager, shared: &Shared) {
    let logs = replicas.log_manager();
    while !shared.stop.load(Ordering::Relaxed) {
        let mut stepped = false;
        for tp in logs.moving_partitions() {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            // The partition drives its own log's move; a log not hosted yet (a move resumed at
            // start-up, before the metadata) waits for its partition.
            let Some(partition) = replicas.get_hosted(&tp.topic, tp.partition) else {
                continue;
            };
            stepped = true;
            let throttler = Arc::clone(&lock(&shared.throttler));
            match partition.advance_move(logs, STEP_BYTES, now_ms()) {
                Ok(step) => throttler.maybe_throttle(step.bytes_copied),
                Err(error) => {
                    tracing::warn!(%tp, %error, "moving a partition to another log dir failed; the move is abandoned");
                    if let StorageError::Io { path, .. } = &error {
                        replicas.storage_failure(path, &error.to_string());
                    }
                    if let Err(error) = partition.abort_move(logs) {
                        tracing::warn!(%tp, %error, "cannot remove an abandoned move's future log");
                    }
                }
            }
        }
        if !stepped {
            let woken = lock(&shared.woken);
            let (mut woken, _) = shared
                .wake
                .wait_timeout_while(woken, IDLE_WAIT, |woken| !*woken)
                .unwrap_or_else(|p| p.into_inner());
            *woken = false;
        }
    }
}
