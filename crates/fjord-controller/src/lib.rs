//! The controller of a fjord cluster, as KRaft's: it decides every change to the cluster's
//! metadata — topics, partitions and their replicas, dynamic configs, producer-id blocks, broker
//! registrations — as records committed to the metadata log, and only the active controller
//! (the metadata quorum's leader) decides. Brokers forward such requests to it.
//!
//! - [`plan`]: the decisions, pure: an image and a request in, records or a Kafka error out.
//! - [`Controller`] (`apis`, `config_admin`, `scram_admin`, `token_admin`, `acl_admin`, `quota_admin`): Kafka requests to decisions, sans-IO.
//! - [`voters`]: changes of the quorum's members (KIP-853), checked.
//!
//! No tokio, no raft, no storage: the time comes in as an argument (only
//! [`ControllerRequest::new`] reads the clock, to stamp a deadline). The async shell — one queue,
//! one decision at a time, each committed through the metadata quorum before the next is made —
//! is `fjord_quorum::QuorumController`.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod acl_admin;
mod apis;
mod config_admin;
mod decision;
mod election;
mod error;
mod isr;
mod membership;
pub mod placement;
pub mod plan;
mod quota_admin;
mod reassignment;
mod refusal;
mod scram_admin;
mod token_admin;
pub mod voters;

pub use apis::{
    error_response, is_not_controller, Controller, ControllerApi, ControllerRequest,
    PRODUCER_ID_BLOCK,
};
pub use decision::Decision;
pub use error::ControllerError;
pub use token_admin::{parse_principal, token_owner, REQUESTER_FROM_VERSION};

#[cfg(test)]
mod testing {
    use fjord_common::Uuid;
    use fjord_metadata::{MetadataRecord, RegisterBrokerRecord};

    /// Registrations of brokers `ids`, at the broker epoch `epoch` gives, fenced where `fenced`
    /// says.
    pub fn registered(
        ids: std::ops::RangeInclusive<i32>,
        epoch: impl Fn(i32) -> i64,
        fenced: impl Fn(i32) -> bool,
    ) -> Vec<MetadataRecord> {
        ids.map(|id| {
            MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: Uuid([id as u8; 16]),
                broker_epoch: epoch(id),
                endpoints: Vec::new(),
                rack: None,
                fenced: fenced(id),
                in_controlled_shutdown: false,
            })
        })
        .collect()
    }
}
