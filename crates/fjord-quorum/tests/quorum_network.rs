//! Three voters of the metadata quorum on loopback, talking raft over TCP as `fjord server`
//! nodes do: election, replication, a leader's loss, a restarted voter catching up from the
//! log, a voter far behind catching up from a snapshot, and a wiped voter sent the snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fjord_common::Uuid;
use fjord_metadata::{MetadataRecord, QuorumNode, TopicRecord};
use fjord_quorum::{DynamicQuorum, MetadataError, MetadataQuorum, QuorumConfig, QuorumPeers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const CLUSTER: &str = "test-cluster";

struct Node {
    id: u64,
    dir: PathBuf,
    addr: String,
    quorum: Option<Arc<MetadataQuorum>>,
    server: Option<JoinHandle<()>>,
}

/// Serves raft RPCs for `quorum` on `listener` until aborted.
fn serve(listener: TcpListener, quorum: Weak<MetadataQuorum>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let quorum = quorum.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(size) = socket.read_i32().await else {
                        return;
                    };
                    let mut frame = vec![0; size as usize];
                    if socket.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let Some(quorum) = quorum.upgrade() else {
                        return;
                    };
                    let Some(reply) = quorum.handle_raft_frame(&frame).await else {
                        return;
                    };
                    drop(quorum);
                    let mut out = (reply.len() as i32).to_be_bytes().to_vec();
                    out.extend_from_slice(&reply);
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

fn config() -> QuorumConfig {
    QuorumConfig {
        max_bytes_between_snapshots: 2000,
        max_snapshot_interval: None,
        max_retained_log_bytes: u64::MAX,
        entries_kept_after_snapshot: 5,
        leader_timeout: Duration::from_secs(10),
        ..QuorumConfig::default()
    }
}

impl Node {
    async fn start(&mut self, peers: &QuorumPeers) {
        let listener = TcpListener::bind(&self.addr).await.unwrap();
        let quorum = Arc::new(
            MetadataQuorum::start_with_config(&self.dir, self.id, CLUSTER, peers.clone(), config())
                .await
                .unwrap(),
        );
        self.server = Some(serve(listener, Arc::downgrade(&quorum)));
        self.quorum = Some(quorum);
    }

    async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = server.await;
        }
        let quorum = self.quorum.take().unwrap();
        // Connection tasks let go of it once their current RPC is answered.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut quorum = quorum;
        loop {
            match Arc::try_unwrap(quorum) {
                Ok(q) => return q.shutdown().await.unwrap(),
                Err(still) if Instant::now() < deadline => {
                    quorum = still;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => panic!("node {} still in use", self.id),
            }
        }
    }

    fn quorum(&self) -> &MetadataQuorum {
        self.quorum.as_ref().unwrap()
    }
}

/// Nodes 1, 2 and 3, not started, each with a free loopback port and a dir under `root`.
fn nodes(root: &Path) -> Vec<Node> {
    (1..=3u64)
        .map(|id| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            Node {
                id,
                dir: root.join(format!("node-{id}")),
                addr: format!("127.0.0.1:{port}"),
                quorum: None,
                server: None,
            }
        })
        .collect()
}

async fn cluster(root: &Path) -> (Vec<Node>, QuorumPeers) {
    let mut nodes = nodes(root);
    let voters: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    let peers = QuorumPeers {
        voters,
        dynamic: None,
    };
    for node in &mut nodes {
        node.start(&peers).await;
    }
    (nodes, peers)
}

/// The node that leads, once every running node agrees on one.
async fn leader(nodes: &[Node]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let running: Vec<&Node> = nodes.iter().filter(|n| n.quorum.is_some()).collect();
        let leaders: Vec<Option<u64>> = running.iter().map(|n| n.quorum().leader()).collect();
        if let Some(Some(id)) = leaders.first() {
            if leaders.iter().all(|l| *l == Some(*id)) {
                if let Some(i) = nodes.iter().position(|n| n.id == *id && n.quorum.is_some()) {
                    if nodes[i].quorum().is_leader() {
                        return i;
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn topic(n: u8) -> Vec<MetadataRecord> {
    vec![MetadataRecord::Topic(TopicRecord {
        name: format!("t{n}"),
        topic_id: Uuid([n; 16]),
    })]
}

/// Has `node` (the leader) commit topics `first..=last`, one proposal each.
async fn propose_topics(node: &Node, first: u8, last: u8) {
    for n in first..=last {
        node.quorum().propose(topic(n)).await.unwrap();
    }
}

/// Waits until every running node's image has topics t1..=last.
async fn converged(nodes: &[Node], last: u8) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for node in nodes.iter().filter(|n| n.quorum.is_some()) {
        loop {
            let image = node.quorum().image();
            if (1..=last).all(|n| image.topic(&format!("t{n}")).is_some()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} never caught up to t{last}",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_replicate_fail_over_and_catch_up() {
    let root = tempfile::tempdir().unwrap();
    let (mut nodes, peers) = cluster(root.path()).await;

    let first = leader(&nodes).await;
    propose_topics(&nodes[first], 1, 5).await;
    converged(&nodes, 5).await;
    // A follower refuses to propose and names the leader.
    let follower = (first + 1) % 3;
    match nodes[follower].quorum().propose(topic(99)).await {
        Err(MetadataError::NotLeader { leader }) => assert_eq!(leader, Some(nodes[first].id)),
        other => panic!("a follower proposed: {other:?}"),
    }

    // The leader goes: the other two elect one of themselves and go on.
    nodes[first].stop().await;
    let second = leader(&nodes).await;
    assert_ne!(second, first);
    propose_topics(&nodes[second], 6, 8).await;
    converged(&nodes, 8).await;

    // Restarted, the old leader catches up from the log and follows.
    nodes[first].start(&peers).await;
    converged(&nodes, 8).await;
    assert_eq!(leader(&nodes).await, second);

    // A voter that misses more than a snapshot's worth of entries gets the snapshot.
    let behind = (second + 1) % 3;
    nodes[behind].stop().await;
    propose_topics(&nodes[second], 9, 60).await;
    nodes[behind].start(&peers).await;
    converged(&nodes, 60).await;
    let image = nodes[behind].quorum().image();
    assert_eq!(image.topics().count(), 60);

    for node in &mut nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_voter_the_leader_had_matched_catches_up_from_a_snapshot() {
    // A voter whose metadata log is wiped comes back with less than the leader saw it hold: the
    // leader's first AppendEntries then conflicts below the entries it had matched there. It
    // must search again (its log purged past that point: by snapshot), not go on from its
    // old match.
    let root = tempfile::tempdir().unwrap();
    let (mut nodes, peers) = cluster(root.path()).await;
    let first = leader(&nodes).await;
    propose_topics(&nodes[first], 1, 5).await;
    converged(&nodes, 5).await;

    let wiped = (first + 1) % 3;
    nodes[wiped].stop().await;
    std::fs::remove_dir_all(&nodes[wiped].dir).unwrap();
    propose_topics(&nodes[first], 6, 60).await;
    nodes[wiped].start(&peers).await;
    converged(&nodes, 60).await;
    assert_eq!(nodes[wiped].quorum().image().topics().count(), 60);
    assert!(
        nodes[wiped].dir.join("snapshot").exists(),
        "the wiped voter was sent the snapshot"
    );

    // It votes again: without the third voter, the leader and the wiped one make the majority.
    let third = (first + 2) % 3;
    nodes[third].stop().await;
    let now = leader(&nodes).await;
    nodes[now].quorum().propose(topic(61)).await.unwrap();
    converged(&nodes, 61).await;

    // DescribeQuorum's view from the leader: the wiped voter answers it and holds its log.
    let status = nodes[now].quorum().status();
    let of = |i: usize| {
        status
            .voters
            .iter()
            .find(|r| r.node_id == nodes[i].id)
            .cloned()
            .unwrap()
    };
    let (leading, follower) = (of(now), of(wiped));
    assert_eq!(follower.log_end_offset, leading.log_end_offset);
    let fetch = follower.last_fetch_ms.expect("the follower answered");
    let caught_up = follower.last_caught_up_ms.expect("the follower caught up");
    assert!(caught_up <= fetch && fetch <= leading.last_fetch_ms.unwrap());
    assert_eq!(leading.last_fetch_ms, leading.last_caught_up_ms);

    for node in nodes.iter_mut().filter(|n| n.quorum.is_some()) {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_quorum_grows_from_one_voter_and_outlives_its_first_leader() {
    // KIP-853: node 1 begins the quorum alone; nodes 2 and 3 start with no membership, are
    // added as voters (caught up first), and the three go on without node 1 once it is removed
    // from the voters and stopped.
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes(root.path());
    let directory = |id: u64| Some(Uuid([id as u8 + 10; 16]));
    let node_of = |n: &Node| QuorumNode {
        addr: n.addr.clone(),
        directory_id: directory(n.id),
        broker: false,
    };
    let standalone = QuorumPeers {
        voters: BTreeMap::new(),
        dynamic: Some(DynamicQuorum::Standalone(node_of(&nodes[0]))),
    };
    let join = QuorumPeers {
        voters: BTreeMap::new(),
        dynamic: Some(DynamicQuorum::Join),
    };
    nodes[0].start(&standalone).await;
    nodes[1].start(&join).await;
    nodes[2].start(&join).await;
    nodes[0]
        .quorum()
        .caught_up(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!nodes[1].quorum().is_member(), "nobody added node 2 yet");
    propose_topics(&nodes[0], 1, 3).await;
    // A learner first known at an address it no longer listens on (restarted on another port)
    // is reached where it registers next.
    nodes[0]
        .quorum()
        .add_learner(2, QuorumNode::new("127.0.0.1:1"))
        .await
        .unwrap();
    nodes[0]
        .quorum()
        .add_learner(2, QuorumNode::new(nodes[1].addr.clone()))
        .await
        .unwrap();
    let learner = nodes[0].quorum().members();
    assert!(
        learner
            .iter()
            .any(|m| m.node_id == 2 && !m.voter && m.node.addr == nodes[1].addr),
        "{learner:?}"
    );

    for i in 1..3 {
        let node = node_of(&nodes[i]);
        nodes[0]
            .quorum()
            .add_voter(nodes[i].id, node, Duration::from_secs(15))
            .await
            .unwrap();
    }
    converged(&nodes, 3).await;
    // Node 3 learns that the last change is committed from the leader's next append or
    // heartbeat, so its view may lag the leader's answer a little.
    let expected = [(1, directory(1)), (2, directory(2)), (3, directory(3))];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let voters: Vec<(u64, Option<Uuid>)> = nodes[2]
            .quorum()
            .members()
            .iter()
            .filter(|m| m.voter)
            .map(|m| (m.node_id, m.node.directory_id))
            .collect();
        if voters == expected {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 sees voters {voters:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Node 1 leaves the voters (it stays a learner), then stops: 2 and 3 are a majority of
    // the voters left, elect one of themselves and commit.
    nodes[0]
        .quorum()
        .remove_voter(1, Duration::from_secs(15))
        .await
        .unwrap();
    nodes[0].stop().await;
    let next = leader(&nodes).await;
    assert_ne!(nodes[next].id, 1);
    propose_topics(&nodes[next], 4, 6).await;
    converged(&nodes, 6).await;

    for node in nodes.iter_mut().filter(|n| n.quorum.is_some()) {
        node.stop().await;
    }
}
