//! Follower replication, Kafka's replica fetchers: every partition this broker follows is
//! fetched from its leader by one of `num.replica.fetchers` fetchers per leader (a partition
//! always by the same one), with Fetch requests that carry this broker's replica id.
//!
//! A round of one fetcher: one Fetch for all its partitions, each from its log end with its
//! leader epoch and the epoch of its last batch (KIP-320); then per partition either truncate
//! where the leader says the logs diverged, or append what came (offsets, batches and epochs
//! byte for byte as the leader wrote them); then, in fsync mode, sync what was appended before
//! the next fetch — so the offset a follower fetches from, which the leader counts towards the
//! high watermark, is durable here — and take the leader's high watermark and log start.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fjord_client::{ClientConfig, Connection};
use fjord_common::{errors, BrokerId, TopicPartition};
use fjord_config::{BrokerConfig, ReplicationConfig};
use fjord_protocol::messages::fetch_request::{
    FetchPartition, FetchRequest, FetchTopic, ReplicaState,
};
use fjord_protocol::messages::fetch_response::{FetchResponse, PartitionData};
use fjord_protocol::{ApiKey, RequestBody, ResponseBody, Uuid};
use fjord_quorum::MetadataQuorum;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::replication::flusher::{Durable, FlushTarget, FlusherHandle};
use crate::replication::partition_state::{divergence_truncation, Role};
use crate::replication::quota::{throttles, ReplicationQuotas, Side};
use crate::replication::{LockedPartition, Partition, ReplicaManager};
use fjord_common::errors::KafkaError;
use fjord_common::now_ms;

/// Lowest Fetch version a follower uses: the last fetched epoch and the diverging epoch
/// (KIP-320) and flexible fields.
const MIN_FETCH_VERSION: i16 = 12;

/// Largest fetch response accepted from a leader: the configured response size plus the first
/// batch of each partition, which may exceed it.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The fetcher a partition uses among `fetchers` per leader, as Kafka spreads them.
pub fn fetcher_id(tp: &TopicPartition, fetchers: usize) -> usize {
    let hash = fjord_common::java_string_hash(&tp.topic)
        .wrapping_mul(31)
        .wrapping_add(tp.partition);
    fjord_common::kafka_abs(hash) as usize % fetchers.max(1)
}

/// What the fetchers share.
struct Context {
    replicas: Arc<ReplicaManager>,
    quorum: Arc<MetadataQuorum>,
    config: Arc<BrokerConfig>,
    links: Arc<crate::link::Links>,
    flusher: FlusherHandle,
    quotas: Arc<ReplicationQuotas>,
}

type Fetchers = HashMap<(BrokerId, usize), (watch::Sender<Vec<Arc<Partition>>>, JoinHandle<()>)>;

/// Starts the fetcher manager: it follows the hosted partitions' leadership and runs one
/// fetcher task per (leader, fetcher id) with partitions, until `shutdown`.
pub fn start(
    replicas: Arc<ReplicaManager>,
    quorum: Arc<MetadataQuorum>,
    config: Arc<BrokerConfig>,
    links: Arc<crate::link::Links>,
    flusher: FlusherHandle,
    quotas: Arc<ReplicationQuotas>,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let context = Arc::new(Context {
        replicas,
        quorum,
        config,
        links,
        flusher,
        quotas,
    });
    tokio::spawn(async move {
        let mut changes = context.replicas.subscribe_changes();
        let mut fetchers: Fetchers = HashMap::new();
        let local = context.replicas.node_id();
        let count = context.config.replication().num_replica_fetchers;
        while !*shutdown.borrow() {
            let mut wanted: HashMap<(BrokerId, usize), Vec<Arc<Partition>>> = HashMap::new();
            for partition in context.replicas.all() {
                if let Role::Follower { leader } = partition.role() {
                    if leader >= 0 && leader != local {
                        let key = (leader, fetcher_id(&partition.tp, count));
                        wanted.entry(key).or_default().push(partition);
                    }
                }
            }
            // A fetcher whose partitions all went stops when its sender goes.
            fetchers.retain(|key, (_, task)| {
                let keep = wanted.contains_key(key);
                if !keep {
                    task.abort();
                }
                keep
            });
            for (key, partitions) in wanted {
                match fetchers.get(&key) {
                    Some((sender, _)) => {
                        sender.send_replace(partitions);
                    }
                    None => {
                        let (sender, receiver) = watch::channel(partitions);
                        let task = tokio::spawn(fetch_loop(context.clone(), key, receiver));
                        fetchers.insert(key, (sender, task));
                    }
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = shutdown.changed() => break,
            }
        }
        // Stopped at an await point (a fetch in flight, a flush waited on): appends happen
        // between them under the log's lock, so none is cut halfway.
        for (_, (_, task)) in fetchers {
            task.abort();
            let _ = task.await;
        }
    })
}

/// One fetcher: rounds against `leader` for the partitions it is given, until they are taken
/// away. Failures back off for `replica.fetch.backoff.ms` and reconnect.
async fn fetch_loop(
    context: Arc<Context>,
    (leader, fetcher): (BrokerId, usize),
    mut partitions: watch::Receiver<Vec<Arc<Partition>>>,
) {
    let settings = context.config.replication();
    let backoff = Duration::from_millis(settings.fetch_backoff_ms.max(10));
    let mut connection: Option<Connection> = None;
    let mut failures = 0u32;
    loop {
        let current: Vec<Arc<Partition>> = partitions.borrow_and_update().clone();
        let following: Vec<Arc<Partition>> = current
            .into_iter()
            .filter(|p| p.role() == Role::Follower { leader })
            .collect();
        let outcome = if following.is_empty() {
            Ok(false)
        } else {
            round(
                &context,
                leader,
                fetcher,
                &mut connection,
                &following,
                &mut partitions,
            )
            .await
        };
        let pause = match outcome {
            Ok(true) => {
                failures = 0;
                None
            }
            // Nothing to fetch, or every partition refused: wait for metadata to move.
            Ok(false) => Some(backoff),
            Err(error) => {
                failures += 1;
                // The first failure and then one in fifty: a dead leader is fenced soon.
                if failures == 1 || failures.is_multiple_of(50) {
                    tracing::warn!(leader, fetcher, failures, %error, "replica fetch failed");
                }
                connection = None;
                Some(backoff)
            }
        };
        if let Some(pause) = pause {
            tokio::select! {
                changed = partitions.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(pause) => {}
            }
        } else if partitions.has_changed().is_err() {
            return;
        }
    }
}

/// One partition as fetched in a round.
struct Fetched {
    partition: Arc<Partition>,
    leader_epoch: i32,
    /// Named by `follower.replication.throttled.replicas`: its bytes count towards the rate.
    throttled: bool,
}

/// The partitions of a fetch in flight, by how the answer names them: (topic id, topic, index).
type FetchedPartitions = HashMap<(Uuid, String, i32), Fetched>;

/// One fetch and its handling. Ok(true) when some partition was served, or when the fetch was
/// given up for partitions it did not carry (`given`: the fetcher's partitions as they change).
async fn round(
    context: &Context,
    leader: BrokerId,
    fetcher: usize,
    connection: &mut Option<Connection>,
    partitions: &[Arc<Partition>],
    given: &mut watch::Receiver<Vec<Arc<Partition>>>,
) -> Result<bool, KafkaError> {
    let settings = context.config.replication();
    if !connection.as_ref().is_some_and(Connection::is_usable) {
        *connection = Some(connect(context, leader, fetcher, &settings).await?);
    }
    let Some(conn) = connection.as_mut() else {
        return Err(KafkaError::new(errors::NETWORK_EXCEPTION, "no connection"));
    };
    let version = conn
        .version(ApiKey::Fetch)
        .filter(|v| *v >= MIN_FETCH_VERSION)
        .ok_or_else(|| {
            KafkaError::new(
                errors::UNSUPPORTED_VERSION,
                format!("broker {leader} does not speak Fetch v{MIN_FETCH_VERSION}+"),
            )
        })?;
    sync_unannounced(context, partitions).await;
    let (request, fetched) = fetch_request(context, &settings, version, partitions);
    if fetched.is_empty() {
        return Ok(false);
    }
    let carried: HashSet<(&TopicPartition, i32)> = partitions
        .iter()
        .map(|p| (&p.tp, p.leader_epoch()))
        .collect();
    let answer = tokio::select! {
        answer = conn.send_at(version, RequestBody::Fetch(request)) => Some(answer),
        () = not_carried(given, leader, &carried) => None,
    };
    let Some(answer) = answer else {
        // A partition this fetch does not carry (a new topic's, a new leadership's) would wait
        // out the leader's long poll (`replica.fetch.wait.max.ms`) before the next fetch asks
        // for it, and its high watermark, with every acks=all produce to it, that long. The
        // answer still out cannot be skipped on its connection: the connection goes, nothing
        // was appended from it, and the next fetch carries every partition.
        *connection = None;
        tracing::debug!(
            leader,
            fetcher,
            "fetch given up for a partition it did not carry"
        );
        return Ok(true);
    };
    let response = answer.map_err(|e| {
        KafkaError::new(
            errors::NETWORK_EXCEPTION,
            format!("fetch from broker {leader}: {e}"),
        )
    })?;
    let ResponseBody::Fetch(response) = response else {
        return Err(KafkaError::new(
            errors::UNKNOWN_SERVER_ERROR,
            format!("broker {leader} answered a fetch with another API"),
        ));
    };
    if response.error_code != errors::NONE {
        return Err(KafkaError::new(
            response.error_code,
            format!("broker {leader} refused the fetch"),
        ));
    }
    Ok(apply_response(context, leader, response, fetched).await)
}

/// A follower announces only what is durable here: what an earlier round appended and did not
/// get to sync (a fetcher stopped during its flush) is synced first.
async fn sync_unannounced(context: &Context, partitions: &[Arc<Partition>]) {
    let unsynced: Vec<FlushTarget> = partitions
        .iter()
        .filter(|p| p.durable())
        .filter_map(|p| {
            let end = p.lock().log_end_offset();
            (p.durable_end() < end).then(|| (p.clone() as Arc<dyn Durable>, end))
        })
        .collect();
    if !unsynced.is_empty() {
        context.flusher.flush_all(unsynced).await;
    }
}

/// The fetch for `partitions` at Fetch `version`, each from its log end at its leader epoch,
/// and the partitions it carries.
fn fetch_request(
    context: &Context,
    settings: &ReplicationConfig,
    version: i16,
    partitions: &[Arc<Partition>],
) -> (FetchRequest, FetchedPartitions) {
    let local = context.replicas.node_id();
    let broker_epoch = context
        .quorum
        .image()
        .broker(local)
        .map_or(-1, |b| b.broker_epoch);
    let mut request = FetchRequest {
        max_wait_ms: settings.fetch_wait_max_ms,
        min_bytes: settings.fetch_min_bytes,
        max_bytes: settings.fetch_response_max_bytes,
        ..Default::default()
    };
    if version >= 15 {
        request.replica_state = ReplicaState {
            replica_id: local,
            replica_epoch: broker_epoch,
        };
    } else {
        request.replica_id = local;
    }
    let mut fetched = FetchedPartitions::new();
    let now = now_ms();
    for partition in partitions {
        let throttled = throttles(partition, Side::Follower, local);
        // A throttled replica out of sync is left out while the follower's throttle is above
        // its rate (all of them out: the fetcher backs off, as after an empty round).
        if throttled
            && !partition.isr_and_replica_count().0.contains(&local)
            && context.quotas.follower.exceeded(now)
        {
            continue;
        }
        let leader_epoch = partition.leader_epoch();
        let Some(entry) = fetch_position(partition, leader_epoch, settings) else {
            continue;
        };
        let (topic, topic_id) = if version >= 13 {
            (String::new(), partition.topic_id)
        } else {
            (partition.tp.topic.clone(), Uuid::ZERO)
        };
        match request
            .topics
            .iter_mut()
            .find(|t| t.topic == topic && t.topic_id == topic_id)
        {
            Some(t) => t.partitions.push(entry),
            None => request.topics.push(FetchTopic {
                topic: topic.clone(),
                topic_id,
                partitions: vec![entry],
            }),
        }
        fetched.insert(
            (topic_id, topic, partition.tp.partition),
            Fetched {
                partition: partition.clone(),
                leader_epoch,
                throttled,
            },
        );
    }
    (request, fetched)
}

/// Where `partition` fetches from: its log end, with the epoch of its last batch (KIP-320).
/// None on a failed disk (a write or fsync that failed): its log end is not durable, so it is
/// not announced, and nothing more is copied there.
fn fetch_position(
    partition: &Partition,
    leader_epoch: i32,
    settings: &ReplicationConfig,
) -> Option<FetchPartition> {
    let log = partition.lock();
    if log.is_offline() || (partition.durable() && partition.durable_end() < log.log_end_offset()) {
        return None;
    }
    Some(FetchPartition {
        partition: partition.tp.partition,
        current_leader_epoch: leader_epoch,
        fetch_offset: log.log_end_offset(),
        last_fetched_epoch: log.latest_epoch().unwrap_or(-1),
        log_start_offset: log.log_start_offset(),
        partition_max_bytes: settings.fetch_max_bytes,
        ..Default::default()
    })
}

/// Appends what the leader sent, syncs it in one flusher round, then follows the leader's high
/// watermark and log start. Whether any partition was served.
async fn apply_response(
    context: &Context,
    leader: BrokerId,
    response: FetchResponse,
    mut fetched: FetchedPartitions,
) -> bool {
    let now = now_ms();
    let mut served = false;
    let mut to_flush: Vec<FlushTarget> = Vec::new();
    let mut high_watermarks: Vec<(Arc<Partition>, i64, i64, i32)> = Vec::new();
    for topic in response.responses {
        for data in topic.partitions {
            let key = (topic.topic_id, topic.topic.clone(), data.partition_index);
            let Some(f) = fetched.remove(&key) else {
                continue;
            };
            if f.throttled {
                let bytes = data.records.as_ref().map_or(0, |r| r.len() as u64);
                context.quotas.follower.record(bytes, now);
            }
            let outcome = handle_partition(&f, &data, now);
            if let Ok(Outcome::Appended(end)) = outcome {
                let bytes = data.records.as_ref().map_or(0, |r| r.len() as u64);
                context
                    .replicas
                    .metrics()
                    .replication
                    .bytes_in
                    .inc_by(bytes);
                if f.partition.durable() {
                    to_flush.push((f.partition.clone() as Arc<dyn Durable>, end));
                }
            }
            match outcome {
                Ok(Outcome::Appended(_) | Outcome::Served) => {
                    served = true;
                    high_watermarks.push((
                        f.partition,
                        data.high_watermark,
                        data.log_start_offset,
                        f.leader_epoch,
                    ));
                }
                Ok(Outcome::Refused) => {}
                Err(failure) => {
                    tracing::warn!(tp = %f.partition.tp, leader, error = %failure.message, "cannot replicate");
                    // Outside the log's lock: taking a dir offline locks each of its logs. The
                    // log then refuses everything, so it is not fetched for again.
                    if let Some(dir) = failure.failed_dir {
                        context.replicas.storage_failure(&dir, &failure.message);
                    }
                }
            }
        }
    }
    // What was appended is synced before the next fetch announces it; one flusher round covers
    // every partition.
    for outcome in context.flusher.flush_all(to_flush).await {
        if let Err(error) = outcome {
            tracing::error!(leader, %error, "follower fsync failed");
        }
    }
    for (partition, high_watermark, log_start_offset, leader_epoch) in high_watermarks {
        follow_leader_offsets(
            &partition,
            high_watermark,
            log_start_offset,
            leader_epoch,
            now,
        );
    }
    served
}

/// The leader's high watermark and log start, taken as far as this replica holds them, while it
/// still follows at `leader_epoch`.
fn follow_leader_offsets(
    partition: &Partition,
    high_watermark: i64,
    log_start_offset: i64,
    leader_epoch: i32,
    now: i64,
) {
    let mut log = partition.lock();
    if !partition.follows_at(leader_epoch) {
        return;
    }
    log.leader_high_watermark(high_watermark, leader_epoch);
    partition.followed_with_lag(high_watermark - log.log_end_offset());
    let start = log_start_offset.min(log.high_watermark());
    if start > log.log_start_offset() {
        if let Err(error) = log.increment_log_start_offset(start, now) {
            tracing::warn!(tp = %partition.tp, %error, "cannot follow the leader's log start");
        }
    }
}

/// Returns once the fetcher is given a partition to follow from `leader` that `carried` (the
/// partitions of the fetch in flight, at their leader epochs) does not hold, or is stopped.
async fn not_carried(
    given: &mut watch::Receiver<Vec<Arc<Partition>>>,
    leader: BrokerId,
    carried: &HashSet<(&TopicPartition, i32)>,
) {
    while given.changed().await.is_ok() {
        let outside = given.borrow_and_update().iter().any(|p| {
            p.role() == (Role::Follower { leader }) && !carried.contains(&(&p.tp, p.leader_epoch()))
        });
        if outside {
            return;
        }
    }
}

/// What one partition's answer did.
enum Outcome {
    /// Records appended; the log now ends here.
    Appended(i64),
    /// Nothing new, or truncated: the high watermark still applies.
    Served,
    /// The leader refused (it no longer leads, another epoch): metadata will say more.
    Refused,
}

fn handle_partition(fetched: &Fetched, data: &PartitionData, now: i64) -> Result<Outcome, Failure> {
    let partition = &fetched.partition;
    let mut log = partition.lock();
    // An answer to a fetch made under another leadership (a fetcher that was replaced while
    // its request was out) is dropped: acting on it could cut what the new leader counts on.
    if !partition.follows_at(fetched.leader_epoch) {
        return Ok(Outcome::Refused);
    }
    let truncate = |log: &mut LockedPartition<'_>, to: i64| {
        log.truncate(to, fetched.leader_epoch, now)
            .map_err(|e| storage_error(log, e))
    };
    match data.error_code {
        errors::NONE => {}
        errors::OFFSET_OUT_OF_RANGE => {
            // Below the leader's log start (retention there): start over at it. Past its end
            // (a tail the leader never had that no epoch told apart): back to its high
            // watermark, which every in-sync replica has.
            let target = if log.log_end_offset() < data.log_start_offset {
                data.log_start_offset
            } else {
                // Past its end: back to what is committed, which is below the end of every
                // leader — never below this log's own high watermark.
                data.high_watermark
                    .max(log.high_watermark())
                    .min(log.log_end_offset())
            };
            if target < 0 {
                return Err("offset out of range and the leader gave no bounds".into());
            }
            tracing::info!(tp = %partition.tp, from = log.log_end_offset(), to = target,
                "follower out of range at the leader: truncating");
            truncate(&mut log, target)?;
            return Ok(Outcome::Served);
        }
        code => {
            tracing::debug!(tp = %partition.tp, error = errors::name(code), "leader refused a follower fetch");
            return Ok(Outcome::Refused);
        }
    }
    if data.diverging_epoch.epoch >= 0 {
        let local = log.end_offset_for_epoch(data.diverging_epoch.epoch);
        let to = divergence_truncation(
            data.diverging_epoch.epoch,
            data.diverging_epoch.end_offset,
            local,
            log.log_end_offset(),
        );
        tracing::info!(tp = %partition.tp, from = log.log_end_offset(), to,
            epoch = data.diverging_epoch.epoch, "follower log diverged from the leader's: truncating");
        truncate(&mut log, to)?;
        return Ok(Outcome::Served);
    }
    let records = data.records.clone().unwrap_or_default();
    if records.is_empty() {
        return Ok(Outcome::Served);
    }
    match log.append_as_follower(&records, fetched.leader_epoch, now) {
        Ok(_) => Ok(Outcome::Appended(log.log_end_offset())),
        Err(crate::replication::AppendError::NotLeader) => Ok(Outcome::Refused),
        Err(e) => Err(storage_error(&log, e)),
    }
}

/// A failed append or truncation, and the log dir to take offline if the disk failed.
struct Failure {
    message: String,
    failed_dir: Option<std::path::PathBuf>,
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure {
            message: message.to_string(),
            failed_dir: None,
        }
    }
}

fn storage_error(log: &fjord_storage::log::Log, error: crate::replication::AppendError) -> Failure {
    let failed_dir = match &error {
        crate::replication::AppendError::Storage(e) if e.is_disk_failure() => {
            Some(log.dir().to_path_buf())
        }
        _ => None,
    };
    Failure {
        message: error.to_string(),
        failed_dir,
    }
}

async fn connect(
    context: &Context,
    leader: BrokerId,
    fetcher: usize,
    settings: &fjord_config::ReplicationConfig,
) -> Result<Connection, KafkaError> {
    let config = ClientConfig {
        client_id: format!(
            "replica-fetcher-{}-{leader}-{fetcher}",
            context.replicas.node_id()
        ),
        connect_timeout: Duration::from_secs(2),
        // A long poll may take the whole wait before it answers.
        request_timeout: Duration::from_millis(
            settings.socket_timeout_ms + settings.fetch_wait_max_ms.max(0) as u64,
        ),
        max_response_bytes: MAX_RESPONSE_BYTES,
        security: context.links.inter_broker.clone(),
    };
    crate::link::peers::connect_to_broker(
        &context.quorum.image(),
        &context.config.cluster.inter_broker_listener_name,
        leader,
        &config,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_spread_over_fetchers_as_kafka_spreads_them() {
        // Kafka: abs(31 * topic.hashCode + partition) % fetchers; "a".hashCode() == 97.
        assert_eq!(fetcher_id(&TopicPartition::new("a", 0), 4), (97 * 31) % 4);
        assert_eq!(
            fetcher_id(&TopicPartition::new("a", 1), 4),
            (97 * 31 + 1) % 4
        );
        assert_eq!(fetcher_id(&TopicPartition::new("anything", 7), 1), 0);
        let ids: std::collections::HashSet<usize> = (0..64)
            .map(|p| fetcher_id(&TopicPartition::new("t", p), 3))
            .collect();
        assert_eq!(ids.len(), 3);
    }

    fn following(
        dir: &std::path::Path,
        topic: &str,
        leader: BrokerId,
        epoch: i32,
    ) -> Arc<Partition> {
        let leadership = crate::replication::partition_state::LeaderAndIsr {
            leader,
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: vec![1, leader],
            isr: vec![1, leader],
        };
        crate::replication::partition::tests::test_partition(
            dir,
            TopicPartition::new(topic, 0),
            false,
            1,
            leadership,
        )
    }

    /// Whether `not_carried` has returned once every task ready to run has run.
    async fn returned(task: &JoinHandle<()>) -> bool {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        task.is_finished()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_fetch_in_flight_is_given_up_only_for_a_partition_it_does_not_carry() {
        let dir = tempfile::tempdir().unwrap();
        let a = following(dir.path(), "a", 2, 0);
        let (given, receiver) = watch::channel(vec![a.clone()]);
        let watching = |receiver: watch::Receiver<Vec<Arc<Partition>>>| {
            let carried = [a.clone()];
            tokio::spawn(async move {
                let mut receiver = receiver;
                let carried: HashSet<(&TopicPartition, i32)> =
                    carried.iter().map(|p| (&p.tp, p.leader_epoch())).collect();
                not_carried(&mut receiver, 2, &carried).await;
            })
        };

        // The same partitions handed over again, and one another leader serves: the fetch goes on.
        let task = watching(receiver.clone());
        given.send_replace(vec![a.clone()]);
        given.send_replace(vec![a.clone(), following(dir.path(), "elsewhere", 3, 0)]);
        assert!(!returned(&task).await);
        // A new partition from this leader: given up.
        given.send_replace(vec![a.clone(), following(dir.path(), "new", 2, 0)]);
        assert!(returned(&task).await);

        // The carried partition under a new leader epoch: given up.
        let task = watching(receiver.clone());
        given.send_replace(vec![following(dir.path(), "a", 2, 1)]);
        assert!(returned(&task).await);

        // The fetcher stopped: nothing to wait for.
        let task = watching(receiver);
        drop(given);
        assert!(returned(&task).await);
    }
}
