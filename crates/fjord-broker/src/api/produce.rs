//! The Produce path: validate and append on the connection's reader (in request order), then
//! wait for group commit before answering acks=1 / acks=all, and for acks=all also for the high
//! watermark to pass the records (every in-sync replica has them) in the partition's
//! delayed-produce queue.

use std::sync::Arc;

use tokio::sync::oneshot;

use fjord_protocol::messages::produce_request::ProduceRequest;
use fjord_protocol::messages::produce_response::*;
use fjord_protocol::{ApiKey, ResponseBody};

use crate::api::topic_ids::PRODUCE_TOPIC_IDS_FROM;
use crate::api::txn_verify::{not_in_transaction_code, Verdicts};
use crate::api::{encode_response, Broker};
use crate::net::{Reply, Response};
use crate::replication::flusher::{Durable, FlushTarget};
use crate::replication::{Partition, PartitionError};
use fjord_common::errors;

/// What one partition's append left to do before it can be answered.
struct PendingPartition {
    topic_index: usize,
    response: PartitionProduceResponse,
    /// Log and offset to make durable before answering, if the partition is in fsync mode.
    flush: Option<FlushTarget>,
    /// acks=all: resolves when the high watermark passes the records; the partition, whose
    /// ISR must still meet `min.insync.replicas` then.
    replicated: Option<(oneshot::Receiver<()>, Arc<Partition>)>,
}

/// acks=all needs `min.insync.replicas` in sync: NOT_ENOUGH_REPLICAS before the append, and
/// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below it while the records waited.
fn under_min_isr(partition: &Partition, code: i16) -> Option<PartitionError> {
    partition
        .min_isr_shortfall()
        .map(|message| PartitionError::new(code, message))
}

impl Broker {
    pub(crate) fn produce(
        self: &Arc<Self>,
        request: ProduceRequest,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        now: i64,
        verdicts: &Verdicts,
    ) -> Reply {
        let acks = request.acks;
        let mut topics: Vec<TopicProduceResponse> = Vec::with_capacity(request.topic_data.len());
        let mut pending: Vec<PendingPartition> = Vec::new();
        let mut any_error = false;
        for (topic_index, topic) in request.topic_data.iter().enumerate() {
            topics.push(TopicProduceResponse {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                partition_responses: Vec::new(),
            });
            // Named by an id this broker does not know (see `topic_ids`).
            let unknown_id = version >= PRODUCE_TOPIC_IDS_FROM && topic.name.is_empty();
            for data in &topic.partition_data {
                let mut response = PartitionProduceResponse {
                    index: data.index,
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                    ..Default::default()
                };
                let mut flush = None;
                let mut replicated = None;
                let outcome = if acks != 0 && acks != 1 && acks != -1 {
                    Err(PartitionError::new(
                        errors::INVALID_REQUIRED_ACKS,
                        "acks must be -1, 0 or 1",
                    ))
                } else if unknown_id {
                    Err(PartitionError::new(
                        errors::UNKNOWN_TOPIC_ID,
                        "This server does not know this topic id.",
                    ))
                } else {
                    match self.replicas.get(&topic.name, data.index) {
                        None => Err(PartitionError::new(
                            self.not_hosted(&topic.name, data.index),
                            "This server does not host this topic-partition.",
                        )),
                        Some(partition) => match (
                            &data.records,
                            (acks == -1)
                                .then(|| under_min_isr(&partition, errors::NOT_ENOUGH_REPLICAS))
                                .flatten(),
                        ) {
                            (None, _) => Err(PartitionError::new(
                                errors::INVALID_RECORD,
                                "records are null",
                            )),
                            (Some(_), Some(refused)) => Err(refused),
                            (Some(records), None) => request
                                .transactional_id
                                .as_deref()
                                .map_or(Ok(None), |id| {
                                    self.verify_transactional_produce(
                                        id, &partition, records, version, verdicts,
                                    )
                                })
                                .and_then(|verification| {
                                    self.replicas
                                        .append(&partition, records, verification, now)
                                        .map_err(|mut error| {
                                            error.code =
                                                not_in_transaction_code(error.code, version);
                                            error
                                        })
                                })
                                .inspect(|appended| {
                                    let end = appended.info.last_offset + 1;
                                    if partition.durable() {
                                        flush = Some((partition.clone() as Arc<dyn Durable>, end));
                                    } else {
                                        self.flush_if_due(&partition, now);
                                    }
                                    if acks == -1 {
                                        replicated = Some((
                                            partition.delay_produce(end, appended.leader_epoch),
                                            partition.clone(),
                                        ));
                                    }
                                }),
                        },
                    }
                };
                match outcome {
                    Ok(appended) => {
                        response.base_offset = appended.info.first_offset;
                        response.log_append_time_ms = appended.log_append_time_ms;
                        response.log_start_offset = appended.info.log_start_offset;
                    }
                    Err(error) => {
                        any_error = true;
                        response.error_code = error.code;
                        response.error_message = error.message;
                        response.record_errors = error
                            .record_errors
                            .into_iter()
                            .map(|(batch_index, message)| BatchIndexAndErrorMessage {
                                batch_index,
                                batch_index_error_message: Some(message),
                            })
                            .collect();
                    }
                }
                pending.push(PendingPartition {
                    topic_index,
                    response,
                    flush,
                    replicated,
                });
            }
        }
        if acks == 0 {
            // No response: an error can only be signalled by closing the connection, as Kafka does.
            // The flush still runs as the request's future, so the connection's next request
            // (not another produce) sees these records below the high watermark.
            let targets: Vec<FlushTarget> =
                pending.iter().filter_map(|p| p.flush.clone()).collect();
            let failed = || Reply::Close("acks=0 produce failed".to_string());
            if targets.is_empty() {
                return if any_error {
                    failed()
                } else {
                    Reply::Now(Response::Nothing)
                };
            }
            let flusher = self.flusher.clone();
            let flushed = async move {
                let _ = flusher.flush_all(targets).await;
                Response::Nothing
            };
            if any_error {
                tokio::spawn(flushed);
                return failed();
            }
            return Reply::Later(Box::pin(flushed));
        }
        let finish = move |topics: Vec<TopicProduceResponse>, pending: Vec<PendingPartition>| {
            let mut topics = topics;
            for p in pending {
                if let Some(t) = topics.get_mut(p.topic_index) {
                    t.partition_responses.push(p.response);
                }
            }
            let body = ResponseBody::Produce(ProduceResponse {
                responses: topics,
                ..Default::default()
            });
            encode_response(api, version, correlation_id, &body)
        };
        // A high watermark already past the records (page-cache mode with this broker the whole
        // ISR) needs no wait.
        for p in &mut pending {
            if let Some((mut done, partition)) = p.replicated.take() {
                if done.try_recv().is_ok() {
                    if let Some(error) =
                        under_min_isr(&partition, errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                    {
                        p.response.error_code = error.code;
                        p.response.error_message = error.message;
                    }
                } else {
                    p.replicated = Some((done, partition));
                }
            }
        }
        if pending
            .iter()
            .all(|p| p.flush.is_none() && p.replicated.is_none())
        {
            return Reply::Now(finish(topics, pending));
        }
        let flusher = self.flusher.clone();
        let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
        Reply::Later(Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut pending = pending;
            // Every partition's flush goes to the flusher at once: one round covers them all.
            let (waiting, targets): (Vec<usize>, Vec<FlushTarget>) = pending
                .iter_mut()
                .enumerate()
                .filter_map(|(i, p)| p.flush.take().map(|target| (i, target)))
                .unzip();
            let outcomes = flusher.flush_all(targets).await;
            for (i, outcome) in waiting.into_iter().zip(outcomes) {
                if let Err(message) = outcome {
                    tracing::error!(%message, "fsync failed; the write is not acknowledged");
                    let p = &mut pending[i];
                    p.response.error_code = errors::KAFKA_STORAGE_ERROR;
                    p.response.error_message = Some(message);
                    p.response.base_offset = -1;
                    p.replicated = None;
                }
            }
            for p in &mut pending {
                let Some((replicated, partition)) = p.replicated.take() else {
                    continue;
                };
                let refusal = match tokio::time::timeout_at(deadline, replicated).await {
                    Ok(Ok(())) => {
                        if let Some(error) =
                            under_min_isr(&partition, errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                        {
                            p.response.error_code = error.code;
                            p.response.error_message = error.message;
                        }
                        continue;
                    }
                    // The partition went away (deleted, or no longer led here) before the
                    // records were replicated.
                    Ok(Err(_)) => errors::NOT_LEADER_OR_FOLLOWER,
                    Err(_) => errors::REQUEST_TIMED_OUT,
                };
                p.response.error_code = refusal;
                p.response.base_offset = -1;
            }
            finish(topics, pending)
        }))
    }

    /// Page-cache mode: flush in the background when flush.messages / flush.ms say so.
    fn flush_if_due(&self, partition: &Arc<crate::replication::Partition>, now: i64) {
        let due = partition
            .log
            .lock()
            .map(|log| log.needs_flush(now))
            .unwrap_or(false);
        if due {
            let flusher = self.flusher.clone();
            let offset = partition
                .log
                .lock()
                .map(|l| l.log_end_offset())
                .unwrap_or(0);
            let target: Arc<dyn Durable> = partition.clone();
            tokio::spawn(async move {
                let _ = flusher.flush(target, offset).await;
            });
        }
    }
}
