//! The partitions this broker hosts: `ReplicaManager` follows the metadata image, opening or
//! creating the log of each partition it gives this broker, setting aside the logs it no longer
//! does, and routes appends to the partition they are for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use fjord_common::errors::KafkaError;
use fjord_common::{errors, lock, LeaderEpoch, TopicId, TopicPartition};
use fjord_metadata::MetadataImage;
use fjord_records::control::EndTxnMarker;
use fjord_records::{AppendBatch, Compression, TimestampType, ValidationConfig};
use fjord_storage::log::{AppendInfo, Log, LogConfig};
use fjord_storage::log_manager::{LogManager, Retire};

use crate::metrics::Metrics;
use crate::replication::partition::{
    log_config, AppendError, Appended, LockedPartition, Partition, PartitionError, Settings,
    MAX_DECOMPRESSED_BATCH_BYTES,
};
use crate::replication::partition_state::{LeaderAndIsr, PartitionState};
use fjord_config::{BrokerConfig, DynamicBrokerConfig, TopicCompression, TopicConfig};

/// The partitions an image gives this broker: config, topic id and leadership of each.
type Wanted = HashMap<TopicPartition, (Arc<TopicConfig>, TopicId, LeaderAndIsr)>;

/// A wanted partition with its log found or created.
struct Placed {
    tp: TopicPartition,
    settings: Settings,
    topic_id: TopicId,
    leadership: LeaderAndIsr,
    log_config: LogConfig,
    log: Arc<Mutex<Log>>,
    /// Hosted already, on this very log: updated in place.
    hosted: Option<Arc<Partition>>,
}

/// The codec a topic's `compression.type` recompresses to; None: the producer's is kept.
fn topic_codec(compression: TopicCompression) -> Option<Compression> {
    match compression {
        TopicCompression::Producer => None,
        TopicCompression::Uncompressed => Some(Compression::None),
        TopicCompression::Gzip => Some(Compression::Gzip),
        TopicCompression::Snappy => Some(Compression::Snappy),
        TopicCompression::Lz4 => Some(Compression::Lz4),
        TopicCompression::Zstd => Some(Compression::Zstd),
    }
}

/// Whether `topic` is among those an image change touched (all: None).
fn in_scope(scope: Option<&HashSet<String>>, topic: &str) -> bool {
    scope.is_none_or(|s| s.contains(topic))
}

fn poisoned<G>(_: std::sync::PoisonError<G>) -> KafkaError {
    KafkaError::new(errors::UNKNOWN_SERVER_ERROR, "partition map poisoned")
}

/// A log that could not be created or set aside, with the storage error's Kafka code.
fn storage_failed(what: String, error: &fjord_storage::StorageError) -> KafkaError {
    KafkaError::new(error.kafka_error_code(), format!("{what}: {error}"))
}

pub struct ReplicaManager {
    node_id: i32,
    broker_config: Arc<BrokerConfig>,
    log_manager: LogManager,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// The last image applied, which the next one is compared with; held through an apply.
    applied: Mutex<Option<Arc<MetadataImage>>>,
    /// The same image, for readers that must not wait for an apply under way.
    current: RwLock<Option<Arc<MetadataImage>>>,
    /// Bumped whenever hosted partitions or their leadership change: the replica fetchers
    /// follow it.
    changes: tokio::sync::watch::Sender<u64>,
    /// Where replication and storage events are counted.
    metrics: Arc<Metrics>,
}

impl ReplicaManager {
    pub fn new(node_id: i32, broker_config: Arc<BrokerConfig>, log_manager: LogManager) -> Self {
        ReplicaManager {
            node_id,
            broker_config,
            log_manager,
            partitions: RwLock::new(HashMap::new()),
            applied: Mutex::new(None),
            current: RwLock::new(None),
            changes: tokio::sync::watch::channel(0).0,
            metrics: Metrics::new(),
        }
    }

    /// The same, counting into the node's `metrics`.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> Self {
        ReplicaManager { metrics, ..self }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Wakes after every change of hosted partitions or their leadership.
    pub fn subscribe_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The last metadata image the partitions were brought in line with.
    pub fn applied_image(&self) -> Option<Arc<MetadataImage>> {
        self.current.read().ok()?.clone()
    }

    pub fn log_manager(&self) -> &LogManager {
        &self.log_manager
    }

    /// A write or fsync failed under `partition_dir`: its log dir goes offline. With every log dir
    /// offline the broker cannot serve anything and halts, as Kafka does.
    pub fn storage_failure(&self, partition_dir: &std::path::Path, error: &str) {
        if self.log_manager.take_dir_offline(partition_dir, error) {
            tracing::error!("every log dir has failed: halting the broker");
            std::process::exit(1);
        }
    }

    /// The partition, if this broker leads it: what clients produce to and fetch from, and
    /// what a group coordinator appends to.
    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let key = TopicPartition::new(topic, partition);
        let partition = self.partitions.read().ok()?.get(&key).cloned()?;
        partition.is_leader().then_some(partition)
    }

    /// A partition this broker hosts a replica of, leader or follower (consumers may read from
    /// followers, KIP-392).
    pub fn get_hosted(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let key = TopicPartition::new(topic, partition);
        self.partitions.read().ok()?.get(&key).cloned()
    }

    /// Every partition this broker hosts a replica of, leader or not (retention, flushing and
    /// checkpoints run on all of them).
    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The topic config and log config a topic gets from its overrides in the image.
    pub fn topic_config(&self, image: &MetadataImage, topic: &str) -> TopicConfig {
        let (node, default) = image.broker_config_layers(self.node_id);
        let dynamic = DynamicBrokerConfig::new(node, default);
        self.topic_config_with(image, &dynamic, topic)
    }

    /// As `topic_config`, with this broker's dynamic configs already read from the image.
    fn topic_config_with(
        &self,
        image: &MetadataImage,
        dynamic: &DynamicBrokerConfig,
        topic: &str,
    ) -> TopicConfig {
        let empty = BTreeMap::new();
        let overrides = image.topic_config(topic).unwrap_or(&empty);
        TopicConfig::resolve(&self.broker_config, dynamic, overrides)
    }

    /// Brings hosted partitions in line with the image: opens or creates logs for partitions this
    /// node leads, refreshes configs and leader epochs, deletes logs of removed topics. Only what
    /// changed since the last image applied is touched (the metadata delta): every partition when
    /// broker-level configs changed, else only the partitions of changed or removed topics. An
    /// image older than the last one applied is ignored.
    pub fn apply_image(&self, image: &Arc<MetadataImage>, now_ms: i64) -> Result<(), KafkaError> {
        let mut applied = lock(&self.applied);
        let scope = match applied.as_ref() {
            Some(last) if last.offset() > image.offset() || Arc::ptr_eq(last, image) => {
                return Ok(())
            }
            Some(last) => {
                let changes = image.changes_since(last);
                if changes.is_empty() {
                    *applied = Some(image.clone());
                    if let Ok(mut current) = self.current.write() {
                        *current = Some(image.clone());
                    }
                    return Ok(());
                }
                (!changes.broker_configs_changed).then(|| {
                    changes
                        .changed_topics
                        .into_iter()
                        .chain(changes.removed_topics.into_iter().map(|(name, _)| name))
                        .collect::<HashSet<String>>()
                })
            }
            None => None,
        };
        self.apply_changes(image, scope.as_ref(), now_ms)?;
        *applied = Some(image.clone());
        if let Ok(mut current) = self.current.write() {
            *current = Some(image.clone());
        }
        Ok(())
    }

    /// Applies `image` to the partitions of the topics in `scope` (all: None), in steps: what
    /// the image gives this broker, partitions it no longer does, logs found or created, their
    /// leadership (side by side on the disk), and the partitions then hosted.
    fn apply_changes(
        &self,
        image: &MetadataImage,
        scope: Option<&HashSet<String>>,
        now_ms: i64,
    ) -> Result<(), KafkaError> {
        let wanted = self.wanted(image, scope);
        let removed = self.unhost(|tp| in_scope(scope, &tp.topic) && !wanted.contains_key(tp))?;
        for tp in removed {
            if let Err(error) = self.log_manager.retire_log(&tp, Retire::Delete, now_ms) {
                tracing::warn!(%tp, %error, "could not delete the log of a removed partition");
            }
        }
        let hosted_now: HashMap<TopicPartition, Arc<Partition>> = {
            let partitions = self.partitions.read().map_err(poisoned)?;
            wanted
                .keys()
                .filter_map(|tp| partitions.get(tp).map(|p| (tp.clone(), p.clone())))
                .collect()
        };
        // Logs on disk for partitions the image does not give this broker (a topic deleted, or
        // the replica moved away, while it was down): set aside, as Kafka does, not deleted.
        for (tp, _) in self.log_manager.all_logs() {
            if in_scope(scope, &tp.topic)
                && !wanted.contains_key(&tp)
                && !hosted_now.contains_key(&tp)
            {
                if let Err(error) = self.log_manager.retire_log(&tp, Retire::Stray, now_ms) {
                    tracing::warn!(%tp, %error, "could not set a stray log aside");
                }
            }
        }
        let mut placed = Vec::with_capacity(wanted.len());
        for (tp, (config, topic_id, leadership)) in wanted {
            placed.push(self.place(tp, config, topic_id, leadership, &hosted_now, now_ms)?);
        }
        // Recording a new leader epoch fsyncs a checkpoint per partition: at start-up, when
        // every partition gets one, they go to the disk side by side.
        let states = fjord_storage::parallel::map(
            placed.iter().collect(),
            fjord_storage::parallel::DISK_THREADS,
            |p: &Placed| self.lead_or_follow(p, now_ms),
        );
        self.host(placed, states)?;
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Every partition of the topics in `scope` that the image gives a replica on this broker,
    /// with its config, topic id and leadership. Every replica this broker holds stays, led or
    /// not: a leader that is fenced keeps its log for when it leads again.
    fn wanted(&self, image: &MetadataImage, scope: Option<&HashSet<String>>) -> Wanted {
        let mut wanted = Wanted::new();
        // Read once: every topic's defaults layer the same broker configs.
        let (node, default) = image.broker_config_layers(self.node_id);
        let dynamic = DynamicBrokerConfig::new(node, default);
        let topics: Vec<&Arc<fjord_metadata::TopicImage>> = match scope {
            None => image.topics().collect(),
            Some(names) => names.iter().filter_map(|n| image.topic(n)).collect(),
        };
        for topic in topics {
            let config = Arc::new(self.topic_config_with(image, &dynamic, &topic.name));
            for (index, partition) in topic.partitions.iter().enumerate() {
                if !partition.replicas.contains(&self.node_id) {
                    continue;
                }
                let leadership = LeaderAndIsr {
                    leader: partition.leader,
                    leader_epoch: partition.leader_epoch,
                    partition_epoch: partition.partition_epoch,
                    replicas: partition.replicas.clone(),
                    isr: partition.isr.clone(),
                };
                wanted.insert(
                    TopicPartition::new(topic.name.clone(), index as i32),
                    (config.clone(), topic.topic_id, leadership),
                );
            }
        }
        wanted
    }

    /// Stops hosting the partitions `gone` picks; returns them. The map's lock is taken only to
    /// read it or to change it, never across disk work (deleting and creating logs, leader
    /// epoch checkpoints): every produce and fetch takes it. Images are applied one at a time
    /// (`applied`), so nothing else changes the map in between.
    fn unhost(
        &self,
        gone: impl Fn(&TopicPartition) -> bool,
    ) -> Result<Vec<TopicPartition>, KafkaError> {
        let mut partitions = self.partitions.write().map_err(poisoned)?;
        let removed: Vec<TopicPartition> =
            partitions.keys().filter(|tp| gone(tp)).cloned().collect();
        for tp in &removed {
            partitions.remove(tp);
        }
        Ok(removed)
    }

    /// The log of a wanted partition: the one found, or a new one when there is none or it
    /// belongs to a topic of the same name deleted before this broker saw it (that one is set
    /// aside).
    fn place(
        &self,
        tp: TopicPartition,
        config: Arc<TopicConfig>,
        topic_id: TopicId,
        leadership: LeaderAndIsr,
        hosted_now: &HashMap<TopicPartition, Arc<Partition>>,
        now_ms: i64,
    ) -> Result<Placed, KafkaError> {
        let durable = !config.flushed_by_interval();
        let log_config = log_config(&config, durable);
        let mut existing = self.log_manager.get(&tp);
        let existing_id = existing.as_ref().and_then(|log| lock(log).topic_id());
        if existing_id.is_some_and(|id| id != topic_id) {
            let retire = if hosted_now.contains_key(&tp) {
                Retire::Delete
            } else {
                Retire::Stray
            };
            self.log_manager
                .retire_log(&tp, retire, now_ms)
                .map_err(|e| storage_failed(format!("cannot retire the old log of {tp}"), &e))?;
            existing = None;
        }
        let log = match existing {
            Some(log) => log,
            None => self
                .log_manager
                .create_log(tp.clone(), topic_id, log_config.clone(), now_ms)
                .map_err(|e| storage_failed(format!("cannot create the log of {tp}"), &e))?,
        };
        let hosted = hosted_now
            .get(&tp)
            .filter(|p| p.topic_id == topic_id && p.has_log(&log))
            .cloned();
        Ok(Placed {
            tp,
            settings: Settings { config, durable },
            topic_id,
            leadership,
            log_config,
            log,
            hosted,
        })
    }

    /// A placed partition's log takes its config and leadership: a hosted partition's state
    /// follows in place (None); a new one gets its state (Some). Everything that survived
    /// recovery is durable: a high watermark checkpointed lower rises to it when this broker
    /// holds the whole ISR.
    fn lead_or_follow(&self, p: &Placed, now_ms: i64) -> Option<PartitionState> {
        let leads = (p.leadership.leader == self.node_id).then_some(p.leadership.leader_epoch);
        let started = |outcome: Result<(), fjord_storage::StorageError>| {
            if let Err(error) = outcome {
                tracing::warn!(tp = %p.tp, %error, "cannot record the leader epoch start");
            }
        };
        if let Some(hosted) = &p.hosted {
            let mut locked = hosted.lock();
            started(locked.configure(p.log_config.clone(), leads));
            locked.apply_leadership(p.leadership.clone(), now_ms);
            return None;
        }
        let mut log = lock(&p.log);
        log.set_config(p.log_config.clone());
        if let Some(epoch) = leads {
            started(log.become_leader(epoch));
        }
        let state = PartitionState::new(
            self.node_id,
            p.leadership.clone(),
            log.log_end_offset(),
            log.recovery_point(),
            now_ms,
        );
        // A restart raises a stale checkpointed high watermark to what this sole leader has.
        log.raise_high_watermark(state.high_watermark_bound());
        Some(state)
    }

    /// Hosted partitions take their new settings; new ones join the map. A topic's overrides
    /// fjord does not act on are named in a warning when its config changes.
    fn host(
        &self,
        placed: Vec<Placed>,
        states: Vec<Option<PartitionState>>,
    ) -> Result<(), KafkaError> {
        let mut warned = HashSet::new();
        let mut added = Vec::new();
        for (p, state) in placed.into_iter().zip(states) {
            let config_changed = p
                .hosted
                .as_ref()
                .is_none_or(|hosted| *hosted.config() != *p.settings.config);
            if config_changed && warned.insert(p.tp.topic.clone()) {
                for (key, value) in p.settings.config.ignored_overrides() {
                    tracing::warn!(topic = %p.tp.topic, key, value, "topic config accepted but not acted upon by fjord yet");
                }
            }
            match (p.hosted, state) {
                (Some(hosted), _) => {
                    if config_changed {
                        hosted.set_settings(p.settings);
                    }
                }
                (None, Some(state)) => {
                    added.push(Arc::new(Partition::new(
                        p.tp, p.topic_id, p.log, p.settings, state,
                    )));
                }
                (None, None) => {}
            }
        }
        if !added.is_empty() {
            let mut partitions = self.partitions.write().map_err(poisoned)?;
            for partition in added {
                partitions.insert(partition.tp.clone(), partition);
            }
        }
        Ok(())
    }

    /// Validates and appends one partition's records from a produce request. Runs on the
    /// connection's reader, in request order, so pipelined batches of one producer append in the
    /// order they were sent.
    /// Appends a transaction marker to a partition this broker leads (WriteTxnMarkers).
    pub fn append_marker(
        &self,
        partition: &Partition,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), PartitionError> {
        self.leader_append(partition, |locked| {
            locked.append_marker(producer_id, producer_epoch, marker, epoch_bumps, now_ms)
        })
    }

    /// Runs a leader append under the partition's log lock, turning its failures into Kafka
    /// errors; a failed disk takes its log dir offline.
    fn leader_append(
        &self,
        partition: &Partition,
        append: impl FnOnce(&mut LockedPartition<'_>) -> Result<(AppendInfo, LeaderEpoch), AppendError>,
    ) -> Result<(AppendInfo, LeaderEpoch), PartitionError> {
        let mut log = partition.try_lock()?;
        match append(&mut log) {
            Ok(appended) => Ok(appended),
            Err(AppendError::NotLeader) => Err(PartitionError::new(
                errors::NOT_LEADER_OR_FOLLOWER,
                AppendError::NotLeader.to_string(),
            )),
            Err(AppendError::TransactionEnded) => Err(PartitionError::new(
                errors::TRANSACTION_ABORTABLE,
                AppendError::TransactionEnded.to_string(),
            )),
            Err(AppendError::Storage(e)) => {
                let dir = log.dir().to_path_buf();
                drop(log);
                if e.is_disk_failure() {
                    self.storage_failure(&dir, &e.to_string());
                }
                Err(PartitionError::new(e.kafka_error_code(), e.to_string()))
            }
        }
    }

    /// Appends a client's produce to `partition`; a transactional batch only if `verification`
    /// still holds under the log's lock (else TRANSACTION_ABORTABLE: its transaction ended
    /// since it was verified).
    pub(crate) fn append(
        &self,
        partition: &Partition,
        records: &Bytes,
        verification: Option<crate::replication::TxnVerification>,
        now_ms: i64,
    ) -> Result<Appended, PartitionError> {
        let config = partition.config();
        let batches = fjord_records::split_batches(records).map_err(|e| records_error(&e))?;
        if batches.is_empty() {
            return Err(PartitionError::new(
                errors::INVALID_RECORD,
                "produce request carried no record batch",
            ));
        }
        // Produce v3+ (all fjord accepts) carries exactly one batch per partition, as Kafka
        // enforces; a client sending more is broken, not batching.
        if batches.len() > 1 {
            return Err(PartitionError::new(
                errors::INVALID_RECORD,
                "a produce request may carry only one record batch per partition",
            ));
        }
        let settings = config.settings();
        let timestamp_type = match settings.message_timestamp_type {
            fjord_config::TimestampType::LogAppendTime => TimestampType::LogAppendTime,
            fjord_config::TimestampType::CreateTime => TimestampType::CreateTime,
        };
        let validation = ValidationConfig {
            max_batch_bytes: settings.max_message_bytes.max(0) as usize,
            max_decompressed_bytes: MAX_DECOMPRESSED_BATCH_BYTES,
            require_keys: settings.cleanup_policy.compact,
            timestamp_type,
            now_ms,
            timestamp_before_max_ms: settings.message_timestamp_before_max_ms,
            timestamp_after_max_ms: settings.message_timestamp_after_max_ms,
            origin: fjord_records::AppendOrigin::Client,
        };
        let target = topic_codec(settings.compression_type);
        let mut owned = Vec::with_capacity(batches.len());
        for batch in batches {
            let validated = fjord_records::validate_batch(&batch, &validation)
                .map_err(|e| records_error(&e))?;
            // Only the header is copied for the log's rewrites; the records stay in the frame
            // unless the topic's codec differs, which needs a real rewrite.
            let batch = match target {
                Some(codec) if codec != validated.compression => {
                    fjord_records::recompress(&batch, codec, None, MAX_DECOMPRESSED_BATCH_BYTES)
                        .map_err(|e| records_error(&e))?
                        .freeze()
                }
                _ => batch,
            };
            let mut batch = AppendBatch::new(batch).map_err(|e| records_error(&e))?;
            match timestamp_type {
                TimestampType::LogAppendTime => batch.set_log_append_time(now_ms),
                TimestampType::CreateTime => {
                    batch.set_max_timestamp(TimestampType::CreateTime, validated.max_timestamp)
                }
            }
            owned.push(batch);
        }
        let (info, leader_epoch) = self.leader_append(partition, |locked| {
            locked.append_as_leader(owned, verification, now_ms)
        })?;
        let log_append_time_ms = if timestamp_type == TimestampType::LogAppendTime {
            now_ms
        } else {
            -1
        };
        Ok(Appended {
            info,
            leader_epoch,
            log_append_time_ms,
        })
    }
}

fn records_error(error: &fjord_records::RecordsError) -> PartitionError {
    let record_errors = match error {
        fjord_records::RecordsError::RecordErrors(list) => list
            .iter()
            .map(|e| (e.batch_index, e.kind.message().to_string()))
            .collect(),
        _ => Vec::new(),
    };
    PartitionError {
        code: error.kafka_error_code(),
        message: Some(error.to_string()),
        record_errors,
    }
}

/// The metadata record of partition `index` of topic `topic_id`, on broker 1 alone, which leads it.
#[cfg(test)]
pub(crate) fn led_by_broker_1(
    topic_id: fjord_common::Uuid,
    index: i32,
) -> fjord_metadata::MetadataRecord {
    led_by_broker_1_with(topic_id, index, vec![1], vec![1])
}

/// As `led_by_broker_1`, with these replicas and in-sync replicas.
#[cfg(test)]
pub(crate) fn led_by_broker_1_with(
    topic_id: fjord_common::Uuid,
    index: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
) -> fjord_metadata::MetadataRecord {
    fjord_metadata::MetadataRecord::Partition(fjord_metadata::PartitionRecord {
        partition_id: index,
        topic_id,
        replicas,
        isr,
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::partition::tests::append;
    use fjord_records::BatchBuilder;

    #[test]
    fn a_batch_verified_before_its_transaction_ended_is_refused() {
        use crate::replication::TxnVerification;
        let dir = tempfile::tempdir().unwrap();
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let (logs, _) =
            LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = ReplicaManager::new(1, Arc::new(broker), logs);
        let topic_id = fjord_common::Uuid([3; 16]);
        let records = [
            fjord_metadata::MetadataRecord::Topic(fjord_metadata::TopicRecord {
                name: "t".into(),
                topic_id,
            }),
            led_by_broker_1(topic_id, 0),
        ];
        replicas.apply_image(&image(1, &records), 0).unwrap();
        let p = replicas.get("t", 0).unwrap();
        let batch = |sequence: i32| {
            let mut builder = BatchBuilder::new(Compression::None)
                .producer(7, 0, sequence)
                .transactional(true);
            builder.append(0, None, Some(b"v"), &[]).unwrap();
            builder.build().unwrap().freeze()
        };
        let verified = |guard| {
            Some(TxnVerification {
                producer_id: 7,
                producer_epoch: 0,
                guard: Some(guard),
            })
        };
        // The leader takes its guard and asks the coordinator; before the batch is appended
        // the transaction is aborted and its marker lands here.
        let guard = p.lock().start_transaction_verification(7, 0, false, 0);
        let abort = EndTxnMarker {
            commit: false,
            coordinator_epoch: 0,
        };
        p.lock().append_marker(7, 0, abort, false, 0).unwrap();
        let refused = replicas.append(&p, &batch(0), verified(guard), 0);
        assert_eq!(
            refused.err().map(|e| e.code),
            Some(errors::TRANSACTION_ABORTABLE)
        );
        assert_eq!(p.lock().log_end_offset(), 1, "only the marker");
        // Verified anew: appended, and the transaction is open for the next batch.
        let guard = p.lock().start_transaction_verification(7, 0, false, 0);
        replicas.append(&p, &batch(0), verified(guard), 0).unwrap();
        let open = Some(TxnVerification {
            producer_id: 7,
            producer_epoch: 0,
            guard: None,
        });
        replicas.append(&p, &batch(1), open, 0).unwrap();
        assert_eq!(p.lock().log_end_offset(), 3);
    }

    fn image(offset: u64, records: &[fjord_metadata::MetadataRecord]) -> Arc<MetadataImage> {
        Arc::new(MetadataImage::from_records(offset, records).unwrap())
    }

    #[test]
    fn images_apply_as_deltas_and_never_go_back() {
        use fjord_common::Uuid;
        use fjord_metadata::{ConfigRecord, MetadataRecord, TopicRecord};
        let dir = tempfile::tempdir().unwrap();
        let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        let (logs, _) =
            LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
        let replicas = ReplicaManager::new(1, Arc::new(broker), logs);
        let topic = |name: &str, id: u8| {
            MetadataRecord::Topic(TopicRecord {
                name: name.into(),
                topic_id: Uuid([id; 16]),
            })
        };
        let partition = |id: u8, index: i32| led_by_broker_1(Uuid([id; 16]), index);
        let mut records = vec![
            topic("a", 1),
            partition(1, 0),
            topic("b", 2),
            partition(2, 0),
        ];
        let first = image(1, &records);
        replicas.apply_image(&first, 0).unwrap();
        let a = replicas.get("a", 0).unwrap();
        records.push(partition(2, 1));
        records.push(MetadataRecord::Config(ConfigRecord {
            resource_type: fjord_metadata::CONFIG_RESOURCE_TOPIC,
            resource_name: "a".into(),
            name: "retention.ms".into(),
            value: Some("1234".into()),
        }));
        let second = image(2, &records);
        replicas.apply_image(&second, 0).unwrap();
        assert!(replicas.get("b", 1).is_some());
        assert!(
            Arc::ptr_eq(&a, &replicas.get("a", 0).unwrap()),
            "updated in place"
        );
        assert_eq!(a.config().settings().retention_ms, 1234);
        // An older image arriving late (a racing applier) changes nothing.
        replicas.apply_image(&first, 0).unwrap();
        assert!(replicas.get("b", 1).is_some());
        assert_eq!(a.config().settings().retention_ms, 1234);
        // A removed topic's partitions and logs go.
        records.push(MetadataRecord::RemoveTopic(
            fjord_metadata::RemoveTopicRecord {
                topic_id: Uuid([2; 16]),
            },
        ));
        replicas.apply_image(&image(3, &records), 0).unwrap();
        assert!(replicas.get("b", 0).is_none() && replicas.get("b", 1).is_none());
        assert!(replicas.get("a", 0).is_some());
        // Their dirs are renamed at once and removed once file.delete.delay.ms has passed.
        assert_eq!(dirs_ending(dir.path(), "-delete").len(), 2);
        assert!(!dir.path().join("b-0").exists());
        let logs = replicas.log_manager();
        assert!(logs.take_due_deletions(59_999).is_empty());
        assert_eq!(
            fjord_storage::remove_retired_dirs(logs.take_due_deletions(60_000)),
            2
        );
        assert!(dirs_ending(dir.path(), "-delete").is_empty());
    }

    fn dirs_ending(dir: &std::path::Path, suffix: &str) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(suffix))
            .collect()
    }

    #[test]
    fn a_topic_made_again_under_its_name_gets_a_new_log_and_strays_are_set_aside() {
        use fjord_common::Uuid;
        use fjord_metadata::{MetadataRecord, RemoveTopicRecord, TopicRecord};
        let topic = |name: &str, id: u8| {
            MetadataRecord::Topic(TopicRecord {
                name: name.into(),
                topic_id: Uuid([id; 16]),
            })
        };
        let remove = |id: u8| {
            MetadataRecord::RemoveTopic(RemoveTopicRecord {
                topic_id: Uuid([id; 16]),
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let manager = || {
            let (broker, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
            let (logs, report) =
                LogManager::open(&[dir.path().to_path_buf()], LogConfig::default(), 0).unwrap();
            (ReplicaManager::new(1, Arc::new(broker), logs), report)
        };
        let (replicas, _) = manager();
        let mut records = vec![topic("t", 1), led_by_broker_1(Uuid([1; 16]), 0)];
        replicas.apply_image(&image(1, &records), 0).unwrap();
        append(&replicas.get("t", 0).unwrap());
        // Deleted and made again between two images this broker applies.
        records.extend([remove(1), topic("t", 2), led_by_broker_1(Uuid([2; 16]), 0)]);
        replicas.apply_image(&image(2, &records), 0).unwrap();
        let t = replicas.get("t", 0).unwrap();
        assert_eq!(t.lock().log_end_offset(), 0, "not the old topic's records");
        assert_eq!(t.lock().topic_id(), Some(Uuid([2; 16])));
        assert_eq!(dirs_ending(dir.path(), "-delete").len(), 1);
        append(&t);
        drop((t, replicas));

        // While this broker is down, t is made again once more and another topic comes and
        // goes: at start its logs on disk belong to no partition it has, and are set aside.
        let (replicas, _) = manager();
        let gone = replicas
            .log_manager()
            .create_log(
                TopicPartition::new("gone", 0),
                Uuid([5; 16]),
                LogConfig::default(),
                0,
            )
            .unwrap();
        drop((gone, replicas));
        let (replicas, _) = manager();
        records.extend([remove(2), topic("t", 3), led_by_broker_1(Uuid([3; 16]), 0)]);
        replicas.apply_image(&image(3, &records), 0).unwrap();
        let t = replicas.get("t", 0).unwrap();
        assert_eq!(t.lock().log_end_offset(), 0);
        assert_eq!(t.lock().topic_id(), Some(Uuid([3; 16])));
        let mut strays = dirs_ending(dir.path(), "-stray");
        strays.sort();
        assert_eq!(strays.len(), 2, "{strays:?}");
        assert!(strays[0].starts_with("gone-0.") && strays[1].starts_with("t-0."));
        drop((t, replicas));
        // Kept, and not loaded again.
        let (_, report) = manager();
        assert_eq!(report.stray_dirs, 2);
        assert_eq!(report.partitions_loaded, 1);
    }
}
