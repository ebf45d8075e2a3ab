use super::*;
use fjord_common::Uuid;
use proptest::prelude::*;

fn key() -> StateKey {
    StateKey {
        group_id: "g".into(),
        topic_id: Uuid([1; 16]),
        partition: 0,
    }
}

fn batch(first: i64, last: i64, state: i8, count: i16) -> PersistedBatch {
    PersistedBatch {
        first_offset: first,
        last_offset: last,
        delivery_state: state,
        delivery_count: count,
    }
}

fn write(leader_epoch: i32, start_offset: i64, batches: Vec<PersistedBatch>) -> StateWrite {
    StateWrite {
        state_epoch: 0,
        leader_epoch,
        start_offset,
        delivery_complete_count: 0,
        batches,
    }
}

/// A shard that keeps every record it applied, as its partition's log would.
struct Logged {
    shard: ShareCoordinatorShard,
    log: Vec<CoordinatorRecord>,
}

impl Logged {
    fn new(updates_per_snapshot: u32) -> Logged {
        Logged {
            shard: ShareCoordinatorShard::new(updates_per_snapshot),
            log: Vec::new(),
        }
    }

    fn apply(&mut self, record: CoordinatorRecord) {
        self.shard.replay(&record).unwrap();
        self.log.push(record);
    }

    /// The shard a new coordinator loads from the log.
    fn reloaded(&self) -> ShareCoordinatorShard {
        let mut shard = ShareCoordinatorShard::new(self.shard.updates_per_snapshot);
        for record in &self.log {
            shard.replay(record).unwrap();
        }
        shard
    }
}

#[test]
fn an_uninitialized_partition_cannot_be_read_or_written() {
    let shard = ShareCoordinatorShard::new(10);
    let refused = shard.read(&key(), 0, 0).unwrap_err();
    assert_eq!(refused.error_code, errors::INVALID_REQUEST);
    let refused = shard.write(&key(), &write(0, 0, vec![]), 0).unwrap_err();
    assert_eq!(refused.error_code, errors::INVALID_REQUEST);
    assert_eq!(shard.summary(&key()).start_offset, -1);
    assert_eq!(shard.delete(&key()).unwrap(), None);
}

#[test]
fn a_new_leaders_read_fences_the_old_leaders_writes() {
    let mut s = Logged::new(10);
    let record = s.shard.initialize(&key(), 0, 5, 1).unwrap();
    s.apply(record);
    let (state, record) = s.shard.read(&key(), 3, 2).unwrap();
    assert_eq!((state.start_offset, state.delivery_complete_count), (5, 0));
    s.apply(record.expect("a newer leader epoch is written"));
    assert_eq!(s.shard.state(&key()).unwrap().leader_epoch, 3);
    // The same leader reading again writes nothing.
    assert!(s.shard.read(&key(), 3, 3).unwrap().1.is_none());
    let refused = s.shard.write(&key(), &write(2, 5, vec![]), 4).unwrap_err();
    assert_eq!(refused.error_code, errors::FENCED_LEADER_EPOCH);
    let refused = s.shard.read(&key(), 2, 4).unwrap_err();
    assert_eq!(refused.error_code, errors::FENCED_LEADER_EPOCH);
    // A write never raises the stored leader epoch.
    let record = s.shard.write(&key(), &write(7, 5, vec![]), 5).unwrap();
    s.apply(record);
    assert_eq!(s.shard.state(&key()).unwrap().leader_epoch, 3);
}

#[test]
fn an_older_state_epoch_is_fenced() {
    let mut s = Logged::new(10);
    let record = s.shard.initialize(&key(), 4, -1, 1).unwrap();
    s.apply(record);
    assert_eq!(s.shard.summary(&key()).delivery_complete_count, -1);
    let refused = s.shard.initialize(&key(), 3, 0, 2).unwrap_err();
    assert_eq!(refused.error_code, errors::FENCED_STATE_EPOCH);
    let mut stale = write(0, 0, vec![]);
    stale.state_epoch = 3;
    let refused = s.shard.write(&key(), &stale, 2).unwrap_err();
    assert_eq!(refused.error_code, errors::FENCED_STATE_EPOCH);
    // The same epoch initializes again, from scratch.
    let record = s
        .shard
        .write(&key(), &write(0, 0, vec![batch(0, 3, 2, 1)]), 3);
    assert!(record.is_err(), "state epoch 0 < 4");
    let record = s.shard.initialize(&key(), 4, 10, 3).unwrap();
    s.apply(record);
    let state = s.shard.state(&key()).unwrap();
    assert_eq!((state.start_offset, state.snapshot_epoch), (10, 1));
}

#[test]
fn writes_merge_into_the_state_and_a_reload_sees_the_same() {
    let mut s = Logged::new(3);
    let record = s.shard.initialize(&key(), 0, 0, 1).unwrap();
    s.apply(record);
    let writes = [
        write(1, 0, vec![batch(0, 9, 0, 1)]),
        write(1, 0, vec![batch(0, 4, 2, 1)]),
        write(1, 0, vec![batch(5, 5, 0, 2), batch(6, 9, 4, 1)]),
        write(1, 5, vec![batch(7, 7, 2, 2)]),
        write(1, 0, vec![batch(5, 5, 2, 2)]),
    ];
    for (i, w) in writes.iter().enumerate() {
        let record = s.shard.write(&key(), w, 10 + i as i64).unwrap();
        s.apply(record);
    }
    let state = s.shard.state(&key()).unwrap();
    assert_eq!(state.start_offset, 5, "the start offset never goes back");
    assert_eq!(
        state.batches,
        vec![
            batch(5, 5, 2, 2),
            batch(6, 6, 4, 1),
            batch(7, 7, 2, 2),
            batch(8, 9, 4, 1)
        ]
    );
    assert!(
        state.snapshot_epoch >= 1,
        "a snapshot followed three updates"
    );
    assert_eq!(s.reloaded().state(&key()), s.shard.state(&key()));
}

#[test]
fn delivery_complete_count_follows_the_start_offset() {
    let mut s = Logged::new(100);
    let record = s.shard.initialize(&key(), 0, 10, 1).unwrap();
    s.apply(record);
    let mut w = write(0, 10, vec![]);
    w.delivery_complete_count = 3;
    let record = s.shard.write(&key(), &w, 2).unwrap();
    s.apply(record);
    w.delivery_complete_count = 1;
    let record = s.shard.write(&key(), &w, 3).unwrap();
    s.apply(record);
    assert_eq!(
        s.shard.summary(&key()).delivery_complete_count,
        3,
        "same start: max"
    );
    w.start_offset = 12;
    let record = s.shard.write(&key(), &w, 4).unwrap();
    s.apply(record);
    assert_eq!(
        s.shard.summary(&key()).delivery_complete_count,
        1,
        "a later start: the write's"
    );
    w.start_offset = 11;
    w.delivery_complete_count = 9;
    let record = s.shard.write(&key(), &w, 5).unwrap();
    s.apply(record);
    let summary = s.shard.summary(&key());
    assert_eq!(
        (summary.start_offset, summary.delivery_complete_count),
        (12, 1)
    );
}

#[test]
fn a_deleted_state_is_gone_after_a_reload() {
    let mut s = Logged::new(10);
    let record = s.shard.initialize(&key(), 0, 0, 1).unwrap();
    s.apply(record);
    let record = s.shard.delete(&key()).unwrap().unwrap();
    s.apply(record);
    assert!(s.shard.is_empty());
    assert!(s.reloaded().is_empty());
}

#[test]
fn malformed_batches_are_refused() {
    let mut s = Logged::new(10);
    let record = s.shard.initialize(&key(), 0, 0, 1).unwrap();
    s.apply(record);
    for bad in [
        batch(-1, 2, 0, 1),
        batch(3, 2, 0, 1),
        batch(0, 2, 1, 1),
        batch(0, 2, 0, -1),
        batch(0, i64::MAX, 0, 1),
    ] {
        let refused = s
            .shard
            .write(&key(), &write(0, 0, vec![bad]), 2)
            .unwrap_err();
        assert_eq!(refused.error_code, errors::INVALID_REQUEST, "{bad:?}");
    }
}

#[test]
fn overlaps_go_to_more_deliveries_then_the_higher_state() {
    let merged = combine(
        [
            batch(0, 9, 2, 1),
            batch(3, 5, 0, 2),
            batch(4, 12, 4, 1),
            batch(20, 21, 0, 0),
        ],
        1,
    );
    assert_eq!(
        merged,
        vec![
            batch(1, 2, 2, 1),
            batch(3, 5, 0, 2),
            batch(6, 12, 4, 1),
            batch(20, 21, 0, 0)
        ]
    );
}

proptest! {
    /// Against a model that decides offset by offset.
    #[test]
    fn combine_matches_offset_by_offset(
        batches in prop::collection::vec((0i64..40, 0i64..8, prop::sample::select(vec![0i8, 2, 4]), 0i16..4), 0..12),
        start in 0i64..10,
    ) {
        let batches: Vec<PersistedBatch> =
            batches.iter().map(|&(f, len, s, c)| batch(f, f + len, s, c)).collect();
        let merged = combine(batches.iter().copied(), start);
        for pair in merged.windows(2) {
            prop_assert!(pair[0].last_offset < pair[1].first_offset);
            let touching = pair[0].last_offset + 1 == pair[1].first_offset;
            let same = (pair[0].delivery_state, pair[0].delivery_count)
                == (pair[1].delivery_state, pair[1].delivery_count);
            prop_assert!(!(touching && same), "adjacent equal ranges are joined");
        }
        for offset in 0..60 {
            let want = batches
                .iter()
                .filter(|b| offset >= start && b.first_offset <= offset && offset <= b.last_offset)
                .map(|b| (b.delivery_count, b.delivery_state))
                .max();
            let got = merged
                .iter()
                .find(|b| b.first_offset <= offset && offset <= b.last_offset)
                .map(|b| (b.delivery_count, b.delivery_state));
            prop_assert_eq!(want, got, "offset {}", offset);
        }
    }
}
