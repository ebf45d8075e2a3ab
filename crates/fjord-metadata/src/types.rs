//! The openraft type configuration of the metadata quorum: what a log entry
//! carries and what applying one answers.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::image::ImageError;
use crate::record::MetadataRecord;

/// The application payload of one raft entry: records applied atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Proposal {
    pub(crate) records: Vec<MetadataRecord>,
}

/// A member of the quorum as its membership records it: where its raft RPCs go and, for a
/// controller, the directory id of its metadata log dir (KIP-853 names a voter by node id and
/// directory id). Read from logs written before the directory id was kept, it is None.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumNode {
    /// `host:port` of the listener its raft RPCs go to.
    pub addr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory_id: Option<fjord_common::Uuid>,
}

impl QuorumNode {
    pub fn new(addr: impl Into<String>) -> Self {
        QuorumNode {
            addr: addr.into(),
            directory_id: None,
        }
    }

    /// Host (an IPv6 one without its brackets) and port of `addr`, for answers that carry them
    /// apart; None if `addr` is not `host:port`.
    pub fn endpoint(&self) -> Option<(String, u16)> {
        let (host, port) = self.addr.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some((host.to_string(), port.parse().ok()?))
    }
}

impl std::fmt::Display for QuorumNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
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
