//! [`MetadataQuorum`]: runs openraft over the metadata log in one directory and
//! publishes the image that results from applying it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fjord_metadata::{
    MetadataImage, MetadataRecord, QuorumMember, QuorumNode, QuorumStatus, ReplicaStatus,
};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::MetadataError;
use crate::follower_times::FollowerTimes;
use crate::frame;
use crate::leadership::{Leadership, LeadershipStats};
use crate::log_store::LogStore;
use crate::network::{self, RaftReply, RaftRequest, TcpNetwork};
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

/// Who else is in the quorum: the voters of `controller.quorum.voters` (a static quorum), or
/// how this node takes part in a dynamic one (KIP-853, `controller.quorum.bootstrap.servers`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuorumPeers {
    /// Voters by node id, each with the `host:port` of its controller listener. Empty, without
    /// `dynamic`: this node is its own lone voter (a one-node cluster).
    pub voters: BTreeMap<u64, String>,
    pub dynamic: Option<DynamicQuorum>,
}

/// How a node of a dynamic quorum starts when its metadata log is new; a log that exists
/// carries its voters in its own membership entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DynamicQuorum {
    /// This node begins the quorum as its only voter, reached as `node` (what Kafka's
    /// `kafka-storage format --standalone` sets up); more voters are added later.
    Standalone(QuorumNode),
    /// The quorum exists elsewhere: this node waits until the leader adds it (as a learner when
    /// it registers, as a voter when AddRaftVoter asks).
    Join,
}

impl QuorumPeers {
    /// This node alone.
    pub fn alone() -> Self {
        Self::default()
    }

    fn is_alone(&self) -> bool {
        self.voters.is_empty() && self.dynamic.is_none()
    }
}

/// Tuning of a [`MetadataQuorum`]; [`QuorumConfig::default`] suits a broker.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// Take a snapshot of the image once records of this many bytes were applied since the last
    /// one (`metadata.log.max.record.bytes.between.snapshots`).
    pub max_bytes_between_snapshots: u64,
    /// Take one anyway when anything was applied and the last is this old
    /// (`metadata.log.max.snapshot.interval.ms`; None: never for age alone).
    pub max_snapshot_interval: Option<Duration>,
    /// Once the log is larger than this, every entry a snapshot covers is purged
    /// (`metadata.max.retention.bytes`), however many `entries_kept_after_snapshot` asks for.
    pub max_retained_log_bytes: u64,
    /// Entries already covered by a snapshot that stay in the log after a purge.
    pub entries_kept_after_snapshot: u64,
    /// How long `start` waits for this node to lead and catch up.
    pub leader_timeout: Duration,
    /// How raft RPCs to the other members are secured.
    pub links: QuorumLinks,
}

/// How this node's raft RPCs are secured: to a controller on its controller listener, to a
/// broker following the log on its inter-broker listener.
#[derive(Debug, Clone, Default)]
pub struct QuorumLinks {
    pub voters: fjord_client::Security,
    pub learners: fjord_client::Security,
}

impl Default for QuorumConfig {
    fn default() -> Self {
        // Kafka's defaults.
        Self {
            max_bytes_between_snapshots: 20 * 1024 * 1024,
            max_snapshot_interval: Some(Duration::from_secs(3600)),
            max_retained_log_bytes: 100 * 1024 * 1024,
            entries_kept_after_snapshot: 1_000,
            leader_timeout: Duration::from_secs(30),
            links: QuorumLinks::default(),
        }
    }
}

/// Tells `times`, at each change of the leader's progress, which followers hold its last entry;
/// ends when raft shuts down.
async fn track_follower_progress(
    mut metrics: watch::Receiver<openraft::RaftMetrics<u64, QuorumNode>>,
    times: FollowerTimes,
) {
    loop {
        {
            let m = metrics.borrow_and_update();
            if let Some(replication) = m.replication.as_ref() {
                let last = m.last_log_index;
                times.progress(
                    replication
                        .iter()
                        .filter(|(id, _)| **id != m.id)
                        .map(|(id, matched)| (*id, matched.map(|l| l.index) == last)),
                );
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Feeds every (term, leader) raft reports to `leadership`; ends when raft shuts down.
async fn track_leadership(
    mut metrics: watch::Receiver<openraft::RaftMetrics<u64, QuorumNode>>,
    leadership: Leadership,
) {
    let origin = Instant::now();
    loop {
        {
            let m = metrics.borrow_and_update();
            leadership.observe(m.current_term, m.current_leader, origin.elapsed());
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Takes a snapshot whenever the records applied since the last one reach the configured size,
/// or their age the configured interval, as every KRaft node does on its own, and purges what a
/// snapshot covers once the log outgrows its retention; ends when raft shuts down.
async fn take_snapshots(
    raft: Raft<TypeConfig>,
    log: LogStore,
    mut image_rx: watch::Receiver<Arc<MetadataImage>>,
    bytes_since_snapshot: Arc<AtomicU64>,
    config: QuorumConfig,
) {
    // Applied records wait at most this long for an age-triggered snapshot past the interval.
    const AGE_CHECK: Duration = Duration::from_secs(1);
    let mut last_snapshot = Instant::now();
    let mut age_check = tokio::time::interval(AGE_CHECK);
    loop {
        tokio::select! {
            changed = image_rx.changed() => if changed.is_err() { return },
            _ = age_check.tick() => {}
        }
        if log.size() > config.max_retained_log_bytes {
            let (snapshot, purged) = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                (m.snapshot.map(|id| id.index), m.purged.map(|id| id.index))
            };
            if let Some(snapshot) = snapshot.filter(|s| Some(*s) > purged) {
                if raft.trigger().purge_log(snapshot).await.is_err() {
                    return;
                }
            }
        }
        let pending = bytes_since_snapshot.load(Ordering::Relaxed);
        let too_old = config
            .max_snapshot_interval
            .is_some_and(|interval| last_snapshot.elapsed() >= interval);
        if pending == 0 || (pending < config.max_bytes_between_snapshots && !too_old) {
            continue;
        }
        // openraft ignores the trigger while a snapshot is being built.
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
        last_snapshot = Instant::now();
    }
}

/// The metadata log and its applied image on this node.
pub struct MetadataQuorum {
    raft: Raft<TypeConfig>,
    image_rx: watch::Receiver<Arc<MetadataImage>>,
    follower_times: FollowerTimes,
    leadership: Leadership,
}

impl MetadataQuorum {
    /// Opens (or creates) the metadata log under `metadata_dir` as this node's lone voter, with
    /// the default [`QuorumConfig`]; see [`MetadataQuorum::start_with_config`].
    pub async fn start(
        metadata_dir: &Path,
        node_id: u64,
        cluster_id: &str,
    ) -> Result<MetadataQuorum, MetadataError> {
        Self::start_with_config(
            metadata_dir,
            node_id,
            cluster_id,
            QuorumPeers::alone(),
            QuorumConfig::default(),
        )
        .await
    }

    /// Opens (or creates) the metadata log under `metadata_dir`, replays the snapshot and log,
    /// and starts raft. A lone voter (no `peers`) returns once it leads and its image reflects
    /// every entry in the log. A voter of a larger quorum sets the quorum up on its first start
    /// (every voter does so with the same voters, which openraft allows) and returns at once,
    /// since electing a leader needs its peers, which need this node's raft listener: see
    /// [`MetadataQuorum::caught_up`]. A node that is not a voter starts as a learner that the
    /// leader adds when it registers.
    pub async fn start_with_config(
        metadata_dir: &Path,
        node_id: u64,
        cluster_id: &str,
        peers: QuorumPeers,
        config: QuorumConfig,
    ) -> Result<MetadataQuorum, MetadataError> {
        std::fs::create_dir_all(metadata_dir).map_err(|e| MetadataError::io(metadata_dir, e))?;
        check_identity(metadata_dir, node_id, cluster_id)?;

        let log_store = LogStore::open(metadata_dir)?;
        let (state_machine, image_rx) = StateMachine::open(metadata_dir)?;
        let bytes_since_snapshot = state_machine.bytes_since_snapshot();
        let follower_times = FollowerTimes::default();
        let raft = Raft::new(
            node_id,
            Arc::new(raft_config(cluster_id, &config)?),
            TcpNetwork {
                node_id,
                follower_times: follower_times.clone(),
                links: config.links.clone(),
            },
            log_store.clone(),
            state_machine,
        )
        .await
        .map_err(|e| MetadataError::raft("start", e))?;
        join_quorum(&raft, node_id, &peers).await?;
        tokio::spawn(take_snapshots(
            raft.clone(),
            log_store.clone(),
            image_rx.clone(),
            bytes_since_snapshot,
            config.clone(),
        ));
        tokio::spawn(track_follower_progress(
            raft.metrics(),
            follower_times.clone(),
        ));
        let leadership = Leadership::default();
        tokio::spawn(track_leadership(raft.metrics(), leadership.clone()));
        let quorum = MetadataQuorum {
            raft,
            image_rx,
            follower_times,
            leadership,
        };
        if peers.is_alone() {
            quorum.caught_up(config.leader_timeout).await?;
            if !quorum.is_leader() {
                return Err(MetadataError::Timeout {
                    what: "metadata leadership".into(),
                });
            }
        }
        Ok(quorum)
    }

    /// Why raft stopped on this node (a storage failure), if it did: nothing will change here
    /// again until a restart.
    pub fn fatal_error(&self) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .running_state
            .as_ref()
            .err()
            .map(|fatal| fatal.to_string())
    }

    /// Waits until this node knows the quorum's leader and has applied every entry it holds,
    /// for at most `timeout`.
    pub async fn caught_up(&self, timeout: Duration) -> Result<(), MetadataError> {
        self.raft
            .wait(Some(timeout))
            .metrics(
                |m| {
                    m.current_leader.is_some()
                        && m.last_applied.map(|id| id.index) >= m.last_log_index
                },
                "the metadata quorum's leader",
            )
            .await
            .map(drop)
            .map_err(|e| MetadataError::Timeout {
                what: e.to_string(),
            })
    }

    /// Makes `node_id` a learner reached as `node`: the leader then replicates the metadata log
    /// to it. A learner reached elsewhere until now (a broker restarted on another port) is
    /// reached at `node` from now on; a voter is left as it is. Only the leader can.
    pub async fn add_learner(&self, node_id: u64, node: QuorumNode) -> Result<(), MetadataError> {
        let current = self.members().into_iter().find(|m| m.node_id == node_id);
        match current {
            Some(m) if m.voter || m.node == node => Ok(()),
            Some(_) => self
                .raft
                .change_membership(ChangeMembers::SetNodes([(node_id, node)].into()), true)
                .await
                .map(drop)
                .map_err(|e| membership_error("move learner", e)),
            None => self
                .raft
                .add_learner(node_id, node, false)
                .await
                .map(drop)
                .map_err(|e| membership_error("add learner", e)),
        }
    }

    /// Makes `node_id` a voter reached as `node` (KIP-853's AddRaftVoter): it is added as a
    /// learner, caught up, then voted in through a joint configuration. Only the leader can, and
    /// one change at a time; a change cut short (by `timeout`, a lost leadership) may still land.
    pub async fn add_voter(
        &self,
        node_id: u64,
        node: QuorumNode,
        timeout: Duration,
    ) -> Result<(), MetadataError> {
        let change = async {
            let stale = self
                .members()
                .into_iter()
                .any(|m| m.node_id == node_id && m.node != node);
            if stale {
                // A learner first reached elsewhere (its broker listener) is a voter on the
                // listener and with the directory id it asks to vote with.
                self.raft
                    .change_membership(
                        ChangeMembers::SetNodes([(node_id, node.clone())].into()),
                        true,
                    )
                    .await
                    .map_err(|e| membership_error("add voter", e))?;
            }
            self.raft
                .add_learner(node_id, node, true)
                .await
                .map_err(|e| membership_error("add voter", e))?;
            self.raft
                .change_membership(ChangeMembers::AddVoterIds([node_id].into()), true)
                .await
                .map(drop)
                .map_err(|e| membership_error("add voter", e))
        };
        tokio::time::timeout(timeout, change)
            .await
            .unwrap_or_else(|_| {
                Err(MetadataError::Timeout {
                    what: format!("voter {node_id} to be added"),
                })
            })
    }

    /// Takes `node_id` out of the voters (KIP-853's RemoveRaftVoter); it stays a learner, so a
    /// node that is also a broker keeps following the log. Only the leader can.
    pub async fn remove_voter(&self, node_id: u64, timeout: Duration) -> Result<(), MetadataError> {
        let change = self
            .raft
            .change_membership(ChangeMembers::RemoveVoters([node_id].into()), true);
        match tokio::time::timeout(timeout, change).await {
            Ok(result) => result
                .map(drop)
                .map_err(|e| membership_error("remove voter", e)),
            Err(_) => Err(MetadataError::Timeout {
                what: format!("voter {node_id} to be removed"),
            }),
        }
    }

    /// Every member of the quorum (voters and learners) as the latest membership entry this
    /// node holds names it.
    pub fn members(&self) -> Vec<QuorumMember> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        membership
            .nodes()
            .map(|(id, node)| QuorumMember {
                node_id: *id,
                node: node.clone(),
                voter: membership.voter_ids().any(|v| v == *id),
            })
            .collect()
    }

    /// Whether this node holds a membership at all: a node of a dynamic quorum that was never
    /// added has none and hears from no leader.
    pub fn is_member(&self) -> bool {
        let id = self.raft.metrics().borrow().id;
        self.members().iter().any(|m| m.node_id == id)
    }

    /// Answers one raft RPC from a peer: `frame` is a request frame's body (after its size
    /// prefix); the answer is the response frame's body. None if `frame` is not a raft RPC.
    pub async fn handle_raft_frame(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let (correlation_id, rpc) = network::decode_request(frame)?;
        let reply = match rpc {
            Ok(RaftRequest::AppendEntries(r)) => {
                RaftReply::AppendEntries(self.raft.append_entries(r).await)
            }
            Ok(RaftRequest::Vote(r)) => RaftReply::Vote(self.raft.vote(r).await),
            Ok(RaftRequest::InstallSnapshot(r)) => {
                RaftReply::InstallSnapshot(self.raft.install_snapshot(r).await)
            }
            Err(e) => RaftReply::Malformed(e),
        };
        let payload = serde_json::to_vec(&reply)
            .unwrap_or_else(|e| format!("{{\"Malformed\":{:?}}}", e.to_string()).into_bytes());
        Some(network::response_body(correlation_id, &payload))
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

    /// The term this node leads the quorum in, once its image has applied an entry of that term
    /// (the leader's first entry): only then does the image hold everything committed before, so
    /// decisions and broker sessions can rest on it. None otherwise. A new term is a new
    /// leadership, even on the same node.
    pub fn leader_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let caught_up = metrics
            .last_applied
            .is_some_and(|applied| applied.leader_id.term == metrics.current_term);
        (metrics.state == ServerState::Leader && caught_up).then_some(metrics.current_term)
    }

    /// The node this node believes leads the quorum, if any.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// The leader changes and elections this node saw.
    pub fn leadership(&self) -> LeadershipStats {
        self.leadership.stats()
    }

    /// The end of this node's copy of the metadata log (the offset its next entry would take).
    pub fn log_end_offset(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .last_log_index
            .map_or(0, |i| i + 1)
    }

    /// The quorum's state from this node: on the leader, every member's progress.
    pub fn status(&self) -> QuorumStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let leader_end = metrics.last_log_index.map_or(0, |i| i + 1);
        let now = fjord_common::now_ms();
        let node_of = |node_id: u64| membership.get_node(&node_id).cloned().unwrap_or_default();
        let replica = |node_id: u64| -> ReplicaStatus {
            if node_id == metrics.id {
                // The leader holds its own log at every moment, as KRaft reports it.
                let leads = metrics.current_leader == Some(node_id);
                return ReplicaStatus {
                    node_id,
                    node: node_of(node_id),
                    log_end_offset: Some(leader_end),
                    last_fetch_ms: leads.then_some(now),
                    last_caught_up_ms: leads.then_some(now),
                };
            }
            let log_end_offset = metrics.replication.as_ref().and_then(|replication| {
                replication
                    .get(&node_id)
                    .map(|matched| matched.map_or(0, |l| l.index + 1))
            });
            let (last_fetch_ms, last_caught_up_ms) = match log_end_offset {
                Some(end) => self.follower_times.get(node_id, end == leader_end),
                None => (None, None),
            };
            ReplicaStatus {
                node_id,
                node: node_of(node_id),
                log_end_offset,
                last_fetch_ms,
                last_caught_up_ms,
            }
        };
        QuorumStatus {
            leader: metrics.current_leader,
            term: metrics.current_term,
            high_watermark: metrics.last_applied.map_or(0, |l| l.index + 1),
            voters: membership.voter_ids().map(replica).collect(),
            learners: membership.learner_ids().map(replica).collect(),
        }
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

/// The openraft settings of the metadata quorum `cluster_id`.
fn raft_config(cluster_id: &str, config: &QuorumConfig) -> Result<Config, MetadataError> {
    Config {
        cluster_name: cluster_id.to_owned(),
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        // Snapshots are triggered by size and age, by `take_snapshots`.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: config.entries_kept_after_snapshot,
        // Purge as soon as a snapshot allows it; purges are already rare.
        purge_batch_size: 1,
        ..Config::default()
    }
    .validate()
    .map_err(|e| MetadataError::raft("config", e))
}

/// Takes this node's part in the quorum once raft runs. A new metadata log is initialized
/// with its first voters ([`initial_voters`]), if this node has any to name; a lone voter whose
/// log exists asks for an election at once.
async fn join_quorum(
    raft: &Raft<TypeConfig>,
    node_id: u64,
    peers: &QuorumPeers,
) -> Result<(), MetadataError> {
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| MetadataError::raft("start", e))?;
    if !initialized {
        let voters = initial_voters(node_id, peers);
        if !voters.is_empty() {
            raft.initialize(voters)
                .await
                .map_err(|e| MetadataError::raft("initialize", e))?;
        }
    } else if peers.is_alone() {
        // A lone voter would elect itself on the next tick anyway; asking now saves that wait
        // on every restart.
        raft.trigger()
            .elect()
            .await
            .map_err(|e| MetadataError::raft("elect", e))?;
    }
    Ok(())
}

/// The voters a new metadata log starts with: this node alone (a lone voter, or the
/// standalone start of a dynamic quorum), every configured voter when this node is one of
/// `controller.quorum.voters`, and none otherwise (a node joining a dynamic quorum, or not a
/// voter): the leader adds it later.
fn initial_voters(node_id: u64, peers: &QuorumPeers) -> BTreeMap<u64, QuorumNode> {
    match &peers.dynamic {
        _ if peers.is_alone() => BTreeMap::from([(node_id, QuorumNode::default())]),
        Some(DynamicQuorum::Standalone(node)) => BTreeMap::from([(node_id, node.clone())]),
        Some(DynamicQuorum::Join) => BTreeMap::new(),
        None if peers.voters.contains_key(&node_id) => peers
            .voters
            .iter()
            .map(|(id, addr)| (*id, QuorumNode::new(addr)))
            .collect(),
        None => BTreeMap::new(),
    }
}

/// A failed membership change, with a leader elsewhere told apart.
fn membership_error(
    operation: &'static str,
    error: RaftError<u64, ClientWriteError<u64, QuorumNode>>,
) -> MetadataError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => MetadataError::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            MetadataError::MembershipChange(e.to_string())
        }
        e => MetadataError::raft(operation, e),
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
