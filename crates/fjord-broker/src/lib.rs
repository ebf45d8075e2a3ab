//! The fjord broker. `run` starts a node (broker, controller, or both) from its config and
//! returns after a clean shutdown.
//!
//! The crate is in layers, each a folder; a layer imports only those below it (checked by
//! `tests/layers.rs`):
//! - `metrics`: the counters and histograms the layers above move, for Prometheus;
//! - `net`: connections, frames and per-connection sequencing, generic over `net::Dispatch`;
//! - `link`: connections to other nodes (the active controller, peer brokers);
//! - `replication`: the hosted partitions, their logs and replication state, the follower
//!   fetchers, the ISR manager, the flusher, throttles, the log-dir mover;
//! - `coordinator`: the runtime hosting the group and transaction coordinators' shards;
//! - `api`: the Kafka APIs, one module per family, and request dispatch;
//! - `server`: start-up in phases, registration and heartbeats, housekeeping, shutdown.

mod api;
mod coordinator;
mod link;
mod metrics;
mod net;
mod quota;
mod replication;
mod server;

pub use api::versions::SUPPORTED_APIS;
pub use replication::partition_state;
pub use server::{run, BrokerError, METADATA_DIR_NAME};
