use super::*;

use proptest::prelude::*;

const LIMITS: ShareLimits = ShareLimits {
    max_in_flight: 100,
    delivery_count_limit: 3,
    lock_duration_ms: 1_000,
};

/// Batches of `size` offsets from `first` up to `last`.
fn batches(first: i64, last: i64, size: i64) -> Vec<LogBatch> {
    (first..=last)
        .step_by(size as usize)
        .map(|f| LogBatch {
            first_offset: f,
            last_offset: (f + size - 1).min(last),
            deliverable: true,
        })
        .collect()
}

fn ack(first: i64, last: i64, ty: i8) -> AckBatch {
    AckBatch {
        first_offset: first,
        last_offset: last,
        types: vec![ty],
    }
}

fn range(first: i64, last: i64, delivery_count: i16) -> Acquired {
    Acquired {
        first_offset: first,
        last_offset: last,
        delivery_count,
    }
}

#[test]
fn acquires_whole_batches_then_nothing_while_held() {
    let mut p = SharePartition::new(0, LIMITS);
    let got = p.acquire("a", &batches(0, 9, 5), 3, AcquireMode::BatchOptimized, 0);
    assert_eq!(
        got,
        vec![range(0, 4, 1)],
        "the limit is passed only to finish a batch"
    );
    assert_eq!(p.next_fetch_offset(), Some(5));
    let got = p.acquire("b", &batches(5, 9, 5), 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(got, vec![range(5, 9, 1)]);
    assert_eq!(
        p.acquire("c", &batches(0, 9, 5), 100, AcquireMode::BatchOptimized, 0),
        vec![]
    );
    assert_eq!(p.acquired_offsets(), 10);
}

#[test]
fn record_limit_mode_splits_a_batch() {
    let mut p = SharePartition::new(0, LIMITS);
    let got = p.acquire("a", &batches(0, 9, 10), 3, AcquireMode::RecordLimit, 0);
    assert_eq!(got, vec![range(0, 2, 1)]);
    let got = p.acquire("b", &batches(0, 9, 10), 3, AcquireMode::RecordLimit, 0);
    assert_eq!(got, vec![range(3, 5, 1)]);
}

#[test]
fn accepted_records_move_the_start_and_released_ones_come_back() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 9, 10), 100, AcquireMode::BatchOptimized, 0);
    p.acknowledge("a", &[ack(0, 3, 1), ack(4, 5, 2), ack(6, 9, 1)], false, 10)
        .expect("acks");
    assert_eq!(p.start_offset(), 4);
    assert_eq!(p.state_of(4), (RecordState::Available, 1));
    assert_eq!(p.state_of(7), (RecordState::Acknowledged, 1));
    assert_eq!(p.next_fetch_offset(), Some(4));
    let got = p.acquire(
        "b",
        &batches(0, 9, 10),
        100,
        AcquireMode::BatchOptimized,
        20,
    );
    assert_eq!(
        got,
        vec![range(4, 5, 2)],
        "only the released offsets are redelivered"
    );
    p.acknowledge("b", &[ack(4, 5, 1)], false, 30)
        .expect("acks");
    assert_eq!((p.start_offset(), p.end_offset()), (10, 10));
    assert_eq!(p.in_flight_offsets(), 0);
}

#[test]
fn per_offset_types_and_gaps() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 3, 4), 100, AcquireMode::BatchOptimized, 0);
    let batch = AckBatch {
        first_offset: 0,
        last_offset: 3,
        types: vec![1, 0, 3, 2],
    };
    p.acknowledge("a", &[batch], false, 0).expect("acks");
    assert_eq!(p.start_offset(), 3);
    assert_eq!(p.state_of(3), (RecordState::Available, 1));
}

#[test]
fn malformed_acknowledgements_are_refused_whole() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 9, 10), 100, AcquireMode::BatchOptimized, 0);
    let refused = |p: &mut SharePartition, batches: &[AckBatch], renew: bool| {
        p.acknowledge("a", batches, renew, 0)
            .map_err(|(code, _)| code)
    };
    assert_eq!(
        refused(&mut p, &[ack(5, 4, 1)], false),
        Err(errors::INVALID_REQUEST)
    );
    assert_eq!(
        refused(&mut p, &[ack(0, 4, 1), ack(4, 6, 1)], false),
        Err(errors::INVALID_REQUEST),
        "overlapping"
    );
    assert_eq!(
        refused(&mut p, &[ack(5, 6, 1), ack(0, 1, 1)], false),
        Err(errors::INVALID_REQUEST),
        "descending"
    );
    let two_types_for_three = AckBatch {
        first_offset: 0,
        last_offset: 2,
        types: vec![1, 1],
    };
    assert_eq!(
        refused(&mut p, &[two_types_for_three], false),
        Err(errors::INVALID_REQUEST)
    );
    assert_eq!(
        refused(&mut p, &[ack(0, 0, 9)], false),
        Err(errors::INVALID_REQUEST)
    );
    assert_eq!(
        refused(&mut p, &[ack(0, 0, 4)], false),
        Err(errors::INVALID_REQUEST),
        "renew needs the flag"
    );
    assert_eq!(
        refused(&mut p, &[ack(8, 12, 1)], false),
        Err(errors::INVALID_REQUEST)
    );
    assert_eq!(
        p.acknowledge("b", &[ack(0, 0, 1)], false, 0)
            .map_err(|e| e.0),
        Err(errors::INVALID_RECORD_STATE),
        "held by another member"
    );
    assert_eq!(
        p.acquired_offsets(),
        10,
        "nothing of a refused request applied"
    );
    assert_eq!(
        refused(&mut p, &[ack(0, 1, 1), ack(20, 21, 1)], false),
        Err(errors::INVALID_REQUEST)
    );
    assert_eq!(p.state_of(0), (RecordState::Acquired, 1));
}

#[test]
fn locks_expire_and_renew() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 9, 10), 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(p.next_lock_deadline(), Some(1_000));
    p.acknowledge("a", &[ack(0, 4, 4)], true, 600)
        .expect("renew");
    assert_eq!(p.expire_locks(1_000), 5);
    assert_eq!(p.state_of(5), (RecordState::Available, 1));
    assert_eq!(p.state_of(0), (RecordState::Acquired, 1));
    assert_eq!(p.next_lock_deadline(), Some(1_600));
    assert_eq!(p.expire_locks(1_599), 0);
    assert_eq!(p.expire_locks(1_600), 5);
    assert_eq!(p.next_lock_deadline(), None);
}

#[test]
fn a_record_is_archived_at_the_delivery_limit() {
    let mut p = SharePartition::new(0, LIMITS);
    for delivery in 1..=3 {
        let got = p.acquire("a", &batches(0, 0, 1), 100, AcquireMode::BatchOptimized, 0);
        assert_eq!(got, vec![range(0, 0, delivery)]);
        p.acknowledge("a", &[ack(0, 0, 2)], false, 0)
            .expect("release");
    }
    assert_eq!(p.start_offset(), 1, "archived after its third delivery");
    let mut p = SharePartition::new(0, LIMITS);
    for now in [0, 1_000, 2_000] {
        p.acquire(
            "a",
            &batches(0, 0, 1),
            100,
            AcquireMode::BatchOptimized,
            now,
        );
        p.expire_locks(now + 1_000);
    }
    assert_eq!(p.start_offset(), 1, "a lock expiring counts as a delivery");
}

#[test]
fn a_leaving_member_releases_what_it_holds() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 4, 5), 100, AcquireMode::BatchOptimized, 0);
    p.acquire("b", &batches(5, 9, 5), 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(p.release_member("a"), 5);
    assert_eq!(p.state_of(0), (RecordState::Available, 1));
    assert_eq!(p.state_of(5), (RecordState::Acquired, 1));
}

#[test]
fn in_flight_is_bounded() {
    let limits = ShareLimits {
        max_in_flight: 10,
        ..LIMITS
    };
    let mut p = SharePartition::new(0, limits);
    let got = p.acquire(
        "a",
        &batches(0, 99, 4),
        1_000,
        AcquireMode::BatchOptimized,
        0,
    );
    assert_eq!(
        got,
        vec![range(0, 11, 1)],
        "three batches: the third starts under the bound"
    );
    assert_eq!(p.next_fetch_offset(), None);
    p.acknowledge("a", &[ack(0, 3, 1)], false, 0).expect("acks");
    assert_eq!(p.next_fetch_offset(), Some(12));
}

#[test]
fn holes_and_undeliverable_batches_are_archived() {
    let mut p = SharePartition::new(0, LIMITS);
    let log = [
        LogBatch {
            first_offset: 0,
            last_offset: 1,
            deliverable: true,
        },
        LogBatch {
            first_offset: 2,
            last_offset: 2,
            deliverable: false,
        },
        LogBatch {
            first_offset: 50,
            last_offset: 51,
            deliverable: true,
        },
    ];
    let got = p.acquire("a", &log, 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(got, vec![range(0, 1, 1), range(50, 51, 1)]);
    p.acknowledge("a", &[ack(0, 1, 1)], false, 0).expect("acks");
    assert_eq!(p.start_offset(), 50);
    let mut p = SharePartition::new(0, LIMITS);
    let got = p.acquire("a", &log[2..], 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(
        (got, p.start_offset()),
        (vec![range(50, 51, 1)], 50),
        "an empty window jumps"
    );
}

#[test]
fn the_log_start_moving_up_drops_what_is_below() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 9, 10), 100, AcquireMode::BatchOptimized, 0);
    p.on_log_start(4);
    assert_eq!((p.start_offset(), p.acquired_offsets()), (4, 6));
    p.on_log_start(20);
    assert_eq!((p.start_offset(), p.end_offset()), (20, 20));
}

#[test]
fn restore_brings_acquired_records_back_available() {
    let batches = [
        StateBatch {
            first_offset: 12,
            last_offset: 13,
            state: RecordState::Acknowledged,
            delivery_count: 1,
        },
        StateBatch {
            first_offset: 15,
            last_offset: 16,
            state: RecordState::Acquired,
            delivery_count: 2,
        },
    ];
    let p = SharePartition::restore(10, &batches, LIMITS);
    assert_eq!((p.start_offset(), p.end_offset()), (10, 17));
    assert_eq!(p.state_of(10), (RecordState::Available, 0));
    assert_eq!(p.state_of(12), (RecordState::Acknowledged, 1));
    assert_eq!(p.state_of(15), (RecordState::Available, 2));
    assert_eq!(p.next_fetch_offset(), Some(10));
}

/// One step of the simulation.
#[derive(Debug, Clone)]
enum Step {
    Fetch {
        member: u8,
        max_records: i64,
        record_limit: bool,
    },
    Ack {
        member: u8,
        pick: u64,
        ty: i8,
    },
    Advance {
        ms: i64,
    },
    Leave {
        member: u8,
    },
    LogStart {
        by: i64,
    },
    /// Another leader takes over from what was persisted.
    LeaderChange,
}

fn persisted(b: &StateBatch) -> crate::PersistedBatch {
    crate::PersistedBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.state.id(),
        delivery_count: b.delivery_count,
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..3, 1i64..20, any::<bool>()).prop_map(|(member, max_records, record_limit)| Step::Fetch { member, max_records, record_limit }),
        4 => (0u8..3, any::<u64>(), 0i8..5).prop_map(|(member, pick, ty)| Step::Ack { member, pick, ty }),
        2 => (1i64..1_500).prop_map(|ms| Step::Advance { ms }),
        1 => (0u8..3).prop_map(|member| Step::Leave { member }),
        1 => (0i64..5).prop_map(|by| Step::LogStart { by }),
        1 => Just(Step::LeaderChange),
    ]
}

proptest! {
    /// Random fetches, acknowledgements, lock expiry, leaving members, log truncation and
    /// leader changes by three members over a 200-record log of batches of 3, against a model
    /// of who holds each offset until when: a record is never held by two members, an
    /// acknowledgement succeeds exactly when its member holds every offset, delivery counts
    /// only grow (but for acquisitions a leader change forgets: never persisted) and stay
    /// within the limit, an accepted record is never delivered again, the start never falls
    /// below the log's start, and what the changes persisted, merged as the share coordinator
    /// merges them, is at every step the in-memory state of every record not acquired.
    #[test]
    fn simulation_keeps_the_invariants(steps in proptest::collection::vec(step(), 1..200)) {
        let log = batches(0, 199, 3);
        let mut p = SharePartition::new(0, ShareLimits { max_in_flight: 40, ..LIMITS });
        let mut now = 0;
        let mut log_start = 0;
        // Per offset: the member holding it and until when.
        let mut holder: [Option<(u8, i64)>; 200] = [None; 200];
        let mut held: Vec<Vec<Acquired>> = vec![Vec::new(); 3];
        let mut delivered = [0i16; 200];
        let mut accepted = [false; 200];
        // What the share coordinator holds: every change written, merged as it merges them.
        let mut stored: Vec<crate::PersistedBatch> = Vec::new();
        let mut stored_start = 0;
        for step in steps {
            match step {
                Step::Fetch { member, max_records, record_limit } => {
                    let Some(from) = p.next_fetch_offset() else { continue };
                    let read: Vec<LogBatch> = log.iter().copied().filter(|b| b.last_offset >= from).collect();
                    let mode = if record_limit { AcquireMode::RecordLimit } else { AcquireMode::BatchOptimized };
                    let got = p.acquire(&member.to_string(), &read, max_records, mode, now);
                    for a in &got {
                        for o in a.first_offset..=a.last_offset {
                            let o = o as usize;
                            prop_assert!(!accepted[o], "accepted offset {o} delivered again");
                            prop_assert!(holder[o].is_none(), "offset {o} acquired while held");
                            prop_assert!(o as i64 >= log_start);
                            prop_assert_eq!(a.delivery_count, delivered[o] + 1);
                            prop_assert!(a.delivery_count <= LIMITS.delivery_count_limit);
                            delivered[o] = a.delivery_count;
                            holder[o] = Some((member, now + LIMITS.lock_duration_ms));
                        }
                    }
                    if record_limit {
                        let n: i64 = got.iter().map(|a| a.last_offset - a.first_offset + 1).sum();
                        prop_assert!(n <= max_records);
                    }
                    held[member as usize].extend(got);
                }
                Step::Ack { member, pick, ty } => {
                    let mine = &mut held[member as usize];
                    if mine.is_empty() { continue }
                    let a = mine.remove((pick % mine.len() as u64) as usize);
                    let range = a.first_offset as usize..=a.last_offset as usize;
                    // Offsets below the start are done with: acknowledging them is a no-op.
                    let start = p.start_offset();
                    let holds = range.clone().filter(|&o| o as i64 >= start).all(|o| holder[o].is_some_and(|(m, _)| m == member));
                    let result = p.acknowledge(&member.to_string(), &[ack(a.first_offset, a.last_offset, ty)], true, now);
                    prop_assert_eq!(result.is_ok(), holds, "{:?}", result);
                    if result.is_ok() {
                        for o in range.filter(|&o| o as i64 >= start) {
                            holder[o] = (ty == 4).then_some((member, now + LIMITS.lock_duration_ms));
                            accepted[o] |= ty == 1;
                        }
                        if ty == 4 { held[member as usize].push(a); }
                    }
                }
                Step::Advance { ms } => {
                    now += ms;
                    p.expire_locks(now);
                    for h in holder.iter_mut() {
                        if h.is_some_and(|(_, until)| until <= now) { *h = None; }
                    }
                }
                Step::Leave { member } => {
                    p.release_member(&member.to_string());
                    held[member as usize].clear();
                    for h in holder.iter_mut() {
                        if h.is_some_and(|(m, _)| m == member) { *h = None; }
                    }
                }
                Step::LogStart { by } => {
                    log_start = (log_start + by).min(p.end_offset());
                    p.on_log_start(log_start);
                    for h in holder.iter_mut().take(log_start as usize) { *h = None; }
                }
                Step::LeaderChange => {
                    let restored: Vec<StateBatch> = stored
                        .iter()
                        .map(|b| StateBatch {
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            state: RecordState::from_id(b.delivery_state).unwrap(),
                            delivery_count: b.delivery_count,
                        })
                        .collect();
                    let limits = p.limits();
                    p = SharePartition::restore(stored_start.max(log_start), &restored, limits);
                    // Acquisitions are not persisted: the new leader delivers those records
                    // again, counting from what was stored.
                    for (o, h) in holder.iter_mut().enumerate() {
                        if h.take().is_some() {
                            delivered[o] = stored
                                .iter()
                                .find(|b| b.first_offset <= o as i64 && o as i64 <= b.last_offset)
                                .map_or(0, |b| b.delivery_count);
                        }
                    }
                    for h in held.iter_mut() { h.clear(); }
                }
            }
            let changes = p.take_changes();
            stored_start = stored_start.max(p.start_offset());
            stored = crate::combine(stored.iter().copied().chain(changes.iter().map(persisted)), stored_start);
            prop_assert!(p.start_offset() >= log_start);
            for o in p.start_offset().max(0)..p.end_offset().min(200) {
                let (state, count) = p.state_of(o);
                // Everything but an acquisition is persisted as it happens.
                let kept = stored
                    .iter()
                    .find(|b| b.first_offset <= o && o <= b.last_offset)
                    .map_or((0, 0), |b| (b.delivery_state, b.delivery_count));
                if state == RecordState::Acquired {
                    prop_assert_eq!(kept.1, count - 1, "stored count at {}", o);
                } else {
                    // Nothing stored is a record never delivered (a new leader's gap).
                    prop_assert_eq!(kept, (state.id(), count), "stored state at {}", o);
                }
                let o = o as usize;
                prop_assert_eq!(count, delivered[o], "delivery count at {}", o);
                prop_assert_eq!(state == RecordState::Acquired, holder[o].is_some(), "state at {}", o);
                prop_assert!(!(accepted[o] && state != RecordState::Acknowledged));
            }
        }
    }
}

#[test]
fn a_hole_between_batches_of_one_fetch_is_acquired_with_them() {
    let mut p = SharePartition::new(0, LIMITS);
    let log = [
        LogBatch {
            first_offset: 0,
            last_offset: 1,
            deliverable: true,
        },
        LogBatch {
            first_offset: 5,
            last_offset: 6,
            deliverable: true,
        },
    ];
    let got = p.acquire("a", &log, 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(got, vec![range(0, 6, 1)]);
    let batch = AckBatch {
        first_offset: 0,
        last_offset: 6,
        types: vec![1, 1, 0, 0, 0, 1, 1],
    };
    p.acknowledge("a", &[batch], false, 0)
        .expect("acks with gaps");
    assert_eq!(p.start_offset(), 7);
    assert_eq!(
        p.acknowledge("a", &[ack(2, 4, 1)], false, 0),
        Ok(()),
        "below the start: skipped"
    );
}

#[test]
fn acknowledging_past_the_end_is_an_invalid_request() {
    let mut p = SharePartition::new(0, LIMITS);
    p.acquire("a", &batches(0, 4, 5), 100, AcquireMode::BatchOptimized, 0);
    assert_eq!(
        p.acknowledge("a", &[ack(3, 5, 1)], false, 0)
            .map_err(|e| e.0),
        Err(errors::INVALID_REQUEST)
    );
}
