//! The high watermarks a group's lag needs from partitions this broker does not host: asked of
//! their leaders (ListOffsets, latest, as `kafka-consumer-groups --describe` asks) when a scrape
//! comes, one request per leader, side by side and bounded in time. A partition whose leader
//! did not answer has no lag series at that scrape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjord_common::errors;
use fjord_common::lock;
use fjord_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use fjord_protocol::{RequestBody, ResponseBody};

use crate::api::Broker;
use crate::link::peers::LinkPool;

/// A scrape waits at most this long for the leaders' answers.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many partitions are asked for at one scrape.
const MAX_ASKED: usize = 10_000;
/// The ListOffsets version asked (or the newest below it the leader serves): for the latest
/// offset, read uncommitted, every version answers the high watermark.
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' timestamp for the latest offset.
const LATEST: i64 = -1;

/// Partitions by topic, as asked of one leader.
type Asked = BTreeMap<String, BTreeSet<i32>>;

#[derive(Default)]
pub(super) struct RemoteEnds {
    /// High watermarks by topic and partition, as the last scrape's answers gave them.
    ends: Mutex<HashMap<(String, i32), i64>>,
    links: Mutex<HashMap<i32, Arc<LinkPool>>>,
}

impl RemoteEnds {
    /// The high watermark of `topic`-`partition` at the last refresh, if its leader answered.
    pub(super) fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        lock(&self.ends)
            .get(&(topic.to_string(), partition))
            .copied()
    }

    /// Asks the leaders of the committed partitions `broker` coordinates groups for and does not
    /// host for their high watermarks; what they answer replaces what was known.
    pub(super) async fn refresh(&self, broker: &Arc<Broker>) {
        let mut asks = tokio::task::JoinSet::new();
        for (leader, asked) in self.partitions_to_ask(broker) {
            let links = lock(&self.links).entry(leader).or_default().clone();
            let broker = broker.clone();
            asks.spawn(async move { ask(&broker, &links, leader, asked).await });
        }
        let mut ends = HashMap::new();
        let deadline = tokio::time::Instant::now() + ASK_TIMEOUT;
        while let Ok(Some(answer)) = tokio::time::timeout_at(deadline, asks.join_next()).await {
            if let Ok(answered) = answer {
                ends.extend(answered);
            }
        }
        // Those still out are dropped with the set.
        *lock(&self.ends) = ends;
    }

    /// The partitions to ask about, by leader: committed in a group coordinated here, not
    /// hosted here, with a leader elsewhere.
    fn partitions_to_ask(&self, broker: &Broker) -> BTreeMap<i32, Asked> {
        let image = broker.node.image();
        let replicas = broker.replicas();
        let me = broker.node.config.node_id;
        let mut by_leader: BTreeMap<i32, Asked> = BTreeMap::new();
        let mut asked = 0;
        for group in broker.group_runtime().summaries() {
            for ((topic, partition), _) in &group.offsets {
                if asked >= MAX_ASKED || replicas.get_hosted(topic, *partition).is_some() {
                    continue;
                }
                let leader = image
                    .topic(topic)
                    .and_then(|t| t.partitions.get(usize::try_from(*partition).ok()?))
                    .map(|p| p.leader);
                let Some(leader) = leader.filter(|l| *l >= 0 && *l != me) else {
                    continue;
                };
                let topics = by_leader.entry(leader).or_default();
                if topics.entry(topic.clone()).or_default().insert(*partition) {
                    asked += 1;
                }
            }
        }
        by_leader
    }
}

/// One leader's high watermarks of `asked`; none when it does not answer.
async fn ask(
    broker: &Broker,
    links: &LinkPool,
    leader: i32,
    asked: Asked,
) -> Vec<((String, i32), i64)> {
    let request = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: asked
            .into_iter()
            .map(|(name, partitions)| ListOffsetsTopic {
                name,
                partitions: partitions
                    .into_iter()
                    .map(|partition_index| ListOffsetsPartition {
                        partition_index,
                        current_leader_epoch: -1,
                        timestamp: LATEST,
                    })
                    .collect(),
            })
            .collect(),
        ..Default::default()
    };
    let client_id = format!("group-lag-{}", broker.node.config.node_id);
    let answer = broker
        .node
        .send_on_link(
            links,
            leader,
            client_id,
            ASK_TIMEOUT,
            LIST_OFFSETS_VERSION,
            RequestBody::ListOffsets(request),
        )
        .await;
    let response = match answer {
        Ok(ResponseBody::ListOffsets(response)) => response,
        Ok(_) => return Vec::new(),
        Err(error) => {
            tracing::debug!(leader, %error, "no high watermarks for group lag");
            return Vec::new();
        }
    };
    response
        .topics
        .into_iter()
        .flat_map(|topic| {
            let name = topic.name;
            topic
                .partitions
                .into_iter()
                .filter(|p| p.error_code == errors::NONE && p.offset >= 0)
                .map(move |p| ((name.clone(), p.partition_index), p.offset))
        })
        .collect()
}
