//! The async shell around the group coordinator shards (`fjord-group`), hosted by the
//! coordinator runtime (`coordinator::runtime`).
//!
//! One `GroupCoordinatorShard` per `__consumer_offsets` partition this broker leads. A group
//! request goes to the shard of `partition_for(group_id)`; the shard answers with `Effects`: records
//! to append to its partition and responses, possibly for requests parked earlier (a JoinGroup
//! waiting for the rest of the group). Records are appended under the shard's lock, so the log
//! holds them in the order the shard produced them; responses are released only after the
//! append is durable. The coordinators' timer task ticks shards at their deadlines
//! (`run_due_timers`).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjord_common::{lock, LeaderEpoch};
use fjord_group::{
    partition_for, ClientInfo, Effects, GroupConfig, GroupCoordinatorShard, RequestId, ShareInit,
    TopicInfo, Topics,
};
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use fjord_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use fjord_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use fjord_protocol::messages::list_groups_response::ListGroupsResponse;
use fjord_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use fjord_protocol::messages::share_group_describe_request::ShareGroupDescribeRequest;
use fjord_protocol::{RequestBody, ResponseBody};
use tokio::sync::{oneshot, Notify};

use crate::coordinator::log::{self as coordinator_log, Replayed};
use crate::coordinator::runtime::{after_tick, earliest, Coordinator, CoordinatorRuntime, Shard};
use crate::replication::flusher::FlusherHandle;
use crate::replication::{Partition, ReplicaManager};
use fjord_common::errors::{self, KafkaError};
use fjord_common::now_ms;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Longest a parked group request may wait for its answer (a JoinGroup waits at most its
/// rebalance timeout; this bounds a lost wake-up).
const MAX_PARK_MS: u64 = 30 * 60 * 1000;

/// A request waiting for its answer.
struct ParkedRequest {
    /// Its shard's `__consumer_offsets` partition.
    partition: i32,
    answer: oneshot::Sender<ResponseBody>,
    /// The request at its version, to refuse it with an error when the write it caused fails,
    /// or, for a JoinGroup or SyncGroup (which waits for other members), when its shard goes
    /// (leadership moved, the broker stopping): either way the client hears at once rather
    /// than waiting out its request timeout.
    version: i16,
    request: RequestBody,
}

impl ParkedRequest {
    fn waits_for_others(&self) -> bool {
        matches!(
            self.request,
            RequestBody::JoinGroup(_) | RequestBody::SyncGroup(_)
        )
    }

    /// Answers the request with `error_code` for its every group and partition.
    fn refuse(self, error_code: i16) {
        if let Some(refusal) = fjord_group::refusal(self.version, &self.request, error_code) {
            let _ = self.answer.send(refusal);
        }
    }
}

impl Coordinator for GroupCoordinatorShard {
    const TOPIC: &'static str = OFFSETS_TOPIC;
    const KIND: &'static str = "group";
    type Config = GroupConfig;

    fn load(_leader_epoch: LeaderEpoch, config: &GroupConfig) -> Self {
        GroupCoordinatorShard::new(config.clone())
    }

    /// Plain records, a transaction's offsets (pending) and the markers deciding them.
    fn replay(&mut self, item: Replayed) -> Result<(), KafkaError> {
        match item {
            Replayed::Record {
                producer_id: None,
                record,
            } => GroupCoordinatorShard::replay(self, &record).map_err(unreadable),
            Replayed::Record {
                producer_id: Some(producer_id),
                record,
            } => self
                .replay_transactional(producer_id, &record)
                .map_err(unreadable),
            Replayed::Marker {
                producer_id,
                commit,
            } => {
                self.complete_transaction(producer_id, commit);
                Ok(())
            }
        }
    }

    fn next_deadline(&self) -> Option<i64> {
        GroupCoordinatorShard::next_deadline(self)
    }
}

type GroupShard = Shard<GroupCoordinatorShard>;

/// A `__consumer_offsets` record the shard cannot replay: its partition does not load.
fn unreadable(error: fjord_group::GroupError) -> KafkaError {
    KafkaError::new(fjord_common::errors::CORRUPT_MESSAGE, error.to_string())
}

pub struct GroupRuntime {
    /// Locked only for a request's (or a timer's) synchronous run: state change and append.
    /// Lock order: the runtime's shards, then a shard, then `parked`.
    shards: CoordinatorRuntime<GroupCoordinatorShard>,
    flusher: FlusherHandle,
    parked: Mutex<HashMap<RequestId, ParkedRequest>>,
    next_request_id: AtomicU64,
    /// `offsets.commit.timeout.ms`: how long a write waits for the in-sync replicas.
    commit_timeout_ms: u64,
    /// Share-partition state the shards asked to initialize, their records written: the
    /// timer task sends them to the share coordinators (`take_share_inits`). Bounded: one that
    /// does not fit is asked for again by a heartbeat after the retry interval.
    share_inits: tokio::sync::mpsc::Sender<ShareInit>,
    share_inits_out: Mutex<Option<tokio::sync::mpsc::Receiver<ShareInit>>>,
}

/// Share initializations waiting to be sent at most.
const SHARE_INITS_QUEUED: usize = 1024;

/// The cluster's topics as the coordinator sees them.
pub fn topics_view(image: &MetadataImage) -> Topics {
    Topics {
        by_name: image
            .topics()
            .map(|t| {
                (
                    t.name.clone(),
                    TopicInfo {
                        name: t.name.clone(),
                        topic_id: t.topic_id,
                        partitions: t.partitions.len() as i32,
                    },
                )
            })
            .collect(),
    }
}

impl GroupRuntime {
    pub fn new(
        config: GroupConfig,
        num_partitions: i32,
        replicas: Arc<ReplicaManager>,
        flusher: FlusherHandle,
        deadline_moved: Arc<Notify>,
    ) -> Self {
        let (share_inits, share_inits_out) = tokio::sync::mpsc::channel(SHARE_INITS_QUEUED);
        GroupRuntime {
            share_inits,
            share_inits_out: Mutex::new(Some(share_inits_out)),
            commit_timeout_ms: u64::try_from(config.offsets_commit_timeout_ms.max(1)).unwrap_or(1),
            shards: CoordinatorRuntime::new(config, num_partitions, replicas, deadline_moved),
            flusher,
            parked: Mutex::new(HashMap::new()),
            next_request_id: AtomicU64::new(1),
        }
    }

    pub fn num_partitions(&self) -> i32 {
        self.shards.num_partitions()
    }

    /// The share initializations to send, once (the timer task takes them).
    pub fn take_share_inits(&self) -> Option<tokio::sync::mpsc::Receiver<ShareInit>> {
        lock(&self.share_inits_out).take()
    }

    /// Writes the outcome of a share initialization on its group's shard (nothing when the
    /// shard moved: the new coordinator asks again).
    pub async fn share_initialized(&self, init: &ShareInit, success: bool) {
        let Some(shard) = self.shards.shard(self.partition_of(&init.group_id)) else {
            return;
        };
        let pending = {
            let mut guard = lock(&shard);
            if guard.unloaded || guard.partition.min_isr_shortfall().is_some() {
                return;
            }
            let effects = guard.core.share_initialized(init, success);
            self.persist_and_release(&mut guard, effects)
        };
        self.await_durable_and_release(pending).await;
    }

    pub fn partition_of(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.num_partitions())
    }

    /// Loads every `__consumer_offsets` partition this broker leads that is not loaded yet.
    pub fn load_hosted(&self) -> Result<(), KafkaError> {
        self.shards.load_hosted().map(drop)
    }

    /// Unloads every shard: the broker is stopping (its parked requests were refused).
    pub fn close(&self) {
        self.shards.close();
    }

    /// Unloads the shards of `__consumer_offsets` partitions this broker no longer leads, or leads
    /// under a new leader epoch: their groups answer NOT_COORDINATOR (or load afresh) from now.
    pub fn unload_unled(&self) {
        let unloaded = self.shards.unload_unled();
        self.refuse_parked(|partition| unloaded.contains(&partition));
    }

    /// Answers the parked JoinGroups and SyncGroups of the shards `gone` selects with
    /// NOT_COORDINATOR, as Kafka does when it unloads a group; the broker is stopping when all
    /// are selected.
    pub fn refuse_parked(&self, gone: impl Fn(i32) -> bool) {
        let refused: Vec<ParkedRequest> = {
            let Ok(mut parked) = self.parked.lock() else {
                return;
            };
            let ids: Vec<RequestId> = parked
                .iter()
                .filter(|(_, p)| p.waits_for_others() && gone(p.partition))
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| parked.remove(id)).collect()
        };
        for p in refused {
            p.refuse(fjord_common::errors::NOT_COORDINATOR);
        }
    }

    /// True once `__consumer_offsets` exists and every partition of it this broker leads has a
    /// loaded shard.
    pub fn all_loaded(&self) -> bool {
        self.shards.all_loaded()
    }

    /// Appends a transaction's commit or abort marker (`append`) to a `__consumer_offsets`
    /// partition this broker leads, and tells its shard, so that the transaction's offsets
    /// become committed or are dropped as the marker lands. The shards' lock is held
    /// throughout: the shard cannot be loaded or replaced in between, so a shard either hears
    /// of the marker here or reads it in its load.
    pub fn append_marker<T, E>(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
        append: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        self.shards.with_shard(partition, |shard| {
            let appended = append()?;
            if let Some(shard) = shard {
                shard.core.complete_transaction(producer_id, commit);
            }
            Ok(appended)
        })
    }

    /// Runs one request on its shard now — the state change is made and its records appended
    /// before this returns, so requests started in turn take effect in turn — and returns the
    /// wait for its answer (after the records are durable, or when a parked request completes).
    pub fn start(
        self: &Arc<Self>,
        partition: i32,
        version: i16,
        request: RequestBody,
        topics: &Topics,
        client: &ClientInfo,
    ) -> GroupAnswer {
        self.start_checked(partition, version, request, topics, client, |_| Ok(()))
    }

    /// `start` for a request that `check` may refuse first, with the error code for its every
    /// partition, on the shard's partition under the shard's lock (a transaction's offset
    /// commit: its producer epoch and its transaction are checked where no marker can come
    /// between the check and the write).
    pub fn start_checked(
        self: &Arc<Self>,
        partition: i32,
        version: i16,
        request: RequestBody,
        topics: &Topics,
        client: &ClientInfo,
        check: impl FnOnce(&Partition) -> Result<(), i16>,
    ) -> GroupAnswer {
        if self.shards.shard(partition).is_none() {
            // Its `__consumer_offsets` partition is led elsewhere (or nowhere yet): the client
            // asks FindCoordinator again.
            let answer =
                fjord_group::refusal(version, &request, fjord_common::errors::NOT_COORDINATOR)
                    .ok_or_else(|| {
                        KafkaError::new(
                            errors::INVALID_REQUEST,
                            format!("{} is not a group request", request.api_key().name()),
                        )
                    });
            return Box::pin(async move { answer });
        }
        let started = self.run_on_shard(partition, version, request, topics, client, check);
        let this = self.clone();
        Box::pin(async move {
            let (request_id, receiver, pending) = started?;
            this.await_durable_and_release(pending).await;
            this.shards.deadline_moved();
            match tokio::time::timeout(Duration::from_millis(MAX_PARK_MS), receiver).await {
                Ok(Ok(response)) => Ok(response),
                _ => {
                    if let Ok(mut parked) = this.parked.lock() {
                        parked.remove(&request_id);
                    }
                    Err(KafkaError::new(
                        errors::REQUEST_TIMED_OUT,
                        "group request got no answer",
                    ))
                }
            }
        })
    }

    fn run_on_shard(
        &self,
        partition: i32,
        version: i16,
        request: RequestBody,
        topics: &Topics,
        client: &ClientInfo,
        check: impl FnOnce(&Partition) -> Result<(), i16>,
    ) -> Result<(RequestId, oneshot::Receiver<ResponseBody>, Pending), KafkaError> {
        let shard = self.shards.shard(partition).ok_or_else(|| {
            KafkaError::new(
                errors::NOT_COORDINATOR,
                format!("group coordinator for {OFFSETS_TOPIC}-{partition} is not loaded"),
            )
        })?;
        let mut guard = lock(&shard);
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        if let Ok(mut parked) = self.parked.lock() {
            parked.insert(
                request_id,
                ParkedRequest {
                    partition,
                    answer,
                    version,
                    request: request.clone(),
                },
            );
        }
        // Unloaded between the lookup and the lock: its parked requests were refused already,
        // so this one is refused too rather than parked on a shard nothing drives any more.
        // (The flag, not the shards map, is read: taking `shards` here, under the shard's
        // lock, would deadlock with `unload_unled`.)
        let verdict = if guard.unloaded {
            Err(fjord_common::errors::NOT_COORDINATOR)
        } else {
            check(&guard.partition)
        };
        let refused = |request: &RequestBody, code| Effects {
            responses: fjord_group::refusal(version, request, code)
                .map(|r| vec![(request_id, r)])
                .unwrap_or_default(),
            ..Effects::default()
        };
        let effects = match verdict {
            Ok(()) => {
                // A write would be refused (ISR below `min.insync.replicas`): the shard is kept
                // as it was, to be put back if the request writes, and the request refused as
                // Kafka's coordinators answer NOT_ENOUGH_REPLICAS.
                let saved = guard
                    .partition
                    .min_isr_shortfall()
                    .map(|_| (guard.core.clone(), request.clone()));
                let effects =
                    guard
                        .core
                        .handle_from(now_ms(), request_id, version, request, topics, client);
                match saved {
                    Some((core, request)) if !effects.records.is_empty() => {
                        guard.core = core;
                        refused(&request, fjord_common::errors::COORDINATOR_NOT_AVAILABLE)
                    }
                    _ => effects,
                }
            }
            Err(code) => refused(&request, code),
        };
        self.count_rebalances(&mut guard);
        let pending = self.persist_and_release(&mut guard, effects);
        Ok((request_id, receiver, pending))
    }

    /// Moves the rebalances the shard ran into the broker's metrics (after any undo: an undone
    /// run did not rebalance).
    fn count_rebalances(&self, shard: &mut GroupShard) {
        let (classic, consumer, share) = shard.core.take_rebalances();
        (self.shards.metrics().coordinators).rebalanced(classic, consumer, share);
    }

    /// Appends the effects' records under the shard lock; returns what must be flushed and the
    /// responses to release after the flush.
    fn persist_and_release(&self, shard: &mut GroupShard, effects: Effects) -> Pending {
        let mut pending = Pending {
            appended: None,
            responses: effects.responses,
            failed: None,
            share_inits: effects.share_inits,
        };
        if effects.records.is_empty() {
            return pending;
        }
        match coordinator_log::append(&shard.partition, &effects.records, effects.transaction) {
            Ok(appended) => pending.appended = Some(appended),
            Err(failure) => pending.failed = Some(failure),
        }
        pending
    }

    async fn await_durable_and_release(&self, pending: Pending) {
        let mut failed = pending.failed;
        if let Some(appended) = pending.appended {
            let timeout = Duration::from_millis(self.commit_timeout_ms);
            if let Err(failure) = coordinator_log::written(&self.flusher, appended, timeout).await {
                failed = Some(failure);
            }
        }
        let answered: Vec<(ParkedRequest, ResponseBody)> = {
            let Ok(mut parked) = self.parked.lock() else {
                return;
            };
            pending
                .responses
                .into_iter()
                .filter_map(|(id, response)| parked.remove(&id).map(|p| (p, response)))
                .collect()
        };
        match failed {
            // The state change may not be durable or replicated: its requests are refused as
            // Kafka's coordinators refuse them after a failed write, and the clients retry
            // (finding the coordinator anew on NOT_COORDINATOR).
            Some(failure) => {
                tracing::warn!(%failure, "group coordinator write failed; its requests refused");
                let code = failure.error_code();
                for (p, _) in answered {
                    p.refuse(code);
                }
            }
            None => {
                for (p, response) in answered {
                    let _ = p.answer.send(response);
                }
                for init in pending.share_inits {
                    if self.share_inits.try_send(init).is_err() {
                        tracing::warn!("share initializations queue full: asked again later");
                    }
                }
            }
        }
    }

    /// Ticks the shards whose deadline has come by `now`; answers the earliest deadline left.
    pub async fn run_due_timers(&self, now: i64) -> Option<i64> {
        let (due, mut next) = self.shards.due(now);
        for (_, shard) in due {
            let (pending, deadline) = {
                let mut guard = lock(&shard);
                // As for a request: under `min.insync.replicas` a tick that writes is undone
                // (its deadline still due, it is tried again after a pause).
                let saved = guard
                    .partition
                    .min_isr_shortfall()
                    .map(|_| guard.core.clone());
                let effects = guard.core.tick(now);
                let pending = match saved {
                    Some(core) if !effects.records.is_empty() => {
                        guard.core = core;
                        None
                    }
                    _ => Some(self.persist_and_release(&mut guard, effects)),
                };
                self.count_rebalances(&mut guard);
                (pending, after_tick(guard.core.next_deadline(), now))
            };
            next = earliest(next, deadline);
            if let Some(pending) = pending {
                self.await_durable_and_release(pending).await;
            }
        }
        next
    }

    /// Every group of the loaded shards, for a metrics scrape.
    pub fn summaries(&self) -> Vec<fjord_group::GroupSummary> {
        self.shards
            .all_shards()
            .into_iter()
            .flat_map(|(_, shard)| fjord_common::lock(&shard).core.summaries())
            .collect()
    }

    /// ListGroups over every shard: each shard is asked now, the answers merged when they come.
    pub fn list_groups(
        self: &Arc<Self>,
        version: i16,
        request: RequestBody,
        topics: &Topics,
    ) -> GroupAnswer {
        let answers: Vec<GroupAnswer> = self
            .shards
            .all_shards()
            .into_iter()
            .map(|(partition, _)| {
                self.start(
                    partition,
                    version,
                    request.clone(),
                    topics,
                    &ClientInfo::default(),
                )
            })
            .collect();
        Box::pin(async move {
            let mut merged = ListGroupsResponse::default();
            for answer in answers {
                match answer.await {
                    Ok(ResponseBody::ListGroups(r)) => {
                        if r.error_code != 0 {
                            merged.error_code = r.error_code;
                        }
                        merged.groups.extend(r.groups);
                    }
                    Ok(_) | Err(_) => {
                        merged.error_code = fjord_common::errors::COORDINATOR_NOT_AVAILABLE
                    }
                }
            }
            merged.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
            Ok(ResponseBody::ListGroups(merged))
        })
    }

    /// Requests naming several groups are split by shard, each part started now, and their
    /// answers merged.
    pub fn multi_group(
        self: &Arc<Self>,
        version: i16,
        request: RequestBody,
        topics: &Topics,
        client: &ClientInfo,
    ) -> GroupAnswer {
        let parts = match self.split_request(&request, version) {
            Ok(parts) => parts,
            Err(message) => return Box::pin(async move { Err(message) }),
        };
        let answers: Vec<GroupAnswer> = parts
            .into_iter()
            .map(|(partition, part)| self.start(partition, version, part, topics, client))
            .collect();
        Box::pin(async move {
            // Every part runs to its end (each releases its parked answer) before an error is
            // returned: the parts' state changes were all made at dispatch.
            let mut parts = Vec::with_capacity(answers.len());
            for answer in answers {
                parts.push(answer.await);
            }
            let mut merged = empty_answer(&request);
            for part in parts {
                merge_answer(&mut merged, part?);
            }
            Ok(merged)
        })
    }

    /// A request naming groups of several shards, as one request per shard (by
    /// `__consumer_offsets` partition).
    fn split_request(
        &self,
        request: &RequestBody,
        version: i16,
    ) -> Result<Vec<(i32, RequestBody)>, KafkaError> {
        let split = |groups: &[String]| self.split(groups).into_iter();
        Ok(match request {
            RequestBody::DescribeGroups(r) => split(&r.groups)
                .map(|(partition, groups)| {
                    let part = DescribeGroupsRequest {
                        groups,
                        ..r.clone()
                    };
                    (partition, RequestBody::DescribeGroups(part))
                })
                .collect(),
            RequestBody::DeleteGroups(r) => split(&r.groups_names)
                .map(|(partition, groups_names)| {
                    let part = DeleteGroupsRequest { groups_names };
                    (partition, RequestBody::DeleteGroups(part))
                })
                .collect(),
            RequestBody::ConsumerGroupDescribe(r) => split(&r.group_ids)
                .map(|(partition, group_ids)| {
                    let part = ConsumerGroupDescribeRequest {
                        group_ids,
                        ..r.clone()
                    };
                    (partition, RequestBody::ConsumerGroupDescribe(part))
                })
                .collect(),
            RequestBody::ShareGroupDescribe(r) => split(&r.group_ids)
                .map(|(partition, group_ids)| {
                    let part = ShareGroupDescribeRequest {
                        group_ids,
                        ..r.clone()
                    };
                    (partition, RequestBody::ShareGroupDescribe(part))
                })
                .collect(),
            RequestBody::OffsetFetch(r) if version >= 8 => {
                let ids: Vec<String> = r.groups.iter().map(|g| g.group_id.clone()).collect();
                split(&ids)
                    .map(|(partition, group_ids)| {
                        let groups = r
                            .groups
                            .iter()
                            .filter(|g| group_ids.contains(&g.group_id))
                            .cloned()
                            .collect();
                        let part = OffsetFetchRequest {
                            groups,
                            ..r.clone()
                        };
                        (partition, RequestBody::OffsetFetch(part))
                    })
                    .collect()
            }
            other => {
                return Err(KafkaError::new(
                    errors::INVALID_REQUEST,
                    format!("{} is not a multi-group request", other.api_key().name()),
                ))
            }
        })
    }

    fn split(&self, groups: &[String]) -> BTreeMap<i32, Vec<String>> {
        let mut by_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for g in groups {
            by_partition
                .entry(self.partition_of(g))
                .or_default()
                .push(g.clone());
        }
        by_partition
    }
}

/// The empty answer of a multi-group request, which its shards' answers are merged into.
fn empty_answer(request: &RequestBody) -> ResponseBody {
    match request {
        RequestBody::DescribeGroups(_) => ResponseBody::DescribeGroups(Default::default()),
        RequestBody::DeleteGroups(_) => ResponseBody::DeleteGroups(Default::default()),
        RequestBody::ConsumerGroupDescribe(_) => {
            ResponseBody::ConsumerGroupDescribe(Default::default())
        }
        RequestBody::ShareGroupDescribe(_) => ResponseBody::ShareGroupDescribe(Default::default()),
        _ => ResponseBody::OffsetFetch(Default::default()),
    }
}

/// Adds one shard's part of a multi-group answer to `merged`.
fn merge_answer(merged: &mut ResponseBody, part: ResponseBody) {
    match (merged, part) {
        (ResponseBody::DescribeGroups(m), ResponseBody::DescribeGroups(a)) => {
            m.groups.extend(a.groups)
        }
        (ResponseBody::DeleteGroups(m), ResponseBody::DeleteGroups(a)) => {
            m.results.extend(a.results)
        }
        (ResponseBody::ConsumerGroupDescribe(m), ResponseBody::ConsumerGroupDescribe(a)) => {
            m.groups.extend(a.groups)
        }
        (ResponseBody::ShareGroupDescribe(m), ResponseBody::ShareGroupDescribe(a)) => {
            m.groups.extend(a.groups)
        }
        (ResponseBody::OffsetFetch(m), ResponseBody::OffsetFetch(a)) => m.groups.extend(a.groups),
        _ => {}
    }
}

/// The answer to a group request started on its shard.
pub type GroupAnswer =
    Pin<Box<dyn Future<Output = Result<ResponseBody, KafkaError>> + Send + 'static>>;

struct Pending {
    /// The records' end: answered once durable and in every in-sync replica.
    appended: Option<coordinator_log::Appended>,
    responses: Vec<(RequestId, ResponseBody)>,
    failed: Option<coordinator_log::WriteFailure>,
    /// Sent once the records are written.
    share_inits: Vec<ShareInit>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::mpsc;

    use fjord_config::BrokerConfig;
    use fjord_metadata::{ConfigRecord, MetadataRecord, TopicRecord};
    use fjord_protocol::messages::heartbeat_request::HeartbeatRequest;
    use fjord_protocol::messages::offset_commit_request::{
        OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use fjord_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use fjord_storage::log::LogConfig;
    use fjord_storage::log_manager::LogManager;

    use super::*;

    const OFFSETS_TOPIC_ID: fjord_common::Uuid = fjord_common::Uuid([7; 16]);

    /// A runtime on broker 1 leading `__consumer_offsets-0`, its shard loaded.
    fn loaded_runtime(dir: &std::path::Path, tokio: &tokio::runtime::Runtime) -> Arc<GroupRuntime> {
        runtime_with(
            dir,
            tokio,
            crate::replication::replica_manager::led_by_broker_1(OFFSETS_TOPIC_ID, 0),
            &[],
            GroupConfig::default(),
        )
        .0
    }

    /// A runtime on broker 1 with `__consumer_offsets-0` as `partition` says and `configs`
    /// set on the topic, its shard loaded; and the metadata records, to change later.
    fn runtime_with(
        dir: &std::path::Path,
        tokio: &tokio::runtime::Runtime,
        partition: MetadataRecord,
        configs: &[(&str, &str)],
        config: GroupConfig,
    ) -> (Arc<GroupRuntime>, Vec<MetadataRecord>) {
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let (logs, _) = LogManager::open(&[dir.to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, Arc::new(broker), logs));
        let mut records = vec![
            MetadataRecord::Topic(TopicRecord {
                name: OFFSETS_TOPIC.into(),
                topic_id: OFFSETS_TOPIC_ID,
            }),
            partition,
        ];
        records.extend(
            configs
                .iter()
                .map(|(name, value)| topic_config(name, value)),
        );
        let image = Arc::new(MetadataImage::from_records(1, &records).unwrap());
        replicas.apply_image(&image, 0).unwrap();
        let (flusher, _) = tokio.block_on(async {
            crate::replication::flusher::start(Arc::new(|_, _| {}), crate::metrics::Metrics::new())
        });
        let runtime = Arc::new(GroupRuntime::new(
            config,
            1,
            replicas,
            flusher,
            Arc::new(Notify::new()),
        ));
        runtime.load_hosted().unwrap();
        assert!(runtime.all_loaded());
        (runtime, records)
    }

    fn topic_config(name: &str, value: &str) -> MetadataRecord {
        MetadataRecord::Config(ConfigRecord {
            resource_type: fjord_metadata::CONFIG_RESOURCE_TOPIC,
            resource_name: OFFSETS_TOPIC.into(),
            name: name.into(),
            value: Some(value.into()),
        })
    }

    /// Topic `t` with one partition, as the coordinator sees it.
    fn topic_t() -> Topics {
        Topics {
            by_name: [(
                "t".to_string(),
                TopicInfo {
                    name: "t".into(),
                    topic_id: fjord_common::Uuid([8; 16]),
                    partitions: 1,
                },
            )]
            .into(),
        }
    }

    /// Group `g`'s simple (generation -1) commit of `offset` for `t-0`.
    fn commit_of(offset: i64) -> RequestBody {
        RequestBody::OffsetCommit(OffsetCommitRequest {
            group_id: "g".into(),
            generation_id_or_member_epoch: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        })
    }

    fn commit_error(answer: Result<ResponseBody, KafkaError>) -> i16 {
        match answer {
            Ok(ResponseBody::OffsetCommit(r)) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// A runtime leading `__consumer_offsets-0` with broker 2 in sync but never fetching, so
    /// no write reaches the high watermark, under `offsets.commit.timeout.ms` = `timeout_ms`.
    fn runtime_with_a_silent_follower(
        dir: &std::path::Path,
        tokio: &tokio::runtime::Runtime,
        timeout_ms: i32,
    ) -> (Arc<GroupRuntime>, Vec<MetadataRecord>) {
        let partition = crate::replication::replica_manager::led_by_broker_1_with(
            OFFSETS_TOPIC_ID,
            0,
            vec![1, 2],
            vec![1, 2],
        );
        let config = GroupConfig {
            offsets_commit_timeout_ms: timeout_ms,
            ..GroupConfig::default()
        };
        runtime_with(dir, tokio, partition, &[], config)
    }

    #[test]
    fn a_write_the_in_sync_replicas_do_not_confirm_in_time_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let (runtime, _) = runtime_with_a_silent_follower(dir.path(), &tokio, 100);
        let answer = runtime.start(0, 8, commit_of(7), &topic_t(), &ClientInfo::default());
        assert_eq!(
            commit_error(tokio.block_on(answer)),
            fjord_common::errors::COORDINATOR_NOT_AVAILABLE
        );
    }

    #[test]
    fn a_write_waiting_when_leadership_moves_is_refused_not_coordinator() {
        let dir = tempfile::tempdir().unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let (runtime, mut records) = runtime_with_a_silent_follower(dir.path(), &tokio, 60_000);
        let answer = runtime.start(0, 8, commit_of(7), &topic_t(), &ClientInfo::default());
        let waiting = tokio.spawn(answer);
        for record in &mut records {
            if let MetadataRecord::Partition(p) = record {
                p.leader = 2;
                p.leader_epoch = 1;
                p.partition_epoch = 1;
            }
        }
        let image = Arc::new(MetadataImage::from_records(2, &records).unwrap());
        runtime.shards.replicas().apply_image(&image, 0).unwrap();
        let answer =
            tokio.block_on(async { tokio::time::timeout(Duration::from_secs(30), waiting).await });
        let answer = answer.expect("answered when leadership moved, not after the timeout");
        assert_eq!(
            commit_error(answer.unwrap()),
            fjord_common::errors::NOT_COORDINATOR
        );
    }

    #[test]
    fn under_min_insync_replicas_a_write_is_refused_and_the_shard_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        // Three replicas, only the leader in sync, two needed.
        let shrunk = crate::replication::replica_manager::led_by_broker_1_with(
            OFFSETS_TOPIC_ID,
            0,
            vec![1, 2, 3],
            vec![1],
        );
        let (runtime, mut records) = runtime_with(
            dir.path(),
            &tokio,
            shrunk,
            &[("min.insync.replicas", "2")],
            GroupConfig::default(),
        );
        let topics = topic_t();
        let commit = |offset: i64| {
            let answer = runtime.start(0, 8, commit_of(offset), &topics, &ClientInfo::default());
            commit_error(tokio.block_on(answer))
        };
        let committed = || {
            let request = RequestBody::OffsetFetch(OffsetFetchRequest {
                group_id: "g".into(),
                topics: Some(vec![OffsetFetchRequestTopic {
                    name: "t".into(),
                    partition_indexes: vec![0],
                }]),
                ..Default::default()
            });
            let answer = runtime.start(0, 7, request, &topics, &ClientInfo::default());
            match tokio.block_on(answer).unwrap() {
                ResponseBody::OffsetFetch(r) => r.topics[0].partitions[0].committed_offset,
                other => panic!("{other:?}"),
            }
        };
        let log_end = || {
            let partition = runtime.shards.replicas().get(OFFSETS_TOPIC, 0).unwrap();
            let end = partition.lock().log_end_offset();
            end
        };
        assert_eq!(commit(42), fjord_common::errors::COORDINATOR_NOT_AVAILABLE);
        assert_eq!(committed(), -1, "the refused commit left no offset behind");
        assert_eq!(log_end(), 0, "nothing appended");
        // Enough replicas again: the same commit is taken.
        records.push(topic_config("min.insync.replicas", "1"));
        let image = Arc::new(MetadataImage::from_records(2, &records).unwrap());
        runtime.shards.replicas().apply_image(&image, 0).unwrap();
        assert_eq!(commit(42), fjord_common::errors::NONE);
        assert_eq!(committed(), 42);
        assert!(log_end() > 0);
    }

    #[test]
    fn requests_and_transaction_markers_on_one_shard_never_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = loaded_runtime(dir.path(), &tokio);
        // A request takes its shard's lock; a marker takes the shards' lock, then the shard's.
        // Both run at once, many times over: a request that took the shards' lock under its
        // shard's (the lock order reversed) deadlocks here within a few hundred rounds.
        const ROUNDS: usize = 20_000;
        let (done, finished) = mpsc::channel();
        let requests = {
            let (runtime, done) = (runtime.clone(), done.clone());
            std::thread::spawn(move || {
                let topics = Topics::default();
                for _ in 0..ROUNDS {
                    let heartbeat = RequestBody::Heartbeat(HeartbeatRequest {
                        group_id: "g".into(),
                        member_id: "m".into(),
                        ..HeartbeatRequest::default()
                    });
                    drop(runtime.start(0, 4, heartbeat, &topics, &ClientInfo::default()));
                }
                done.send("requests").unwrap();
            })
        };
        let markers = std::thread::spawn(move || {
            for producer_id in 0..ROUNDS as i64 {
                runtime
                    .append_marker(0, producer_id, true, || Ok::<(), ()>(()))
                    .unwrap();
            }
            done.send("markers").unwrap();
        });
        for _ in 0..2 {
            if finished.recv_timeout(Duration::from_secs(60)).is_err() {
                // Dropping the tokio runtime would wait for the flusher, whose handle the
                // deadlocked threads hold.
                tokio.shutdown_background();
                panic!("a request and a marker deadlocked on the group coordinator's locks");
            }
        }
        requests.join().unwrap();
        markers.join().unwrap();
    }
}
