//! Kafka record batches, magic v2 only: header access, record parsing and encoding,
//! compression codecs, produce-path validation and the in-place rewrites the broker makes when
//! it appends a batch to a partition.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod append;
pub mod builder;
pub mod compact;
pub mod compression;
pub mod control;
pub mod header;
pub mod record;
pub mod validate;
pub mod varint;

pub use append::{assign_offsets, recompress, set_log_append_time, set_max_timestamp, AppendBatch};
pub use builder::BatchBuilder;
pub use compression::{compress, decompress, Compression};
pub use header::{BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};
pub use record::{Header, Record, RecordRef, RecordRefIter, Records};
pub use validate::{
    records, split_batches, validate_batch, AppendOrigin, TimestampType, ValidatedBatch,
    ValidationConfig,
};

/// Why one record of a batch was refused; Kafka reports these per record in a produce
/// response (`record_errors`), with the index of the record within its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub kind: RecordErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// The topic is compacted and the record has a null key.
    MissingKey,
    /// A CreateTime timestamp outside `message.timestamp.before.max.ms` / `after.max.ms`.
    TimestampOutOfRange { timestamp: i64 },
    /// The producer marked the batch LogAppendTime, which only the broker may set.
    LogAppendTimeFromProducer,
}

impl RecordErrorKind {
    pub fn message(&self) -> &'static str {
        match self {
            RecordErrorKind::MissingKey => "compacted topic cannot accept a record without a key",
            RecordErrorKind::TimestampOutOfRange { .. } => {
                "record timestamp is out of the accepted range"
            }
            RecordErrorKind::LogAppendTimeFromProducer => {
                "producer must not set timestamp type LogAppendTime"
            }
        }
    }
}

/// Why a batch was refused. Each maps to one Kafka error code via [`RecordsError::kafka_error_code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    #[error("record batch truncated")]
    Truncated,
    #[error("unsupported record batch magic {0}; only magic 2 is accepted")]
    UnsupportedMagic(i8),
    #[error("invalid batch length {0}")]
    InvalidBatchLength(i32),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("corrupt record batch: {0}")]
    Corrupt(&'static str),
    /// Structurally invalid records, or a batch header inconsistent with them.
    #[error("invalid record: {0}")]
    InvalidRecord(&'static str),
    #[error("record batch of {size} bytes exceeds the maximum of {max}")]
    MessageTooLarge { size: usize, max: usize },
    #[error("unsupported compression type id {0}")]
    UnsupportedCompression(i16),
    #[error("decompression failed: {0}")]
    DecompressionFailed(&'static str),
    #[error("decompressed records exceed the limit of {max} bytes")]
    DecompressedTooLarge { max: usize },
    #[error("compression failed: {0}")]
    CompressionFailed(&'static str),
    /// Records that parsed but were refused; the batch is rejected as a whole.
    #[error("{} record(s) rejected, first: {}", .0.len(), .0.first().map_or("", |e| e.kind.message()))]
    RecordErrors(Vec<RecordError>),
}

impl RecordsError {
    /// The Kafka error code a produce response carries for this error, following what the Java
    /// broker answers for the same input.
    pub fn kafka_error_code(&self) -> i16 {
        use fjord_common::errors::*;
        match self {
            // A short buffer, a bad length or CRC is a CorruptRecordException in Kafka.
            RecordsError::Truncated
            | RecordsError::InvalidBatchLength(_)
            | RecordsError::CrcMismatch { .. }
            | RecordsError::Corrupt(_)
            | RecordsError::DecompressionFailed(_) => CORRUPT_MESSAGE,
            // Produce v3+ must carry magic v2; Kafka refuses others with InvalidRecordException.
            RecordsError::UnsupportedMagic(_) | RecordsError::InvalidRecord(_) => INVALID_RECORD,
            // A Java producer splits a batch refused with MESSAGE_TOO_LARGE, which is also the
            // useful answer when the decompressed records exceed the broker's limit.
            RecordsError::MessageTooLarge { .. } | RecordsError::DecompressedTooLarge { .. } => {
                MESSAGE_TOO_LARGE
            }
            RecordsError::UnsupportedCompression(_) => UNSUPPORTED_COMPRESSION_TYPE,
            RecordsError::CompressionFailed(_) => UNKNOWN_SERVER_ERROR,
            // Any timestamp error makes Kafka answer INVALID_TIMESTAMP for the whole batch.
            RecordsError::RecordErrors(errors) => {
                if errors.iter().any(|e| {
                    matches!(
                        e.kind,
                        RecordErrorKind::TimestampOutOfRange { .. }
                            | RecordErrorKind::LogAppendTimeFromProducer
                    )
                }) {
                    INVALID_TIMESTAMP
                } else {
                    INVALID_RECORD
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_follow_kafka() {
        assert_eq!(
            RecordsError::CrcMismatch {
                stored: 1,
                computed: 2
            }
            .kafka_error_code(),
            2
        );
        assert_eq!(RecordsError::UnsupportedMagic(1).kafka_error_code(), 87);
        assert_eq!(
            RecordsError::MessageTooLarge { size: 2, max: 1 }.kafka_error_code(),
            10
        );
        assert_eq!(
            RecordsError::UnsupportedCompression(5).kafka_error_code(),
            76
        );
        let key = RecordError {
            batch_index: 0,
            kind: RecordErrorKind::MissingKey,
        };
        let ts = RecordError {
            batch_index: 1,
            kind: RecordErrorKind::TimestampOutOfRange { timestamp: 0 },
        };
        assert_eq!(RecordsError::RecordErrors(vec![key]).kafka_error_code(), 87);
        assert_eq!(
            RecordsError::RecordErrors(vec![key, ts]).kafka_error_code(),
            32
        );
    }
}
