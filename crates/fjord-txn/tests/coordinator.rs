//! The transaction coordinator shard driven as the broker drives it: every write is "appended"
//! to a log the test keeps, and reloading replays that log, so a coordinator crash can be put
//! after any write.

use std::collections::BTreeSet;

use fjord_common::{errors, CoordinatorRecord, TopicPartition};
use fjord_protocol::messages::end_txn_request::EndTxnRequest;
use fjord_txn::{
    Answer, MarkerJob, ProducerAnswer, Step, TransactionCoordinatorShard, TxnConfig, TxnState,
    Write, Written,
};

const TXN: &str = "txn-a";
const TIMEOUT: i32 = 60_000;

struct Harness {
    shard: TransactionCoordinatorShard,
    log: Vec<CoordinatorRecord>,
    next_producer_id: i64,
    config: TxnConfig,
    coordinator_epoch: i32,
}

impl Harness {
    fn new(config: TxnConfig) -> Self {
        Harness {
            shard: TransactionCoordinatorShard::new(0, config.clone()),
            log: Vec::new(),
            next_producer_id: 1000,
            config,
            coordinator_epoch: 0,
        }
    }

    fn v1() -> Self {
        Self::new(TxnConfig {
            transaction_version: 1,
            ..TxnConfig::default()
        })
    }

    /// Appends a write to the log and completes it.
    fn durable(&mut self, write: Write) -> Written {
        self.log.push(write.record.clone());
        self.shard.written(&write.transactional_id, Ok(()))
    }

    fn init(&mut self, now: i64, expected: Option<(i64, i16)>) -> ProducerAnswer {
        let mut next = self.next_producer_id;
        let step = self
            .shard
            .init_producer_id(now, TXN, TIMEOUT, expected, &mut || {
                next += 1;
                Some(next)
            })
            .unwrap();
        self.next_producer_id = next;
        match step {
            Step::Answer(a) => a,
            Step::Write(w) => match self.durable(w).answer {
                Some(Answer::InitProducerId(a)) => a,
                other => panic!("InitProducerId answered {other:?}"),
            },
        }
    }

    /// AddPartitionsToTxn from the producer.
    fn add(&mut self, now: i64, p: ProducerAnswer, partitions: &[TopicPartition]) -> i16 {
        self.add_as(now, p, partitions, 0)
    }

    /// `client_transaction_version` 2: a partition leader adds for the producer (KIP-890 part 2).
    fn add_as(
        &mut self,
        now: i64,
        p: ProducerAnswer,
        partitions: &[TopicPartition],
        client_transaction_version: i16,
    ) -> i16 {
        match self
            .shard
            .add_partitions(
                now,
                TXN,
                p.producer_id,
                p.producer_epoch,
                partitions,
                client_transaction_version,
            )
            .unwrap()
        {
            Step::Answer(code) => code,
            Step::Write(w) => match self.durable(w).answer {
                Some(Answer::AddPartitions(code)) => code,
                other => panic!("AddPartitions answered {other:?}"),
            },
        }
    }

    /// EndTxn: its answer and the markers it asked for.
    fn end(
        &mut self,
        now: i64,
        p: ProducerAnswer,
        commit: bool,
        tv: i16,
    ) -> (ProducerAnswer, Option<MarkerJob>) {
        let step = self
            .shard
            .end_txn(
                now,
                &EndTxnRequest {
                    transactional_id: TXN.into(),
                    producer_id: p.producer_id,
                    producer_epoch: p.producer_epoch,
                    committed: commit,
                },
                tv,
                &mut || None,
            )
            .unwrap();
        match step {
            Step::Answer(a) => (a, None),
            Step::Write(w) => {
                let written = self.durable(w);
                match written.answer {
                    Some(Answer::EndTxn(a)) => (a, written.markers),
                    other => panic!("EndTxn answered {other:?}"),
                }
            }
        }
    }

    /// Every marker of `job` is written; the completion too.
    fn finish(&mut self, now: i64, job: &MarkerJob) {
        let write = self
            .shard
            .markers_written(
                now,
                &job.transactional_id,
                job.producer_epoch,
                &job.partitions,
            )
            .unwrap()
            .expect("completion written once every marker is");
        let written = self.durable(write);
        assert_eq!(written, Written::default());
    }

    /// A coordinator restart: a new shard from the log alone.
    fn reload(&mut self) -> Vec<MarkerJob> {
        self.coordinator_epoch += 1;
        self.shard = TransactionCoordinatorShard::new(self.coordinator_epoch, self.config.clone());
        for record in &self.log {
            self.shard.replay(record).unwrap();
        }
        self.shard.unfinished_markers()
    }

    fn state(&self) -> TxnState {
        self.shard.get(TXN).unwrap().state()
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

#[test]
fn a_new_transactional_id_gets_a_producer_id_and_each_init_the_next_epoch() {
    let mut h = Harness::v1();
    let first = h.init(1, None);
    assert_eq!((first.error_code, first.producer_epoch), (errors::NONE, 0));
    assert_eq!(first.producer_id, 1001);
    let second = h.init(2, None);
    assert_eq!(
        (second.producer_id, second.producer_epoch),
        (first.producer_id, 1)
    );
    assert_eq!(h.state(), TxnState::Empty);
}

#[test]
fn commit_prepares_writes_markers_to_every_partition_then_completes() {
    let mut h = Harness::v1();
    let p = h.init(1, None);
    assert_eq!(h.add(2, p, &[tp("a", 0), tp("b", 1)]), errors::NONE);
    assert_eq!(
        h.add(3, p, &[tp("a", 0)]),
        errors::NONE,
        "already in: no write"
    );
    assert_eq!(h.log.len(), 2);
    assert_eq!(h.state(), TxnState::Ongoing);

    let (answer, markers) = h.end(4, p, true, 1);
    assert_eq!(answer, p, "answered with its producer id and epoch");
    let job = markers.unwrap();
    assert!(job.commit);
    assert_eq!(job.partitions, vec![tp("a", 0), tp("b", 1)]);
    assert_eq!((job.producer_id, job.producer_epoch), (p.producer_id, 0));
    assert_eq!(h.state(), TxnState::PrepareCommit);

    // While the markers are written the producer waits.
    assert_eq!(h.add(5, p, &[tp("c", 0)]), errors::CONCURRENT_TRANSACTIONS);
    assert_eq!(
        h.end(5, p, true, 1).0.error_code,
        errors::CONCURRENT_TRANSACTIONS
    );
    assert_eq!(
        h.end(5, p, false, 1).0.error_code,
        errors::INVALID_TXN_STATE
    );

    // One marker alone does not complete it.
    let none = h.shard.markers_written(6, TXN, 0, &[tp("a", 0)]).unwrap();
    assert!(none.is_none());
    let complete = h
        .shard
        .markers_written(6, TXN, 0, &[tp("b", 1)])
        .unwrap()
        .unwrap();
    h.durable(complete);
    assert_eq!(h.state(), TxnState::CompleteCommit);
    // A retried EndTxn is answered as the first; the other outcome is refused.
    assert_eq!(h.end(7, p, true, 1).0, p);
    assert_eq!(
        h.end(7, p, false, 1).0.error_code,
        errors::INVALID_TXN_STATE
    );
    // And the next transaction begins.
    assert_eq!(h.add(8, p, &[tp("c", 0)]), errors::NONE);
    let described = h.shard.describe(TXN);
    assert_eq!(described.transaction_state, "Ongoing");
    assert_eq!(described.transaction_start_time_ms, 8);
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let mut h = Harness::v1();
    let zombie = h.init(1, None);
    h.add(2, zombie, &[tp("a", 0)]);

    // The new instance's InitProducerId aborts the ongoing transaction and is told to retry.
    let retry = h.init(3, None);
    assert_eq!(retry.error_code, errors::CONCURRENT_TRANSACTIONS);
    assert_eq!(h.state(), TxnState::PrepareAbort);
    let job = h.shard.unfinished_markers().pop().unwrap();
    assert!(!job.commit);
    assert_eq!(job.producer_epoch, 1, "aborted under the fencing epoch");
    // The zombie is fenced from now on.
    assert_eq!(h.add(4, zombie, &[tp("b", 0)]), errors::PRODUCER_FENCED);
    assert_eq!(
        h.end(4, zombie, true, 1).0.error_code,
        errors::PRODUCER_FENCED
    );
    // Still aborting: the new producer keeps retrying.
    assert_eq!(h.init(4, None).error_code, errors::CONCURRENT_TRANSACTIONS);
    h.finish(5, &job);
    assert_eq!(h.state(), TxnState::CompleteAbort);
    let fresh = h.init(6, None);
    assert_eq!(
        (fresh.error_code, fresh.producer_id, fresh.producer_epoch),
        (errors::NONE, zombie.producer_id, 2)
    );
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut h = Harness::v1();
    let p = h.init(1_000, None);
    h.add(2_000, p, &[tp("a", 0)]);
    assert_eq!(
        h.shard.next_deadline(),
        Some(2_000 + i64::from(TIMEOUT) + 1)
    );
    assert!(h.shard.tick(2_000 + i64::from(TIMEOUT)).unwrap().is_empty());
    let writes = h.shard.tick(2_001 + i64::from(TIMEOUT)).unwrap();
    assert_eq!(writes.len(), 1);
    let written = h.durable(writes.into_iter().next().unwrap());
    assert_eq!(written.answer, None);
    let job = written.markers.unwrap();
    assert!(!job.commit);
    assert_eq!(
        h.end(70_000, p, true, 1).0.error_code,
        errors::PRODUCER_FENCED
    );
    h.finish(70_001, &job);
    assert_eq!(h.state(), TxnState::CompleteAbort);
}

#[test]
fn a_timeout_abort_follows_the_transaction_version_of_its_producer() {
    // The finalized version is 2 in both runs; what differs is how the partitions were added.
    for (client_version, marker_epoch) in [(0, 1), (2, 2)] {
        let mut h = Harness::new(TxnConfig::default());
        let p = h.init(1_000, None);
        assert_eq!(
            h.add_as(2_000, p, &[tp("a", 0)], client_version),
            errors::NONE
        );
        let writes = h.shard.tick(2_001 + i64::from(TIMEOUT)).unwrap();
        let job = h
            .durable(writes.into_iter().next().unwrap())
            .markers
            .unwrap();
        // Fenced (epoch + 1), then on version 2 bumped once more by the abort itself.
        assert_eq!(job.producer_epoch, marker_epoch, "version {client_version}");
        assert_eq!(job.transaction_version, client_version);
        h.finish(70_001, &job);
        assert_eq!(h.state(), TxnState::CompleteAbort);
    }
}

#[test]
fn a_completion_that_failed_to_be_written_is_due_at_once_and_retried_by_tick() {
    let mut h = Harness::v1();
    let p = h.init(1_000, None);
    h.add(2_000, p, &[tp("a", 0)]);
    let job = h.end(3_000, p, true, 1).1.unwrap();
    let complete = h
        .shard
        .markers_written(4_000, TXN, job.producer_epoch, &job.partitions)
        .unwrap()
        .unwrap();
    let failed = h
        .shard
        .written(&complete.transactional_id, Err(errors::NOT_COORDINATOR));
    assert_eq!(failed, Written::default());
    assert_eq!(h.state(), TxnState::PrepareCommit);
    assert!(h.shard.next_deadline().is_some_and(|d| d <= 4_000));
    let retried = h.shard.tick(4_001).unwrap();
    assert_eq!(retried.len(), 1);
    h.durable(retried.into_iter().next().unwrap());
    assert_eq!(h.state(), TxnState::CompleteCommit);
}

#[test]
fn an_idle_transactional_id_expires() {
    let mut h = Harness::new(TxnConfig {
        transactional_id_expiration_ms: 10_000,
        transaction_version: 1,
        ..TxnConfig::default()
    });
    h.init(1_000, None);
    assert!(h.shard.tick(10_999).unwrap().is_empty());
    let writes = h.shard.tick(11_000).unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].record.value, None, "a tombstone");
    h.durable(writes.into_iter().next().unwrap());
    assert!(h.shard.get(TXN).is_none());
    assert_eq!(
        h.shard.describe(TXN).error_code,
        errors::TRANSACTIONAL_ID_NOT_FOUND
    );
    h.reload();
    assert!(h.shard.get(TXN).is_none(), "the tombstone is replayed too");
}

#[test]
fn a_coordinator_crash_after_any_write_loses_nothing_and_finishes_the_markers() {
    // Write by write through one transaction's life; after each, a reload from the log alone
    // must hold the same state and, if prepared, ask for the markers again.
    let mut h = Harness::v1();
    let p = h.init(1, None);
    assert!(h.reload().is_empty());
    assert_eq!(h.state(), TxnState::Empty);
    assert_eq!(h.shard.get(TXN).unwrap().fields.producer_epoch, 0);

    h.add(2, p, &[tp("a", 0), tp("a", 1)]);
    assert!(h.reload().is_empty());
    assert_eq!(h.state(), TxnState::Ongoing);
    assert_eq!(h.shard.get(TXN).unwrap().fields.partitions.len(), 2);

    let (answer, markers) = h.end(3, p, true, 1);
    assert_eq!(answer.error_code, errors::NONE);
    let before = markers.unwrap();
    // Crash before any marker: the new coordinator writes them all again.
    let again = h.reload();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].partitions, before.partitions);
    assert_eq!(again[0].coordinator_epoch, 3, "stamped with the new epoch");
    assert_eq!(h.state(), TxnState::PrepareCommit);
    // The producer's retry waits for the markers.
    assert_eq!(
        h.end(4, p, true, 1).0.error_code,
        errors::CONCURRENT_TRANSACTIONS
    );
    h.finish(5, &again[0]);
    assert!(h.reload().is_empty());
    assert_eq!(h.state(), TxnState::CompleteCommit);
    assert_eq!(h.end(6, p, true, 1).0, p);
}

#[test]
fn a_failed_write_changes_nothing_and_is_answered_with_its_error() {
    let mut h = Harness::v1();
    let p = h.init(1, None);
    let Step::Write(w) = h
        .shard
        .add_partitions(2, TXN, p.producer_id, p.producer_epoch, &[tp("a", 0)], 0)
        .unwrap()
    else {
        panic!("a write")
    };
    let written = h
        .shard
        .written(&w.transactional_id, Err(errors::NOT_COORDINATOR));
    assert_eq!(
        written.answer,
        Some(Answer::AddPartitions(errors::NOT_COORDINATOR))
    );
    assert_eq!(h.state(), TxnState::Empty);
    assert_eq!(h.add(3, p, &[tp("a", 0)]), errors::NONE);

    // A fence whose write fails keeps its epoch for the next attempt: it was never handed out.
    let mut next = 5000;
    let Step::Write(w) = h
        .shard
        .init_producer_id(4, TXN, TIMEOUT, None, &mut || {
            next += 1;
            Some(next)
        })
        .unwrap()
    else {
        panic!("a write")
    };
    h.shard
        .written(&w.transactional_id, Err(errors::NOT_ENOUGH_REPLICAS));
    assert_eq!(h.state(), TxnState::Ongoing);
    assert_eq!(h.shard.get(TXN).unwrap().fields.producer_epoch, 1);
    assert_eq!(h.init(5, None).error_code, errors::CONCURRENT_TRANSACTIONS);
    let job = h.shard.unfinished_markers().pop().unwrap();
    assert_eq!(job.producer_epoch, 1);
}

#[test]
fn requests_that_cannot_be_served_are_refused_with_kafkas_errors() {
    let mut h = Harness::v1();
    let mut none = || None;
    let init = |h: &mut Harness, id: &str, timeout: i32| match h
        .shard
        .init_producer_id(1, id, timeout, None, &mut || Some(1))
        .unwrap()
    {
        Step::Answer(a) => a.error_code,
        Step::Write(_) => errors::NONE,
    };
    assert_eq!(init(&mut h, "", TIMEOUT), errors::INVALID_REQUEST);
    assert_eq!(init(&mut h, TXN, 0), errors::INVALID_TRANSACTION_TIMEOUT);
    assert_eq!(
        init(&mut h, TXN, 900_001),
        errors::INVALID_TRANSACTION_TIMEOUT
    );
    assert_eq!(
        h.shard
            .init_producer_id(1, "no-ids", TIMEOUT, None, &mut none)
            .unwrap(),
        Step::Answer(ProducerAnswer::error(errors::COORDINATOR_LOAD_IN_PROGRESS))
    );

    let mut h = Harness::v1();
    let p = h.init(1, None);
    let other = ProducerAnswer {
        producer_id: p.producer_id + 1,
        ..p
    };
    let stale = ProducerAnswer {
        producer_epoch: p.producer_epoch + 1,
        ..p
    };
    assert_eq!(
        h.add(2, other, &[tp("a", 0)]),
        errors::INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(h.add(2, stale, &[tp("a", 0)]), errors::PRODUCER_FENCED);
    assert_eq!(h.end(2, p, true, 1).0.error_code, errors::INVALID_TXN_STATE);
    assert_eq!(
        h.shard
            .add_partitions(2, "unknown", 1, 0, &[tp("a", 0)], 0)
            .unwrap(),
        Step::Answer(errors::INVALID_PRODUCER_ID_MAPPING)
    );
    // KIP-360: a producer naming an epoch the coordinator never gave is fenced.
    assert_eq!(
        h.init(3, Some((p.producer_id + 7, 0))).error_code,
        errors::PRODUCER_FENCED
    );
    // Naming the current one bumps it; a retry of that call gets the same epoch again.
    let bumped = h.init(4, Some((p.producer_id, 0)));
    assert_eq!(bumped.producer_epoch, 1);
    assert_eq!(h.init(5, Some((p.producer_id, 0))).producer_epoch, 1);
}

#[test]
fn verification_tells_a_leader_which_partitions_are_in_the_transaction() {
    let mut h = Harness::v1();
    let p = h.init(1, None);
    h.add(2, p, &[tp("a", 0)]);
    let verified = h.shard.verify_partitions(
        TXN,
        p.producer_id,
        p.producer_epoch,
        &[tp("a", 0), tp("a", 1)],
    );
    assert_eq!(
        verified,
        vec![
            (tp("a", 0), errors::NONE),
            (tp("a", 1), errors::TRANSACTION_ABORTABLE)
        ]
    );
    let fenced = h
        .shard
        .verify_partitions(TXN, p.producer_id, p.producer_epoch + 1, &[tp("a", 0)]);
    assert_eq!(fenced, vec![(tp("a", 0), errors::PRODUCER_FENCED)]);
    assert_eq!(h.log.len(), 2, "verification writes nothing");
}

#[test]
fn transaction_version_2_bumps_the_epoch_at_every_end_and_recognises_retries() {
    let mut h = Harness::new(TxnConfig::default());
    let p = h.init(1, None);
    h.add(2, p, &[tp("a", 0)]);
    let (answer, markers) = h.end(3, p, true, 2);
    assert_eq!(answer.producer_epoch, p.producer_epoch + 1);
    let job = markers.unwrap();
    assert_eq!(job.producer_epoch, 1, "markers carry the bumped epoch");
    // A retry with the epoch before the bump: still being prepared, then answered.
    assert_eq!(
        h.end(4, p, true, 2).0.error_code,
        errors::CONCURRENT_TRANSACTIONS
    );
    h.finish(5, &job);
    assert_eq!(h.end(6, p, true, 2).0, answer);
    // The next transaction runs under the bumped epoch; the old one is fenced.
    assert_eq!(h.add(7, p, &[tp("a", 0)]), errors::PRODUCER_FENCED);
    assert_eq!(h.add(7, answer, &[tp("a", 0)]), errors::NONE);
    let (second, _) = h.end(8, answer, false, 2);
    assert_eq!(second.producer_epoch, 2);
    // Reloaded, the value records keep the client's version.
    h.reload();
    assert_eq!(
        h.shard.get(TXN).unwrap().fields.client_transaction_version,
        2
    );
}

#[test]
fn transaction_version_2_takes_an_abort_with_nothing_to_abort_and_bumps_the_epoch() {
    let mut h = Harness::new(TxnConfig::default());
    let p = h.init(1, None);
    // Nothing to commit.
    assert_eq!(h.end(2, p, true, 2).0.error_code, errors::INVALID_TXN_STATE);
    // The abort of a transaction no partition joined: taken, its epoch bumped, complete at once.
    let (aborted, markers) = h.end(3, p, false, 2);
    assert_eq!(
        (aborted.error_code, aborted.producer_epoch),
        (errors::NONE, p.producer_epoch + 1)
    );
    let job = markers.unwrap();
    assert!(job.partitions.is_empty() && !job.commit);
    h.finish(4, &job);
    assert_eq!(h.state(), TxnState::CompleteAbort);
    // Its retry (the epoch before the bump) is answered as the first was; a new empty abort
    // with the current epoch bumps again.
    assert_eq!(h.end(5, p, false, 2).0, aborted);
    let (current, job) = h.end(6, aborted, false, 2);
    assert_eq!(current.producer_epoch, p.producer_epoch + 2);
    h.finish(7, &job.unwrap());
    // The producer's next end before this one's markers are written waits (Kafka fences it).
    assert_eq!(h.add(8, current, &[tp("a", 0)]), errors::NONE);
    let (committed, job) = h.end(9, current, true, 2);
    assert_eq!(
        h.end(10, committed, false, 2).0.error_code,
        errors::CONCURRENT_TRANSACTIONS
    );
    h.finish(11, &job.unwrap());
    assert_eq!(h.end(12, committed, false, 2).0.error_code, errors::NONE);
    // On transaction version 1 there is nothing to abort.
    let mut v1 = Harness::v1();
    let p = v1.init(1, None);
    assert_eq!(
        v1.end(2, p, false, 0).0.error_code,
        errors::INVALID_TXN_STATE
    );
}

#[test]
fn an_exhausted_epoch_moves_the_transactional_id_to_a_new_producer_id() {
    let mut h = Harness::v1();
    let p = h.init(1, None);
    // Bump to the last usable epoch.
    let mut last = p;
    while !fjord_txn::epoch_exhausted(last.producer_epoch) {
        last = h.init(2, None);
    }
    assert_eq!(last.producer_epoch, i16::MAX - 1);
    let exhausted = Some((p.producer_id, i16::MAX - 1));
    let rotated = h.init(3, exhausted);
    assert_eq!(rotated.error_code, errors::NONE);
    assert_ne!(rotated.producer_id, p.producer_id);
    assert_eq!(rotated.producer_epoch, 0);
    // The producer retrying that call (its answer lost) is recognised and answered the same.
    assert_eq!(h.init(4, exhausted), rotated);
    // Anyone else naming the old id is fenced.
    assert_eq!(
        h.init(5, Some((p.producer_id, 3))).error_code,
        errors::PRODUCER_FENCED
    );
}

#[test]
fn list_filters_by_state_producer_and_duration() {
    let mut h = Harness::v1();
    let p = h.init(1, None);
    h.add(1_000, p, &[tp("a", 0)]);
    let all = h.shard.list(5_000, &BTreeSet::new(), &BTreeSet::new(), -1);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].transaction_state, "Ongoing");
    let ongoing = BTreeSet::from([TxnState::Ongoing]);
    let empty = BTreeSet::from([TxnState::Empty]);
    assert_eq!(h.shard.list(5_000, &ongoing, &BTreeSet::new(), -1).len(), 1);
    assert!(h.shard.list(5_000, &empty, &BTreeSet::new(), -1).is_empty());
    let other = BTreeSet::from([p.producer_id + 1]);
    assert!(h.shard.list(5_000, &BTreeSet::new(), &other, -1).is_empty());
    // Running 4 s: longer than 3 s, not than 4 s.
    assert_eq!(
        h.shard
            .list(5_000, &BTreeSet::new(), &BTreeSet::new(), 3_000)
            .len(),
        1
    );
    assert!(h
        .shard
        .list(5_000, &BTreeSet::new(), &BTreeSet::new(), 4_000)
        .is_empty());
}
