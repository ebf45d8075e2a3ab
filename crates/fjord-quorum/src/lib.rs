//! The metadata quorum and the controller's shell: the async, openraft half of KRaft for fjord.
//!
//! - [`MetadataQuorum`]: runs openraft over the metadata log in one directory (a durable
//!   CRC-framed log, a vote file, snapshots of the image), carries the raft RPCs over TCP
//!   (`network`) and publishes each applied `fjord_metadata::MetadataImage`.
//! - [`QuorumController`]: runs `fjord_controller::Controller`'s decisions on this node, one at a
//!   time, each committed through the quorum before the next.
//!
//! The quorum is the voters of `controller.quorum.voters` (or this node alone), with brokers that
//! are not voters following the log as learners. The records, the image and the members as data
//! are `fjord-metadata`'s, sans-IO.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod error;
mod follower_times;
mod frame;
mod leadership;
mod log_store;
mod network;
mod quorum;
mod quorum_controller;
mod state_machine;
mod types;

pub use error::MetadataError;
pub use leadership::LeadershipStats;
pub use network::{check_raft_frame, is_raft_frame, MAX_RAFT_FRAME, RAFT_API_KEY};
pub use quorum::{DynamicQuorum, MetadataQuorum, QuorumConfig, QuorumLinks, QuorumPeers};
pub use quorum_controller::QuorumController;
