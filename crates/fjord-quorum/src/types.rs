//! The openraft type configuration of the metadata quorum: what a log entry
//! carries and what applying one answers.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use fjord_metadata::{ImageError, MetadataRecord, QuorumNode};

/// The application payload of one raft entry: records applied atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Proposal {
    pub(crate) records: Vec<MetadataRecord>,
}

/// The outcome of applying one entry: every record applied, or none and why.
pub(crate) type ApplyResult = Result<(), ImageError>;

openraft::declare_raft_types!(
    /// Raft types of the metadata quorum. Node ids are Kafka node ids.
    pub(crate) TypeConfig:
        D = Proposal,
        R = ApplyResult,
        NodeId = u64,
        Node = QuorumNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub(crate) type LogId = openraft::LogId<u64>;
pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type StorageError = openraft::StorageError<u64>;
pub(crate) type StoredMembership = openraft::StoredMembership<u64, QuorumNode>;
pub(crate) type SnapshotMeta = openraft::SnapshotMeta<u64, QuorumNode>;
