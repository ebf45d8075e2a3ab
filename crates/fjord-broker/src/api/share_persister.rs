//! The partition leader's side of share-state persistence (KIP-932's persister). A share
//! partition is loaded by ReadShareGroupState from its share coordinator (raising the stored
//! leader epoch, which fences an older leader), and every change of its state but an
//! acquisition is written by WriteShareGroupState: before an acknowledgement is answered, and
//! in the background for lock expiry, a session's end, and records found undeliverable. A write
//! that fails evicts the share partition, so the next fetch loads it again from what the
//! coordinator holds. The coordinator is the leader of the key's `__share_group_state`
//! partition: this broker itself (called in process) or another, over an inter-broker link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjord_common::{errors, lock};
use fjord_group::ShareInit;
use fjord_protocol::messages::initialize_share_group_state_request as init;
use fjord_protocol::messages::read_share_group_state_request as read;
use fjord_protocol::messages::write_share_group_state_request as write;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_share::records::StateKey;
use fjord_share::{RecordState, Refusal, StateBatch, StateWrite};

use crate::api::{Forwarder, Node, ShareStateApi};
use crate::coordinator::share::{Change, SharePartitions};
use crate::coordinator::share_state::SHARE_STATE_TOPIC;
use crate::link::peers::LinkPool;

/// Tries of one call before its error is the answer, the first retry after `FIRST_BACKOFF`,
/// doubling: a coordinator moving or loading is waited out for about three seconds.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A share partition's state as its coordinator holds it.
pub(crate) struct StoredState {
    pub state_epoch: i32,
    /// -1 when no leader has chosen it yet: `share.auto.offset.reset` decides.
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

pub(crate) struct Persister {
    node: Arc<Node>,
    forwarder: Arc<Forwarder>,
    /// This broker's own share coordinator.
    local: Arc<ShareStateApi>,
    /// Connections to the other brokers' share coordinators.
    links: Mutex<HashMap<i32, Arc<LinkPool>>>,
}

impl Persister {
    pub(crate) fn new(
        node: Arc<Node>,
        forwarder: Arc<Forwarder>,
        local: Arc<ShareStateApi>,
    ) -> Persister {
        Persister {
            node,
            forwarder,
            local,
            links: Mutex::new(HashMap::new()),
        }
    }

    /// Reads `key`'s state as the leader of `leader_epoch`. INVALID_REQUEST when its group
    /// coordinator has not initialized it (the partition is not assigned yet).
    pub(crate) async fn read(
        &self,
        key: &StateKey,
        leader_epoch: i32,
    ) -> Result<StoredState, Refusal> {
        let request = RequestBody::ReadShareGroupState(read::ReadShareGroupStateRequest {
            group_id: key.group_id.clone(),
            topics: vec![read::ReadStateData {
                topic_id: key.topic_id,
                partitions: vec![read::PartitionData {
                    partition: key.partition,
                    leader_epoch,
                }],
            }],
        });
        let ResponseBody::ReadShareGroupState(response) = self.call(key, request).await? else {
            return Err(wrong_answer());
        };
        let Some(p) = response
            .results
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition == key.partition)
        else {
            return Err(wrong_answer());
        };
        if p.error_code != errors::NONE {
            return Err(Refusal {
                error_code: p.error_code,
                message: p.error_message.clone().unwrap_or_default(),
            });
        }
        let batches = p
            .state_batches
            .iter()
            .map(|b| StateBatch {
                first_offset: b.first_offset,
                last_offset: b.last_offset,
                // Archiving (3, a dead-letter hand-off) is done with, like archived.
                state: RecordState::from_id(b.delivery_state).unwrap_or(RecordState::Archived),
                delivery_count: b.delivery_count,
            })
            .collect();
        Ok(StoredState {
            state_epoch: p.state_epoch,
            start_offset: p.start_offset,
            batches,
        })
    }

    /// Initializes the share-partition state a group coordinator asked for, partition by
    /// partition (each may have its own share coordinator); whether every one succeeded.
    pub(crate) async fn initialize_all(&self, ask: &ShareInit) -> bool {
        let mut all = true;
        for (topic_id, partitions, start_offset) in &ask.topics {
            for &partition in partitions {
                let key = StateKey {
                    group_id: ask.group_id.clone(),
                    topic_id: *topic_id,
                    partition,
                };
                if let Err(refusal) = self.initialize(&key, ask.state_epoch, *start_offset).await {
                    tracing::warn!(
                        group = %ask.group_id,
                        %topic_id,
                        partition,
                        error = errors::name(refusal.error_code),
                        message = %refusal.message,
                        "share partition state not initialized"
                    );
                    all = false;
                }
            }
        }
        all
    }

    async fn initialize(
        &self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), Refusal> {
        let request =
            RequestBody::InitializeShareGroupState(init::InitializeShareGroupStateRequest {
                group_id: key.group_id.clone(),
                topics: vec![init::InitializeStateData {
                    topic_id: key.topic_id,
                    partitions: vec![init::PartitionData {
                        partition: key.partition,
                        state_epoch,
                        start_offset,
                    }],
                }],
            });
        let ResponseBody::InitializeShareGroupState(response) = self.call(key, request).await?
        else {
            return Err(wrong_answer());
        };
        first_error(
            response
                .results
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| (p.error_code, &p.error_message)),
        )
        .map_or(Ok(()), Err)
    }

    /// Writes a change of `key`'s state.
    pub(crate) async fn write(&self, key: &StateKey, change: &StateWrite) -> Result<(), Refusal> {
        let request = RequestBody::WriteShareGroupState(write::WriteShareGroupStateRequest {
            group_id: key.group_id.clone(),
            topics: vec![write::WriteStateData {
                topic_id: key.topic_id,
                partitions: vec![write::PartitionData {
                    partition: key.partition,
                    state_epoch: change.state_epoch,
                    leader_epoch: change.leader_epoch,
                    start_offset: change.start_offset,
                    delivery_complete_count: change.delivery_complete_count,
                    state_batches: change
                        .batches
                        .iter()
                        .map(|b| write::StateBatch {
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            delivery_state: b.delivery_state,
                            delivery_count: b.delivery_count,
                        })
                        .collect(),
                }],
            }],
        });
        let ResponseBody::WriteShareGroupState(response) = self.call(key, request).await? else {
            return Err(wrong_answer());
        };
        first_error(
            response
                .results
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| (p.error_code, &p.error_message)),
        )
        .map_or(Ok(()), Err)
    }

    /// Writes `changes` in the background; a share partition whose write fails is evicted.
    pub(crate) fn spawn_writes(
        self: &Arc<Self>,
        shares: &Arc<SharePartitions>,
        changes: Vec<Change>,
    ) {
        for change in changes {
            let persister = self.clone();
            let shares = shares.clone();
            tokio::spawn(async move {
                // A failure is logged and its share partition evicted there.
                let _ = persister.write_or_evict(&shares, &change).await;
            });
        }
    }

    /// Writes `change`; on failure evicts its share partition and answers why.
    pub(crate) async fn write_or_evict(
        &self,
        shares: &SharePartitions,
        change: &Change,
    ) -> Result<(), Refusal> {
        let result = self.write(&change.state_key(), &change.write).await;
        if let Err(refusal) = &result {
            tracing::warn!(
                group = %change.key.0,
                partition = %change.key.1,
                error = errors::name(refusal.error_code),
                message = %refusal.message,
                "share partition state not written: evicted, to be loaded again"
            );
            shares.evict(&change.key, &change.loaded);
        }
        result
    }

    /// Sends `request` to `key`'s share coordinator, again while the coordinator is moving,
    /// loading or out of reach.
    async fn call(&self, key: &StateKey, request: RequestBody) -> Result<ResponseBody, Refusal> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let answer = match self.call_once(key, request.clone()).await {
                Ok(response) => match retriable_error(&response) {
                    Some(code) => Err(Refusal {
                        error_code: code,
                        message: "the share coordinator is not available".into(),
                    }),
                    None => return Ok(response),
                },
                Err(refusal) => Err(refusal),
            };
            if attempt >= ATTEMPTS {
                return answer;
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn call_once(
        &self,
        key: &StateKey,
        request: RequestBody,
    ) -> Result<ResponseBody, Refusal> {
        let unavailable = |message: String| Refusal {
            error_code: errors::COORDINATOR_NOT_AVAILABLE,
            message,
        };
        self.forwarder
            .ensure_internal_topic(SHARE_STATE_TOPIC, self.node.config.share_state_topic())
            .await
            .map_err(|e| unavailable(e.message))?;
        let runtime = &self.local.state;
        let partition = runtime.partition_of(key);
        let image = self.node.image();
        let leader = image
            .topic(SHARE_STATE_TOPIC)
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .map_or(-1, |p| p.leader);
        if leader < 0 {
            return Err(unavailable(format!(
                "{SHARE_STATE_TOPIC}-{partition} has no leader"
            )));
        }
        if leader != self.node.config.node_id {
            let links = lock(&self.links).entry(leader).or_default().clone();
            return self
                .node
                .send_on_link(
                    &links,
                    leader,
                    format!("broker-{}-share-persister", self.node.config.node_id),
                    REQUEST_TIMEOUT,
                    i16::MAX,
                    request,
                )
                .await
                .map_err(|e| Refusal {
                    error_code: e.code,
                    message: e.message,
                });
        }
        if runtime.shards.shard(partition).is_none() {
            // Just created, or just led here: its shard loads now rather than at the next
            // metadata change.
            self.forwarder
                .replicas
                .apply_image(&image, fjord_common::now_ms())
                .and_then(|_| runtime.shards.load_hosted())
                .map_err(|e| unavailable(e.message))?;
        }
        let local = &self.local;
        Ok(match request {
            RequestBody::ReadShareGroupState(r) => {
                ResponseBody::ReadShareGroupState(local.read_share_group_state(r).await)
            }
            RequestBody::WriteShareGroupState(r) => {
                ResponseBody::WriteShareGroupState(local.write_share_group_state(r).await)
            }
            RequestBody::InitializeShareGroupState(r) => {
                ResponseBody::InitializeShareGroupState(local.initialize_share_group_state(r).await)
            }
            other => {
                return Err(Refusal {
                    error_code: errors::UNKNOWN_SERVER_ERROR,
                    message: format!("not a persister request: {}", other.api_key().name()),
                })
            }
        })
    }
}

impl Change {
    fn state_key(&self) -> StateKey {
        StateKey {
            group_id: self.key.0.clone(),
            topic_id: self.loaded.topic_id,
            partition: self.key.1.partition,
        }
    }
}

/// The error of a response's partitions that says the coordinator moved, is loading or is
/// down: worth asking again.
fn retriable_error(response: &ResponseBody) -> Option<i16> {
    let mut found = None;
    response.visit_error_codes(&mut |code| {
        if matches!(
            code,
            errors::NOT_COORDINATOR
                | errors::COORDINATOR_NOT_AVAILABLE
                | errors::COORDINATOR_LOAD_IN_PROGRESS
                | errors::REQUEST_TIMED_OUT
        ) {
            found = Some(code);
        }
    });
    found
}

fn first_error<'a>(
    mut partitions: impl Iterator<Item = (i16, &'a Option<String>)>,
) -> Option<Refusal> {
    partitions
        .find(|(code, _)| *code != errors::NONE)
        .map(|(error_code, message)| Refusal {
            error_code,
            message: message.clone().unwrap_or_default(),
        })
}

fn wrong_answer() -> Refusal {
    Refusal {
        error_code: errors::UNKNOWN_SERVER_ERROR,
        message: "the share coordinator answered something else".into(),
    }
}
