//! KIP-890 part 1 at the partition leader: a transactional batch for a partition where its
//! producer has no transaction open yet is appended only if the transaction coordinator says
//! the partition is in the producer's transaction, so no hanging transaction can start behind
//! the coordinator's back. A coordinator on this broker is asked at once, under its shard's
//! lock. A coordinator on another broker is asked with AddPartitionsToTxn's verify-only form
//! (v4+) before the produce takes effect: such a produce is sequenced after every earlier
//! request of its connection and holds back the later ones (`Broker::sequencing`), so its
//! records still go in in arrival order. Once the first batch is in, the partition has the
//! transaction open and later batches need no asking. A TxnOffsetCommit is verified the same
//! way for its group's `__consumer_offsets` partition.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use fjord_common::{errors, lock, TopicPartition};
use fjord_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use fjord_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResponse;
use fjord_protocol::messages::produce_request::ProduceRequest;
use fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use fjord_protocol::{ApiKey, Decoder, RequestBody, ResponseBody};

use crate::broker::Broker;
use crate::group_runtime::OFFSETS_TOPIC;
use crate::replica::{Partition, PartitionError};
use crate::txn_runtime::TXN_TOPIC;

/// The coordinators' answers for the partitions of one produce whose transaction coordinator
/// is another broker: NONE when the partition is in the producer's transaction.
pub(crate) type RemoteVerdicts = HashMap<TopicPartition, i16>;

/// The AddPartitionsToTxn version a leader verifies with (the first with the brokers' form).
const VERIFY_VERSION: i16 = 4;

/// How long a leader waits for a remote coordinator's verdict.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// What one produce must have verified by a remote coordinator before it takes effect.
pub(crate) struct RemoteVerification {
    coordinator: i32,
    transaction: AddPartitionsToTxnTransaction,
}

impl Broker {
    /// KIP-890 part 1: a transactional batch for a partition where its producer has no
    /// transaction open yet must be in the producer's transaction at the coordinator.
    pub(crate) fn verify_transactional_produce(
        &self,
        transactional_id: &str,
        partition: &Partition,
        records: &Bytes,
        produce_version: i16,
        remote: &RemoteVerdicts,
    ) -> Result<(), PartitionError> {
        let Ok(header) = fjord_records::BatchHeader::parse(records) else {
            // The append reports what is wrong with it.
            return Ok(());
        };
        if !header.is_transactional() {
            return Ok(());
        }
        let code = match self.verify_in_transaction(
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            partition,
            remote,
        ) {
            errors::NONE => return Ok(()),
            // Producers before produce v11 do not know TRANSACTION_ABORTABLE.
            errors::TRANSACTION_ABORTABLE if produce_version < 11 => errors::INVALID_TXN_STATE,
            // The coordinator cannot say now: the producer retries.
            errors::NOT_COORDINATOR
            | errors::COORDINATOR_NOT_AVAILABLE
            | errors::COORDINATOR_LOAD_IN_PROGRESS
            | errors::CONCURRENT_TRANSACTIONS => errors::NOT_ENOUGH_REPLICAS,
            code => code,
        };
        Err(PartitionError::new(
            code,
            format!(
                "the partition {} is not in the transaction of {transactional_id}",
                partition.tp
            ),
        ))
    }

    /// KIP-890 part 1 for a transaction's offset commit (TxnOffsetCommit, checked on the
    /// group's `__consumer_offsets` partition under its shard's lock): the producer's epoch
    /// must not be older than the partition has seen, and the partition must be in its
    /// transaction. The error code for every partition of the request, if refused.
    pub(crate) fn check_txn_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &Partition,
        remote: &RemoteVerdicts,
        version: i16,
    ) -> Result<(), i16> {
        let fenced = partition
            .log
            .lock()
            .is_ok_and(|log| log.producer_epoch(producer_id) > Some(producer_epoch));
        if fenced {
            return Err(errors::INVALID_PRODUCER_EPOCH);
        }
        match self.verify_in_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            partition,
            remote,
        ) {
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
    /// the producer has a transaction open there, else as the transaction coordinator says
    /// (AddPartitionsToTxn's verify form). NONE when it is, else the coordinator's error.
    fn verify_in_transaction(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &Partition,
        remote: &RemoteVerdicts,
    ) -> i16 {
        let open = partition
            .log
            .lock()
            .is_ok_and(|log| log.in_transaction(producer_id));
        if open {
            return errors::NONE;
        }
        let txn_partition = self.txns.partition_of(transactional_id);
        match self.txns.shard(txn_partition) {
            Some(shard) => lock(&shard)
                .core
                .verify_partitions(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    std::slice::from_ref(&partition.tp),
                )
                .pop()
                .map_or(errors::UNKNOWN_SERVER_ERROR, |(_, code)| code),
            // Led here but not loaded yet.
            None if self.replicas.get(TXN_TOPIC, txn_partition).is_some() => {
                errors::COORDINATOR_LOAD_IN_PROGRESS
            }
            // The coordinator is another broker: its answer was fetched before this request
            // took effect (`verify_remotely`); one not fetched makes the producer try again.
            None => remote
                .get(&partition.tp)
                .copied()
                .unwrap_or(errors::COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// The partitions of `request` that need a remote coordinator's verdict before it takes
    /// effect: transactional batches on partitions led here where the producer has no
    /// transaction open, when the coordinator of its transactional id is another broker (or
    /// none: `verify_remotely` then answers COORDINATOR_NOT_AVAILABLE, and the producer
    /// retries).
    pub(crate) fn remote_verification(
        &self,
        request: &ProduceRequest,
    ) -> Option<RemoteVerification> {
        let transactional_id = request.transactional_id.as_deref()?;
        let coordinator = self.remote_txn_coordinator(transactional_id)?;
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
                let open = partition
                    .log
                    .lock()
                    .is_ok_and(|log| log.in_transaction(header.producer_id));
                if !open {
                    producer = Some((header.producer_id, header.producer_epoch));
                    topics.entry(&topic.name).or_default().push(data.index);
                }
            }
        }
        let (producer_id, producer_epoch) = producer?;
        Some(RemoteVerification {
            coordinator,
            transaction: AddPartitionsToTxnTransaction {
                transactional_id: transactional_id.to_string(),
                producer_id,
                producer_epoch,
                verify_only: true,
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
    pub(crate) fn remote_offsets_verification(
        &self,
        request: &TxnOffsetCommitRequest,
    ) -> Option<RemoteVerification> {
        let coordinator = self.remote_txn_coordinator(&request.transactional_id)?;
        let offsets_partition = self.groups.partition_of(&request.group_id);
        let partition = self.replicas.get(OFFSETS_TOPIC, offsets_partition)?;
        let open = partition
            .log
            .lock()
            .is_ok_and(|log| log.in_transaction(request.producer_id));
        (!open).then(|| RemoteVerification {
            coordinator,
            transaction: AddPartitionsToTxnTransaction {
                transactional_id: request.transactional_id.clone(),
                producer_id: request.producer_id,
                producer_epoch: request.producer_epoch,
                verify_only: true,
                topics: vec![AddPartitionsToTxnTopic {
                    name: OFFSETS_TOPIC.to_string(),
                    partitions: vec![offsets_partition],
                }],
            },
        })
    }

    /// The broker leading the transaction coordinator of `transactional_id` (-1 when none
    /// does), unless it is this one.
    fn remote_txn_coordinator(&self, transactional_id: &str) -> Option<i32> {
        let txn_partition = self.txns.partition_of(transactional_id);
        if self.replicas.get(TXN_TOPIC, txn_partition).is_some() {
            return None;
        }
        let leader = self
            .quorum
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

    /// Whether the TxnOffsetCommit in `frame` must ask a remote coordinator before it takes
    /// effect (then it is sequenced after everything before it).
    pub(crate) fn txn_offset_commit_needs_remote_verification(&self, frame: &Bytes) -> bool {
        let mut input = Decoder::new(frame.clone());
        let Ok(header) = fjord_protocol::decode_request_header(&mut input) else {
            return false;
        };
        let version = header.request_api_version;
        match RequestBody::decode(ApiKey::TxnOffsetCommit, &mut input, version) {
            Ok(RequestBody::TxnOffsetCommit(request)) => {
                self.remote_offsets_verification(&request).is_some()
            }
            _ => false,
        }
    }

    /// Whether the Produce in `frame` must ask a remote coordinator before it takes effect
    /// (then it is sequenced after everything before it). Frames of other producers are not
    /// decoded beyond their transactional id.
    pub(crate) fn produce_needs_remote_verification(&self, frame: &Bytes) -> bool {
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
        match RequestBody::decode(ApiKey::Produce, &mut input, version) {
            Ok(RequestBody::Produce(request)) => self.remote_verification(&request).is_some(),
            _ => false,
        }
    }

    /// Asks the remote coordinator whether the partitions of `verification` are in the
    /// producer's transaction; one verdict per partition (COORDINATOR_NOT_AVAILABLE for all
    /// when it cannot be asked, so the producer retries).
    pub(crate) async fn verify_remotely(&self, verification: RemoteVerification) -> RemoteVerdicts {
        let partitions = crate::txn::transaction_partitions(&verification.transaction);
        let unavailable = |partitions: &[TopicPartition]| {
            partitions
                .iter()
                .map(|tp| (tp.clone(), errors::COORDINATOR_NOT_AVAILABLE))
                .collect()
        };
        if verification.coordinator < 0 {
            return unavailable(&partitions);
        }
        let request = AddPartitionsToTxnRequest {
            transactions: vec![verification.transaction],
            ..Default::default()
        };
        let asked = tokio::time::timeout(
            VERIFY_TIMEOUT,
            self.send_verification(verification.coordinator, request),
        )
        .await;
        let response = match asked {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                tracing::debug!(%error, coordinator = verification.coordinator, "cannot verify a transactional produce");
                return unavailable(&partitions);
            }
            Err(_) => return unavailable(&partitions),
        };
        let mut verdicts = RemoteVerdicts::new();
        for result in response.results_by_transaction {
            for topic in result.topic_results {
                for p in topic.results_by_partition {
                    let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
                    verdicts.insert(tp, p.partition_error_code);
                }
            }
        }
        if response.error_code != errors::NONE {
            for tp in &partitions {
                verdicts.insert(tp.clone(), response.error_code);
            }
        }
        verdicts
    }

    async fn send_verification(
        &self,
        broker: i32,
        request: AddPartitionsToTxnRequest,
    ) -> Result<AddPartitionsToTxnResponse, String> {
        let link = self.txns.verification_link(broker);
        let client_id = format!("txn-verification-{}", self.config.node_id);
        let body = RequestBody::AddPartitionsToTxn(request);
        match self
            .send_on_link(
                &link,
                broker,
                client_id,
                VERIFY_TIMEOUT,
                VERIFY_VERSION,
                body,
            )
            .await?
        {
            ResponseBody::AddPartitionsToTxn(response) => Ok(response),
            other => Err(format!(
                "broker {broker} answered {} to AddPartitionsToTxn",
                other.api_key().name()
            )),
        }
    }
}
