//! The error type of the metadata quorum's public API.

use std::io;
use std::path::PathBuf;

use fjord_metadata::ImageError;

/// Why a metadata quorum operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file in the metadata directory failed its checksum or could not be decoded
    /// somewhere other than the torn tail of the log.
    #[error("corrupt metadata file {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// The metadata directory belongs to another cluster or node.
    #[error("metadata directory holds {field} {found}, but {expected} was requested")]
    IdentityMismatch {
        field: &'static str,
        expected: String,
        found: String,
    },
    /// A proposal with no records; it would only waste a log entry.
    #[error("a proposal must contain at least one record")]
    EmptyProposal,
    /// The proposal was committed at `offset` but violated an image invariant, so
    /// none of its records were applied.
    #[error("proposal at offset {offset} rejected: {source}")]
    Rejected {
        offset: u64,
        #[source]
        source: ImageError,
    },
    /// This node is not the metadata leader (only possible once there are several voters).
    #[error("not the metadata leader; the leader is {leader:?}")]
    NotLeader { leader: Option<u64> },
    /// A change of the quorum's members that raft refused (another under way, a node unknown).
    #[error("the quorum's membership cannot change so: {0}")]
    MembershipChange(String),
    #[error("timed out waiting for {what}")]
    Timeout { what: String },
    /// Raft itself failed (storage failure, shutdown, or an internal error).
    #[error("raft {operation} failed: {message}")]
    Raft {
        operation: &'static str,
        message: String,
    },
}

impl MetadataError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        MetadataError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn raft(operation: &'static str, error: impl std::fmt::Display) -> Self {
        MetadataError::Raft {
            operation,
            message: error.to_string(),
        }
    }
}
