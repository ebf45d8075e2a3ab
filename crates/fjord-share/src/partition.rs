//! One share partition: the records of one partition as one share group consumes them.
//!
//! Offsets below the share-partition start offset (SPSO) are done with. From the SPSO up to the
//! end offset (one past the last record ever acquired) every offset is in flight, in one of four
//! states; offsets past the end are available and were never delivered. Kept as runs of offsets
//! sharing a state, delivery count, holder and lock deadline, so a batch of a thousand records
//! acquired together is one entry until acknowledgements split it.
//!
//! The SPSO moves up over acknowledged and archived records only; a record is delivered at most
//! `delivery_count_limit` times, then archived; an acquired record's lock expires after the lock
//! duration and it becomes available again.

use std::collections::VecDeque;
use std::sync::Arc;

use fjord_common::errors;

/// A record's state, with the ids Kafka persists and describes it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    pub fn id(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    pub fn from_id(id: i8) -> Option<RecordState> {
        match id {
            0 => Some(RecordState::Available),
            1 => Some(RecordState::Acquired),
            2 => Some(RecordState::Acknowledged),
            4 => Some(RecordState::Archived),
            _ => None,
        }
    }

    /// Whether the record needs nothing more: the SPSO may move past it.
    fn is_done(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// An acknowledgement type as ShareFetch and ShareAcknowledge carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// The offset holds no record the consumer was given (a control record or a hole).
    Gap,
    Accept,
    /// Back to available, for another delivery.
    Release,
    /// Never to be delivered again.
    Reject,
    /// The lock taken again for a full lock duration (KIP-1222).
    Renew,
}

impl AckType {
    pub fn from_wire(value: i8) -> Option<AckType> {
        match value {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 => Some(AckType::Renew),
            _ => None,
        }
    }
}

/// How a fetch acquires (ShareFetch v2's ShareAcquireMode, KIP-1206).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireMode {
    /// Whole batches, so the limit on records may be passed to finish the last batch.
    BatchOptimized,
    /// Never more records than the limit, splitting a batch if it must.
    RecordLimit,
}

impl AcquireMode {
    pub fn from_wire(value: i8) -> Option<AcquireMode> {
        match value {
            0 => Some(AcquireMode::BatchOptimized),
            1 => Some(AcquireMode::RecordLimit),
            _ => None,
        }
    }
}

/// The group's limits on the partition, from the group and broker configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareLimits {
    /// In-flight offsets at most before no new record is acquired
    /// (`group.share.partition.max.record.locks`).
    pub max_in_flight: i64,
    /// Deliveries of a record at most; it is archived when released at the limit.
    pub delivery_count_limit: i16,
    /// How long an acquisition lock lasts.
    pub lock_duration_ms: i64,
}

/// A batch as the log returned it: its offsets and whether the consumer may be given its records
/// (false for a control batch, and for an aborted transaction's batch when reading committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub deliverable: bool,
}

/// Offsets handed to one consumer by one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// One acknowledgement batch of a request: one type for every offset, or one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub types: Vec<i8>,
}

/// A run of in-flight offsets as it is persisted and described.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: RecordState,
    pub delivery_count: i16,
}

/// Offsets `first..=last` sharing one state. `holder` and `lock_deadline_ms` mean something
/// only while acquired.
#[derive(Debug, Clone)]
struct Run {
    first: i64,
    last: i64,
    state: RecordState,
    delivery_count: i16,
    holder: Option<Arc<str>>,
    lock_deadline_ms: i64,
}

impl Run {
    fn settled(first: i64, last: i64, state: RecordState, delivery_count: i16) -> Run {
        Run {
            first,
            last,
            state,
            delivery_count,
            holder: None,
            lock_deadline_ms: 0,
        }
    }

    fn len(&self) -> i64 {
        self.last - self.first + 1
    }

    fn same_state(&self, other: &Run) -> bool {
        self.state == other.state
            && self.delivery_count == other.delivery_count
            && self.holder == other.holder
            && self.lock_deadline_ms == other.lock_deadline_ms
    }

    /// Offsets that held no record the consumer could be given, never handed out.
    fn is_hole(&self) -> bool {
        self.state == RecordState::Archived && self.delivery_count == 0
    }

    fn held_by(&self, member: &str) -> bool {
        self.state == RecordState::Acquired && self.holder.as_deref() == Some(member)
    }

    fn persisted(&self) -> StateBatch {
        debug_assert!(
            self.state != RecordState::Acquired,
            "acquired is never persisted"
        );
        StateBatch {
            first_offset: self.first,
            last_offset: self.last,
            state: self.state,
            delivery_count: self.delivery_count,
        }
    }
}

/// A refused acknowledgement: Kafka's error code and why.
pub type AckError = (i16, String);

/// One share group's state of one partition. Owned by the partition's leader, which serialises
/// every call on it.
#[derive(Debug)]
pub struct SharePartition {
    start_offset: i64,
    end_offset: i64,
    runs: VecDeque<Run>,
    limits: ShareLimits,
    /// The ranges whose persisted state (not acquired, which is never persisted) changed since
    /// the caller last took them (`take_changes`): what the next write to the share coordinator
    /// carries.
    changes: Vec<StateBatch>,
    /// No longer the copy the leader serves from (a write of it failed; it is loaded afresh):
    /// whoever still holds it must not change it.
    fenced: bool,
}

impl SharePartition {
    /// A share partition starting at `start_offset` with nothing in flight.
    pub fn new(start_offset: i64, limits: ShareLimits) -> SharePartition {
        SharePartition {
            start_offset,
            end_offset: start_offset,
            runs: VecDeque::new(),
            limits,
            changes: Vec::new(),
            fenced: false,
        }
    }

    /// A share partition as persisted: its start offset and the runs of its in-flight offsets
    /// (ascending, from `start_offset` on; offsets between them are available). Acquired runs
    /// come back available: their locks died with the leader that held them.
    pub fn restore(start_offset: i64, batches: &[StateBatch], limits: ShareLimits) -> Self {
        let mut partition = SharePartition::new(start_offset, limits);
        for batch in batches {
            let first = batch.first_offset.max(partition.end_offset);
            // A batch reaching the last offset there is can hold no record.
            if batch.last_offset < first || batch.last_offset == i64::MAX {
                continue;
            }
            if first > partition.end_offset {
                let gap = Run::settled(partition.end_offset, first - 1, RecordState::Available, 0);
                partition.runs.push_back(gap);
            }
            let state = match batch.state {
                RecordState::Acquired => RecordState::Available,
                other => other,
            };
            let run = Run::settled(first, batch.last_offset, state, batch.delivery_count.max(0));
            partition.runs.push_back(run);
            partition.end_offset = batch.last_offset + 1;
        }
        partition.settle(start_offset);
        partition
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn limits(&self) -> ShareLimits {
        self.limits
    }

    /// New limits (a group config changed); they apply from the next acquisition or release.
    pub fn set_limits(&mut self, limits: ShareLimits) {
        self.limits = limits;
    }

    /// Where the next fetch should read from: the first available offset in flight, else the
    /// end, or `None` while nothing is available and no more may be put in flight.
    pub fn next_fetch_offset(&self) -> Option<i64> {
        if let Some(run) = self.runs.iter().find(|r| r.state == RecordState::Available) {
            return Some(run.first);
        }
        (self.end_offset - self.start_offset < self.limits.max_in_flight).then_some(self.end_offset)
    }

    /// Acquires for `member` what it may have of `batches` — consecutive batches as the log
    /// returned them from `next_fetch_offset` on — up to `max_records` offsets (passed in
    /// batch-optimized mode only to finish a batch). Returns the acquired offset ranges,
    /// ascending.
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[LogBatch],
        max_records: i64,
        mode: AcquireMode,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let before = self.start_offset;
        let holder: Arc<str> = Arc::from(member);
        let deadline = now_ms.saturating_add(self.limits.lock_duration_ms);
        let budget = max_records.max(1);
        let mut acquired: Vec<Acquired> = Vec::new();
        let mut count = 0;
        for batch in batches {
            if count >= budget {
                break;
            }
            if batch.last_offset < self.start_offset || batch.first_offset > batch.last_offset {
                continue;
            }
            let first = batch.first_offset.max(self.start_offset);
            if first < self.end_offset {
                let last = batch.last_offset.min(self.end_offset - 1);
                let cap = match mode {
                    AcquireMode::BatchOptimized => i64::MAX,
                    AcquireMode::RecordLimit => budget - count,
                };
                count += self.acquire_available(first, last, cap, &holder, deadline, &mut acquired);
            }
            if batch.last_offset >= self.end_offset && count < budget {
                if self.end_offset - self.start_offset >= self.limits.max_in_flight {
                    break;
                }
                let cap = match mode {
                    AcquireMode::BatchOptimized => i64::MAX,
                    AcquireMode::RecordLimit => budget - count,
                };
                count += self.acquire_new(batch, cap, &holder, deadline, &mut acquired);
            }
        }
        self.settle(before);
        acquired
    }

    /// Acquires the available offsets of `first..=last` (all in flight), at most `cap` of them.
    fn acquire_available(
        &mut self,
        first: i64,
        last: i64,
        cap: i64,
        holder: &Arc<str>,
        deadline: i64,
        acquired: &mut Vec<Acquired>,
    ) -> i64 {
        let mut taken = 0;
        let mut offset = first;
        while offset <= last && taken < cap {
            let index = self.index_of(offset);
            let run = &self.runs[index];
            let run_last = run.last.min(last);
            if run.state != RecordState::Available {
                offset = run_last + 1;
                continue;
            }
            let take_last = run_last.min(offset.saturating_add(cap - taken - 1));
            let range = self.split_range(offset, take_last);
            for run in self.runs.range_mut(range) {
                run.state = RecordState::Acquired;
                run.delivery_count = run.delivery_count.saturating_add(1);
                run.holder = Some(holder.clone());
                run.lock_deadline_ms = deadline;
                push_acquired(acquired, run.first, run.last, run.delivery_count);
            }
            taken += take_last - offset + 1;
            offset = take_last + 1;
        }
        taken
    }

    /// Puts the part of `batch` past the end in flight: acquired, or archived if it may not be
    /// delivered; at most `cap` offsets. Offsets between the end and the batch hold no record:
    /// after a batch acquired by this call they are acquired with it (the consumer acknowledges
    /// them as gaps, as Kafka's consumers do); otherwise archived, never handed out.
    fn acquire_new(
        &mut self,
        batch: &LogBatch,
        cap: i64,
        holder: &Arc<str>,
        deadline: i64,
        acquired: &mut Vec<Acquired>,
    ) -> i64 {
        let mut first = batch.first_offset.max(self.end_offset);
        if first > self.end_offset {
            let continues = batch.deliverable
                && self.runs.back().is_some_and(|r| {
                    r.held_by(holder)
                        && r.lock_deadline_ms == deadline
                        && r.delivery_count == 1
                        && acquired.last().is_some_and(|a| a.last_offset == r.last)
                });
            if continues {
                first = self.end_offset;
            } else if self.runs.is_empty() {
                self.start_offset = first;
                self.end_offset = first;
            } else {
                let hole = Run::settled(self.end_offset, first - 1, RecordState::Archived, 0);
                self.changes.push(hole.persisted());
                self.runs.push_back(hole);
                self.end_offset = first;
            }
        }
        let last = batch.last_offset.min(first.saturating_add(cap - 1));
        if !batch.deliverable {
            let undeliverable = Run::settled(first, last, RecordState::Archived, 0);
            self.changes.push(undeliverable.persisted());
            self.runs.push_back(undeliverable);
            self.end_offset = last + 1;
            return 0;
        }
        self.runs.push_back(Run {
            first,
            last,
            state: RecordState::Acquired,
            delivery_count: 1,
            holder: Some(holder.clone()),
            lock_deadline_ms: deadline,
        });
        self.end_offset = last + 1;
        push_acquired(acquired, first, last, 1);
        last - first + 1
    }

    /// Applies `member`'s acknowledgements, all or none: refused with INVALID_REQUEST when the
    /// batches are malformed (descending, overlapping, wrong number of types, an unknown type) or
    /// reach past the end, and with INVALID_RECORD_STATE when an offset is not acquired by
    /// `member`. Offsets below the start are done with and skipped, as are offsets that held no
    /// record and were never handed out.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        renew_allowed: bool,
        now_ms: i64,
    ) -> Result<(), AckError> {
        let parsed = self.check_acknowledgements(member, batches, renew_allowed)?;
        let before = self.start_offset;
        for (first, last, ack) in parsed {
            self.apply(first, last, ack, now_ms);
        }
        self.settle(before);
        Ok(())
    }

    /// The acknowledgements as ranges of one type each, or why they are refused.
    fn check_acknowledgements(
        &self,
        member: &str,
        batches: &[AckBatch],
        renew_allowed: bool,
    ) -> Result<Vec<(i64, i64, AckType)>, AckError> {
        let invalid = |message: String| Err((errors::INVALID_REQUEST, message));
        let mut ranges: Vec<(i64, i64, AckType)> = Vec::new();
        let mut previous_last: Option<i64> = None;
        for batch in batches {
            let (first, last) = (batch.first_offset, batch.last_offset);
            if first > last {
                return invalid(format!(
                    "Acknowledgement batch {first}-{last} ends before it starts"
                ));
            }
            if previous_last.is_some_and(|p| first <= p) {
                return invalid(format!(
                    "Acknowledgement batch starting at {first} overlaps or precedes the one before"
                ));
            }
            previous_last = Some(last);
            let span = last.saturating_sub(first).saturating_add(1);
            if batch.types.len() != 1 && i64::try_from(batch.types.len()).ok() != Some(span) {
                return invalid(format!(
                    "Acknowledgement batch {first}-{last} has {} types for {span} offsets",
                    batch.types.len()
                ));
            }
            for (i, &wire) in batch.types.iter().enumerate() {
                let ack = match AckType::from_wire(wire) {
                    Some(AckType::Renew) if !renew_allowed => {
                        return invalid("Renew acknowledgements need IsRenewAck".to_string())
                    }
                    Some(ack) => ack,
                    None => return invalid(format!("Unknown acknowledge type {wire}")),
                };
                let (a, b) = if batch.types.len() == 1 {
                    (first, last)
                } else {
                    (first + i as i64, first + i as i64)
                };
                match ranges.last_mut() {
                    Some(r) if r.2 == ack && r.1 + 1 == a => r.1 = b,
                    _ => ranges.push((a, b, ack)),
                }
            }
        }
        ranges.retain_mut(|r| {
            r.0 = r.0.max(self.start_offset);
            r.0 <= r.1
        });
        for &(first, last, _) in &ranges {
            if last >= self.end_offset {
                return invalid(format!(
                    "Offsets {first}-{last} reach past the last offset in flight"
                ));
            }
            if !self.held_throughout(member, first, last) {
                return Err((
                    errors::INVALID_RECORD_STATE,
                    format!("Offsets {first}-{last} are not acquired by this member"),
                ));
            }
        }
        Ok(ranges)
    }

    /// Whether every offset of `first..=last` (in flight) is acquired by `member` or a hole.
    fn held_throughout(&self, member: &str, first: i64, last: i64) -> bool {
        let mut offset = first;
        while offset <= last {
            let run = &self.runs[self.index_of(offset)];
            if !run.held_by(member) && !run.is_hole() {
                return false;
            }
            offset = run.last + 1;
        }
        true
    }

    fn apply(&mut self, first: i64, last: i64, ack: AckType, now_ms: i64) {
        let deadline = now_ms.saturating_add(self.limits.lock_duration_ms);
        let limit = self.limits.delivery_count_limit;
        let range = self.split_range(first, last);
        for run in self.runs.range_mut(range).filter(|r| !r.is_hole()) {
            match ack {
                AckType::Accept => settle_run(run, RecordState::Acknowledged),
                AckType::Gap | AckType::Reject => settle_run(run, RecordState::Archived),
                AckType::Release => release_run(run, limit),
                AckType::Renew => {
                    run.lock_deadline_ms = deadline;
                    continue;
                }
            }
            self.changes.push(run.persisted());
        }
    }

    /// Releases every record whose lock expired by `now_ms`; how many offsets that was.
    pub fn expire_locks(&mut self, now_ms: i64) -> i64 {
        let before = self.start_offset;
        let limit = self.limits.delivery_count_limit;
        let mut released = 0;
        for run in self.runs.iter_mut() {
            if run.state == RecordState::Acquired && run.lock_deadline_ms <= now_ms {
                release_run(run, limit);
                released += run.len();
                self.changes.push(run.persisted());
            }
        }
        if released > 0 {
            self.settle(before);
        }
        released
    }

    /// Releases every record `member` holds (it left the group or closed its share session);
    /// how many offsets that was.
    pub fn release_member(&mut self, member: &str) -> i64 {
        let before = self.start_offset;
        let limit = self.limits.delivery_count_limit;
        let mut released = 0;
        for run in self.runs.iter_mut().filter(|r| r.held_by(member)) {
            release_run(run, limit);
            released += run.len();
            self.changes.push(run.persisted());
        }
        if released > 0 {
            self.settle(before);
        }
        released
    }

    /// When the next lock expires.
    pub fn next_lock_deadline(&self) -> Option<i64> {
        self.runs
            .iter()
            .filter(|r| r.state == RecordState::Acquired)
            .map(|r| r.lock_deadline_ms)
            .min()
    }

    /// The log's start moved up to `log_start_offset` (retention, DeleteRecords): offsets below
    /// it are gone, whatever their state.
    pub fn on_log_start(&mut self, log_start_offset: i64) {
        if log_start_offset <= self.start_offset {
            return;
        }
        let before = self.start_offset;
        while let Some(front) = self.runs.front_mut() {
            if front.last < log_start_offset {
                self.runs.pop_front();
            } else {
                front.first = front.first.max(log_start_offset);
                break;
            }
        }
        self.start_offset = log_start_offset;
        self.end_offset = self.end_offset.max(log_start_offset);
        self.settle(before);
    }

    /// Marks it no longer served from: see [`SharePartition::is_fenced`].
    pub fn fence(&mut self) {
        self.fenced = true;
    }

    /// Whether it was replaced by a copy loaded afresh: changes to it would never be persisted.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The ranges whose persisted state changed since the last call, oldest first.
    pub fn take_changes(&mut self) -> Vec<StateBatch> {
        std::mem::take(&mut self.changes)
    }

    /// Offsets at or past the start offset whose delivery is complete (acknowledged or
    /// archived), as the share coordinator keeps it for lag (KIP-1226).
    pub fn delivery_complete_count(&self) -> i32 {
        let done: i64 = self
            .runs
            .iter()
            .filter(|r| r.state.is_done())
            .map(Run::len)
            .sum();
        i32::try_from(done).unwrap_or(i32::MAX)
    }

    /// Offsets in flight (acquired or not yet done with).
    pub fn in_flight_offsets(&self) -> i64 {
        self.end_offset - self.start_offset
    }

    /// Offsets currently acquired.
    pub fn acquired_offsets(&self) -> i64 {
        self.runs
            .iter()
            .filter(|r| r.state == RecordState::Acquired)
            .map(Run::len)
            .sum()
    }

    /// The state of one offset and its delivery count (for tests and describing).
    pub fn state_of(&self, offset: i64) -> (RecordState, i16) {
        if offset < self.start_offset {
            return (RecordState::Archived, 0);
        }
        if offset >= self.end_offset {
            return (RecordState::Available, 0);
        }
        let run = &self.runs[self.index_of(offset)];
        (run.state, run.delivery_count)
    }

    /// The index of the run holding `offset`, which must be in flight.
    fn index_of(&self, offset: i64) -> usize {
        assert!(
            (self.start_offset..self.end_offset).contains(&offset),
            "offset {offset} outside the in-flight window {}..{}",
            self.start_offset,
            self.end_offset
        );
        self.runs.partition_point(|r| r.first <= offset) - 1
    }

    /// Splits runs so one starts at `offset` (in flight or the end); its index.
    fn split_at(&mut self, offset: i64) -> usize {
        if offset == self.end_offset {
            return self.runs.len();
        }
        let index = self.index_of(offset);
        if self.runs[index].first == offset {
            return index;
        }
        let mut right = self.runs[index].clone();
        right.first = offset;
        self.runs[index].last = offset - 1;
        self.runs.insert(index + 1, right);
        index + 1
    }

    /// The indexes of the runs covering exactly `first..=last`, splitting at both ends.
    fn split_range(&mut self, first: i64, last: i64) -> std::ops::Range<usize> {
        let from = self.split_at(first);
        let to = self.split_at(last + 1);
        from..to
    }

    /// After a change: the SPSO moved past every done record at the front, neighbouring runs
    /// that agree merged, and the invariants checked.
    fn settle(&mut self, start_before: i64) {
        while let Some(front) = self.runs.front() {
            if !front.state.is_done() {
                break;
            }
            self.start_offset = front.last + 1;
            self.runs.pop_front();
        }
        if self.runs.is_empty() {
            self.start_offset = self.end_offset;
        }
        // Merged in place: the deque's buffer becomes a Vec's and back without a copy.
        let mut runs = Vec::from(std::mem::take(&mut self.runs));
        runs.dedup_by(|next, prev| {
            let same = prev.same_state(next);
            if same {
                prev.last = next.last;
            }
            same
        });
        self.runs = VecDeque::from(runs);
        self.check_invariants(start_before);
    }

    /// The SPSO never goes back; the runs cover the window exactly, in order; a run is acquired
    /// exactly when it has a holder; the first run is not done with.
    fn check_invariants(&self, start_before: i64) {
        assert!(
            self.start_offset >= start_before,
            "share-partition start offset went back from {start_before} to {}",
            self.start_offset
        );
        assert!(self.start_offset <= self.end_offset);
        let mut next = self.start_offset;
        for run in &self.runs {
            assert!(
                run.first == next && run.first <= run.last,
                "in-flight runs broken at {next}: {run:?}"
            );
            assert_eq!(run.state == RecordState::Acquired, run.holder.is_some());
            assert!(run.delivery_count >= 0);
            next = run.last + 1;
        }
        assert_eq!(
            next, self.end_offset,
            "in-flight runs end short of the end offset"
        );
        assert!(self.runs.front().is_none_or(|r| !r.state.is_done()));
    }
}

fn settle_run(run: &mut Run, state: RecordState) {
    run.state = state;
    run.holder = None;
    run.lock_deadline_ms = 0;
}

/// Back to available for another delivery, or archived once delivered `limit` times.
fn release_run(run: &mut Run, limit: i16) {
    let state = if run.delivery_count >= limit {
        RecordState::Archived
    } else {
        RecordState::Available
    };
    settle_run(run, state);
}

/// Appends a range to `acquired`, extending the last one when it continues it.
fn push_acquired(acquired: &mut Vec<Acquired>, first: i64, last: i64, delivery_count: i16) {
    match acquired.last_mut() {
        Some(a) if a.last_offset + 1 == first && a.delivery_count == delivery_count => {
            a.last_offset = last
        }
        _ => acquired.push(Acquired {
            first_offset: first,
            last_offset: last,
            delivery_count,
        }),
    }
}

#[cfg(test)]
mod tests;
