//! The transaction coordinator, sans-IO: transactional ids, their producer ids and epochs, and
//! the two-phase commit of a transaction across partitions, as Kafka's coordinator does it.
//!
//! One [`TransactionCoordinatorShard`] per `__transaction_state` partition. The broker feeds it
//! requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and the clock; a
//! change comes back as a record to append to the partition, and only once that record is
//! durable does the shard take the new state, answer, and ask for the commit or abort markers
//! to be written on every partition of the transaction. Loading a shard is replaying its
//! partition; a transaction found prepared has its markers written again. No sockets, threads,
//! files or wall clock in here.

mod error;
pub mod records;
mod shard;
mod state;

pub use error::TxnError;
pub use shard::{
    Answer, MarkerJob, ProducerAnswer, Step, TransactionCoordinatorShard, TxnConfig, Write, Written,
};
pub use state::{
    epoch_exhausted, TxnFields, TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};

/// The topic the coordinator keeps transactions in.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition that owns `transactional_id`, as Kafka places it.
pub fn partition_for(transactional_id: &str, num_partitions: i32) -> i32 {
    fjord_common::coordinator_partition(transactional_id, num_partitions)
}
