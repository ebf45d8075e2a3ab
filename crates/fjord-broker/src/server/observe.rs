//! What the HTTP listener reports of this node: the Prometheus exposition (the `metrics`
//! instruments, plus the state read when a scrape asks: partitions, log dirs, the quorum, the
//! process) and readiness.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use fjord_config::BrokerConfig;
use fjord_metadata::{MetadataImage, NO_LEADER};
use fjord_quorum::MetadataQuorum;
use fjord_storage::LogCleaner;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::watch;

use super::group_lag::RemoteEnds;
use crate::api::Broker;
use crate::metrics::Metrics;

/// The exposition formats a scrape may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// Prometheus' text format 0.0.4, the default.
    Text,
    /// OpenMetrics 1.0 text, when the scraper's `Accept` asks for it.
    OpenMetrics,
}

impl Format {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// This node as the HTTP listener sees it. The parts arrive as the node starts: the quorum
/// once it runs, the broker once it serves.
pub(super) struct Observer {
    state: Arc<Observed>,
    registry: Registry,
}

struct Observed {
    config: Arc<BrokerConfig>,
    metrics: Arc<Metrics>,
    /// Weak: the quorum shuts down when the node stops, whoever still scrapes.
    quorum: OnceLock<Weak<MetadataQuorum>>,
    /// Weak too: the broker's parts stop in order when the node stops (its flusher once the
    /// broker is gone).
    broker: OnceLock<Weak<Broker>>,
    /// Weak too, for the same reason.
    cleaner: OnceLock<Weak<LogCleaner>>,
    /// High watermarks of the partitions groups coordinated here need and this node does not host.
    remote_ends: RemoteEnds,
    shutdown: watch::Receiver<bool>,
    /// When this node started, in seconds since the Unix epoch.
    started_at: f64,
}

impl fmt::Debug for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("node_id", &self.config.node_id)
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub(super) fn new(
        config: Arc<BrokerConfig>,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> Observer {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let state = Arc::new(Observed {
            config,
            metrics,
            quorum: OnceLock::new(),
            broker: OnceLock::new(),
            cleaner: OnceLock::new(),
            remote_ends: RemoteEnds::default(),
            shutdown,
            started_at,
        });
        let mut registry = Registry::default();
        let fjord = registry.sub_registry_with_prefix("fjord");
        state.metrics.register(fjord);
        fjord.register(
            "build",
            "fjord's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        fjord.register_collector(Box::new(NodeState(state.clone())));
        registry.register_collector(Box::new(Process(state.clone())));
        Observer { state, registry }
    }

    /// The quorum has started: its state is reported from now on.
    pub(super) fn quorum_started(&self, quorum: &Arc<MetadataQuorum>) {
        let _ = self.state.quorum.set(Arc::downgrade(quorum));
    }

    /// The broker serves: its partitions are reported from now on.
    pub(super) fn broker_started(&self, broker: &Arc<Broker>) {
        let _ = self.state.broker.set(Arc::downgrade(broker));
    }

    /// The log cleaner runs: what it does is reported from now on.
    pub(super) fn cleaner_started(&self, cleaner: &Arc<LogCleaner>) {
        let _ = self.state.cleaner.set(Arc::downgrade(cleaner));
    }

    /// Asks the leaders of the partitions the groups coordinated here committed to, and this
    /// node does not host, for their high watermarks: the lag the next exposition reports.
    pub(super) async fn refresh_group_lag(&self) {
        if let Some(broker) = self.state.broker.get().and_then(Weak::upgrade) {
            self.state.remote_ends.refresh(&broker).await;
        }
    }

    /// The exposition in `format`. Reads log dirs' space and every hosted log's size: call it
    /// off the runtime's threads.
    pub(super) fn exposition(&self, format: Format) -> Result<String, fmt::Error> {
        let mut text = String::with_capacity(16 * 1024);
        match format {
            Format::Text => {
                prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut text, &self.registry)?
            }
        }
        Ok(text)
    }

    /// Ok when the node can serve: started, not shutting down, and — with the broker role —
    /// registered, unfenced and not in a controlled shutdown (its logs and coordinators are
    /// loaded before it unfences); with the controller role alone, the quorum has a leader.
    /// Else why not.
    pub(super) fn readiness(&self) -> Result<(), String> {
        let state = &self.state;
        if *state.shutdown.borrow() {
            return Err("shutting down".into());
        }
        let Some(quorum) = state.quorum.get().and_then(Weak::upgrade) else {
            return Err("starting: the metadata quorum is not up yet".into());
        };
        if !state.config.cluster.broker {
            return match quorum.leader() {
                Some(_) => Ok(()),
                None => Err("the metadata quorum has no leader".into()),
            };
        }
        if state.broker.get().and_then(Weak::upgrade).is_none() {
            return Err("starting: the broker is not serving yet".into());
        }
        // The controller fences a broker it has not heard from for its session: one that has
        // not been answered for that long is fenced, or about to be, though its image (which the
        // same controller feeds) cannot say so yet.
        let session = state.config.cluster.broker_session_timeout_ms;
        let unanswered = state
            .metrics
            .heartbeats
            .since_answered(fjord_common::now_ms());
        if let Some(unanswered) = unanswered.filter(|u| u.as_millis() > session as u128) {
            return Err(format!(
                "fenced: no heartbeat answered in the last {} ms (broker.session.timeout.ms={session})",
                unanswered.as_millis()
            ));
        }
        match quorum.image().broker(state.config.node_id) {
            None => Err("not registered".into()),
            Some(registration) if registration.fenced => Err("fenced".into()),
            Some(registration) if registration.in_controlled_shutdown => {
                Err("in controlled shutdown".into())
            }
            Some(_) => Ok(()),
        }
    }
}

/// The node's state, read at each scrape.
#[derive(Debug)]
struct NodeState(Arc<Observed>);

impl Collector for NodeState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let state = &self.0;
        if let Some(quorum) = state.quorum.get().and_then(Weak::upgrade) {
            quorum_series(&mut encoder, &quorum, &state.config)?;
        }
        if let Some(broker) = state.broker.get().and_then(Weak::upgrade) {
            broker_series(&mut encoder, &broker, &state.config)?;
            if let Some(cleaner) = state.cleaner.get().and_then(Weak::upgrade) {
                cleaner_series(&mut encoder, &cleaner)?;
            }
            coordinator_series(&mut encoder, &broker, &state.config, &state.remote_ends)?;
            let image = broker.node.image();
            state
                .metrics
                .topics
                .retain(|topic| image.topic(topic).is_some());
            state.metrics.topics.encode(&mut encoder)?;
            broker
                .cluster
                .telemetry
                .encode(&mut encoder, fjord_common::now_ms())?;
        }
        Ok(())
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn counter(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    value: impl EncodeCounterValue,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    for (labels, value) in rows {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, value) in rows {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The quorum and the cluster as this node's metadata image has them.
fn quorum_series(
    encoder: &mut DescriptorEncoder,
    quorum: &MetadataQuorum,
    config: &BrokerConfig,
) -> fmt::Result {
    let active = config.cluster.controller && quorum.is_leader();
    gauge(
        encoder,
        "active_controller",
        "1 on the active controller, else 0: sum over the cluster is 1 (Kafka: ActiveControllerCount)",
        i64::from(active),
    )?;
    let status = quorum.status();
    gauge(
        encoder,
        "metadata_leader",
        "The metadata quorum's leader as this node knows it, -1 for none (Kafka: raft-metrics current-leader)",
        status.leader.map_or(-1, |l| i64::try_from(l).unwrap_or(-1)),
    )?;
    gauge(
        encoder,
        "metadata_term",
        "The metadata quorum's term (Kafka: raft-metrics current-epoch)",
        i64::try_from(status.term).unwrap_or(i64::MAX),
    )?;
    let log_end = quorum.log_end_offset();
    gauge(
        encoder,
        "metadata_log_end_offset",
        "End of this node's copy of the metadata log (Kafka: raft-metrics log-end-offset)",
        i64::try_from(log_end).unwrap_or(i64::MAX),
    )?;
    if status
        .leader
        .is_some_and(|leader| i64::try_from(leader) == Ok(i64::from(config.node_id)))
    {
        let replicas = status.voters.iter().chain(&status.learners);
        gauges(
            encoder,
            (
                "metadata_replica_lag",
                "On the quorum's leader: how far each member's copy of the metadata log is behind its own (kafka-metadata-quorum describe --replication: Lag)",
                None,
            ),
            replicas.filter_map(|r| {
                let lag = log_end.saturating_sub(r.log_end_offset?);
                Some(([("node", r.node_id.to_string())], i64::try_from(lag).unwrap_or(i64::MAX)))
            }),
        )?;
    }
    let seen = quorum.leadership();
    counter(
        encoder,
        (
            "metadata_leader_changes",
            "Times the quorum's leader (or its term) changed, as this node saw it (Kafka: the raft-metrics current-leader and current-epoch moving)",
            None,
        ),
        seen.leader_changes,
    )?;
    counter(
        encoder,
        (
            "metadata_elections",
            "Times this node knew no quorum leader and then knew one again",
            None,
        ),
        seen.elections,
    )?;
    counter(
        encoder,
        (
            "metadata_election",
            "Time this node knew no quorum leader, summed over those elections (Kafka: raft-metrics election-latency)",
            Some(Unit::Seconds),
        ),
        seen.election_time.as_secs_f64(),
    )?;
    let image = quorum.image();
    gauge(
        encoder,
        "metadata_applied_offset",
        "Offset of the last metadata record this node applied (Kafka: last-applied-record-offset)",
        i64::try_from(image.offset()).unwrap_or(i64::MAX),
    )?;
    cluster_series(encoder, &image)
}

/// Counts over the whole cluster, the same on every node that has caught up: aggregate with
/// max, not sum.
fn cluster_series(encoder: &mut DescriptorEncoder, image: &MetadataImage) -> fmt::Result {
    let (mut active, mut fenced, mut shutting_down) = (0i64, 0i64, 0i64);
    for broker in image.brokers() {
        if broker.fenced {
            fenced += 1;
        } else if broker.in_controlled_shutdown {
            shutting_down += 1;
        } else {
            active += 1;
        }
    }
    gauges(
        encoder,
        (
            "brokers",
            "Registered brokers by state (Kafka: ActiveBrokerCount, FencedBrokerCount)",
            None,
        ),
        [
            ("active", active),
            ("fenced", fenced),
            ("controlled_shutdown", shutting_down),
        ]
        .map(|(state, n)| ([("state", state)], n)),
    )?;
    let (mut topics, mut partitions, mut offline) = (0i64, 0i64, 0i64);
    for topic in image.topics() {
        topics += 1;
        for partition in &topic.partitions {
            partitions += 1;
            if partition.leader == NO_LEADER {
                offline += 1;
            }
        }
    }
    gauge(
        encoder,
        "global_topics",
        "Topics in the cluster (Kafka: GlobalTopicCount)",
        topics,
    )?;
    gauge(
        encoder,
        "global_partitions",
        "Partitions in the cluster (Kafka: GlobalPartitionCount)",
        partitions,
    )?;
    gauge(
        encoder,
        "offline_partitions",
        "Partitions without a leader (Kafka: OfflinePartitionsCount)",
        offline,
    )
}

/// One hosted partition at a scrape: its log's size, segments, start and end offsets.
struct PartitionRow {
    topic: String,
    partition: i32,
    values: [i64; 4],
}

/// The partitions this broker hosts, and its log dirs.
fn broker_series(
    encoder: &mut DescriptorEncoder,
    broker: &Broker,
    config: &BrokerConfig,
) -> fmt::Result {
    // Hosted, led, under-replicated, under min ISR, at min ISR.
    let mut counts = [0i64; 5];
    let mut rows = Vec::new();
    let mut follower_lags = Vec::new();
    let per_partition = config.metrics_per_partition();
    for partition in broker.replicas().all() {
        counts[0] += 1;
        if !partition.is_leader() {
            let lag = partition.follower_lag();
            follower_lags.push((partition.tp.topic.clone(), partition.tp.partition, lag));
        }
        if partition.is_leader() {
            let (isr, replica_count) = partition.isr_and_replica_count();
            let min_isr = partition.effective_min_isr(replica_count);
            let in_sync = i64::try_from(isr.len()).unwrap_or(i64::MAX);
            counts[1] += 1;
            counts[2] += i64::from(isr.len() < replica_count);
            counts[3] += i64::from(in_sync < min_isr);
            counts[4] += i64::from(in_sync == min_isr);
        }
        if per_partition {
            let log = partition.lock();
            rows.push(PartitionRow {
                topic: partition.tp.topic.clone(),
                partition: partition.tp.partition,
                values: [
                    i64::try_from(log.size_in_bytes()).unwrap_or(i64::MAX),
                    i64::try_from(log.num_segments()).unwrap_or(i64::MAX),
                    log.log_start_offset(),
                    log.log_end_offset(),
                ],
            });
        }
    }
    let described = [
        ("partitions", "Partitions this broker hosts (Kafka: PartitionCount)"),
        ("leader_partitions", "Partitions this broker leads (Kafka: LeaderCount)"),
        (
            "under_replicated_partitions",
            "Partitions this broker leads whose ISR lacks a replica (Kafka: UnderReplicatedPartitions)",
        ),
        (
            "under_min_isr_partitions",
            "Partitions this broker leads with fewer in sync than min.insync.replicas: acks=all produce is refused (Kafka: UnderMinIsrPartitionCount)",
        ),
        (
            "at_min_isr_partitions",
            "Partitions this broker leads with exactly min.insync.replicas in sync (Kafka: AtMinIsrPartitionCount)",
        ),
    ];
    for ((name, help), count) in described.into_iter().zip(counts) {
        gauge(encoder, name, help, count)?;
    }
    rows.sort_unstable_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let labels = |row: &PartitionRow| {
        [
            ("topic", row.topic.clone()),
            ("partition", row.partition.to_string()),
        ]
    };
    let per_log = [
        (
            "log_size",
            "Bytes of each hosted partition's log (Kafka: Log Size)",
            Some(Unit::Bytes),
        ),
        (
            "log_segments",
            "Segments of each hosted partition's log (Kafka: NumLogSegments)",
            None,
        ),
        (
            "log_start_offset",
            "Each hosted partition's log start offset (Kafka: LogStartOffset)",
            None,
        ),
        (
            "log_end_offset",
            "Each hosted partition's log end offset (Kafka: LogEndOffset)",
            None,
        ),
    ];
    follower_series(encoder, &mut follower_lags, per_partition)?;
    if per_partition {
        for (index, descriptor) in per_log.into_iter().enumerate() {
            gauges(
                encoder,
                descriptor,
                rows.iter().map(|r| (labels(r), r.values[index])),
            )?;
        }
    }
    log_dir_series(encoder, broker)?;
    quota_series(encoder, broker)
}

/// How far the partitions this broker follows were behind their leaders at their last fetch:
/// (topic, partition, lag) each.
fn follower_series(
    encoder: &mut DescriptorEncoder,
    lags: &mut [(String, i32, i64)],
    per_partition: bool,
) -> fmt::Result {
    gauge(
        encoder,
        "replica_max_lag",
        "The most records any partition this broker follows was behind its leader's high watermark at its last fetch (Kafka: ReplicaFetcherManager MaxLag)",
        lags.iter().map(|l| l.2).max().unwrap_or(0),
    )?;
    if !per_partition {
        return Ok(());
    }
    lags.sort_unstable();
    gauges(
        encoder,
        (
            "replica_lag",
            "Records each partition this broker follows was behind its leader's high watermark at its last fetch (Kafka: FetcherLagMetrics ConsumerLag)",
            None,
        ),
        lags.iter().map(|(topic, partition, lag)| {
            ([("topic", topic.clone()), ("partition", partition.to_string())], *lag)
        }),
    )
}

/// What the log cleaner has done since start.
fn cleaner_series(encoder: &mut DescriptorEncoder, cleaner: &LogCleaner) -> fmt::Result {
    let totals = cleaner.totals();
    counter(
        encoder,
        ("log_cleaner_passes", "Log cleaning passes completed", None),
        totals.passes,
    )?;
    counter(
        encoder,
        (
            "log_cleaner_read",
            "Segment bytes the cleaner read (with the bytes written, Kafka's cleaner-recopy-percent)",
            Some(Unit::Bytes),
        ),
        totals.bytes_read,
    )?;
    counter(
        encoder,
        (
            "log_cleaner_written",
            "Cleaned segment bytes the cleaner wrote",
            Some(Unit::Bytes),
        ),
        totals.bytes_written,
    )?;
    counter(
        encoder,
        (
            "log_cleaner_pass",
            "Time the cleaning passes took (Kafka: max-clean-time-secs)",
            Some(Unit::Seconds),
        ),
        totals.elapsed_ms as f64 / 1000.0,
    )?;
    gauge(
        encoder,
        "log_cleaner_uncleanable_partitions",
        "Partitions whose cleaning failed, not cleaned again until a restart (Kafka: uncleanable-partitions-count)",
        i64::try_from(totals.uncleanable).unwrap_or(i64::MAX),
    )
}

/// The throttles the client quotas asked for, by quota key.
fn quota_series(encoder: &mut DescriptorEncoder, broker: &Broker) -> fmt::Result {
    let node = &broker.node;
    let client = &node.client_quotas;
    let rows = [
        (client.produce.key(), client.produce.throttles.read()),
        (client.fetch.key(), client.fetch.throttles.read()),
        (client.request.key(), client.request.throttles.read()),
        (
            fjord_metadata::quota::CONTROLLER_MUTATION_RATE,
            node.mutation_quotas.throttles.read(),
        ),
    ];
    counters(
        encoder,
        (
            "quota_throttled_responses",
            "Responses a client quota throttled, by quota key",
            None,
        ),
        rows.iter().map(|(key, (n, _))| ([("quota", *key)], *n)),
    )?;
    counters(
        encoder,
        (
            "quota_throttle_time",
            "Throttle time the client quotas asked of clients, by quota key (Kafka: Produce, Fetch, Request and ControllerMutation throttle-time)",
            Some(Unit::Seconds),
        ),
        rows.iter()
            .map(|(key, (_, ms))| ([("quota", *key)], *ms as f64 / 1000.0)),
    )
}

/// The groups and transactions this broker coordinates. A group's lag is its committed offsets'
/// distance to their partitions' high watermarks: of the replicas hosted here, or as their
/// leaders answered before this scrape (`remote_ends`).
fn coordinator_series(
    encoder: &mut DescriptorEncoder,
    broker: &Broker,
    config: &BrokerConfig,
    remote_ends: &RemoteEnds,
) -> fmt::Result {
    let groups = broker.group_runtime().summaries();
    let mut by_state: std::collections::BTreeMap<(&str, &str), i64> = Default::default();
    for group in &groups {
        *by_state.entry((group.protocol, group.state)).or_default() += 1;
    }
    gauges(
        encoder,
        (
            "groups",
            "Groups this broker coordinates, by protocol and state (Kafka: NumGroups, NumGroupsStable, …, consumer-group-count)",
            None,
        ),
        by_state.iter().map(|((protocol, state), n)| ([("protocol", *protocol), ("state", *state)], *n)),
    )?;
    gauges(
        encoder,
        (
            "group_members",
            "Members of each group this broker coordinates",
            None,
        ),
        groups.iter().map(|g| {
            (
                [
                    ("group", g.group_id.clone()),
                    ("protocol", g.protocol.to_string()),
                ],
                i64::try_from(g.members).unwrap_or(i64::MAX),
            )
        }),
    )?;
    let replicas = broker.replicas();
    let mut lags = Vec::new();
    for group in &groups {
        let mut sum = None;
        for ((topic, partition), committed) in &group.offsets {
            let end = match replicas.get_hosted(topic, *partition) {
                Some(hosted) => hosted.lock().high_watermark(),
                None => match remote_ends.get(topic, *partition) {
                    Some(end) => end,
                    None => continue,
                },
            };
            let lag = (end - committed).max(0);
            *sum.get_or_insert(0) += lag;
            lags.push((group.group_id.as_str(), topic.as_str(), *partition, lag));
        }
        if let Some(sum) = sum {
            lags.push((group.group_id.as_str(), "", -1, sum));
        }
    }
    gauges(
        encoder,
        (
            "consumer_group_total_lag",
            "Each group's lag summed over its committed partitions (high watermark - committed offset)",
            None,
        ),
        lags.iter()
            .filter(|l| l.2 < 0)
            .map(|(group, _, _, lag)| ([("group", *group)], *lag)),
    )?;
    if config.metrics_per_partition() {
        gauges(
            encoder,
            (
                "consumer_group_lag",
                "Each group's lag on each committed partition: high watermark - committed offset (Kafka: kafka-consumer-groups LAG)",
                None,
            ),
            lags.iter().filter(|l| l.2 >= 0).map(|(group, topic, partition, lag)| {
                (
                    [("group", group.to_string()), ("topic", topic.to_string()), ("partition", partition.to_string())],
                    *lag,
                )
            }),
        )?;
    }
    let mut txns: std::collections::BTreeMap<&'static str, i64> = Default::default();
    for (_, shard) in broker.txn_runtime().shards.all_shards() {
        for (state, n) in fjord_common::lock(&shard).core.state_counts() {
            *txns.entry(state).or_default() += i64::try_from(n).unwrap_or(i64::MAX);
        }
    }
    gauges(
        encoder,
        (
            "transactions",
            "Transactional ids this broker coordinates, by state (Ongoing: open transactions)",
            None,
        ),
        txns.iter().map(|(state, n)| ([("state", *state)], *n)),
    )
}

/// Each log dir's space and whether it is offline.
fn log_dir_series(encoder: &mut DescriptorEncoder, broker: &Broker) -> fmt::Result {
    let logs = broker.replicas().log_manager();
    let mut dirs = Vec::new();
    for dir in logs.log_dirs() {
        let name = crate::metrics::dir_label(dir);
        let offline = logs.is_dir_offline(dir);
        let space = if offline {
            None
        } else {
            fjord_storage::file_io::volume_space(dir).ok()
        };
        dirs.push((name, offline, space));
    }
    let offline = dirs.iter().filter(|d| d.1).count();
    gauge(
        encoder,
        "offline_log_dirs",
        "Log dirs taken offline after a disk error (Kafka: OfflineLogDirectoryCount)",
        i64::try_from(offline).unwrap_or(i64::MAX),
    )?;
    let label = |name: &String| [("dir", name.clone())];
    gauges(
        encoder,
        (
            "log_dir_total",
            "Size of each online log dir's filesystem",
            Some(Unit::Bytes),
        ),
        dirs.iter()
            .filter_map(|(n, _, s)| Some((label(n), s.map(|s| s.0)?))),
    )?;
    gauges(
        encoder,
        (
            "log_dir_free",
            "Bytes still usable on each online log dir's filesystem",
            Some(Unit::Bytes),
        ),
        dirs.iter()
            .filter_map(|(n, _, s)| Some((label(n), s.map(|s| s.1)?))),
    )
}

/// The process, under the names Prometheus' client libraries give it, from `/proc/self`.
#[derive(Debug)]
struct Process(Arc<Observed>);

/// The kernel reports CPU time in USER_HZ ticks, 100 a second on every Linux ABI.
const USER_HZ: f64 = 100.0;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let e = &mut encoder;
        if let Some(ticks) = cpu_ticks() {
            let metric = e.encode_descriptor(
                "process_cpu",
                "User and system CPU time spent",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            ConstCounter::new(ticks as f64 / USER_HZ).encode(metric)?;
        }
        if let Some((rss, virt, threads)) = memory_and_threads() {
            let metric = e.encode_descriptor(
                "process_resident_memory",
                "Resident memory size",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            ConstGauge::new(rss).encode(metric)?;
            let metric = e.encode_descriptor(
                "process_virtual_memory",
                "Virtual memory size",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?;
            ConstGauge::new(virt).encode(metric)?;
            gauge(e, "process_threads", "OS threads", threads)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                e,
                "process_open_fds",
                "Open file descriptors",
                fds.count() as u64,
            )?;
        }
        if let Some(max) = max_open_files() {
            gauge(e, "process_max_fds", "Limit on open file descriptors", max)?;
        }
        let metric = e.encode_descriptor(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.0.started_at).encode(metric)
    }
}

/// utime + stime of `/proc/self/stat`, in ticks.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name in parentheses may hold spaces: fields are counted after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// VmRSS and VmSize (bytes) and Threads of `/proc/self/status`.
fn memory_and_threads() -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    Some((
        field("VmRSS:")? * 1024,
        field("VmSize:")? * 1024,
        field("Threads:")?,
    ))
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reads_itself() {
        assert!(cpu_ticks().is_some());
        let (rss, virt, threads) = memory_and_threads().unwrap();
        assert!(rss > 0 && virt >= rss && threads >= 1);
        assert!(max_open_files().unwrap() > 0);
    }
}
