//! The Produce path: validate and append on the connection's reader (in request order), then
//! wait for group commit before answering acks=1 / acks=all, and for acks=all also for the high
//! watermark to pass the records (every in-sync replica has them) in the partition's
//! delayed-produce queue.

use std::sync::Arc;

use tokio::sync::oneshot;

use fjord_protocol::messages::produce_request::{PartitionProduceData, ProduceRequest};
use fjord_protocol::messages::produce_response::*;
use fjord_protocol::{ApiKey, ResponseBody};

use crate::api::topic_ids::PRODUCE_TOPIC_IDS_FROM;
use crate::api::txn_verify::{not_in_transaction_code, Verdicts};
use crate::api::{authz, encode_response, Access, ProduceApi};
use crate::metrics::DelayedOperation;
use crate::net::{Reply, Response};
use crate::replication::flusher::{Durable, FlushTarget};
use crate::replication::FlusherHandle;
use crate::replication::{Appended, Partition, PartitionError};
use fjord_common::errors;
use fjord_metadata::acl::AclOperation;

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

/// What a produce's answer is made of: the topics in request order and each partition's
/// outcome, and how to encode it.
struct ProduceAnswer {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    /// What the producer's byte-rate quota asks it to wait (0 within its quota).
    throttle_time_ms: i32,
    topics: Vec<TopicProduceResponse>,
    pending: Vec<PendingPartition>,
    /// Where its error codes are counted.
    metrics: Arc<crate::metrics::Metrics>,
}

impl ProduceAnswer {
    /// Every partition's response under its topic, encoded.
    fn encode(self) -> Response {
        let mut topics = self.topics;
        for p in self.pending {
            if let Some(t) = topics.get_mut(p.topic_index) {
                t.partition_responses.push(p.response);
            }
        }
        let body = ResponseBody::Produce(ProduceResponse {
            responses: topics,
            throttle_time_ms: self.throttle_time_ms,
            ..Default::default()
        });
        (self.metrics.requests).answered_with(self.api, |visit| body.visit_error_codes(visit));
        encode_response(self.api, self.version, self.correlation_id, &body)
    }

    /// Nothing left to wait for: no flush, no replication.
    fn complete(&self) -> bool {
        self.pending
            .iter()
            .all(|p| p.flush.is_none() && p.replicated.is_none())
    }
}

impl PendingPartition {
    /// acks=all whose high watermark already passed the records (page-cache mode with this
    /// broker the whole ISR): settled now, no wait.
    fn settle_if_replicated(&mut self) {
        if let Some((mut done, partition)) = self.replicated.take() {
            if done.try_recv().is_ok() {
                self.check_min_isr_after_append(&partition);
            } else {
                self.replicated = Some((done, partition));
            }
        }
    }

    /// The records are replicated; the ISR must still meet `min.insync.replicas`.
    fn check_min_isr_after_append(&mut self, partition: &Partition) {
        if let Some(error) = under_min_isr(partition, errors::NOT_ENOUGH_REPLICAS_AFTER_APPEND) {
            self.response.error_code = error.code;
            self.response.error_message = error.message;
        }
    }

    fn refuse(&mut self, error: PartitionError) {
        self.response.error_code = error.code;
        self.response.error_message = error.message;
        self.response.record_errors = error
            .record_errors
            .into_iter()
            .map(|(batch_index, message)| BatchIndexAndErrorMessage {
                batch_index,
                batch_index_error_message: Some(message),
            })
            .collect();
    }
}

/// acks=0: no response; an error can only be signalled by closing the connection, as Kafka
/// does. The flush still runs as the request's future, so the connection's next request
/// (not another produce) sees these records below the high watermark.
fn answer_without_acks(flusher: &FlusherHandle, pending: Vec<PendingPartition>) -> Reply {
    let any_error = pending
        .iter()
        .any(|p| p.response.error_code != errors::NONE);
    let targets: Vec<FlushTarget> = pending.into_iter().filter_map(|p| p.flush).collect();
    let failed = || Reply::Close("acks=0 produce failed".to_string());
    if targets.is_empty() {
        return if any_error {
            failed()
        } else {
            Reply::Now(Response::Nothing)
        };
    }
    let flusher = flusher.clone();
    let flushed = async move {
        let _ = flusher.flush_all(targets).await;
        Response::Nothing
    };
    if any_error {
        tokio::spawn(flushed);
        return failed();
    }
    Reply::Later(Box::pin(flushed))
}

/// What every partition of one produce request shares.
struct ProduceRequestInfo<'a> {
    acks: i16,
    version: i16,
    transactional_id: Option<&'a str>,
    verdicts: &'a Verdicts,
    now: i64,
}

impl ProduceApi {
    /// Produce: each partition appended in turn, on the connection's reader; then the answer,
    /// at once or once the appends are durable (and, acks=all, replicated).
    /// A topic the principal may not write to is refused TOPIC_AUTHORIZATION_FAILED.
    pub(crate) fn produce(
        self: &Arc<Self>,
        request: ProduceRequest,
        ((api, version, correlation_id), throttle_time_ms): ((ApiKey, i16, i32), i32),
        verdicts: &Verdicts,
        access: &Access,
    ) -> Reply {
        let info = ProduceRequestInfo {
            acks: request.acks,
            version,
            transactional_id: request.transactional_id.as_deref(),
            verdicts,
            now: fjord_common::now_ms(),
        };
        let mut answer = ProduceAnswer {
            api,
            version,
            correlation_id,
            throttle_time_ms,
            topics: Vec::with_capacity(request.topic_data.len()),
            pending: Vec::new(),
            metrics: self.replicas.metrics().clone(),
        };
        for (topic_index, topic) in request.topic_data.iter().enumerate() {
            answer.topics.push(TopicProduceResponse {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                partition_responses: Vec::new(),
            });
            // Named by an id this broker does not know (see `topic_ids`).
            let unknown_id = version >= PRODUCE_TOPIC_IDS_FROM && topic.name.is_empty();
            // Judged once for all the topic's partitions.
            let writable = access.allows_topic(AclOperation::Write, &topic.name);
            for data in &topic.partition_data {
                let mut pending = PendingPartition {
                    topic_index,
                    response: PartitionProduceResponse {
                        index: data.index,
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                        ..Default::default()
                    },
                    flush: None,
                    replicated: None,
                };
                let outcome = self.append_partition(
                    &info,
                    (&topic.name, unknown_id, writable),
                    data,
                    &mut pending,
                );
                match outcome {
                    Ok(appended) => {
                        pending.response.base_offset = appended.info.first_offset;
                        pending.response.log_append_time_ms = appended.log_append_time_ms;
                        pending.response.log_start_offset = appended.info.log_start_offset;
                    }
                    Err(error) => pending.refuse(error),
                }
                answer.pending.push(pending);
            }
        }
        if info.acks == 0 {
            return answer_without_acks(&self.flusher, answer.pending);
        }
        for p in &mut answer.pending {
            p.settle_if_replicated();
        }
        if answer.complete() {
            return Reply::Now(answer.encode());
        }
        let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
        let delayed = (self.replicas.metrics().delayed).delayed(DelayedOperation::Produce);
        let this = self.clone();
        Reply::Later(Box::pin(async move {
            let _delayed = delayed;
            this.await_acks(answer, timeout).await
        }))
    }

    /// Appends one partition's records; on success `pending` learns what the answer waits for
    /// (its flush in fsync mode, the high watermark for acks=all).
    fn append_partition(
        &self,
        info: &ProduceRequestInfo<'_>,
        (topic, unknown_id, writable): (&str, bool, bool),
        data: &PartitionProduceData,
        pending: &mut PendingPartition,
    ) -> Result<Appended, PartitionError> {
        let acks = info.acks;
        if acks != 0 && acks != 1 && acks != -1 {
            return Err(PartitionError::new(
                errors::INVALID_REQUIRED_ACKS,
                "acks must be -1, 0 or 1",
            ));
        }
        if unknown_id {
            return Err(PartitionError::new(
                errors::UNKNOWN_TOPIC_ID,
                "This server does not know this topic id.",
            ));
        }
        if !writable {
            let code = errors::TOPIC_AUTHORIZATION_FAILED;
            return Err(PartitionError::new(code, authz::message(code)));
        }
        let Some(partition) = self.replicas.get(topic, data.index) else {
            return Err(PartitionError::new(
                self.node.not_hosted(topic, data.index),
                "This server does not host this topic-partition.",
            ));
        };
        let Some(records) = &data.records else {
            return Err(PartitionError::new(
                errors::INVALID_RECORD,
                "records are null",
            ));
        };
        if acks == -1 {
            if let Some(refused) = under_min_isr(&partition, errors::NOT_ENOUGH_REPLICAS) {
                return Err(refused);
            }
        }
        let verification = match info.transactional_id {
            Some(id) => self.txns.verify_transactional_produce(
                id,
                &partition,
                records,
                info.version,
                info.verdicts,
            )?,
            None => None,
        };
        let appended = self
            .replicas
            .append(&partition, records, verification, info.now)
            .map_err(|mut error| {
                error.code = not_in_transaction_code(error.code, info.version);
                error
            })?;
        self.replicas
            .metrics()
            .topics
            .produced(topic, records.len(), appended.info.record_count);
        let end = appended.info.last_offset + 1;
        if partition.durable() {
            pending.flush = Some((partition.clone() as Arc<dyn Durable>, end));
        } else {
            self.flush_if_due(&partition, info.now);
        }
        if acks == -1 {
            pending.replicated = Some((
                partition.delay_produce(end, appended.leader_epoch),
                partition.clone(),
            ));
        }
        Ok(appended)
    }

    /// Waits for what the answer needs: every partition's flush in one round of the flusher
    /// (a failed fsync is not acknowledged), then acks=all's replication, each bounded by the
    /// request's timeout.
    async fn await_acks(
        self: Arc<Self>,
        mut answer: ProduceAnswer,
        timeout: std::time::Duration,
    ) -> Response {
        let deadline = tokio::time::Instant::now() + timeout;
        let (waiting, targets): (Vec<usize>, Vec<FlushTarget>) = answer
            .pending
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| p.flush.take().map(|target| (i, target)))
            .unzip();
        let outcomes = self.flusher.flush_all(targets).await;
        for (i, outcome) in waiting.into_iter().zip(outcomes) {
            if let Err(error) = outcome {
                tracing::error!(%error, "fsync failed; the write is not acknowledged");
                let p = &mut answer.pending[i];
                p.response.error_code = error.code;
                p.response.error_message = Some(error.message);
                p.response.base_offset = -1;
                p.replicated = None;
            }
        }
        for p in &mut answer.pending {
            let Some((replicated, partition)) = p.replicated.take() else {
                continue;
            };
            let refusal = match tokio::time::timeout_at(deadline, replicated).await {
                Ok(Ok(())) => {
                    p.check_min_isr_after_append(&partition);
                    continue;
                }
                // The partition went away (deleted, or no longer led here) before the records
                // were replicated.
                Ok(Err(_)) => errors::NOT_LEADER_OR_FOLLOWER,
                Err(_) => errors::REQUEST_TIMED_OUT,
            };
            p.response.error_code = refusal;
            p.response.base_offset = -1;
        }
        answer.encode()
    }

    /// Page-cache mode: flush in the background when flush.messages / flush.ms say so.
    fn flush_if_due(&self, partition: &Arc<crate::replication::Partition>, now: i64) {
        let due = partition
            .try_lock()
            .map(|log| log.needs_flush(now))
            .unwrap_or(false);
        if due {
            let flusher = self.flusher.clone();
            let offset = partition
                .try_lock()
                .map(|l| l.log_end_offset())
                .unwrap_or(0);
            let target: Arc<dyn Durable> = partition.clone();
            tokio::spawn(async move {
                let _ = flusher.flush(target, offset).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::partition::tests::{append, partition};

    fn pending(topic_index: usize, index: i32, error_code: i16) -> PendingPartition {
        PendingPartition {
            topic_index,
            response: PartitionProduceResponse {
                index,
                error_code,
                ..Default::default()
            },
            flush: None,
            replicated: None,
        }
    }

    fn answer(pending: Vec<PendingPartition>) -> ProduceAnswer {
        let topic = |name: &str| TopicProduceResponse {
            name: name.into(),
            ..Default::default()
        };
        ProduceAnswer {
            api: ApiKey::Produce,
            version: 9,
            correlation_id: 5,
            throttle_time_ms: 0,
            topics: vec![topic("a"), topic("b")],
            pending,
            metrics: crate::metrics::Metrics::new(),
        }
    }

    #[test]
    fn partitions_are_answered_under_their_topics_in_request_order() {
        let answer = answer(vec![pending(1, 0, 0), pending(0, 2, 0), pending(1, 1, 3)]);
        assert!(answer.complete(), "nothing to wait for");
        let Response::Send(frame) = answer.encode() else {
            panic!("an encoded response");
        };
        let mut decoder = fjord_protocol::Decoder::new(frame);
        let header_version = fjord_protocol::response_header_version(ApiKey::Produce, 9);
        let header = <fjord_protocol::ResponseHeader as fjord_protocol::Decodable>::decode(
            &mut decoder,
            header_version,
        )
        .expect("a response header");
        assert_eq!(header.correlation_id, 5);
        let body = ResponseBody::decode(ApiKey::Produce, &mut decoder, 9).expect("a produce body");
        let ResponseBody::Produce(response) = body else {
            panic!("a produce response");
        };
        let shape: Vec<(String, Vec<(i32, i16)>)> = response
            .responses
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partition_responses
                    .into_iter()
                    .map(|p| (p.index, p.error_code))
                    .collect();
                (t.name, partitions)
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("a".to_string(), vec![(2, 0)]),
                ("b".to_string(), vec![(0, 0), (1, 3)]),
            ]
        );
    }

    #[tokio::test]
    async fn an_acks_all_write_already_replicated_is_settled_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        // Page-cache mode, this broker the whole ISR: the append moves the high watermark.
        let p = partition(dir.path(), "settled", false);
        append(&p);
        let mut covered = pending(0, 0, 0);
        covered.replicated = Some((p.delay_produce(1, p.leader_epoch()), p.clone()));
        covered.settle_if_replicated();
        assert!(covered.replicated.is_none() && covered.response.error_code == 0);
        let mut waiting = pending(0, 0, 0);
        waiting.replicated = Some((p.delay_produce(2, p.leader_epoch()), p.clone()));
        waiting.settle_if_replicated();
        assert!(
            waiting.replicated.is_some(),
            "offset 1 is not below the high watermark yet"
        );
    }

    #[tokio::test]
    async fn acks_0_answers_nothing_and_closes_the_connection_on_an_error() {
        let (flusher, _task) =
            crate::replication::flusher::start(Arc::new(|_, _| {}), crate::metrics::Metrics::new());
        assert!(matches!(
            answer_without_acks(&flusher, vec![pending(0, 0, 0)]),
            Reply::Now(Response::Nothing)
        ));
        assert!(matches!(
            answer_without_acks(&flusher, vec![pending(0, 0, 0), pending(0, 1, 6)]),
            Reply::Close(_)
        ));
    }
}
