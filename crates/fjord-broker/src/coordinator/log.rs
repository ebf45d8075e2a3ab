//! What every coordinator (group, transaction) does with its partition of an internal topic:
//! appends its records through the partition like any produce, refused while the ISR is below
//! `min.insync.replicas`, waits until they are durable and in every in-sync replica (Kafka's
//! coordinators write with acks=all), and loads its state by replaying the partition from the
//! log start.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_common::{CoordinatorRecord, LeaderEpoch};
use fjord_group::TxnProducer;
use fjord_records::{AppendBatch, BatchBuilder, Compression};

use crate::replication::flusher::{Durable, FlusherHandle};
use crate::replication::Partition;
use fjord_common::errors::{self, KafkaError};
use fjord_common::now_ms;

/// How long a transaction coordinator write waits for its in-sync replicas (the group
/// coordinator's is `offsets.commit.timeout.ms`, of which this is the default).
pub const REPLICATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Where appended records end: what to wait for before they count as written.
#[derive(Clone)]
pub struct Appended {
    pub partition: Arc<Partition>,
    /// Exclusive end offset of the records.
    pub end_offset: i64,
    pub leader_epoch: LeaderEpoch,
}

/// Why records did not become durable and replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteFailure {
    /// The partition is led elsewhere now (or under a new epoch): the coordinator moved.
    Moved,
    /// The records could not be made durable (the log's disk failed).
    Storage(KafkaError),
    Failed(String),
}

impl WriteFailure {
    /// The error a coordinator answers its requests with, as Kafka's coordinators translate a
    /// failed write: moved or a disk failure is NOT_COORDINATOR, so the client finds the
    /// coordinator anew; too few replicas or no confirmation in time is
    /// COORDINATOR_NOT_AVAILABLE, so it retries.
    pub fn error_code(&self) -> i16 {
        match self {
            WriteFailure::Moved | WriteFailure::Storage(_) => fjord_common::errors::NOT_COORDINATOR,
            WriteFailure::Failed(_) => fjord_common::errors::COORDINATOR_NOT_AVAILABLE,
        }
    }
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteFailure::Moved => f.write_str("the coordinator's partition moved"),
            WriteFailure::Storage(error) => write!(f, "{error}"),
            WriteFailure::Failed(message) => f.write_str(message),
        }
    }
}

/// Appends coordinator records to `partition` as one uncompressed batch, as its leader; with
/// `transaction`, as that producer's transactional batch (a TxnOffsetCommit's offsets, which
/// its marker decides later; no sequence numbers, as Kafka's coordinators write them).
pub fn append(
    partition: &Arc<Partition>,
    records: &[CoordinatorRecord],
    transaction: Option<TxnProducer>,
) -> Result<Appended, WriteFailure> {
    debug_assert!(!records.is_empty(), "an empty coordinator write");
    let now = now_ms();
    let failed = |e: &dyn std::fmt::Display| WriteFailure::Failed(e.to_string());
    let mut builder = BatchBuilder::new(Compression::None);
    if let Some(producer) = transaction {
        builder = builder
            .producer(producer.producer_id, producer.producer_epoch, -1)
            .transactional(true);
    }
    for record in records {
        builder
            .append(now, Some(&record.key[..]), record.value.as_deref(), &[])
            .map_err(|e| failed(&e))?;
    }
    let batch = builder.build().map_err(|e| failed(&e))?;
    let batch = AppendBatch::new(batch.freeze()).map_err(|e| failed(&e))?;
    let mut locked = partition
        .try_lock()
        .map_err(|_| failed(&"coordinator log lock poisoned"))?;
    // Coordinators write with acks=all, so `min.insync.replicas` holds for them as for any
    // producer: nothing is appended while the ISR is too small (Kafka's NOT_ENOUGH_REPLICAS,
    // which its coordinators answer as COORDINATOR_NOT_AVAILABLE).
    if let Some(shortfall) = partition.min_isr_shortfall() {
        return Err(WriteFailure::Failed(shortfall));
    }
    let (info, leader_epoch) = locked.append_as_coordinator(batch, now).map_err(|e| {
        if partition.is_leader() {
            failed(&e)
        } else {
            WriteFailure::Moved
        }
    })?;
    Ok(Appended {
        partition: partition.clone(),
        end_offset: info.last_offset + 1,
        leader_epoch,
    })
}

/// Waits until appended records are durable (when the partition syncs) and in the high
/// watermark, for the in-sync replicas at most `timeout`.
pub async fn written(
    flusher: &FlusherHandle,
    appended: Appended,
    timeout: Duration,
) -> Result<(), WriteFailure> {
    let Appended {
        partition,
        end_offset,
        leader_epoch,
    } = appended;
    flusher
        .flush(partition.clone() as Arc<dyn Durable>, end_offset)
        .await
        .map_err(WriteFailure::Storage)?;
    let wait = partition.delay_produce(end_offset, leader_epoch);
    match tokio::time::timeout(timeout, wait).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(WriteFailure::Moved),
        Err(_) => Err(WriteFailure::Failed(
            "the in-sync replicas did not confirm in time".into(),
        )),
    }
}

/// Waits for what [`append`] answered to be written (see [`written`]), logging a failure as
/// `kind`'s coordinator's.
pub async fn settle(
    flusher: &FlusherHandle,
    appended: Result<Appended, WriteFailure>,
    kind: &str,
) -> Result<(), WriteFailure> {
    let result = match appended {
        Ok(appended) => written(flusher, appended, REPLICATION_TIMEOUT).await,
        Err(failure) => Err(failure),
    };
    if let Err(failure) = &result {
        tracing::warn!(%failure, "{kind} coordinator write failed");
    }
    result
}

/// What a coordinator's partition holds, as replay hands it over.
pub enum Replayed {
    /// A coordinator record; `producer_id` when it is in a transactional batch.
    Record {
        producer_id: Option<i64>,
        record: CoordinatorRecord,
    },
    /// A transaction's commit or abort marker.
    Marker { producer_id: i64, commit: bool },
}

/// Replays `partition` from `from` (its log start when `None`) to its log end, in log order,
/// into `apply`. Returns how many records were replayed and the offset it stopped at.
pub fn replay(
    partition: &Partition,
    from: Option<i64>,
    mut apply: impl FnMut(Replayed) -> Result<(), KafkaError>,
) -> Result<(usize, i64), KafkaError> {
    let poisoned = || {
        KafkaError::new(
            errors::UNKNOWN_SERVER_ERROR,
            "coordinator log lock poisoned",
        )
    };
    let storage =
        |e: fjord_storage::StorageError| KafkaError::new(e.kafka_error_code(), e.to_string());
    let unreadable =
        |e: fjord_records::RecordsError| KafkaError::new(e.kafka_error_code(), e.to_string());
    let (mut offset, end) = {
        let guard = partition.try_lock().map_err(|_| poisoned())?;
        let start = guard.log_start_offset();
        (from.map_or(start, |f| f.max(start)), guard.log_end_offset())
    };
    let mut replayed = 0usize;
    while offset < end {
        let slice = {
            let guard = partition.try_lock().map_err(|_| poisoned())?;
            guard
                .read(offset, 1024 * 1024, end, true)
                .map_err(storage)?
                .records
        };
        let Some(slice) = slice else { break };
        let bytes = slice
            .read_to_bytes()
            .map_err(|e| KafkaError::new(errors::KAFKA_STORAGE_ERROR, e.to_string()))?;
        let mut position = 0usize;
        let mut progressed = false;
        while position < bytes.len() {
            let header =
                fjord_records::BatchHeader::parse(&bytes[position..]).map_err(unreadable)?;
            let end_of_batch = position + header.total_len();
            if end_of_batch > bytes.len() {
                break;
            }
            let batch: Bytes = bytes.slice(position..end_of_batch);
            position = end_of_batch;
            offset = header.last_offset() + 1;
            progressed = true;
            if header.is_control() {
                // Control batches other than markers (none are written) are skipped.
                if let Some(marker) = fjord_records::control::read_marker(&batch) {
                    apply(Replayed::Marker {
                        producer_id: header.producer_id,
                        commit: marker.commit,
                    })?;
                }
                continue;
            }
            let producer_id = header.is_transactional().then_some(header.producer_id);
            let records = fjord_records::records(&batch, 256 * 1024 * 1024).map_err(unreadable)?;
            for record in records {
                let record = record.map_err(unreadable)?;
                let Some(key) = record.key else { continue };
                apply(Replayed::Record {
                    producer_id,
                    record: CoordinatorRecord {
                        key,
                        value: record.value,
                    },
                })?;
                replayed += 1;
            }
        }
        if !progressed {
            break;
        }
    }
    Ok((replayed, offset))
}
