//! Admin APIs on partition logs: DeleteRecords, which moves log start offsets,
//! DescribeLogDirs, which reports each log dir's partitions and space, and
//! AlterReplicaLogDirs, which moves partitions between log dirs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fjord_common::TopicPartition;
use fjord_metadata::acl::AclOperation;
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDirsRequest;
use fjord_protocol::messages::alter_replica_log_dirs_response::*;
use fjord_protocol::messages::delete_records_request::DeleteRecordsRequest;
use fjord_protocol::messages::delete_records_response::*;
use fjord_protocol::messages::describe_log_dirs_request::{
    DescribableLogDirTopic, DescribeLogDirsRequest,
};
use fjord_protocol::messages::describe_log_dirs_response::*;
use fjord_storage::file_io::volume_space;
use fjord_storage::log::Log;
use fjord_storage::{LogManager, StorageError};

use crate::api::{Access, LogAdminApi};
use fjord_common::errors;

/// DeleteRecords' stand-in offset for "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;
/// The low watermark of a partition answered with an error.
const INVALID_LOW_WATERMARK: i64 = -1;

impl LogAdminApi {
    /// DeleteRecords: each partition's log start offset moves up to the requested offset (at most
    /// the high watermark) at once; the answer waits until the new log start offsets are
    /// checkpointed, so a crash cannot bring the deleted records back.
    /// A topic the principal may not delete from is refused TOPIC_AUTHORIZATION_FAILED.
    pub(crate) fn delete_records(
        self: &Arc<Self>,
        request: DeleteRecordsRequest,
        now_ms: i64,
        access: &Access,
    ) -> impl std::future::Future<Output = DeleteRecordsResponse> + Send + 'static {
        let image = self.node.image();
        let mut moved = false;
        let topics: Vec<DeleteRecordsTopicResult> = request
            .topics
            .iter()
            .map(|topic| DeleteRecordsTopicResult {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let allowed = access.allows_topic(AclOperation::Delete, &topic.name);
                        let outcome = if !allowed {
                            Err(errors::TOPIC_AUTHORIZATION_FAILED)
                        } else {
                            self.delete_partition_records(
                                &image,
                                &topic.name,
                                p.partition_index,
                                p.offset,
                                now_ms,
                            )
                        };
                        let (low_watermark, error_code) = match outcome {
                            Ok((low_watermark, changed)) => {
                                moved |= changed;
                                (low_watermark, errors::NONE)
                            }
                            Err(code) => (INVALID_LOW_WATERMARK, code),
                        };
                        DeleteRecordsPartitionResult {
                            partition_index: p.partition_index,
                            low_watermark,
                            error_code,
                        }
                    })
                    .collect(),
            })
            .collect();
        let replicas = self.replicas.clone();
        async move {
            let mut topics = topics;
            if moved {
                let checkpointed =
                    tokio::task::spawn_blocking(move || replicas.log_manager().checkpoint()).await;
                if !matches!(checkpointed, Ok(Ok(()))) {
                    tracing::error!(
                        ?checkpointed,
                        "cannot checkpoint log start offsets after DeleteRecords"
                    );
                    for p in topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                        if p.error_code == errors::NONE {
                            p.error_code = errors::KAFKA_STORAGE_ERROR;
                            p.low_watermark = INVALID_LOW_WATERMARK;
                        }
                    }
                }
            }
            DeleteRecordsResponse {
                topics,
                ..Default::default()
            }
        }
    }

    /// Moves one partition's log start offset; returns it and whether it moved, or the error
    /// code Kafka answers (the policy is checked first, as Kafka does).
    fn delete_partition_records(
        &self,
        image: &MetadataImage,
        topic: &str,
        partition: i32,
        offset: i64,
        now_ms: i64,
    ) -> Result<(i64, bool), i16> {
        let hosted = self
            .replicas
            .get(topic, partition)
            .ok_or(errors::UNKNOWN_TOPIC_OR_PARTITION)?;
        if !self
            .replicas
            .topic_config(image, topic)
            .settings()
            .cleanup_policy
            .delete
        {
            return Err(errors::POLICY_VIOLATION);
        }
        let mut log = hosted.try_lock().map_err(|e| e.code)?;
        let target = if offset == HIGH_WATERMARK {
            log.high_watermark()
        } else {
            offset
        };
        if target < 0 {
            return Err(errors::OFFSET_OUT_OF_RANGE);
        }
        let before = log.log_start_offset();
        let after = log
            .increment_log_start_offset(target, now_ms)
            .map_err(|error| error.kafka_error_code())?;
        Ok((after, after != before))
    }
}

impl LogAdminApi {
    /// DescribeLogDirs: every log dir with the partitions it holds (all, or those asked for),
    /// their sizes, and the dir's filesystem size and usable space. Off the runtime's threads:
    /// `statvfs` on a hung disk must not stall connections.
    pub(crate) fn describe_log_dirs(
        self: &Arc<Self>,
        request: DescribeLogDirsRequest,
    ) -> impl std::future::Future<Output = DescribeLogDirsResponse> + Send + 'static {
        let replicas = self.replicas.clone();
        async move {
            let results = tokio::task::spawn_blocking(move || {
                describe_dirs(replicas.log_manager(), request.topics.as_deref())
            })
            .await;
            match results {
                Ok(results) => DescribeLogDirsResponse {
                    results,
                    ..Default::default()
                },
                Err(error) => {
                    tracing::error!(%error, "describing log dirs failed");
                    DescribeLogDirsResponse {
                        error_code: errors::UNKNOWN_SERVER_ERROR,
                        ..Default::default()
                    }
                }
            }
        }
    }
}

impl LogAdminApi {
    /// AlterReplicaLogDirs: each partition starts moving to the log dir named for it (the move
    /// itself runs on the log dir mover's thread); answered once the moves are set up, as Kafka
    /// answers, not once they finish. Off the runtime's threads: setting up touches the disk.
    pub(crate) fn alter_replica_log_dirs(
        self: &Arc<Self>,
        request: AlterReplicaLogDirsRequest,
        now_ms: i64,
    ) -> impl std::future::Future<Output = AlterReplicaLogDirsResponse> + Send + 'static {
        let this = self.clone();
        async move {
            let results = tokio::task::spawn_blocking(move || {
                let image = this.node.image();
                let exists = |topic: &str, partition: i32| {
                    image.topic(topic).is_some_and(|t| {
                        usize::try_from(partition).is_ok_and(|p| p < t.partitions.len())
                    })
                };
                let results = alter_dirs(this.replicas.log_manager(), &exists, &request, now_ms);
                this.log_dir_mover.wake();
                results
            })
            .await
            .unwrap_or_else(|error| {
                tracing::error!(%error, "altering log dirs failed");
                Vec::new()
            });
            AlterReplicaLogDirsResponse {
                results,
                ..Default::default()
            }
        }
    }
}

/// Longest directory name most filesystems take: a future log's name must fit.
const MAX_DIR_NAME_BYTES: usize = 255;
/// What a future log's name adds to the partition's: `.`, 32 hex digits, `-future`.
const FUTURE_NAME_EXTRA_BYTES: usize = 1 + 32 + fjord_storage::future_log::FUTURE_DIR_SUFFIX.len();

fn alter_dirs(
    logs: &LogManager,
    exists: &dyn Fn(&str, i32) -> bool,
    request: &AlterReplicaLogDirsRequest,
    now_ms: i64,
) -> Vec<AlterReplicaLogDirTopicResult> {
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in &request.dirs {
        let dest = std::path::Path::new(&dir.path);
        for topic in &dir.topics {
            for &partition in &topic.partitions {
                let tp = TopicPartition::new(topic.name.clone(), partition);
                let error_code = if tp.dir_name().len() + FUTURE_NAME_EXTRA_BYTES
                    > MAX_DIR_NAME_BYTES
                {
                    // As Kafka refuses it: the future log's directory name would not fit.
                    errors::INVALID_TOPIC_EXCEPTION
                } else {
                    match logs.alter_log_dir(&tp, dest, now_ms) {
                        Ok(()) => errors::NONE,
                        // Kafka's answer for a partition the cluster does not have.
                        Err(StorageError::NoSuchLog(_)) if !exists(&topic.name, partition) => {
                            errors::UNKNOWN_TOPIC_OR_PARTITION
                        }
                        Err(error) => {
                            tracing::warn!(%tp, dir = %dir.path, %error, "cannot alter the partition's log dir");
                            error.kafka_error_code()
                        }
                    }
                };
                let result = AlterReplicaLogDirPartitionResult {
                    partition_index: partition,
                    error_code,
                };
                match results.iter_mut().find(|t| t.topic_name == topic.name) {
                    Some(existing) => existing.partitions.push(result),
                    None => results.push(AlterReplicaLogDirTopicResult {
                        topic_name: topic.name.clone(),
                        partitions: vec![result],
                    }),
                }
            }
        }
    }
    results
}

fn describe_dirs(
    logs: &LogManager,
    wanted: Option<&[DescribableLogDirTopic]>,
) -> Vec<DescribeLogDirsResult> {
    let is_wanted = |tp: &TopicPartition| {
        wanted.is_none_or(|topics| {
            topics
                .iter()
                .any(|t| t.topic == tp.topic && t.partitions.contains(&tp.partition))
        })
    };
    let futures = logs.future_logs_by_dir();
    logs.logs_by_dir()
        .into_iter()
        .zip(futures)
        .map(|((dir, dir_logs), (_, dir_futures))| {
            let log_dir = std::path::absolute(&dir)
                .unwrap_or(dir.clone())
                .display()
                .to_string();
            if logs.is_dir_offline(&dir) {
                // As Kafka reports a failed dir: its error, nothing else.
                return DescribeLogDirsResult {
                    error_code: errors::KAFKA_STORAGE_ERROR,
                    log_dir,
                    topics: Vec::new(),
                    total_bytes: -1,
                    usable_bytes: -1,
                    is_cordoned: false,
                };
            }
            let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
            let current = dir_logs.iter().filter(|(tp, _)| is_wanted(tp));
            for (tp, partition) in
                current.filter_map(|(tp, log)| Some((tp, current_replica(tp, log)?)))
            {
                topics.entry(tp.topic.clone()).or_default().push(partition);
            }
            let future = dir_futures.iter().filter(|(tp, _)| is_wanted(tp));
            for (tp, partition) in
                future.filter_map(|(tp, log)| Some((tp, future_replica(logs, tp, log)?)))
            {
                topics.entry(tp.topic.clone()).or_default().push(partition);
            }
            let (total_bytes, usable_bytes) = match volume_space(&dir) {
                Ok((total, usable)) => (
                    i64::try_from(total).unwrap_or(i64::MAX),
                    i64::try_from(usable).unwrap_or(i64::MAX),
                ),
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot read the log dir's space");
                    (-1, -1)
                }
            };
            DescribeLogDirsResult {
                error_code: errors::NONE,
                is_cordoned: false,
                log_dir,
                topics: topics
                    .into_iter()
                    .map(|(name, mut partitions)| {
                        partitions.sort_by_key(|p| p.partition_index);
                        DescribeLogDirsTopic { name, partitions }
                    })
                    .collect(),
                total_bytes,
                usable_bytes,
            }
        })
        .collect()
}

/// A current replica's entry, as Kafka reports it: its size, and how far the high watermark is
/// past this log's end (which a leader's never is).
fn current_replica(tp: &TopicPartition, log: &Mutex<Log>) -> Option<DescribeLogDirsPartition> {
    let log = log.lock().ok()?;
    Some(DescribeLogDirsPartition {
        partition_index: tp.partition,
        partition_size: i64::try_from(log.size_in_bytes()).unwrap_or(i64::MAX),
        offset_lag: (log.high_watermark() - log.log_end_offset()).max(0),
        is_future_key: false,
    })
}

/// A future replica's entry (a move between log dirs under way), as Kafka reports it: its size,
/// and how far it is behind the current one.
fn future_replica(
    logs: &LogManager,
    tp: &TopicPartition,
    future: &Mutex<Log>,
) -> Option<DescribeLogDirsPartition> {
    // Read and let go before the current log is locked: every path locks a current log before
    // its future log.
    let (size, future_end) = future
        .lock()
        .map(|future| (future.size_in_bytes(), future.log_end_offset()))
        .ok()?;
    let current_end = logs
        .get(tp)
        .and_then(|log| log.lock().ok().map(|log| log.log_end_offset()));
    Some(DescribeLogDirsPartition {
        partition_index: tp.partition,
        partition_size: i64::try_from(size).unwrap_or(i64::MAX),
        offset_lag: current_end.map_or(-1, |end| end - future_end),
        is_future_key: true,
    })
}
