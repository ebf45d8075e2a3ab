//! Errors of the transaction coordinator's own inputs: `__transaction_state` records that cannot
//! be read or written. Request-level failures are Kafka error codes in answers, not these.

use fjord_protocol::{DecodeError, EncodeError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("malformed transaction state record: {0}")]
    Decode(#[from] DecodeError),
    #[error("transaction state record cannot be encoded: {0}")]
    Encode(#[from] EncodeError),
    #[error("unknown transaction state key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unsupported transaction state value version {0}")]
    UnsupportedValueVersion(i16),
    #[error("unknown transaction status {0}")]
    UnknownStatus(i8),
    #[error("{0} trailing bytes after a transaction state key or value")]
    TrailingBytes(usize),
}
