//! Errors of the group coordinator's own inputs: `__consumer_offsets` records that cannot be
//! read or written. Request-level failures are Kafka error codes in responses, not these.

use fjord_protocol::{DecodeError, EncodeError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("malformed coordinator record: {0}")]
    Decode(#[from] DecodeError),
    #[error("coordinator record cannot be encoded: {0}")]
    Encode(#[from] EncodeError),
    /// A key version this coordinator does not know (e.g. share group records); loading skips
    /// these, as Kafka's loader does.
    #[error("unknown coordinator record type {0}")]
    UnknownRecordType(i16),
    #[error("record of type {record_type} has unsupported value version {version}")]
    UnsupportedValueVersion { record_type: i16, version: i16 },
    #[error("{0} trailing bytes after a coordinator record key or value")]
    TrailingBytes(usize),
}
