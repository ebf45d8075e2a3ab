//! The metadata quorum's members as data: who a member is and where it is reached
//! ([`QuorumNode`]), the membership ([`QuorumMember`]) and what DescribeQuorum reports
//! ([`QuorumStatus`]). The quorum itself (openraft, the log, the network) is `fjord-quorum`;
//! the controller decides membership changes on these types without it.

use serde::{Deserialize, Serialize};

/// A member of the quorum as its membership records it: where its raft RPCs go and, for a
/// controller, the directory id of its metadata log dir (KIP-853 names a voter by node id and
/// directory id). Read from logs written before the directory id was kept, it is None.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumNode {
    /// `host:port` of the listener its raft RPCs go to.
    pub addr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory_id: Option<fjord_common::Uuid>,
    /// A broker following the log, reached on its inter-broker listener (and so secured as
    /// this node's inter-broker links are); otherwise a controller, on its controller listener.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub broker: bool,
}

impl QuorumNode {
    pub fn new(addr: impl Into<String>) -> Self {
        QuorumNode {
            addr: addr.into(),
            directory_id: None,
            broker: false,
        }
    }

    /// A broker reached on its inter-broker listener at `addr`.
    pub fn broker(addr: impl Into<String>) -> Self {
        QuorumNode {
            broker: true,
            ..QuorumNode::new(addr)
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

/// A member of the quorum as its membership entries record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumMember {
    pub node_id: u64,
    pub node: QuorumNode,
    /// A voter; otherwise a learner (an observer in Kafka's words).
    pub voter: bool,
}

/// The quorum as this node sees it, for DescribeQuorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub leader: Option<u64>,
    /// The raft term: the quorum's leader epoch.
    pub term: u64,
    /// Offset below which every entry is committed and applied here (exclusive, as Kafka's).
    pub high_watermark: u64,
    pub voters: Vec<ReplicaStatus>,
    /// Nodes that follow the log without voting (brokers).
    pub learners: Vec<ReplicaStatus>,
}

/// One member of the quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub node_id: u64,
    /// Where its raft RPCs go (its controller listener for a controller), and the directory id
    /// it was added with (None for a static quorum's voters, as Kafka's are).
    pub node: QuorumNode,
    /// Its log end offset (exclusive) as the leader last saw it; None when unknown (the leader
    /// has not heard from it, or this node does not lead).
    pub log_end_offset: Option<u64>,
    /// When it last answered the leader (ms since the epoch; the leader itself: now); None
    /// when unknown.
    pub last_fetch_ms: Option<i64>,
    /// When it last held every entry the leader had (ms since the epoch); None when unknown.
    pub last_caught_up_ms: Option<i64>,
}
