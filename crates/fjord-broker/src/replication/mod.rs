//! The partitions this broker hosts and their replication, as Kafka's `ReplicaManager` and
//! `Partition` do it: `ReplicaManager` follows the metadata image and owns the hosted
//! `Partition`s; each `Partition` holds its log and its sans-IO `PartitionState` (role, epochs,
//! ISR, high watermark). Around them: the follower fetchers (`fetcher`), the leader's ISR
//! changes (`isr_manager`), group commit of fsyncs (`flusher`), replication throttles
//! (`quota`), moves between log dirs (`log_dir_mover`). This layer imports only `link` of the
//! broker's own folders.

pub(crate) mod fetcher;
pub(crate) mod flusher;
pub(crate) mod isr_manager;
mod log_dir_mover;
pub(crate) mod partition;
pub mod partition_state;
pub(crate) mod quota;
pub(crate) mod replica_manager;

pub(crate) use flusher::FlusherHandle;
pub(crate) use log_dir_mover::LogDirMover;
pub(crate) use partition::{
    AppendError, Appended, IsrAnswer, LockedPartition, Partition, PartitionError, TxnVerification,
};
pub(crate) use quota::ReplicationQuotas;
pub(crate) use replica_manager::ReplicaManager;
