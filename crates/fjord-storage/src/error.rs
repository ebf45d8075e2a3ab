//! The error type of the storage layer and its mapping onto Kafka error codes.

use std::io;
use std::path::{Path, PathBuf};

use fjord_common::errors;
use fjord_records::RecordsError;

use crate::checkpoint::CheckpointError;
use crate::leader_epoch::LeaderEpochError;
use crate::partition_metadata::PartitionMetadataError;
use crate::producer_state::ProducerStateError;

/// Everything that can go wrong in segment, log and log-manager operations.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("offset {requested} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        requested: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("corrupt data in {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid record batch: {0}")]
    InvalidRecord(#[from] RecordsError),
    #[error("record batch of {size} bytes exceeds the segment size {segment_bytes}")]
    RecordBatchTooLarge { size: usize, segment_bytes: u64 },
    #[error("the log in {0} is closed")]
    LogClosed(PathBuf),
    /// A write or fsync failed in the log dir holding this log: the dir was taken offline.
    #[error("the log dir holding {0} is offline after an I/O failure")]
    LogDirOffline(PathBuf),
    /// AlterReplicaLogDirs named a directory that is not one of `log.dirs`.
    #[error("log dir {0} is not found in the config")]
    LogDirNotFound(PathBuf),
    /// No log of this partition lives on this broker.
    #[error("no log of {0} on this broker")]
    NoSuchLog(String),
    #[error("{0} is not a valid partition directory name")]
    InvalidPartitionDir(String),
    #[error("no log directories were given")]
    NoLogDirs,
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    LeaderEpoch(#[from] LeaderEpochError),
    #[error(transparent)]
    PartitionMetadata(#[from] PartitionMetadataError),
    /// A sequence or epoch check refused the batch, or producer snapshots failed.
    #[error(transparent)]
    ProducerState(#[from] ProducerStateError),
}

/// Lets `Log::append_as_leader` take batches whose conversion cannot fail.
impl From<std::convert::Infallible> for StorageError {
    fn from(never: std::convert::Infallible) -> StorageError {
        match never {}
    }
}

impl StorageError {
    /// The Kafka protocol error code a client should see for this failure.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            StorageError::ProducerState(e) => e.kafka_error_code(),
            StorageError::OffsetOutOfRange { .. } => errors::OFFSET_OUT_OF_RANGE,
            StorageError::InvalidRecord(_) => errors::CORRUPT_MESSAGE,
            // Kafka's answer when one batch cannot fit a segment.
            StorageError::RecordBatchTooLarge { .. } => errors::MESSAGE_TOO_LARGE,
            StorageError::NoSuchLog(_) => errors::REPLICA_NOT_AVAILABLE,
            StorageError::LogDirNotFound(_) => errors::LOG_DIR_NOT_FOUND,
            // The replica cannot serve until the disk problem is resolved.
            StorageError::Io { .. }
            | StorageError::Corrupt { .. }
            | StorageError::LogClosed(_)
            | StorageError::LogDirOffline(_)
            | StorageError::InvalidPartitionDir(_)
            | StorageError::NoLogDirs
            | StorageError::Checkpoint(_)
            | StorageError::LeaderEpoch(_)
            | StorageError::PartitionMetadata(_) => errors::KAFKA_STORAGE_ERROR,
        }
    }

    /// A failure of the disk (or filesystem) under a log: the log dir cannot be trusted with
    /// more writes, as Kafka judges an IOException.
    pub fn is_disk_failure(&self) -> bool {
        matches!(self, StorageError::Io { .. })
    }

    pub(crate) fn corrupt(path: &Path, reason: impl Into<String>) -> StorageError {
        StorageError::Corrupt {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// Attaches the path an I/O operation touched to its error.
pub(crate) trait IoResultExt<T> {
    fn at(self, path: &Path) -> Result<T, StorageError>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T, StorageError> {
        self.map_err(|source| StorageError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
