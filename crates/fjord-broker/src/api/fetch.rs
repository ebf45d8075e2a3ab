//! The Fetch path (consumers), with min_bytes / max_wait long polling and incremental fetch
//! sessions; plus ListOffsets and OffsetForLeaderEpoch, which read the same partition state.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fjord_protocol::messages::fetch_request::FetchRequest;
use fjord_protocol::messages::fetch_response::*;
use fjord_protocol::messages::list_offsets_request::ListOffsetsRequest;
use fjord_protocol::messages::list_offsets_response::*;
use fjord_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderEpochRequest;
use fjord_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset as LeaderEpochEndOffset, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};
use fjord_protocol::{
    encode_with_external_records, response_header_version, ApiKey, Encodable, EncodeError,
    ExternalRecords, Part, ResponseBody, ResponseHeader, Uuid,
};
use fjord_storage::error::StorageError;
use fjord_storage::FileSlice;

use tokio::sync::Notify;

use crate::api::fetch_session::{RequestedPartition, SessionDecision};
use crate::api::{encode_response, Access, FetchApi};
use crate::metrics::DelayedOperation;
use crate::net::{OutPart, Reply, Response};
use crate::replication::partition_state::FollowerFetch;
use crate::replication::quota::{throttles, Side};
use crate::replication::{LockedPartition, Partition};
use fjord_common::errors;
use fjord_metadata::acl::AclOperation;

/// Longest a fetch may wait, whatever the client asks: bounds a parked request.
const MAX_WAIT_CAP_MS: i64 = 30_000;

/// Encodes a fetch response as parts: the encoded header and fields interleaved with the record
/// batches, which stay in their segment files (`slices`, announced in `body` by the stand-ins of
/// `externals`) and go to the socket with `sendfile` instead of through the message.
fn encode_fetch_response(
    version: i16,
    correlation_id: i32,
    body: &FetchResponse,
    externals: &[ExternalRecords],
    slices: Vec<FileSlice>,
) -> Response {
    let header_version = response_header_version(ApiKey::Fetch, version);
    let encoded =
        encode_with_external_records(bytes::BytesMut::with_capacity(256), externals, |out| {
            ResponseHeader { correlation_id }.encode(out, header_version)?;
            body.encode(out, version)
        });
    let mut slices: Vec<Option<FileSlice>> = slices.into_iter().map(Some).collect();
    let parts = encoded.and_then(|parts| {
        parts
            .into_iter()
            .map(|part| match part {
                Part::Bytes(bytes) => Ok(OutPart::Bytes(bytes)),
                Part::External(id) => slices
                    .get_mut(id as usize)
                    .and_then(Option::take)
                    .map(OutPart::File)
                    .ok_or(EncodeError::ExternalRecordsNotPlaced(id)),
            })
            .collect::<Result<Vec<_>, _>>()
    });
    match parts {
        Ok(parts) => Response::SendParts(parts),
        Err(error) => {
            tracing::error!(version, %error, "cannot encode a fetch response");
            Response::Close(format!(
                "cannot encode a Fetch v{version} response: {error}"
            ))
        }
    }
}

/// A partition's response before anything is known: offsets unknown, no records.
fn no_data(partition_index: i32) -> PartitionData {
    PartitionData {
        partition_index,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        preferred_read_replica: -1,
        records: Some(bytes::Bytes::new()),
        ..Default::default()
    }
}

/// What one partition's read produced: its response fields (records still empty) and the
/// segment range to send as its records, if any.
type PartitionRead = (Target, PartitionData, Option<FileSlice>);

/// One read of every target: what each produced, the bytes read, and whether any failed.
type FetchRead = (Vec<PartitionRead>, usize, bool);

/// One partition to read in this fetch.
#[derive(Clone)]
struct Target {
    topic: String,
    topic_id: Uuid,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: i32,
    current_leader_epoch: i32,
    /// The epoch of the last batch the fetcher has (KIP-320), -1 when unknown.
    last_fetched_epoch: i32,
}

/// Checks a client's view of the leader epoch against ours, as Kafka does.
pub fn check_leader_epoch(partition: &Partition, current_leader_epoch: i32) -> Result<(), i16> {
    if current_leader_epoch < 0 || current_leader_epoch == partition.leader_epoch() {
        Ok(())
    } else if current_leader_epoch > partition.leader_epoch() {
        Err(errors::UNKNOWN_LEADER_EPOCH)
    } else {
        Err(errors::FENCED_LEADER_EPOCH)
    }
}

/// A consumer's fetch from v11 (KIP-392): it may read from a follower (below that replica's
/// high watermark), and a leader may send it to a replica in its rack.
struct ConsumerReads {
    rack: String,
    image: Arc<fjord_metadata::MetadataImage>,
}

/// The follower a fetch comes from: its broker id and the broker epoch it fetched with.
#[derive(Clone, Copy)]
struct Replica {
    id: i32,
    broker_epoch: i64,
}

/// What a follower's fetch may read.
enum FollowerRead {
    /// Up to the log end; the follower's position was recorded.
    Read,
    /// Its log diverged from this one (KIP-320): the largest epoch at most its last fetched
    /// one, and where that epoch ends here. It truncates before fetching again.
    Diverged(i32, i64),
    NotAReplica,
    /// Outside this log (below its start, past its end): answered OFFSET_OUT_OF_RANGE, and its
    /// position not taken.
    OutOfRange,
}

/// Reads `target` from `log` (its partition's, locked) into `data`: the offsets, a follower's
/// position (and divergence), a read_committed consumer's aborted transactions, then the
/// records, unless an error, a divergence or the throttle (`held_back`) says none.
fn read_log(
    plan: &FetchPlan,
    log: &mut LockedPartition<'_>,
    target: &Target,
    data: &mut PartitionData,
    ((remaining, first), held_back): ((usize, bool), bool),
    now_ms: i64,
) -> Result<fjord_storage::log::ReadInfo, Option<StorageError>> {
    let consumer_committed = plan.read_committed && plan.replica.is_none();
    // read_committed consumers read only decided transactions.
    let mut max_offset = if consumer_committed {
        log.last_stable_offset()
    } else {
        log.high_watermark()
    };
    if let Some(replica) = plan.replica {
        match follower_read(log, replica, target, now_ms) {
            FollowerRead::Read => max_offset = log.log_end_offset(),
            FollowerRead::Diverged(epoch, end_offset) => {
                data.diverging_epoch = EpochEndOffset { epoch, end_offset };
                max_offset = target.fetch_offset;
            }
            FollowerRead::NotAReplica => {
                data.error_code = errors::NOT_LEADER_OR_FOLLOWER;
                max_offset = target.fetch_offset;
            }
            FollowerRead::OutOfRange => {
                data.error_code = errors::OFFSET_OUT_OF_RANGE;
                max_offset = target.fetch_offset;
            }
        }
    }
    data.high_watermark = log.high_watermark();
    data.last_stable_offset = log.last_stable_offset();
    data.log_start_offset = log.log_start_offset();
    if consumer_committed {
        let aborted = log.aborted_txns(target.fetch_offset, max_offset);
        data.aborted_transactions = Some(
            aborted
                .into_iter()
                .map(|txn| AbortedTransaction {
                    producer_id: txn.producer_id,
                    first_offset: txn.first_offset,
                })
                .collect(),
        );
    }
    if data.error_code != errors::NONE || data.diverging_epoch.epoch >= 0 || held_back {
        return Ok(fjord_storage::log::ReadInfo {
            records: None,
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
        });
    }
    let limit = (target.partition_max_bytes.max(0) as usize).min(remaining);
    log.read(target.fetch_offset, limit, max_offset, first)
        .map_err(Some)
}

/// The leader's side of a follower's fetch: checks it against this log's bounds and epochs
/// (`check_follower_fetch`), then records its position (which may move the high watermark), as
/// Kafka does.
fn follower_read(
    log: &mut LockedPartition<'_>,
    replica: Replica,
    target: &Target,
    now_ms: i64,
) -> FollowerRead {
    let check = crate::replication::partition_state::check_follower_fetch(
        target.fetch_offset,
        target.last_fetched_epoch,
        log.log_start_offset(),
        log.log_end_offset(),
        |epoch| log.end_offset_for_epoch(epoch),
    );
    match check {
        FollowerFetch::OutOfRange => return FollowerRead::OutOfRange,
        FollowerFetch::Diverged { epoch, end_offset } => {
            return FollowerRead::Diverged(epoch, end_offset)
        }
        FollowerFetch::Read => {}
    }
    match log.follower_fetched(
        replica.id,
        target.fetch_offset,
        replica.broker_epoch,
        now_ms,
    ) {
        Ok(()) => FollowerRead::Read,
        Err(_) => FollowerRead::NotAReplica,
    }
}

/// A fetch request as read: who fetches, which partitions (named, whatever the version), and
/// what the answer must look like.
struct FetchPlan {
    version: i16,
    correlation_id: i32,
    /// v13+: topics by id, in the request and the answer.
    uses_ids: bool,
    /// A follower's fetch (Kafka's replica id, in ReplicaState from v15): it reads up to the log
    /// end and tells the leader how far it has got.
    replica: Option<Replica>,
    /// KIP-392: a consumer from v11 may read from a follower, and one naming its rack may be
    /// sent to a follower in it.
    consumer: Option<ConsumerReads>,
    requested: Vec<RequestedPartition>,
    forgotten: Vec<(String, i32)>,
    /// Partitions of topic ids the image does not know: answered UNKNOWN_TOPIC_ID.
    unknown_ids: Vec<(Uuid, i32)>,
    /// KIP-320's last fetched epochs (sessions do not keep them: fjord's followers fetch
    /// without one).
    last_fetched: HashMap<(String, i32), i32>,
    max_bytes: usize,
    min_bytes: usize,
    max_wait_ms: i64,
    read_committed: bool,
    /// Who fetches: a consumer needs READ on each topic, a follower CLUSTER_ACTION (None:
    /// everything allowed).
    access: Option<Access>,
}

impl FetchPlan {
    /// Whether the fetcher may read `topic`.
    fn may_read(&self, topic: &str) -> bool {
        self.access
            .as_ref()
            .is_none_or(|access| match self.replica {
                Some(_) => access.allows_cluster(AclOperation::ClusterAction),
                None => access.allows_topic(AclOperation::Read, topic),
            })
    }

    fn of(
        request: &FetchRequest,
        version: i16,
        correlation_id: i32,
        image: &Arc<fjord_metadata::MetadataImage>,
    ) -> FetchPlan {
        let uses_ids = version >= 13;
        let (replica, broker_epoch) = if version >= 15 {
            (
                request.replica_state.replica_id,
                request.replica_state.replica_epoch,
            )
        } else {
            (request.replica_id, -1)
        };
        let replica = (replica >= 0).then_some(Replica {
            id: replica,
            broker_epoch,
        });
        let consumer = (replica.is_none() && version >= 11).then(|| ConsumerReads {
            rack: request.rack_id.clone(),
            image: image.clone(),
        });
        let name_of = |topic: &str, id: Uuid| -> Option<String> {
            if uses_ids {
                image.topic_by_id(&id).map(|t| t.name.clone())
            } else {
                Some(topic.to_string())
            }
        };
        let mut plan = FetchPlan {
            version,
            correlation_id,
            uses_ids,
            replica,
            consumer,
            requested: Vec::new(),
            forgotten: Vec::new(),
            unknown_ids: Vec::new(),
            last_fetched: HashMap::new(),
            max_bytes: if request.max_bytes <= 0 {
                i32::MAX
            } else {
                request.max_bytes
            } as usize,
            min_bytes: request.min_bytes.max(0) as usize,
            max_wait_ms: (request.max_wait_ms as i64).clamp(0, MAX_WAIT_CAP_MS),
            read_committed: request.isolation_level == 1,
            access: None,
        };
        for topic in &request.topics {
            let Some(name) = name_of(&topic.topic, topic.topic_id) else {
                let id = topic.topic_id;
                plan.unknown_ids
                    .extend(topic.partitions.iter().map(|p| (id, p.partition)));
                continue;
            };
            for p in &topic.partitions {
                if p.last_fetched_epoch >= 0 {
                    plan.last_fetched
                        .insert((name.clone(), p.partition), p.last_fetched_epoch);
                }
                plan.requested.push(RequestedPartition {
                    topic: name.clone(),
                    partition: p.partition,
                    fetch_offset: p.fetch_offset,
                    partition_max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                });
            }
        }
        plan.forgotten = request
            .forgotten_topics_data
            .iter()
            .filter_map(|t| name_of(&t.topic, t.topic_id).map(|n| (n, t)))
            .flat_map(|(n, t)| t.partitions.iter().map(move |p| (n.clone(), *p)))
            .collect();
        plan
    }

    /// Whether a read answers the fetch without waiting longer: enough bytes, or an error.
    fn satisfied_by(&self, (_, bytes_read, any_error): &FetchRead) -> bool {
        *bytes_read >= self.min_bytes.max(1) || *any_error
    }

    /// The partition to read for `topic` / `partition` from `fetch_offset`.
    fn target(
        &self,
        image: &fjord_metadata::MetadataImage,
        (topic, partition): (String, i32),
        fetch_offset: i64,
        partition_max_bytes: i32,
        current_leader_epoch: i32,
    ) -> Target {
        Target {
            topic_id: image.topic(&topic).map_or(Uuid::ZERO, |t| t.topic_id),
            last_fetched_epoch: self
                .last_fetched
                .get(&(topic.clone(), partition))
                .copied()
                .unwrap_or(-1),
            topic,
            partition,
            fetch_offset,
            partition_max_bytes,
            current_leader_epoch,
        }
    }
}

/// The partitions a fetch reads, as its session (KIP-227) decided: all it named, or, in an
/// incremental fetch, the session's.
struct SessionTargets {
    session_id: i32,
    incremental: bool,
    targets: Vec<Target>,
}

impl FetchApi {
    /// Fetch: the plan of the request, its session's targets, a first read, and — when too
    /// little is there and the client will wait — a long poll woken by the partitions' high
    /// watermarks.
    pub(crate) fn fetch(
        self: &Arc<Self>,
        request: FetchRequest,
        (version, correlation_id): (i16, i32),
        now: i64,
        access: &Access,
    ) -> Reply {
        let image = self.node.image();
        let mut plan = FetchPlan::of(&request, version, correlation_id, &image);
        // A consumer's answer is no larger than its quota allows over the window: a larger one
        // could never be sent.
        if plan.replica.is_none() {
            let quotas = image.client_quotas();
            let fetch_quota = &self.node.client_quotas.fetch;
            if let Some(max) = fetch_quota.max_in_window(quotas, access.quota_client()) {
                plan.max_bytes = plan.max_bytes.min(max.max(1.0) as usize);
            }
        }
        plan.access = Some(access.clone());
        let session = match self.session_targets(&request, &mut plan, &image, now) {
            Ok(session) => session,
            Err(code) => {
                let body = ResponseBody::Fetch(FetchResponse {
                    error_code: code,
                    session_id: 0,
                    ..Default::default()
                });
                return Reply::Now(encode_response(
                    ApiKey::Fetch,
                    version,
                    correlation_id,
                    &body,
                ));
            }
        };
        // A fetch that may wait is parked on each partition's queue of delayed fetches before it
        // first reads, so a high watermark moving meanwhile wakes it: it is answered when one
        // moves enough, or at max_wait_ms.
        let waiter = Arc::new(Notify::new());
        let follower = plan.replica.is_some();
        if plan.max_wait_ms > 0 {
            self.delay_on_targets(&session.targets, &waiter, follower);
        }
        let read = self.read_for(&plan, &session.targets, now);
        if plan.max_wait_ms == 0 || plan.satisfied_by(&read) || session.targets.is_empty() {
            return Reply::Now(self.fetch_response(&plan, &session, read));
        }
        let this = self.clone();
        let delayed = (self.replicas.metrics().delayed).delayed(DelayedOperation::Fetch);
        Reply::Later(Box::pin(async move {
            let _delayed = delayed;
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(plan.max_wait_ms as u64);
            loop {
                let woke = tokio::time::timeout_at(deadline, waiter.notified()).await;
                // Registered again before reading: a move during the read is not missed.
                this.delay_on_targets(&session.targets, &waiter, follower);
                let read = this.read_for(&plan, &session.targets, fjord_common::now_ms());
                if woke.is_err()
                    || plan.satisfied_by(&read)
                    || tokio::time::Instant::now() >= deadline
                {
                    return this.fetch_response(&plan, &session, read);
                }
            }
        }))
    }

    /// The fetch session's decision on this request, as the partitions to read; Err with the
    /// session's error code (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, …).
    fn session_targets(
        &self,
        request: &FetchRequest,
        plan: &mut FetchPlan,
        image: &fjord_metadata::MetadataImage,
        now: i64,
    ) -> Result<SessionTargets, i16> {
        let decision = match self.sessions.lock() {
            Ok(mut cache) => {
                cache.expire(now, 120_000);
                cache.begin(
                    request.session_id,
                    request.session_epoch,
                    &plan.requested,
                    &plan.forgotten,
                    now,
                )
            }
            Err(_) => SessionDecision::Sessionless,
        };
        let (session_id, incremental, targets) = match decision {
            SessionDecision::Error(code) => return Err(code),
            SessionDecision::Sessionless | SessionDecision::Full { .. } => {
                let id = match decision {
                    SessionDecision::Full { session_id } => session_id,
                    _ => 0,
                };
                let targets = std::mem::take(&mut plan.requested)
                    .into_iter()
                    .map(|p| {
                        plan.target(
                            image,
                            (p.topic, p.partition),
                            p.fetch_offset,
                            p.partition_max_bytes,
                            p.current_leader_epoch,
                        )
                    })
                    .collect();
                (id, false, targets)
            }
            SessionDecision::Incremental {
                session_id,
                partitions,
            } => {
                let targets = partitions
                    .into_iter()
                    .map(|(key, s)| {
                        plan.target(
                            image,
                            key,
                            s.fetch_offset,
                            s.partition_max_bytes,
                            s.current_leader_epoch,
                        )
                    })
                    .collect();
                (session_id, true, targets)
            }
        };
        Ok(SessionTargets {
            session_id,
            incremental,
            targets,
        })
    }

    /// The answer to a fetch from what its reads found: the session told what was sent (an
    /// incremental fetch leaves out partitions with nothing new), records left in their segment
    /// files to go out with `sendfile`.
    fn fetch_response(
        &self,
        plan: &FetchPlan,
        session: &SessionTargets,
        (results, bytes_read, _): FetchRead,
    ) -> Response {
        if plan.replica.is_some() {
            self.record_leader_throttled(&results);
        }
        let throttle_time_ms = match (&plan.replica, &plan.access) {
            (None, Some(access)) => self.consumer_throttle(access, bytes_read),
            _ => 0,
        };
        if throttle_time_ms > 0 {
            // Answered without its records, as Kafka answers a throttled fetch; the session
            // is left as it was, so the next fetch sends them.
            let body = FetchResponse {
                throttle_time_ms,
                error_code: errors::NONE,
                session_id: session.session_id,
                ..Default::default()
            };
            return encode_fetch_response(
                plan.version,
                plan.correlation_id,
                &body,
                &[],
                Vec::new(),
            );
        }
        let mut topics: Vec<FetchableTopicResponse> = Vec::new();
        let mut externals: Vec<ExternalRecords> = Vec::new();
        let mut slices: Vec<FileSlice> = Vec::new();
        for (target, mut data, file) in results {
            if plan.version < 16 {
                // Only v16+ carries the leader hint (KIP-951); older encoders refuse it.
                data.current_leader = LeaderIdAndEpoch::default();
            }
            if session.session_id != 0
                && !self.session_sends(session, &target, &data, file.is_some())
            {
                continue;
            }
            if let Some(slice) = file {
                let metrics = self.replicas.metrics();
                if plan.replica.is_some() {
                    metrics.replication.bytes_out.inc_by(u64::from(slice.len()));
                } else {
                    metrics
                        .topics
                        .fetched(&target.topic, u64::from(slice.len()), slice.records());
                }
                let external = ExternalRecords::new(slices.len() as u32, slice.len() as usize);
                data.records = Some(external.stand_in());
                externals.push(external);
                slices.push(slice);
            }
            match topics.last_mut() {
                Some(t) if t.topic == target.topic => t.partitions.push(data),
                _ => topics.push(FetchableTopicResponse {
                    topic: if plan.uses_ids {
                        String::new()
                    } else {
                        target.topic.clone()
                    },
                    topic_id: target.topic_id,
                    partitions: vec![data],
                }),
            }
        }
        for (id, partition) in &plan.unknown_ids {
            topics.push(FetchableTopicResponse {
                topic: String::new(),
                topic_id: *id,
                partitions: vec![PartitionData {
                    error_code: errors::UNKNOWN_TOPIC_ID,
                    ..no_data(*partition)
                }],
            });
        }
        let body = FetchResponse {
            error_code: errors::NONE,
            session_id: session.session_id,
            responses: topics,
            ..Default::default()
        };
        let requests = &self.replicas.metrics().requests;
        requests.answered_with(ApiKey::Fetch, |visit| body.visit_error_codes(visit));
        encode_fetch_response(plan.version, plan.correlation_id, &body, &externals, slices)
    }

    /// Counts a consumer's answer of `bytes` against its byte-rate quota; the throttle its quota
    /// asks for, 0 within it. An answer over the quota is not sent: its bytes are taken back and
    /// the connection muted.
    fn consumer_throttle(&self, access: &Access, bytes: usize) -> i32 {
        let quotas = access.image().client_quotas();
        let manager = &self.node.client_quotas.fetch;
        let now = fjord_common::now_ms();
        let throttle_ms = manager.record(quotas, access.quota_client(), bytes as f64, now);
        if throttle_ms > 0 {
            manager.unrecord(quotas, access.quota_client(), bytes as f64, now);
            access.requester().mute_for(throttle_ms, now);
        }
        throttle_ms
    }

    /// Tells the fetch session what this answer sends for `target`; whether the answer carries
    /// the partition (an incremental fetch sends only news).
    fn session_sends(
        &self,
        session: &SessionTargets,
        target: &Target,
        data: &PartitionData,
        has_records: bool,
    ) -> bool {
        let key = (target.topic.clone(), target.partition);
        let news = self
            .sessions
            .lock()
            .map(|mut c| {
                c.record_sent(
                    session.session_id,
                    &key,
                    data.high_watermark,
                    data.log_start_offset,
                    has_records,
                    // A consumer sent elsewhere must hear so.
                    data.error_code != 0 || data.preferred_read_replica >= 0,
                )
            })
            .unwrap_or(true);
        !session.incremental || news
    }

    /// The bytes a follower's fetch answer carries for replicas this leader throttles count
    /// towards `leader.replication.throttled.rate`, in sync or not.
    fn record_leader_throttled(&self, results: &[PartitionRead]) {
        let bytes: u64 = results
            .iter()
            .filter_map(|(target, _, file)| Some((target, file.as_ref()?)))
            .filter(|(target, _)| {
                self.replicas
                    .get(&target.topic, target.partition)
                    .is_some_and(|p| throttles(&p, Side::Leader, self.node.config.node_id))
            })
            .map(|(_, slice)| u64::from(slice.len()))
            .sum();
        self.replication_quotas
            .leader
            .record(bytes, fjord_common::now_ms());
    }

    /// Puts `waiter` on the delayed-fetch queue of every target partition hosted here (the
    /// followers' queue for a follower's fetch).
    fn delay_on_targets(&self, targets: &[Target], waiter: &Arc<Notify>, replica: bool) {
        for target in targets {
            if let Some(partition) = self.replicas.get_hosted(&target.topic, target.partition) {
                if replica {
                    partition.delay_replica_fetch(waiter);
                } else {
                    partition.delay_fetch(waiter);
                }
            }
        }
    }
    /// Reads every target once, as `plan` allows: at most `max_bytes` in all, consumers below
    /// the high watermark (or the last stable offset), followers to the log end. The first
    /// partition with data may return a batch larger than its limits, so a consumer always
    /// makes progress (Kafka's "first batch even if larger").
    fn read_for(&self, plan: &FetchPlan, targets: &[Target], now_ms: i64) -> FetchRead {
        let mut results = Vec::with_capacity(targets.len());
        let mut total = 0usize;
        let mut any_error = false;
        for target in targets {
            let hosted = if plan.consumer.is_some() {
                self.replicas.get_hosted(&target.topic, target.partition)
            } else {
                self.replicas.get(&target.topic, target.partition)
            };
            let (data, file) = match hosted {
                // Kafka checks before it looks the partition up: a topic the fetcher may not
                // read is not disclosed.
                _ if !plan.may_read(&target.topic) => {
                    let mut data = no_data(target.partition);
                    data.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                    (data, None)
                }
                None => {
                    let mut data = no_data(target.partition);
                    data.error_code = self.node.not_hosted(&target.topic, target.partition);
                    (data, None)
                }
                Some(partition) => {
                    let budget = plan.max_bytes.saturating_sub(total);
                    self.read_partition(plan, &partition, target, (budget, total == 0), now_ms)
                }
            };
            if let Some(slice) = &file {
                total += slice.len() as usize;
            }
            // A divergence is answered at once, as an error is (the follower must truncate
            // first), and so is a consumer sent to another replica.
            any_error |= data.error_code != errors::NONE
                || data.diverging_epoch.epoch >= 0
                || data.preferred_read_replica >= 0;
            results.push((target.clone(), data, file));
        }
        (results, total, any_error)
    }

    /// One hosted partition's part of a fetch: refused on a stale or future leader epoch, sent
    /// to a preferred replica (KIP-392), or read. `budget`: the bytes left in the response, and
    /// whether this is its first data (which gets at least one batch).
    fn read_partition(
        &self,
        plan: &FetchPlan,
        partition: &Partition,
        target: &Target,
        budget: (usize, bool),
        now_ms: i64,
    ) -> (PartitionData, Option<FileSlice>) {
        let mut data = no_data(target.partition);
        let mut file = None;
        let preferred = plan.consumer.as_ref().and_then(|c| {
            if !self.node.config.cluster.rack_aware_reads {
                return None;
            }
            let rack_of = |id: i32| c.image.broker(id).and_then(|b| b.rack.clone());
            partition.preferred_read_replica(target.fetch_offset, &c.rack, rack_of)
        });
        if let Err(code) = check_leader_epoch(partition, target.current_leader_epoch) {
            data.error_code = code;
        } else if let Some(id) = preferred {
            // Sent elsewhere: no records, the offsets the consumer needs.
            data.preferred_read_replica = id;
            if let Ok(log) = partition.try_lock() {
                data.high_watermark = log.high_watermark();
                data.last_stable_offset = log.last_stable_offset();
                data.log_start_offset = log.log_start_offset();
            }
        } else {
            // A throttled replica out of sync is answered without records while the leader's
            // throttle is above its rate (its position is still taken).
            let held_back = plan.replica.is_some_and(|r| {
                throttles(partition, Side::Leader, self.node.config.node_id)
                    && !partition.isr_and_replica_count().0.contains(&r.id)
                    && self.replication_quotas.leader.exceeded(now_ms)
            });
            let read = partition.try_lock().map_err(|_| None).and_then(|mut log| {
                read_log(
                    plan,
                    &mut log,
                    target,
                    &mut data,
                    (budget, held_back),
                    now_ms,
                )
            });
            match read {
                // The bytes stay in the segment file until the writer sends them.
                Ok(info) => file = info.records,
                Err(Some(StorageError::OffsetOutOfRange { .. })) => {
                    data.error_code = errors::OFFSET_OUT_OF_RANGE
                }
                Err(Some(error)) => {
                    tracing::error!(%error, "fetch failed");
                    data.error_code = error.kafka_error_code();
                }
                Err(None) => data.error_code = errors::KAFKA_STORAGE_ERROR,
            }
        }
        // KIP-951: the current leader is only news to a client that used a stale epoch; other
        // partitions leave the field at its default.
        if data.error_code == errors::FENCED_LEADER_EPOCH {
            data.current_leader = LeaderIdAndEpoch {
                leader_id: self.node.config.node_id,
                leader_epoch: partition.leader_epoch(),
            };
        }
        (data, file)
    }

    /// ListOffsets: a topic the principal may not describe is refused TOPIC_AUTHORIZATION_FAILED.
    pub(crate) fn list_offsets(
        &self,
        request: &ListOffsetsRequest,
        version: i16,
        access: &Access,
    ) -> ListOffsetsResponse {
        let topics = request
            .topics
            .iter()
            .map(|topic| ListOffsetsTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        if !access.allows_topic(AclOperation::Describe, &topic.name) {
                            return ListOffsetsPartitionResponse {
                                partition_index: p.partition_index,
                                error_code: errors::TOPIC_AUTHORIZATION_FAILED,
                                timestamp: -1,
                                offset: -1,
                                leader_epoch: -1,
                            };
                        }
                        let mut out = self.list_offset(
                            &topic.name,
                            p.partition_index,
                            p.current_leader_epoch,
                            p.timestamp,
                            request.isolation_level == 1,
                        );
                        if version < 4 {
                            // Not on the wire before v4; the encoder refuses a set value.
                            out.leader_epoch = -1;
                        }
                        out
                    })
                    .collect(),
            })
            .collect();
        ListOffsetsResponse {
            topics,
            ..Default::default()
        }
    }

    fn list_offset(
        &self,
        topic: &str,
        partition_index: i32,
        current_leader_epoch: i32,
        timestamp: i64,
        read_committed: bool,
    ) -> ListOffsetsPartitionResponse {
        let mut out = ListOffsetsPartitionResponse {
            partition_index,
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
            ..Default::default()
        };
        let Some(partition) = self.replicas.get(topic, partition_index) else {
            out.error_code = self.node.not_hosted(topic, partition_index);
            return out;
        };
        if let Err(code) = check_leader_epoch(&partition, current_leader_epoch) {
            out.error_code = code;
            return out;
        }
        let Ok(log) = partition.try_lock() else {
            out.error_code = errors::KAFKA_STORAGE_ERROR;
            return out;
        };
        // What the consumer may read: below the high watermark, or under read_committed the
        // last stable offset.
        let readable = if read_committed {
            log.last_stable_offset()
        } else {
            log.high_watermark()
        };
        if timestamp == -1 {
            out.offset = readable;
            out.leader_epoch = partition.leader_epoch();
            return out;
        }
        match log.fetch_offset_by_timestamp(timestamp) {
            Ok(Some(found)) if found.offset < readable || timestamp == -2 || timestamp == -4 => {
                out.offset = found.offset;
                out.timestamp = found.timestamp;
                out.leader_epoch = found.leader_epoch.unwrap_or(-1);
            }
            Ok(_) => {}
            Err(error) => out.error_code = error.kafka_error_code(),
        }
        out
    }

    /// OffsetForLeaderEpoch: a follower needs CLUSTER_ACTION, a consumer DESCRIBE on the topic;
    /// without, TOPIC_AUTHORIZATION_FAILED.
    pub(crate) fn offset_for_leader_epoch(
        &self,
        request: &OffsetForLeaderEpochRequest,
        access: &Access,
    ) -> OffsetForLeaderEpochResponse {
        let follower_allowed =
            request.replica_id >= 0 && access.allows_cluster(AclOperation::ClusterAction);
        let may_describe = |topic: &str| {
            follower_allowed
                || (request.replica_id < 0 && access.allows_topic(AclOperation::Describe, topic))
        };
        let topics = request
            .topics
            .iter()
            .map(|topic| OffsetForLeaderTopicResult {
                topic: topic.topic.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut out = LeaderEpochEndOffset {
                            partition: p.partition,
                            leader_epoch: -1,
                            end_offset: -1,
                            ..Default::default()
                        };
                        match self.replicas.get(&topic.topic, p.partition) {
                            _ if !may_describe(&topic.topic) => {
                                out.error_code = errors::TOPIC_AUTHORIZATION_FAILED
                            }
                            None => {
                                out.error_code = self.node.not_hosted(&topic.topic, p.partition)
                            }
                            Some(partition) => {
                                match check_leader_epoch(&partition, p.current_leader_epoch) {
                                    Err(code) => out.error_code = code,
                                    Ok(()) => match partition.try_lock() {
                                        Ok(log) => {
                                            let (epoch, end_offset) =
                                                log.end_offset_for_epoch(p.leader_epoch);
                                            out.leader_epoch = epoch;
                                            out.end_offset = end_offset;
                                        }
                                        Err(_) => out.error_code = errors::KAFKA_STORAGE_ERROR,
                                    },
                                }
                            }
                        }
                        out
                    })
                    .collect(),
            })
            .collect();
        OffsetForLeaderEpochResponse {
            topics,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_metadata::{MetadataImage, MetadataRecord, TopicRecord};
    use fjord_protocol::messages::fetch_request::{
        FetchPartition, FetchTopic, ForgottenTopic, ReplicaState,
    };

    fn image() -> Arc<MetadataImage> {
        let records = [MetadataRecord::Topic(TopicRecord {
            name: "known".into(),
            topic_id: Uuid([7; 16]),
        })];
        Arc::new(MetadataImage::from_records(1, &records).unwrap())
    }

    fn partition(index: i32, last_fetched_epoch: i32) -> FetchPartition {
        FetchPartition {
            partition: index,
            current_leader_epoch: 3,
            fetch_offset: 10,
            last_fetched_epoch,
            partition_max_bytes: 1024,
            ..Default::default()
        }
    }

    #[test]
    fn a_consumer_fetch_by_topic_id_names_known_topics_and_answers_unknown_ids() {
        let request = FetchRequest {
            replica_id: -1,
            max_bytes: 0,
            min_bytes: -5,
            max_wait_ms: 3_600_000,
            isolation_level: 1,
            topics: vec![
                FetchTopic {
                    topic: String::new(),
                    topic_id: Uuid([7; 16]),
                    partitions: vec![partition(0, 2), partition(1, -1)],
                },
                FetchTopic {
                    topic: String::new(),
                    topic_id: Uuid([9; 16]),
                    partitions: vec![partition(0, -1)],
                },
            ],
            forgotten_topics_data: vec![ForgottenTopic {
                topic: String::new(),
                topic_id: Uuid([7; 16]),
                partitions: vec![5],
            }],
            ..Default::default()
        };
        let plan = FetchPlan::of(&request, 13, 99, &image());
        assert!(plan.uses_ids && plan.replica.is_none() && plan.consumer.is_some());
        let named: Vec<(&str, i32)> = plan
            .requested
            .iter()
            .map(|p| (p.topic.as_str(), p.partition))
            .collect();
        assert_eq!(named, [("known", 0), ("known", 1)]);
        assert_eq!(plan.unknown_ids, [(Uuid([9; 16]), 0)]);
        assert_eq!(plan.forgotten, [("known".to_string(), 5)]);
        // KIP-320: only a known last fetched epoch is kept.
        assert_eq!(plan.last_fetched.get(&("known".into(), 0)), Some(&2));
        assert!(!plan.last_fetched.contains_key(&("known".into(), 1)));
        // No byte limit, no negative minimum, the wait capped, read_committed.
        assert_eq!(plan.max_bytes, i32::MAX as usize);
        assert_eq!(plan.min_bytes, 0);
        assert_eq!(plan.max_wait_ms, MAX_WAIT_CAP_MS);
        assert!(plan.read_committed);
        let target = plan.target(&image(), ("known".into(), 0), 10, 1024, 3);
        assert_eq!(
            (target.topic_id, target.last_fetched_epoch),
            (Uuid([7; 16]), 2)
        );
    }

    #[test]
    fn a_follower_is_known_by_its_replica_state_from_v15_and_its_replica_id_before() {
        let request = FetchRequest {
            replica_id: 2,
            replica_state: ReplicaState {
                replica_id: 3,
                replica_epoch: 77,
            },
            ..Default::default()
        };
        let v15 = FetchPlan::of(&request, 15, 1, &image());
        let replica = v15.replica.expect("a follower's fetch");
        assert_eq!((replica.id, replica.broker_epoch), (3, 77));
        assert!(
            v15.consumer.is_none(),
            "a follower reads from the leader only"
        );
        let v12 = FetchPlan::of(&request, 12, 1, &image());
        let replica = v12.replica.expect("a follower's fetch");
        assert_eq!((replica.id, replica.broker_epoch), (2, -1));
        // Named topics before v13: taken as named, known or not.
        let by_name = FetchRequest {
            replica_id: -1,
            topics: vec![FetchTopic {
                topic: "anything".into(),
                partitions: vec![partition(4, -1)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let plan = FetchPlan::of(&by_name, 12, 1, &image());
        assert!(plan.unknown_ids.is_empty() && plan.requested[0].topic == "anything");
        assert!(
            plan.satisfied_by(&(Vec::new(), 1, false)),
            "min_bytes 0 still wants a byte"
        );
        assert!(!plan.satisfied_by(&(Vec::new(), 0, false)));
        assert!(
            plan.satisfied_by(&(Vec::new(), 0, true)),
            "an error answers at once"
        );
    }

    /// Reads `target` from `partition` as `plan` asks, as the fetch path does.
    fn read(
        plan: &FetchPlan,
        partition: &Partition,
        fetch_offset: i64,
    ) -> (PartitionData, Option<FileSlice>) {
        let target = Target {
            topic: partition.tp.topic.clone(),
            topic_id: Uuid::ZERO,
            partition: partition.tp.partition,
            fetch_offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
        };
        let mut data = no_data(target.partition);
        let mut locked = partition.lock();
        let read = read_log(
            plan,
            &mut locked,
            &target,
            &mut data,
            ((1 << 20, true), false),
            0,
        );
        (data, read.expect("a read").records)
    }

    #[test]
    fn consumers_read_below_the_high_watermark_that_followers_fetches_move() {
        use crate::replication::partition::tests::test_partition;
        use crate::replication::partition_state::LeaderAndIsr;
        use fjord_records::{BatchBuilder, Compression};
        let dir = tempfile::tempdir().unwrap();
        let leadership = LeaderAndIsr {
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: vec![1, 2],
            isr: vec![1, 2],
        };
        let tp = fjord_common::TopicPartition::new("t", 0);
        let p = test_partition(dir.path(), tp, false, 1, leadership);
        for _ in 0..2 {
            let mut builder = BatchBuilder::new(Compression::None);
            builder.append(0, None, Some(b"v"), &[]).unwrap();
            let batch = fjord_records::AppendBatch::new(builder.build().unwrap().freeze()).unwrap();
            p.lock().append_as_leader(vec![batch], None, 0).unwrap();
        }
        let consumer = FetchPlan::of(
            &FetchRequest {
                replica_id: -1,
                ..Default::default()
            },
            15,
            1,
            &image(),
        );
        // Follower 2 has fetched nothing: the high watermark stays at 0, nothing to read.
        let (data, records) = read(&consumer, &p, 0);
        assert_eq!((data.high_watermark, records.is_none()), (0, true));
        let follower = |id| {
            let request = FetchRequest {
                replica_state: ReplicaState {
                    replica_id: id,
                    replica_epoch: 7,
                },
                ..Default::default()
            };
            FetchPlan::of(&request, 15, 1, &image())
        };
        // Its fetch from the log end says it holds everything: the high watermark moves.
        let (data, records) = read(&follower(2), &p, 2);
        assert_eq!((data.error_code, data.high_watermark), (errors::NONE, 2));
        assert!(records.is_none(), "nothing past the log end");
        let (data, records) = read(&consumer, &p, 0);
        assert_eq!(data.high_watermark, 2);
        assert!(
            records.is_some_and(|r| !r.is_empty()),
            "both batches, now committed"
        );
        // Past the log end, and from a broker that is no replica: refused.
        assert_eq!(
            read(&follower(2), &p, 10).0.error_code,
            errors::OFFSET_OUT_OF_RANGE
        );
        assert_eq!(
            read(&follower(9), &p, 2).0.error_code,
            errors::NOT_LEADER_OR_FOLLOWER
        );
    }

    /// The fetch family's context, built from its own parts alone: this broker (1) hosting
    /// `t`-0 with one record, the image also naming `t`-1, led by broker 2.
    fn fetch_api(dir: &std::path::Path) -> FetchApi {
        use crate::api::Node;
        use crate::replication::replica_manager::led_by_broker_1;
        use crate::replication::{ReplicaManager, ReplicationQuotas};
        use fjord_config::BrokerConfig;
        use fjord_storage::log::LogConfig;
        use fjord_storage::LogManager;
        let (config, _) = BrokerConfig::from_properties(&Default::default()).unwrap();
        let config = Arc::new(config);
        let topic_id = Uuid([3; 16]);
        let records = [
            MetadataRecord::Topic(TopicRecord {
                name: "t".into(),
                topic_id,
            }),
            led_by_broker_1(topic_id, 0),
            MetadataRecord::Partition(fjord_metadata::PartitionRecord {
                partition_id: 1,
                topic_id,
                replicas: vec![2],
                isr: vec![2],
                leader: 2,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            }),
        ];
        let image = Arc::new(MetadataImage::from_records(1, &records).unwrap());
        let (logs, _) = LogManager::open(&[dir.to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = Arc::new(ReplicaManager::new(1, config.clone(), logs));
        replicas.apply_image(&image, 0).unwrap();
        crate::replication::partition::tests::append(&replicas.get("t", 0).unwrap());
        let quotas = ReplicationQuotas::new(&config.replication(), (f64::MAX, f64::MAX));
        FetchApi {
            node: Arc::new(Node {
                client_quotas: crate::quota::ClientQuotaManagers::new((11, 1000)),
                mutation_quotas: crate::api::mutation_quota::MutationQuotas::new((11, 1000)),
                config,
                cluster_id: "c".into(),
                images: tokio::sync::watch::channel(image).1,
                authorizer: None,
                links: Default::default(),
                listener_tls: Default::default(),
            }),
            replicas,
            sessions: Default::default(),
            replication_quotas: Arc::new(quotas),
        }
    }

    #[test]
    fn list_offsets_answers_hosted_partitions_and_names_the_error_for_others() {
        use fjord_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        let dir = tempfile::tempdir().unwrap();
        let api = fetch_api(dir.path());
        let ask = |name: &str, partitions: &[i32]| ListOffsetsTopic {
            name: name.into(),
            partitions: partitions
                .iter()
                .map(|&partition_index| ListOffsetsPartition {
                    partition_index,
                    current_leader_epoch: -1,
                    // The earliest offset.
                    timestamp: -2,
                })
                .collect(),
        };
        let request = ListOffsetsRequest {
            replica_id: -1,
            topics: vec![ask("t", &[0, 1, 7]), ask("u", &[0])],
            ..Default::default()
        };
        let answered: Vec<(String, i32, i16, i64)> = api
            .list_offsets(&request, 7, &crate::api::authz::tests::anyone())
            .topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name;
                t.partitions
                    .into_iter()
                    .map(move |p| (name.clone(), p.partition_index, p.error_code, p.offset))
            })
            .collect();
        assert_eq!(
            answered,
            [
                ("t".to_string(), 0, errors::NONE, 0),
                ("t".to_string(), 1, errors::NOT_LEADER_OR_FOLLOWER, -1),
                ("t".to_string(), 7, errors::UNKNOWN_TOPIC_OR_PARTITION, -1),
                ("u".to_string(), 0, errors::UNKNOWN_TOPIC_OR_PARTITION, -1),
            ]
        );
    }
}
