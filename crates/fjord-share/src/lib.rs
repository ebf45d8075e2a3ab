//! Share groups' partition side (KIP-932), sans-IO.
//!
//! A share group's consumers read the same partitions together: the partition's leader hands
//! each record to one of them under a time-limited acquisition lock, and each is acknowledged
//! record by record. `SharePartition` is that state for one (group, partition) — the share-partition
//! start offset, the in-flight records with their state, delivery count and lock — and
//! `ShareSessions` the share sessions of ShareFetch / ShareAcknowledge. `ShareCoordinatorShard` is
//! the share coordinator: the durable copy of that state, kept on `__share_group_state` (`records`).
//! The broker reads the log, holds the locks around these types and passes the time in; nothing
//! here does I/O.

#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod coordinator;
mod partition;
pub mod records;
mod session;

pub use coordinator::{
    combine, PersistedBatch, PersistedState, Refusal, ShareCoordinatorShard, StateWrite, Summary,
    DEFAULT_UPDATES_PER_SNAPSHOT,
};
pub use partition::{
    AckBatch, AckType, AcquireMode, Acquired, LogBatch, RecordState, ShareLimits, SharePartition,
    StateBatch,
};
pub use session::{SessionKey, SessionStep, ShareSessions, MAX_SESSION_PARTITIONS};
