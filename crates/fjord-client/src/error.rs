//! The error values every client call returns, and Kafka's names for wire error codes.

use fjord_common::errors;
use fjord_protocol::{ApiKey, DecodeError, EncodeError};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("i/o error talking to {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{api} request to {addr} timed out after {timeout_ms} ms")]
    Timeout {
        api: &'static str,
        addr: String,
        timeout_ms: u128,
    },
    #[error("connection to {0} is closed after an earlier failure")]
    Closed(String),
    #[error("response of {size} bytes from {addr} exceeds the {limit} byte limit")]
    ResponseTooLarge {
        addr: String,
        size: i64,
        limit: usize,
    },
    #[error("response from {addr} carries correlation id {got}, expected {expected}")]
    CorrelationMismatch {
        addr: String,
        expected: i32,
        got: i32,
    },
    #[error("cannot decode {what}: {source}")]
    Decode {
        what: &'static str,
        source: DecodeError,
    },
    #[error("cannot encode request: {0}")]
    Encode(#[from] EncodeError),
    #[error("broker {addr} supports no version of {api} that this client speaks")]
    UnsupportedApi { api: &'static str, addr: String },
    #[error("{context}: {} ({code}){}", errors::name(*.code), .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        context: String,
        code: i16,
        message: Option<String>,
    },
    #[error("SASL login at {addr} failed: {reason}")]
    Authentication { addr: String, reason: String },
    #[error("malformed {0}")]
    Malformed(String),
}

impl ClientError {
    /// The Kafka error code carried by a broker's answer, if that is what this error is.
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A broker's answer of error `code` to the request `context` names.
    pub fn kafka(context: impl Into<String>, code: i16, message: Option<String>) -> Self {
        ClientError::Kafka {
            context: context.into(),
            code,
            message,
        }
    }

    pub(crate) fn unexpected(api: ApiKey) -> Self {
        ClientError::Malformed(format!("response: not a {} response", api.name()))
    }
}

/// Whether Kafka's clients retry a call that failed with `code` (after finding the coordinator
/// or leader again).
pub fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        errors::LEADER_NOT_AVAILABLE
            | errors::NOT_LEADER_OR_FOLLOWER
            | errors::COORDINATOR_LOAD_IN_PROGRESS
            | errors::COORDINATOR_NOT_AVAILABLE
            | errors::NOT_COORDINATOR
    )
}
