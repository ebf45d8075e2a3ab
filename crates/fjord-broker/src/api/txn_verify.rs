//! KIP-890 at the partition leader.
//!
//! Part 1: a transactional batch for a partition where its producer has no transaction open (at
//! its epoch) is appended only if the transaction coordinator says the partition is in the
//! producer's transaction, so no hanging transaction can start behind the coordinator's back.
//! Part 2: producers on transaction version 2 skip AddPartitionsToTxn and AddOffsetsToTxn
//! (Produce v12+, TxnOffsetCommit v5+); the leader adds the partition to the transaction itself,
//! with AddPartitionsToTxn's brokers' form not verify-only.
//!
//! A coordinator on this broker verifies at once, under its shard's lock. What must wait for a
//! coordinator — one on another broker, or an add, whose record is written to
//! `__transaction_state` first — is asked before the request takes effect: such a request is
//! sequenced after every earlier request of its connection and holds back the later ones
//! (`Broker::sequencing`), so records still go in in arrival order. Once the first batch is in,
//! the partition has the transaction open and later batches need no asking. A TxnOffsetCommit
//! is checked the same way for its group's `__consumer_offsets` partition.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fjord_common::{errors, lock, TopicPartition};
use fjord_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use fjord_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
};
use fjord_protocol::messages::produce_request::ProduceRequest;
use fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use fjord_protocol::{ApiKey, Decoder, RequestBody, ResponseBody};

use crate::api::TxnApi;
use crate::coordinator::group::OFFSETS_TOPIC;
use crate::coordinator::txn::TXN_TOPIC;
use crate::link::peers::{Codes, PendingAsk};
use crate::replication::{Partition, PartitionError, TxnVerification};
use fjord_common::errors::KafkaError;

/// What a request's transaction coordinator answered when asked before the request took
/// effect, with the verification guard taken on each partition led here before the asking.
#[derive(Default)]
pub(crate) struct Verdicts {
    codes: Codes,
    guards: HashMap<TopicPartition, u64>,
}

/// The first Produce version whose producers leave adding partitions to the leader.
const PRODUCE_ADDS_FROM: i16 = 12;

/// The first TxnOffsetCommit version whose producers leave adding the group's partition to the
/// group coordinator.
const TXN_OFFSET_COMMIT_ADDS_FROM: i16 = 5;

/// The AddPartitionsToTxn version a leader asks another broker with (the brokers' form).
const ASK_VERSION: i16 = 5;

/// How long a leader waits for a remote coordinator's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// What one request must have asked its transaction coordinator before it takes effect.
pub(crate) struct CoordinatorAsk {
    /// The coordinator's broker: this one for an add on a local shard, -1 when none leads it.
    coordinator: i32,
    /// Verify-only for part 1, an add for part 2.
    transaction: AddPartitionsToTxnTransaction,
}

impl TxnApi {
    /// KIP-890: a transactional batch for a partition where its producer has no transaction
    /// open yet must be in the producer's transaction at the coordinator.
    pub(crate) fn verify_transactional_produce(
        &self,
        transactional_id: &str,
        partition: &Partition,
        records: &Bytes,
        produce_version: i16,
        verdicts: &Verdicts,
    ) -> Result<Option<TxnVerification>, PartitionError> {
        let Ok(header) = fjord_records::BatchHeader::parse(records) else {
            // The append reports what is wrong with it.
            return Ok(None);
        };
        if !header.is_transactional() {
            return Ok(None);
        }
        let (code, guard) = self.verify_in_transaction(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            partition,
            verdicts,
        );
        let code = match code {
            errors::NONE => {
                return Ok(Some(TxnVerification {
                    producer_id: header.producer_id,
                    producer_epoch: header.producer_epoch,
                    guard,
                }))
            }
            code => not_in_transaction_code(code, produce_version),
        };
        Err(PartitionError::new(
            code,
            format!(
                "the partition {} is not in the transaction of {transactional_id}",
                partition.tp
            ),
        ))
    }

    /// KIP-890 for a transaction's offset commit (TxnOffsetCommit, checked on the group's
    /// `__consumer_offsets` partition under its shard's lock): the producer's epoch must not be
    /// older than the partition has seen, and the partition must be in its transaction. The
    /// error code for every partition of the request, if refused.
    pub(crate) fn check_txn_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &Partition,
        verdicts: &Verdicts,
        version: i16,
    ) -> Result<(), i16> {
        let fenced = partition
            .try_lock()
            .is_ok_and(|log| log.producer_epoch(producer_id) > Some(producer_epoch));
        if fenced {
            return Err(errors::INVALID_PRODUCER_EPOCH);
        }
        let (code, guard) = self.verify_in_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            partition,
            verdicts,
        );
        // Checked under the shard's lock, which a marker for this partition takes too: no
        // marker can come between this and the append.
        let code = match code {
            errors::NONE
                if !partition.try_lock().is_ok_and(|log| {
                    log.transaction_verified(producer_id, producer_epoch, guard)
                }) =>
            {
                errors::TRANSACTION_ABORTABLE
            }
            code => code,
        };
        match code {
            errors::NONE => Ok(()),
            // Kafka 4.4 answers TRANSACTION_ABORTABLE from v4 on; older producers know it not.
            errors::TRANSACTION_ABORTABLE if version < 4 => Err(errors::INVALID_TXN_STATE),
            // The transaction coordinator cannot say now: the producer retries with this
            // group coordinator.
            errors::NOT_COORDINATOR
            | errors::COORDINATOR_NOT_AVAILABLE
            | errors::COORDINATOR_LOAD_IN_PROGRESS
            | errors::CONCURRENT_TRANSACTIONS => Err(errors::COORDINATOR_LOAD_IN_PROGRESS),
            code => Err(code),
        }
    }

    /// Whether `partition` is in the transaction of `transactional_id`'s producer: at once if
    /// the partition needs no word from the coordinator (`needs_transaction_verification`),
    /// else as the coordinator answered when asked beforehand, else as a coordinator on this
    /// broker says (AddPartitionsToTxn's verify form). NONE when it is (or the append decides),
    /// else the coordinator's error; with the verification guard taken before the coordinator
    /// was asked, if it was.
    fn verify_in_transaction(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &Partition,
        verdicts: &Verdicts,
    ) -> (i16, Option<u64>) {
        let needed = partition
            .try_lock()
            .is_ok_and(|log| log.needs_transaction_verification(producer_id, producer_epoch));
        if !needed {
            return (errors::NONE, None);
        }
        if let Some(code) = verdicts.codes.get(&partition.tp) {
            return (*code, verdicts.guards.get(&partition.tp).copied());
        }
        let txn_partition = self.txns.partition_of(transactional_id);
        match self.txns.shards.shard(txn_partition) {
            Some(shard) => {
                // Verify-only: transaction version 1 (version 2 producers are asked first).
                let guard = start_verification(partition, producer_id, producer_epoch, false);
                let code = lock(&shard)
                    .core
                    .verify_partitions(
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        std::slice::from_ref(&partition.tp),
                    )
                    .pop()
                    .map_or(errors::UNKNOWN_SERVER_ERROR, |(_, code)| code);
                (code, guard)
            }
            // Led here but not loaded yet.
            None if self.replicas.get(TXN_TOPIC, txn_partition).is_some() => {
                (errors::COORDINATOR_LOAD_IN_PROGRESS, None)
            }
            // The coordinator is another broker and was not asked (the transaction was open
            // then): the producer tries again.
            None => (errors::COORDINATOR_NOT_AVAILABLE, None),
        }
    }

    /// What `request` must ask its transaction coordinator before it takes effect: its
    /// transactional batches on partitions led here that need the coordinator's word, when the coordinator is another broker (or none: `ask_coordinator` then
    /// answers COORDINATOR_NOT_AVAILABLE, and the producer retries) or the leader adds them.
    pub(crate) fn produce_ask(
        &self,
        request: &ProduceRequest,
        version: i16,
    ) -> Option<CoordinatorAsk> {
        let transactional_id = request.transactional_id.as_deref()?;
        let add = version >= PRODUCE_ADDS_FROM;
        let coordinator = self.coordinator_to_ask(transactional_id, add)?;
        let mut producer = None;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for topic in &request.topic_data {
            for data in &topic.partition_data {
                let Some(header) = data
                    .records
                    .as_ref()
                    .and_then(|r| fjord_records::BatchHeader::parse(r).ok())
                else {
                    continue;
                };
                if !header.is_transactional() {
                    continue;
                }
                let Some(partition) = self.replicas.get(&topic.name, data.index) else {
                    continue;
                };
                let needed = partition.try_lock().is_ok_and(|log| {
                    log.needs_transaction_verification(header.producer_id, header.producer_epoch)
                });
                if needed {
                    producer = Some((header.producer_id, header.producer_epoch));
                    topics.entry(&topic.name).or_default().push(data.index);
                }
            }
        }
        let (producer_id, producer_epoch) = producer?;
        Some(CoordinatorAsk {
            coordinator,
            transaction: AddPartitionsToTxnTransaction {
                transactional_id: transactional_id.to_string(),
                producer_id,
                producer_epoch,
                verify_only: !add,
                topics: topics
                    .into_iter()
                    .map(|(name, partitions)| AddPartitionsToTxnTopic {
                        name: name.to_string(),
                        partitions,
                    })
                    .collect(),
            },
        })
    }

    /// The same for a TxnOffsetCommit, whose one partition is its group's `__consumer_offsets`
    /// partition (when led here; elsewhere the request is refused NOT_COORDINATOR anyway).
    pub(crate) fn offsets_ask(
        &self,
        request: &TxnOffsetCommitRequest,
        version: i16,
    ) -> Option<CoordinatorAsk> {
        let add = version >= TXN_OFFSET_COMMIT_ADDS_FROM;
        let coordinator = self.coordinator_to_ask(&request.transactional_id, add)?;
        let offsets_partition = self.groups.partition_of(&request.group_id);
        let partition = self.replicas.get(OFFSETS_TOPIC, offsets_partition)?;
        let needed = partition.try_lock().is_ok_and(|log| {
            log.needs_transaction_verification(request.producer_id, request.producer_epoch)
        });
        needed.then(|| CoordinatorAsk {
            coordinator,
            transaction: AddPartitionsToTxnTransaction {
                transactional_id: request.transactional_id.clone(),
                producer_id: request.producer_id,
                producer_epoch: request.producer_epoch,
                verify_only: !add,
                topics: vec![AddPartitionsToTxnTopic {
                    name: OFFSETS_TOPIC.to_string(),
                    partitions: vec![offsets_partition],
                }],
            },
        })
    }

    /// The broker to ask about `transactional_id`'s transaction before a request takes effect
    /// (-1 when no broker leads its coordinator), or None when a coordinator on this broker
    /// answers at once: it does for verification, while an add waits for its record.
    fn coordinator_to_ask(&self, transactional_id: &str, add: bool) -> Option<i32> {
        let txn_partition = self.txns.partition_of(transactional_id);
        if self.replicas.get(TXN_TOPIC, txn_partition).is_some() {
            return add.then_some(self.node.config.node_id);
        }
        let leader = self
            .node
            .image()
            .topic(TXN_TOPIC)
            .and_then(|t| {
                t.partitions
                    .get(usize::try_from(txn_partition).ok()?)
                    .map(|p| p.leader)
            })
            .unwrap_or(-1);
        Some(leader)
    }

    /// Whether the TxnOffsetCommit in `frame` must ask its transaction coordinator before it
    /// takes effect (then it is sequenced after everything before it).
    pub(crate) fn txn_offset_commit_must_ask(&self, frame: &Bytes) -> bool {
        let mut input = Decoder::new(frame.clone());
        let Ok(header) = fjord_protocol::decode_request_header(&mut input) else {
            return false;
        };
        let version = header.request_api_version;
        match RequestBody::decode(ApiKey::TxnOffsetCommit, &mut input, version) {
            Ok(RequestBody::TxnOffsetCommit(request)) => {
                self.offsets_ask(&request, version).is_some()
            }
            _ => false,
        }
    }

    /// Whether the Produce in `frame` must ask its transaction coordinator before it takes
    /// effect (then it is sequenced after everything before it). Frames of other producers are
    /// not decoded beyond their transactional id.
    pub(crate) fn produce_must_ask(&self, frame: &Bytes) -> bool {
        let mut input = Decoder::new(frame.clone());
        let Ok(header) = fjord_protocol::decode_request_header(&mut input) else {
            return false;
        };
        let version = header.request_api_version;
        let flexible = version >= 9;
        let transactional = input
            .clone()
            .read_nullable_string(flexible)
            .is_ok_and(|id| id.is_some());
        if !transactional {
            return false;
        }
        let Ok(mut body) = RequestBody::decode(ApiKey::Produce, &mut input, version) else {
            return false;
        };
        crate::api::topic_ids::name_topics(|| self.node.image(), &mut body, version);
        match body {
            RequestBody::Produce(request) => self.produce_ask(&request, version).is_some(),
            _ => false,
        }
    }

    /// Asks the coordinator of `ask` to verify or add its partitions; one verdict per partition
    /// (COORDINATOR_NOT_AVAILABLE for all when it cannot be asked, so the producer retries).
    pub(crate) async fn ask_coordinator(self: &Arc<Self>, ask: CoordinatorAsk) -> Verdicts {
        let add = !ask.transaction.verify_only;
        // An add refused with CONCURRENT_TRANSACTIONS (the producer's previous transaction is
        // still being completed) is asked again after a backoff, for a while, before the
        // producer hears it.
        let (backoff_ms, retry_max_ms) = self.node.config.add_partitions_to_txn_retry_ms();
        let started = Instant::now();
        loop {
            // Guards before each asking: a marker that lands while the coordinator is asked
            // drops them (on transaction version 2 not the previous transaction's, which
            // carries the epoch asked about).
            let guards = crate::api::txn::transaction_partitions(&ask.transaction)
                .into_iter()
                .filter_map(|tp| {
                    let partition = self.replicas.get(&tp.topic, tp.partition)?;
                    let guard = start_verification(
                        &partition,
                        ask.transaction.producer_id,
                        ask.transaction.producer_epoch,
                        add,
                    )?;
                    Some((tp, guard))
                })
                .collect();
            let codes = if ask.coordinator == self.node.config.node_id {
                verdicts_of(self.add_partitions(ask.transaction.clone(), 2).await)
            } else {
                self.ask_remote_coordinator(ask.coordinator, &ask.transaction)
                    .await
            };
            let busy = add
                && codes
                    .values()
                    .any(|code| *code == errors::CONCURRENT_TRANSACTIONS);
            if !busy || started.elapsed() >= Duration::from_millis(retry_max_ms) {
                return Verdicts { codes, guards };
            }
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
        }
    }

    /// Asks `coordinator`'s broker about one transaction, in the next AddPartitionsToTxn to it
    /// (see [`AskQueues`]).
    async fn ask_remote_coordinator(
        self: &Arc<Self>,
        coordinator: i32,
        transaction: &AddPartitionsToTxnTransaction,
    ) -> Codes {
        if coordinator < 0 {
            return codes_for(transaction, errors::COORDINATOR_NOT_AVAILABLE);
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        let ask = PendingAsk {
            transaction: transaction.clone(),
            answer,
        };
        match self.txns.push_ask(coordinator, ask) {
            Ok(true) => {
                let broker = self.clone();
                tokio::spawn(async move { broker.send_asks(coordinator).await });
            }
            Ok(false) => {}
            Err(_) => return codes_for(transaction, errors::COORDINATOR_NOT_AVAILABLE),
        }
        // The request before this one and this one's own, each bound by ASK_TIMEOUT.
        match tokio::time::timeout(2 * ASK_TIMEOUT, answered).await {
            Ok(Ok(codes)) => codes,
            _ => codes_for(transaction, errors::COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// Sends what waits for `broker`, one AddPartitionsToTxn at a time, until nothing does.
    async fn send_asks(&self, broker: i32) {
        loop {
            let batch = self.txns.next_asks(broker);
            if batch.is_empty() {
                return;
            }
            let request = AddPartitionsToTxnRequest {
                transactions: batch.iter().map(|ask| ask.transaction.clone()).collect(),
                ..Default::default()
            };
            let asked =
                tokio::time::timeout(ASK_TIMEOUT, self.send_add_partitions(broker, request)).await;
            let (error, mut results) = match asked {
                Ok(Ok(response)) if response.error_code == errors::NONE => (
                    None,
                    response
                        .results_by_transaction
                        .into_iter()
                        .map(|result| (result.transactional_id.clone(), result))
                        .collect::<HashMap<_, _>>(),
                ),
                Ok(Ok(response)) => (Some(response.error_code), HashMap::new()),
                Ok(Err(error)) => {
                    tracing::debug!(%error, broker, "cannot ask a transaction coordinator");
                    (None, HashMap::new())
                }
                Err(_) => (None, HashMap::new()),
            };
            for ask in batch {
                let codes = match results.remove(&ask.transaction.transactional_id) {
                    Some(result) => verdicts_of(result),
                    // Not answered for: the coordinator cannot say now (the producer retries).
                    None => codes_for(
                        &ask.transaction,
                        error.unwrap_or(errors::COORDINATOR_NOT_AVAILABLE),
                    ),
                };
                // The asker may have given up waiting.
                let _ = ask.answer.send(codes);
            }
        }
    }

    async fn send_add_partitions(
        &self,
        broker: i32,
        request: AddPartitionsToTxnRequest,
    ) -> Result<AddPartitionsToTxnResponse, KafkaError> {
        let links = self.txns.verification_links(broker);
        let client_id = format!("txn-verification-{}", self.node.config.node_id);
        let body = RequestBody::AddPartitionsToTxn(request);
        match self
            .node
            .send_on_link(&links, broker, client_id, ASK_TIMEOUT, ASK_VERSION, body)
            .await?
        {
            ResponseBody::AddPartitionsToTxn(response) => Ok(response),
            other => Err(crate::api::txn::wrong_answer(
                broker,
                &other,
                ApiKey::AddPartitionsToTxn,
            )),
        }
    }
}

/// Takes the producer's verification guard on `partition` (None if its log is unusable: the
/// append then refuses the batch). `epoch_bumps`: the producer is on transaction version 2.
fn start_verification(
    partition: &Partition,
    producer_id: i64,
    producer_epoch: i16,
    epoch_bumps: bool,
) -> Option<u64> {
    let mut log = partition.try_lock().ok()?;
    Some(log.start_transaction_verification(
        producer_id,
        producer_epoch,
        epoch_bumps,
        fjord_common::now_ms(),
    ))
}

/// What a producer is told when its transactional batch is not in its transaction (`code`,
/// the coordinator's answer; TRANSACTION_ABORTABLE when the transaction ended between the
/// verification and the append).
pub(crate) fn not_in_transaction_code(code: i16, produce_version: i16) -> i16 {
    match code {
        // Producers before produce v11 do not know TRANSACTION_ABORTABLE.
        errors::TRANSACTION_ABORTABLE if produce_version < 11 => errors::INVALID_TXN_STATE,
        // A producer whose leader adds partitions retries this one itself (as Kafka answers).
        errors::CONCURRENT_TRANSACTIONS if produce_version >= PRODUCE_ADDS_FROM => {
            errors::CONCURRENT_TRANSACTIONS
        }
        // The coordinator cannot say now: the producer retries.
        errors::NOT_COORDINATOR
        | errors::COORDINATOR_NOT_AVAILABLE
        | errors::COORDINATOR_LOAD_IN_PROGRESS
        | errors::CONCURRENT_TRANSACTIONS => errors::NOT_ENOUGH_REPLICAS,
        code => code,
    }
}

/// The same answer for every partition of `transaction`.
fn codes_for(transaction: &AddPartitionsToTxnTransaction, code: i16) -> Codes {
    crate::api::txn::transaction_partitions(transaction)
        .into_iter()
        .map(|tp| (tp, code))
        .collect()
}

/// One transaction's AddPartitionsToTxn result as a verdict per partition.
fn verdicts_of(result: AddPartitionsToTxnResult) -> Codes {
    result
        .topic_results
        .into_iter()
        .flat_map(|topic| {
            topic.results_by_partition.into_iter().map(move |p| {
                (
                    TopicPartition::new(topic.name.as_str(), p.partition_index),
                    p.partition_error_code,
                )
            })
        })
        .collect()
}
