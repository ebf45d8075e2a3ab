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
mod election;
mod isr;
mod membership;
pub mod placement;
pub mod plan;
mod quorum_controller;
mod reassignment;

pub use apis::{
    error_response, is_not_controller, Controller, ControllerApi, ControllerRequest, Decision,
    PRODUCER_ID_BLOCK,
};
pub use quorum_controller::{ControllerError, QuorumController};
