//! ShareFetch and ShareAcknowledge (KIP-932) at the partition leader: share sessions, the
//! acknowledgements a request carries, and the acquisition of records for a share group's
//! consumer, with MaxWaitMs long polling. The state machines are fjord-share's; the share
//! partitions live in `coordinator::share`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_common::{errors, lock, now_ms, TopicPartition};
use fjord_config::group_configs::{
    share_group_settings, AutoOffsetReset, IsolationLevel, ShareGroupSettings,
};
use fjord_metadata::acl::AclOperation;
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::share_acknowledge_request::ShareAcknowledgeRequest;
use fjord_protocol::messages::share_acknowledge_response as ack_response;
use fjord_protocol::messages::share_fetch_request::ShareFetchRequest;
use fjord_protocol::messages::share_fetch_response::*;
use fjord_protocol::Uuid;
use fjord_records::BatchHeader;
use fjord_share::records::StateKey;
use fjord_share::{
    AckBatch, AcquireMode, LogBatch, SessionStep, ShareLimits, SharePartition, StateWrite,
};

use crate::api::{Access, ShareApi};
use crate::coordinator::share::{session_key, Change, Loaded};
use crate::replication::Partition;

/// The longest member id a client may choose (a UUID's string form).
const MAX_MEMBER_ID_LENGTH: usize = 36;

/// Bytes read from one partition for one fetch at most.
const PARTITION_READ_BYTES: usize = 1 << 20;

/// Longest a fetch may wait, whatever the client asks: bounds a parked request.
const MAX_WAIT_MS: i32 = 30_000;

/// How often a waiting fetch looks again without being woken (a lock expiring elsewhere).
const WAIT_SLICE_MS: u64 = 100;

/// The acknowledgement batches one partition of a request carries.
type PartitionAcks = (Uuid, i32, Vec<AckBatch>);

/// A top-level refusal: Kafka's error code and message.
type Refused = (i16, String);

/// What a fetch asks of each partition.
struct FetchLimits {
    max_records: i64,
    max_bytes: usize,
    mode: AcquireMode,
}

/// A ShareFetch as read and checked: who asks, its session step, its acknowledgements and what
/// it asks for (none for a renewing fetch, which only acknowledges).
struct FetchAsk {
    group_id: String,
    member_id: String,
    epoch: i32,
    renew: bool,
    acks: Vec<PartitionAcks>,
    added: Vec<(Uuid, i32)>,
    forgotten: Vec<(Uuid, i32)>,
    limits: Option<FetchLimits>,
    max_wait_ms: u64,
}

impl FetchAsk {
    /// Refused, as Kafka refuses it, without ids, with acknowledgements opening a session, with
    /// a renewing fetch asking for records, or with an unknown acquire mode.
    fn read(
        request: &ShareFetchRequest,
        version: i16,
        access: &Access,
    ) -> Result<FetchAsk, Refused> {
        let (group_id, member_id) = check_ids(
            request.group_id.as_deref(),
            request.member_id.as_deref(),
            access,
        )?;
        let renew = version >= 2 && request.is_renew_ack;
        let asks_records = request.max_bytes != 0
            || request.min_bytes != 0
            || request.max_records != 0
            || request.max_wait_ms != 0;
        if renew && asks_records {
            return Err(invalid("A renewing ShareFetch must not ask for records"));
        }
        let acks: Vec<PartitionAcks> = request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| !p.acknowledgement_batches.is_empty())
                    .map(|p| {
                        let batches = p
                            .acknowledgement_batches
                            .iter()
                            .map(|b| ack_batch(b.first_offset, b.last_offset, &b.acknowledge_types))
                            .collect();
                        (t.topic_id, p.partition_index, batches)
                    })
            })
            .collect();
        if request.share_session_epoch == 0 && !acks.is_empty() {
            return Err(invalid(
                "Acknowledgements on a ShareFetch opening a session",
            ));
        }
        let mode = match version {
            v if v >= 2 => AcquireMode::from_wire(request.share_acquire_mode)
                .ok_or_else(|| invalid("Unknown ShareAcquireMode"))?,
            _ => AcquireMode::BatchOptimized,
        };
        let limits =
            (!renew && request.max_records > 0 && request.max_bytes > 0).then(|| FetchLimits {
                max_records: i64::from(request.max_records),
                max_bytes: usize::try_from(request.max_bytes).unwrap_or(0),
                mode,
            });
        Ok(FetchAsk {
            group_id,
            member_id,
            epoch: request.share_session_epoch,
            renew,
            acks,
            added: request
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, p.partition_index)))
                .collect(),
            forgotten: request
                .forgotten_topics_data
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, *p)))
                .collect(),
            limits,
            max_wait_ms: u64::try_from(request.max_wait_ms.clamp(0, MAX_WAIT_MS)).unwrap_or(0),
        })
    }
}

impl ShareApi {
    /// ShareFetch: the session moved on, the acknowledgements applied, then records acquired
    /// from every partition of the session, waiting up to MaxWaitMs for some.
    pub(crate) async fn share_fetch(
        self: Arc<Self>,
        request: ShareFetchRequest,
        version: i16,
        access: Access,
    ) -> ShareFetchResponse {
        match self.share_fetch_checked(request, version, &access).await {
            Ok(response) => response,
            Err((error_code, message)) => ShareFetchResponse {
                error_code,
                error_message: Some(message),
                ..Default::default()
            },
        }
    }

    async fn share_fetch_checked(
        self: &Arc<Self>,
        request: ShareFetchRequest,
        version: i16,
        access: &Access,
    ) -> Result<ShareFetchResponse, Refused> {
        let ask = FetchAsk::read(&request, version, access)?;
        let (group_id, member_id) = (&ask.group_id, &ask.member_id);
        let connection = connection_of(access.requester());
        let step = self.session_step(group_id, member_id, |sessions, ended| {
            sessions.fetch(
                &session_key(group_id, member_id),
                connection,
                ask.epoch,
                &ask.added,
                &ask.forgotten,
                now_ms(),
                ended,
            )
        })?;
        let image = self.node.image();
        let settings = self.settings(&image, group_id);
        let mut responses = Responses::default();
        for (topic_id, partition, batches) in &ask.acks {
            let (code, message) = self
                .acknowledge_partition(
                    &image,
                    access,
                    (group_id, member_id),
                    (*topic_id, *partition),
                    batches,
                    ask.renew,
                    &settings,
                )
                .await;
            responses.acknowledged(*topic_id, *partition, code, message);
        }
        let lock_ms = settings.record_lock_duration_ms;
        let parts = match step {
            SessionStep::Closed(parts) => {
                self.release(&image, group_id, member_id, &parts);
                return Ok(responses.into_response(lock_ms));
            }
            SessionStep::Fetch(parts) => parts,
        };
        match &ask.limits {
            Some(limits) if !parts.is_empty() => {
                self.fetch_waiting(&ask, limits, &parts, &settings, access, &mut responses)
                    .await
            }
            _ => {}
        }
        Ok(responses.into_response(lock_ms))
    }

    /// Acquires from the session's partitions, waiting up to the request's MaxWaitMs while
    /// nothing can be: woken by a high watermark moving or records coming back to the group.
    async fn fetch_waiting(
        &self,
        ask: &FetchAsk,
        limits: &FetchLimits,
        parts: &[(Uuid, i32)],
        settings: &ShareGroupSettings,
        access: &Access,
        responses: &mut Responses,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ask.max_wait_ms);
        loop {
            let image = self.node.image();
            // Loading waits on share coordinators: it may take no longer than the fetch.
            let load = self.load_partitions(&image, access, &ask.group_id, parts, settings);
            let _ = tokio::time::timeout_at(deadline, load).await;
            let waiter = Arc::new(tokio::sync::Notify::new());
            let member = (ask.group_id.as_str(), ask.member_id.as_str());
            let fetched =
                self.fetch_partitions(&image, access, member, parts, settings, limits, &waiter);
            let acquired = fetched.iter().any(|(_, p)| !p.acquired_records.is_empty());
            let errored = fetched.iter().any(|(_, p)| p.error_code != errors::NONE);
            if acquired || errored || tokio::time::Instant::now() >= deadline {
                // A new session tells of every partition; later ones of news and of partitions
                // the request names.
                for (topic_id, data) in fetched {
                    let named = ask.added.contains(&(topic_id, data.partition_index));
                    if ask.epoch == 0
                        || named
                        || !data.acquired_records.is_empty()
                        || data.error_code != errors::NONE
                    {
                        responses.fetched(topic_id, data);
                    }
                }
                return;
            }
            let slice =
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(WAIT_SLICE_MS));
            tokio::select! {
                _ = waiter.notified() => {}
                _ = self.shares.changed() => {}
                _ = tokio::time::sleep_until(slice) => {}
            }
        }
    }

    /// ShareAcknowledge: the session moved on (or closed), and each partition's
    /// acknowledgements applied.
    pub(crate) async fn share_acknowledge(
        &self,
        request: &ShareAcknowledgeRequest,
        version: i16,
        access: &Access,
    ) -> ack_response::ShareAcknowledgeResponse {
        let refused = |(error_code, message): Refused| ack_response::ShareAcknowledgeResponse {
            error_code,
            error_message: Some(message),
            ..Default::default()
        };
        let (group_id, member_id) = match check_ids(
            request.group_id.as_deref(),
            request.member_id.as_deref(),
            access,
        ) {
            Ok(ids) => ids,
            Err(refusal) => return refused(refusal),
        };
        let member_id = &member_id;
        let renew = version >= 2 && request.is_renew_ack;
        let step = self.session_step(&group_id, member_id, |sessions, _| {
            sessions.acknowledge(
                &session_key(&group_id, member_id),
                request.share_session_epoch,
                now_ms(),
            )
        });
        let step = match step {
            Ok(step) => step,
            Err(refusal) => return refused(refusal),
        };
        let image = self.node.image();
        let settings = self.settings(&image, &group_id);
        let mut responses = Vec::new();
        for topic in &request.topics {
            let mut partitions = Vec::new();
            for p in &topic.partitions {
                let batches: Vec<AckBatch> = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| ack_batch(b.first_offset, b.last_offset, &b.acknowledge_types))
                    .collect();
                let (error_code, error_message) = self
                    .acknowledge_partition(
                        &image,
                        access,
                        (&group_id, member_id),
                        (topic.topic_id, p.partition_index),
                        &batches,
                        renew,
                        &settings,
                    )
                    .await;
                partitions.push(ack_response::PartitionData {
                    partition_index: p.partition_index,
                    error_code,
                    error_message,
                    ..Default::default()
                });
            }
            responses.push(ack_response::ShareAcknowledgeTopicResponse {
                topic_id: topic.topic_id,
                partitions,
            });
        }
        if let SessionStep::Closed(parts) = step {
            self.release(&image, &group_id, member_id, &parts);
        }
        ack_response::ShareAcknowledgeResponse {
            responses,
            acquisition_lock_timeout_ms: settings.record_lock_duration_ms,
            ..Default::default()
        }
    }

    /// The sessions `requester`'s connection opened end with it, releasing their records.
    pub(crate) fn connection_closed(&self, requester: &Arc<fjord_common::Requester>) {
        let ended = lock(&self.shares.sessions).connection_closed(connection_of(requester));
        if ended.is_empty() {
            return;
        }
        let image = self.node.image();
        for (key, parts) in ended {
            self.release(&image, &key.group_id, &key.member_id, &parts);
        }
    }

    /// Runs a request's step on its session; a session another one evicted has its member's
    /// records released.
    fn session_step(
        &self,
        group_id: &str,
        member_id: &str,
        step: impl FnOnce(
            &mut fjord_share::ShareSessions,
            &mut Vec<(fjord_share::SessionKey, Vec<(Uuid, i32)>)>,
        ) -> Result<SessionStep, i16>,
    ) -> Result<SessionStep, Refused> {
        let mut ended = Vec::new();
        let outcome = step(&mut lock(&self.shares.sessions), &mut ended);
        let image = self.node.image();
        for (key, parts) in ended {
            self.release(&image, &key.group_id, &key.member_id, &parts);
        }
        outcome.map_err(|code| {
            let message = match code {
                errors::SHARE_SESSION_NOT_FOUND => {
                    format!("No share session for member {member_id} of group {group_id}")
                }
                errors::INVALID_SHARE_SESSION_EPOCH => {
                    "The share session epoch is invalid".to_string()
                }
                errors::INVALID_REQUEST => format!(
                    "A share session names at most {} partitions",
                    fjord_share::MAX_SESSION_PARTITIONS
                ),
                _ => "Too many share sessions".to_string(),
            };
            (code, message)
        })
    }

    /// Releases what a member whose session ended holds on the session's partitions.
    fn release(
        &self,
        image: &MetadataImage,
        group_id: &str,
        member_id: &str,
        parts: &[(Uuid, i32)],
    ) {
        let partitions: Vec<TopicPartition> = parts
            .iter()
            .filter_map(|(topic_id, partition)| {
                let topic = image.topic_by_id(topic_id)?;
                Some(TopicPartition {
                    topic: topic.name.clone(),
                    partition: *partition,
                })
            })
            .collect();
        let changes = self.shares.release(group_id, member_id, &partitions);
        self.persister.spawn_writes(&self.shares, changes);
    }

    /// Initializes the share-partition state a group coordinator asked for; whether all of it
    /// was.
    pub(crate) async fn initialize_share_state(&self, init: &fjord_group::ShareInit) -> bool {
        self.persister.initialize_all(init).await
    }

    /// Expires the locks due by `now_ms`, writing what that changed; when the next is due.
    pub(crate) fn expire_due(&self, now_ms: i64) -> Option<i64> {
        let (next, changes) = self.shares.expire_due(now_ms);
        self.persister.spawn_writes(&self.shares, changes);
        next
    }

    /// The group's share settings: its own configs, else the broker's.
    fn settings(&self, image: &MetadataImage, group_id: &str) -> ShareGroupSettings {
        share_group_settings(
            image.group_configs().get(group_id),
            &self.node.config.share_groups(),
        )
    }

    /// One partition's acknowledgements: its error code and message (NONE when applied).
    #[allow(clippy::too_many_arguments)]
    async fn acknowledge_partition(
        &self,
        image: &MetadataImage,
        access: &Access,
        (group_id, member_id): (&str, &str),
        (topic_id, partition): (Uuid, i32),
        batches: &[AckBatch],
        renew: bool,
        settings: &ShareGroupSettings,
    ) -> (i16, Option<String>) {
        if batches.is_empty() {
            return (errors::NONE, None);
        }
        let led = match self.led_partition(image, access, topic_id, partition) {
            Ok(led) => led,
            Err(code) => return (code, None),
        };
        let key = (group_id.to_string(), led.1.clone());
        let Some(loaded) = self.shares.get(&key, led.0.leader_epoch()) else {
            return (
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some("No records of this partition were acquired by the group here".to_string()),
            );
        };
        let renews = batches.iter().any(|b| b.types.contains(&4));
        if renews && renew && !settings.renew_acknowledge_enable {
            return (
                errors::INVALID_RECORD_STATE,
                Some("The group does not allow renewing acquisition locks".to_string()),
            );
        }
        let gate = loaded.gate.clone().read_owned().await;
        let (outcome, write) = {
            let mut share = lock(&loaded.state);
            if share.is_fenced() {
                return (
                    errors::NOT_LEADER_OR_FOLLOWER,
                    Some("The share partition is being loaded again".to_string()),
                );
            }
            let outcome = share.acknowledge(member_id, batches, renew, now_ms());
            (outcome, loaded.take_change(&mut share))
        };
        tracing::debug!(
            member = member_id,
            partition,
            ?batches,
            ?outcome,
            "share ack"
        );
        let change = write.map(|write| Change {
            key,
            loaded,
            write,
            _gate: gate,
        });
        if let Err((code, message)) = outcome {
            // Refused whole, but what an earlier call left unwritten (locks expired on a fetch)
            // is still written.
            self.persister
                .spawn_writes(&self.shares, change.into_iter().collect());
            return (code, Some(message));
        }
        self.shares.notify_changed();
        // The acknowledgement holds once its share coordinator has it.
        if let Some(change) = change {
            if let Err(refusal) = self.persister.write_or_evict(&self.shares, &change).await {
                return (persist_error(refusal.error_code), Some(refusal.message));
            }
        }
        (errors::NONE, None)
    }

    /// Loads the share partitions of `parts` this broker leads and has none of yet from their
    /// share coordinator. A start offset nobody chose yet is chosen by
    /// `share.auto.offset.reset` and written at once, so a later leader starts there too.
    async fn load_partitions(
        &self,
        image: &MetadataImage,
        access: &Access,
        group_id: &str,
        parts: &[(Uuid, i32)],
        settings: &ShareGroupSettings,
    ) {
        for &(topic_id, partition) in parts {
            let Ok((led, tp)) = self.led_partition(image, access, topic_id, partition) else {
                continue;
            };
            let leader_epoch = led.leader_epoch();
            let key = (group_id.to_string(), tp);
            if self.shares.get(&key, leader_epoch).is_some() {
                continue;
            }
            // Alone: after every write of an evicted predecessor, and one load at a time.
            let gate = self.shares.gate(&key);
            let _alone = gate.write().await;
            if self.shares.get(&key, leader_epoch).is_some() {
                continue;
            }
            let state_key = StateKey {
                group_id: group_id.to_string(),
                topic_id,
                partition,
            };
            let stored = match self.persister.read(&state_key, leader_epoch).await {
                Ok(stored) => stored,
                // Not initialized yet: the partition is not assigned to the group's members yet.
                Err(refusal) if refusal.error_code == errors::INVALID_REQUEST => continue,
                Err(refusal) => {
                    tracing::warn!(
                        group = group_id,
                        partition = %key.1,
                        error = errors::name(refusal.error_code),
                        message = %refusal.message,
                        "share partition state not read"
                    );
                    continue;
                }
            };
            let start = if stored.start_offset < 0 {
                let Ok(log) = led.try_lock() else { continue };
                start_offset(&log, settings, now_ms())
            } else {
                stored.start_offset
            };
            let share = SharePartition::restore(start, &stored.batches, share_limits(settings));
            let loaded = Loaded {
                state: Arc::new(std::sync::Mutex::new(share)),
                topic_id,
                leader_epoch,
                state_epoch: stored.state_epoch,
                gate: gate.clone(),
            };
            if stored.start_offset < 0 {
                let write = StateWrite {
                    state_epoch: stored.state_epoch,
                    leader_epoch,
                    start_offset: start,
                    delivery_complete_count: 0,
                    batches: Vec::new(),
                };
                if self.persister.write(&state_key, &write).await.is_err() {
                    continue;
                }
            }
            self.shares.insert(&key, loaded);
        }
    }

    /// The partition a session names, if this broker leads it and the principal may read it;
    /// else the partition's error code.
    fn led_partition(
        &self,
        image: &MetadataImage,
        access: &Access,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<(Arc<Partition>, TopicPartition), i16> {
        let topic = image
            .topic_by_id(&topic_id)
            .ok_or(errors::UNKNOWN_TOPIC_ID)?;
        if !access.allows_topic(AclOperation::Read, &topic.name) {
            return Err(errors::TOPIC_AUTHORIZATION_FAILED);
        }
        let hosted = self
            .replicas
            .get_hosted(&topic.name, partition)
            .filter(|p| p.is_leader());
        match hosted {
            Some(p) => Ok((
                p,
                TopicPartition {
                    topic: topic.name.clone(),
                    partition,
                },
            )),
            None => Err(self.node.not_hosted(&topic.name, partition)),
        }
    }

    /// Acquires records from each of `parts` for the member, sharing the request's record limit
    /// out in order; each partition with the records' bytes and the ranges acquired.
    #[allow(clippy::too_many_arguments)]
    fn fetch_partitions(
        &self,
        image: &MetadataImage,
        access: &Access,
        member: (&str, &str),
        parts: &[(Uuid, i32)],
        settings: &ShareGroupSettings,
        limits: &FetchLimits,
        waiter: &Arc<tokio::sync::Notify>,
    ) -> Vec<(Uuid, PartitionData)> {
        let mut records_left = limits.max_records;
        let mut bytes_left = limits.max_bytes;
        let mut out = Vec::with_capacity(parts.len());
        for &(topic_id, partition) in parts {
            let mut data = empty_partition(partition);
            match self.led_partition(image, access, topic_id, partition) {
                Err(code) => {
                    data.error_code = code;
                    if code == errors::NOT_LEADER_OR_FOLLOWER {
                        data.current_leader = current_leader(image, topic_id, partition);
                    }
                }
                Ok(_) if records_left <= 0 || bytes_left == 0 => {}
                Ok((led, tp)) => {
                    led.delay_fetch(waiter);
                    let budget = FetchLimits {
                        max_records: records_left,
                        max_bytes: bytes_left.min(PARTITION_READ_BYTES),
                        mode: limits.mode,
                    };
                    match self.acquire(&led, &tp, member, settings, &budget) {
                        Ok((ranges, bytes)) => {
                            records_left -= ranges
                                .iter()
                                .map(|r| r.last_offset - r.first_offset + 1)
                                .sum::<i64>();
                            bytes_left = bytes_left.saturating_sub(bytes.len());
                            data.acquired_records = ranges;
                            data.records = Some(bytes);
                        }
                        Err(code) => data.error_code = code,
                    }
                }
            }
            out.push((topic_id, data));
        }
        out
    }

    /// Reads the partition from where the share partition wants and acquires for the member;
    /// the ranges acquired and the whole batches covering them.
    fn acquire(
        &self,
        partition: &Arc<Partition>,
        tp: &TopicPartition,
        (group_id, member_id): (&str, &str),
        settings: &ShareGroupSettings,
        budget: &FetchLimits,
    ) -> Result<(Vec<AcquiredRecords>, Bytes), i16> {
        let key = (group_id.to_string(), tp.clone());
        // Loaded just before (`load_partitions`), unless its state could not be read yet (its
        // share coordinator moving or down): nothing to hand out until it is, and no error — a
        // consumer takes any error code but the leader-change ones as fatal.
        let Some(loaded) = self.shares.get(&key, partition.leader_epoch()) else {
            return Ok((Vec::new(), Bytes::new()));
        };
        // Being loaded afresh: nothing to hand out from this copy.
        let Ok(gate) = loaded.gate.clone().try_read_owned() else {
            return Ok((Vec::new(), Bytes::new()));
        };
        let mut share = lock(&loaded.state);
        if share.is_fenced() {
            return Ok((Vec::new(), Bytes::new()));
        }
        let acquired = self.acquire_locked(
            &mut share,
            partition,
            tp,
            (group_id, member_id),
            settings,
            budget,
        );
        // Expired locks and undeliverable records found on the way are written behind, whatever
        // the fetch came to.
        if let Some(write) = loaded.take_change(&mut share) {
            drop(share);
            let change = Change {
                key,
                loaded,
                write,
                _gate: gate,
            };
            self.persister.spawn_writes(&self.shares, vec![change]);
        }
        acquired
    }

    /// [`ShareApi::acquire`] on the share partition, locked.
    fn acquire_locked(
        &self,
        share: &mut SharePartition,
        partition: &Arc<Partition>,
        tp: &TopicPartition,
        (group_id, member_id): (&str, &str),
        settings: &ShareGroupSettings,
        budget: &FetchLimits,
    ) -> Result<(Vec<AcquiredRecords>, Bytes), i16> {
        let now = now_ms();
        share.set_limits(share_limits(settings));
        share.expire_locks(now);
        let log = partition
            .try_lock()
            .map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
        share.on_log_start(log.log_start_offset());
        let Some(from) = share.next_fetch_offset() else {
            return Ok((Vec::new(), Bytes::new()));
        };
        let read_committed = settings.isolation_level == IsolationLevel::ReadCommitted;
        let readable = if read_committed {
            log.last_stable_offset()
        } else {
            log.high_watermark()
        };
        if from >= readable {
            return Ok((Vec::new(), Bytes::new()));
        }
        let info = log
            .read(from, budget.max_bytes, readable, true)
            .map_err(|error| error.kafka_error_code())?;
        let bytes = match info.records {
            Some(slice) => slice
                .read_to_bytes()
                .map_err(|_| errors::KAFKA_STORAGE_ERROR)?,
            None => return Ok((Vec::new(), Bytes::new())),
        };
        let aborted = if read_committed {
            log.aborted_txns(from, readable)
        } else {
            Vec::new()
        };
        drop(log);
        let (batches, positions) = log_batches(&bytes, &aborted);
        let ranges = share.acquire(member_id, &batches, budget.max_records, budget.mode, now);
        tracing::debug!(
            group = group_id,
            member = member_id,
            topic = %tp.topic,
            partition = tp.partition,
            from,
            start = share.start_offset(),
            end = share.end_offset(),
            acquired = ?ranges,
            batches = batches.len(),
            "share fetch"
        );
        let records = covering(&bytes, (&batches, &positions), &ranges);
        let acquired = ranges
            .iter()
            .map(|r| AcquiredRecords {
                first_offset: r.first_offset,
                last_offset: r.last_offset,
                delivery_count: r.delivery_count,
            })
            .collect();
        Ok((acquired, records))
    }
}

/// The group id a share request names and its member id, checked as Kafka checks them: both
/// present, the member id at most 36 characters, and READ on the group.
fn check_ids(
    group_id: Option<&str>,
    member_id: Option<&str>,
    access: &Access,
) -> Result<(String, String), Refused> {
    let group_id = group_id.ok_or_else(|| invalid("GroupId is missing"))?;
    let member_id = member_id.unwrap_or_default();
    if member_id.is_empty() || member_id.chars().count() > MAX_MEMBER_ID_LENGTH {
        return Err(invalid("Invalid member id in the request."));
    }
    if !access.allows_group(AclOperation::Read, group_id) {
        return Err((
            errors::GROUP_AUTHORIZATION_FAILED,
            format!("Not authorized to read group {group_id}"),
        ));
    }
    Ok((group_id.to_string(), member_id.to_string()))
}

/// A connection as share sessions know it: its requester, alive as long as the connection is.
fn connection_of(requester: &Arc<fjord_common::Requester>) -> u64 {
    Arc::as_ptr(requester) as usize as u64
}

/// An acknowledgement batch as either request carries it.
fn ack_batch(first_offset: i64, last_offset: i64, types: &[i8]) -> AckBatch {
    AckBatch {
        first_offset,
        last_offset,
        types: types.to_vec(),
    }
}

fn invalid(message: &str) -> Refused {
    (errors::INVALID_REQUEST, message.to_string())
}

/// A group's limits on each of its share partitions.
fn share_limits(settings: &ShareGroupSettings) -> ShareLimits {
    ShareLimits {
        max_in_flight: i64::from(settings.partition_max_record_locks),
        delivery_count_limit: i16::try_from(settings.delivery_count_limit).unwrap_or(i16::MAX),
        lock_duration_ms: i64::from(settings.record_lock_duration_ms),
    }
}

/// An acknowledgement whose state could not be written, as Kafka's leaders answer it: fenced
/// by a newer leader or state is NOT_LEADER_OR_FOLLOWER; a coordinator moving or down is
/// COORDINATOR_NOT_AVAILABLE.
fn persist_error(code: i16) -> i16 {
    match code {
        errors::FENCED_LEADER_EPOCH | errors::FENCED_STATE_EPOCH => errors::NOT_LEADER_OR_FOLLOWER,
        errors::NOT_COORDINATOR
        | errors::COORDINATOR_NOT_AVAILABLE
        | errors::COORDINATOR_LOAD_IN_PROGRESS
        | errors::NETWORK_EXCEPTION
        | errors::REQUEST_TIMED_OUT => errors::COORDINATOR_NOT_AVAILABLE,
        errors::UNKNOWN_TOPIC_OR_PARTITION => code,
        _ => errors::UNKNOWN_SERVER_ERROR,
    }
}

/// Where a group's share partition starts on its first fetch (`share.auto.offset.reset`):
/// the log's start, its high watermark, or the first record at most the duration old.
fn start_offset(
    log: &crate::replication::LockedPartition<'_>,
    settings: &ShareGroupSettings,
    now_ms: i64,
) -> i64 {
    match settings.auto_offset_reset {
        AutoOffsetReset::Earliest => log.log_start_offset(),
        AutoOffsetReset::Latest => log.high_watermark(),
        AutoOffsetReset::ByDuration { ms } => {
            match log.fetch_offset_by_timestamp(now_ms.saturating_sub(ms)) {
                Ok(Some(found)) => found.offset.min(log.high_watermark()),
                _ => log.high_watermark(),
            }
        }
    }
}

/// The batches of a read and, beside them, their byte ranges; an aborted transaction's data
/// batch is not deliverable.
fn log_batches(
    bytes: &Bytes,
    aborted: &[fjord_storage::txn_index::AbortedTxn],
) -> (Vec<LogBatch>, Vec<std::ops::Range<usize>>) {
    let mut batches = Vec::new();
    let mut positions = Vec::new();
    let mut position = 0;
    while let Some(rest) = bytes.get(position..) {
        let Ok(header) = BatchHeader::parse(rest) else {
            break;
        };
        let end = position + header.total_len();
        if end > bytes.len() {
            break;
        }
        let last = header.last_offset();
        let aborted = header.is_transactional()
            && !header.is_control()
            && aborted.iter().any(|txn| {
                txn.producer_id == header.producer_id
                    && txn.first_offset <= header.base_offset
                    && header.base_offset <= txn.last_offset
            });
        batches.push(LogBatch {
            first_offset: header.base_offset,
            last_offset: last,
            deliverable: !aborted,
        });
        positions.push(position..end);
        position = end;
    }
    (batches, positions)
}

/// The whole batches from the one holding the first acquired offset to the one holding the
/// last: what the consumer needs to read the ranges.
fn covering(
    bytes: &Bytes,
    (batches, positions): (&[LogBatch], &[std::ops::Range<usize>]),
    ranges: &[fjord_share::Acquired],
) -> Bytes {
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
        return Bytes::new();
    };
    let start = batches
        .iter()
        .zip(positions)
        .find(|(b, _)| b.last_offset >= first.first_offset);
    let end = batches
        .iter()
        .zip(positions)
        .rev()
        .find(|(b, _)| b.first_offset <= last.last_offset);
    match (start, end) {
        (Some((_, s)), Some((_, e))) if s.start <= e.end => bytes.slice(s.start..e.end),
        _ => Bytes::new(),
    }
}

/// A partition's answer with nothing in it yet: no records, no leader named.
fn empty_partition(partition: i32) -> PartitionData {
    PartitionData {
        partition_index: partition,
        current_leader: LeaderIdAndEpoch {
            leader_id: -1,
            leader_epoch: -1,
        },
        records: Some(Bytes::new()),
        ..Default::default()
    }
}

/// The leader the image names for a partition, for a client told NOT_LEADER_OR_FOLLOWER.
fn current_leader(image: &MetadataImage, topic_id: Uuid, partition: i32) -> LeaderIdAndEpoch {
    image
        .topic_by_id(&topic_id)
        .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
        .map_or(
            LeaderIdAndEpoch {
                leader_id: -1,
                leader_epoch: -1,
            },
            |p| LeaderIdAndEpoch {
                leader_id: p.leader,
                leader_epoch: p.leader_epoch,
            },
        )
}

/// A ShareFetch response's partitions as they are gathered, by topic.
#[derive(Default)]
struct Responses {
    topics: Vec<ShareFetchableTopicResponse>,
}

impl Responses {
    fn entry(&mut self, topic_id: Uuid, partition: i32) -> &mut PartitionData {
        let index = match self.topics.iter().position(|t| t.topic_id == topic_id) {
            Some(i) => i,
            None => {
                self.topics.push(ShareFetchableTopicResponse {
                    topic_id,
                    partitions: Vec::new(),
                });
                self.topics.len() - 1
            }
        };
        let topic = &mut self.topics[index];
        let at = match topic
            .partitions
            .iter()
            .position(|p| p.partition_index == partition)
        {
            Some(at) => at,
            None => {
                topic.partitions.push(empty_partition(partition));
                topic.partitions.len() - 1
            }
        };
        &mut topic.partitions[at]
    }

    fn acknowledged(&mut self, topic_id: Uuid, partition: i32, code: i16, message: Option<String>) {
        let entry = self.entry(topic_id, partition);
        entry.acknowledge_error_code = code;
        entry.acknowledge_error_message = message;
    }

    fn fetched(&mut self, topic_id: Uuid, data: PartitionData) {
        let entry = self.entry(topic_id, data.partition_index);
        let (code, message) = (
            entry.acknowledge_error_code,
            entry.acknowledge_error_message.take(),
        );
        *entry = PartitionData {
            acknowledge_error_code: code,
            acknowledge_error_message: message,
            ..data
        };
    }

    fn into_response(self, lock_ms: i32) -> ShareFetchResponse {
        ShareFetchResponse {
            acquisition_lock_timeout_ms: lock_ms,
            responses: self.topics,
            ..Default::default()
        }
    }
}
