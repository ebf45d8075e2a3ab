//! Cluster metadata for fjord, kept the way KRaft keeps `__cluster_metadata`:
//! topics, partitions, configs, brokers and producer-id blocks are
//! [`MetadataRecord`]s in a raft-replicated log, applied in order
//! to an immutable [`MetadataImage`] that the rest of the broker reads.
//!
//! - [`record`]: the record types.
//! - [`image`]: the image and the delta that checks and applies records.
//! - [`acl`]: ACLs and the authorizer's decision.
//! - [`quota`]: client quotas and the precedence they are looked up by.
//! - [`members`]: the quorum's members and status as data.
//!
//! Sans-IO: no tokio, no files, no raft. The quorum that stores the log durably, runs raft and
//! publishes each applied image is `fjord-quorum`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod acl;
pub mod image;
pub mod members;
pub mod quota;
pub mod record;

pub use image::{
    BrokerRegistration, ImageChanges, ImageError, MetadataDelta, MetadataImage, PartitionImage,
    TopicImage,
};
pub use members::{QuorumMember, QuorumNode, QuorumStatus, ReplicaStatus};
pub use record::*;
