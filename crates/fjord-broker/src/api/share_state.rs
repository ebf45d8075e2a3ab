//! The share coordinator's RPCs (KIP-932), sent between brokers: a partition leader's
//! ReadShareGroupState and WriteShareGroupState, the group coordinator's
//! InitializeShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary. Each entry is
//! checked against the metadata image, then run on the shard of the `__share_group_state`
//! partition its key falls on (`coordinator::share_state`); every entry is answered with its own
//! error. Callers need CLUSTER_ACTION (`authz`).

use std::collections::BTreeMap;

use fjord_common::{errors, now_ms, CoordinatorRecord, Uuid};
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::delete_share_group_state_request::DeleteShareGroupStateRequest;
use fjord_protocol::messages::delete_share_group_state_response as delete;
use fjord_protocol::messages::initialize_share_group_state_request::InitializeShareGroupStateRequest;
use fjord_protocol::messages::initialize_share_group_state_response as initialize;
use fjord_protocol::messages::read_share_group_state_request::ReadShareGroupStateRequest;
use fjord_protocol::messages::read_share_group_state_response as read;
use fjord_protocol::messages::read_share_group_state_summary_request::ReadShareGroupStateSummaryRequest;
use fjord_protocol::messages::read_share_group_state_summary_response as summary;
use fjord_protocol::messages::write_share_group_state_request::WriteShareGroupStateRequest;
use fjord_protocol::messages::write_share_group_state_response as write;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_share::records::StateKey;
use fjord_share::{
    PersistedBatch, PersistedState, Refusal, ShareCoordinatorShard, StateWrite, Summary,
};

use crate::api::ShareStateApi;
use crate::coordinator::share_state::Outcome;

/// One partition of a request, with what it asks.
struct Entry<P> {
    topic_id: Uuid,
    partition: i32,
    ask: P,
}

/// Each entry's answer, in request order.
type Answers<T> = Vec<(Uuid, i32, Result<T, Refusal>)>;

/// One topic's partitions and their answers.
type TopicAnswers<T> = (Uuid, Vec<(i32, Result<T, Refusal>)>);

/// The entries of a request (every one of these RPCs holds `topics`, each with a `topic_id` and
/// `partitions`), each asking what `$ask` reads of its partition `$p`.
macro_rules! entries {
    ($request:expr, |$p:ident| $ask:expr) => {
        $request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |$p| Entry {
                    topic_id: t.topic_id,
                    partition: $p.partition,
                    ask: $ask,
                })
            })
            .collect::<Vec<_>>()
    };
}

/// A response whose partitions carry only an error code and message (InitializeShareGroupState,
/// WriteShareGroupState, DeleteShareGroupState), from the answers.
macro_rules! errors_response {
    ($module:ident :: $response:ident, $result:ident, $answers:expr) => {
        $module::$response {
            results: by_topic($answers, |topic_id, partitions| $module::$result {
                topic_id,
                partitions: partitions
                    .into_iter()
                    .map(|(partition, answer)| {
                        let (error_code, error_message) = outcome_error(&answer);
                        $module::PartitionResult {
                            partition,
                            error_code,
                            error_message,
                        }
                    })
                    .collect(),
            }),
        }
    };
}

impl ShareStateApi {
    pub(crate) async fn initialize_share_group_state(
        &self,
        request: InitializeShareGroupStateRequest,
    ) -> initialize::InitializeShareGroupStateResponse {
        let entries = entries!(request, |p| (p.state_epoch, p.start_offset));
        let now = now_ms();
        let answers = self
            .run_on_shards(
                false,
                &request.group_id,
                entries,
                |shard, key, &(epoch, start)| {
                    writes(shard.initialize(key, epoch, start, now).map(Some))
                },
            )
            .await;
        errors_response!(
            initialize::InitializeShareGroupStateResponse,
            InitializeStateResult,
            answers
        )
    }

    pub(crate) async fn read_share_group_state(
        &self,
        request: ReadShareGroupStateRequest,
    ) -> read::ReadShareGroupStateResponse {
        let entries = entries!(request, |p| p.leader_epoch);
        let now = now_ms();
        let answers = self
            .run_on_shards(
                true,
                &request.group_id,
                entries,
                |shard, key, &leader_epoch| match shard.read(key, leader_epoch, now) {
                    Ok((state, record)) => Outcome {
                        answer: Ok(state),
                        record,
                    },
                    Err(refusal) => Outcome {
                        answer: Err(refusal),
                        record: None,
                    },
                },
            )
            .await;
        read_response(answers)
    }

    pub(crate) async fn write_share_group_state(
        &self,
        request: WriteShareGroupStateRequest,
    ) -> write::WriteShareGroupStateResponse {
        let entries = entries!(request, |p| StateWrite {
            state_epoch: p.state_epoch,
            leader_epoch: p.leader_epoch,
            start_offset: p.start_offset,
            delivery_complete_count: p.delivery_complete_count,
            batches: p
                .state_batches
                .iter()
                .map(|b| PersistedBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.delivery_state,
                    delivery_count: b.delivery_count,
                })
                .collect(),
        });
        let now = now_ms();
        let answers = self
            .run_on_shards(false, &request.group_id, entries, |shard, key, ask| {
                writes(shard.write(key, ask, now).map(Some))
            })
            .await;
        errors_response!(
            write::WriteShareGroupStateResponse,
            WriteStateResult,
            answers
        )
    }

    pub(crate) async fn delete_share_group_state(
        &self,
        request: DeleteShareGroupStateRequest,
    ) -> delete::DeleteShareGroupStateResponse {
        let entries = entries!(request, |_p| ());
        let answers = self
            .run_on_shards(false, &request.group_id, entries, |shard, key, ()| {
                writes(shard.delete(key))
            })
            .await;
        errors_response!(
            delete::DeleteShareGroupStateResponse,
            DeleteStateResult,
            answers
        )
    }

    pub(crate) async fn read_share_group_state_summary(
        &self,
        request: ReadShareGroupStateSummaryRequest,
    ) -> summary::ReadShareGroupStateSummaryResponse {
        let entries = entries!(request, |_p| ());
        let answers = self
            .run_on_shards(false, &request.group_id, entries, |shard, key, ()| {
                Outcome {
                    answer: Ok(shard.summary(key)),
                    record: None,
                }
            })
            .await;
        summary_response(answers)
    }

    /// Checks every entry against the image, then runs `step` on each on the shard its key
    /// falls on, one write per `__share_group_state` partition (`committed`: see
    /// `ShareStateRuntime::run`).
    async fn run_on_shards<P, T>(
        &self,
        committed: bool,
        group_id: &str,
        entries: Vec<Entry<P>>,
        step: impl Fn(&ShareCoordinatorShard, &StateKey, &P) -> Outcome<T>,
    ) -> Answers<T> {
        let image = self.node.image();
        let mut answers: Vec<Option<Result<T, Refusal>>> = Vec::with_capacity(entries.len());
        let mut by_partition: BTreeMap<i32, Vec<(usize, StateKey, P)>> = BTreeMap::new();
        let ids: Vec<(Uuid, i32)> = entries.iter().map(|e| (e.topic_id, e.partition)).collect();
        for (index, entry) in entries.into_iter().enumerate() {
            match check_entry(&image, group_id, entry.topic_id, entry.partition) {
                Err(refusal) => answers.push(Some(Err(refusal))),
                Ok(key) => {
                    answers.push(None);
                    let partition = self.state.partition_of(&key);
                    by_partition
                        .entry(partition)
                        .or_default()
                        .push((index, key, entry.ask));
                }
            }
        }
        for (partition, asks) in by_partition {
            let indexes: Vec<usize> = asks.iter().map(|(i, _, _)| *i).collect();
            let ran = self
                .state
                .run(partition, committed, |shard| {
                    asks.iter()
                        .map(|(_, key, ask)| step(shard, key, ask))
                        .collect()
                })
                .await;
            match ran {
                Ok(results) => {
                    for (index, result) in indexes.into_iter().zip(results) {
                        answers[index] = Some(result);
                    }
                }
                Err(refusal) => {
                    for index in indexes {
                        answers[index] = Some(Err(refusal.clone()));
                    }
                }
            }
        }
        ids.into_iter()
            .zip(answers)
            .map(|((topic_id, partition), answer)| {
                let answer = answer.unwrap_or_else(|| {
                    Err(Refusal {
                        error_code: errors::UNKNOWN_SERVER_ERROR,
                        message: "no answer".into(),
                    })
                });
                (topic_id, partition, answer)
            })
            .collect()
    }
}

/// The state key of an entry naming a partition the cluster has.
fn check_entry(
    image: &MetadataImage,
    group_id: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<StateKey, Refusal> {
    if group_id.is_empty() || topic_id == Uuid::ZERO || partition < 0 {
        return Err(Refusal {
            error_code: errors::INVALID_REQUEST,
            message: "a group id, a topic id and a partition are needed".into(),
        });
    }
    let known = image
        .topic_by_id(&topic_id)
        .is_some_and(|t| usize::try_from(partition).is_ok_and(|p| p < t.partitions.len()));
    if !known {
        return Err(Refusal {
            error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
            message: format!("no partition {partition} of topic {topic_id}"),
        });
    }
    Ok(StateKey {
        group_id: group_id.to_string(),
        topic_id,
        partition,
    })
}

/// The outcome of a step that answers nothing but whether it wrote (or had nothing to write).
fn writes(result: Result<Option<CoordinatorRecord>, Refusal>) -> Outcome<()> {
    match result {
        Ok(record) => Outcome {
            answer: Ok(()),
            record,
        },
        Err(refusal) => Outcome {
            answer: Err(refusal),
            record: None,
        },
    }
}

fn outcome_error<T>(answer: &Result<T, Refusal>) -> (i16, Option<String>) {
    match answer {
        Ok(_) => (errors::NONE, None),
        Err(r) => (r.error_code, Some(r.message.clone())),
    }
}

/// Answers grouped by topic, topics and partitions in request order.
fn by_topic<T, R>(
    answers: Answers<T>,
    result: impl Fn(Uuid, Vec<(i32, Result<T, Refusal>)>) -> R,
) -> Vec<R> {
    let mut topics: Vec<TopicAnswers<T>> = Vec::new();
    for (topic_id, partition, answer) in answers {
        match topics.iter_mut().find(|(id, _)| *id == topic_id) {
            Some((_, partitions)) => partitions.push((partition, answer)),
            None => topics.push((topic_id, vec![(partition, answer)])),
        }
    }
    topics
        .into_iter()
        .map(|(topic_id, partitions)| result(topic_id, partitions))
        .collect()
}

fn read_result(partition: i32, answer: Result<PersistedState, Refusal>) -> read::PartitionResult {
    match answer {
        Ok(state) => read::PartitionResult {
            partition,
            error_code: errors::NONE,
            error_message: None,
            state_epoch: state.state_epoch,
            start_offset: state.start_offset,
            state_batches: state
                .batches
                .iter()
                .map(|b| read::StateBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.delivery_state,
                    delivery_count: b.delivery_count,
                })
                .collect(),
        },
        Err(refusal) => read::PartitionResult {
            partition,
            error_code: refusal.error_code,
            error_message: Some(refusal.message),
            state_epoch: 0,
            start_offset: -1,
            state_batches: Vec::new(),
        },
    }
}

fn summary_result(partition: i32, answer: Result<Summary, Refusal>) -> summary::PartitionResult {
    match answer {
        Ok(s) => summary::PartitionResult {
            partition,
            error_code: errors::NONE,
            error_message: None,
            state_epoch: s.state_epoch,
            leader_epoch: s.leader_epoch,
            start_offset: s.start_offset,
            delivery_complete_count: s.delivery_complete_count,
        },
        Err(refusal) => summary::PartitionResult {
            partition,
            error_code: refusal.error_code,
            error_message: Some(refusal.message),
            state_epoch: 0,
            leader_epoch: 0,
            start_offset: -1,
            delivery_complete_count: -1,
        },
    }
}

/// A share coordinator RPC refused whole (no CLUSTER_ACTION): every entry carries `code` and
/// `message`.
pub(crate) fn refused_whole(body: &RequestBody, code: i16, message: &str) -> Option<ResponseBody> {
    fn all<A, T>(entries: Vec<Entry<A>>, code: i16, message: &str) -> Answers<T> {
        let refusal = Refusal {
            error_code: code,
            message: message.to_string(),
        };
        entries
            .into_iter()
            .map(|e| (e.topic_id, e.partition, Err(refusal.clone())))
            .collect()
    }
    Some(match body {
        RequestBody::InitializeShareGroupState(r) => {
            ResponseBody::InitializeShareGroupState(errors_response!(
                initialize::InitializeShareGroupStateResponse,
                InitializeStateResult,
                all::<(), ()>(entries!(r, |_p| ()), code, message)
            ))
        }
        RequestBody::ReadShareGroupState(r) => ResponseBody::ReadShareGroupState(read_response(
            all(entries!(r, |_p| ()), code, message),
        )),
        RequestBody::WriteShareGroupState(r) => {
            ResponseBody::WriteShareGroupState(errors_response!(
                write::WriteShareGroupStateResponse,
                WriteStateResult,
                all::<(), ()>(entries!(r, |_p| ()), code, message)
            ))
        }
        RequestBody::DeleteShareGroupState(r) => {
            ResponseBody::DeleteShareGroupState(errors_response!(
                delete::DeleteShareGroupStateResponse,
                DeleteStateResult,
                all::<(), ()>(entries!(r, |_p| ()), code, message)
            ))
        }
        RequestBody::ReadShareGroupStateSummary(r) => ResponseBody::ReadShareGroupStateSummary(
            summary_response(all(entries!(r, |_p| ()), code, message)),
        ),
        _ => return None,
    })
}

fn read_response(answers: Answers<PersistedState>) -> read::ReadShareGroupStateResponse {
    read::ReadShareGroupStateResponse {
        results: by_topic(answers, |topic_id, partitions| read::ReadStateResult {
            topic_id,
            partitions: partitions
                .into_iter()
                .map(|(partition, answer)| read_result(partition, answer))
                .collect(),
        }),
    }
}

fn summary_response(answers: Answers<Summary>) -> summary::ReadShareGroupStateSummaryResponse {
    summary::ReadShareGroupStateSummaryResponse {
        results: by_topic(answers, |topic_id, partitions| {
            summary::ReadStateSummaryResult {
                topic_id,
                partitions: partitions
                    .into_iter()
                    .map(|(partition, answer)| summary_result(partition, answer))
                    .collect(),
            }
        }),
    }
}
