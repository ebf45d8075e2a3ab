//! An async Kafka client built on `fjord-protocol`: connections that negotiate API versions,
//! cluster metadata and descriptions (brokers, the metadata quorum, log dirs), fetching a
//! partition's records, ACLs and SCRAM users, coordinator discovery, the admin calls for topics, configs, consumer groups and offsets,
//! and the consumer protocol's Subscription/Assignment formats.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod client;
mod cluster;
mod configs;
mod connection;
pub mod consumer_protocol;
mod error;
mod sasl;
pub mod security;
mod security_admin;
mod topics;

pub use client::{
    Broker, Client, ClusterMetadata, GroupDescription, GroupKind, GroupListing, ListedOffset,
    MemberDescription, OffsetAndMetadata, OffsetSpec, PartitionMetadata, TopicMetadata,
};
pub use cluster::{
    BrokerDescription, ClusterDescription, ConsumerRecord, FetchedRecords, LogDirDescription,
    QuorumDescription, QuorumReplica,
};
pub use configs::{config_source_name, ConfigChange, ConfigEntry, ConfigResource};
pub use connection::{ClientConfig, Connection};
pub use error::{is_retriable, ClientError};
pub use security::{OAuthToken, SaslLogin, Security, Stream};
pub use security_admin::{AclBinding, ScramUser};
pub use topics::{NewTopic, TopicOutcomes};
