//! Kafka record batches, magic v2 only.

pub mod header;

pub use header::{BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};

/// Why a batch was refused. Each maps to one Kafka error code in the broker.
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
}
