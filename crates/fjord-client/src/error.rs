//! The error values every client call returns, and Kafka's names for wire error codes.

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
    #[error("{context}: {} ({code}){}", error_name(*.code), .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        context: String,
        code: i16,
        message: Option<String>,
    },
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

    pub(crate) fn kafka(context: impl Into<String>, code: i16, message: Option<String>) -> Self {
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

/// Kafka error codes the client reacts to.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
}

/// Kafka's name for an error code, as its clients print it.
pub fn error_name(code: i16) -> &'static str {
    match code {
        -1 => "UNKNOWN_SERVER_ERROR",
        0 => "NONE",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        12 => "OFFSET_METADATA_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        27 => "REBALANCE_IN_PROGRESS",
        28 => "INVALID_COMMIT_OFFSET_SIZE",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        35 => "UNSUPPORTED_VERSION",
        42 => "INVALID_REQUEST",
        56 => "KAFKA_STORAGE_ERROR",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        82 => "FENCED_INSTANCE_ID",
        86 => "GROUP_SUBSCRIBED_TO_TOPIC",
        88 => "UNSTABLE_OFFSET_COMMIT",
        100 => "UNKNOWN_TOPIC_ID",
        110 => "FENCED_MEMBER_EPOCH",
        113 => "STALE_MEMBER_EPOCH",
        _ => "UNKNOWN_ERROR_CODE",
    }
}

/// Whether Kafka's clients retry a call that failed with `code` (after finding the coordinator
/// or leader again).
pub fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        codes::LEADER_NOT_AVAILABLE
            | codes::NOT_LEADER_OR_FOLLOWER
            | codes::COORDINATOR_LOAD_IN_PROGRESS
            | codes::COORDINATOR_NOT_AVAILABLE
            | codes::NOT_COORDINATOR
    )
}
