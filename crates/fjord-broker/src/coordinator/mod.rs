//! The coordinators a broker hosts: one `CoordinatorRuntime` per kind (`runtime`), holding a
//! shard per partition of the kind's internal topic this broker leads, loaded by replaying the
//! partition and written through it (`log`); the group shell (`group`, `__consumer_offsets`)
//! and the transaction shell (`txn`, `__transaction_state`) keep what differs between the
//! kinds. `producer_ids` hands out producer ids from blocks the controller reserves; `share`
//! keeps the share partitions (KIP-932) this broker leads and its share sessions. This
//! layer imports `replication` and `link` of the broker's own folders.

pub(crate) mod group;
pub(crate) mod log;
pub(crate) mod producer_ids;
pub(crate) mod runtime;
pub(crate) mod share;
pub(crate) mod share_state;
pub(crate) mod txn;
