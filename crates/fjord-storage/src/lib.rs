//! Partition logs in Kafka's on-disk layout.

// Owned by the log engineer: segment files, indexes, the partition log and the log manager.
pub mod cleaner;
pub mod error;
pub mod file_io;
pub mod future_log;
pub mod index;
pub mod lock_order;
pub mod log;
pub mod log_manager;
pub mod parallel;
pub mod segment;
pub mod txn_index;

// Owned by the storage-support engineer: small files and state kept beside the log.
pub mod checkpoint;
pub mod leader_epoch;
pub mod meta_properties;
pub mod partition_metadata;
pub mod producer_state;

pub use cleaner::{CleanerConfig, CleanerTotals, LogCleaner};
pub use error::StorageError;
pub use index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
pub use log::{
    AppendInfo, CleanableLog, CleaningSources, CompactionConfig, FlushTicket, Log, LogConfig,
    ReadInfo, RecoveryStats, SegmentSource, TimestampAndOffset,
};
pub use log_manager::{remove_retired_dirs, LogManager, Retire, StartupReport};
pub use segment::{FileSlice, LogSegment};
