//! Cluster metadata for fjord, kept the way KRaft keeps `__cluster_metadata`:
//! topics, partitions, configs, brokers and producer-id blocks are
//! [`MetadataRecord`]s in a raft-replicated log (via openraft), applied in order
//! to an immutable [`MetadataImage`] that the rest of the broker reads.
//!
//! - [`record`]: the record types.
//! - [`image`]: the image and the delta that checks and applies records.
//! - [`MetadataQuorum`]: the async shell that stores the log durably, runs raft
//!   and publishes each applied image.
//!
//! The quorum is the voters of `controller.quorum.voters` (or this node alone), with brokers that
//! are not voters following the log as learners; raft RPCs travel over TCP (`network`).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod error;
mod follower_times;
mod frame;
pub mod image;
mod log_store;
mod network;
mod quorum;
pub mod record;
mod state_machine;
mod types;

pub use error::MetadataError;
pub use image::{
    BrokerRegistration, ImageChanges, ImageError, MetadataDelta, MetadataImage, PartitionImage,
    TopicImage,
};
pub use network::{check_raft_frame, is_raft_frame, MAX_RAFT_FRAME, RAFT_API_KEY};
pub use quorum::{
    DynamicQuorum, MetadataQuorum, QuorumConfig, QuorumMember, QuorumPeers, QuorumStatus,
    ReplicaStatus,
};
pub use record::*;
pub use types::QuorumNode;
