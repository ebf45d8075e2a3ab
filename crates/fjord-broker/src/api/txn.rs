//! Transaction APIs at the broker: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn and EndTxn run on the transaction coordinator shard owning the id (see
//! `coordinator::txn`); the markers of a prepared transaction are sent to every partition's leader
//! (this broker's own through the local WriteTxnMarkers path, others' over the inter-broker
//! listener) until each has written them; timers abort transactions past their timeout. The
//! internal topic `__transaction_state` is created on first FindCoordinator, as in Kafka.
//!
//! The produce side: a transactional batch for a partition where its producer has no
//! transaction open is appended only if the coordinator says the partition is in the
//! transaction (KIP-890 part 1), so no hanging transaction can start behind its back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, lock, TopicPartition};
use fjord_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use fjord_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use fjord_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use fjord_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
};
use fjord_protocol::messages::end_txn_request::EndTxnRequest;
use fjord_protocol::messages::end_txn_response::EndTxnResponse;
use fjord_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use fjord_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use fjord_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest,
};
use fjord_protocol::messages::write_txn_markers_response::WriteTxnMarkersResponse;
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};
use fjord_txn::{Answer, MarkerJob, ProducerAnswer};

use fjord_common::now_ms;

use crate::api::{Access, TxnApi};
use crate::coordinator::group::OFFSETS_TOPIC;
use crate::coordinator::runtime::{after_tick, earliest};
use crate::coordinator::txn::{Ran, SharedShard, TXN_TOPIC};
use fjord_common::errors::KafkaError;
use fjord_metadata::acl::AclOperation;

/// Another broker answered a request of `asked` with another API: a broken peer.
pub(crate) fn wrong_answer(broker: i32, answer: &ResponseBody, asked: ApiKey) -> KafkaError {
    KafkaError::new(
        errors::UNKNOWN_SERVER_ERROR,
        format!(
            "broker {broker} answered {} to {}",
            answer.api_key().name(),
            asked.name()
        ),
    )
}

/// The newest version of WriteTxnMarkers sent to other brokers (v2 tells the leader the
/// transaction's version, KIP-1228); a broker that knows only v1 gets v1.
const WRITE_TXN_MARKERS_VERSION: i16 = 2;

/// First and longest wait between rounds of sending a transaction's markers.
const MARKER_RETRY_MIN: Duration = Duration::from_millis(50);
const MARKER_RETRY_MAX: Duration = Duration::from_secs(1);

impl TxnApi {
    /// Creates `__transaction_state` if missing and loads the coordinator shards this broker
    /// leads.
    pub(crate) async fn ensure_txn_coordinator(self: &Arc<Self>) -> Result<(), KafkaError> {
        self.forwarder
            .ensure_internal_topic(TXN_TOPIC, self.node.config.transaction_state_topic())
            .await?;
        if !self.txns.shards.all_loaded() {
            // The topic may have been committed a moment ago and its partitions not opened yet.
            self.replicas.apply_image(&self.node.image(), now_ms())?;
        }
        self.load_txn_coordinators()
    }

    /// Loads the shards of `__transaction_state` partitions this broker now leads, and sends
    /// the markers of the transactions they find prepared.
    pub fn load_txn_coordinators(self: &Arc<Self>) -> Result<(), KafkaError> {
        for (partition, shard, job) in self.txns.load_hosted()? {
            self.send_markers(partition, shard, job);
        }
        Ok(())
    }

    /// What a shard's run answers a request with; markers it asks for are sent.
    fn settle<T>(
        self: &Arc<Self>,
        partition: i32,
        shard: &SharedShard,
        ran: Result<Ran<T>, i16>,
        pick: impl FnOnce(Answer) -> Option<T>,
        fail: impl Fn(i16) -> T,
    ) -> T {
        match ran {
            Err(code) => fail(code),
            Ok(Ran::Answer(answer)) => answer,
            Ok(Ran::Written(written)) => {
                if let Some(job) = written.markers {
                    self.send_markers(partition, shard.clone(), job);
                }
                written
                    .answer
                    .and_then(pick)
                    .unwrap_or_else(|| fail(errors::COORDINATOR_NOT_AVAILABLE))
            }
        }
    }

    /// InitProducerId: a transactional id goes to its transaction coordinator; without one,
    /// Kafka ignores the producer id and epoch in the request and always hands out a fresh id at
    /// epoch 0 (idempotent producers bump epochs locally).
    pub(crate) async fn init_producer_id(
        self: Arc<Self>,
        request: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        if let Some(transactional_id) = request.transactional_id.clone() {
            return self
                .init_transactional_producer_id(request, transactional_id)
                .await;
        }
        match self.producer_ids.next().await {
            Ok(producer_id) => InitProducerIdResponse {
                error_code: errors::NONE,
                producer_id,
                producer_epoch: 0,
                ..Default::default()
            },
            Err(message) => {
                tracing::warn!(%message, "cannot allocate a producer id");
                InitProducerIdResponse {
                    error_code: errors::COORDINATOR_NOT_AVAILABLE,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                }
            }
        }
    }

    /// InitProducerId with a transactional id: a producer id and a new epoch for it, fencing
    /// the previous holder (and aborting its open transaction).
    pub(crate) async fn init_transactional_producer_id(
        self: Arc<Self>,
        request: InitProducerIdRequest,
        transactional_id: String,
    ) -> InitProducerIdResponse {
        let respond = |a: ProducerAnswer| InitProducerIdResponse {
            error_code: a.error_code,
            producer_id: a.producer_id,
            producer_epoch: a.producer_epoch,
            ..Default::default()
        };
        let refuse = |code| respond(ProducerAnswer::error(code));
        // KIP-360: a producer that holds an id and epoch names both, or neither.
        let expected = match (request.producer_id, request.producer_epoch) {
            (-1, -1) => None,
            (-1, _) | (_, -1) => return refuse(errors::INVALID_REQUEST),
            held => Some(held),
        };
        let partition = self.txns.partition_of(&transactional_id);
        let Some(shard) = self.txns.shards.shard(partition) else {
            return refuse(errors::NOT_COORDINATOR);
        };
        if let Err(message) = self.producer_ids.reserve().await {
            tracing::warn!(%message, "cannot reserve producer ids");
            return refuse(errors::COORDINATOR_NOT_AVAILABLE);
        }
        let now = now_ms();
        let timeout_ms = request.transaction_timeout_ms;
        let ran = self
            .txns
            .run(&shard, |core| {
                core.init_producer_id(now, &transactional_id, timeout_ms, expected, &mut || {
                    self.producer_ids.take()
                })
            })
            .await;
        respond(self.settle(
            partition,
            &shard,
            ran,
            |a| match a {
                Answer::InitProducerId(p) => Some(p),
                _ => None,
            },
            ProducerAnswer::error,
        ))
    }

    /// A producer's request (v3 and below) naming a topic it may not write to adds nothing:
    /// those topics are refused TOPIC_AUTHORIZATION_FAILED and the rest not attempted.
    pub(crate) async fn add_partitions_to_txn(
        self: Arc<Self>,
        request: AddPartitionsToTxnRequest,
        version: i16,
        access: Access,
    ) -> AddPartitionsToTxnResponse {
        if version <= 3 {
            let refused =
                |t: &AddPartitionsToTxnTopic| !access.allows_topic(AclOperation::Write, &t.name);
            if request.v3_and_below_topics.iter().any(refused) {
                let results_by_topic_v3_and_below =
                    crate::api::refusals::by_topic(&request.v3_and_below_topics, |t| {
                        if refused(t) {
                            errors::TOPIC_AUTHORIZATION_FAILED
                        } else {
                            errors::OPERATION_NOT_ATTEMPTED
                        }
                    });
                return AddPartitionsToTxnResponse {
                    results_by_topic_v3_and_below,
                    ..Default::default()
                };
            }
            // The producer's own form: one transaction, answered by topic.
            let transaction = AddPartitionsToTxnTransaction {
                transactional_id: request.v3_and_below_transactional_id,
                producer_id: request.v3_and_below_producer_id,
                producer_epoch: request.v3_and_below_producer_epoch,
                verify_only: false,
                topics: request.v3_and_below_topics,
            };
            let result = self.add_partitions(transaction, 0).await;
            return AddPartitionsToTxnResponse {
                results_by_topic_v3_and_below: result.topic_results,
                ..Default::default()
            };
        }
        // The brokers' batched form (KIP-890): verifying for part 1, adding for producers on
        // transaction version 2 (part 2).
        let mut results = Vec::with_capacity(request.transactions.len());
        for transaction in request.transactions {
            results.push(self.add_partitions(transaction, 2).await);
        }
        AddPartitionsToTxnResponse {
            results_by_transaction: results,
            ..Default::default()
        }
    }

    /// One transaction's AddPartitionsToTxn: verified, or added as by a producer on
    /// `client_transaction_version`.
    pub(crate) async fn add_partitions(
        self: &Arc<Self>,
        transaction: AddPartitionsToTxnTransaction,
        client_transaction_version: i16,
    ) -> AddPartitionsToTxnResult {
        let partitions = transaction_partitions(&transaction);
        let image = self.node.image();
        let exists = |tp: &TopicPartition| {
            image.topic(&tp.topic).is_some_and(|t| {
                usize::try_from(tp.partition).is_ok_and(|p| p < t.partitions.len())
            })
        };
        let codes: Vec<(TopicPartition, i16)> = if !partitions.iter().all(exists) {
            // As Kafka: unknown partitions are named, the rest not attempted.
            partitions
                .iter()
                .map(|tp| {
                    let code = if exists(tp) {
                        errors::OPERATION_NOT_ATTEMPTED
                    } else {
                        errors::UNKNOWN_TOPIC_OR_PARTITION
                    };
                    (tp.clone(), code)
                })
                .collect()
        } else {
            let id = &transaction.transactional_id;
            let (producer_id, producer_epoch) =
                (transaction.producer_id, transaction.producer_epoch);
            let partition = self.txns.partition_of(id);
            match self.txns.shards.shard(partition) {
                None => partitions
                    .iter()
                    .map(|tp| (tp.clone(), errors::NOT_COORDINATOR))
                    .collect(),
                Some(shard) if transaction.verify_only => lock(&shard).core.verify_partitions(
                    id,
                    producer_id,
                    producer_epoch,
                    &partitions,
                ),
                Some(_) => {
                    let code = self
                        .add_to_txn(
                            id,
                            producer_id,
                            producer_epoch,
                            &partitions,
                            client_transaction_version,
                        )
                        .await;
                    partitions.iter().map(|tp| (tp.clone(), code)).collect()
                }
            }
        };
        let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> =
            BTreeMap::new();
        for (tp, code) in codes {
            by_topic.entry(tp.topic.to_string()).or_default().push(
                AddPartitionsToTxnPartitionResult {
                    partition_index: tp.partition,
                    partition_error_code: code,
                },
            );
        }
        AddPartitionsToTxnResult {
            transactional_id: transaction.transactional_id,
            topic_results: by_topic
                .into_iter()
                .map(
                    |(name, results_by_partition)| AddPartitionsToTxnTopicResult {
                        name,
                        results_by_partition,
                    },
                )
                .collect(),
        }
    }

    /// Adds `partitions` to the producer's transaction on its coordinator shard.
    async fn add_to_txn(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        client_transaction_version: i16,
    ) -> i16 {
        let partition = self.txns.partition_of(transactional_id);
        let Some(shard) = self.txns.shards.shard(partition) else {
            return errors::NOT_COORDINATOR;
        };
        let now = now_ms();
        let ran = self
            .txns
            .run(&shard, |core| {
                core.add_partitions(
                    now,
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    partitions,
                    client_transaction_version,
                )
            })
            .await;
        self.settle(
            partition,
            &shard,
            ran,
            |a| match a {
                Answer::AddPartitions(code) => Some(code),
                _ => None,
            },
            |code| code,
        )
    }

    /// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction, so
    /// the markers end the group's transactional offset commits too.
    pub(crate) async fn add_offsets_to_txn(
        self: Arc<Self>,
        request: AddOffsetsToTxnRequest,
    ) -> AddOffsetsToTxnResponse {
        let offsets =
            TopicPartition::new(OFFSETS_TOPIC, self.groups.partition_of(&request.group_id));
        let error_code = self
            .add_to_txn(
                &request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                std::slice::from_ref(&offsets),
                0,
            )
            .await;
        AddOffsetsToTxnResponse {
            error_code,
            ..Default::default()
        }
    }

    pub(crate) async fn end_txn(
        self: Arc<Self>,
        request: EndTxnRequest,
        version: i16,
    ) -> EndTxnResponse {
        let respond = |a: ProducerAnswer| EndTxnResponse {
            error_code: a.error_code,
            producer_id: a.producer_id,
            producer_epoch: a.producer_epoch,
            ..Default::default()
        };
        let partition = self.txns.partition_of(&request.transactional_id);
        let Some(shard) = self.txns.shards.shard(partition) else {
            return respond(ProducerAnswer::error(errors::NOT_COORDINATOR));
        };
        // EndTxn v5 is sent by producers on transaction version 2 (KIP-890 part 2).
        let client_transaction_version = if version >= 5 { 2 } else { 0 };
        if client_transaction_version >= 2 {
            // An end that exhausts the epoch hands out a new producer id.
            if let Err(message) = self.producer_ids.reserve().await {
                tracing::warn!(%message, "cannot reserve producer ids");
            }
        }
        let now = now_ms();
        let ran = self
            .txns
            .run(&shard, |core| {
                core.end_txn(now, &request, client_transaction_version, &mut || {
                    self.producer_ids.take()
                })
            })
            .await;
        respond(self.settle(
            partition,
            &shard,
            ran,
            |a| match a {
                Answer::EndTxn(p) => Some(p),
                _ => None,
            },
            ProducerAnswer::error,
        ))
    }

    // ---- Markers --------------------------------------------------------------------------

    /// Sends a prepared transaction's markers until every partition's leader has written its
    /// marker (or the partition is gone), then tells the shard, which completes the
    /// transaction. Stops when the shard is unloaded: its next coordinator sends them again.
    pub(crate) fn send_markers(
        self: &Arc<Self>,
        txn_partition: i32,
        shard: SharedShard,
        job: MarkerJob,
    ) {
        let this = self.clone();
        tokio::spawn(async move { this.deliver_markers(txn_partition, shard, job).await });
    }

    async fn deliver_markers(
        self: Arc<Self>,
        txn_partition: i32,
        shard: SharedShard,
        job: MarkerJob,
    ) {
        let mut remaining: BTreeSet<TopicPartition> = job.partitions.iter().cloned().collect();
        let mut backoff = MARKER_RETRY_MIN;
        loop {
            if !self.txns.shards.is_current(txn_partition, &shard) {
                return;
            }
            let image = self.node.image();
            let mut done: Vec<TopicPartition> = Vec::new();
            let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
            for tp in &remaining {
                let leader = image
                    .topic(&tp.topic)
                    .and_then(|t| t.partitions.get(usize::try_from(tp.partition).ok()?))
                    .map(|p| p.leader);
                match leader {
                    // Deleted: there is nothing left to end.
                    None => done.push(tp.clone()),
                    Some(leader) if leader < 0 => {}
                    Some(leader) => by_leader.entry(leader).or_default().push(tp.clone()),
                }
            }
            for (leader, partitions) in by_leader {
                let request = marker_request(&job, &partitions);
                let answer = if leader == self.node.config.node_id {
                    Ok(self
                        .markers
                        .clone()
                        .write_txn_markers(request, now_ms())
                        .await)
                } else {
                    self.send_remote_markers(leader, request).await
                };
                let response = match answer {
                    Ok(response) => response,
                    Err(error) => {
                        tracing::debug!(%error, leader, "transaction markers not delivered; retrying");
                        continue;
                    }
                };
                for topic in response.markers.iter().flat_map(|m| &m.topics) {
                    for p in &topic.partitions {
                        let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                        match p.error_code {
                            errors::NONE => done.push(tp),
                            // A newer epoch or coordinator took over: this coordinator is stale,
                            // and whoever replaced it completes the transaction.
                            errors::INVALID_PRODUCER_EPOCH
                            | errors::TRANSACTION_COORDINATOR_FENCED => {
                                tracing::warn!(
                                    transactional_id = %job.transactional_id,
                                    partition = %tp,
                                    error = errors::name(p.error_code),
                                    "transaction markers refused; stopping"
                                );
                                return;
                            }
                            code => tracing::debug!(
                                partition = %tp,
                                error = errors::name(code),
                                "transaction marker not written; retrying"
                            ),
                        }
                    }
                }
            }
            for tp in &done {
                remaining.remove(tp);
            }
            // A transaction with no partitions (an empty abort) completes at once.
            if !done.is_empty() || remaining.is_empty() {
                let now = now_ms();
                self.txns
                    .run_writes(&shard, |core| {
                        core.markers_written(now, &job.transactional_id, job.producer_epoch, &done)
                            .map(|w| w.into_iter().collect())
                    })
                    .await;
            }
            if remaining.is_empty() {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MARKER_RETRY_MAX);
        }
    }

    async fn send_remote_markers(
        &self,
        broker: i32,
        request: WriteTxnMarkersRequest,
    ) -> Result<WriteTxnMarkersResponse, KafkaError> {
        let links = self.txns.marker_links(broker);
        let client_id = format!("txn-markers-{}", self.node.config.node_id);
        // A marker waits up to 30 s for its replicas at the leader.
        let timeout = Duration::from_secs(35);
        let body = RequestBody::WriteTxnMarkers(request);
        match self
            .node
            .send_on_link(
                &links,
                broker,
                client_id,
                timeout,
                WRITE_TXN_MARKERS_VERSION,
                body,
            )
            .await?
        {
            ResponseBody::WriteTxnMarkers(response) => Ok(response),
            other => Err(wrong_answer(broker, &other, ApiKey::WriteTxnMarkers)),
        }
    }

    // ---- Timers ---------------------------------------------------------------------------

    /// Ticks the transaction shards whose deadline has come by `now` (timeouts, retried
    /// completions, expirations), sending the markers they prepare; answers the earliest
    /// deadline left.
    pub(crate) async fn run_due_txn_timers(self: &Arc<Self>, now: i64) -> Option<i64> {
        let (due, mut next) = self.txns.shards.due(now);
        for (partition, shard) in due {
            for written in self.txns.run_writes(&shard, |core| core.tick(now)).await {
                if let Some(job) = written.markers {
                    self.send_markers(partition, shard.clone(), job);
                }
            }
            let deadline = after_tick(lock(&shard).core.next_deadline(), now);
            next = earliest(next, deadline);
        }
        next
    }
}

/// The partitions an AddPartitionsToTxn transaction names.
pub(crate) fn transaction_partitions(
    transaction: &AddPartitionsToTxnTransaction,
) -> Vec<TopicPartition> {
    transaction
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.name.as_str(), p))
        })
        .collect()
}

/// The WriteTxnMarkers request ending `job`'s transaction on `partitions`.
fn marker_request(job: &MarkerJob, partitions: &[TopicPartition]) -> WriteTxnMarkersRequest {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    WriteTxnMarkersRequest {
        markers: vec![WritableTxnMarker {
            producer_id: job.producer_id,
            producer_epoch: job.producer_epoch,
            transaction_result: job.commit,
            coordinator_epoch: job.coordinator_epoch,
            // Sent from WriteTxnMarkers v2 (KIP-1228): a leader checks the epoch of a
            // version 2 marker strictly.
            transaction_version: job.transaction_version as i8,
            topics: by_topic
                .into_iter()
                .map(|(name, partition_indexes)| WritableTxnMarkerTopic {
                    name: name.to_string(),
                    partition_indexes,
                })
                .collect(),
        }],
    }
}
