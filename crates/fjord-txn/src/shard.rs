//! `TransactionCoordinatorShard`: the transactional ids of one `__transaction_state` partition
//! and the requests on them, as Kafka's transaction coordinator answers them.
//!
//! A request that changes a transaction returns [`Step::Write`]: the record to append to the
//! partition. The shell appends it (in the order the shard produced it) and, once it is durable
//! or has failed, calls [`TransactionCoordinatorShard::written`], which completes the transition
//! and gives the answer of the request that asked, and the markers to write when a transaction
//! was prepared to commit or abort. While a transition is being written, other requests on that
//! transactional id are refused with CONCURRENT_TRANSACTIONS, which clients retry.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fjord_common::{errors, CoordinatorRecord, TopicPartition};
use fjord_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedTransaction,
};
use fjord_protocol::messages::end_txn_request::EndTxnRequest;
use fjord_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;

use crate::records;
use crate::state::{epoch_exhausted, TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
use crate::TxnError;

/// The coordinator's settings (`transaction.*` broker configs and the cluster's
/// `transaction.version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest timeout a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle transactional id is forgotten after this.
    pub transactional_id_expiration_ms: i64,
    /// The finalized `transaction.version`: 1+ writes record values of version 1. (The
    /// coordinator's own aborts follow the version each transaction's producer uses.)
    pub transaction_version: i16,
}

impl Default for TxnConfig {
    /// Kafka's defaults.
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            transaction_version: 2,
        }
    }
}

/// What a request leads to: an answer now, or a record to write first (the answer comes from
/// [`TransactionCoordinatorShard::written`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T> {
    Answer(T),
    Write(Write),
}

/// A record the shell appends to the shard's partition for one transactional id.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub transactional_id: String,
    pub record: CoordinatorRecord,
}

/// The producer id and epoch a request is answered with (-1 and -1 with an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerAnswer {
    pub error_code: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl ProducerAnswer {
    pub fn error(error_code: i16) -> Self {
        ProducerAnswer {
            error_code,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }
    }

    fn ok(producer_id: i64, producer_epoch: i16) -> Self {
        ProducerAnswer {
            error_code: errors::NONE,
            producer_id,
            producer_epoch,
        }
    }
}

/// The answer a written transition owes its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    InitProducerId(ProducerAnswer),
    AddPartitions(i16),
    EndTxn(ProducerAnswer),
}

/// What a written (or failed) transition leads to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Written {
    /// For the request that asked, if one did.
    pub answer: Option<Answer>,
    /// Markers to write now: the transaction is prepared.
    pub markers: Option<MarkerJob>,
}

/// The commit or abort markers of one transaction, for each partition's leader to write
/// (WriteTxnMarkers); [`TransactionCoordinatorShard::markers_written`] hears of each done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// The leader epoch of the shard's partition: a leader refuses markers of an older one.
    pub coordinator_epoch: i32,
    pub transaction_version: i16,
    pub partitions: Vec<TopicPartition>,
}

/// Why a transition is being written: what its completion answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    InitProducerId,
    AddPartitions,
    EndTxn,
    /// InitProducerId found a transaction ongoing: it is aborted and the producer retries.
    FenceForInit,
    /// The transaction outlived its timeout.
    TimeoutAbort,
    Complete,
    Expire,
}

pub struct TransactionCoordinatorShard {
    coordinator_epoch: i32,
    config: TxnConfig,
    txns: BTreeMap<String, TxnMetadata>,
    purposes: HashMap<String, Purpose>,
}

impl TransactionCoordinatorShard {
    /// An empty shard for a partition led under `coordinator_epoch`; [`Self::replay`] loads it.
    pub fn new(coordinator_epoch: i32, config: TxnConfig) -> Self {
        TransactionCoordinatorShard {
            coordinator_epoch,
            config,
            txns: BTreeMap::new(),
            purposes: HashMap::new(),
        }
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// Applies one record of the partition, in log order: the latest state of each
    /// transactional id wins, a tombstone forgets it.
    pub fn replay(&mut self, record: &CoordinatorRecord) -> Result<(), TxnError> {
        let (transactional_id, value) = records::decode(record)?;
        match value {
            None => {
                self.txns.remove(&transactional_id);
            }
            Some(value) => {
                let fields = crate::state::TxnFields::from_value(&value)?;
                self.txns.insert(
                    transactional_id.clone(),
                    TxnMetadata::loaded(&transactional_id, fields),
                );
            }
        }
        Ok(())
    }

    /// After loading: the transactions that were prepared but not completed, whose markers
    /// must be written (again) before they complete.
    pub fn unfinished_markers(&self) -> Vec<MarkerJob> {
        self.txns
            .values()
            .filter(|m| matches!(m.state(), TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|m| self.marker_job(m))
            .collect()
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    /// How many transactional ids this shard holds in each state, for a metrics scrape.
    pub fn state_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for metadata in self.txns.values() {
            *counts.entry(metadata.state().name()).or_default() += 1;
        }
        counts
    }

    /// InitProducerId with a transactional id. `expected` is the producer id and epoch the
    /// producer already holds (KIP-360), if it said; `new_producer_id` hands out a fresh id
    /// (None: none available now, answered as retriable).
    pub fn init_producer_id(
        &mut self,
        now: i64,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
    ) -> Result<Step<ProducerAnswer>, TxnError> {
        let refuse = |code| Ok(Step::Answer(ProducerAnswer::error(code)));
        if transactional_id.is_empty() {
            return refuse(errors::INVALID_REQUEST);
        }
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return refuse(errors::INVALID_TRANSACTION_TIMEOUT);
        }
        if !self.txns.contains_key(transactional_id) {
            let Some(producer_id) = new_producer_id() else {
                return refuse(errors::COORDINATOR_LOAD_IN_PROGRESS);
            };
            self.txns.insert(
                transactional_id.to_owned(),
                TxnMetadata::new(transactional_id, producer_id, timeout_ms, now),
            );
        }
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return refuse(errors::COORDINATOR_LOAD_IN_PROGRESS);
        };
        if meta.pending.is_some() {
            return refuse(errors::CONCURRENT_TRANSACTIONS);
        }
        let f = &meta.fields;
        let known = |(producer_id, epoch): (i64, i16)| {
            f.producer_epoch == NO_PRODUCER_EPOCH
                || producer_id == f.producer_id
                // A retry after the id was rotated, whose answer the producer never got.
                || (producer_id == f.previous_producer_id && epoch_exhausted(epoch))
        };
        if !expected.is_none_or(known) {
            return refuse(errors::PRODUCER_FENCED);
        }
        let (target, purpose) = match f.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return refuse(errors::CONCURRENT_TRANSACTIONS)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let rotate = epoch_exhausted(f.producer_epoch)
                    && expected.is_none_or(|(_, epoch)| epoch == f.producer_epoch);
                let target = if rotate {
                    let Some(producer_id) = new_producer_id() else {
                        return refuse(errors::COORDINATOR_LOAD_IN_PROGRESS);
                    };
                    meta.prepare_producer_id_rotation(
                        producer_id,
                        timeout_ms,
                        expected.is_some(),
                        now,
                    )
                } else {
                    match meta.prepare_epoch_bump(timeout_ms, expected.map(|(_, e)| e), now) {
                        Ok(target) => target,
                        Err(code) => return refuse(code),
                    }
                };
                (target, Purpose::InitProducerId)
            }
            TxnState::Ongoing => {
                // Abort it under a new epoch, fencing its producer; this producer retries and
                // gets the epoch after that.
                meta.fence();
                let version = meta.fields.client_transaction_version;
                let target = meta.prepare_end(false, version, NO_PRODUCER_ID, now);
                (target, Purpose::FenceForInit)
            }
            // Neither is ever the state at rest.
            TxnState::Dead | TxnState::PrepareEpochFence => {
                return refuse(errors::CONCURRENT_TRANSACTIONS)
            }
        };
        self.write(transactional_id, &target, purpose)
            .map(Step::Write)
    }

    /// AddPartitionsToTxn from a producer, and AddOffsetsToTxn with the group's
    /// `__consumer_offsets` partition (`client_transaction_version` 0), or a partition leader
    /// adding a partition for a producer on transaction version 2 (KIP-890 part 2): the
    /// transaction remembers the version, which its aborts by the coordinator follow.
    pub fn add_partitions(
        &mut self,
        now: i64,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        client_transaction_version: i16,
    ) -> Result<Step<i16>, TxnError> {
        if transactional_id.is_empty() {
            return Ok(Step::Answer(errors::INVALID_REQUEST));
        }
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return Ok(Step::Answer(errors::INVALID_PRODUCER_ID_MAPPING));
        };
        let f = &meta.fields;
        let refusal = if f.producer_id != producer_id {
            Some(errors::INVALID_PRODUCER_ID_MAPPING)
        } else if f.producer_epoch != producer_epoch {
            Some(errors::PRODUCER_FENCED)
        } else if meta.pending.is_some()
            || matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            Some(errors::CONCURRENT_TRANSACTIONS)
        } else if f.state == TxnState::Ongoing
            && partitions.iter().all(|p| f.partitions.contains(p))
        {
            Some(errors::NONE)
        } else {
            None
        };
        if let Some(code) = refusal {
            return Ok(Step::Answer(code));
        }
        let target = meta.prepare_add_partitions(
            partitions.iter().cloned(),
            client_transaction_version,
            now,
        );
        self.write(transactional_id, &target, Purpose::AddPartitions)
            .map(Step::Write)
    }

    /// AddPartitionsToTxn with `verify_only` (KIP-890 part 1): whether each partition is in the
    /// producer's ongoing transaction, as a leader asks before a transactional append. Nothing
    /// changes.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Vec<(TopicPartition, i16)> {
        let all = |code| partitions.iter().map(|p| (p.clone(), code)).collect();
        if transactional_id.is_empty() {
            return all(errors::INVALID_REQUEST);
        }
        let Some(meta) = self.txns.get(transactional_id) else {
            return all(errors::INVALID_PRODUCER_ID_MAPPING);
        };
        let f = &meta.fields;
        if f.producer_id != producer_id {
            all(errors::INVALID_PRODUCER_ID_MAPPING)
        } else if f.producer_epoch != producer_epoch {
            all(errors::PRODUCER_FENCED)
        } else if matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            all(errors::CONCURRENT_TRANSACTIONS)
        } else {
            partitions
                .iter()
                .map(|p| {
                    let code = if f.partitions.contains(p) {
                        errors::NONE
                    } else {
                        errors::TRANSACTION_ABORTABLE
                    };
                    (p.clone(), code)
                })
                .collect()
        }
    }

    /// EndTxn from the producer: commit or abort its ongoing transaction. A retry of an end
    /// already made is answered as the first was. `client_transaction_version` is 2 from EndTxn
    /// v5 on (the producer expects its epoch bumped), else 0.
    pub fn end_txn(
        &mut self,
        now: i64,
        request: &EndTxnRequest,
        client_transaction_version: i16,
        new_producer_id: &mut dyn FnMut() -> Option<i64>,
    ) -> Result<Step<ProducerAnswer>, TxnError> {
        let transactional_id = request.transactional_id.as_str();
        let (producer_id, producer_epoch, commit) = (
            request.producer_id,
            request.producer_epoch,
            request.committed,
        );
        let refuse = |code| Ok(Step::Answer(ProducerAnswer::error(code)));
        if transactional_id.is_empty() {
            return refuse(errors::INVALID_REQUEST);
        }
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return refuse(errors::INVALID_PRODUCER_ID_MAPPING);
        };
        let f = &meta.fields;
        // With transaction version 2 every end bumps the epoch, so a retry comes with the epoch
        // before the bump.
        let v2 = client_transaction_version >= 2;
        let retry_on_overflow = v2
            && f.previous_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && f.producer_epoch == 0;
        let retry_on_bump = v2 && i32::from(f.producer_epoch) == i32::from(producer_epoch) + 1;
        let retry = retry_on_bump || retry_on_overflow;
        // The producer's next end (with the epoch this end handed it) before this one's markers
        // are all written: Kafka fences it; fjord has it wait, as the producer that holds the
        // bumped epoch is the current one (franz-go aborts an emptied transaction at once).
        let early_next_end = v2
            && matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            && producer_epoch == f.producer_epoch;
        let valid_epoch = if v2 {
            match f.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump || early_next_end,
                // The current epoch: a new (empty) abort.
                TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    retry || producer_epoch == f.producer_epoch
                }
                _ => producer_epoch == f.producer_epoch,
            }
        } else {
            producer_epoch == f.producer_epoch
        };
        if f.producer_id != producer_id && !retry_on_overflow {
            return refuse(errors::INVALID_PRODUCER_ID_MAPPING);
        }
        if !valid_epoch {
            return refuse(errors::PRODUCER_FENCED);
        }
        if meta.pending.is_some() {
            return refuse(errors::CONCURRENT_TRANSACTIONS);
        }
        let done = ProducerAnswer::ok(f.producer_id, f.producer_epoch);
        let code = match (f.state, commit) {
            _ if early_next_end => Some(errors::CONCURRENT_TRANSACTIONS),
            (TxnState::Ongoing, _) => None,
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if !v2 || retry => {
                return Ok(Step::Answer(done))
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Some(errors::CONCURRENT_TRANSACTIONS)
            }
            // Transaction version 2: an abort with nothing to abort is taken, and bumps the
            // epoch like any end (the producer cannot know whether its produces reached a
            // partition, so it aborts to be sure).
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
                if v2 && !retry =>
            {
                None
            }
            _ => Some(errors::INVALID_TXN_STATE),
        };
        if let Some(code) = code {
            return refuse(code);
        }
        let next_producer_id =
            if client_transaction_version >= 2 && epoch_exhausted(f.producer_epoch) {
                match new_producer_id() {
                    Some(id) => id,
                    None => return refuse(errors::COORDINATOR_LOAD_IN_PROGRESS),
                }
            } else {
                NO_PRODUCER_ID
            };
        let target = meta.prepare_end(commit, client_transaction_version, next_producer_id, now);
        self.write(transactional_id, &target, Purpose::EndTxn)
            .map(Step::Write)
    }

    /// The pending transition of `transactional_id` was written (`Ok`) or not (`Err` with the
    /// error its request is answered with).
    pub fn written(&mut self, transactional_id: &str, result: Result<(), i16>) -> Written {
        let Some(purpose) = self.purposes.remove(transactional_id) else {
            return Written::default();
        };
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return Written::default();
        };
        let code = match result {
            Ok(()) => {
                if purpose == Purpose::Expire {
                    self.txns.remove(transactional_id);
                    return Written::default();
                }
                meta.complete();
                let f = &meta.fields;
                let answer = match purpose {
                    Purpose::InitProducerId => Some(Answer::InitProducerId(ProducerAnswer::ok(
                        f.producer_id,
                        f.producer_epoch,
                    ))),
                    Purpose::AddPartitions => Some(Answer::AddPartitions(errors::NONE)),
                    Purpose::EndTxn => Some(Answer::EndTxn(ProducerAnswer::ok(
                        f.producer_id,
                        f.producer_epoch,
                    ))),
                    Purpose::FenceForInit => Some(Answer::InitProducerId(ProducerAnswer::error(
                        errors::CONCURRENT_TRANSACTIONS,
                    ))),
                    Purpose::TimeoutAbort | Purpose::Complete | Purpose::Expire => None,
                };
                let markers = matches!(
                    purpose,
                    Purpose::EndTxn | Purpose::FenceForInit | Purpose::TimeoutAbort
                );
                let meta = &self.txns[transactional_id];
                return Written {
                    answer,
                    markers: markers.then(|| self.marker_job(meta)),
                };
            }
            Err(code) => code,
        };
        meta.pending = None;
        if matches!(purpose, Purpose::FenceForInit | Purpose::TimeoutAbort) {
            meta.failed_epoch_fence = true;
        }
        let answer = match purpose {
            Purpose::InitProducerId | Purpose::FenceForInit => {
                Some(Answer::InitProducerId(ProducerAnswer::error(code)))
            }
            Purpose::AddPartitions => Some(Answer::AddPartitions(code)),
            Purpose::EndTxn => Some(Answer::EndTxn(ProducerAnswer::error(code))),
            // Tried again by the next `tick`.
            Purpose::TimeoutAbort | Purpose::Complete | Purpose::Expire => None,
        };
        Written {
            answer,
            markers: None,
        }
    }

    /// The markers of a prepared transaction were written on `partitions` (or the partitions
    /// are gone); once every partition has its marker the transaction completes.
    pub fn markers_written(
        &mut self,
        now: i64,
        transactional_id: &str,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Option<Write>, TxnError> {
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return Ok(None);
        };
        let prepared = matches!(
            meta.state(),
            TxnState::PrepareCommit | TxnState::PrepareAbort
        );
        // Markers of another transaction (or epoch) of this id are stale news.
        if !prepared || meta.fields.producer_epoch != producer_epoch {
            return Ok(None);
        }
        for p in partitions {
            meta.fields.partitions.remove(p);
        }
        self.complete_if_marked(now, transactional_id)
    }

    fn complete_if_marked(
        &mut self,
        now: i64,
        transactional_id: &str,
    ) -> Result<Option<Write>, TxnError> {
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return Ok(None);
        };
        let prepared = matches!(
            meta.state(),
            TxnState::PrepareCommit | TxnState::PrepareAbort
        );
        if !prepared || meta.pending.is_some() || !meta.fields.partitions.is_empty() {
            return Ok(None);
        }
        let target = meta.prepare_complete(now);
        self.write(transactional_id, &target, Purpose::Complete)
            .map(Some)
    }

    /// Timer work due at `now`: transactions ongoing past their timeout are aborted (their
    /// producers fenced), prepared ones whose markers are all written but whose completion
    /// failed to be written complete, and transactional ids idle past
    /// `transactional.id.expiration.ms` are forgotten (a tombstone each).
    pub fn tick(&mut self, now: i64) -> Result<Vec<Write>, TxnError> {
        let expiration_ms = self.config.transactional_id_expiration_ms;
        let mut due = Vec::new();
        for (id, meta) in &self.txns {
            if meta.pending.is_some() {
                continue;
            }
            let f = &meta.fields;
            let action = match f.state {
                TxnState::Ongoing if f.start_ms.saturating_add(i64::from(f.timeout_ms)) < now => {
                    Purpose::TimeoutAbort
                }
                TxnState::PrepareCommit | TxnState::PrepareAbort if f.partitions.is_empty() => {
                    Purpose::Complete
                }
                state
                    if state.expiration_allowed()
                        && f.last_update_ms <= now.saturating_sub(expiration_ms) =>
                {
                    Purpose::Expire
                }
                _ => continue,
            };
            due.push((id.clone(), action));
        }
        let mut writes = Vec::new();
        for (id, action) in due {
            let write = match action {
                Purpose::TimeoutAbort => {
                    let Some(meta) = self.txns.get_mut(&id) else {
                        continue;
                    };
                    meta.fence();
                    let version = meta.fields.client_transaction_version;
                    let target = meta.prepare_end(false, version, NO_PRODUCER_ID, now);
                    Some(self.write(&id, &target, Purpose::TimeoutAbort)?)
                }
                Purpose::Complete => self.complete_if_marked(now, &id)?,
                _ => {
                    let Some(meta) = self.txns.get_mut(&id) else {
                        continue;
                    };
                    meta.prepare_dead();
                    self.purposes.insert(id.clone(), Purpose::Expire);
                    Some(Write {
                        record: records::encode(&id, None, self.value_version())?,
                        transactional_id: id,
                    })
                }
            };
            writes.extend(write);
        }
        Ok(writes)
    }

    /// The earliest time a `tick` has something to do, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        let expiration_ms = self.config.transactional_id_expiration_ms;
        self.txns
            .values()
            .filter(|m| m.pending.is_none())
            .filter_map(|m| {
                let f = &m.fields;
                match f.state {
                    TxnState::Ongoing => {
                        Some(f.start_ms.saturating_add(i64::from(f.timeout_ms)) + 1)
                    }
                    // Every marker is written but the completion failed to be: due now.
                    TxnState::PrepareCommit | TxnState::PrepareAbort if f.partitions.is_empty() => {
                        Some(f.last_update_ms)
                    }
                    s if s.expiration_allowed() => {
                        Some(f.last_update_ms.saturating_add(expiration_ms))
                    }
                    _ => None,
                }
            })
            .min()
    }

    /// DescribeTransactions of one transactional id.
    pub fn describe(&self, transactional_id: &str) -> DescribedTransaction {
        let mut described = DescribedTransaction {
            transactional_id: transactional_id.to_owned(),
            ..Default::default()
        };
        let meta = self
            .txns
            .get(transactional_id)
            .filter(|m| m.state() != TxnState::Dead);
        let Some(meta) = meta else {
            described.error_code = if transactional_id.is_empty() {
                errors::INVALID_REQUEST
            } else {
                errors::TRANSACTIONAL_ID_NOT_FOUND
            };
            return described;
        };
        let f = &meta.fields;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for p in &f.partitions {
            topics.entry(&p.topic).or_default().push(p.partition);
        }
        described.error_code = errors::NONE;
        described.transaction_state = f.state.name().to_owned();
        described.transaction_timeout_ms = f.timeout_ms;
        described.transaction_start_time_ms = f.start_ms;
        described.producer_id = f.producer_id;
        described.producer_epoch = f.producer_epoch;
        described.topics = topics
            .into_iter()
            .map(|(topic, partitions)| TopicData {
                topic: topic.to_owned(),
                partitions,
            })
            .collect();
        described
    }

    /// ListTransactions: the transactional ids matching every filter given (states by Kafka's
    /// names, producer ids, and running longer than `min_duration_ms` when that is not -1).
    pub fn list(
        &self,
        now: i64,
        states: &BTreeSet<TxnState>,
        producer_ids: &BTreeSet<i64>,
        min_duration_ms: i64,
    ) -> Vec<ListedTransaction> {
        self.txns
            .values()
            .filter(|m| {
                let f = &m.fields;
                f.state != TxnState::Dead
                    && (producer_ids.is_empty() || producer_ids.contains(&f.producer_id))
                    && (states.is_empty() || states.contains(&f.state))
                    && (min_duration_ms < 0 || now - f.start_ms > min_duration_ms)
            })
            .map(|m| ListedTransaction {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.fields.producer_id,
                transaction_state: m.state().name().to_owned(),
            })
            .collect()
    }

    fn value_version(&self) -> i16 {
        if self.config.transaction_version >= 1 {
            1
        } else {
            0
        }
    }

    fn write(
        &mut self,
        transactional_id: &str,
        target: &crate::state::TxnFields,
        purpose: Purpose,
    ) -> Result<Write, TxnError> {
        let version = self.value_version();
        let encoded = records::encode(transactional_id, Some(&target.to_value(version)), version);
        match encoded {
            Ok(record) => {
                self.purposes.insert(transactional_id.to_owned(), purpose);
                Ok(Write {
                    transactional_id: transactional_id.to_owned(),
                    record,
                })
            }
            Err(e) => {
                // Nothing is written: the transition is dropped with it.
                if let Some(meta) = self.txns.get_mut(transactional_id) {
                    meta.pending = None;
                }
                Err(e)
            }
        }
    }

    fn marker_job(&self, meta: &TxnMetadata) -> MarkerJob {
        let f = &meta.fields;
        MarkerJob {
            transactional_id: meta.transactional_id.clone(),
            producer_id: f.producer_id,
            producer_epoch: f.producer_epoch,
            commit: f.state == TxnState::PrepareCommit,
            coordinator_epoch: self.coordinator_epoch,
            transaction_version: f.client_transaction_version,
            partitions: f.partitions.iter().cloned().collect(),
        }
    }
}
