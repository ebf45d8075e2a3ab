//! Which partitions of a share group have share-partition state (KIP-932's
//! ShareGroupStatePartitionMetadata, record type 15). The group coordinator asks the share
//! coordinator to initialize the state of every partition its members subscribe to
//! (InitializeShareGroupState, sent by the broker: `ShareInit`) and assigns only partitions
//! whose state is initialized, so a partition's leader always finds state to load.

use std::collections::{BTreeMap, BTreeSet};

use crate::assignor::TopicId;
use crate::records::share_group_state_partition_metadata_value as record;
use crate::records::ShareGroupStatePartitionMetadataValue;
use crate::Topics;

/// How long an initialization may stay unanswered before a heartbeat asks for it again
/// (Kafka's `group.share.initialize.retry.interval.ms`).
pub const INITIALIZE_RETRY_MS: i64 = 30_000;

/// Share-partition state for the broker to initialize, then to report on with
/// `ShareGroups::initialized`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareInit {
    pub group_id: String,
    /// The group epoch it was asked at: the state epoch the share coordinator keeps.
    pub state_epoch: i32,
    /// Each topic's partitions and where their state starts: -1 for a topic the group has no
    /// state of yet (the partition's leader applies `share.auto.offset.reset`), 0 for
    /// partitions added to a topic it has.
    pub topics: Vec<(TopicId, Vec<i32>, i64)>,
}

/// One topic's name and partitions.
type Named = (String, BTreeSet<i32>);

#[derive(Debug, Clone, Default)]
pub(super) struct StatePartitions {
    initialized: BTreeMap<TopicId, Named>,
    initializing: BTreeMap<TopicId, Named>,
    /// When each initializing topic was last asked for; in memory only (a loaded entry's
    /// clock starts at the first heartbeat that sees it).
    asked_at: BTreeMap<TopicId, i64>,
    deleting: BTreeMap<TopicId, String>,
}

impl StatePartitions {
    /// The partitions whose state is initialized: all the assignor may hand out.
    pub(super) fn assignable(&self) -> BTreeMap<TopicId, BTreeSet<i32>> {
        self.initialized
            .iter()
            .map(|(id, (_, partitions))| (*id, partitions.clone()))
            .collect()
    }

    /// The partitions of `subscribed` topics to initialize now: those neither initialized nor
    /// asked for within the retry interval; they are marked initializing.
    pub(super) fn plan(
        &mut self,
        subscribed: &BTreeSet<String>,
        topics: &Topics,
        now_ms: i64,
    ) -> Vec<(TopicId, Vec<i32>, i64)> {
        let mut wanted = Vec::new();
        for name in subscribed {
            let Some(topic) = topics.get(name) else {
                continue;
            };
            let id = topic.topic_id;
            let pending = match self.initializing.get(&id) {
                Some((_, partitions)) => {
                    let asked = *self.asked_at.entry(id).or_insert(now_ms);
                    (now_ms.saturating_sub(asked) < INITIALIZE_RETRY_MS).then_some(partitions)
                }
                None => None,
            };
            let done = self.initialized.get(&id).map(|(_, p)| p);
            let missing: Vec<i32> = (0..topic.partitions)
                .filter(|p| !done.is_some_and(|d| d.contains(p)))
                .filter(|p| !pending.is_some_and(|d| d.contains(p)))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let start = if done.is_some_and(|d| !d.is_empty()) {
                0
            } else {
                -1
            };
            let entry = self
                .initializing
                .entry(id)
                .or_insert_with(|| (topic.name.clone(), BTreeSet::new()));
            entry.1.extend(&missing);
            self.asked_at.insert(id, now_ms);
            self.deleting.remove(&id);
            wanted.push((id, missing, start));
        }
        wanted
    }

    /// The broker's word on an initialization: its partitions initialized, or (on failure)
    /// left to be asked for again. Whether anything changed.
    pub(super) fn finish(&mut self, topics: &[(TopicId, Vec<i32>)], success: bool) -> bool {
        let mut changed = false;
        for (id, partitions) in topics {
            let Some((name, pending)) = self.initializing.get_mut(id) else {
                continue;
            };
            let name = name.clone();
            for p in partitions {
                if !pending.remove(p) {
                    continue;
                }
                changed = true;
                if success {
                    self.initialized
                        .entry(*id)
                        .or_insert_with(|| (name.clone(), BTreeSet::new()))
                        .1
                        .insert(*p);
                }
            }
            if pending.is_empty() {
                self.initializing.remove(id);
                self.asked_at.remove(id);
            }
        }
        changed
    }

    /// Whether the target assignment (`assigned`: each subscribed topic's partitions in it)
    /// differs from what is initialized of the subscribed topics: a new assignment is due.
    pub(super) fn assignment_pending(
        &self,
        subscribed: &BTreeSet<String>,
        topics: &Topics,
        assigned: impl Fn(&TopicId) -> BTreeSet<i32>,
    ) -> bool {
        subscribed.iter().filter_map(|n| topics.get(n)).any(|t| {
            let initialized: BTreeSet<i32> = self
                .initialized
                .get(&t.topic_id)
                .map(|(_, p)| p.iter().copied().filter(|&p| p < t.partitions).collect())
                .unwrap_or_default();
            initialized != assigned(&t.topic_id)
        })
    }

    pub(super) fn to_record(&self) -> ShareGroupStatePartitionMetadataValue {
        let infos = |map: &BTreeMap<TopicId, Named>| {
            map.iter()
                .map(|(id, (name, partitions))| record::TopicPartitionsInfo {
                    topic_id: *id,
                    topic_name: name.clone(),
                    partitions: partitions.iter().copied().collect(),
                })
                .collect()
        };
        ShareGroupStatePartitionMetadataValue {
            initializing_topics: infos(&self.initializing),
            initialized_topics: infos(&self.initialized),
            deleting_topics: self
                .deleting
                .iter()
                .map(|(id, name)| record::TopicInfo {
                    topic_id: *id,
                    topic_name: name.clone(),
                })
                .collect(),
        }
    }

    pub(super) fn from_record(value: &ShareGroupStatePartitionMetadataValue) -> StatePartitions {
        let named = |infos: &[record::TopicPartitionsInfo]| {
            infos
                .iter()
                .map(|t| {
                    let partitions = t.partitions.iter().copied().collect();
                    (t.topic_id, (t.topic_name.clone(), partitions))
                })
                .collect()
        };
        StatePartitions {
            initialized: named(&value.initialized_topics),
            initializing: named(&value.initializing_topics),
            asked_at: BTreeMap::new(),
            deleting: value
                .deleting_topics
                .iter()
                .map(|t| (t.topic_id, t.topic_name.clone()))
                .collect(),
        }
    }
}
