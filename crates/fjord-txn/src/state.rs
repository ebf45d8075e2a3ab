//! One transactional id's state and its transitions, as Kafka's transaction coordinator keeps
//! them. A transition is prepared (the state to be written, held as the pending transition, which
//! refuses any other meanwhile) and completed only once its record is durable in
//! `__transaction_state`, so memory never runs ahead of the log.

use std::collections::BTreeSet;

use fjord_common::TopicPartition;

use crate::records::transaction_log_value::PartitionsSchema;
use crate::records::TransactionLogValue;
use crate::TxnError;

/// No producer id (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// No producer epoch (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// A producer epoch this high has no successor to bump to: the producer id is rotated instead.
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A transaction's state, with Kafka's ids (the `TransactionStatus` of the log) and names (what
/// DescribeTransactions and ListTransactions report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// Expired: its tombstone is being written.
    Dead,
    /// Never written: the bumped epoch of an ongoing transaction being aborted to fence its
    /// producer, on the way to PrepareAbort.
    PrepareEpochFence,
}

impl TxnState {
    const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states this one may follow.
    fn follows(self, previous: TxnState) -> bool {
        use TxnState::*;
        match self {
            Empty => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(previous, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit | PrepareEpochFence => previous == Ongoing,
            // From an idle state: transaction version 2's abort with nothing to abort.
            PrepareAbort => matches!(
                previous,
                Ongoing | PrepareEpochFence | Empty | CompleteCommit | CompleteAbort
            ),
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
            Dead => matches!(previous, Empty | CompleteCommit | CompleteAbort),
        }
    }

    /// Whether an idle transactional id in this state may expire.
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// The fields a transition sets: what its record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnFields {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    /// The producer id a transaction that exhausted its epoch completes with (KIP-890 part 2).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a retried InitProducerId or EndTxn is recognised.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the ongoing transaction started (-1: none yet).
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The client's `transaction.version` as of its last EndTxn: 2 bumps the epoch at every end.
    pub client_transaction_version: i16,
}

impl TxnFields {
    /// The record value of this state, in `value_version` (0 cannot hold the tagged fields).
    pub fn to_value(&self, value_version: i16) -> TransactionLogValue {
        let mut by_topic: Vec<PartitionsSchema> = Vec::new();
        for tp in &self.partitions {
            match by_topic.last_mut() {
                Some(last) if last.topic == tp.topic => last.partition_ids.push(tp.partition),
                _ => by_topic.push(PartitionsSchema {
                    topic: tp.topic.clone(),
                    partition_ids: vec![tp.partition],
                }),
            }
        }
        let tagged = value_version >= 1;
        TransactionLogValue {
            producer_id: self.producer_id,
            previous_producer_id: if tagged {
                self.previous_producer_id
            } else {
                NO_PRODUCER_ID
            },
            next_producer_id: if tagged {
                self.next_producer_id
            } else {
                NO_PRODUCER_ID
            },
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.timeout_ms,
            transaction_status: self.state.id(),
            // Kafka writes no partition list for an empty transaction.
            transaction_partitions: (self.state != TxnState::Empty).then_some(by_topic),
            transaction_last_update_timestamp_ms: self.last_update_ms,
            transaction_start_timestamp_ms: self.start_ms,
            client_transaction_version: if tagged {
                self.client_transaction_version
            } else {
                0
            },
        }
    }

    /// The state a record holds, as loading reads it (the last epoch is not in the log).
    pub fn from_value(value: &TransactionLogValue) -> Result<TxnFields, TxnError> {
        let state = TxnState::from_id(value.transaction_status)
            .ok_or(TxnError::UnknownStatus(value.transaction_status))?;
        let partitions = if state == TxnState::Empty {
            BTreeSet::new()
        } else {
            value
                .transaction_partitions
                .iter()
                .flatten()
                .flat_map(|p| {
                    p.partition_ids
                        .iter()
                        .map(|&id| TopicPartition::new(p.topic.clone(), id))
                })
                .collect()
        };
        Ok(TxnFields {
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: value.transaction_timeout_ms,
            state,
            partitions,
            start_ms: value.transaction_start_timestamp_ms,
            last_update_ms: value.transaction_last_update_timestamp_ms,
            client_transaction_version: value.client_transaction_version,
        })
    }
}

/// One transactional id as the coordinator holds it.
#[derive(Debug, Clone)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub fields: TxnFields,
    /// The transition whose record is being written, if any.
    pub pending: Option<TxnFields>,
    /// An epoch fence was prepared (the epoch bumped in memory) but its write failed: the next
    /// fence reuses that epoch rather than bumping again, since it was never handed out.
    pub failed_epoch_fence: bool,
}

impl TxnMetadata {
    /// A transactional id seen for the first time, at `producer_id` before its first epoch.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            fields: TxnFields {
                producer_id,
                previous_producer_id: NO_PRODUCER_ID,
                next_producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                last_update_ms: now,
                client_transaction_version: 0,
            },
            pending: None,
            failed_epoch_fence: false,
        }
    }

    /// As loaded from its record.
    pub fn loaded(transactional_id: &str, fields: TxnFields) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            fields,
            pending: None,
            failed_epoch_fence: false,
        }
    }

    pub fn state(&self) -> TxnState {
        self.fields.state
    }

    /// Holds `target` as the pending transition. The caller has checked that none is pending and
    /// that the move is legal; a breach is a coordinator bug, refused rather than obeyed.
    fn prepare(&mut self, target: TxnFields) -> TxnFields {
        assert!(
            self.pending.is_none(),
            "{}: a transition to {:?} while one is pending",
            self.transactional_id,
            target.state
        );
        assert!(
            target.state.follows(self.fields.state),
            "{}: {:?} cannot follow {:?}",
            self.transactional_id,
            target.state,
            self.fields.state
        );
        assert!(target.producer_id >= 0, "producer ids are never negative");
        assert!(
            target.state == TxnState::Dead || target.producer_epoch >= 0,
            "a live transaction has an epoch"
        );
        self.pending = Some(target.clone());
        target
    }

    /// InitProducerId on an idle transactional id: the next epoch (or, for a retry of the last
    /// call, the same), no partitions. `expected_epoch` is the epoch the producer holds, if it
    /// said (KIP-360).
    pub fn prepare_epoch_bump(
        &mut self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now: i64,
    ) -> Result<TxnFields, i16> {
        let f = &self.fields;
        debug_assert!(!epoch_exhausted(f.producer_epoch));
        let bumped = f.producer_epoch + 1;
        let (epoch, last) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if f.producer_epoch == NO_PRODUCER_EPOCH || e == f.producer_epoch => {
                (bumped, f.producer_epoch)
            }
            // A retry of a call that succeeded: its epoch again.
            Some(e) if e == f.last_producer_epoch => (f.producer_epoch, f.last_producer_epoch),
            Some(_) => return Err(fjord_common::errors::PRODUCER_FENCED),
        };
        let target = TxnFields {
            previous_producer_id: f.producer_id,
            producer_epoch: epoch,
            last_producer_epoch: last,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now,
            next_producer_id: NO_PRODUCER_ID,
            client_transaction_version: 0,
            ..f.clone()
        };
        Ok(self.prepare(target))
    }

    /// InitProducerId once the epoch is exhausted: a new producer id at epoch 0.
    pub fn prepare_producer_id_rotation(
        &mut self,
        producer_id: i64,
        timeout_ms: i32,
        record_last_epoch: bool,
        now: i64,
    ) -> TxnFields {
        let f = &self.fields;
        let target = TxnFields {
            producer_id,
            previous_producer_id: f.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: 0,
            last_producer_epoch: if record_last_epoch {
                f.producer_epoch
            } else {
                NO_PRODUCER_EPOCH
            },
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now,
            client_transaction_version: 0,
        };
        self.prepare(target)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the transaction is ongoing with these too.
    pub fn prepare_add_partitions(
        &mut self,
        added: impl IntoIterator<Item = TopicPartition>,
        client_transaction_version: i16,
        now: i64,
    ) -> TxnFields {
        let f = &self.fields;
        let start_ms = match f.state {
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => now,
            _ => f.start_ms,
        };
        let mut partitions = f.partitions.clone();
        partitions.extend(added);
        let target = TxnFields {
            state: TxnState::Ongoing,
            partitions,
            start_ms,
            last_update_ms: now,
            client_transaction_version,
            ..f.clone()
        };
        self.prepare(target)
    }

    /// Fences the producer of an ongoing transaction before aborting it (InitProducerId by a new
    /// producer, or the transaction timed out): the epoch is bumped in memory at once, so the old
    /// producer is refused from now, and is never handed out. If an earlier fence's write failed,
    /// its epoch is reused rather than bumped again.
    pub fn fence(&mut self) {
        debug_assert_eq!(self.fields.state, TxnState::Ongoing);
        if !self.failed_epoch_fence {
            self.fields.producer_epoch = self.fields.producer_epoch.saturating_add(1);
        }
        self.fields.last_producer_epoch = NO_PRODUCER_EPOCH;
    }

    /// EndTxn of an ongoing transaction, or its abort after [`TxnMetadata::fence`]: PrepareCommit
    /// or PrepareAbort, bumping the epoch when the transaction version does (2), then with
    /// `next_producer_id` if that bump exhausts it.
    pub fn prepare_end(
        &mut self,
        commit: bool,
        transaction_version: i16,
        next_producer_id: i64,
        now: i64,
    ) -> TxnFields {
        let f = &self.fields;
        let (epoch, last) = if transaction_version >= 2 {
            (f.producer_epoch.saturating_add(1), f.producer_epoch)
        } else {
            (f.producer_epoch, f.last_producer_epoch)
        };
        let target = TxnFields {
            state: if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            },
            producer_epoch: epoch,
            last_producer_epoch: last,
            next_producer_id,
            last_update_ms: now,
            client_transaction_version: transaction_version,
            ..f.clone()
        };
        self.prepare(target)
    }

    /// Every marker is written: CompleteCommit or CompleteAbort, no partitions; a transaction
    /// that exhausted its epoch moves to its next producer id at epoch 0.
    pub fn prepare_complete(&mut self, now: i64) -> TxnFields {
        let f = &self.fields;
        let state = if f.state == TxnState::PrepareCommit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        let rotate = f.client_transaction_version >= 2 && f.next_producer_id != NO_PRODUCER_ID;
        let target = TxnFields {
            state,
            producer_id: if rotate {
                f.next_producer_id
            } else {
                f.producer_id
            },
            previous_producer_id: f.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: if rotate { 0 } else { f.producer_epoch },
            last_producer_epoch: f.producer_epoch,
            partitions: BTreeSet::new(),
            last_update_ms: now,
            ..f.clone()
        };
        self.prepare(target)
    }

    /// An idle transactional id expires: its tombstone.
    pub fn prepare_dead(&mut self) -> TxnFields {
        let target = TxnFields {
            state: TxnState::Dead,
            partitions: BTreeSet::new(),
            ..self.fields.clone()
        };
        self.prepare(target)
    }

    /// The pending transition's record is durable: it becomes the state. Kafka's rules of which
    /// fields each transition may change are kept: the rest stay as they were.
    pub fn complete(&mut self) -> Option<TxnState> {
        let target = self.pending.take()?;
        let f = &mut self.fields;
        match target.state {
            TxnState::Empty => {
                f.timeout_ms = target.timeout_ms;
                f.producer_id = target.producer_id;
                f.previous_producer_id = target.previous_producer_id;
                f.producer_epoch = target.producer_epoch;
                f.last_producer_epoch = target.last_producer_epoch;
                f.partitions.clear();
                f.start_ms = -1;
            }
            TxnState::Ongoing => {
                f.start_ms = target.start_ms;
                f.partitions = target.partitions;
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                f.producer_epoch = target.producer_epoch;
                f.last_producer_epoch = target.last_producer_epoch;
                f.next_producer_id = target.next_producer_id;
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                f.partitions.clear();
                f.producer_id = target.producer_id;
                f.previous_producer_id = target.previous_producer_id;
                f.next_producer_id = target.next_producer_id;
                f.producer_epoch = target.producer_epoch;
                f.last_producer_epoch = target.last_producer_epoch;
                self.failed_epoch_fence = false;
            }
            // A fence is never written, and a dead id is removed instead.
            TxnState::PrepareEpochFence | TxnState::Dead => {}
        }
        f.client_transaction_version = target.client_transaction_version;
        f.last_update_ms = target.last_update_ms;
        f.state = target.state;
        Some(target.state)
    }
}
