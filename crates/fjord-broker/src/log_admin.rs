//! Admin APIs on partition logs: DeleteRecords, which moves log start offsets.

use std::sync::Arc;

use fjord_metadata::MetadataImage;
use fjord_protocol::messages::delete_records_request::DeleteRecordsRequest;
use fjord_protocol::messages::delete_records_response::*;

use crate::broker::Broker;
use crate::errors;

/// DeleteRecords' stand-in offset for "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;
/// The low watermark of a partition answered with an error.
const INVALID_LOW_WATERMARK: i64 = -1;

impl Broker {
    /// DeleteRecords: each partition's log start offset moves up to the requested offset (at most
    /// the high watermark) at once; the answer waits until the new log start offsets are
    /// checkpointed, so a crash cannot bring the deleted records back.
    pub(crate) fn delete_records(
        self: &Arc<Self>,
        request: DeleteRecordsRequest,
        now_ms: i64,
    ) -> impl std::future::Future<Output = DeleteRecordsResponse> + Send + 'static {
        let image = self.quorum.image();
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
                        let outcome = self.delete_partition_records(
                            &image,
                            &topic.name,
                            p.partition_index,
                            p.offset,
                            now_ms,
                        );
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
            .cleanup_policy_delete()
        {
            return Err(errors::POLICY_VIOLATION);
        }
        let mut log = hosted.log.lock().map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
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
