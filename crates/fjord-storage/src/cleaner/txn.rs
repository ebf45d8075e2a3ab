//! What cleaning does with transactions, as Kafka's cleaner does it: the batches of an aborted
//! transaction go (and never enter the offset map, so they shadow nothing), and a transaction's
//! marker goes once no batch of its transaction is left before it — after `delete.retention.ms`
//! from the pass that first found it removable, as tombstones wait, so that a consumer part-way
//! through still sees it. Markers of aborted transactions whose batches were seen stay, with
//! their entries in the cleaned `.txnindex`. Sans-IO: fed the batches in log order.

use std::collections::{HashMap, HashSet, VecDeque};

use fjord_records::control::EndTxnMarker;
use fjord_records::BatchHeader;

use crate::txn_index::AbortedTxn;

/// A pass's view of the transactions in the part of the log it reads, batch by batch.
#[derive(Debug, Default)]
pub struct TxnTracker {
    /// Aborted transactions not yet reached, by first offset.
    aborted: VecDeque<AbortedTxn>,
    /// Aborted transactions reached whose marker is still ahead: producer id → the transaction
    /// and whether a batch of it was seen.
    ongoing_aborted: HashMap<i64, (AbortedTxn, bool)>,
    /// Producers with batches of a transaction seen that is not aborted (committed, or still
    /// open past the cleaned part).
    ongoing_committed: HashSet<i64>,
}

impl TxnTracker {
    /// A tracker for a read over the log holding `aborted` (in any order, repeats allowed).
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnTracker {
        aborted.sort_by_key(|t| (t.first_offset, t.producer_id, t.last_offset));
        aborted.dedup();
        TxnTracker {
            aborted: aborted.into(),
            ..TxnTracker::default()
        }
    }

    /// A data batch read: true when it belongs to an aborted transaction, so its records go.
    pub fn on_batch(&mut self, header: &BatchHeader) -> bool {
        self.reach(header.last_offset());
        if !header.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&header.producer_id) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(header.producer_id);
                false
            }
        }
    }

    /// A control batch read, with the marker it holds (`None`: emptied by an earlier pass, or
    /// not a marker). Answers whether it may go and, for an aborted transaction whose batches
    /// were seen (its marker stays), the transaction for the cleaned segment's index.
    pub fn on_control(
        &mut self,
        header: &BatchHeader,
        marker: Option<EndTxnMarker>,
    ) -> (bool, Option<AbortedTxn>) {
        self.reach(header.last_offset());
        let Some(marker) = marker else {
            return (true, None);
        };
        if marker.commit {
            (!self.ongoing_committed.remove(&header.producer_id), None)
        } else {
            match self.ongoing_aborted.remove(&header.producer_id) {
                Some((txn, true)) => (false, Some(txn)),
                _ => (true, None),
            }
        }
    }

    /// Every aborted transaction begun at or before `offset` is under way.
    fn reach(&mut self, offset: i64) {
        while let Some(txn) = self.aborted.front().filter(|t| t.first_offset <= offset) {
            let txn = *txn;
            self.aborted.pop_front();
            self.ongoing_aborted
                .entry(txn.producer_id)
                .or_insert((txn, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_records::header::attributes;

    fn header(
        producer_id: i64,
        base: i64,
        last: i64,
        transactional: bool,
        control: bool,
    ) -> BatchHeader {
        let mut attrs = 0;
        if transactional {
            attrs |= attributes::TRANSACTIONAL;
        }
        if control {
            attrs |= attributes::CONTROL;
        }
        BatchHeader {
            base_offset: base,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: attrs,
            last_offset_delta: (last - base) as i32,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: -1,
            record_count: 1,
        }
    }

    fn marker(commit: bool) -> Option<EndTxnMarker> {
        Some(EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        })
    }

    #[test]
    fn aborted_batches_go_and_their_marker_stays_while_they_were_seen() {
        // Producer 7 aborts [0, 4) with its marker at 4; producer 8 commits [2, 6) at 6.
        let aborted = AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 4,
            last_stable_offset: 2,
        };
        let mut t = TxnTracker::new(vec![aborted, aborted]);
        assert!(t.on_batch(&header(7, 0, 1, true, false)));
        assert!(!t.on_batch(&header(8, 2, 3, true, false)));
        assert!(
            !t.on_batch(&header(-1, 3, 3, false, false)),
            "not transactional"
        );
        assert_eq!(
            t.on_control(&header(7, 4, 4, true, true), marker(false)),
            (false, Some(aborted))
        );
        assert_eq!(
            t.on_control(&header(8, 6, 6, true, true), marker(true)),
            (false, None),
            "a committed transaction's batches were seen"
        );

        // The next pass: the aborted batches are gone, so is the committed transaction's data.
        let mut t = TxnTracker::new(vec![aborted]);
        assert_eq!(
            t.on_control(&header(7, 4, 4, true, true), marker(false)),
            (true, None)
        );
        assert_eq!(
            t.on_control(&header(8, 6, 6, true, true), marker(true)),
            (true, None)
        );
        assert_eq!(
            t.on_control(&header(9, 7, 7, true, true), None),
            (true, None)
        );
    }

    #[test]
    fn a_producers_later_transaction_is_not_taken_for_its_aborted_one() {
        let aborted = AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 1,
            last_stable_offset: 0,
        };
        let mut t = TxnTracker::new(vec![aborted]);
        assert!(t.on_batch(&header(7, 0, 0, true, false)));
        assert_eq!(
            t.on_control(&header(7, 1, 1, true, true), marker(false)),
            (false, Some(aborted))
        );
        assert!(
            !t.on_batch(&header(7, 2, 2, true, false)),
            "its next transaction"
        );
    }
}
