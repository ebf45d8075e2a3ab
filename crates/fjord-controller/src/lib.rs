//! The controller of a fjord cluster, as KRaft's: it decides every change to the cluster's
//! metadata — topics, partitions and their replicas, dynamic configs, producer-id blocks, broker
//! registrations — as records committed to the metadata log, and only the active controller
//! (the metadata quorum's leader) decides. Brokers forward such requests to it.
//!
//! - [`plan`]: the decisions, pure: an image and a request in, records or a Kafka error out.
//! - [`Controller`] (`apis`, `config_admin`): Kafka requests to decisions, sans-IO.
//! - [`QuorumController`]: the async shell — one queue, one decision at a time, each committed
//!   through the [`fjord_metadata::MetadataQuorum`] before the next is made.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod apis;
mod config_admin;
mod decision;
mod election;
mod isr;
mod membership;
pub mod placement;
pub mod plan;
mod quorum_controller;
mod reassignment;
mod voters;

pub use apis::{
    error_response, is_not_controller, Controller, ControllerApi, ControllerRequest,
    PRODUCER_ID_BLOCK,
};
pub use decision::Decision;
pub use quorum_controller::{ControllerError, QuorumController};

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
