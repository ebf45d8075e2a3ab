//! [`MetadataQuorum`]: runs openraft over the metadata log in one directory and
//! publishes the image that results from applying it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config, Raft, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::MetadataError;
use crate::frame;
use crate::image::MetadataImage;
use crate::log_store::LogStore;
use crate::network::UnreachableNetwork;
use crate::record::MetadataRecord;
use crate::state_machine::StateMachine;
use crate::types::{Proposal, TypeConfig};

#[cfg(test)]
mod tests;

/// Records which cluster and node a metadata directory belongs to, like the
/// `cluster.id` and `node.id` of Kafka's `meta.properties`.
const IDENTITY_FILE: &str = "quorum.json";

#[derive(Serialize, Deserialize, PartialEq)]
struct Identity {
    cluster_id: String,
    node_id: u64,
}

/// Tuning of a [`MetadataQuorum`]; [`QuorumConfig::default`] suits a broker.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// Take a snapshot of the image once this many entries were applied since the last one.
    pub snapshot_every: u64,
    /// Entries already covered by a snapshot that stay in the log after a purge.
    pub entries_kept_after_snapshot: u64,
    /// How long `start` waits for this node to lead and catch up.
    pub leader_timeout: Duration,
}

impl Default for QuorumConfig {
    fn default() -> Self {
        Self {
            snapshot_every: 10_000,
            entries_kept_after_snapshot: 1_000,
            leader_timeout: Duration::from_secs(30),
        }
    }
}

/// The metadata log and its applied image on this node.
pub struct MetadataQuorum {
    raft: Raft<TypeConfig>,
    image_rx: watch::Receiver<Arc<MetadataImage>>,
}

impl MetadataQuorum {
    /// Opens (or creates) the metadata log under `metadata_dir` with the default
    /// [`QuorumConfig`]; see [`MetadataQuorum::start_with_config`].
    pub async fn start(
        metadata_dir: &Path,
        node_id: u64,
        cluster_id: &str,
    ) -> Result<MetadataQuorum, MetadataError> {
        Self::start_with_config(metadata_dir, node_id, cluster_id, QuorumConfig::default()).await
    }

    /// Opens (or creates) the metadata log under `metadata_dir`, makes this node
    /// the single voter on first start, replays the snapshot and log, and returns
    /// once this node leads and its image reflects every entry in the log.
    pub async fn start_with_config(
        metadata_dir: &Path,
        node_id: u64,
        cluster_id: &str,
        config: QuorumConfig,
    ) -> Result<MetadataQuorum, MetadataError> {
        std::fs::create_dir_all(metadata_dir).map_err(|e| MetadataError::io(metadata_dir, e))?;
        check_identity(metadata_dir, node_id, cluster_id)?;

        let log_store = LogStore::open(metadata_dir)?;
        let (state_machine, image_rx) = StateMachine::open(metadata_dir)?;
        let raft_config = Config {
            cluster_name: cluster_id.to_owned(),
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every.max(1)),
            max_in_snapshot_log_to_keep: config.entries_kept_after_snapshot,
            // Purge as soon as a snapshot allows it; purges are already rare.
            purge_batch_size: 1,
            ..Config::default()
        }
        .validate()
        .map_err(|e| MetadataError::raft("config", e))?;

        let raft = Raft::new(
            node_id,
            Arc::new(raft_config),
            UnreachableNetwork::factory(),
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| MetadataError::raft("start", e))?;

        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| MetadataError::raft("start", e))?;
        if initialized {
            // A lone voter would elect itself on the next tick anyway; asking now
            // saves that wait on every restart.
            raft.trigger()
                .elect()
                .await
                .map_err(|e| MetadataError::raft("elect", e))?;
        } else {
            let voters = BTreeMap::from([(node_id, BasicNode::default())]);
            raft.initialize(voters)
                .await
                .map_err(|e| MetadataError::raft("initialize", e))?;
        }

        raft.wait(Some(config.leader_timeout))
            .metrics(
                |m| {
                    m.state == ServerState::Leader
                        && m.current_leader == Some(node_id)
                        && m.last_applied.map(|id| id.index) >= m.last_log_index
                },
                "metadata leadership",
            )
            .await
            .map_err(|e| MetadataError::Timeout {
                what: e.to_string(),
            })?;

        Ok(MetadataQuorum { raft, image_rx })
    }

    /// Appends `records` as one log entry and returns its offset once the entry
    /// is committed (durable) and applied to the image. Either every record is
    /// applied or, if one breaks an image invariant, none is
    /// ([`MetadataError::Rejected`]).
    pub async fn propose(&self, records: Vec<MetadataRecord>) -> Result<u64, MetadataError> {
        if records.is_empty() {
            return Err(MetadataError::EmptyProposal);
        }
        match self.raft.client_write(Proposal { records }).await {
            Ok(response) => match response.data {
                Ok(()) => Ok(response.log_id.index),
                Err(source) => Err(MetadataError::Rejected {
                    offset: response.log_id.index,
                    source,
                }),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(MetadataError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(e) => Err(MetadataError::raft("write", e)),
        }
    }

    /// Whether this node leads the quorum: it is the active controller.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// The node this node believes leads the quorum, if any.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// The latest applied image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image_rx.borrow().clone()
    }

    /// Notifies of every newly applied image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.image_rx.clone()
    }

    /// Stops raft; everything committed is already durable.
    pub async fn shutdown(self) -> Result<(), MetadataError> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| MetadataError::raft("shutdown", e))
    }

    /// Raft progress of this node, for tests and diagnostics.
    #[cfg(test)]
    pub(crate) fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }
}

/// Records the cluster and node id on first start; refuses a directory that
/// belongs to another cluster or node.
fn check_identity(dir: &Path, node_id: u64, cluster_id: &str) -> Result<(), MetadataError> {
    let path = dir.join(IDENTITY_FILE);
    let wanted = Identity {
        cluster_id: cluster_id.to_owned(),
        node_id,
    };
    let corrupt = |reason: String| MetadataError::Corrupt {
        path: path.clone(),
        reason,
    };
    match frame::read_optional(&path).map_err(|e| MetadataError::io(&path, e))? {
        None => {
            let json = serde_json::to_vec(&wanted).map_err(|e| corrupt(e.to_string()))?;
            let bytes = frame::encode(&json).map_err(|e| MetadataError::io(&path, e))?;
            frame::write_atomic(dir, IDENTITY_FILE, &bytes).map_err(|e| MetadataError::io(&path, e))
        }
        Some(bytes) => {
            let payload =
                frame::decode_single(&bytes).ok_or_else(|| corrupt("bad frame".into()))?;
            let found: Identity =
                serde_json::from_slice(payload).map_err(|e| corrupt(e.to_string()))?;
            if found.cluster_id != wanted.cluster_id {
                return Err(MetadataError::IdentityMismatch {
                    field: "cluster id",
                    expected: wanted.cluster_id,
                    found: found.cluster_id,
                });
            }
            if found.node_id != wanted.node_id {
                return Err(MetadataError::IdentityMismatch {
                    field: "node id",
                    expected: wanted.node_id.to_string(),
                    found: found.node_id.to_string(),
                });
            }
            Ok(())
        }
    }
}
