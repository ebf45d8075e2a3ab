//! Error values for decoding and encoding protocol messages.

/// Why a byte sequence could not be decoded. Every malformed input maps to one of these; the
/// decoder never panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("input truncated: needed {needed} bytes, {remaining} remaining")]
    Truncated { needed: usize, remaining: usize },
    #[error("invalid length {0}")]
    InvalidLength(i64),
    #[error("null value for a field that is not nullable in this version")]
    UnexpectedNull,
    #[error("array of {count} elements of at least {min_element_size} bytes exceeds the {remaining} bytes remaining")]
    ArrayTooLong {
        count: usize,
        min_element_size: usize,
        remaining: usize,
    },
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("varint is longer than its maximum encoded size")]
    VarintTooLong,
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{message} does not support version {version}")]
    UnsupportedVersion { message: &'static str, version: i16 },
}

/// Why a message could not be encoded in the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{message} does not support version {version}")]
    UnsupportedVersion { message: &'static str, version: i16 },
    #[error("field {field} is null but is not nullable in version {version}")]
    NullValue { field: &'static str, version: i16 },
    #[error("field {field} has a non-default value but does not exist in version {version}")]
    FieldNotSupported { field: &'static str, version: i16 },
    #[error("length {0} does not fit the field's length prefix")]
    TooLong(usize),
    #[error("external records {0} were not placed in the message exactly once")]
    ExternalRecordsNotPlaced(u32),
}
