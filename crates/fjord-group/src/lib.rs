//! The group coordinator, sans-IO: classic consumer groups (JoinGroup/SyncGroup/Heartbeat/
//! LeaveGroup), KIP-848 consumer groups (ConsumerGroupHeartbeat), share groups (KIP-932:
//! ShareGroupHeartbeat, ShareGroupDescribe), and committed offsets.
//!
//! One `GroupCoordinatorShard` per `__consumer_offsets` partition. The broker feeds it requests
//! and the clock; it answers with `Effects`: records to append to its `__consumer_offsets`
//! partition and responses that may be sent once those records are durable. Loading a shard is
//! replaying its partition's records. No sockets, threads, files or wall clock in here.

use std::collections::BTreeMap;

use fjord_protocol::ResponseBody;

pub mod assignor;
mod classic;
mod config;
pub mod consumer_group;
mod error;
pub mod records;
mod shard;
pub mod share_group;
mod subscription;

pub use classic::GroupState;
pub use config::{partition_for, GroupConfig};
pub use error::GroupError;
pub use shard::{
    refusal, ClientInfo, CommittedOffset, GroupCoordinatorShard, GroupSummary,
    MAX_MEMBER_METADATA_BYTES,
};
pub use share_group::{ShareGroupTimeouts, ShareInit};

/// The first versions that name topics by id (KIP-516, KIP-848, KIP-1319): the broker fills
/// in their names before a shard sees them, leaving an unknown id's name empty.
pub const OFFSET_COMMIT_TOPIC_IDS_FROM: i16 = 10;
pub const OFFSET_FETCH_TOPIC_IDS_FROM: i16 = 10;
pub const TXN_OFFSET_COMMIT_TOPIC_IDS_FROM: i16 = 6;

/// Chosen by the broker per request so deferred responses (a JoinGroup waiting for the
/// rebalance) can be matched to their connection.
pub type RequestId = u64;

pub use fjord_common::CoordinatorRecord;

/// What handling an input produced. The broker appends `records` to the shard's partition and
/// sends `responses` only after the append is durable.
#[derive(Debug, Default)]
pub struct Effects {
    pub records: Vec<CoordinatorRecord>,
    pub responses: Vec<(RequestId, ResponseBody)>,
    /// Set when `records` are a transaction's offset commits (TxnOffsetCommit): they go into
    /// the partition as one transactional batch of that producer, decided later by its marker.
    pub transaction: Option<TxnProducer>,
    /// Share-partition state to initialize once `records` are written (KIP-932): the broker
    /// asks the share coordinator and reports back with
    /// `GroupCoordinatorShard::share_initialized`.
    pub share_inits: Vec<ShareInit>,
}

/// A transactional producer as its batches carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// A topic as the coordinator needs to know it (from the broker's metadata image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: fjord_common::TopicId,
    pub partitions: i32,
}

/// The cluster's topics, by name, as of the call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topics {
    pub by_name: BTreeMap<String, TopicInfo>,
}

impl Topics {
    pub fn get(&self, name: &str) -> Option<&TopicInfo> {
        self.by_name.get(name)
    }

    pub fn by_id(&self, topic_id: &fjord_common::TopicId) -> Option<&TopicInfo> {
        self.by_name.values().find(|t| &t.topic_id == topic_id)
    }
}
